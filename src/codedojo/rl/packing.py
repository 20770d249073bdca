"""Token-budget micro-batches: sequences packed end to end, no padding, no attention across them.

`pack` assigns sequences to micro-batches of at most `max_tokens` tokens (first-fit over lengths in
decreasing order, which wastes little room). A sequence longer than the budget gets a micro-batch of its
own, since it cannot be split without cutting its attention context.

`pack_groups` does the same for sequences in groups whose members share a token prefix that the
trainer lays out once (codedojo.train.packed): members of a group go to the same micro-batch as far as
the budget allows, and a micro-batch's size counts each shared prefix once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
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


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix all `sequences` share."""
    if not sequences:
        return 0
    first = sequences[0]
    n = min(len(s) for s in sequences)
    for t in range(n):
        token = first[t]
        if any(s[t] != token for s in sequences[1:]):
            return t
    return n


def shared_prefix_length(sequences: Sequence[Sequence[int]], *, min_shared: int) -> int:
    """The prefix a group of `sequences` lays out once: their common prefix, leaving every member at least
    one token of its own, or 0 when that is shorter than `min_shared` or there is one member."""
    if len(sequences) < 2:
        return 0
    shared = min(common_prefix_length(sequences), min(len(s) for s in sequences) - 1)
    return shared if shared >= min_shared else 0


def shared_size(sequences: Sequence[Sequence[int]], *, min_shared: int) -> int:
    """Tokens a group of `sequences` occupies with its shared prefix laid out once."""
    shared = shared_prefix_length(sequences, min_shared=min_shared)
    return sum(len(s) for s in sequences) - shared * max(len(sequences) - 1, 0)


def pack_groups(sequences: Sequence[Sequence[int]], groups: Sequence[Hashable], *, max_tokens: int,
                min_shared: int) -> list[MicroBatch]:
    """Micro-batches of at most `max_tokens` laid-out tokens, members of a group kept together.

    Each group is cut into runs of members (in their given order) whose shared layout fits the budget;
    the runs are then packed first-fit like single sequences."""
    if len(groups) != len(sequences):
        raise ValueError(f"{len(groups)} group keys for {len(sequences)} sequences")
    by_key: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        by_key.setdefault(key, []).append(i)
    runs: list[list[int]] = []
    for members in by_key.values():
        run: list[int] = []
        for i in members:
            trial = [*run, i]
            if run and shared_size([sequences[j] for j in trial], min_shared=min_shared) > max_tokens:
                runs.append(run)
                trial = [i]
            run = trial
        runs.append(run)
    sizes = [shared_size([sequences[j] for j in run], min_shared=min_shared) for run in runs]
    return [MicroBatch(indices=tuple(i for r in mb.indices for i in runs[r]), num_tokens=mb.num_tokens)
            for mb in pack(sizes, max_tokens=max_tokens)]

