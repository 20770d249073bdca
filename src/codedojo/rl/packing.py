"""Token-budget micro-batches: sequences packed end to end, no padding, no attention across them.

`pack` assigns sequences to micro-batches of at most `max_tokens` tokens (first-fit over lengths in
decreasing order, which wastes little room). A sequence longer than the budget gets a micro-batch of its
own and is reported, since it cannot be split without cutting its attention context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MicroBatch:
    indices: tuple[int, ...]
    """Sequences in this micro-batch, in packing order."""
    num_tokens: int


def pack(lengths: Sequence[int], *, max_tokens: int) -> list[MicroBatch]:
    """Group sequence indices into micro-batches whose total length is at most `max_tokens`."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if any(n < 1 for n in lengths):
        raise ValueError("every sequence needs at least one token")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = lengths[i]
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(max_tokens - n)
    return [MicroBatch(indices=tuple(b), num_tokens=sum(lengths[i] for i in b)) for b in bins]


def position_ids(lengths: Sequence[int]) -> list[int]:
    """Positions restarting at 0 for each packed sequence."""
    return [p for n in lengths for p in range(n)]
