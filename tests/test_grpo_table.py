"""bench/grpo_table.py: a run's training rows become one table row per step, each tier's figures in its columns,
a tier that drew no episodes shown as such, and a file without training rows refused by name."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "grpo_table.py"
spec = importlib.util.spec_from_file_location("grpo_table", BENCH)
assert spec is not None and spec.loader is not None
grpo_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grpo_table)


def _row(step: int, guided: tuple[float, float] | None, warmup: tuple[float, float]) -> dict[str, object]:
    row: dict[str, object] = {"step": step, "kind": "train", "rollout/episodes": 8.0, "rollout/reward_mean": 0.5,
                              "rollout/mixed_group_frac": 0.5, "train/clip_frac": 0.001,
                              "train/train_rollout_kl": 3e-5, "train/grad_norm": 0.25,
                              "train/entropy": 0.4567,
                              "curriculum/guided/share": 0.6 if guided else 0.0, "curriculum/warmup/share": 0.4}
    if guided:
        row |= {"tier/guided/episodes": 4.0, "tier/guided/pass_rate": guided[0],
                "tier/guided/mixed_group_frac": guided[1]}
    row |= {"tier/warmup/episodes": 4.0, "tier/warmup/pass_rate": warmup[0], "tier/warmup/mixed_group_frac": warmup[1]}
    return row


def test_each_step_is_a_row_with_every_tier_in_its_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = tmp_path / "metrics.jsonl"
    rows = [_row(0, (0.75, 0.5), (0.25, 1.0)), {"step": 0, "kind": "eval", "eval/pass@1": 0.1},
            _row(1, None, (0.5, 0.0))]
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert grpo_table.main([str(metrics), "--json", str(tmp_path / "t.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4  # header, rule, two steps: the eval row is not a step
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    first = dict(zip(head, (c.strip() for c in lines[2].strip("|").split("|")), strict=True))
    second = dict(zip(head, (c.strip() for c in lines[3].strip("|").split("|")), strict=True))
    assert (first["step"], first["guided pass"], first["guided mixed"]) == ("1", "0.75", "0.50")
    assert first["warmup pass"] == "0.25"
    assert (second["guided episodes"], second["guided pass"], second["warmup pass"]) == ("0", "-", "0.50")
    assert first["clip frac"] == "0.0010" and first["mismatch KL"] == "3.0e-05" and first["entropy"] == "0.457"
    saved = json.loads((tmp_path / "t.json").read_text())
    assert [s["step"] for s in saved["steps"]] == [1, 2]
    assert saved["steps"][1]["tiers"]["guided"]["episodes"] is None


def test_a_file_without_training_rows_is_refused_by_name(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 0, "kind": "eval"}) + "\n")
    with pytest.raises(SystemExit, match="no training steps"):
        grpo_table.main([str(metrics)])
    with pytest.raises(SystemExit, match="no such file"):
        grpo_table.main([str(tmp_path / "missing.jsonl")])
