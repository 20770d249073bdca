"""Memoisation on top of the LRU cache."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cachebox.lru import LRUCache


def make_key(args: tuple, kwargs: dict[str, Any]) -> tuple:
    """A hashable key; keyword order does not matter."""
    return args + tuple(sorted(kwargs.items()))


def memoize(capacity: int = 128) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        cache = LRUCache(capacity)
        missing = object()

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = make_key(args, kwargs)
            value = cache.get(key, missing)
            if value is missing:
                value = func(*args, **kwargs)
                cache.put(key, value)
            return value

        wrapper.cache = cache  # type: ignore[attr-defined]
        return wrapper

    return decorate
