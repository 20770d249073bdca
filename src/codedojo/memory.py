"""The process's memory between the phases of a run: what it holds, and handing freed memory back.

A training run alternates phases that each allocate gigabytes of short-lived tensors (rollouts in the engine's
thread, the update's activations in another) and free them. glibc's malloc keeps much of what is freed: once a
large block has been freed, blocks of up to 32 MB come from its heaps instead of fresh pages, and a heap keeps
its free pages. `bench/malloc_retention.py` measures it (docs/results/malloc-retention.json: 3,000 MiB of
1-3 MiB tensors freed in a thread left the process 3,004 MiB larger; after `malloc_trim(0)` 223 MiB resident,
220 before; torch 2.13, glibc 2.36). Each thread's heap keeps its own high-water mark, so the
engine's and the update's peaks add up. `return_freed_memory()` between phases keeps a long run at the
footprint of its largest phase instead of the sum of them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import resource
import sys

import psutil


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - glibc has it; musl does not
    except (OSError, AttributeError):
        return None
    return libc


def return_freed_memory() -> bool:
    """Hand the pages malloc holds free back to the OS (glibc's malloc_trim); False where there is no glibc."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(ctypes.c_size_t(0))
    return True


def rss_gib() -> float:
    """This process's resident size now, in GiB."""
    return psutil.Process().memory_info().rss / 2**30


def peak_rss_gib() -> float:
    """The most this process has held resident since it started, in GiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**30 if sys.platform == "darwin" else 2**20)
