"""OpenMP thread pools: one per thread that calls torch, and why each is dropped when its thread goes idle.

torch's CPU kernels run in OpenMP parallel regions. With GNU OpenMP (libgomp, what torch's Linux wheels
ship) every thread that enters a parallel region gets its own pool of helper threads, kept until that
thread exits. While the process holds more OpenMP threads than CPUs, libgomp spins only briefly between
regions and then sleeps on a futex (the GOMP_SPINCOUNT rule for oversubscription), so every region pays a
wake-up. A decode step is hundreds of small regions, and on a 2-core machine one idle pool elsewhere is
enough to cross the line: the engine's bf16 batch-1 step on its worker thread took 42.4 ms (median) while
the main thread's pool from loading the model sat idle, and 27.4 ms once it was freed
(`bench/engine_threads.py`, docs/results/engine-threads.json, docs/inference.md).

So codedojo drops a thread's pool once that thread's torch work is done (`release_omp_threads`): the engine
worker when it has been idle a moment, the threads that load models and run trainer updates when they
return (`to_thread`), and `LocalEngine` drops the pool of the thread that built it. Dropping costs nothing
to correctness; the next parallel region on that thread starts its pool again (one thread creation).
Code of yours that runs torch on another thread while the engine serves should do the same.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

OMP_PAUSE_SOFT = 1
"""omp_pause_soft (OpenMP 5.0): free the calling thread's pool; the runtime starts a new one when needed."""

_OPENMP_RUNTIMES = ("libgomp", "libomp", "libiomp")


def _loaded_runtime_paths() -> list[str]:
    """Paths of OpenMP runtimes mapped into this process (Linux: /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    paths = []
    for line in lines:
        path = line.rpartition(" ")[2]
        if os.path.basename(path).startswith(_OPENMP_RUNTIMES) and path not in paths:
            paths.append(path)
    return paths


@functools.cache
def _pause_functions() -> tuple[Callable[[int], int], ...]:
    """omp_pause_resource_all of every OpenMP runtime in the process (torch's, and any other copy a library
    loaded under another path); empty without OpenMP or where the runtime lacks it (before OpenMP 5.0)."""
    import torch  # noqa: F401  (maps torch's runtime into the process)

    functions = []
    for path in _loaded_runtime_paths():
        try:
            function = ctypes.CDLL(path).omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
        functions.append(function)
    return tuple(functions)


def release_omp_threads() -> bool:
    """Free the calling thread's OpenMP pool. True when a runtime took the request; False when there is no
    OpenMP runtime with omp_pause_resource_all, or the caller is inside a parallel region."""
    results = [pause(OMP_PAUSE_SOFT) == 0 for pause in _pause_functions()]
    return any(results)


def releasing(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` that frees its thread's OpenMP pool when it returns or raises."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            release_omp_threads()

    return run


async def to_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`asyncio.to_thread` for torch work: the executor thread frees its OpenMP pool when `fn` is done,
    so an idle executor thread holds no pool while the engine's worker steps."""
    return await asyncio.to_thread(releasing(fn), *args, **kwargs)
