"""`codedojo eval --model M --tasks DIR [--n K] [--json]`: pass@k of a model on a set of tasks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from codedojo.cli import positive_int

BUDGET_DEFAULTS = " (default: the small recipe's with the small profile, else mini-swe-agent's)"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "eval", help="evaluate a model on tasks: pass@1 and pass@k over n episodes per task",
        description="Runs n episodes of the agent loop per task with a local model and reports pass@1, pass@n "
        "(unbiased estimator), a per-task table and status counts. "
        "Episodes that end in an infrastructure failure are retried, then left out of the scores.")
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="model name (smollm2-135m-instruct, tiny-llama, tiny-qwen3) or a Hugging Face folder")
    p.add_argument("--tasks", type=Path, nargs="+", required=True, help="task directories or folders of tasks")
    p.add_argument("--limit", type=positive_int, default=None, help="evaluate only the first N tasks (sorted by path)")
    p.add_argument("--n", type=positive_int, default=1, help="episodes per task (default: 1)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (default: 0.6)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default: 1.0)")
    p.add_argument("--max-steps", type=positive_int, default=None,
                   help="model replies per episode" + BUDGET_DEFAULTS)
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help="tokens per reply" + BUDGET_DEFAULTS)
    p.add_argument("--max-context", type=positive_int, default=None,
                   help="tokens per episode" + BUDGET_DEFAULTS)
    p.add_argument("--profile", choices=("standard", "small"), default=None,
                   help="prompt profile (default: the model's)")
    p.add_argument("--max-sandboxes", type=positive_int, default=8,
                   help="episodes holding a sandbox at once (default: 8)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--trajectories", type=Path, default=None,
                   help="write each episode's trajectory here; the same evaluation rerun with the same folder "
                        "resumes (finished episodes are read back, not run again)")
    p.add_argument("--device", default=None, help="torch device for a local model (default: cuda if available)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_eval)


def _eval(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from rich.console import Console
    from rich.table import Table

    from codedojo.agent.engines import open_engine, profile_for
    from codedojo.agent.loop import AgentConfig
    from codedojo.inference.protocol import SamplingParams
    from codedojo.inference.specs import resolve_model
    from codedojo.precision import check_device
    from codedojo.rollout.episodes import RolloutConfig
    from codedojo.rollout.evaluation import evaluate
    from codedojo.tasks.task import Task, TaskError, discover_tasks

    try:
        tasks = [Task.load(p) for p in discover_tasks(args.tasks)][: args.limit]
    except TaskError as e:
        print(e, file=sys.stderr)
        return 2
    if not tasks:
        print("no tasks found", file=sys.stderr)
        return 2
    try:  # the model's name and the settings are checked before the model loads
        spec = resolve_model(args.model)
        profile_name = args.profile or profile_for(spec)
        device = check_device(args.device)
        sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    except ValueError as e:
        print(f"codedojo eval: {e}", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    budgets = episode_budgets(profile_name, max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                              max_context_tokens=args.max_context)
    config = AgentConfig(prompt_profile=profile_name, **budgets, sampling=sampling)
    rollout = RolloutConfig(max_open_sandboxes=args.max_sandboxes)

    async def go():  # type: ignore[no-untyped-def]
        with console.status(f"loading {args.model}"):
            engine = await open_engine(args.model, device=device)
        try:
            return await evaluate(tasks, engine=engine, n=args.n, agent_config=config, rollout=rollout,
                                  seed=args.seed, trajectory_dir=args.trajectories, model=args.model,
                                  console=console)
        finally:
            await engine.close()

    report = asyncio.run(go())
    data = report.to_dict() | {"model": args.model, "profile": profile_name, "temperature": args.temperature,
                               "budgets": budgets}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    table = Table(title=f"{args.model} on {len(tasks)} task(s), n={args.n}")
    for col in ("task", "valid", "solved", "pass@1", "statuses"):
        table.add_column(col)
    for t in report.tasks:
        p1 = t.pass_at(1)
        table.add_row(t.task, str(t.samples), str(t.solved), "-" if p1 is None else f"{p1:.2f}",
                      ", ".join(f"{k} {v}" for k, v in sorted(t.statuses.items())))
    Console().print(table)
    for key in [k for k in data if k.startswith("pass@")]:
        value = data[key]
        print(f"{key}: {'-' if value is None else f'{value:.4f}'}")
    print("statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(report.statuses.items())))
    print(f"wall time: {report.wall_sec:.1f}s")
    return 0


def episode_budgets(profile: str, **given: int | None) -> dict[str, Any]:
    """max_steps, max_new_tokens and max_context_tokens for an eval: what was given, else the profile's
    budget (codedojo.agent.budget: an eval measures what training runs)."""
    from codedojo.agent.budget import profile_budget

    defaults = profile_budget(profile).agent_fields()
    return {name: value if (chosen := given.get(name)) is None else int(chosen) for name, value in defaults.items()}
