"""Group-relative advantages (GRPO) over the valid members of each group.

An episode that ended in an infrastructure failure has no reward; it is left out of its group's mean and
standard deviation (it must not pull the baseline towards 0) and gets advantage 0. A group with fewer
than two valid members has no baseline to compare against: every member gets 0.

GRPO normalises by the group's standard deviation (unbiased, as torch.std and slime compute it);
Dr.GRPO is the same without that division (`normalize_std=False`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def group_advantages(
    rewards: Sequence[float | None], *, normalize_std: bool = True, eps: float = 1e-6
) -> list[float]:
    """Advantages of one group; `None` marks an invalid member (advantage 0, not in the statistics)."""
    valid = [r for r in rewards if r is not None]
    if len(valid) < 2:
        return [0.0] * len(rewards)
    mean = sum(valid) / len(valid)
    std = math.sqrt(sum((r - mean) ** 2 for r in valid) / (len(valid) - 1))
    scale = 1.0 / (std + eps) if normalize_std else 1.0
    return [0.0 if r is None else (r - mean) * scale for r in rewards]


def is_uniform(rewards: Sequence[float | None]) -> bool:
    """True when the valid rewards are all equal: the group carries no learning signal."""
    valid = [r for r in rewards if r is not None]
    return len(valid) < 2 or max(valid) == min(valid)
