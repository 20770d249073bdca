"""A short GRPO probe before a learning plan is registered: how far does each learning rate move the policy?

    .venv/bin/python bench/grpo_probe.py --work runs/learning2 --lrs 1e-5,3e-5,1e-4 [--steps 4] [learning.py's options]

Runs bench/learning.py's first stages in --work (tasks, demonstrations, SFT; each reused when present, so a
plan registered afterwards in the same folder starts from the same SFT model), then, for each learning rate,
GRPO from the SFT model for --steps steps on the training tasks with the learning bench's recipe settings
(`--global-batch-size` sets the optimizer steps per rollout). It never runs a held-out task: what it reads
is the training reward, the share of groups with mixed rewards, the PPO clip fraction (how often the
trust region bounds the step) and the gradient norm, per step. Prints one JSON object and writes it to
<work>/grpo_probe.json.
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

from codedojo.inference.specs import HFFolder

KEYS = ("rollout/reward_mean", "rollout/mixed_group_frac", "rollout/groups_trained", "rollout/reward_trained_mean",
        "train/clip_frac", "train/grad_norm", "train/optimizer_steps", "train/lr",
        "train/train_rollout_logprob_abs_diff")


def run_name(args: argparse.Namespace, lr: float) -> str:
    """The run's folder: one per learning rate and sampling/optimizer setting (the defaults keep the old names)."""
    name = f"probe_lr{lr:g}_gbs{args.global_batch_size}"
    if args.over_sampling:
        name += f"_os{args.over_sampling}of{args.rollout_batch_size}"
    if args.dynamic_sampling:
        name += "_ds"
    if args.lr_warmup:
        name += f"_wu{args.lr_warmup}"
    return name


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own = argparse.ArgumentParser(add_help=False)  # the rest are bench/learning.py's options
    own.add_argument("--lrs", default="1e-5,3e-5,1e-4", help="comma-separated learning rates")
    own.add_argument("--steps", type=int, default=4, help="GRPO steps per learning rate")
    known, rest = own.parse_known_args(argv)
    lrs, steps = [float(x) for x in known.lrs.split(",") if x], known.steps
    args = learning.parse_args(rest)
    console = Console(stderr=True)
    seeds = learning.plan_seeds(args.seed)
    started = time.monotonic()
    train, _, _ = learning.build_tasks(args, console, with_transfer=False)
    learning.make_demos(args, train, seed=seeds["demos"], console=console)
    learning.make_sft(args, seed=seeds["sft"], console=console)
    prepared = round(time.monotonic() - started, 1)
    sft_model = HFFolder(path=str(args.work / "sft" / "final"))
    runs: dict[str, list[dict[str, float]]] = {}
    seconds: dict[str, float] = {}
    for lr in lrs:
        run_dir = args.work / run_name(args, lr)
        t0 = time.monotonic()
        if not (run_dir / "final" / "config.json").is_file():
            learning.run_grpo(args, train, sft_model, steps=steps, lr=lr, seed=seeds["grpo"], run_dir=run_dir)
        seconds[f"{lr:g}"] = round(time.monotonic() - t0, 1)
        rows = [r for r in map(json.loads, (run_dir / "metrics.jsonl").open()) if r.get("kind") == "train"]
        runs[f"{lr:g}"] = [{"step": r["step"], **{k: round(float(r[k]), 4) for k in KEYS if k in r}} for r in rows]
    out = {"command": "python bench/grpo_probe.py " + " ".join(argv), "git_commit": learning.git_commit(),
           "steps": steps, "global_batch_size": args.global_batch_size,
           "episodes_per_step": (args.over_sampling or args.rollout_batch_size) * args.n_samples,
           "over_sampling": args.over_sampling, "dynamic_sampling": args.dynamic_sampling,
           "lr_warmup": args.lr_warmup, "training_tasks": len(train),
           "prepare_seconds": prepared, "run_seconds": seconds, "runs": runs}
    (args.work / "grpo_probe.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
