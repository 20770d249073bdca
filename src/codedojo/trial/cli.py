"""`codedojo trial TASK_DIR --agent oracle|nop [--json]`: run one episode and report it."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from codedojo.tasks.cli import add_network_flags


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("trial", help="run one episode of a task with a built-in agent",
                       description="Run one episode: start the sandbox, run the agent, verify, report. Exits 0 "
                       "when a valid reward came back (whatever its value), 1 on an infrastructure failure.")
    p.add_argument("task", type=Path, help="task directory")
    p.add_argument("--agent", choices=("oracle", "nop"), default="oracle", help="agent to run (default: oracle)")
    p.add_argument("--backend", default="local", help="sandbox backend (default: local)")
    p.add_argument("--trials-dir", type=Path, default=Path("trials"),
                   help="where the trial's logs and result.json go (default: ./trials)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_network_flags(p)
    p.set_defaults(func=_trial)


def _trial(args: argparse.Namespace) -> int:
    from codedojo.sandbox.base import SandboxLimits
    from codedojo.tasks.task import Task, TaskError
    from codedojo.trial import BUILTIN_AGENTS, TrialOptions, run_trial

    try:
        task = Task.load(args.task)
    except TaskError as e:
        print(e, file=sys.stderr)
        return 2
    for warning in task.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    options = TrialOptions(backend=args.backend, trials_dir=args.trials_dir,
                           limits=SandboxLimits(network=args.network))
    result = asyncio.run(run_trial(task, BUILTIN_AGENTS[args.agent](), options=options))
    if args.json:
        print(result.to_json())
    else:
        reward = "none" if result.reward is None else f"{result.reward:g}"
        print(f"{task.name}: agent={result.agent} status={result.status} reward={reward} "
              f"failure={result.failure_kind or '-'}")
        if result.error:
            print(f"  {result.error.strip()}")
        if result.trial_dir:
            print(f"  logs: {result.trial_dir}")
    return 1 if result.status.is_infrastructure else 0
