"""An episode as data: what a person reads and what the trainer learns from, in one file.

`Trajectory` holds what the agent did: the readable conversation (messages, and per turn the command, its
output, exit code and timings) and the token arrays (ids, loss mask, sampler logprobs) that the trainer
consumes. It holds no reward: the verifier's rewards are the trial's (`trial.result.TrialResult`) and the
training reward the rollout's (`rollout.episodes.Episode`). It is written as one JSON file per episode, to which
the episode adds its rewards, place in its group and phase timings (`Episode.save_trajectory`; the keys are
null in a file saved before verification); `Trajectory.load` reads the trajectory back.

Invariants (checked by `validate`): the three token arrays have the same length; the loss mask is 1
exactly on sampled tokens; every masked-in token has the engine's logprob.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from codedojo.trial.status import EpisodeStatus

FORMAT_VERSION = "codedojo-trajectory-1"


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One model reply and what came of it."""

    index: int
    prompt_tokens: int
    """Sequence length when the model was asked."""
    cached_tokens: int
    """Prompt tokens the engine reused from its cache."""
    sampled_tokens: int
    finish_reason: str
    weight_version: int
    command: str | None = None
    """The parsed command; None after a format error."""
    format_error: str | None = None
    return_code: int | None = None
    timed_out: bool = False
    output_chars: int = 0
    """Length of the command's full output (before it was shortened for the model)."""
    generate_sec: float = 0.0
    exec_sec: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Trajectory:
    """One episode of the agent loop."""

    episode_id: str
    task_name: str
    task_path: str
    status: EpisodeStatus
    messages: list[dict[str, Any]]
    turns: list[Turn]
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    prompt_length: int
    """Tokens of the opening prompt (system, examples, task)."""
    drift: int = 0
    """Positions where a full re-render of the messages differs from the kept tokens."""
    detail: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Episode totals: generate, exec, sandbox start, verify, total."""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def num_sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    def validate(self) -> None:
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(f"token arrays differ in length: ids {n}, mask {len(self.loss_mask)}, "
                             f"logprobs {len(self.logprobs)}")
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss mask values must be 0 or 1")
        if sum(t.sampled_tokens for t in self.turns) != self.num_sampled_tokens:
            raise ValueError(f"turns sampled {sum(t.sampled_tokens for t in self.turns)} tokens but the mask "
                             f"covers {self.num_sampled_tokens}")
        if any(m == 0 and lp != 0.0 for m, lp in zip(self.loss_mask, self.logprobs, strict=True)):
            raise ValueError("a masked-out token carries a logprob")

    def to_dict(self, *, rewards: dict[str, float] | None = None, reward: float | None = None) -> dict[str, Any]:
        """The file form, with the episode's verified `rewards` and training `reward` (None before verification
        or without a valid reward) between the timings and the metadata."""
        data = asdict(self)
        metadata = data.pop("metadata")
        data.update(status=str(self.status), rewards=rewards, reward=reward, metadata=metadata)
        return {"format": FORMAT_VERSION, **data}

    def save(self, path: Path, *, rewards: dict[str, float] | None = None, reward: float | None = None) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(rewards=rewards, reward=reward), separators=(",", ":")) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """The trajectory of a file's form; its `rewards` and `reward` (the episode's) are not part of it."""
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"not a {FORMAT_VERSION} file (format {data.get('format')!r})")
        fields = {k: v for k, v in data.items() if k not in ("format", "rewards", "reward")}
        fields["status"] = EpisodeStatus(fields["status"])
        fields["turns"] = [Turn(**t) for t in fields["turns"]]
        return cls(**fields)

    @classmethod
    def load(cls, path: Path) -> Trajectory:
        return cls.from_dict(json.loads(Path(path).read_text()))
