"""Running many episodes at once: the rollout scheduler.

Each episode is a full trial (sandbox start, agent loop, verification, close). Episodes run as asyncio
tasks under two separate caps: open sandboxes (an episode holds one from start to close) and generations
in flight (what the engine batches together). Episodes that end in an infrastructure failure are
retried with a fresh sandbox up to `max_infra_retries` times; if they still fail they are returned
marked invalid, so the trainer can leave them out of training and of group statistics.

`Episode` is the one record of a finished episode from here to the trainer (train.samples, train.trainer)
and slime's generate hook (integrations.slime): the request, the trial's result (status, verifier rewards,
error, phase timings, the typed trajectory), the reward shape and the attempts. Every other fact of the
episode (the training reward, validity, solved, timings) is a property read from those, never a copy.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from codedojo.agent.loop import AgentConfig, AgentLoop
from codedojo.agent.prompts import PromptProfile
from codedojo.inference.protocol import Completion, Engine, SamplingParams
from codedojo.tasks.task import Task
from codedojo.trial.hacking import FlaggedEpisodes
from codedojo.trial.result import TRIAL_PHASES, PhaseTimings, TrialResult
from codedojo.trial.reward import RewardShape, shape_for, shaped_reward
from codedojo.trial.runner import TrialOptions, run_trial
from codedojo.trial.status import EpisodeStatus
from codedojo.trial.trajectory import Trajectory


@dataclass(frozen=True, kw_only=True)
class RolloutConfig:
    """How episodes are scheduled and scored."""

    max_open_sandboxes: int = 8
    """Episodes holding a sandbox at once."""
    max_inflight_generations: int = 32
    """Generation requests in flight at once (the engine batches them)."""
    max_infra_retries: int = 2
    """Fresh attempts for an episode that ended in an infrastructure failure."""
    reward_shape: RewardShape = "binary"
    """How a verifier's rewards become the training scalar (tasks may override)."""
    flagged_episodes: FlaggedEpisodes = "zero"
    """What an episode with a reward-hacking flag (trial.hacking) gets: "zero" (reward 0, not solved in
    evaluation) or "keep" (the verifier's verdict)."""
    trial: TrialOptions = field(default_factory=TrialOptions)
    """Sandbox backend, limits and timeout multiplier."""


"""The trial phases whose wall seconds a trajectory file's `timings` holds beside the agent's own."""


@dataclass(frozen=True, kw_only=True)
class EpisodeRequest:
    task: Task
    group: int
    """Index of the group (GRPO compares episodes of the same group)."""
    sample: int
    """Index within the group."""
    seed: int | None = None


@dataclass(frozen=True, kw_only=True)
class Episode:
    """A finished episode: what was asked, what the trial gave (its last attempt), and how it is scored."""

    request: EpisodeRequest
    result: TrialResult
    """The last attempt's trial: status, verifier rewards, error, phase timings and trajectory."""
    reward_shape: RewardShape
    """How the verifier's rewards become the training reward (the task's shape, else the run's)."""
    attempts: int
    """Trials run (1 + infrastructure retries)."""
    flagged_episodes: FlaggedEpisodes = "zero"
    """What a reward-hacking flag does to the reward (RolloutConfig.flagged_episodes)."""

    @property
    def status(self) -> EpisodeStatus:
        return self.result.status

    @property
    def trajectory(self) -> Trajectory | None:
        return self.result.trajectory

    @property
    def error(self) -> str | None:
        return self.result.error

    @property
    def valid(self) -> bool:
        """Whether the episode has a reward to train on (no infrastructure failure)."""
        return self.result.reward_valid

    @property
    def rewards(self) -> dict[str, float] | None:
        """The verifier's rewards; None without a valid reward."""
        return self.result.rewards if self.valid else None

    @property
    def flags(self) -> tuple[str, ...]:
        """The trial's reward-hacking flags."""
        return self.result.flags

    @property
    def reward(self) -> float | None:
        """The training reward under `reward_shape`; None without a valid reward; 0 for a flagged episode under
        flagged_episodes "zero"."""
        reward = shaped_reward(self.result, self.reward_shape)
        return 0.0 if reward is not None and self.flags and self.flagged_episodes == "zero" else reward

    @property
    def solved(self) -> bool:
        """The verifier passed it (and, under flagged_episodes "zero", no reward-hacking flag was raised)."""
        return self.result.solved and not (self.flags and self.flagged_episodes == "zero")

    @property
    def timings(self) -> dict[str, float]:
        """Wall seconds per trial phase that ran, and the agent's own totals as `agent_<name>`."""
        phases = {k: v for k, v in vars(self.result.timings).items() if v is not None}
        agent = self.trajectory.timings if self.trajectory is not None else {}
        return phases | {f"agent_{k}": v for k, v in agent.items()}

    def save_trajectory(self, folder: Path) -> Path | None:
        """Write the trajectory file `<folder>/<episode_id>.json`: the agent's trajectory with this episode's
        rewards, training reward, place in its group, attempts, validity, whether it solved the task (as the
        trial decided it) and timings; None without a trajectory."""
        t = self.trajectory
        if t is None:
            return None
        r = self.request
        metadata = {**t.metadata, "group": r.group, "sample": r.sample, "attempts": self.attempts, "seed": r.seed,
                    "valid": self.valid, "solved": self.solved, "trial_status": self.status.value,
                    "verifier_solved": self.result.solved, "flags": list(self.flags)}
        written = replace(t, metadata=metadata, timings={**t.timings, **self.timings})
        return written.save(folder / f"{t.episode_id}.json", rewards=self.rewards, reward=self.reward)

    @classmethod
    def load_finished(cls, path: Path, request: EpisodeRequest, *, reward_shape: RewardShape,
                      flagged_episodes: FlaggedEpisodes = "zero") -> Episode | None:
        """The episode `save_trajectory` wrote to `path` for `request`, or None where there is nothing to reuse:
        no file, a file of another episode, one written before the trial's verdicts were recorded, or an
        episode without a valid reward (an infrastructure failure is run again)."""
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        meta = data.get("metadata") or {}
        if not meta.get("valid") or "trial_status" not in meta or data.get("task_name") != request.task.name:
            return None
        if (meta.get("group"), meta.get("sample"), meta.get("seed")) != (request.group, request.sample, request.seed):
            return None
        trajectory = Trajectory.from_dict(data)
        timings = data.get("timings") or {}
        result = TrialResult(task_name=request.task.name, task_path=str(request.task.path), agent="resumed",
                             status=EpisodeStatus(meta["trial_status"]), rewards=data.get("rewards"),
                             timings=PhaseTimings(**{k: timings[k] for k in TRIAL_PHASES if k in timings}),
                             flags=tuple(meta.get("flags") or ()), trajectory=trajectory)
        return cls(request=request, result=result, reward_shape=reward_shape, attempts=int(meta.get("attempts", 1)),
                   flagged_episodes=flagged_episodes)


class ThrottledEngine:
    """An Engine wrapper that caps generations in flight."""

    def __init__(self, engine: Engine, limit: int) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self._gate = asyncio.Semaphore(limit)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session_id: str | None = None) -> Completion:
        async with self._gate:
            return await self.engine.generate(prompt_ids, params, session_id=session_id)

    async def end_session(self, session_id: str) -> None:
        await self.engine.end_session(session_id)

    async def update_weights(self, state: Mapping[str, Any]) -> int:
        return await self.engine.update_weights(state)

    async def flush_cache(self) -> bool:
        return await self.engine.flush_cache()

    async def close(self) -> None:
        await self.engine.close()


async def run_episode(request: EpisodeRequest, *, engine: Engine, agent_config: AgentConfig,
                      rollout: RolloutConfig, profile: PromptProfile | None = None,
                      trajectory_dir: Path | None = None, sandbox_gate: asyncio.Semaphore | None = None,
                      give_up: Callable[[], bool] | None = None) -> Episode:
    """One episode with infrastructure retries: up to `rollout.max_infra_retries` more attempts after an
    infrastructure failure, none once `give_up()` is true (slime's generate hook: the rollout was aborted)."""
    shape = shape_for(request.task, rollout.reward_shape)
    attempts = 0
    while True:
        attempts += 1
        agent = AgentLoop(engine, config=agent_config, profile=profile, seed=request.seed)
        if sandbox_gate is not None:
            async with sandbox_gate:
                result = await run_trial(request.task, agent, options=rollout.trial)
        else:
            result = await run_trial(request.task, agent, options=rollout.trial)
        if not result.status.is_infrastructure or attempts > rollout.max_infra_retries or (give_up and give_up()):
            break
    episode = Episode(request=request, result=result, reward_shape=shape, attempts=attempts,
                      flagged_episodes=rollout.flagged_episodes)
    if trajectory_dir is not None:
        episode.save_trajectory(trajectory_dir)
    return episode


async def run_episodes(requests: Sequence[EpisodeRequest], *, engine: Engine, agent_config: AgentConfig,
                       rollout: RolloutConfig, profile: PromptProfile | None = None,
                       trajectory_dir: Path | None = None,
                       on_done: Callable[[Episode], None] | None = None) -> list[Episode]:
    """Run every request concurrently under the caps; results come back in request order."""
    if rollout.max_open_sandboxes < 1 or rollout.max_inflight_generations < 1:
        raise ValueError("max_open_sandboxes and max_inflight_generations must be at least 1")
    throttled = ThrottledEngine(engine, rollout.max_inflight_generations)
    gate = asyncio.Semaphore(rollout.max_open_sandboxes)

    async def one(request: EpisodeRequest) -> Episode:
        episode = await run_episode(request, engine=throttled, agent_config=agent_config, rollout=rollout,
                                    profile=profile, trajectory_dir=trajectory_dir, sandbox_gate=gate)
        if on_done is not None:
            on_done(episode)
        return episode

    return list(await asyncio.gather(*(one(r) for r in requests)))


async def run_episodes_with_progress(requests: Sequence[EpisodeRequest], *, label: str, console: Any = None,
                                     **kwargs: Any) -> list[Episode]:
    """`run_episodes` under a progress bar that counts finished and solved episodes."""
    from codedojo.progress import stage_progress

    with stage_progress(label, console=console, transient=True) as progress:
        bar = progress.add_task(label, total=len(requests), note="solved 0")
        solved = 0

        def done(episode: Episode) -> None:
            nonlocal solved
            solved += episode.solved
            progress.update(bar, advance=1, note=f"solved {solved}")

        return await run_episodes(requests, on_done=done, **kwargs)
