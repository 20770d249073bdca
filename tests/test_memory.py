"""codedojo.memory: freed tensors' pages go back to the OS, and the resident sizes read sensibly."""

from __future__ import annotations

import threading

import pytest
import torch

from codedojo import memory

MIB = 2**20


def _churn(total_mib: int) -> None:
    """Allocate total_mib of 1-3 MiB tensors (activation-sized), touch them, free them all."""
    held = [torch.ones((1 + i % 3) * MIB // 4) for i in range(total_mib // 2)]
    assert sum(int(t[-1]) for t in held) == len(held)


def test_freed_tensors_are_returned_to_the_os() -> None:
    if not memory.return_freed_memory():
        pytest.skip("no glibc malloc_trim on this platform (return_freed_memory reports False)")

    def twice() -> None:  # the first round's frees raise malloc's mmap threshold; the second stays in its heap
        _churn(400)
        _churn(400)

    worker = threading.Thread(target=twice)  # its own malloc arena, as the trainer's update thread has
    worker.start()
    worker.join()
    kept = memory.rss_gib() * 1024
    assert memory.return_freed_memory()
    after = memory.rss_gib() * 1024
    assert kept - after > 200, f"trim returned only {kept - after:.0f} MiB of 400 freed"


def test_resident_sizes_are_ordered() -> None:
    now, peak = memory.rss_gib(), memory.peak_rss_gib()
    assert 0.01 < now <= peak + 0.01 < 1024
