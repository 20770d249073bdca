"""How an episode ended: the one enum every layer reads the kind of ending from.

The status separates three kinds of ending, and everything downstream (training, eval, metrics) reads
the kind from here rather than deciding again:

* agent outcomes — the agent submitted, gave up, hit a budget or kept answering badly: the reward the
  verifier gives is valid (usually 0 for the budget cases) and is trained on; among them the truncated ones
  (`is_truncated`: a turn, context or wall-clock budget ran out);
* infrastructure failures (`is_infrastructure`) — the sandbox, the verifier, the inference engine or codedojo
  itself failed: there is no valid reward; the episode is retried, then excluded from training and group
  statistics;
* task outcomes — follow from the reward (`trial.result.TrialResult.solved`): solved when `reward >= 1`,
  otherwise the tests failed.

Code elsewhere asks these properties; it never compares status strings.
"""

from __future__ import annotations

from enum import StrEnum


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
