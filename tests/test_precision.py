"""Compute precision: bf16 exactly where the hardware has it, fp32 elsewhere."""

from __future__ import annotations

import pytest
import torch

from codedojo import precision


@pytest.fixture(autouse=True)
def _fresh_detection():
    precision.cpu_native_bf16.cache_clear()
    yield
    precision.cpu_native_bf16.cache_clear()


@pytest.mark.parametrize(("flags", "native"), [
    ({"avx2", "avx512f", "avx512_bf16"}, True),
    ({"avx2", "amx_tile", "amx_bf16"}, True),
    ({"avx2", "avx512f", "avx512bw"}, False),  # AVX-512 without BF16: bf16 would be emulated
    (set(), False),  # no /proc/cpuinfo (another OS): fp32
])
def test_cpu_detection_reads_the_bf16_flags(monkeypatch: pytest.MonkeyPatch, flags: set[str], native: bool) -> None:
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset(flags))
    assert precision.native_bf16("cpu") is native
    assert precision.compute_dtype(None, "cpu") == (torch.bfloat16 if native else torch.float32)
    # an explicit setting wins either way
    assert precision.compute_dtype(False, "cpu") == torch.float32
    assert precision.compute_dtype(True, "cpu") == torch.bfloat16


def test_cpu_flags_come_from_proc_cpuinfo() -> None:
    text = open("/proc/cpuinfo").read()
    listed = next(line for line in text.splitlines() if line.startswith("flags")).split(":", 1)[1].split()
    assert precision._cpu_flags() == frozenset(listed)


def test_fp32_runs_without_autocast_and_bf16_with_it() -> None:
    a = torch.randn(4, 8)
    with precision.compute_precision("cpu", torch.float32):
        assert (a @ a.T).dtype == torch.float32
    with precision.compute_precision("cpu", torch.bfloat16):
        assert (a @ a.T).dtype == torch.bfloat16
