"""Probes before the learning plan is registered: where does curriculum SFT start, and how does GRPO move it?

    .venv/bin/python bench/curriculum_probe.py --work /work/exp/learning4 [--per-tier 48] [--grpo-steps 0]
        [bench/learning.py's options]

Runs bench/learning.py's first stages in --work (tasks; the expert's demonstrations of every training tier;
SFT), each reused when present, so a plan registered afterwards in the same folder starts from the same SFT
model. Then it evaluates that model on calibration tasks: the training repositories' draws from --train-below on
(never trained on, never held out), --per-tier of each tier spread over the repositories, --calibration-n episodes
each at the rollout temperature (what GRPO's groups see) and at the evaluation temperature (--temperatures). With
--probe-steps, a short curriculum GRPO run from the SFT model follows, on the training tasks, logging each
step's per-tier shares, pass rates and mixed groups, the clip fraction and the gradient norm. No held-out
task runs. It suggests the curriculum's start shares (`suggested_start`: in proportion to each tier's chance
of a group with mixed rewards at the SFT model's pass rate). Prints one JSON object and writes it to
<work>/probe.json (or --json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning
from rich.console import Console

from codedojo.tasks.task import Task


def spread(tasks: list[Task], count: int) -> list[Task]:
    """`count` tasks taken round-robin over their repositories (in name order within each)."""
    by_repo: dict[str, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: t.name):
        by_repo.setdefault(learning.repository(task.name), []).append(task)
    out: list[Task] = []
    depth = 0
    while len(out) < count and any(depth < len(v) for v in by_repo.values()):
        out += [v[depth] for v in by_repo.values() if depth < len(v)][: count - len(out)]
        depth += 1
    return out


def mixed_probability(p: float, group_size: int) -> float:
    """The chance that a group of `group_size` episodes at pass rate `p` has mixed rewards (a GRPO signal)."""
    return 1.0 - p**group_size - (1.0 - p) ** group_size


def suggested_start(calibrated: dict[str, dict[str, object]], *, group_size: int) -> list[float] | None:
    """Initial curriculum shares in proportion to each tier's chance of a mixed group at the SFT model's pass
    rate at the rollout temperature (rounded to hundredths, summing to 1): the tiers where GRPO has a signal
    from the first step. None without a rollout-temperature calibration of every tier."""
    rates = [calibrated.get(f"{tier}/rollout", {}).get("pass@1") for tier in learning.TIERS]
    if any(not isinstance(r, float | int) for r in rates):
        return None
    weights = [mixed_probability(float(r), group_size) for r in rates]  # type: ignore[arg-type]
    if not sum(weights):
        return None
    shares = [round(w / sum(weights), 2) for w in weights]
    shares[-1] = round(1.0 - sum(shares[:-1]), 2)
    return shares


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own = argparse.ArgumentParser(add_help=False)  # the rest are bench/learning.py's options
    own.add_argument("--per-tier", type=int, default=48, help="calibration tasks per tier")
    own.add_argument("--calibration-n", type=int, default=2, help="episodes per calibration task")
    own.add_argument("--temperatures", default="rollout,eval",
                     help="which temperatures to calibrate at: rollout (GRPO's), eval (the plan's), or both")
    own.add_argument("--probe-steps", type=int, default=0, help="curriculum GRPO steps after the calibration")
    own.add_argument("--json", type=Path, default=None, help="where to write the probe's JSON")
    known, rest = own.parse_known_args(argv)
    args = learning.parse_args(rest)
    console = Console(stderr=True)
    seeds = learning.plan_seeds(args.seed)
    started = time.monotonic()
    train, _, calibration = learning.build_tasks(args, console)
    every_tier = [t for tier in learning.TIERS for t in train[tier]]
    learning.make_demos(args, every_tier, args.work / "demos_all", seed=seeds["demos"])
    demos = learning.load_trajectories([args.work / "demos_all"])
    sft = learning.make_sft(args, args.model, demos, args.work / "sft_cur", seed=seeds["sft"], console=console)
    prepared = round(time.monotonic() - started, 1)
    demo_counts = json.loads((args.work / "demos_all" / ".complete").read_text())
    turns: dict[str, list[int]] = {}
    reply_tokens: dict[str, list[int]] = {}
    context_tokens: dict[str, list[int]] = {}
    for trajectory in demos:
        tier = trajectory.episode_id.rsplit("-", 2)[-2]
        turns.setdefault(tier, []).append(len(trajectory.turns))
        reply_tokens.setdefault(tier, []).extend(turn.sampled_tokens for turn in trajectory.turns)
        context_tokens.setdefault(tier, []).append(len(trajectory.token_ids))
    result: dict[str, object] = {
        "command": "python bench/curriculum_probe.py " + " ".join(argv), "git_commit": learning.git_commit(),
        "training_tasks": {k: len(v) for k, v in train.items()}, "demonstrations": demo_counts,
        "demonstration_budget": {k: {"replies_mean": round(sum(v) / len(v), 2), "replies_max": max(v),
                                     "reply_tokens_max": max(reply_tokens[k]),
                                     "context_tokens_mean": round(sum(context_tokens[k]) / len(v)),
                                     "context_tokens_max": max(context_tokens[k]), "count": len(v)}
                                 for k, v in sorted(turns.items())},
        "prepare_seconds": prepared, "calibration": {}}
    calibrated: dict[str, dict[str, object]] = {}
    for tier in learning.TIERS:
        tasks = spread(calibration[tier], known.per_tier)
        temperatures = {"rollout": args.rollout_temperature, "eval": args.eval_temperature}
        for label in known.temperatures.split(","):
            temperature = temperatures[label]
            t0 = time.monotonic()
            report = learning.run_eval(sft, tasks, args=args, n=known.calibration_n, temperature=temperature,
                                       seed=seeds["eval"] + 1000, out=args.work / f"calibration_{tier}_{label}.json",
                                       console=console)
            calibrated[f"{tier}/{label}"] = {"temperature": temperature, **learning.figures(report),
                                             "seconds": round(time.monotonic() - t0, 1)}
    result["calibration"] = calibrated
    result["suggested_curriculum_start"] = suggested_start(calibrated, group_size=args.n_samples)
    if known.probe_steps:
        run_dir = args.work / f"probe_grpo_{known.probe_steps}"
        t0 = time.monotonic()
        probe_args = argparse.Namespace(**{**vars(args), "grpo_steps": known.probe_steps})
        learning.make_grpo(probe_args, every_tier, sft, run_dir, seed=seeds["grpo"], with_curriculum=True)
        result["grpo"] = {"steps": known.probe_steps, "seconds": round(time.monotonic() - t0, 1),
                          "curve": learning.training_curve(run_dir)}
    path = known.json or args.work / "probe.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
