"""Progress bars of the long stages: done/total, a running tally, elapsed time and ETA.

On a terminal the bar redraws in place. Written to a file or a pipe (a long job under nohup, CI), a bar would
show nothing until it ended, or nothing at all if it is transient; there a stage prints one plain line per
`LOG_EVERY_SECONDS` instead (and one when it ends), so a log says where a 40-minute stage is.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

LOG_EVERY_SECONDS = 60.0


class _LoggedProgress(Progress):
    """A Progress for a console that is not a terminal: plain lines, at most one a minute per bar."""

    def __init__(self, label: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs, disable=True)
        self.label = label
        self._logged: dict[TaskID, tuple[float, float]] = {}  # when, and at what count, each bar last printed

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        super().update(task_id, **kwargs)
        self._log(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._log(task_id)

    def stop(self) -> None:
        for task_id in self.task_ids:
            self._log(task_id, force=True)
        super().stop()

    def _log(self, task_id: TaskID, *, force: bool = False) -> None:
        task = self._tasks[task_id]
        now = self.get_time()
        when, count = self._logged.get(task_id, (task.start_time or now, -1.0))
        if count == task.completed or (not force and now - when < LOG_EVERY_SECONDS):
            return
        self._logged[task_id] = (now, task.completed)
        total = "?" if task.total is None else f"{task.total:g}"
        note = task.fields.get("note", "")
        elapsed = task.elapsed or 0.0
        self.console.print(f"{self.label}: {task.completed:g}/{total} {note} ({elapsed:.0f} s)".replace("  ", " "),
                           highlight=False, soft_wrap=True)


def stage_progress(label: str, *, console: Console | None = None, transient: bool = False) -> Progress:
    """A bar whose task carries a `note` field (e.g. "solved 12") shown after the counts; `transient`
    bars disappear when done (for stages that print their own summary line)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        return _LoggedProgress(label, console=console)
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    # Episodes can take minutes each: estimate the speed over a long window, or the ETA would blank out.
    return Progress(*columns, console=console, transient=transient, speed_estimate_period=1800)
