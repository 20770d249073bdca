"""`codedojo tasks from-swe-rebench`: convert SWE-rebench V2 rows into Harbor task directories."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path


def register(tasks_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `from-swe-rebench` to the `codedojo tasks` subcommands."""
    p = tasks_sub.add_parser(
        "from-swe-rebench",
        help="convert SWE-rebench V2 rows into Harbor tasks",
        description="Convert SWE-rebench V2 rows (a .parquet, .json or .jsonl file, or a Hugging Face "
        "dataset name such as nebius/SWE-rebench-V2) into Harbor task directories that run on the dataset's "
        "prebuilt images. Every task written is validated; rows that cannot become tasks are listed with "
        "the reason. Exit status 1 when no task was written.",
    )
    p.add_argument("--input", required=True, metavar="FILE_OR_DATASET", help="rows to convert")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="directory for the task folders")
    p.add_argument("--limit", type=int, metavar="N", help="stop after writing N tasks")
    p.add_argument(
        "--split", default="train", help="dataset split, for a Hugging Face dataset (default: train)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace task folders that already exist")
    p.add_argument("--cpus", type=float, default=2, help="CPU cores per sandbox (default: 2)")
    p.add_argument("--memory-mb", type=int, default=4096, help="memory per sandbox in MiB (default: 4096)")
    p.add_argument(
        "--storage-mb", type=int, default=10240, help="storage per sandbox in MiB (default: 10240)"
    )
    p.add_argument(
        "--network",
        choices=("no-network", "public"),
        default="no-network",
        help="sandbox network access (default: no-network)",
    )
    p.add_argument(
        "--build-timeout-sec", type=float, default=1800.0, help="image pull and start (default: 1800)"
    )
    p.add_argument("--agent-timeout-sec", type=float, default=1800.0, help="agent wall clock (default: 1800)")
    p.add_argument(
        "--verifier-timeout-sec", type=float, default=1800.0, help="test.sh wall clock (default: 1800)"
    )
    p.add_argument(
        "--include-interface",
        action="store_true",
        help="append the row's interface (signatures the tests call) to the instruction",
    )
    p.set_defaults(func=_from_swe_rebench)


def _from_swe_rebench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from codedojo.tasks.swerebench.convert import ConvertConfig, SkippedRow, convert_rows
    from codedojo.tasks.swerebench.grading import GradingError
    from codedojo.tasks.swerebench.source import SourceError, read_rows

    if args.limit is not None and args.limit < 1:
        print("--limit must be at least 1", file=sys.stderr)
        return 2
    cpus = int(args.cpus) if float(args.cpus).is_integer() else args.cpus
    config = ConvertConfig(
        cpus=cpus,
        memory_mb=args.memory_mb,
        storage_mb=args.storage_mb,
        network_mode=args.network,
        build_timeout_sec=args.build_timeout_sec,
        agent_timeout_sec=args.agent_timeout_sec,
        verifier_timeout_sec=args.verifier_timeout_sec,
        include_interface=args.include_interface,
    )
    console = Console(stderr=True)
    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    try:
        rows = read_rows(args.input, split=args.split)
        with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
            bar = progress.add_task("converting", total=args.limit)

            def advance(result: Path | SkippedRow) -> None:
                # With --limit the bar counts tasks written; otherwise rows read.
                if args.limit is None or isinstance(result, Path):
                    progress.advance(bar)

            report = convert_rows(
                rows,
                out_dir=args.out,
                config=config,
                limit=args.limit,
                overwrite=args.overwrite,
                on_row=advance,
            )
    except (SourceError, GradingError) as e:
        print(e, file=sys.stderr)
        return 1

    by_reason: dict[str, list[str]] = defaultdict(list)
    for s in report.skipped:
        by_reason[s.reason].append(s.instance_id or f"row {s.index}")
    for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        print(f"skipped {len(ids)}: {reason} ({shown})")
    print(f"{len(report.converted)} task(s) written to {args.out}, {len(report.skipped)} row(s) skipped")
    return 0 if report.converted else 1
