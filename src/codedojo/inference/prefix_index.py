"""Finding parked KV that shares a prefix with a new prompt, without comparing against every entry.

Each parked sequence is registered under the chained hash of every whole block of `BLOCK_TOKENS` tokens
it starts with (hash of block 0, hash of (hash 0, block 1), ...). A prompt walks its own block hashes as
far as some entry shares them; the entries registered under the deepest shared hash are the candidates
and the caller measures their exact common prefix (which may run past that block boundary). A hash
collision can only add a candidate whose exact comparison then comes out short, never a wrong reuse.

Invariants: an entry is registered under exactly the hashes of its whole blocks; `remove` undoes `add`.
A prefix shorter than one block is not found through the index (the scheduler still checks a session's
own parked KV and the running rows directly).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar

import numpy as np

BLOCK_TOKENS = 16
# Exact comparisons per lookup: the most recently added entries under the deepest shared hash.
MAX_CANDIDATES = 8

Entry = TypeVar("Entry", bound=Hashable)


def block_hashes(tokens: np.ndarray) -> Iterator[int]:
    """Chained hashes of the whole blocks of tokens [n] int64, first block first."""
    chain = 0
    for start in range(0, len(tokens) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
        chain = hash((chain, tokens[start : start + BLOCK_TOKENS].tobytes()))
        yield chain


class PrefixIndex(Generic[Entry]):
    def __init__(self) -> None:
        self._by_hash: dict[int, dict[Entry, None]] = {}  # dicts as insertion-ordered sets
        self._hashes: dict[Entry, list[int]] = {}

    def __len__(self) -> int:
        return len(self._hashes)

    def add(self, entry: Entry, tokens: np.ndarray, *, hashes: list[int] | None = None) -> None:
        """Register entry under tokens' block hashes (`hashes`: those, when the caller has them already)."""
        self.remove(entry)
        hashes = list(block_hashes(tokens)) if hashes is None else hashes
        self._hashes[entry] = hashes
        for h in hashes:
            self._by_hash.setdefault(h, {})[entry] = None

    def remove(self, entry: Entry) -> None:
        for h in self._hashes.pop(entry, ()):
            holders = self._by_hash[h]
            holders.pop(entry, None)
            if not holders:
                del self._by_hash[h]

    def candidates(self, prompt: np.ndarray, *, hashes: Iterable[int] | None = None) -> list[Entry]:
        """Entries sharing the most whole blocks with prompt (newest first, at most MAX_CANDIDATES);
        `hashes`: block_hashes(prompt), when the caller has them already."""
        deepest: dict[Entry, None] | None = None
        for h in block_hashes(prompt) if hashes is None else hashes:
            holders = self._by_hash.get(h)
            if holders is None:
                break
            deepest = holders
        if deepest is None:
            return []
        return list(reversed(deepest))[:MAX_CANDIDATES]
