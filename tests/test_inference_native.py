"""The engine's native CPU kernels (codedojo.inference.native): decode attention against SDPA and what it
reads, the one-row linear kernels against F.linear, their argument checks, the build cache and the fallback
to torch's kernels."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from codedojo.inference import native
from codedojo.inference.kv_cache import KVCache
from codedojo.inference.options import EngineOptions
from codedojo.inference.specs import TinyModel
from codedojo.inference.step_batch import build_step


def _have_compiler() -> bool:
    try:
        native._compiler()
    except native.NativeBuildError:
        return False
    return True


# Without a compiler the engine runs on torch's kernels and these tests skip, except under CI (./dev installs
# gcc there, so a missing compiler is a failure).
pytestmark = pytest.mark.skipif(not _have_compiler() and not os.environ.get("CI"),
                                reason="no C compiler here: the engine uses torch's kernels (./dev setup installs gcc)")


def sdpa_reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """Each row's attention by SDPA over exactly its own positions."""
    out = torch.empty_like(q)
    for i, (row, length) in enumerate(meta.tolist()):
        out[i] = F.scaled_dot_product_attention(q[i : i + 1], keys[row : row + 1, :, :length],
                                                values[row : row + 1, :, :length])[0]
    return out


def assert_same_steps(ours: list[torch.Tensor], ours_cache: KVCache, theirs: list[torch.Tensor],
                      theirs_cache: KVCache) -> None:
    """Logits within 2e-5 and every cached K/V within 1e-5 of the reference path's."""
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, reference, atol=2e-5, rtol=0)
    for mine, reference in zip(ours_cache.keys + ours_cache.values, theirs_cache.keys + theirs_cache.values,
                               strict=True):
        torch.testing.assert_close(mine, reference, atol=1e-5, rtol=0)


# (kv_heads, groups, dim): SmolLM2 (3, 3, 64), Qwen3 (8, 2, 128), Qwen2.5-0.5B (2, 7, 64), an odd size with
# no vector path (1, 1, 36), the most groups the kernel takes (1, 16, 16).
SHAPES = [(3, 3, 64), (8, 2, 128), (2, 7, 64), (1, 1, 36), (1, 16, 16)]
# Lengths around the kernel's block (64) and piece (256) boundaries, and a one-position row.
LENGTHS = [1, 7, 8, 9, 63, 64, 65, 255, 256, 257, 513, 700]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("kv_heads", "groups", "dim"), SHAPES)
def test_decode_attention_matches_sdpa_on_ragged_rows(kv_heads: int, groups: int, dim: int, threads: int) -> None:
    g = torch.Generator().manual_seed(kv_heads * 100 + dim)
    capacity = 768
    rows = len(LENGTHS) + 2
    keys = torch.randn(rows, kv_heads, capacity, dim, generator=g)
    values = torch.randn(rows, kv_heads, capacity, dim, generator=g)
    # rows out of order and not from 0, as the scheduler's rows can be
    order = random.Random(dim).sample(range(rows), len(LENGTHS))
    meta = torch.tensor(list(zip(order, LENGTHS, strict=True)), dtype=torch.int32)
    q = torch.randn(len(LENGTHS), kv_heads, groups, dim, generator=g) * 2
    out = torch.empty_like(q)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        native.decode_attention(q, keys, values, meta, out)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(out, sdpa_reference(q, keys, values, meta), atol=1e-5, rtol=1e-5)


def test_decode_attention_reads_only_each_rows_own_positions() -> None:
    """Positions past a row's length hold NaN and infinities: none of them may reach the output."""
    g = torch.Generator().manual_seed(3)
    keys = torch.randn(2, 3, 300, 64, generator=g)
    values = torch.randn(2, 3, 300, 64, generator=g)
    meta = torch.tensor([[1, 270], [0, 5]], dtype=torch.int32)
    clean = torch.empty(2, 3, 3, 64)
    q = torch.randn(2, 3, 3, 64, generator=g)
    native.decode_attention(q, keys, values, meta, clean)
    keys[1, :, 270:], values[1, :, 270:] = float("nan"), float("inf")
    keys[0, :, 5:], values[0, :, 5:] = float("inf"), float("nan")
    dirty = torch.empty_like(clean)
    native.decode_attention(q, keys, values, meta, dirty)
    torch.testing.assert_close(dirty, clean, atol=0, rtol=0)
    assert torch.isfinite(dirty).all()


def test_decode_attention_refuses_arguments_that_would_read_outside_the_cache() -> None:
    keys, values = torch.zeros(2, 3, 16, 64), torch.zeros(2, 3, 16, 64)
    q, out = torch.zeros(1, 3, 3, 64), torch.zeros(1, 3, 3, 64)
    for meta in ([[2, 4]], [[-1, 4]], [[0, 17]], [[0, 0]]):
        with pytest.raises(ValueError, match="outside the cache"):
            native.decode_attention(q, keys, values, torch.tensor(meta, dtype=torch.int32), out)
    meta = torch.tensor([[0, 4]], dtype=torch.int32)
    with pytest.raises(ValueError, match="key_cache must be a contiguous fp32"):
        native.decode_attention(q, keys[:, :, :8], values, meta, out)
    with pytest.raises(ValueError, match="value_cache must be a contiguous fp32"):
        native.decode_attention(q, keys, values.to(torch.bfloat16), meta, out)
    with pytest.raises(ValueError, match="meta must be contiguous int32"):
        native.decode_attention(q, keys, values, meta.long(), out)
    with pytest.raises(ValueError, match="out must be"):
        native.decode_attention(q, keys, values, meta, torch.zeros(1, 3, 3, 32))


def test_build_is_cached_per_source_compiler_and_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = native.build(tmp_path)
    built_at = first.stat().st_mtime_ns
    assert native.build(tmp_path) == first and first.stat().st_mtime_ns == built_at  # not compiled again
    monkeypatch.setattr(native, "_cpu_flags_line", lambda: "flags : another cpu")
    other = native.build(tmp_path)
    assert other != first and other.exists()
    assert not list(tmp_path.glob("*.partial"))


def test_a_missing_compiler_is_named_and_the_engine_falls_back_to_sdpa(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(native.NativeBuildError, match="no-such-cc"):
        native.build(tmp_path)
    monkeypatch.setenv("CODEDOJO_CACHE_DIR", str(tmp_path))
    native._library.cache_clear()
    try:
        assert not native.available()
        assert "native CPU kernels unavailable, using torch's" in capsys.readouterr().err
        loaded = TinyModel(architecture="llama", num_layers=2, max_positions=128).load()
        model = loaded.engine_model()
        assert model.native_attention  # decided at the first step
        cache = KVCache(model.kv_shape, rows=1, capacity=32)
        model.forward(build_step([], prefills=[(0, 0, list(range(5, 20)))], sample_tokens=[14], device="cpu"), cache)
        logits = model.forward(build_step([(0, 15, 7)], prefills=[], sample_tokens=[0], device="cpu"), cache)
        assert not model.native_attention and torch.isfinite(logits).all()
    finally:
        native._library.cache_clear()


def test_native_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEDOJO_NATIVE", "0")
    native._library.cache_clear()
    try:
        assert not native.available()
    finally:
        native._library.cache_clear()
    monkeypatch.delenv("CODEDOJO_NATIVE")
    assert native.available()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_the_kernel_shares_torchs_openmp_runtime() -> None:
    """One OpenMP runtime in the process: the kernel's threads are torch's pools, not a second set."""
    assert native.available()
    with open("/proc/self/maps") as maps:
        runtimes = {line.rpartition(" ")[2].strip() for line in maps if "libgomp" in line}
    assert len(runtimes) == 1, runtimes


@pytest.mark.parametrize("architecture", ["llama", "qwen3"])
def test_engine_steps_with_the_kernel_match_sdpa(architecture: str) -> None:
    """Decode rows of different lengths next to a prefill chunk, then one-token steps: logits and every K/V
    with the kernel equal SDPA's to fp32 rounding."""
    loaded = TinyModel(architecture=architecture, num_layers=3, max_positions=512).load()
    model = loaded.engine_model()
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(5, 261, (n,), generator=g).tolist() for n in (40, 7, 300, 90)]

    def run(use_native: bool) -> tuple[list[torch.Tensor], KVCache]:
        model.options = EngineOptions(native_attention=use_native)
        cache = KVCache(model.kv_shape, rows=4, capacity=400)
        out = [model.forward(build_step([], prefills=[(r, 0, p) for r, p in enumerate(prompts[:3])],
                                        sample_tokens=[39, 46, 346], device="cpu"), cache)]
        # rows 0-2 decode (lengths 41, 8, 301) while row 3 prefills
        out.append(model.forward(build_step([(0, 40, 9), (1, 7, 10), (2, 300, 11)], prefills=[(3, 0, prompts[3])],
                                            sample_tokens=[0, 1, 2, 92], device="cpu"), cache))
        for position in (41, 42):  # one-token steps of row 0
            out.append(model.forward(build_step([(0, position, 12)], prefills=[], sample_tokens=[0], device="cpu"),
                                     cache))
        return out, cache

    try:
        ours, ours_cache = run(True)
        theirs, theirs_cache = run(False)
    finally:
        model.options = EngineOptions()
    assert_same_steps(ours, ours_cache, theirs, theirs_cache)


def test_bf16_engines_keep_sdpa() -> None:
    loaded = TinyModel(architecture="llama", num_layers=2, max_positions=128).load()
    assert loaded.engine_model().native_attention
    assert not loaded.engine_model(dtype=torch.bfloat16).native_attention


def test_build_uses_the_compiler_named_by_cc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$CC is the compiler: a wrapper that records its calls and runs the real one."""
    real = native._compiler()
    log = tmp_path / "calls"
    wrapper = tmp_path / "cc-wrapper"
    wrapper.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    assert native.build(tmp_path / "out").exists()
    assert "-fopenmp" in log.read_text() and os.fspath(native.SOURCE) in log.read_text()


# (out, in): SmolLM2's four matrices and its head's width, sizes that are not multiples of the kernel's
# 4 rows or 8 columns, and a single row.
ROW_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (1001, 576), (7, 36), (1, 8), (13, 5)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("n_out", "n_in"), ROW_SHAPES)
def test_linear_row_matches_f_linear_with_bias_and_residual(n_out: int, n_in: int, threads: int) -> None:
    g = torch.Generator().manual_seed(n_out + n_in)
    x, weight = torch.randn(1, n_in, generator=g), torch.randn(n_out, n_in, generator=g) / n_in ** 0.5
    bias, residual = torch.randn(n_out, generator=g), torch.randn(1, n_out, generator=g)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        plain = native.linear_row(x, weight)
        full = native.linear_row(x, weight, bias, residual)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(plain, F.linear(x, weight), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(full, residual + F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
    assert full.shape == (1, n_out)


@pytest.mark.parametrize(("n_out", "n_in"), ROW_SHAPES)
def test_linear_row_reads_bf16_weights_exactly_widened(n_out: int, n_in: int) -> None:
    """bf16 weights are widened exactly and summed in fp32: the same as fp32 weights holding the same values, to
    the last bit or two (the compiler may fuse the scalar tail's multiply-adds differently in the two builds)."""
    g = torch.Generator().manual_seed(n_out * 7 + n_in)
    x, weight = torch.randn(1, n_in, generator=g), (torch.randn(n_out, n_in, generator=g) / n_in ** 0.5).bfloat16()
    residual = torch.randn(1, n_out, generator=g)
    torch.testing.assert_close(native.linear_row(x, weight, residual=residual),
                               native.linear_row(x, weight.float(), residual=residual), atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(native.linear_row(x, weight), F.linear(x, weight.float()), atol=1e-5, rtol=1e-5)
    gate_up = torch.cat((weight, weight.flip(0))) if n_out > 1 else torch.cat((weight, weight))
    torch.testing.assert_close(native.swiglu_row(x, gate_up), native.swiglu_row(x, gate_up.float()), atol=1e-7,
                               rtol=1e-6)


# (kernel, rows, inter, in): the one-row kernel at SmolLM2's width and odd sizes, the few-row kernel at a 16-row
# step and at row, width and SwiGLU sizes off its multiples of 2, 3 and 8.
SWIGLU_SHAPES = [("row", 1, 1536, 576), ("row", 1, 300, 64), ("row", 1, 5, 12), ("row", 1, 1, 8),
                 ("rows", 16, 1536, 576), ("rows", 5, 301, 64), ("rows", 2, 5, 12), ("rows", 1, 4, 8)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("kernel", "m", "inter", "n_in"), SWIGLU_SHAPES)
def test_swiglu_kernels_match_silu_gate_times_up(kernel: str, m: int, inter: int, n_in: int, threads: int) -> None:
    swiglu = native.swiglu_row if kernel == "row" else native.swiglu_rows
    g = torch.Generator().manual_seed(m + inter)
    x, gate_up = torch.randn(m, n_in, generator=g), torch.randn(2 * inter, n_in, generator=g) / n_in ** 0.5
    bias = torch.randn(2 * inter, generator=g)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ours, ours_bias = swiglu(x, gate_up), swiglu(x, gate_up, bias)
    finally:
        torch.set_num_threads(before)
    for mine, b in ((ours, None), (ours_bias, bias)):
        gate, up = F.linear(x, gate_up, b).chunk(2, dim=-1)
        torch.testing.assert_close(mine, F.silu(gate) * up, atol=1e-5, rtol=1e-5)


def test_one_row_kernels_refuse_layouts_they_would_misread() -> None:
    weight = torch.zeros(8, 16)
    with pytest.raises(ValueError, match="x must be a contiguous fp32 CPU tensor of 16"):
        native.linear_row(torch.zeros(1, 15), weight)
    with pytest.raises(ValueError, match="weight must be"):
        native.linear_row(torch.zeros(1, 16), torch.zeros(16, 8).t())
    with pytest.raises(ValueError, match="residual must be"):
        native.linear_row(torch.zeros(1, 16), weight, residual=torch.zeros(1, 7))
    with pytest.raises(ValueError, match="bias must be"):
        native.linear_row(torch.zeros(1, 16), weight, bias=torch.zeros(8, dtype=torch.float64))
    with pytest.raises(ValueError, match="weight must be a contiguous fp32 or bf16"):
        native.linear_row(torch.zeros(1, 16), weight.half())
    with pytest.raises(ValueError, match="even number of rows"):
        native.swiglu_row(torch.zeros(1, 16), torch.zeros(7, 16))


@pytest.mark.parametrize("architecture", ["llama", "qwen3"])
def test_one_token_steps_on_the_one_row_kernels_match_the_engines_linear(architecture: str) -> None:
    """Batch-1 decode steps through linear_row / swiglu_row (and the head through linear_row) give the logits
    and K/V of the same steps on the engine's own linear kernel."""
    loaded = TinyModel(architecture=architecture, num_layers=3, max_positions=512).load()
    model = loaded.engine_model()
    prompt = torch.randint(5, 261, (50,), generator=torch.Generator().manual_seed(9)).tolist()

    def run(use_native: bool) -> tuple[list[torch.Tensor], KVCache]:
        model.options = EngineOptions(native_rows=use_native)
        cache = KVCache(model.kv_shape, rows=2, capacity=64)
        model.forward(build_step([], prefills=[(1, 0, prompt)], sample_tokens=[49], device="cpu"), cache)
        return [model.forward(build_step([(1, position, 7 + position)], prefills=[], sample_tokens=[0],
                                         device="cpu"), cache) for position in range(50, 54)], cache

    try:
        ours, ours_cache = run(True)
        theirs, theirs_cache = run(False)
    finally:
        model.options = EngineOptions()
    assert_same_steps(ours, ours_cache, theirs, theirs_cache)


# (rows, out, in): a batched decode step's rows against SmolLM2's matrices and odd sizes: rows not a multiple
# of the kernel's pairs, outputs not a multiple of its tiles of 6, widths not a multiple of 8 (plain loops).
FEW_ROW_SHAPES = [(16, 960, 576), (32, 576, 1536), (3, 1001, 576), (2, 13, 5), (1, 7, 36), (17, 64, 24)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("m", "n_out", "n_in"), FEW_ROW_SHAPES)
def test_linear_rows_matches_f_linear_with_bias_and_residual(m: int, n_out: int, n_in: int, threads: int) -> None:
    g = torch.Generator().manual_seed(m * 1000 + n_out + n_in)
    x, weight = torch.randn(m, n_in, generator=g), torch.randn(n_out, n_in, generator=g) / n_in ** 0.5
    bias, residual = torch.randn(n_out, generator=g), torch.randn(m, n_out, generator=g)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        plain = native.linear_rows(x, weight)
        full = native.linear_rows(x, weight, bias, residual)
        in_place = residual.clone()
        returned = native.linear_rows(x, weight, bias, in_place, out=in_place)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(plain, F.linear(x, weight), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(full, residual + F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
    assert returned is in_place
    torch.testing.assert_close(in_place, full, atol=0, rtol=0)


def test_few_row_kernels_refuse_layouts_they_would_misread() -> None:
    weight = torch.zeros(8, 16)
    with pytest.raises(ValueError, match="x must be a contiguous fp32 CPU tensor of 48"):
        native.linear_rows(torch.zeros(3, 15), weight)
    with pytest.raises(ValueError, match="weight must be a contiguous fp32 CPU tensor"):
        native.linear_rows(torch.zeros(3, 16), weight.bfloat16())
    with pytest.raises(ValueError, match="residual must be"):
        native.linear_rows(torch.zeros(3, 16), weight, residual=torch.zeros(3, 7))
    with pytest.raises(ValueError, match="out must be"):
        native.linear_rows(torch.zeros(3, 16), weight, out=torch.zeros(8, 3).t())
    with pytest.raises(ValueError, match="even number of rows"):
        native.swiglu_rows(torch.zeros(2, 16), torch.zeros(7, 16))


@pytest.mark.parametrize("architecture", ["llama", "qwen3"])
def test_batched_decode_steps_on_the_few_row_kernels_match_onednn(architecture: str) -> None:
    """Decode steps of 16 rows at different lengths through linear_rows / swiglu_rows (the head's sampled rows
    too) give the logits and K/V of the same steps on oneDNN's packed copies, and build no packed copy."""
    loaded = TinyModel(architecture=architecture, num_layers=3, max_positions=512).load()
    model = loaded.engine_model()
    g = torch.Generator().manual_seed(11)
    lengths = [int(t) for t in torch.randint(20, 60, (16,), generator=g)]

    def run(max_tokens: int) -> tuple[list[torch.Tensor], KVCache]:
        model.options = EngineOptions(native_rows_max_tokens=max_tokens)
        cache = KVCache(model.kv_shape, rows=16, capacity=64)
        for tensor in cache.keys + cache.values:
            tensor.copy_(torch.randn(tensor.shape, generator=torch.Generator().manual_seed(3)))
        steps = [build_step([(row, length - 1 + turn, 7 + row + turn) for row, length in enumerate(lengths)],
                            prefills=[], sample_tokens=list(range(16)), device="cpu") for turn in range(3)]
        return [model.forward(step, cache) for step in steps], cache

    try:
        ours, ours_cache = run(64)
        assert model._packed is None  # nothing but few-row steps ran: no oneDNN copy was made
        theirs, theirs_cache = run(0)
        assert model._packed is not None
    finally:
        model.options = EngineOptions()
    assert_same_steps(ours, ours_cache, theirs, theirs_cache)
