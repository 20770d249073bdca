"""Check that tasks behave: the reference solution scores 1.0, doing nothing scores 0.0, and the environment
holds no history of the fix.

A task that fails this is broken (its tests do not detect the bug, its solution does not fix it, or an agent
could read the fix from git history, a stash, a remote, a pip cache or an installed copy:
trial.contamination) and would feed noise or a shortcut into training. Runs each task through the real
trial runner, several at once. The contamination probe runs on a fresh environment as the task builds it,
then again after the scrub every trial runs before its agent: what the scrub removes (SWE-rebench-style images
ship commits made after the bug) is reported as `scrubbed`, and the task is refused for what survives it (an
installed copy of the fixed package). `strict_history` refuses whatever the first probe finds: for task
authors whose environments should be built clean.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from codedojo.sandbox import SandboxError, start_sandbox
from codedojo.sandbox.base import SandboxLimits
from codedojo.tasks.dockerfile import UnsupportedEnvironment
from codedojo.tasks.task import Task, TaskError
from codedojo.trial import NopAgent, OracleAgent, TrialOptions, TrialResult, run_trial
from codedojo.trial.contamination import scan, scrub


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    task: str
    path: str
    oracle_reward: float | None
    nop_reward: float | None
    problem: str | None
    """None when the task behaves; otherwise what is wrong."""
    seconds: float
    scrubbed: tuple[str, ...] = ()
    """What the contamination probe found in the environment as built and the trials' scrub removes."""

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


def run_problem(label: str, result: TrialResult, *, repeat: bool = False) -> tuple[str | None, str | None]:
    """What one oracle or nop run says is wrong with a task, and its kind (`infrastructure`, `oracle`, `flaky`,
    `nop`); (None, None) when the run behaved. `repeat`: an oracle run after one that scored 1 (a lower score
    then is a flaky task). The one wording of `codedojo tasks check` and `codedojo data validate`."""
    if not result.reward_valid:
        lines = (result.error or "").strip().splitlines()
        return f"{label}: {result.status}" + (f": {lines[-1][:200]}" if lines else ""), "infrastructure"
    if label == "nop" and result.reward != 0.0:
        return f"nop scores {result.reward:g}, not 0", "nop"
    if label == "oracle" and result.reward != 1.0:
        if repeat:
            return f"flaky: oracle scored 1 then {result.reward:g}", "flaky"
        return f"oracle scores {result.reward:g}, not 1", "oracle"
    return None, None


def _problem(oracle: TrialResult, nop: TrialResult) -> str | None:
    """The first of: a run without a reward (oracle, then nop), the oracle's score, the nop's score."""
    verdicts = (run_problem("oracle", oracle), run_problem("nop", nop))
    for problem, _ in sorted(verdicts, key=lambda verdict: verdict[1] != "infrastructure"):
        if problem:
            return problem
    return None


async def check_task(path: Path, *, backend: str = "local", network: bool | None = None,
                     strict_history: bool = False) -> CheckReport:
    started = time.monotonic()
    try:
        task = Task.load(path)
    except TaskError as e:
        return CheckReport(task=path.name, path=str(path), oracle_reward=None, nop_reward=None,
                           problem=f"invalid: {e}", seconds=time.monotonic() - started)
    limits = SandboxLimits(network=network)
    options = TrialOptions(backend=backend, limits=limits)
    built, after_scrub = await _contamination(task, backend=backend, limits=limits,
                                              scrubbing=options.scrub_history)
    contaminated = built if strict_history else after_scrub
    oracle = await run_trial(task, OracleAgent(), options=options)
    nop = await run_trial(task, NopAgent(), options=options)
    problem = _problem(oracle, nop)
    if contaminated:
        problem = "; ".join([f"contaminated: {finding}" for finding in contaminated] + ([problem] if problem else []))
    return CheckReport(task=task.name, path=str(path), oracle_reward=oracle.reward if oracle.reward_valid else None,
                       nop_reward=nop.reward if nop.reward_valid else None, problem=problem,
                       seconds=time.monotonic() - started,
                       scrubbed=tuple(finding for finding in built if finding not in after_scrub))


def fix_paths(task: Task) -> list[str]:
    """The workdir-relative files the task's reference fix changes: the metadata's `file` (bundled and synth
    tasks), else the paths of solution/*.patch (SWE-rebench tasks); empty when neither says."""
    from codedojo.tasks.swerebench.scripts import patch_paths

    file = task.config.metadata.get("file")
    if isinstance(file, str) and file:
        return [file]
    paths: list[str] = []
    for patch in sorted(task.solution_dir.glob("*.patch")) if task.solution_dir.is_dir() else []:
        paths += patch_paths(patch.read_text(encoding="utf-8", errors="replace"))
    return paths


async def _contamination(task: Task, *, backend: str, limits: SandboxLimits,
                         scrubbing: bool) -> tuple[list[str], list[str]]:
    """What the probe finds in a fresh environment of `task`, and what is left after the scrub a trial runs
    (everything, when trials do not scrub). A start failure is left to the trials."""
    try:
        sandbox = await start_sandbox(task, backend=backend, limits=limits)
    except (SandboxError, UnsupportedEnvironment, OSError):
        return [], []
    try:
        changed = fix_paths(task)
        built = await scan(sandbox, changed_paths=changed)
        if not built or not scrubbing:
            return built, built
        await scrub(sandbox)
        return built, await scan(sandbox, changed_paths=changed)
    finally:
        await asyncio.shield(sandbox.close())


async def check_tasks(paths: list[Path], *, workers: int = 2, backend: str = "local",
                      console: Console | None = None, network: bool | None = None,
                      strict_history: bool = False) -> tuple[list[CheckReport], float]:
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
                report = await check_task(path, backend=backend, network=network, strict_history=strict_history)
            progress.advance(bar)
            return report

        reports = await asyncio.gather(*(one(p) for p in paths))
    return list(reports), time.monotonic() - started
