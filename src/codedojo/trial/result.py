"""What a trial ended with: its status (`trial.status.EpisodeStatus`), the verifier's rewards, timings, and
the agent's trajectory.

`TrialResult` is where an episode's verified rewards are stored, and the one place that decides from them
whether the reward is valid, whether the task was solved and whose failure it was; the rollout's `Episode`
and everything after it ask it rather than deciding again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from codedojo.trial.status import EpisodeStatus
from codedojo.trial.trajectory import Trajectory

FailureKind = Literal["infrastructure", "agent", "task"]


@dataclass(frozen=True, kw_only=True)
class PhaseTimings:
    """Wall seconds per phase; None for a phase that did not run."""

    environment_setup: float | None = None
    agent: float | None = None
    verifier: float | None = None
    teardown: float | None = None


TRIAL_PHASES = tuple(f.name for f in fields(PhaseTimings))
"""The trial's phases, in order; the episode holds its sandbox through all of them."""


@dataclass(frozen=True, kw_only=True)
class TrialResult:
    """One episode: task, agent, status, rewards, timings and where its logs are."""

    task_name: str
    task_path: str
    agent: str
    status: EpisodeStatus
    rewards: dict[str, float] | None = None
    """The verifier's rewards (reward.json, or {"reward": x} from reward.txt); None when invalid."""
    error: str | None = None
    """What went wrong, for infrastructure failures and failed agents."""
    agent_exit_code: int | None = None
    timings: PhaseTimings = field(default_factory=PhaseTimings)
    trial_dir: str | None = None
    """Host directory with result.json, agent/ and verifier/ (test-stdout.txt, reward file)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Extra facts from the agent (turn counts, token counts, ...)."""
    flags: tuple[str, ...] = ()
    """Reward-hacking flags the trial raised (codedojo.trial.hacking.FLAGS); the verifier's verdict stands beside
    them, and what a flagged episode's training reward is, the rollout decides."""
    trajectory: Trajectory | None = field(default=None, repr=False, compare=False)
    """The agent's trajectory, when it keeps one; not part of the JSON form (it is saved on its own)."""

    @property
    def reward(self) -> float | None:
        return None if self.rewards is None else self.rewards.get("reward")

    @property
    def reward_valid(self) -> bool:
        return not self.status.is_infrastructure and self.reward is not None

    @property
    def solved(self) -> bool:
        return self.reward_valid and (self.reward or 0.0) >= 1.0

    @property
    def failure_kind(self) -> FailureKind | None:
        if self.status.is_infrastructure or not self.reward_valid:
            return "infrastructure"
        if self.solved:
            return None
        return "task" if self.status is EpisodeStatus.SUBMITTED else "agent"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, trajectory=None))
        del data["trajectory"]
        data["status"] = str(self.status)
        data.update(reward=self.reward, solved=self.solved, failure_kind=self.failure_kind)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
