"""What a paired comparison of two evaluations can resolve: the figures docs/training.md quotes for
bench/learning.py, from its per-task result files.

    .venv/bin/python bench/paired_eval.py docs/results/learning/eval_sft.json docs/results/learning/eval_grpo.json

Prints one JSON object: the paired difference (after - before) with its standard error, the tasks that went
up and down, solved episodes per repository, and the variance of the per-task differences split into
sampling noise (each task's unbiased c(n-c)/(n(n-1)) over n, both evaluations) and the spread of the true
per-task differences, with the standard error that spread and noise would give at other n.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from codedojo.rollout.evaluation import EvalReport, TaskScore, paired_difference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--project-n", type=int, nargs="*", default=[2, 4, 8])
    args = parser.parse_args()
    reports = [json.loads(path.read_text())["per_task"] for path in (args.before, args.after)]
    before_r, after_r = (EvalReport(tasks=[TaskScore(task=t["task"], samples=t["samples"], solved=t["solved"],
                                                     mean_reward=None, statuses={}) for t in per_task],
                                    n=0, statuses={}, wall_sec=0.0) for per_task in reports)
    difference = paired_difference(before_r, after_r)  # the figure bench/learning.py reports
    first, second = ({t["task"]: t for t in per_task if t["samples"]} for per_task in reports)
    names = sorted(first.keys() & second.keys())

    def p1(t: dict) -> float:
        return t["solved"] / t["samples"]

    def noise(t: dict) -> float:  # unbiased variance of the per-task mean of t["samples"] Bernoulli draws
        n, c = t["samples"], t["solved"]
        return c * (n - c) / (n * (n - 1)) / n if n > 1 else 0.0

    diffs = [p1(second[k]) - p1(first[k]) for k in names]
    var_diff = statistics.variance(diffs)
    sampling = statistics.fmean(noise(first[k]) + noise(second[k]) for k in names)
    spread = max(var_diff - sampling, 0.0)
    n_now = statistics.mode(first[k]["samples"] for k in names)
    by_repo: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for k in names:
        repo = k.split("-")[0]
        by_repo[repo][0] += first[k]["solved"]
        by_repo[repo][1] += second[k]["solved"]
        by_repo[repo][2] += first[k]["samples"]
    print(json.dumps({
        "tasks": len(names), "n": n_now,
        "difference": {"mean": difference.mean, "stderr": difference.stderr},
        "tasks_up": sum(d > 0 for d in diffs), "tasks_down": sum(d < 0 for d in diffs),
        "solved_by_repository": {r: {"before": v[0], "after": v[1], "episodes": v[2]}
                                 for r, v in sorted(by_repo.items())},
        "variance_of_differences": var_diff, "sampling_noise": sampling, "true_spread": spread,
        "projected_stderr": {str(n): math.sqrt((spread + sampling * n_now / n) / len(names)) for n in args.project_n},
    }, indent=2))


if __name__ == "__main__":
    main()
