"""`codedojo demos` (expert demonstrations) and `codedojo sft` (supervised fine-tuning on trajectories)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codedojo.cli import positive_int


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "demos", help="record expert demonstrations on tasks (solved episodes as trajectory files)",
        description="A scripted expert that knows each task's reference fix works through the ordinary agent "
        "loop and sandbox (inspect, maybe reproduce, edit, rerun the tests, submit), in the tokens of MODEL's "
        "tokenizer. Only verified, solved episodes are written.")
    p.add_argument("--tasks", type=Path, nargs="+", required=True, help="task directories or folders of tasks")
    p.add_argument("--out", type=Path, required=True, help="directory for the trajectory files")
    p.add_argument("--model", default="smollm2-135m-instruct", help="whose tokenizer and prompt profile to use")
    p.add_argument("--per-task", type=positive_int, default=1, help="episodes per task (default: 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the expert's choices (default: 0)")
    p.add_argument("--max-steps", type=positive_int, default=None,
                   help="agent steps per episode (default: the model profile's budget, codedojo.agent.budget)")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help="tokens per reply (default: the profile's; a longer expert reply is an error)")
    p.add_argument("--max-context", type=positive_int, default=None, help="tokens per episode (default: the profile's)")
    p.set_defaults(func=_demos)

    p = sub.add_parser(
        "sft", help="supervised fine-tuning on trajectories (only the agent's tokens are learned)",
        description="Fine-tunes MODEL on trajectory files (from `codedojo demos`, or the model's own solved "
        "episodes from `codedojo eval --trajectories` with --min-reward 1) and writes OUT/final, a Hugging Face "
        "folder that `codedojo train`, `codedojo eval` and `codedojo serve` load.")
    p.add_argument("--model", default="smollm2-135m-instruct", help="model name or Hugging Face folder")
    p.add_argument("--trajectories", type=Path, nargs="+", required=True, help="trajectory files or folders")
    p.add_argument("--min-reward", type=float, default=None,
                   help="keep only episodes whose reward reached this (rejection sampling)")
    p.add_argument("--out", type=Path, required=True, help="output directory (metrics, report, final/)")
    p.add_argument("--epochs", type=positive_int, default=1)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch", type=positive_int, default=8, help="trajectories per optimizer step (default: 8)")
    p.add_argument("--lora-rank", type=int, default=0, help="LoRA rank (default: 0, full fine-tuning)")
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                   help="training matmuls (default: auto, bf16 where the device computes it natively)")
    p.add_argument("--device", default=None)
    p.set_defaults(func=_sft)


def _demos(args: argparse.Namespace) -> int:
    import asyncio

    from codedojo.agent.budget import profile_budget
    from codedojo.agent.engines import profile_for
    from codedojo.agent.expert import DemonstrationOverBudget, demonstrations
    from codedojo.agent.loop import AgentConfig
    from codedojo.inference.specs import resolve_model
    from codedojo.tasks.task import Task, TaskError, discover_tasks

    try:
        tasks = [Task.load(p) for p in discover_tasks(args.tasks)]
    except TaskError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        tokenizer = resolve_model(args.model).load_tokenizer()
    except ValueError as e:  # an unknown model, or a folder without a usable tokenizer
        print(f"codedojo demos: {e}", file=sys.stderr)
        return 2
    profile = profile_for(args.model)
    budget = profile_budget(profile).agent_fields()
    for field, value in (("max_steps", args.max_steps), ("max_new_tokens", args.max_new_tokens),
                         ("max_context_tokens", args.max_context)):
        if value is not None:
            budget[field] = value
    config = AgentConfig(**budget, prompt_profile=profile)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        kept, counts = asyncio.run(demonstrations(tasks, tokenizer=tokenizer, per_task=args.per_task,
                                                  seed=args.seed, agent_config=config, out_dir=args.out))
    except DemonstrationOverBudget as e:
        print(e, file=sys.stderr)
        return 2
    print(f"{counts['solved']} solved demonstrations of {counts['episodes']} episodes on {counts['tasks']} tasks "
          f"({counts['no_reference_fix']} without a usable reference fix) in {args.out}")
    return 0 if kept else 1


def _sft(args: argparse.Namespace) -> int:
    from codedojo.inference.specs import resolve_model
    from codedojo.precision import check_device
    from codedojo.train.report import write_report
    from codedojo.train.sft import SFTConfig, load_trajectories, run_sft

    try:  # checked before anything loads or is written
        resolve_model(args.model)
        device = check_device(args.device)
    except ValueError as e:
        print(f"codedojo sft: {e}", file=sys.stderr)
        return 2
    trajectories = load_trajectories(args.trajectories, min_reward=args.min_reward)
    if not trajectories:
        print("no usable trajectories found", file=sys.stderr)
        return 2
    config = SFTConfig(epochs=args.epochs, lr=args.lr, batch_sequences=args.batch, lora_rank=args.lora_rank,
                       bf16={"auto": None, "bf16": True, "fp32": False}[args.precision])
    summary = run_sft(model=args.model, trajectories=trajectories, config=config, out_dir=args.out,
                      device=device)
    write_report(args.out)
    print(f"fine-tuned on {summary['trajectories']} trajectories ({summary['tokens']} tokens, {summary['steps']} "
          f"steps, {summary['seconds']} s); model: {summary['final_model']}")
    return 0
