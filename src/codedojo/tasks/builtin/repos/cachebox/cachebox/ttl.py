"""A cache whose entries expire, with an injectable clock for tests."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class ManualClock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self.now += seconds


class TTLCache:
    def __init__(self, ttl: float, *, clock: Callable[[], float], max_entries: int = 0) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.ttl = ttl
        self.clock = clock
        self.max_entries = max_entries
        self.entries: dict[Hashable, tuple[float, Any]] = {}

    def put(self, key: Hashable, value: Any, *, ttl: float | None = None) -> None:
        lifetime = self.ttl if ttl is None else ttl
        self.entries[key] = (self.clock() + lifetime, value)
        if self.max_entries and len(self.entries) > self.max_entries:
            self.purge()
            while len(self.entries) > self.max_entries:
                oldest = min(self.entries, key=lambda k: self.entries[k][0])
                del self.entries[oldest]

    def get(self, key: Hashable, default: Any = None) -> Any:
        entry = self.entries.get(key)
        if entry is None:
            return default
        expires, value = entry
        if self.clock() >= expires:
            del self.entries[key]
            return default
        return value

    def ttl_left(self, key: Hashable) -> float:
        """Seconds until `key` expires, 0 when it is absent or expired."""
        entry = self.entries.get(key)
        if entry is None:
            return 0.0
        return max(0.0, entry[0] - self.clock())

    def purge(self) -> int:
        """Drop expired entries; returns how many."""
        now = self.clock()
        dead = [k for k, (expires, _) in self.entries.items() if now >= expires]
        for k in dead:
            del self.entries[k]
        return len(dead)

    def __len__(self) -> int:
        return len(self.entries)
