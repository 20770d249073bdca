"""`codedojo tasks ...`: validate task directories and check that oracle and nop behave on them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codedojo.cli import positive_int


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tasks = sub.add_parser("tasks", help="work with Harbor task directories")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND", required=True)

    p = tasks_sub.add_parser("validate", help="check task directories and name every problem",
                             description="Exit status 1 if any task has a problem; every problem is printed.")
    p.add_argument("paths", nargs="+", type=Path, help="task directories, or folders holding tasks")
    p.add_argument("--strict", action="store_true",
                   help="unknown task.toml keys are problems, not warnings (codedojo's own tasks use this)")
    p.set_defaults(func=_validate)

    p = tasks_sub.add_parser(
        "check", help="run oracle and nop on tasks; report the ones that misbehave",
        description="Every task must score 1.0 with its reference solution (oracle) and 0.0 when nothing is "
        "done (nop), and its environment must hold no history of the fix once the trials' scrub has run (future "
        "commits, reflog, stash, remotes, unreachable objects, pip cache, an installed copy of the fixed package; "
        "what the scrub removes is reported as scrubbed). Without paths, checks the bundled example tasks. Exit "
        "status 1 if any task misbehaves.")
    p.add_argument("paths", nargs="*", type=Path, help="task directories, or folders holding tasks")
    p.add_argument("--workers", type=positive_int, default=2, help="tasks checked at once (default: 2)")
    p.add_argument("--backend", default="local", help="sandbox backend (default: local)")
    p.add_argument("--json", action="store_true", help="print one JSON object per task")
    p.add_argument("--strict-history", action="store_true",
                   help="refuse any history of the fix in the environment as built, even what the scrub removes "
                        "(for environments that should be built clean)")
    add_network_flags(p)
    p.set_defaults(func=_check)

    from codedojo.tasks.swerebench.cli import register as register_swerebench  # from-swe-rebench

    register_swerebench(tasks_sub)

    from codedojo.tasks.factory.cli import register as register_factory  # builtin, synth, table

    register_factory(tasks_sub)


def add_network_flags(p: argparse.ArgumentParser) -> None:
    """--network / --no-network: the caller's override of a task's network policy (SandboxLimits.network)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--network", dest="network", action="store_const", const=True, default=None,
                       help="give tasks that allow internet network access even where that is an opt-in (the local "
                       "backend shares the host's network; see docs/sandbox.md)")
    group.add_argument("--no-network", dest="network", action="store_const", const=False,
                       help="run without network whatever the task allows")


def _validate(args: argparse.Namespace) -> int:
    from codedojo.tasks.task import TaskError, discover_tasks, validate_task_dir

    try:
        paths = discover_tasks(args.paths)
    except TaskError as e:
        print(e, file=sys.stderr)
        return 1
    warnings: list[str] = []
    problems = [p for path in paths for p in validate_task_dir(path, warnings=warnings)]
    if args.strict:
        problems, warnings = problems + warnings, []
    for problem in problems:
        print(problem)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"{len(paths)} task(s) checked, {len(problems)} problem(s), {len(warnings)} warning(s)", file=sys.stderr)
    return 1 if problems or not paths else 0


def _check(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from rich.console import Console
    from rich.table import Table

    from codedojo.tasks.task import TaskError, discover_tasks, examples_dir
    from codedojo.trial.check import check_tasks

    try:
        paths = discover_tasks(args.paths or [examples_dir()])
    except TaskError as e:
        print(e, file=sys.stderr)
        return 1
    if not paths:
        print("no tasks found", file=sys.stderr)
        return 1
    console = Console(stderr=args.json)
    reports, wall = asyncio.run(check_tasks(paths, workers=args.workers, backend=args.backend, console=console,
                                            network=args.network, strict_history=args.strict_history))
    bad = [r for r in reports if not r.ok]
    if args.json:
        for r in reports:
            print(json.dumps(r.to_dict(), sort_keys=True))
    else:
        table = Table(title=f"oracle and nop on {len(reports)} task(s)")
        for col in ("task", "oracle", "nop", "verdict", "seconds"):
            table.add_column(col, justify="right" if col in ("oracle", "nop", "seconds") else "left")
        for r in reports:
            verdict = "ok" if r.ok else f"[red]{r.problem}[/red]"
            if r.scrubbed:
                verdict += f" (scrubbed: {', '.join(f.split(':')[0] for f in r.scrubbed)})"
            table.add_row(r.task, r.oracle_text, r.nop_text, verdict, f"{r.seconds:.2f}")
        console.print(table)
    scrubbed = sum(1 for r in reports if r.scrubbed)
    console.print(f"{len(reports) - len(bad)}/{len(reports)} task(s) behave; wall time {wall:.1f}s "
                  f"with {args.workers} worker(s)" + (f"; {scrubbed} had history of the fix that the trials' scrub "
                                                      "removes" if scrubbed else ""))
    return 1 if bad else 0
