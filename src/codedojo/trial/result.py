"""What an episode ended with: a status that says whose outcome it is, the rewards, and timings.

The status separates three kinds of ending, and everything downstream (training, eval, metrics) reads
the kind from here rather than deciding again:

* agent outcomes — the agent submitted, gave up, hit a budget or kept answering badly: the reward the
  verifier gives is valid (usually 0 for the budget cases) and is trained on;
* infrastructure failures — the sandbox, the verifier, the inference engine or codedojo itself failed:
  there is no valid reward; the episode is retried, then excluded from training and group statistics;
* task outcomes — follow from the reward: `solved` when `reward >= 1`, otherwise the tests failed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal


class EpisodeStatus(StrEnum):
    SUBMITTED = "submitted"
    """The agent finished of its own accord (the oracle's script ran; a model submitted)."""
    AGENT_FAILED = "agent_failed"
    """The agent's own process exited with a non-zero code (e.g. the oracle's solve.sh failed)."""
    STEP_LIMIT = "step_limit"
    """The agent used its maximum number of turns."""
    EPISODE_TIMEOUT = "episode_timeout"
    """The agent ran past its wall-clock budget."""
    CONTEXT_LIMIT = "context_limit"
    """The conversation outgrew the model's context budget."""
    FORMAT_ERROR = "format_error"
    """The model answered without a usable command too many times in a row."""
    SANDBOX_ERROR = "sandbox_error"
    """The sandbox failed to start, died or lost a transfer (infrastructure)."""
    VERIFIER_ERROR = "verifier_error"
    """The verifier crashed, timed out or left no valid reward (infrastructure)."""
    ENGINE_ERROR = "engine_error"
    """The inference engine failed (infrastructure)."""
    TASK_ERROR = "task_error"
    """The task cannot run as written here: a `${VAR}` its env tables need is not set on the host, the oracle
    has no solve.sh, or it needs what the backend refuses (infrastructure: fix the task or the run)."""
    INTERNAL_ERROR = "internal_error"
    """A bug in codedojo itself; the error carries the traceback (infrastructure)."""

    @property
    def is_infrastructure(self) -> bool:
        """No valid reward: retried, then excluded from training and group statistics."""
        return self in _INFRASTRUCTURE

    @property
    def is_truncated(self) -> bool:
        """The agent ran out of a budget (turns, context, wall clock): an agent outcome, its reward valid."""
        return self in _TRUNCATED


_INFRASTRUCTURE = frozenset({
    EpisodeStatus.SANDBOX_ERROR, EpisodeStatus.VERIFIER_ERROR, EpisodeStatus.ENGINE_ERROR,
    EpisodeStatus.TASK_ERROR, EpisodeStatus.INTERNAL_ERROR,
})
_TRUNCATED = frozenset({EpisodeStatus.STEP_LIMIT, EpisodeStatus.CONTEXT_LIMIT, EpisodeStatus.EPISODE_TIMEOUT})

FailureKind = Literal["infrastructure", "agent", "task"]


@dataclass(frozen=True, kw_only=True)
class PhaseTimings:
    """Wall seconds per phase; None for a phase that did not run."""

    environment_setup: float | None = None
    agent: float | None = None
    verifier: float | None = None
    teardown: float | None = None


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
    trajectory: Any = field(default=None, repr=False, compare=False)
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
