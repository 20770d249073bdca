"""Oracle validation: keep a task only if its reference solution scores 1.0 twice and doing nothing 0.0.

A solution that scores 1.0 once and less the next time marks a flaky task (a test that depends on time,
order or chance); a flaky reward is noise GRPO would learn from, so the task is dropped. The runs go
through the same trial runner and agents as `codedojo tasks check`. Each task's verdict is journalled
(`<output>.checks.jsonl`) as soon as it is known; a rerun checks only the tasks not yet there.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from codedojo.data.provenance import describe_input, tasks_sha256, write_provenance
from codedojo.data.rows import load_rows, row_key, save_rows, task_dir
from codedojo.journal import append_record, open_journal
from codedojo.progress import stage_progress
from codedojo.tasks.task import Task, TaskError
from codedojo.trial import NopAgent, OracleAgent, TrialOptions, TrialResult, run_trial
from codedojo.trial.check import run_problem

TrialRunner = Callable[..., Awaitable[TrialResult]]
"""run_trial's signature: (task, agent, *, options) -> TrialResult."""


async def validate_task(path: Path, *, options: TrialOptions, runner: TrialRunner = run_trial) -> dict[str, Any]:
    """Oracle, nop, oracle again (stopping at the first failure); the verdict as a journal record."""
    started = time.monotonic()
    record: dict[str, Any] = {"oracle": [], "nop": None, "problem": None, "kind": None}
    try:
        task = Task.load(path)
    except TaskError as e:
        return {**record, "problem": f"invalid: {e}", "kind": "invalid", "seconds": 0.0}
    for label in ("oracle", "nop", "oracle"):
        result = await runner(task, NopAgent() if label == "nop" else OracleAgent(), options=options)
        reward = result.reward if result.reward_valid else None
        if label == "nop":
            record["nop"] = reward
        else:
            record["oracle"].append(reward)
        problem, kind = run_problem(label, result, repeat=label == "oracle" and len(record["oracle"]) > 1)
        if problem:
            return {**record, "problem": problem, "kind": kind, "seconds": round(time.monotonic() - started, 2)}
    return {**record, "seconds": round(time.monotonic() - started, 2)}


async def validate_tasks(source: Path, *, output: Path, workers: int = 2, backend: str = "local",
                         runner: TrialRunner = run_trial, console: Console | None = None) -> Path:
    """Write the rows of `source` whose tasks behave to `output` (input order kept)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    source, output = Path(source), Path(output)
    rows = load_rows(source)
    journal = output.with_name(output.name.removesuffix(".jsonl") + ".checks.jsonl")
    records = {r["task"]: r for r in open_journal(journal, settings={"backend": backend})}
    options = TrialOptions(backend=backend)
    gate = asyncio.Semaphore(workers)
    console = console or Console(stderr=True)
    wanted = {row_key(r) for r in rows}
    tally = Counter("ok" if r["problem"] is None else "dropped" for r in records.values() if r["task"] in wanted)
    with stage_progress("validating tasks (oracle x2, nop)", console=console) as progress:
        bar = progress.add_task("validate", total=len(rows), completed=sum(tally.values()),
                                note=f"ok {tally['ok']} dropped {tally['dropped']}")

        async def one(row: dict[str, Any]) -> None:
            key = row_key(row)
            async with gate:
                record = {"task": key, **await validate_task(task_dir(row, base=source.parent), options=options,
                                                          runner=runner)}
            append_record(journal, record)
            records[key] = record
            tally["ok" if record["problem"] is None else "dropped"] += 1
            progress.update(bar, advance=1, note=f"ok {tally['ok']} dropped {tally['dropped']}")

        await asyncio.gather(*(one(r) for r in rows if row_key(r) not in records))
    kept = [r for r in rows if records[row_key(r)]["problem"] is None]
    dropped = [records[row_key(r)] for r in rows if records[row_key(r)]["problem"] is not None]
    for record in dropped[:30]:
        console.print(f"[yellow]dropped[/yellow] {record['task']}: {record['problem']}")
    save_rows(output, kept)
    write_provenance(output, stage="validate",
                     inputs=[describe_input(source), {"tasks_sha256": tasks_sha256(task_dir(r, base=source.parent)
                                                                                   for r in rows)}],
                     settings={"backend": backend, "oracle_runs": 2, "nop_runs": 1, "journal": journal.name},
                     counts={"input": len(rows), "kept": len(kept),
                             "dropped": dict(Counter(r["kind"] for r in dropped))})
    return output
