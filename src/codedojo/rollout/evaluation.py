"""Evaluation: n episodes per task, pass@k with the unbiased estimator, per-task and per-status counts."""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from codedojo.agent.loop import AgentConfig, episode_id_for
from codedojo.agent.prompts import PromptProfile
from codedojo.inference.protocol import Engine
from codedojo.journal import open_journal
from codedojo.rollout.episodes import (
    Episode,
    EpisodeRequest,
    FlaggedEpisodes,
    RolloutConfig,
    run_episodes_with_progress,
)
from codedojo.tasks.task import Task
from codedojo.trial.reward import RewardShape, shape_for


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k) (Chen et al., 2021)."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples, got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True, kw_only=True)
class TaskScore:
    task: str
    samples: int
    """Episodes with a valid reward (infrastructure failures excluded)."""
    solved: int
    mean_reward: float | None
    statuses: dict[str, int]

    def pass_at(self, k: int) -> float | None:
        return pass_at_k(self.samples, self.solved, k) if self.samples >= k else None


@dataclass(frozen=True, kw_only=True)
class EvalReport:
    tasks: list[TaskScore]
    n: int
    statuses: dict[str, int]
    wall_sec: float
    episodes: list[Episode] = field(default_factory=list, repr=False)

    def pass_at(self, k: int) -> float | None:
        """Mean over tasks of the unbiased pass@k (tasks with fewer than k valid samples are left out)."""
        values = [v for t in self.tasks if (v := t.pass_at(k)) is not None]
        return statistics.fmean(values) if values else None

    def stderr_pass_at_1(self) -> float | None:
        """Standard error of pass@1 over tasks."""
        values = [v for t in self.tasks if (v := t.pass_at(1)) is not None]
        if len(values) < 2:
            return None
        return statistics.stdev(values) / math.sqrt(len(values))

    def to_dict(self) -> dict[str, Any]:
        ks = sorted({1, self.n})
        return {
            "n": self.n, "tasks": len(self.tasks), "wall_sec": round(self.wall_sec, 2),
            **{f"pass@{k}": self.pass_at(k) for k in ks}, "pass@1_stderr": self.stderr_pass_at_1(),
            "statuses": self.statuses,
            "per_task": [{"task": t.task, "samples": t.samples, "solved": t.solved, "mean_reward": t.mean_reward,
                          **{f"pass@{k}": t.pass_at(k) for k in ks}, "statuses": t.statuses} for t in self.tasks],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalReport:
        """The report `to_dict` wrote, without its episodes (what pass@k and paired differences read)."""
        tasks = [TaskScore(task=t["task"], samples=t["samples"], solved=t["solved"], mean_reward=t["mean_reward"],
                           statuses=t["statuses"]) for t in data["per_task"]]
        return cls(tasks=tasks, n=data["n"], statuses=data["statuses"], wall_sec=data["wall_sec"])


@dataclass(frozen=True, kw_only=True)
class PairedDifference:
    """after - before of per-task pass@1 over the tasks both reports scored."""

    mean: float
    stderr: float | None
    """Standard error of the mean difference (sample std of the per-task differences / sqrt(tasks));
    None with fewer than two tasks. Pairing removes the spread of task difficulty from the error."""
    tasks: int
    cluster_stderr: float | None = None
    """With clusters (e.g. repositories): the cluster-robust standard error of the mean difference, which lets
    tasks of one cluster move together; None without clusters or with fewer than two."""
    clusters: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mean": self.mean, "stderr": self.stderr, "tasks": self.tasks}
        if self.clusters is not None:
            out.update(cluster_stderr=self.cluster_stderr, clusters=self.clusters)
        return out


def paired_difference(before: EvalReport, after: EvalReport, *,
                      cluster_of: Callable[[str], str] | None = None) -> PairedDifference:
    """Per-task pass@1 of `after` minus `before`, paired by task name; with `cluster_of` (task name -> cluster)
    also the cluster-robust standard error: sqrt(G / (G - 1) * sum over clusters of (sum of the cluster's
    deviations from the mean)^2) / tasks, for G clusters."""
    first = {t.task: v for t in before.tasks if (v := t.pass_at(1)) is not None}
    second = {t.task: v for t in after.tasks if (v := t.pass_at(1)) is not None}
    names = sorted(first.keys() & second.keys())
    diffs = [second[name] - first[name] for name in names]
    if not diffs:
        raise ValueError("the two evaluations share no task with a valid sample")
    mean = statistics.fmean(diffs)
    stderr = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None
    if cluster_of is None:
        return PairedDifference(mean=mean, stderr=stderr, tasks=len(diffs))
    sums: dict[str, float] = {}
    for name, d in zip(names, diffs, strict=True):
        sums[cluster_of(name)] = sums.get(cluster_of(name), 0.0) + d - mean
    g = len(sums)
    cluster_stderr = math.sqrt(g / (g - 1) * sum(x * x for x in sums.values())) / len(diffs) if g > 1 else None
    return PairedDifference(mean=mean, stderr=stderr, tasks=len(diffs), cluster_stderr=cluster_stderr, clusters=g)


def reward_trend(per_step: Sequence[float]) -> dict[str, Any] | None:
    """The training reward of the second half of the steps minus the first half's, with its standard error.

    Each step's mean reward is one observation (a step draws its own tasks, so the step-to-step spread is
    the noise a trend must beat); with an odd count the middle step is in neither half. The error is
    sqrt(s1^2/h + s2^2/h) over the h steps of each half. None with fewer than four steps (two per half)."""
    half = len(per_step) // 2
    if half < 2:
        return None
    first, second = list(per_step[:half]), list(per_step[-half:])
    stderr = math.sqrt(statistics.variance(first) / half + statistics.variance(second) / half)
    return {"first_half": statistics.fmean(first), "second_half": statistics.fmean(second),
            "change": statistics.fmean(second) - statistics.fmean(first), "stderr": stderr, "steps_per_half": half}


def score(episodes: Sequence[Episode], *, tasks: Sequence[Task], n: int, wall_sec: float) -> EvalReport:
    by_task: dict[int, list[Episode]] = {i: [] for i in range(len(tasks))}
    for episode in episodes:
        by_task[episode.request.group].append(episode)
    scores = []
    for i, task in enumerate(tasks):
        group = by_task[i]
        valid = [e for e in group if e.valid]
        rewards = [e.reward for e in valid if e.reward is not None]
        scores.append(TaskScore(task=task.name, samples=len(valid), solved=sum(e.solved for e in valid),
                                mean_reward=statistics.fmean(rewards) if rewards else None,
                                statuses=dict(Counter(e.status for e in group))))
    return EvalReport(tasks=scores, n=n, statuses=dict(Counter(e.status for e in episodes)), wall_sec=wall_sec,
                      episodes=list(episodes))


SETTINGS_JOURNAL = ".codedojo-evaluation"
"""The journal header an evaluation writes into its trajectory folder: its settings (no .json suffix: it is
not a trajectory). The finished episodes are the trajectory files themselves."""


def _settings(tasks: Sequence[Task], *, n: int, seed: int, agent_config: AgentConfig, model: str | None,
              rollout: RolloutConfig) -> dict[str, Any]:
    settings = {"format": "codedojo-evaluation-1", "model": model, "n": n, "seed": seed,
                "tasks": [t.name for t in tasks], "reward_shape": rollout.reward_shape, "agent": asdict(agent_config)}
    if rollout.flagged_episodes != "zero":  # only when set: journals written before the setting existed still match
        settings["flagged_episodes"] = rollout.flagged_episodes
    return settings


def finished_episodes(requests: Sequence[EpisodeRequest], folder: Path, *, settings: dict[str, Any],
                      reward_shape: RewardShape, flagged_episodes: FlaggedEpisodes = "zero") -> dict[int, Episode]:
    """The episodes of `requests` (by index) an earlier run of the same evaluation left in `folder`.

    The folder's settings journal (`codedojo.journal`) must hold `settings` (tasks, n, seed, agent settings, model):
    otherwise a JournalError names what differs, and a folder with trajectory files but no journal is refused
    too, rather than mix two evaluations. A new folder gets the journal first, so a run cut at any point
    resumes with the episodes it finished.
    """
    journal = folder / SETTINGS_JOURNAL
    if not journal.is_file() and folder.is_dir() and any(folder.glob("*.json")):
        raise ValueError(f"{folder} already holds trajectory files that no evaluation journal ({SETTINGS_JOURNAL}) "
                         "describes; pass a new trajectory folder, or remove this one to start over")
    open_journal(journal, settings=settings)
    found = {}
    for i, request in enumerate(requests):
        name = episode_id_for(request.task.name, request.seed)
        shape = shape_for(request.task, reward_shape)
        episode = Episode.load_finished(folder / f"{name}.json", request, reward_shape=shape,
                                        flagged_episodes=flagged_episodes)
        if episode is not None:
            found[i] = episode
    return found


async def evaluate(tasks: Sequence[Task], *, engine: Engine, n: int, agent_config: AgentConfig,
                   rollout: RolloutConfig, profile: PromptProfile | None = None, seed: int = 0,
                   trajectory_dir: Path | None = None, model: str | None = None,
                   console: Console | None = None) -> EvalReport:
    """Run `n` episodes of every task and score them.

    With a `trajectory_dir` the evaluation resumes: the episodes a cut run of the same evaluation finished
    there (same tasks, n, seed, agent settings and `model`, a name for the weights being evaluated) are read
    back instead of run again, and an infrastructure failure is retried. The report's `wall_sec` is this
    run's.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    requests = [EpisodeRequest(task=task, group=i, sample=j, seed=seed * 100_003 + i * 1009 + j)
                for i, task in enumerate(tasks) for j in range(n)]
    started = time.monotonic()
    done: dict[int, Episode] = {}
    if trajectory_dir is not None:
        settings = _settings(tasks, n=n, seed=seed, agent_config=agent_config, model=model, rollout=rollout)
        done = finished_episodes(requests, Path(trajectory_dir), settings=settings,
                                 reward_shape=rollout.reward_shape, flagged_episodes=rollout.flagged_episodes)
        if done and console is not None:
            console.print(f"resuming: {len(done)} of {len(requests)} episodes already in {trajectory_dir}")
    todo = [r for i, r in enumerate(requests) if i not in done]
    ran = iter(await run_episodes_with_progress(todo, label="evaluating", console=console, engine=engine,
                                                agent_config=agent_config, rollout=rollout, profile=profile,
                                                trajectory_dir=trajectory_dir) if todo else [])
    episodes = [done[i] if i in done else next(ran) for i in range(len(requests))]
    return score(episodes, tasks=tasks, n=n, wall_sec=time.monotonic() - started)
