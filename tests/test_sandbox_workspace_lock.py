"""The workspace cache's lock: exclusive across fds and coroutines, and waiting without worker threads."""

from __future__ import annotations

import asyncio
import fcntl
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from codedojo.sandbox.workspace import file_lock


def held(path: Path) -> bool:
    """Whether some other fd holds the flock on `path` (a fresh fd cannot take it)."""
    probe = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(probe)  # releases it if taken
    return False


def test_waiters_hold_no_worker_thread_and_take_the_lock_one_at_a_time(tmp_path: Path) -> None:
    """With one executor thread and the lock held elsewhere, four waiters leave that thread free (a blocking
    flock in to_thread per waiter deadlocked the evaluation of new tasks); once released, each waiter holds
    the lock alone."""
    path = tmp_path / "ws.lock"
    other = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(other, fcntl.LOCK_EX)  # another process (or fd) holds it
    inside, most, order = 0, 0, []

    async def waiter(i: int) -> None:
        nonlocal inside, most
        async with file_lock(path):
            inside += 1
            most = max(most, inside)
            order.append(i)
            assert held(path), "a waiter got in without holding the flock"
            await asyncio.sleep(0)  # a yield while holding it: the other waiters run, and must not get in
            inside -= 1

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        tasks = [asyncio.create_task(waiter(i)) for i in range(4)]
        try:
            # A yield: each waiter has taken its first step, so it has tried the lock (a blocking flock handed
            # to to_thread would hold the executor's one thread from here on).
            await asyncio.sleep(0)
            assert not order  # all still waiting for the other holder
            assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), timeout=5) == 42
        finally:
            os.close(other)  # the other holder lets go (on a failure too: a flock blocked in a thread ends)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)

    asyncio.run(main())
    assert sorted(order) == [0, 1, 2, 3] and most == 1


def test_the_lock_is_released_when_the_block_raises(tmp_path: Path) -> None:
    path = tmp_path / "ws.lock"

    async def main() -> None:
        with pytest.raises(RuntimeError, match="build failed"):
            async with file_lock(path):
                raise RuntimeError("build failed")
        assert not held(path)

    asyncio.run(main())
