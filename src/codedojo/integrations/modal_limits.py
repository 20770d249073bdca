"""Pacing Modal sandbox creation: a token bucket for the account's creation rate and a cap on boots.

Modal limits sandbox creation per account with a token bucket (5 creations per second refill, burst 150;
past it `Sandbox.create` fails with RESOURCE_EXHAUSTED). One bucket per process paces every creation of
every episode, so a rollout of 256 episodes starts 150 at once and the rest at 5/s instead of failing.
The boot cap bounds sandboxes being created at once (image pulls and boots are what is slow); it does
not bound sandboxes alive, which slime's generation semaphore already does.

Nothing here imports modal: the math is tested with an injected clock, without sleeping.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable

DEFAULT_RATE_PER_SEC = 5.0
DEFAULT_BURST = 150
DEFAULT_MAX_BOOTS = 32


class TokenBucket:
    """`rate` tokens per second up to `burst`; each creation takes one, waiting when none is left.

    Reservations may drive the count below zero: the k-th caller past an empty bucket is told to wait
    k / rate seconds, so waiters are served in arrival order and the account rate is never exceeded.
    Thread-safe (slime's rollout may run episodes on several event loops in one process)."""

    def __init__(self, *, rate: float = DEFAULT_RATE_PER_SEC, burst: int = DEFAULT_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"rate must be > 0 and burst >= 1, got rate={rate}, burst={burst}")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token; return how many seconds to wait before using it (0.0 when one was there)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    @property
    def available(self) -> float:
        """Tokens left now (negative while callers wait)."""
        with self._lock:
            return min(float(self.burst), self._tokens + (self._clock() - self._last) * self.rate)

    async def acquire(self, *, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> float:
        """Reserve a token and wait for it; returns the seconds waited."""
        wait = self.reserve()
        if wait > 0:
            await sleep(wait)
        return wait


_bucket: TokenBucket | None = None
_bucket_lock = threading.Lock()


def creation_bucket() -> TokenBucket:
    """The process-wide bucket (CODEDOJO_MODAL_CREATE_RATE / CODEDOJO_MODAL_CREATE_BURST override the
    account defaults, e.g. for an account with a raised limit)."""
    global _bucket
    with _bucket_lock:
        if _bucket is None:
            _bucket = TokenBucket(rate=float(os.environ.get("CODEDOJO_MODAL_CREATE_RATE", DEFAULT_RATE_PER_SEC)),
                                  burst=int(os.environ.get("CODEDOJO_MODAL_CREATE_BURST", DEFAULT_BURST)))
        return _bucket


_boot_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def boot_gate() -> asyncio.Semaphore:
    """This event loop's cap on sandboxes booting at once (CODEDOJO_MODAL_MAX_BOOTS, default 32).
    One semaphore per loop: asyncio primitives belong to the loop that first waits on them."""
    loop = asyncio.get_running_loop()
    gate = _boot_gates.get(loop)
    if gate is None:
        gate = _boot_gates[loop] = asyncio.Semaphore(int(os.environ.get("CODEDOJO_MODAL_MAX_BOOTS",
                                                                        DEFAULT_MAX_BOOTS)))
    return gate
