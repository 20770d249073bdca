"""bench/plan_verdicts.py: the plan's hypotheses from the evaluations that have landed, with the plan's own
functions; one whose figures are missing is pending, and a folder without any is refused."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "plan_verdicts.py"
spec = importlib.util.spec_from_file_location("plan_verdicts", BENCH)
assert spec is not None and spec.loader is not None
plan_verdicts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plan_verdicts)


def _evaluation(solved: list[int]) -> dict[str, object]:
    tasks = [{"task": f"repo{i % 3}-{i:03d}-warmup", "samples": 2, "solved": s, "mean_reward": s / 2,
              "statuses": {"submitted": 2}} for i, s in enumerate(solved)]
    rate = sum(solved) / (2 * len(solved))
    return {"per_task": tasks, "n": 2, "statuses": {"submitted": 2 * len(solved)}, "wall_sec": 1.0,
            "pass@1": rate, "pass@1_stderr": 0.05, "pass@2": rate, "tasks": len(solved)}


def test_h1_is_judged_from_the_two_warm_up_evaluations_and_the_rest_is_pending(tmp_path: Path) -> None:
    (tmp_path / "eval_cur_grpo_warmup.json").write_text(json.dumps(_evaluation([1, 0, 2, 1, 0, 1] * 4)))
    (tmp_path / "eval_guided_grpo_warmup.json").write_text(json.dumps(_evaluation([0] * 24)))
    out = plan_verdicts.verdicts_of(tmp_path)
    h1 = out["hypotheses"]["H1"]
    assert h1["cur_grpo_minus_guided_grpo"]["mean"] == pytest.approx(5 / 12)
    assert h1["holds"] is True  # 0.417 >= 0.20 and far beyond 2 paired standard errors
    assert out["pending"] == ["H2", "H3"]
    assert list(out["differences"]) == ["cur_grpo/warmup-vs-guided_grpo/warmup"]


def test_a_folder_without_any_evaluation_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no evaluation of the plan"):
        plan_verdicts.verdicts_of(tmp_path)
