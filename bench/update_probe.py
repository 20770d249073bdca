"""Does a larger GRPO update learn more from the same episodes? The main job's GRPO at several learning rates, each
scored on a held-out pool large enough to see the gain the learning plans found:

    .venv/bin/python bench/update_probe.py --work /work/exp/update-probe --out docs/results/update-probe

Why: in the fourth registered plan's curriculum GRPO the clip bound at most 0.09% of tokens and the
sampling-vs-training KL stayed at 2-6e-5 at lr 2e-5 (docs/training.md), and the main job (8 steps of 16
episodes, 2 groups trained a step) shows no held-out gain it can tell from noise. If one step moves the policy
too little, a larger learning rate should buy more held-out gain per episode, until it breaks the policy.

What runs, each stage cached in --work and its JSON written to --out as it finishes:
1. the main job's tasks and warm start (`codedojo.train.default`: the guided tier's training tasks, the SFT
   model on the expert's demonstrations; shared with `./dev run` through the cache);
2. a held-out pool of the main job's held-out repositories drawn at --held-per-repo (their guided tasks: 12
   each at 36, 48 in all; the main job's own evaluation takes 8);
3. the warm start evaluated on the pool (--n episodes a task at temperature 0.6);
4. per learning rate in --lrs: the main job's GRPO (8 steps of 4 tasks x 4 episodes, at most 2 mixed groups
   trained a step; every other setting the main job's) from the warm start, then its evaluation on the pool;
   the same seeds in every arm, so the arms differ only in the rate.
The plan (settings, commit, task names) is written to <work>/plan.json before anything runs, and a rerun
with other settings in the same folder is refused. <out>/update-probe.json: each arm's pass@1 with its
standard error, its paired gain over the warm start (standard error over tasks, and clustered by repository),
the same against the first rate's arm, and each arm's training curve (reward, mixed groups, clip fraction,
KL, entropy per step); the CPU and the training precision beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from codedojo.agent.budget import recipe_budget
from codedojo.agent.engines import open_engine, profile_for
from codedojo.agent.loop import AgentConfig
from codedojo.config import AgentTaskDataset, SmolLM2_Recipe, TrainConfig
from codedojo.inference.protocol import SamplingParams
from codedojo.inference.specs import HFFolder
from codedojo.precision import capability, compute_dtype
from codedojo.rollout.episodes import RolloutConfig
from codedojo.rollout.evaluation import EvalReport, evaluate, paired_difference
from codedojo.tasks.task import Task, discover_tasks
from codedojo.train.default import (
    DEFAULT_MODEL,
    HELD_OUT_REPOSITORIES,
    SFT_BATCH,
    SFT_EPOCHS,
    SFT_LR,
    builtin_suite,
    default_tasks,
    split_by_repository,
    warm_start,
    write_dataset,
)
from codedojo.train.sft import SFTConfig

TIER = "guided"
EVAL_TEMPERATURE = 0.6


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("runs/update-probe"), help="stages and the plan")
    parser.add_argument("--out", type=Path, default=Path("docs/results/update-probe"))
    parser.add_argument("--lrs", default="2e-5,6e-5,2e-4", help="comma-separated GRPO learning rates")
    parser.add_argument("--steps", type=int, default=8, help="GRPO steps per arm (the main job's 8)")
    parser.add_argument("--held-per-repo", type=int, default=36,
                        help="factory draws per held-out repository (a third are the guided tier's bugs)")
    parser.add_argument("--n", type=int, default=2, help="evaluation episodes per held-out task")
    parser.add_argument("--concurrency", type=int, default=32, help="evaluation episodes at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    main_job = SmolLM2_Recipe()
    parser.add_argument("--max-new-tokens", type=int, default=main_job.rollout_max_response_len,
                        help="tokens per reply (the main job's by default)")
    parser.add_argument("--max-context", type=int, default=main_job.rollout_max_context_len,
                        help="tokens per episode (the main job's by default)")
    parser.add_argument("--tasks", type=Path, default=None,
                        help="task folders instead of the bundled suite (tests): the held-out repositories' tasks "
                             "(by metadata) are the pool, the rest train")
    return parser.parse_args(argv)


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
    return out.stdout.strip() or "unknown"


def register(plan: dict[str, Any], work: Path) -> None:
    """Write the plan, or refuse when the folder holds another one (its stages would not be this plan's)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "plan.json"
    if path.is_file():
        old = json.loads(path.read_text())
        keep = ("settings", "training_tasks", "held_out_tasks")
        if {k: old.get(k) for k in keep} != {k: plan[k] for k in keep}:
            raise SystemExit(f"{path} holds another plan (settings or tasks differ); use another --work folder")
        return
    path.write_text(json.dumps(plan, indent=2) + "\n")


def recipe_for(lr: float, args: argparse.Namespace) -> SmolLM2_Recipe:
    """The main job's GRPO (`codedojo.train.default.run_default`, its seed included) at learning rate `lr`; a cut
    run resumes from its last step."""
    return SmolLM2_Recipe(num_rollout=args.steps, rollout_batch_size=2, over_sampling_batch_size=4,
                          n_samples_per_prompt=4, lr=lr, save="checkpoints", save_interval=args.steps,
                          rollout_max_response_len=args.max_new_tokens, rollout_max_context_len=args.max_context)


def evaluate_on(model: Path, tasks: list[Task], *, args: argparse.Namespace, budget_recipe: SmolLM2_Recipe,
                out: Path, console: Console) -> dict[str, Any]:
    """The model's evaluation on `tasks` (cached as `out`; its trajectories beside it, resumable)."""
    if out.is_file():
        return dict(json.loads(out.read_text()))
    config = AgentConfig(**recipe_budget(budget_recipe, profile=profile_for(args.model)).agent_fields(),
                         prompt_profile=profile_for(args.model),
                         sampling=SamplingParams(temperature=EVAL_TEMPERATURE))

    async def go() -> EvalReport:
        engine = await open_engine(HFFolder(path=str(model)), device=args.device)
        try:
            return await evaluate(tasks, engine=engine, n=args.n, agent_config=config,
                                  rollout=RolloutConfig(max_open_sandboxes=args.concurrency), seed=args.seed + 7,
                                  trajectory_dir=out.with_suffix(""), model=str(model), console=console)
        finally:
            await engine.close()

    data = asyncio.run(go()).to_dict()
    out.write_text(json.dumps(data, indent=2) + "\n")
    return data


def curve(run_dir: Path) -> list[dict[str, float]]:
    keys = ("rollout/reward_mean", "rollout/mixed_group_frac", "train/clip_frac", "train/train_rollout_kl",
            "train/entropy", "train/grad_norm", "train/optimizer_steps", "perf/rollout_seconds", "perf/train_seconds")
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    return [{"step": r["step"] + 1, **{k: r[k] for k in keys if k in r}} for r in rows if r.get("kind") == "train"]


def gain(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    d = paired_difference(EvalReport.from_dict(before), EvalReport.from_dict(after),
                          cluster_of=lambda name: name.split("-")[0])
    return {**d.to_dict(), "beyond_2_stderr": d.stderr is not None and abs(d.mean) > 2 * d.stderr}


def figures(data: dict[str, Any]) -> dict[str, Any]:
    return {"pass@1": data["pass@1"], "stderr": data["pass@1_stderr"], "tasks": data["tasks"],
            "statuses": data["statuses"], "wall_sec": data["wall_sec"]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    lrs = [float(x) for x in args.lrs.split(",") if x.strip()]
    if not lrs or any(lr <= 0 for lr in lrs):
        raise SystemExit(f"--lrs {args.lrs!r}: give positive learning rates, comma-separated (e.g. 2e-5,6e-5)")
    if args.tasks is not None:
        train, held = split_by_repository(discover_tasks([args.tasks]), held_out=HELD_OUT_REPOSITORIES)
    else:
        train = default_tasks(TIER, console=console, quick=False)[0]
        suite = builtin_suite(console=console, tier=TIER, per_repo=args.held_per_repo, repos=HELD_OUT_REPOSITORIES)
        held = split_by_repository(discover_tasks([suite]), held_out=HELD_OUT_REPOSITORIES)[1]
    if not train or not held:
        raise SystemExit(f"{len(train)} training and {len(held)} held-out tasks: both are needed (held-out "
                         f"repositories: {', '.join(HELD_OUT_REPOSITORIES)})")
    settings = {"lrs": lrs, "steps": args.steps, "held_per_repo": args.held_per_repo, "n": args.n, "seed": args.seed,
                "eval_temperature": EVAL_TEMPERATURE, "model": args.model,
                "recipe": {k: v for k, v in asdict(recipe_for(lrs[0], args)).items()
                           if isinstance(v, int | float | str | bool) and k != "lr"}}
    register({"question": "held-out gain over the warm start per learning rate, at the main job's GRPO",
              "git_commit": git_commit(), "command": " ".join(["python", "bench/update_probe.py", *(argv or
                                                                                                   sys.argv[1:])]),
              "settings": settings, "training_tasks": [t.name for t in train],
              "held_out_tasks": [t.name for t in held]}, args.work)
    args.out.mkdir(parents=True, exist_ok=True)
    device = args.device or "cpu"
    result: dict[str, Any] = {"settings": settings, "capability": capability(device),
                              "training_precision": str(compute_dtype(None, device)).removeprefix("torch."),
                              "torch_threads": torch.get_num_threads(), "held_out_tasks": len(held),
                              "training_tasks": len(train), "arms": {}}

    def save() -> None:
        (args.out / "update-probe.json").write_text(json.dumps(result, indent=2) + "\n")

    started = time.monotonic()
    warm = warm_start(model=args.model, tasks=train,
                      sft_config=SFTConfig(epochs=SFT_EPOCHS, lr=SFT_LR, batch_sequences=SFT_BATCH),
                      budget=recipe_budget(recipe_for(lrs[0], args), profile=profile_for(args.model)),
                      device=device, console=console)
    before = evaluate_on(warm, held, args=args, budget_recipe=recipe_for(lrs[0], args),
                         out=args.work / "eval_start.json", console=console)
    result["start"] = figures(before)
    save()
    dataset = AgentTaskDataset(write_dataset(train, args.work / "train.jsonl"))
    first: dict[str, Any] | None = None
    for lr in lrs:
        name = f"lr{lr:g}"
        run_dir = args.work / name
        recipe = recipe_for(lr, args)
        if not (run_dir / "final" / "config.json").is_file():
            TrainConfig(model=HFFolder(path=str(warm)), dataset=dataset, recipe=recipe, run_dir=run_dir,
                        device=device).launch()
        after = evaluate_on(run_dir / "final", held, args=args, budget_recipe=recipe,
                            out=args.work / f"eval_{name}.json", console=console)
        arm = {"lr": lr, **figures(after), "gain_over_start": gain(before, after), "training": curve(run_dir)}
        if first is None:
            first = after
        else:
            arm[f"minus_lr{lrs[0]:g}"] = gain(first, after)
        result["arms"][name] = arm
        result["wall_sec_so_far"] = round(time.monotonic() - started, 1)
        save()
        g = arm["gain_over_start"]
        console.print(f"{name}: held-out pass@1 {after['pass@1']:.3f} (start {before['pass@1']:.3f}), gain "
                      f"{g['mean']:+.3f} +- {g['stderr'] or 0:.3f}")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
