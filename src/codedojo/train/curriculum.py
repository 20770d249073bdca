"""The tier curriculum: which tier each step's tasks come from, moved by the model's pass rate.

`CurriculumSampler` has the shape of `TaskSampler` (`take`, `state`, `restore`) plus `record`, which the
trainer calls with each step's episodes. Within a tier, tasks come in shuffled passes (one `TaskSampler` per
tier); across tiers, a step's `count` tasks are split by the shares with the largest-remainder rule, so the
counts are deterministic and a tier with share 0 gets none. The rule that moves the shares is
`CurriculumConfig`'s (codedojo.config.recipe); `shares_after` applies it and is a pure function.

Per-tier metrics (`tier_metrics`) are computed for any run whose tasks span several tiers, curriculum or
not: episodes, pass rate and the share of groups with mixed rewards (the groups GRPO learns from) per tier.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from codedojo.config.recipe import CurriculumConfig
from codedojo.train.state import TaskSampler


def shares_after(shares: Sequence[float], rates: Sequence[float | None], config: CurriculumConfig
                 ) -> tuple[list[float], list[bool]]:
    """The shares after one step, and which tiers retired on it. `rates[i]` is tier i's rolling pass rate,
    None while it has fewer than `min_episodes` episodes. Shares move from tier i to tier i + 1 only,
    hardest pair first, so a share moves at most one tier a step."""
    out = list(shares)
    retired = [False] * len(out)
    for i in range(len(out) - 2, -1, -1):
        rate = rates[i]
        if rate is None or out[i] <= 0:
            continue
        if rate >= config.retire_at:
            moved, retired[i] = out[i], True
        elif rate >= config.promote_at:
            moved = min(config.shift, out[i])
        else:
            continue
        out[i] -= moved
        out[i + 1] += moved
    return out, retired


def split_count(count: int, shares: Sequence[float]) -> list[int]:
    """`count` split by `shares` (largest remainder; ties to the easier tier): sums to `count`."""
    raw = [count * s / sum(shares) for s in shares]
    counts = [int(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[: count - sum(counts)]:
        counts[i] += 1
    return counts


@dataclass
class CurriculumSampler:
    """Tasks by tier, with shares that follow the pass rate (see the module docstring)."""

    config: CurriculumConfig
    task_tiers: Sequence[str]
    """The tier of each training task, by task index."""
    seed: int
    shares: list[float] = field(default_factory=list)
    recent: list[deque[float]] = field(default_factory=list)
    """Each tier's last `window` rewards (1.0 solved)."""
    _samplers: list[TaskSampler] = field(default_factory=list)
    _members: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        tiers = self.config.tiers
        unknown = sorted({t for t in self.task_tiers if t not in tiers})
        if unknown:
            raise ValueError(f"training tasks of tiers {unknown} are not in the curriculum's tiers {list(tiers)}: "
                             "add them to CurriculumConfig.tiers or leave those tasks out")
        self._members = [[i for i, t in enumerate(self.task_tiers) if t == tier] for tier in tiers]
        empty = [tier for tier, members in zip(tiers, self._members, strict=True) if not members]
        if empty:
            raise ValueError(f"the curriculum's tiers {empty} have no training task: every tier in "
                             "CurriculumConfig.tiers needs tasks whose metadata.tier names it")
        self._samplers = [TaskSampler(num_tasks=len(m), seed=self.seed * 31 + k) for k, m in enumerate(self._members)]
        if not self.shares:
            self.shares = list(self.config.start) if self.config.start else [1.0] + [0.0] * (len(tiers) - 1)
        self.recent = [deque(maxlen=self.config.window) for _ in tiers]

    def take(self, count: int) -> list[int]:
        """`count` task indices, split over the tiers by their shares."""
        picked: list[int] = []
        for k, n in enumerate(split_count(count, self.shares)):
            picked += [self._members[k][j] for j in self._samplers[k].take(n)]
        return picked

    def rates(self) -> list[float | None]:
        """Each tier's rolling pass rate (None before `min_episodes` episodes)."""
        return [sum(r) / len(r) if len(r) >= self.config.min_episodes else None for r in self.recent]

    def record(self, outcomes: Sequence[tuple[str, float]]) -> dict[str, float]:
        """Take a step's (tier, reward) pairs (infrastructure failures left out by the caller), move the shares,
        and return the step's curriculum metrics: each tier's share for the step just run, its rolling pass rate
        and whether it retired."""
        index = {tier: k for k, tier in enumerate(self.config.tiers)}
        for tier, reward in outcomes:
            self.recent[index[tier]].append(1.0 if reward >= 1.0 else 0.0)
        rates = self.rates()
        metrics: dict[str, float] = {}
        for tier, share, rate in zip(self.config.tiers, self.shares, rates, strict=True):
            metrics[f"curriculum/{tier}/share"] = share
            if rate is not None:
                metrics[f"curriculum/{tier}/pass_rate"] = rate
        self.shares, retired = shares_after(self.shares, rates, self.config)
        for tier, done in zip(self.config.tiers, retired, strict=True):
            if done:
                metrics[f"curriculum/{tier}/retired"] = 1.0
        return metrics

    def state(self) -> dict[str, Any]:
        return {"shares": list(self.shares), "recent": [list(r) for r in self.recent],
                "samplers": [s.state() for s in self._samplers]}

    def restore(self, state: dict[str, Any]) -> None:
        self.shares = list(state["shares"])
        for deq, values in zip(self.recent, state["recent"], strict=True):
            deq.clear()
            deq.extend(values)
        for sampler, saved in zip(self._samplers, state["samplers"], strict=True):
            sampler.restore(saved)


def tier_metrics(groups: Sequence[tuple[str, Sequence[float]]]) -> dict[str, float]:
    """Per tier, from (tier, rewards of one group) pairs: `tier/<tier>/episodes`, `tier/<tier>/pass_rate` and
    `tier/<tier>/mixed_group_frac` (groups whose rewards are not all equal)."""
    by_tier: dict[str, list[Sequence[float]]] = {}
    for tier, rewards in groups:
        if rewards:
            by_tier.setdefault(tier, []).append(rewards)
    out: dict[str, float] = {}
    for tier, members in sorted(by_tier.items()):
        rewards = [r for group in members for r in group]
        out[f"tier/{tier}/episodes"] = float(len(rewards))
        out[f"tier/{tier}/pass_rate"] = sum(1.0 for r in rewards if r >= 1.0) / len(rewards)
        out[f"tier/{tier}/mixed_group_frac"] = sum(1.0 for g in members if len(set(g)) > 1) / len(members)
    return out
