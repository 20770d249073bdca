"""Compute precision: the device (`default_device`) and the dtype matmuls run in, chosen from what the
hardware does natively.

bf16 matmuls are 2-3x the fp32 rate on CUDA and on CPUs with native bf16 (AVX-512 BF16 or AMX); a CPU
without them emulates bf16 and runs it slower than fp32. So the default (None) means bf16 exactly where the device
computes it natively, fp32 elsewhere. Mixed precision here is autocast: weights, their gradients and the
optimizer state stay fp32 (the master copy), matmuls and attention run in bf16, and everything the
callers turn into logprobs is upcast to fp32 before the log-softmax.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import torch

NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""/proc/cpuinfo flags of x86 CPUs that compute bf16 matmuls in hardware."""


def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def default_device() -> str:
    """Where training and the local engine run when no device is named: CUDA when present, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str | None) -> str:
    """`device` (the default when None) once torch can place tensors there; else a ValueError naming it and
    what to use, before anything loads (torch's own error comes from deep inside the first tensor move)."""
    if device is None:
        return default_device()
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {device!r} is not a torch device: use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: torch sees no CUDA device on this machine; use cpu")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         f"numbered from 0")
    return device


@functools.cache
def cpu_native_bf16() -> bool:
    """Whether this CPU computes bf16 matmuls natively (AVX-512 BF16 or AMX tiles)."""
    return bool(set(NATIVE_BF16_CPU_FLAGS) & _cpu_flags())


def native_bf16(device: torch.device | str) -> bool:
    """Whether `device` runs bf16 matmuls at least as fast as fp32."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_native_bf16()
    return False


def compute_dtype(bf16: bool | None, device: torch.device | str) -> torch.dtype:
    """The matmul dtype for a `bf16` setting: True bf16, False fp32, None bf16 where `device` is native."""
    if bf16 is None:
        bf16 = native_bf16(device)
    return torch.bfloat16 if bf16 else torch.float32


def capability(device: torch.device | str = "cpu") -> dict[str, object]:
    """What was detected, for benchmark JSON and run logs."""
    device = torch.device(device)
    out: dict[str, object] = {"device": str(device), "native_bf16": native_bf16(device)}
    if device.type == "cpu":
        out["cpu_bf16_flags"] = sorted(set(NATIVE_BF16_CPU_FLAGS) & _cpu_flags())
    elif device.type == "cuda":
        out["cuda_device"] = torch.cuda.get_device_name(device)
    return out


@contextlib.contextmanager
def compute_precision(device: torch.device | str, dtype: torch.dtype) -> Iterator[None]:
    """Matmuls and attention in `dtype` (autocast) for bf16; nothing changes for fp32."""
    device = torch.device(device)
    if dtype == torch.float32:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield
