"""What bounds the local engine's CPU steps: each kind of kernel timed in place, and the rates the machine
allows, in one process:

    .venv/bin/python bench/engine_bounds.py [--model smollm2-135m-instruct] [--threads 2] [--repeat 3]

- steps: a batch-1 decode step (one row at 400 positions) on the general layers, decode steps of 16 and 32
  rows at 500-1,600 positions, and a 1,024-token prefill step (three chunks with 0-900 positions of past, 13
  decode rows). Every call of the layer matmuls, the head, attention and RMSNorm is timed where it runs
  (perf_counter around the call; CPU kernels are synchronous), summed per step; "other" is the rest of the
  step (RoPE, K/V writes, adds, Python). The one-token path's step is timed whole for scale, and one RMSNorm of
  one row alone for comparison with its in-place time. The prefill entry adds the matmuls' GFLOP/s.
- rates: the layer matrices multiplied by one row back to back (oneDNN on the packed copies, and our
  `native.linear_row` on the plain ones, as a one-token step multiplies them, without anything in between),
  a plain sum over the same bytes, and decode attention alone over 16 rows x 1,600 positions of 30 layers'
  K/V (SDPA, matmul + softmax + matmul, our `native.decode_attention`, and a sum of those K/V), each as GB/s
  of the bytes read. The native entries are left out where the kernels cannot be built.

- floors: for the 16- and 32-row decode steps and the prefill step, the least time the step could take here:
  the bytes it must read (the weights once, each token's attended K/V) at the plain-sum bandwidth above, and
  its FLOPs (layers, head for the sampled rows, attention) at the layer matrices' rate on 512 rows (the peak
  measured in this run); the floor is the larger, and `ratio` the whole step (timed unwrapped, on the engine's
  own path) over it.

Prints one JSON object (milliseconds, GB/s, shares). Timings are the fastest of --repeat rounds; run it alone.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from codedojo.inference import native, resolve_model, transformer
from codedojo.inference import step_batch as sb
from codedojo.inference.kv_cache import KVCache


def best_ms(fn: Callable[[], object], repeat: int, calls: int = 1) -> float:
    fn()
    fastest = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        fastest = min(fastest, (time.perf_counter() - start) / calls)
    return fastest * 1000


def in_place(model: Any, step: Callable[[], object], repeat: int) -> dict[str, float]:
    """The step's total and, summed per step, the time inside each kind of call (fastest round), on the general
    layers (`Transformer.wrapped_calls` times each call where it runs)."""
    spent = {"layer_matmuls": 0.0, "head": 0.0, "attention": 0.0, "rms_norm": 0.0}

    def timed(key: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def call(*args: Any) -> torch.Tensor:
            start = time.perf_counter()
            out = fn(*args)
            spent[key] += time.perf_counter() - start
            return out
        return call

    before = model.options
    model.options = before.updated(one_token_path=False)  # the general layers: every kind of call is wrapped
    try:
        with model.wrapped_calls(timed):
            step()
            fastest: dict[str, float] = {}
            for _ in range(repeat):
                for key in spent:
                    spent[key] = 0.0
                start = time.perf_counter()
                step()
                total = time.perf_counter() - start
                if not fastest or total * 1000 < fastest["step_ms"]:
                    fastest = {"step_ms": total * 1000, **{f"{k}_ms": v * 1000 for k, v in spent.items()}}
    finally:
        model.options = before
    fastest["other_ms"] = fastest["step_ms"] - sum(v for k, v in fastest.items() if k != "step_ms")
    out = {k: three_figures(v) for k, v in fastest.items()}
    out["attention_share"] = round(fastest["attention_ms"] / fastest["step_ms"], 3)
    return out


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = resolve_model(args.model).load(device="cpu", dtype=torch.float32)
    return measure(loaded, args.repeat)


def three_figures(x: float) -> float:
    """`x` to three significant figures: a rate of SmolLM2's weights keeps its decimal, and a tiny test model's
    (a few kB read in microseconds, slower still on a busy machine) does not round to 0."""
    return float(f"{x:.3g}")


def measure(loaded: Any, repeat: int, scale: float = 1.0) -> dict[str, Any]:
    """Every entry for `loaded` (an fp32 `LoadedModel`); `scale` shrinks every length (the tests' tiny model)."""

    def n(length: int) -> int:
        return max(2, int(length * scale))

    model = loaded.engine_model()
    c = model.config
    results: dict[str, Any] = {"model": loaded.name, "torch_threads": torch.get_num_threads(), "repeat": repeat,
                               "scale": scale}

    one = KVCache(model.kv_shape, rows=1, capacity=n(512))
    for tensor in one.keys + one.values:
        tensor.normal_()
    one_step = sb.build_step([(0, n(400) - 1, 5)], prefills=[], sample_tokens=[0], device=model.device)
    results["decode_1_row_400"] = in_place(model, lambda: model.forward(one_step, one), repeat)
    results["decode_1_row_400"]["one_token_path_step_ms"] = round(
        best_ms(lambda: model.forward(one_step, one), repeat, 10), 2)
    row = torch.randn(1, c.hidden_size)
    results["decode_1_row_400"]["rms_norm_alone_us"] = round(
        best_ms(lambda: transformer.rms_norm(row, model.norm, c.rms_norm_eps), repeat, 2000) * 1000, 1)
    results["decode_1_row_400"]["rms_norm_calls"] = 2 * c.num_layers + 1

    rng = random.Random(0)
    ragged = [rng.randint(n(500), n(1600)) for _ in range(16)]
    ragged32 = ragged + [rng.randint(n(500), n(1600)) for _ in range(16)]
    whole: dict[str, float] = {}
    attended = {"decode_16_ragged_rows": ragged, "decode_32_ragged_rows": ragged32}
    for name, lengths in attended.items():
        results[name], whole[name] = decode_rows(model, lengths, capacity=n(2048), repeat=repeat)
    cache = KVCache(model.kv_shape, rows=16, capacity=n(2048))
    for tensor in cache.keys + cache.values:
        tensor.normal_()

    decode = [(r, n(900), 5) for r in range(3, 16)]
    chunks = [(0, n(600), [7] * n(400)), (1, n(900), [7] * n(300)), (2, 0, [7] * n(311))]
    prefill = sb.build_step(decode, prefills=chunks, sample_tokens=list(range(13)), device=model.device)
    entry = in_place(model, lambda: model.forward(prefill, cache), max(1, repeat - 1))
    tokens = prefill.token_ids.shape[0]
    flops = 2 * tokens * sum(m.numel() for layer in model.layers
                             for m in (layer.qkv, layer.o, layer.gate_up, layer.down))
    entry["tokens"] = tokens
    entry["layer_matmul_gflop_s"] = round(flops / entry["layer_matmuls_ms"] / 1e6, 1)
    results["prefill_1024_tokens"] = entry
    whole["prefill_1024_tokens"] = best_ms(lambda: model.forward(prefill, cache), max(1, repeat - 1))
    # positions each token attends to: a decode row its whole length, a chunk's i-th token its past + i; a row
    # reads its K/V once however many of its tokens attend to it (a decode row its length, a chunk past + new)
    attended["prefill_1024_tokens"] = [past + 1 for _, past, _ in decode] + [
        past + i for _, past, new in chunks for i in range(1, len(new) + 1)]
    read_rows = {name: lengths for name, lengths in attended.items()}
    read_rows["prefill_1024_tokens"] = [past + 1 for _, past, _ in decode] + [past + len(new)
                                                                              for _, past, new in chunks]

    # the layer matrices as the engine multiplies them in fp32 steps: oneDNN's packed copies, its linear kernel
    packed = [(m, transformer.pack_weight(m)) for layer in model.layers
              for m in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    linear = transformer.pick_linear(model.device, torch.float32)
    inputs = {width: torch.randn(1, width) for width in {m.shape[1] for m, _ in packed}}
    layer_bytes = sum(m.numel() * m.element_size() for m, _ in packed)
    back_to_back = best_ms(lambda: [linear(inputs[m.shape[1]], p, None) for m, p in packed], repeat, 3)
    flat = torch.cat([m.flatten() for m, _ in packed])
    summed = best_ms(lambda: flat.sum(), repeat, 3)
    results["rates"] = {"layer_weights_mb": round(layer_bytes / 1e6, 1),
                        "layer_matmuls_one_row_back_to_back_gb_s": three_figures(layer_bytes / back_to_back / 1e6),
                        "sum_over_layer_weights_gb_s": three_figures(layer_bytes / summed / 1e6)}
    if native.available():
        ours = best_ms(lambda: [native.linear_row(inputs[m.shape[1]], m) for m, _ in packed], repeat, 3)
        results["rates"]["native_linear_row_back_to_back_gb_s"] = three_figures(layer_bytes / ours / 1e6)

    positions, groups = n(1600), c.num_query_groups
    keys = [torch.randn(16, c.num_kv_heads, positions, c.head_dim) for _ in range(c.num_layers)]
    values = [torch.randn(16, c.num_kv_heads, positions, c.head_dim) for _ in range(c.num_layers)]
    query = torch.randn(16, c.num_kv_heads, groups, c.head_dim)
    kv_bytes = 2 * sum(k.numel() * k.element_size() for k in keys)

    def rate(fn: Callable[[int], object]) -> float:
        return three_figures(kv_bytes / best_ms(lambda: [fn(i) for i in range(c.num_layers)], repeat) / 1e6)

    results["rates"]["decode_attention_16_rows_1600"] = {
        "sdpa_gb_s": rate(lambda i: F.scaled_dot_product_attention(query, keys[i], values[i])),
        "matmul_softmax_matmul_gb_s": rate(lambda i: torch.matmul(
            torch.softmax(torch.matmul(query, keys[i].transpose(-1, -2)) * c.head_dim**-0.5, -1), values[i])),
        "sum_gb_s": rate(lambda i: (keys[i].sum(), values[i].sum())),
    }
    if native.available():
        meta = torch.tensor([[r, positions] for r in range(16)], dtype=torch.int32)
        out = torch.empty_like(query)
        results["rates"]["decode_attention_16_rows_1600"]["native_gb_s"] = rate(
            lambda i: native.decode_attention(query, keys[i], values[i], meta, out))
    keys.clear()
    values.clear()

    # the peak: the layer matrices multiplied by n(512) rows each, as the engine multiplies a prefill
    wide = {width: torch.randn(n(512), width) for width in inputs}
    peak_ms = best_ms(lambda: [linear(wide[m.shape[1]], p, None) for m, p in packed], repeat)
    peak = 2 * n(512) * sum(m.numel() for m, _ in packed) / peak_ms / 1e6
    results["rates"]["layer_matmuls_512_rows_gflop_s"] = three_figures(peak)
    bandwidth = layer_bytes / summed / 1e6
    results["floors"] = {name: floor(model, attended[name], read_rows[name], sampled=sampled, step_ms=whole[name],
                                     bandwidth_gb_s=bandwidth, peak_gflop_s=peak)
                         for name, sampled in (("decode_16_ragged_rows", 16), ("decode_32_ragged_rows", 32),
                                               ("prefill_1024_tokens", 13))}
    return results


def decode_rows(model: Any, lengths: list[int], *, capacity: int, repeat: int) -> tuple[dict[str, float], float]:
    """A decode step of one row per length (each at that many positions): its in-place breakdown, and the whole
    step timed unwrapped on the engine's own path (milliseconds)."""
    cache = KVCache(model.kv_shape, rows=len(lengths), capacity=capacity)
    for tensor in cache.keys + cache.values:
        tensor.normal_()
    step = sb.build_step([(r, length - 1, 5) for r, length in enumerate(lengths)], prefills=[],
                         sample_tokens=list(range(len(lengths))), device=model.device)
    return in_place(model, lambda: model.forward(step, cache), repeat), best_ms(lambda: model.forward(step, cache),
                                                                                repeat)


def floor(model: Any, attended: list[int], read_rows: list[int], *, sampled: int, step_ms: float,
          bandwidth_gb_s: float, peak_gflop_s: float) -> dict[str, float]:
    """The least time a step could take on this machine, from the rates measured in this run: every byte it must
    read (the weights once, and each row's K/V once: `read_rows` positions per row) at the plain-sum bandwidth,
    and every FLOP it must do (each token through the layers' matrices, the `sampled` rows through the head,
    attention's two products over the positions each token attends to, `attended`) at the layers' 512-row
    matmul rate. The floor is the larger of the two (the
    roofline: reading and computing can overlap, nothing can beat either); `ratio` is the whole step, timed
    unwrapped on the engine's own path, over that floor."""
    c = model.config
    tokens = len(attended)
    layer_params = sum(m.numel() for layer in model.layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down))
    head_params = model.lm_head.numel()
    kv_bytes_per_position = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4
    read = 4 * (layer_params + head_params) + kv_bytes_per_position * sum(read_rows)
    flops = (2 * tokens * layer_params + 2 * sampled * head_params
             + 4 * c.num_layers * c.num_heads * c.head_dim * sum(attended))
    bandwidth_ms, compute_ms = read / bandwidth_gb_s / 1e6, flops / peak_gflop_s / 1e6
    least = max(bandwidth_ms, compute_ms)
    return {"step_ms": three_figures(step_ms), "bytes_mb": round(read / 1e6, 1), "gflop": three_figures(flops / 1e9),
            "bandwidth_ms": three_figures(bandwidth_ms), "compute_ms": three_figures(compute_ms),
            "floor_ms": three_figures(least), "ratio": round(step_ms / least, 2)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--repeat", type=int, default=3)
    print(json.dumps(main(parser.parse_args()), indent=2))
