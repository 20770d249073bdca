"""Progress bars of the long stages: done/total, a running tally, elapsed time and ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def stage_progress(label: str, *, console: Console | None = None, transient: bool = False) -> Progress:
    """A bar whose task carries a `note` field (e.g. "solved 12") shown after the counts; `transient`
    bars disappear when done (for stages that print their own summary line)."""
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    # Episodes can take minutes each: estimate the speed over a long window, or the ETA would blank out.
    return Progress(*columns, console=console or Console(stderr=True), transient=transient, speed_estimate_period=1800)
