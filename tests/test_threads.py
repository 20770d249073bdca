"""OpenMP pools (codedojo.threads): a thread's pool is really freed (the process's thread count drops), by
release_omp_threads, by to_thread, by LocalEngine for the thread that built it, and by the engine's worker
when it goes idle."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import torch

from codedojo import threads
from codedojo.inference import LocalEngine, SamplingParams, TinyModel
from codedojo.inference import engine as engine_module

OPENMP_LINUX = sys.platform.startswith("linux") and "parallel backend: OpenMP" in torch.__config__.parallel_info()
pytestmark = pytest.mark.skipif(not OPENMP_LINUX, reason="the pools counted here are libgomp's on Linux")


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def os_threads_settled(expected: int, seconds: float = 5.0) -> int:
    """The thread count once it reads `expected`, or after `seconds`: a thread its runtime has joined stays
    listed in /proc/self/task until the kernel reaps it, a moment after it woke the joiner, so a count read
    right after a release can still include it."""
    deadline = time.monotonic() + seconds
    while (count := os_threads()) != expected and time.monotonic() < deadline:  # a bounded poll
        time.sleep(0.01)
    return count


def parallel_work() -> None:
    """Ops big enough for ATen to run them in an OpenMP region (well past its 32,768-element grain)."""
    x = torch.randn(1 << 20)
    x.exp_().sum()


@pytest.fixture(autouse=True)
def two_torch_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # a pool of one helper thread, even on a one-core machine
    yield
    torch.set_num_threads(before)


def on_new_thread(fn: Callable[[], object]) -> object:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def test_the_runtime_is_found_where_torch_uses_libgomp() -> None:
    assert threads._pause_functions()


def test_release_frees_the_calling_threads_pool() -> None:
    def run() -> tuple[int, int, int, bool]:
        torch.set_num_threads(2)
        before = os_threads()
        parallel_work()
        with_pool = os_threads()
        released = threads.release_omp_threads()
        return before, with_pool, os_threads_settled(before), released

    before, with_pool, after, released = on_new_thread(run)  # type: ignore[misc]
    assert released
    assert with_pool > before  # the region started a helper thread: the measurement can see a pool
    assert after == before


def test_to_thread_leaves_no_pool_behind() -> None:
    before = os_threads()

    async def main() -> int:
        def work() -> None:
            torch.set_num_threads(2)
            parallel_work()

        await threads.to_thread(work)
        return os_threads()

    # the executor thread itself stays (asyncio's default executor, shut down with the loop)
    assert asyncio.run(main()) <= before + 1


def test_work_still_runs_after_a_release() -> None:
    def run() -> float:
        torch.set_num_threads(2)
        parallel_work()
        threads.release_omp_threads()
        x = torch.arange(1 << 20, dtype=torch.float64)
        return float(x.sum())  # a new region on the same thread: the runtime starts a pool again

    assert on_new_thread(run) == float(sum(range(1 << 20)))


def test_the_engine_frees_its_builders_pool_and_its_idle_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "IDLE_RELEASE_SECONDS", 0.01)
    loaded = TinyModel(max_positions=256).load()

    def build() -> tuple[LocalEngine, int, int]:
        torch.set_num_threads(2)
        before = os_threads()
        parallel_work()  # the builder's pool, as loading a real model leaves one
        assert os_threads() > before
        engine = LocalEngine(loaded.engine_model(), loaded.tokenizer, kv_budget_tokens=1 << 12, seed=0)
        return engine, before, os_threads_settled(before + 1)

    engine, before, after_build = on_new_thread(build)  # type: ignore[misc]
    assert after_build == before + 1  # the builder's pool is gone; the engine's worker thread is new

    async def serve() -> int:
        await engine.call(lambda scheduler: parallel_work())  # the worker's own pool
        busy = os_threads()
        await engine.generate([5, 6, 7], SamplingParams(max_new_tokens=4, ignore_eos=True, seed=0))
        deadline = time.monotonic() + 30
        while os_threads() >= busy and time.monotonic() < deadline:  # a bounded poll: until a thread goes
            await asyncio.sleep(0.02)
        idle = os_threads()
        await engine.close()
        return busy - idle

    assert asyncio.run(serve()) >= 1, "idle for 30 s, the worker kept its helper threads"
