"""bench/eval_power.py: the variance split of a paired before/after recovers known components, and the choice of
tasks x samples meets the standard error it was asked for."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1] / "bench" / "eval_power.py"
spec = importlib.util.spec_from_file_location("eval_power", BENCH)
assert spec is not None and spec.loader is not None
eval_power = importlib.util.module_from_spec(spec)
spec.loader.exec_module(eval_power)


def _evaluation(rates: list[float], n: int, rng: random.Random) -> dict[str, Any]:
    rows = []
    for i, p in enumerate(rates):
        solved = sum(rng.random() < p for _ in range(n))
        rows.append({"task": f"t{i}", "samples": n, "solved": solved, "pass@1": solved / n})
    return {"per_task": rows}


def test_the_split_recovers_the_between_and_within_variance_of_a_simulated_pair() -> None:
    rng = random.Random(3)
    tasks, n = 4000, 4
    before = [rng.uniform(0.2, 0.8) for _ in range(tasks)]
    after = [min(max(p + rng.choice((-0.2, 0.2)) + 0.1, 0.0), 1.0) for p in before]  # gains 0.3 or -0.1
    truth_between = 0.04  # variance of a gain that is -0.1 or +0.3 with equal odds (clipping aside)
    truth_within = sum(a * (1 - a) + b * (1 - b) for a, b in zip(before, after, strict=True)) / tasks
    got = eval_power.components(_evaluation(before, n, rng), _evaluation(after, n, rng))
    assert math.isclose(got["within"], truth_within, abs_tol=0.01)
    assert math.isclose(got["between"], truth_between, abs_tol=0.01)
    assert math.isclose(got["mean_gain"], 0.1, abs_tol=0.02)


def test_the_choice_meets_its_limit_and_respects_the_pool() -> None:
    for pool in (None, 16, 48):
        choice = eval_power.cheapest(0.03, 0.2, 0.06, pool)
        assert choice["stderr"] <= 0.06
        assert pool is None or choice["tasks"] <= pool
        assert choice["episodes"] == choice["tasks"] * choice["n"]
    assert eval_power.cheapest(0.03, 0.2, 0.01, 16)["reachable"] is False  # between-task variance alone is 0.043


def test_the_script_reads_the_committed_evaluations() -> None:
    out = json.loads(subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, check=True,
                                    timeout=120).stdout)
    assert len(out["pairs"]) == 2 and all(p["tasks"] == 102 for p in out["pairs"].values())
    assert out["for_power_0.8"]["stderr"] <= out["for_power_0.8"]["stderr_limit"]
