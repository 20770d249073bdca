"""Check that tasks behave: the reference solution scores 1.0 and doing nothing scores 0.0.

A task that fails this is broken (its tests do not detect the bug, or its solution does not fix it) and
would feed noise into training. Runs each task through the real trial runner, several at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from codedojo.sandbox.base import SandboxLimits
from codedojo.tasks.task import Task, TaskError
from codedojo.trial import NopAgent, OracleAgent, TrialOptions, TrialResult, run_trial


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    task: str
    path: str
    oracle_reward: float | None
    nop_reward: float | None
    problem: str | None
    """None when the task behaves; otherwise what is wrong."""
    seconds: float

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def oracle_text(self) -> str:
        return "-" if self.oracle_reward is None else f"{self.oracle_reward:g}"

    @property
    def nop_text(self) -> str:
        return "-" if self.nop_reward is None else f"{self.nop_reward:g}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else ""


def _problem(oracle: TrialResult, nop: TrialResult) -> str | None:
    if not oracle.reward_valid:
        return f"oracle: {oracle.status}: {_last_line(oracle.error)}"
    if not nop.reward_valid:
        return f"nop: {nop.status}: {_last_line(nop.error)}"
    if oracle.reward != 1.0:
        return f"oracle scores {oracle.reward:g}, not 1"
    if nop.reward != 0.0:
        return f"nop scores {nop.reward:g}, not 0"
    return None


async def check_task(path: Path, *, backend: str = "local", network: bool | None = None) -> CheckReport:
    started = time.monotonic()
    try:
        task = Task.load(path)
    except TaskError as e:
        return CheckReport(task=path.name, path=str(path), oracle_reward=None, nop_reward=None,
                           problem=f"invalid: {e}", seconds=time.monotonic() - started)
    options = TrialOptions(backend=backend, limits=SandboxLimits(network=network))
    oracle = await run_trial(task, OracleAgent(), options=options)
    nop = await run_trial(task, NopAgent(), options=options)
    return CheckReport(task=task.name, path=str(path), oracle_reward=oracle.reward if oracle.reward_valid else None,
                       nop_reward=nop.reward if nop.reward_valid else None, problem=_problem(oracle, nop),
                       seconds=time.monotonic() - started)


async def check_tasks(paths: list[Path], *, workers: int = 2, backend: str = "local",
                      console: Console | None = None, network: bool | None = None) -> tuple[list[CheckReport], float]:
    """Check every task, `workers` at a time; returns the reports in input order and the wall time."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    started = time.monotonic()
    gate = asyncio.Semaphore(workers)
    columns = (TextColumn("checking tasks"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("check", total=len(paths))

        async def one(path: Path) -> CheckReport:
            async with gate:
                report = await check_task(path, backend=backend, network=network)
            progress.advance(bar)
            return report

        reports = await asyncio.gather(*(one(p) for p in paths))
    return list(reports), time.monotonic() - started
