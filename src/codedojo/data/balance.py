"""Balanced subsets: how many tasks each (language, difficulty) stratum gets, and which tasks fill them.

The guarantee (tested in tests/test_data_split.py): a subset of `size` tasks has exactly `size` tasks,
and every stratum holds within one task of `size * weight` (largest-remainder rounding), as long as the
pool has enough tasks of every stratum. When a stratum runs short, it gets all it has, the rest of its
share goes to the other strata in proportion to their weights, and the report names the shortfall.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from codedojo.data.rows import Row, Stratum, repository, stratum

Balance = Literal["proportional", "equal"]


def target_weights(rows: Sequence[Row], *, balance: Balance) -> dict[Stratum, float]:
    """Share of each stratum: as in `rows` (proportional) or the same for every stratum present (equal)."""
    counts = Counter(stratum(r) for r in rows)
    if not counts:
        raise ValueError("no rows to balance")
    if balance == "equal":
        return {s: 1 / len(counts) for s in sorted(counts)}
    if balance != "proportional":
        raise ValueError(f"balance must be 'proportional' or 'equal', got {balance!r}")
    return {s: counts[s] / len(rows) for s in sorted(counts)}


def apportion(size: int, weights: Mapping[Stratum, float], *,
              caps: Mapping[Stratum, int] | None = None) -> dict[Stratum, int]:
    """Whole quotas summing to `size` (or to what the caps allow): largest remainders of size * weight.

    A capped stratum keeps its cap and the remaining size is apportioned again over the others.
    """
    caps = dict(caps) if caps is not None else {s: size for s in weights}
    quotas = dict.fromkeys(weights, 0)
    open_strata = [s for s in sorted(weights) if weights[s] > 0 and caps.get(s, 0) > 0]
    left = min(size, sum(caps.get(s, 0) for s in open_strata))
    while left > 0 and open_strata:
        total = sum(weights[s] for s in open_strata)
        exact = {s: left * weights[s] / total for s in open_strata}
        share = {s: math.floor(exact[s]) for s in open_strata}
        by_remainder = sorted(open_strata, key=lambda s: (-(exact[s] - share[s]), s))
        for s in by_remainder[: left - sum(share.values())]:
            share[s] += 1
        # Only a share above its cap counts: re-apportioning strata that fit would move their quotas.
        capped = [s for s in open_strata if share[s] > caps[s]]
        if not capped:
            for s in open_strata:
                quotas[s] += share[s]
            break
        for s in capped:  # fill the capped strata and share out the rest again
            left -= caps[s]
            quotas[s] = caps[s]
        open_strata = [s for s in open_strata if s not in capped]
    return quotas


def pick(rows: Sequence[Row], quotas: Mapping[Stratum, int], *, rng: random.Random) -> list[Row]:
    """`quotas[s]` rows of each stratum, taken round-robin over repositories so that no repository
    dominates; the order within a repository and of the repositories is shuffled by `rng`."""
    grouped: dict[Stratum, dict[str, list[Row]]] = {}
    for row in rows:
        grouped.setdefault(stratum(row), {}).setdefault(repository(row), []).append(row)
    chosen: list[Row] = []
    for s in sorted(quotas):
        by_repo = grouped.get(s, {})
        repos = sorted(by_repo)
        rng.shuffle(repos)
        queues = []
        for repo in repos:
            queue = list(by_repo[repo])
            rng.shuffle(queue)
            queues.append(queue)
        taken: list[Row] = []
        while len(taken) < quotas[s] and any(queues):
            for queue in queues:
                if queue and len(taken) < quotas[s]:
                    taken.append(queue.pop())
        chosen.extend(taken)
    return chosen


@dataclass(frozen=True, kw_only=True)
class StratumLine:
    stratum: Stratum
    target: float
    """size * weight: the exact share."""
    count: int
    available: int


def balance_lines(chosen: Sequence[Row], pool: Sequence[Row], *, size: int,
                  weights: Mapping[Stratum, float]) -> list[StratumLine]:
    counts = Counter(stratum(r) for r in chosen)
    available = Counter(stratum(r) for r in pool)
    return [StratumLine(stratum=s, target=size * w, count=counts.get(s, 0), available=available.get(s, 0))
            for s, w in sorted(weights.items())]


def max_deviation(lines: Sequence[StratumLine]) -> float:
    """The largest |count - target| over the strata: at most 1 when no stratum ran short."""
    return max((abs(line.count - line.target) for line in lines), default=0.0)


def format_lines(lines: Sequence[StratumLine], *, title: str) -> str:
    out = [title, f"  {'language':<12} {'difficulty':<10} {'target':>8} {'count':>6} {'pool':>6}"]
    for line in lines:
        short = "  short" if line.count < math.floor(line.target) else ""
        out.append(f"  {line.stratum[0]:<12} {line.stratum[1]:<10} {line.target:>8.2f} {line.count:>6} "
                   f"{line.available:>6}{short}")
    return "\n".join(out)
