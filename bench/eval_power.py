"""How many held-out tasks x samples the main job's evaluation needs to tell a real GRPO gain from noise.

    .venv/bin/python bench/eval_power.py [--pair A.json B.json ...] [--gain 0.15] [--power 0.8]

Reads pairs of committed per-task evaluations (the `per_task` rows that `codedojo eval` and bench/learning.py
write: pass@1 over n samples of each task, for two models on the same tasks) and splits the variance of the
paired difference into its two parts:

    var(d_t) = between + within / n

`between` is how much the true per-task gain differs from task to task; `within` is the sampling variance
of one episode pair, estimated without bias from each task's n samples (p(1-p) * n / (n-1) per model). The
paired standard error over T tasks x n samples is then sqrt((between + within / n) / T). Prints one JSON object:
the components per pair, their pooled value (the larger of each, to be safe), the standard error over a grid of
T x n, and the cheapest T x n (fewest episodes, overall and within each held-out pool size) whose standard
error lets a true gain of `--gain` land beyond 2 standard errors with probability `--power` (one-sided normal
approximation: gain >= (2 + z_power) * SE), and with probability one half (gain >= 2 SE). No machine time: it
only reads JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from statistics import NormalDist
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAIRS = (
    # SFT -> GRPO on the guided tier, plan 1 (a small gain: the components of a real before/after)
    ("docs/results/learning/eval_sft.json", "docs/results/learning/eval_grpo.json"),
    # RS -> GRPO on the guided tier, plan 3 (two trained models near 0.75)
    ("docs/results/learning3/eval_rs.json", "docs/results/learning3/eval_grpo.json"),
)
TASKS = (8, 16, 24, 32, 40, 48, 64, 80, 96)
SAMPLES = (1, 2, 4, 8)


def components(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The between-task and within-task variance of the paired difference of two evaluations' per-task pass@1."""
    a = {row["task"]: row for row in before["per_task"]}
    b = {row["task"]: row for row in after["per_task"]}
    tasks = sorted(set(a) & set(b))
    if len(tasks) < 2:
        raise SystemExit(f"the two evaluations share {len(tasks)} task(s); a pair needs the same tasks")
    n = min(min(a[t]["samples"], b[t]["samples"]) for t in tasks)
    if n < 2:
        raise SystemExit("each task needs at least 2 samples to estimate the within-task variance")
    diffs = [b[t]["pass@1"] - a[t]["pass@1"] for t in tasks]
    within = statistics.fmean((a[t]["pass@1"] * (1 - a[t]["pass@1"]) + b[t]["pass@1"] * (1 - b[t]["pass@1"]))
                              * n / (n - 1) for t in tasks)
    total = statistics.variance(diffs)
    return {"tasks": len(tasks), "n": n, "mean_gain": statistics.fmean(diffs), "var_paired": total,
            "within": within, "between": max(total - within / n, 0.0),
            "paired_stderr": math.sqrt(total / len(tasks))}


def stderr(between: float, within: float, tasks: int, n: int) -> float:
    return math.sqrt((between + within / n) / tasks)


def cheapest(between: float, within: float, limit: float, max_tasks: int | None = None) -> dict[str, Any]:
    """The T x n with the fewest episodes (ties: fewer samples) whose standard error is at most `limit`, with
    at most `max_tasks` tasks (a held-out pool is finite: past it, only more samples per task help)."""
    best: tuple[int, int, int] | None = None
    for n in range(1, 65):
        tasks = math.ceil((between + within / n) / limit**2)
        if max_tasks is not None and tasks > max_tasks:
            continue
        if best is None or (tasks * n, n) < (best[0], best[2]):
            best = (tasks * n, tasks, n)
    if best is None:
        return {"reachable": False, "max_tasks": max_tasks, "stderr_limit": limit,
                "stderr_at_64_samples": stderr(between, within, max_tasks or 1, 64)}
    return {"episodes": best[0], "tasks": best[1], "n": best[2], "stderr_limit": limit,
            "stderr": stderr(between, within, best[1], best[2])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", nargs=2, action="append", metavar=("BEFORE", "AFTER"),
                        help="two per-task evaluation JSONs on the same tasks (repeatable; default: the committed "
                             "plan-1 and plan-3 guided-tier evaluations)")
    parser.add_argument("--gain", type=float, default=0.15, help="the true gain to detect (default: 0.15)")
    parser.add_argument("--power", type=float, default=0.8, help="chance it lands beyond 2 SE (default: 0.8)")
    parser.add_argument("--pools", default="16,32,48,80",
                        help="held-out pool sizes to choose n for (default: 16,32,48,80)")
    args = parser.parse_args()
    pairs = [tuple(p) for p in args.pair] if args.pair else [(str(ROOT / a), str(ROOT / b)) for a, b in PAIRS]
    measured = {f"{Path(a).parent.name}/{Path(a).stem} -> {Path(b).stem}":
                components(json.loads(Path(a).read_text()), json.loads(Path(b).read_text())) for a, b in pairs}
    between = max(c["between"] for c in measured.values())
    within = max(c["within"] for c in measured.values())
    z = NormalDist().inv_cdf(args.power)
    print(json.dumps({
        "what": "paired standard error of a held-out before/after over T tasks x n samples, from committed "
                "per-task evaluations",
        "pairs": measured,
        "pooled": {"between": between, "within": within, "rule": "the larger of each pair's estimate"},
        "stderr_grid": {f"{t}x{n}": round(stderr(between, within, t, n), 4) for t in TASKS for n in SAMPLES},
        "gain": args.gain,
        f"for_power_{args.power}": cheapest(between, within, args.gain / (2 + z)),
        "for_power_0.5": cheapest(between, within, args.gain / 2),
        "by_pool": {pool: {f"power_{args.power}": cheapest(between, within, args.gain / (2 + z), pool),
                           "power_0.5": cheapest(between, within, args.gain / 2, pool)}
                    for pool in (int(x) for x in args.pools.split(","))},
    }, indent=1))


if __name__ == "__main__":
    main()
