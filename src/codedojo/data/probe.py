"""Difficulty probe: n episodes per task with a frozen model, through the real agent loop.

Tasks are probed in turn over repositories (all n episodes of a task before the next task), and every
finished episode is appended to a journal (`<source>-probe-<model>-n<n>.episodes.jsonl`) at once;
a rerun with the same settings runs only the (task, sample) pairs the journal lacks. Each episode's
seed is a function of the probe seed, the task and the sample index, so a resumed probe samples the
same episodes an uninterrupted one would. The per-task success counts go to
`<source>-probe-<model>-n<n>.json`, which the mixed-reward filter reads: the filter can be rerun (other
criteria, other sources) without a single new episode.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from codedojo.agent.loop import AgentConfig
from codedojo.agent.prompts import PromptProfile
from codedojo.data.provenance import describe_input, tasks_sha256, write_provenance, write_text_atomic
from codedojo.data.rows import Row, load_rows, row_key, task_dir
from codedojo.inference.protocol import Engine
from codedojo.journal import append_record, open_journal
from codedojo.progress import stage_progress
from codedojo.rollout.episodes import Episode, EpisodeRequest, RolloutConfig, run_episodes
from codedojo.tasks.task import Task, TaskError


@dataclass(frozen=True, kw_only=True)
class TaskCounts:
    """How one task fared over its probe episodes."""

    task: str
    total: int
    """Episodes recorded."""
    valid: int
    """Episodes with a valid reward (infrastructure failures excluded)."""
    solved: int
    statuses: dict[str, int]


def model_slug(model: str) -> str:
    """A model name as it appears in file names: lower case, runs of other characters as one dash."""
    slug = re.sub(r"[^a-z0-9]+", "-", Path(str(model)).name.lower()).strip("-")
    if not slug:
        raise ValueError(f"model name {model!r} has no letter or digit to name files by")
    return slug


def probe_stem(source: Path, *, model: str, n: int) -> Path:
    """`<folder>/<source>-probe-<model>-n<n>`: the probe's files share this stem."""
    source = Path(source)
    return source.with_name(f"{source.name.removesuffix('.jsonl')}-probe-{model_slug(model)}-n{n}")


def episode_seed(seed: int, task: str, sample: int) -> int:
    """The sampling seed of one probe episode: fixed by (seed, task, sample), never by run order."""
    return zlib.crc32(f"{seed}/{task}/{sample}".encode()) % 2**31


def counts_from_records(records: Iterable[Mapping[str, Any]]) -> dict[str, TaskCounts]:
    """Per-task counts from episode records ({task, sample, valid, solved, status}); the last record of a
    (task, sample) pair wins."""
    latest: dict[tuple[str, int], Mapping[str, Any]] = {}
    for record in records:
        latest[(str(record["task"]), int(record["sample"]))] = record
    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for (task, _), record in sorted(latest.items()):
        by_task.setdefault(task, []).append(record)
    return {
        task: TaskCounts(task=task, total=len(rs), valid=sum(bool(r["valid"]) for r in rs),
                         solved=sum(bool(r["valid"]) and bool(r["solved"]) for r in rs),
                         statuses=dict(Counter(str(r.get("status")) for r in rs)))
        for task, rs in by_task.items()
    }


def save_counts(path: Path, counts: Mapping[str, TaskCounts], *, n: int, model: str) -> Path:
    """The per-task counts file the filter reads."""
    data = {"n": n, "model": model, "tasks": {k: dataclasses.asdict(c) for k, c in sorted(counts.items())}}
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def load_counts(path: Path) -> tuple[int, str, dict[str, TaskCounts]]:
    """(n, model, counts) from a counts file written by `save_counts`, or from a probe's episode journal
    (`.episodes.jsonl`, also while the probe is still running)."""
    path = Path(path)
    if path.name.endswith(".episodes.jsonl"):
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.endswith("}")]
        if not lines or "settings" not in lines[0]:
            raise ValueError(f"{path}: not a probe journal (no settings header)")
        settings = lines[0]["settings"]
        return int(settings["n"]), str(settings["model"]), counts_from_records(lines[1:])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        counts = {k: TaskCounts(**v) for k, v in data["tasks"].items()}
        return int(data["n"]), str(data["model"]), counts
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a probe counts file ({e}); write one with `codedojo dataset probe`") from None


def _record(episode: Episode, *, task: str) -> dict[str, Any]:
    trajectory = episode.trajectory
    error = (episode.error or "").strip().splitlines()
    phases = ("environment_setup", "agent", "verifier", "teardown")
    return {"task": task, "sample": episode.request.sample, "seed": episode.request.seed, "status": episode.status,
            "valid": episode.valid, "solved": episode.solved, "reward": episode.reward,
            "turns": len(trajectory.turns) if trajectory is not None else 0, "attempts": episode.attempts,
            "seconds": round(sum(episode.timings.get(p, 0.0) for p in phases), 2),
            "error": error[-1][:300] if error else None}


async def probe_tasks(
    source: Path,
    *,
    engine: Engine,
    model: str,
    n: int = 8,
    seed: int = 0,
    agent_config: AgentConfig,
    rollout: RolloutConfig | None = None,
    profile: PromptProfile | None = None,
    trajectory_dir: Path | None = None,
    console: Console | None = None,
) -> Path:
    """Probe every task of the `source` JSONL; returns the counts file (see the module docstring)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    source = Path(source)
    rows = load_rows(source)
    stem = probe_stem(source, model=model, n=n)
    journal = stem.with_name(stem.name + ".episodes.jsonl")
    settings = {"model": model, "n": n, "seed": seed, "agent": dataclasses.asdict(agent_config),
                "reward_shape": (rollout or RolloutConfig()).reward_shape}
    tasks = _load_tasks(rows, base=source.parent)
    records = open_journal(journal, settings=settings)
    done = {(str(r["task"]), int(r["sample"])) for r in records}
    requests = [EpisodeRequest(task=tasks[i], group=i, sample=j, seed=episode_seed(seed, row_key(rows[i]), j))
                for i in interleaved(rows) for j in range(n) if (row_key(rows[i]), j) not in done]
    keys = [row_key(r) for r in rows]
    wanted = set(keys)
    counts_so_far = counts_from_records(r for r in records if r["task"] in wanted)
    solved = sum(c.solved for c in counts_so_far.values())
    finished = sum(c.total for c in counts_so_far.values())
    console = console or Console(stderr=True)
    if done:
        console.print(f"resuming {journal.name}: {finished} of {len(rows) * n} episodes already done")
    with stage_progress(f"probing {model} n={n}", console=console) as progress:
        bar = progress.add_task("probe", total=len(rows) * n, completed=finished, note=f"solved {solved}")

        def on_done(episode: Episode) -> None:
            nonlocal solved
            record = _record(episode, task=keys[episode.request.group])
            append_record(journal, record)
            records.append(record)
            solved += episode.solved
            progress.update(bar, advance=1, note=f"solved {solved}")

        try:
            await run_episodes(requests, engine=engine, agent_config=agent_config,
                               rollout=rollout or RolloutConfig(), profile=profile, trajectory_dir=trajectory_dir,
                               on_done=on_done)
        finally:  # also when interrupted: the counts so far, for a partial filter (mixed --allow-partial)
            counts = counts_from_records(r for r in records if r["task"] in wanted)
            out = save_counts(stem.with_name(stem.name + ".json"), counts, n=n, model=model)
            write_provenance(out, stage="probe", model=model, seed=seed,
                             inputs=[describe_input(source), {"tasks_sha256": tasks_sha256(t.path for t in tasks)}],
                             settings={**settings, "journal": journal.name, "reused_from_journal": finished},
                             counts={**summarize(counts, n=n), "expected_episodes": len(rows) * n})
    return out


def interleaved(rows: Sequence[Row]) -> list[int]:
    """Row indices taking repositories in turn (first task of each, then the second, ...), so that a probe
    stopped early has covered the repositories evenly rather than the first few completely."""
    position: dict[str, int] = {}
    keys = []
    for i, row in enumerate(rows):
        repo = str((row.get("metadata") or {}).get("repository") or "")
        keys.append((position.get(repo, 0), repo, i))
        position[repo] = position.get(repo, 0) + 1
    return [i for _, _, i in sorted(keys)]


def _load_tasks(rows: Sequence[Row], *, base: Path) -> list[Task]:
    tasks, problems = [], []
    for row in rows:
        try:
            tasks.append(Task.load(task_dir(row, base=base)))
        except TaskError as e:  # every bad row is reported together below
            problems.append(f"{row_key(row)}: {e}")
    if problems:
        raise ValueError(f"{len(problems)} task(s) cannot be loaded:\n" + "\n".join(problems[:20]))
    return tasks


def summarize(counts: Mapping[str, TaskCounts], *, n: int) -> dict[str, Any]:
    """Tasks probed, complete (all n episodes valid), and how many tasks solved k of n, for k = 0..n."""
    complete = [c for c in counts.values() if c.valid == n]
    histogram = Counter(c.solved for c in complete)
    return {"tasks": len(counts), "complete": len(complete), "episodes": sum(c.total for c in counts.values()),
            "solved_episodes": sum(c.solved for c in counts.values()),
            "success_histogram": {str(k): histogram.get(k, 0) for k in range(n + 1)}}
