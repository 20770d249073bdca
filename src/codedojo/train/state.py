"""`TrainState`: everything a run continues from, which a checkpoint saves and a resume restores whole.

    policy        the trainable weights (all of them, or the LoRA adapters)
    optimizer     AdamW's moments and step counts
    scheduler     the learning-rate schedule's position
    sampler       the task sampler's pass and position (`TaskSampler`), or the curriculum's shares and
                  rolling pass rates with each tier's pass and position (`CurriculumSampler`)
    shuffle_rng   the generator that orders samples into optimizer steps
    step          the next rollout to run

train.checkpoint saves and restores the global torch generator's state with it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from codedojo.train.policy import Policy


@dataclass
class TaskSampler:
    """Shuffled passes over the training tasks, resumable from (epoch, position)."""

    num_tasks: int
    seed: int
    epoch: int = 0
    position: int = 0
    _order: list[int] = field(default_factory=list)

    def _shuffle(self) -> None:
        self._order = list(range(self.num_tasks))
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(self._order)

    def take(self, count: int) -> list[int]:
        if not self._order:
            self._shuffle()
        picked = []
        for _ in range(count):
            if self.position >= self.num_tasks:
                self.epoch += 1
                self.position = 0
                self._shuffle()
            picked.append(self._order[self.position])
            self.position += 1
        return picked

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._shuffle()


class Sampler(Protocol):
    """What picks each step's tasks: `TaskSampler`, or `train.curriculum.CurriculumSampler`."""

    def take(self, count: int) -> list[int]: ...

    def state(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...


@dataclass
class TrainState:
    """What a run continues from (see the module docstring)."""

    policy: Policy
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: Sampler
    shuffle_rng: random.Random
    step: int = 0
    """The next rollout to run (the number of steps trained)."""
