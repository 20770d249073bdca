"""The scalar a trainer learns from, under a reward shape.

* `binary`: 1 when the task is solved (the verifier's `reward` is at least 1), else 0;
* `fractional`: the share of FAIL_TO_PASS tests that pass, and 0 if any PASS_TO_PASS test breaks
  (from the `fail_to_pass` / `pass_to_pass` keys of reward.json; tasks without them give their `reward`).

A task may choose its own shape with `[metadata] reward_shape = "..."`, which wins over the run's.
Infrastructure failures have no reward under any shape.
"""

from __future__ import annotations

from typing import Literal, get_args

from codedojo.tasks.task import Task
from codedojo.trial.result import TrialResult

RewardShape = Literal["binary", "fractional"]
REWARD_SHAPES: tuple[str, ...] = get_args(RewardShape)


def shape_for(task: Task, default: RewardShape) -> RewardShape:
    chosen = task.config.metadata.get("reward_shape", default)
    if chosen not in REWARD_SHAPES:
        raise ValueError(f"{task.path}: [metadata] reward_shape = {chosen!r}; expected one of {REWARD_SHAPES}")
    return chosen  # type: ignore[no-any-return]


def shaped_reward(result: TrialResult, shape: RewardShape) -> float | None:
    if not result.reward_valid or result.rewards is None:
        return None
    rewards = result.rewards
    if shape == "binary":
        return 1.0 if rewards["reward"] >= 1.0 else 0.0
    if "fail_to_pass" in rewards and "pass_to_pass" in rewards:
        return rewards["fail_to_pass"] if rewards["pass_to_pass"] >= 1.0 else 0.0
    return rewards["reward"]
