"""Native kernels of the local engine: C sources here, compiled once per machine with the system's C compiler
and loaded with ctypes.

Two kinds of CPU kernel live in cpu_kernels.c, both summing in fp32:

- `decode_attention`: every decoding row's new token against its own cached positions, the query heads that
  share a key head computed together, in one call per layer for the whole step. torch's SDPA on the same
  work reads each row up to the longest row's length and runs at about a third of the machine's copy rate
  on these shapes (docs/inference.md), which made attention over half of a 16-row decode step.
- `linear_rows` and `swiglu_rows`: a few fp32 rows (a batched decode step) times an fp32 matrix in HF's
  layout, the same fusions: every weight is read once and used once per row, and the next tiles of the matrix
  are prefetched while a tile is multiplied (oneDNN's kernel on these shapes waits on memory; docs/inference.md).
- `linear_row` and `swiglu_row`: one fp32 row times an fp32 or bf16 matrix in HF's layout, the residual add
  and SwiGLU's gating folded in, for batch-1 decode steps, where every weight is read once and used once: each
  thread streams one contiguous range of the matrix's rows, where oneDNN's kernel reads the matrices at about
  two thirds of that rate with 2 threads (docs/inference.md).

Building: `cc -O3 -march=native -fopenmp -shared` (`$CC` overrides the compiler) into
`<cache dir>/native/`, under a name hashed from the source, the flags, the compiler's version and this CPU's
flags, so a cache shared between machines never loads another CPU's build. The library is loaded after
torch, so its OpenMP calls bind to the runtime torch already mapped (libgomp.so.1) and share its thread
pools. Where anything of that fails (no compiler, a build error, a library that will not load), the engine
falls back to torch's kernels (SDPA, oneDNN) and says why once on stderr; `CODEDOJO_NATIVE=0` turns the kernels
off.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from codedojo.cache import cache_dir

SOURCE = Path(__file__).with_name("cpu_kernels.c")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno")
MAX_GROUPS = 16
"""Query heads per key head the kernel handles (MAX_GROUPS in the C source)."""
MAX_DIM = 256
"""Head dimension the kernel handles (MAX_DIM in the C source)."""


class NativeBuildError(RuntimeError):
    """A native kernel could not be compiled or loaded (the message names the command and its output)."""


def enabled() -> bool:
    """False when `CODEDOJO_NATIVE` is 0, off, no or false."""
    return os.environ.get("CODEDOJO_NATIVE", "1").strip().lower() not in ("0", "off", "no", "false")


def _compiler() -> str:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise NativeBuildError("no C compiler: set CC or install gcc (apt-get install gcc)")
    return compiler


def _cpu_flags_line() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def build(directory: Path | None = None) -> Path:
    """The compiled library's path, compiling it first unless a build for this source, compiler and CPU
    exists. Raises NativeBuildError naming what failed."""
    compiler = _compiler()
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise NativeBuildError(f"{compiler} --version failed: {error}") from error
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *FLAGS, version, _cpu_flags_line()]).encode())
    directory = directory or cache_dir() / "native"
    target = directory / f"cpu_kernels-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: processes building at once never load a half-written file.
    handle, partial = tempfile.mkstemp(dir=directory, suffix=".so.partial")
    os.close(handle)
    command = [compiler, *FLAGS, str(SOURCE), "-o", partial, "-lm"]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeBuildError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


@functools.cache
def _library() -> ctypes.CDLL | None:
    if not enabled():
        return None
    try:
        library = ctypes.CDLL(str(build()))
    except (NativeBuildError, OSError) as error:
        print(f"codedojo: native CPU kernels unavailable, using torch's ({error})", file=sys.stderr)
        return None
    pointer, int32, int64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    for name, argtypes in (
        ("codedojo_decode_attention", [pointer, pointer, pointer, pointer, int32, int32, int32, int32, int64, int64,
                                       ctypes.c_float, pointer, int32]),
        ("codedojo_linear_row", [pointer, pointer, pointer, pointer, pointer, int64, int32, int32, int32]),
        ("codedojo_swiglu_row", [pointer, pointer, pointer, pointer, int64, int32, int32, int32]),
        ("codedojo_linear_rows", [pointer, pointer, pointer, pointer, pointer, int32, int64, int32, int32]),
        ("codedojo_swiglu_rows", [pointer, pointer, pointer, pointer, int32, int64, int32, int32]),
    ):
        function = getattr(library, name)
        function.restype = ctypes.c_int
        function.argtypes = argtypes
    return library


def available() -> bool:
    """Whether the kernels are compiled and loaded (compiling them on the first call)."""
    return _library() is not None



def supports(num_kv_heads: int, num_heads: int, head_dim: int) -> bool:
    """Whether the kernel handles a model of these attention sizes."""
    return num_heads % num_kv_heads == 0 and num_heads // num_kv_heads <= MAX_GROUPS and head_dim <= MAX_DIM


def decode_attention(q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, meta: torch.Tensor,
                     out: torch.Tensor) -> None:
    """out[i] = attention of q[i] over positions 0..meta[i, 1]-1 of cache row meta[i, 0].

    q, out: [num, kv_heads, groups, dim] fp32 contiguous; key_cache, value_cache: [rows, kv_heads, capacity,
    dim] fp32 contiguous; meta: [num, 2] int32 contiguous (cache row, length in 1..capacity). Callers check
    `available()` and `supports(...)` first. Layouts are checked here and rows and lengths
    in the kernel, so a wrong argument raises instead of reading outside a tensor."""
    library = _library()
    if library is None:
        raise RuntimeError("native decode attention is not available here (see available())")
    num, kv_heads, groups, dim = q.shape
    rows, capacity = key_cache.shape[0], key_cache.shape[2]
    for name, tensor, shape in (("q", q, q.shape), ("out", out, q.shape),
                                ("key_cache", key_cache, (rows, kv_heads, capacity, dim)),
                                ("value_cache", value_cache, (rows, kv_heads, capacity, dim))):
        if tensor.dtype != torch.float32 or tensor.device.type != "cpu" or not tensor.is_contiguous() \
                or tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"native decode attention: {name} must be a contiguous fp32 CPU tensor of shape "
                             f"{tuple(shape)}, got {tensor.dtype} {tuple(tensor.shape)} on {tensor.device}")
    if meta.dtype != torch.int32 or not meta.is_contiguous() or tuple(meta.shape) != (num, 2):
        raise ValueError(f"native decode attention: meta must be contiguous int32 of shape ({num}, 2), "
                         f"got {meta.dtype} {tuple(meta.shape)}")
    status = library.codedojo_decode_attention(
        q.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), meta.data_ptr(), num, kv_heads, groups, dim,
        rows, capacity, dim ** -0.5, out.data_ptr(), torch.get_num_threads())
    if status == -2:
        raise ValueError(f"native decode attention: a row or length in meta lies outside the cache "
                         f"({rows} rows, capacity {capacity}): {meta.tolist()}")
    if status != 0:
        raise RuntimeError(f"native decode attention failed (status {status}) for q {tuple(q.shape)}")


def _check_rows(name: str, tensor: torch.Tensor, numel: int, dtypes: tuple[torch.dtype, ...] = (torch.float32,)
                ) -> None:
    if tensor.dtype not in dtypes or tensor.device.type != "cpu" or not tensor.is_contiguous() \
            or tensor.numel() != numel:
        kinds = " or ".join({torch.float32: "fp32", torch.bfloat16: "bf16"}.get(d, str(d)) for d in dtypes)
        raise ValueError(f"native one-row kernel: {name} must be a contiguous {kinds} CPU tensor of {numel} "
                         f"elements, got {tensor.dtype} {tuple(tensor.shape)} on {tensor.device}")


WEIGHT_DTYPES = (torch.float32, torch.bfloat16)
"""What the one-row kernels read weights in (bf16 widened to fp32 in registers; every sum in fp32)."""


def _pointer(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


def linear_row(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               residual: torch.Tensor | None = None, *, checked: bool = True) -> torch.Tensor:
    """`F.linear(x, weight, bias) + residual` for one row: x [1, in] (or [in]), weight [out, in] in fp32 or
    bf16, bias and residual [out] (or [1, out]) or None, everything but the weight fp32, all contiguous on the
    CPU; returns a new fp32 [1, out] tensor (the sums in fp32 whatever the weight's dtype).
    checked=False skips the layout checks, for callers whose tensors are theirs by construction (the engine's
    own matrices and intermediate rows): a wrong layout there reads outside a tensor."""
    n_out, n_in = weight.shape
    if checked:
        _check_rows("weight", weight, n_out * n_in, WEIGHT_DTYPES)
        _check_rows("x", x, n_in)
        for name, tensor in (("bias", bias), ("residual", residual)):
            if tensor is not None:
                _check_rows(name, tensor, n_out)
    library = _library()
    if library is None:
        raise RuntimeError("native kernels are not available here (see available())")
    out = torch.empty(1, n_out)
    status = library.codedojo_linear_row(x.data_ptr(), weight.data_ptr(), _pointer(bias), _pointer(residual),
                                         out.data_ptr(), n_out, n_in, weight.dtype == torch.bfloat16,
                                         torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"native linear_row failed (status {status}) for weight {tuple(weight.shape)}")
    return out


def swiglu_row(x: torch.Tensor, gate_up: torch.Tensor, bias: torch.Tensor | None = None, *,
               checked: bool = True) -> torch.Tensor:
    """`silu(gate) * up` of one row, where gate|up = F.linear(x, gate_up, bias) (gate_up [2 * inter, in], the
    gate's rows first, as the engine fuses HF's gate_proj and up_proj; fp32 or bf16); returns a new fp32
    [1, inter] tensor.
    checked as in `linear_row`."""
    rows, n_in = gate_up.shape
    if rows % 2:
        raise ValueError(f"native swiglu_row: gate_up must have an even number of rows, got {rows}")
    if checked:
        _check_rows("gate_up", gate_up, rows * n_in, WEIGHT_DTYPES)
        _check_rows("x", x, n_in)
        if bias is not None:
            _check_rows("bias", bias, rows)
    library = _library()
    if library is None:
        raise RuntimeError("native kernels are not available here (see available())")
    out = torch.empty(1, rows // 2)
    status = library.codedojo_swiglu_row(x.data_ptr(), gate_up.data_ptr(), _pointer(bias), out.data_ptr(),
                                         rows // 2, n_in, gate_up.dtype == torch.bfloat16, torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"native swiglu_row failed (status {status}) for gate_up {tuple(gate_up.shape)}")
    return out


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                residual: torch.Tensor | None = None, *, out: torch.Tensor | None = None,
                checked: bool = True) -> torch.Tensor:
    """`F.linear(x, weight, bias) + residual` for a few rows: x [m, in], weight [out, in], bias [out] or None,
    residual [m, out] or None, all fp32, contiguous, on the CPU; returns out (a new [m, out] tensor unless given;
    it may be residual itself, for an add in place). checked as in `linear_row`."""
    n_out, n_in = weight.shape
    m = x.shape[0]
    if checked:
        _check_rows("weight", weight, n_out * n_in)
        _check_rows("x", x, m * n_in)
        for name, tensor, numel in (("bias", bias, n_out), ("residual", residual, m * n_out), ("out", out, m * n_out)):
            if tensor is not None:
                _check_rows(name, tensor, numel)
    library = _library()
    if library is None:
        raise RuntimeError("native kernels are not available here (see available())")
    if out is None:
        out = torch.empty(m, n_out)
    status = library.codedojo_linear_rows(x.data_ptr(), weight.data_ptr(), _pointer(bias), _pointer(residual),
                                          out.data_ptr(), m, n_out, n_in, torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"native linear_rows failed (status {status}) for x {tuple(x.shape)}, "
                           f"weight {tuple(weight.shape)}")
    return out


def swiglu_rows(x: torch.Tensor, gate_up: torch.Tensor, bias: torch.Tensor | None = None, *,
                checked: bool = True) -> torch.Tensor:
    """`silu(gate) * up` of a few rows, where gate|up = F.linear(x, gate_up, bias) (gate_up [2 * inter, in], the
    gate's rows first), all fp32; returns a new fp32 [m, inter] tensor. checked as in `linear_row`."""
    rows, n_in = gate_up.shape
    m = x.shape[0]
    if rows % 2:
        raise ValueError(f"native swiglu_rows: gate_up must have an even number of rows, got {rows}")
    if checked:
        _check_rows("gate_up", gate_up, rows * n_in)
        _check_rows("x", x, m * n_in)
        if bias is not None:
            _check_rows("bias", bias, rows)
    library = _library()
    if library is None:
        raise RuntimeError("native kernels are not available here (see available())")
    out = torch.empty(m, rows // 2)
    status = library.codedojo_swiglu_rows(x.data_ptr(), gate_up.data_ptr(), _pointer(bias), out.data_ptr(), m,
                                          rows // 2, n_in, torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"native swiglu_rows failed (status {status}) for x {tuple(x.shape)}, "
                           f"gate_up {tuple(gate_up.shape)}")
    return out
