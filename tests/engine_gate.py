"""A gate on a `LocalEngine`'s steps, so that a test, not the speed of the CPU, decides how far a request
has got when an abort, a pause, a weight update or a cancellation reaches it.

Tests that used to start a long request, sleep, and then act on it raced the clock: on a fast machine the
request had finished before the sleep ended (tiny-llama samples 1,900 tokens in well under a second on an
AVX-512 core). Under a closed gate the engine's worker takes a step only

- when the test allows one (`allow(n)`), or
- when a command is waiting in the engine's inbox (a request, an abort, a pause, a weight update, a stats
  call: anything posted to the worker), which then reaches the worker after at most that one step.

So a request under test makes progress only when something happens to it, and it is still running when the
test's command arrives, by construction. A command that does nothing (an abort made a no-op) leaves the
request held forever; `HOLD_LIMIT_S` turns that into an engine error instead of a hung suite.

The gate reads the engine's inbox (`LocalEngine._inbox`), the one private name here: it is the queue the
worker drains between steps, and "a command is waiting" is exactly the condition the gate needs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from codedojo.inference import LocalEngine

HOLD_LIMIT_S = 60.0
"""How long a held step waits before it fails the engine's batch (a guard against a hung suite)."""


class StepGate:
    """Holds `engine`'s worker before each step while closed; a context manager (leaving opens it and
    gives the engine its own step back). `steps` counts the steps taken since entering."""

    def __init__(self, engine: LocalEngine, *, hold_limit_s: float = HOLD_LIMIT_S) -> None:
        self.engine = engine
        self.hold_limit_s = hold_limit_s
        self.steps = 0
        self._inbox = engine._inbox
        self._step = engine.scheduler.step
        self._changed = threading.Condition()
        self._permits = 0
        self._open = False

    def __enter__(self) -> StepGate:
        self.engine.scheduler.step = self._held_step  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.open()
        del self.engine.scheduler.step  # the instance attribute: the class's own step again

    # ----- the test's side ------------------------------------------------------------------------

    def allow(self, num_steps: int) -> None:
        """Let the worker take `num_steps` more steps (whenever it has work)."""
        with self._changed:
            self._permits += num_steps
            self._changed.notify_all()

    def open(self) -> None:
        """Let the worker step freely until `close`."""
        with self._changed:
            self._open = True
            self._changed.notify_all()

    def close(self) -> None:
        """Hold the worker again (permits not yet used are kept)."""
        with self._changed:
            self._open = False

    async def taken(self, num_steps: int, *, timeout_s: float = 30.0) -> None:
        """Wait until the worker has taken `num_steps` steps in all (a deadline, not a duration guess:
        the steps were allowed, so they come as fast as the machine takes them)."""

        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(lambda: self.steps >= num_steps, timeout=timeout_s)

        if not await asyncio.to_thread(wait):
            raise AssertionError(f"the engine took {self.steps} of {num_steps} allowed steps in {timeout_s} s")

    # ----- the worker's side ----------------------------------------------------------------------

    def _held_step(self, **options: Any) -> None:
        deadline = time.monotonic() + self.hold_limit_s
        with self._changed:
            # The inbox fills from other threads without telling us: look again every millisecond.
            while not (self._open or self._permits or not self._inbox.empty()):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"StepGate held the engine's step for {self.hold_limit_s} s: nothing "
                                       "allowed it and no command came")
                self._changed.wait(0.001)
            if self._permits and self._inbox.empty() and not self._open:
                self._permits -= 1
        self._step(**options)
        with self._changed:
            self.steps += 1
            self._changed.notify_all()
