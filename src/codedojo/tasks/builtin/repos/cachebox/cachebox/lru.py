"""A least-recently-used cache with statistics."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return 0.0 if total == 0 else round(self.hits / total, 3)


class LRUCache:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.data: OrderedDict[Hashable, Any] = OrderedDict()
        self.stats = Stats()

    def get(self, key: Hashable, default: Any = None) -> Any:
        if key not in self.data:
            self.stats.misses += 1
            return default
        self.stats.hits += 1
        self.data.move_to_end(key)
        return self.data[key]

    def put(self, key: Hashable, value: Any) -> None:
        if key in self.data:
            self.data.move_to_end(key)
        self.data[key] = value
        while len(self.data) > self.capacity:
            self.data.popitem(last=False)
            self.stats.evictions += 1

    def peek(self, key: Hashable) -> Any:
        """The value without touching recency or statistics; KeyError when absent."""
        return self.data[key]

    def pop(self, key: Hashable) -> Any:
        return self.data.pop(key)

    def resize(self, capacity: int) -> list[Hashable]:
        """Change the capacity; returns the keys evicted, oldest first."""
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        evicted = []
        while len(self.data) > capacity:
            key, _ = self.data.popitem(last=False)
            evicted.append(key)
            self.stats.evictions += 1
        return evicted

    def keys(self) -> list[Hashable]:
        """Keys from least to most recently used."""
        return list(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.data
