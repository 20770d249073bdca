"""`codedojo tasks builtin | synth | table`: make bug-fix tasks from the bundled repositories or any
Python repository with a pytest suite, and tabulate a generated suite. Registered by codedojo.tasks.cli."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from codedojo.tasks.factory.statements import ALL_TIERS


def register(tasks_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, required=True, help="directory to write task directories into")
    common.add_argument("--tier", choices=ALL_TIERS,
                        help="only tasks of this tier; guided and hinted restate the warm-up tier's bugs "
                             "(docs/tasks.md)")
    common.add_argument("--limit", type=int, help="at most this many tasks")
    common.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    common.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="mutants tested at once (default: CPU count)"
    )
    common.add_argument("--python", help="interpreter that runs the tests (default: /usr/bin/python3)")
    common.add_argument("--no-cache", action="store_true",
                        help="search every repository's mutants again instead of reusing the candidates an earlier "
                             "run found (kept under the cache folder, by factory code, repository, seed and "
                             "interpreter)")

    builtin = tasks_subparsers.add_parser(
        "builtin", parents=[common], help="generate the bundled suite of bug-fix tasks"
    )
    builtin.add_argument("--per-repo", type=int, default=30, help="tasks per bundled repository (default 30)")
    builtin.add_argument("--repo", action="append", help="only this bundled repository (repeatable)")
    builtin.set_defaults(func=_builtin)

    synth = tasks_subparsers.add_parser(
        "synth", parents=[common], help="generate bug-fix tasks from any Python repository with pytest tests"
    )
    synth.add_argument("--repo", type=Path, required=True, help="repository root")
    synth.add_argument("--name", help="repository name in task names (default: the directory name)")
    synth.set_defaults(func=_synth)

    table = tasks_subparsers.add_parser(
        "table", help="tabulate generated tasks per repository, tier and bug kind (Markdown)"
    )
    table.add_argument("dirs", nargs="+", type=Path, help="directories holding task directories")
    table.add_argument("--output", type=Path, help="write the table here instead of stdout")
    table.set_defaults(func=_table)


def _generate(args: argparse.Namespace, repos: list, *, per_repo: int, source: str) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from codedojo.cache import cache_dir
    from codedojo.tasks.factory.pipeline import quota_for, remembered_candidates, specs_for, write_suite

    if args.limit is not None and args.limit < 1:
        print(f"--limit must be at least 1, got {args.limit}", file=sys.stderr)
        return 2
    if args.out.exists() and any(args.out.iterdir()):
        print(f"{args.out}: exists and is not empty; pick a new directory or remove it", file=sys.stderr)
        return 2
    quota = quota_for(args.limit, num_repos=len(repos), per_repo=per_repo, tier=args.tier)
    started = time.monotonic()
    specs_by_repo = []
    tested: dict[str, int] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=False) as progress:
        bar = progress.add_task("mutants", total=quota * len(repos))
        for repo in repos:
            done = sum(len(s) for s in specs_by_repo)

            def report(accepted: int, num_tested: int, *, name: str = repo.name, done: int = done) -> None:
                tested[name] = num_tested
                progress.update(bar, completed=done + accepted, description=f"{name}: {num_tested} tested")

            candidates = remembered_candidates(
                repo, seed=args.seed, quota=quota, workers=args.workers, python=args.python, on_progress=report,
                cache=None if args.no_cache else cache_dir() / "factory-candidates",
            )
            specs_by_repo.append(specs_for(repo, candidates, seed=args.seed, source=source, tier=args.tier))
    written = write_suite(repos, specs_by_repo, args.out, tier=args.tier, limit=args.limit)
    print(f"wrote {len(written)} tasks from {len(repos)} repositories to {args.out} "
          f"({sum(tested.values())} mutants tested) in {time.monotonic() - started:.1f} s")  # fmt: skip
    return 0 if written else 1


def _builtin(args: argparse.Namespace) -> int:
    from codedojo.tasks.factory.pipeline import BUILTIN_REPOS
    from codedojo.tasks.factory.repository import scan_repository

    names = sorted(p.name for p in BUILTIN_REPOS.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    unknown = sorted(set(args.repo or ()) - set(names))
    if unknown:
        print(f"unknown bundled repository {', '.join(unknown)}; choose from {', '.join(names)}", file=sys.stderr)
        return 2
    repos = [scan_repository(BUILTIN_REPOS / n) for n in names if not args.repo or n in args.repo]
    return _generate(args, repos, per_repo=args.per_repo, source="codedojo-builtin")


def _synth(args: argparse.Namespace) -> int:
    from codedojo.tasks.factory.pipeline import FactoryError
    from codedojo.tasks.factory.repository import RepositoryError, scan_repository

    try:
        repo = scan_repository(args.repo, name=args.name)
        return _generate(args, [repo], per_repo=args.limit or 30, source="codedojo-synth")
    except (RepositoryError, FactoryError) as e:
        print(str(e), file=sys.stderr)
        return 2


def _table(args: argparse.Namespace) -> int:
    from codedojo.tasks.factory.report import suite_table

    text = suite_table(args.dirs)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0
