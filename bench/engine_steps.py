"""Per-step A/B of the local engine's CPU choices, each against its own baseline in the same process:

    .venv/bin/python bench/engine_steps.py [--model smollm2-135m-instruct] [--repeat 5] [--threads N]
        [--only packed_weights,small_step,decode_runs,one_token_path,causal_prefill,native_attention,native_rows,
                few_rows,sampler,bf16_one_row]

- packed weights: linear layers on oneDNN-packed matrices (`EngineOptions.packed_weights`) vs the plain
  HF-layout ones, for a decode step of 8 rows at 1,000 positions, 16 ragged rows (500-1,600 positions)
  and a 1,024-token prefill step (three chunks with 0-900 positions of past, 13 decode rows), plus
  the resident memory the packed copies add;
- small steps: a batch-1 decode step (one row at 400 positions) on the plain matrices through F.linear
  vs on the packed ones, the native one-row kernels off; "ours" is the one the engine picks at this thread count
  where those kernels are not built
  (`EngineOptions.small_step_tokens`, `small_step_max_threads`);
- decode runs: ragged rows split into several attention calls (`EngineOptions.run_call_cost`) vs one
  masked call over every row, for the 16 ragged rows, both through SDPA (the native kernel below needs no
  runs);
- native attention: decode tokens attending through the compiled kernel (`codedojo.inference.native`,
  `EngineOptions.native_attention`) vs SDPA, for a batch-1 step (one row at 400 positions), 8 rows
  at 1,000 positions and the 16 ragged rows, whole steps;
- native rows: a batch-1 decode step with its matrices multiplied by our one-row kernels
  (`native.linear_row`, `swiglu_row`; `EngineOptions.native_rows`) vs oneDNN on the packed copies
  (or F.linear on the plain ones where the engine picks those), both on the one-token path, fp32 and bf16;
- few rows: decode steps of 8 rows at 1,000 positions, 16 and 32 ragged rows (500-1,600 positions) with their
  matrices multiplied by our few-row kernels (`native.linear_rows`, `swiglu_rows`;
  `EngineOptions.native_rows_max_tokens`) vs oneDNN on the packed copies, whole steps; and the matmuls alone
  at 4-48 rows: the layers' 120 matrices back to back, and the head, ours vs oneDNN's packed copy (the packed
  weights entries above run with the few-row kernels off, on both sides);
- bf16 one row: a bf16 engine's batch-1 decode step with oneDNN off for its matmuls (torch's own
  matrix-vector kernel: `EngineOptions.reduced_gemv_tokens`) vs on, with the fp32 engine's step for scale;
  and the same step with its vocabulary head on an fp16 copy (`EngineOptions.half_head`) vs the fp32 head;
- one-token path: a batch-1 decode step on the one-token layers (fewer small kernels:
  `EngineOptions.one_token_path`) vs the general layers, fp32 and bf16;
- causal prefill: a step prefilling one 1,024-token prompt from position 0, attention with SDPA's causal
  flag (`EngineOptions.causal_first_chunks`) vs the chunk's explicit mask;
- sampler: probabilities in fp32 and the two-level inverse-CDF search (`sampler.inverse_cdf`) vs
  float64 probabilities and one cumulative sum over the whole vocabulary (what it did before), 16 rows
  (median of 20 calls per round).

Sides alternate on one model, which runs each side's `EngineOptions` (`Transformer.options`); each side keeps its
fastest of --repeat rounds (the machine is shared). Prints one JSON object: milliseconds per step for both sides
and the ratio (baseline / ours, > 1 means faster).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import torch

from codedojo.inference import EngineOptions, native, resolve_model, transformer
from codedojo.inference import step_batch as sb
from codedojo.inference.kv_cache import KVCache
from codedojo.inference.sampler import inverse_cdf
from codedojo.precision import capability, native_bf16

DEFAULTS = EngineOptions()


def cpu_name() -> str:
    """The CPU's model name and whether it has AVX-512 (every figure says which CPU it came from)."""
    name, flags = platform.processor() or platform.machine(), ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line
    return f"{name}, {'AVX-512' if ' avx512f' in flags else 'AVX2' if ' avx2' in flags else 'no AVX2'}"


def fastest_ms(fn: Callable[[], object], calls: int) -> float:
    fn()  # warm: first-call allocations
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1000


def ab(sides: dict[str, Callable[[], float]], repeat: int) -> dict[str, Any]:
    best = {name: float("inf") for name in sides}
    for _ in range(repeat):
        for name, run in sides.items():
            best[name] = min(best[name], run())
    ours, base = best["ours"], best["baseline"]
    return {"ours_ms": round(ours, 1), "baseline_ms": round(base, 1), "ratio": round(base / ours, 2)}


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = resolve_model(args.model).load(device="cpu", dtype=torch.float32)
    model = loaded.engine_model()
    cfg = model.config
    process = psutil.Process()
    rss_before = process.memory_info().rss
    copies = [transformer.pack_weight(m) for layer in model.layers for m in (layer.qkv, layer.o, layer.gate_up,
                                                                             layer.down)]
    copies.append(transformer.pack_weight(model.lm_head))
    packed_copy_mib = (process.memory_info().rss - rss_before) >> 20  # what the engine's own packed copies add
    del copies

    rng = random.Random(0)
    ragged = [rng.randint(500, 1600) for _ in range(16)]
    cache = KVCache(model.kv_shape, rows=16, capacity=2048)
    for tensor in cache.keys + cache.values:
        tensor.normal_()

    def decode_step(lengths: list[int]) -> Callable[[], object]:
        rows = [(row, length - 1, 5) for row, length in enumerate(lengths)]
        return lambda: model.forward(sb.build_step(rows, prefills=[], sample_tokens=list(range(len(rows))),
                                                   device=model.device, run_call_cost=model.options.run_call_cost),
                                     cache)

    def prefill_step() -> object:
        decode = [(row, 900, 5) for row in range(3, 16)]
        chunks = [(0, 600, list(range(10, 410))), (1, 900, list(range(10, 310))), (2, 0, list(range(10, 321)))]
        step = sb.build_step(decode, prefills=chunks, sample_tokens=list(range(13)), device=model.device)
        return model.forward(step, cache)

    shapes = {
        "decode_1_row_400": (decode_step([400]), 10),
        "decode_8_rows_1000": (decode_step([1000] * 8), 6),
        "decode_16_ragged_rows": (decode_step(ragged), 4),
        "prefill_1024_tokens": (prefill_step, 1),
    }
    results: dict[str, Any] = {"model": loaded.name, "cpu": cpu_name(), **capability("cpu"),
                               "torch_threads": torch.get_num_threads(), "repeat": args.repeat,
                               "packed_weights/extra_rss_mib": packed_copy_mib}

    def wanted(group: str) -> bool:
        return not args.only or group in args.only.split(",")

    onednn_steps = DEFAULTS.updated(native_rows_max_tokens=0)  # steps of a few rows take oneDNN, not ours
    for name, (fn, calls) in shapes.items():
        if name == "decode_1_row_400" or not wanted("packed_weights"):
            continue  # one-token steps take the plain matrices whatever the layout: see small_step below
        results[f"packed_weights/{name}"] = ab({
            "ours": with_options(model, onednn_steps, fn, calls),
            "baseline": with_options(model, onednn_steps.updated(packed_weights=False), fn, calls)}, args.repeat)

    def small_step_side(plain: bool) -> Callable[[], float]:
        # torch's kernels only: the native one-row kernels would take both sides' matmuls
        limits = dict(small_step_tokens=1, small_step_max_threads=1 << 10) if plain else dict(
            small_step_tokens=0, small_step_max_threads=0)
        return with_options(model, DEFAULTS.updated(native_rows=False, **limits), *shapes["decode_1_row_400"])

    engine_plain = torch.get_num_threads() <= DEFAULTS.small_step_max_threads and DEFAULTS.small_step_tokens >= 1
    if wanted("small_step"):
        results["small_step/decode_1_row_400"] = {
            **ab({"ours": small_step_side(engine_plain), "baseline": small_step_side(not engine_plain)}, args.repeat),
            "ours_is": "plain" if engine_plain else "packed"}
    if wanted("one_token_path"):
        results["one_token_path/fp32_decode_1_row_400"] = one_token_ab(model, args.repeat)
    if wanted("causal_prefill"):
        results["causal_prefill/prefill_1024_from_0"] = causal_prefill_ab(model, args.repeat)
    if wanted("native_attention") and model.native_attention:
        for name in ("decode_1_row_400", "decode_8_rows_1000", "decode_16_ragged_rows"):
            results[f"native_attention/{name}"] = switch_ab(model, "native_attention", *shapes[name], args.repeat)
    if wanted("native_rows") and model.native_rows:
        results["native_rows/decode_1_row_400"] = switch_ab(model, "native_rows", *shapes["decode_1_row_400"],
                                                            args.repeat)
        bf16 = loaded.engine_model(dtype=torch.bfloat16)
        results["native_rows/bf16_decode_1_row_400"] = switch_ab(bf16, "native_rows", one_row(bf16), 10, args.repeat)
        del bf16
    if wanted("few_rows") and model.native_rows_max_tokens:
        wide = KVCache(model.kv_shape, rows=32, capacity=2048)
        for tensor in wide.keys + wide.values:
            tensor.normal_()
        ragged32 = ragged + [rng.randint(500, 1600) for _ in range(16)]
        rows32 = [(row, length - 1, 5) for row, length in enumerate(ragged32)]
        step32 = sb.build_step(rows32, prefills=[], sample_tokens=list(range(32)), device=model.device)
        few_shapes = {**{k: shapes[k] for k in ("decode_8_rows_1000", "decode_16_ragged_rows")},
                      "decode_32_ragged_rows": (lambda: model.forward(step32, wide), 2)}
        for name, (fn, calls) in few_shapes.items():
            results[f"few_rows/{name}"] = ab({"ours": with_options(model, DEFAULTS, fn, calls),
                                              "baseline": with_options(model, onednn_steps, fn, calls)}, args.repeat)
        del wide
        results.update(few_rows_matmuls(model, args.repeat))
    sdpa = DEFAULTS.updated(native_attention=False)  # runs are how SDPA's calls are cut; the kernel has none
    if wanted("decode_runs"):
        results["decode_runs/decode_16_ragged_rows"] = ab({
            "ours": with_options(model, sdpa, shapes["decode_16_ragged_rows"][0], 4),
            "baseline": with_options(model, sdpa.updated(run_call_cost=10**9), shapes["decode_16_ragged_rows"][0], 4),
        }, args.repeat)
    reads = {}
    for label, cost in (("split", DEFAULTS.run_call_cost), ("one_call", 10**9)):
        step = sb.build_step([(r, n - 1, 5) for r, n in enumerate(ragged)], prefills=[], sample_tokens=[],
                             device=model.device, run_call_cost=cost)
        reads[label] = sum((r.row_stop - r.row_start) * r.kv_len for r in step.decode_runs)
        reads[f"calls_per_layer_{label}"] = len(step.decode_runs)
    results["decode_runs/kv_positions_read"] = {"used": sum(ragged), **reads}

    def ours_search(logprobs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        return inverse_cdf(logprobs.exp(), uniforms)

    def float64_cumsum(logprobs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        # What the sampler did before: probabilities in float64, one cumulative sum over the vocabulary.
        cdf = logprobs.double().exp().cumsum(dim=-1)
        return torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True)[:, 0]

    def sampler_side(search: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], float]:
        def run() -> float:
            times = []
            for _ in range(20):  # fresh logits each call: the real step's are not in cache either
                logprobs = torch.log_softmax(torch.randn(16, cfg.vocab_size) * 3, dim=-1)
                uniforms = torch.rand(16, dtype=torch.float64)
                start = time.perf_counter()
                search(logprobs, uniforms)
                times.append(time.perf_counter() - start)
            return sorted(times)[len(times) // 2] * 1000  # median

        return run

    if wanted("sampler"):
        results["sampler/16_rows_exp_and_search"] = ab(
            {"ours": sampler_side(ours_search), "baseline": sampler_side(float64_cumsum)}, args.repeat
        )
    if wanted("bf16_one_row"):
        results.update(bf16_one_row(loaded, model, args.repeat))
    if wanted("one_token_path"):
        results["one_token_path/bf16_decode_1_row_400"] = one_token_ab(
            loaded.engine_model(dtype=torch.bfloat16), args.repeat)
    return results


def few_rows_matmuls(model: Any, repeat: int, counts: tuple[int, ...] = (4, 8, 16, 24, 32, 48)) -> dict[str, Any]:
    """The matmuls of a step of m rows alone, for each m in `counts`: every layer matrix of `model` multiplied back
    to back, and the head, by `native.linear_rows` on the HF-layout matrices (ours) vs oneDNN's linear on the
    packed copies (baseline), in fp32."""
    matrices = [m for layer in model.layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    packed = [transformer.pack_weight(m) for m in matrices]
    head = transformer.pack_weight(model.lm_head)
    linear = transformer.pick_linear(model.device, torch.float32)
    out: dict[str, Any] = {}
    for m in counts:
        rows = {width: torch.randn(m, width) for width in {w.shape[1] for w in matrices}}

        def layers_side(ours: bool, rows: dict[int, torch.Tensor] = rows) -> Callable[[], float]:
            if ours:
                return lambda: fastest_ms(lambda: [native.linear_rows(rows[w.shape[1]], w, checked=False)
                                                   for w in matrices], 2)
            pairs = list(zip(matrices, packed, strict=True))
            return lambda: fastest_ms(lambda: [linear(rows[w.shape[1]], p, None) for w, p in pairs], 2)

        x = rows[model.config.hidden_size]
        out[f"few_rows/layer_matmuls_{m}_rows"] = ab({"ours": layers_side(True), "baseline": layers_side(False)},
                                                     repeat)
        out[f"few_rows/head_{m}_rows"] = ab({
            "ours": lambda x=x: fastest_ms(lambda: native.linear_rows(x, model.lm_head, checked=False), 3),
            "baseline": lambda x=x: fastest_ms(lambda: linear(x, head, None), 3)}, repeat)
    return out


def one_row(model: Any) -> Callable[[], object]:
    """One batch-1 decode step of `model` (one row at 400 positions of a random KV cache), ready to call."""
    cache = KVCache(model.kv_shape, rows=1, capacity=512)
    for tensor in cache.keys + cache.values:
        tensor.normal_()
    step = sb.build_step([(0, 399, 5)], prefills=[], sample_tokens=[0], device=model.device, dtype=model.dtype)
    return lambda: model.forward(step, cache)


def with_options(model: Any, options: EngineOptions, step: Callable[[], object], calls: int) -> Callable[[], float]:
    """A side of an A/B: `step`'s time (`fastest_ms` of `calls` calls) with `model` on `options`; the model's
    options before are put back after."""
    def run() -> float:
        before = model.options
        model.options = options
        try:
            return fastest_ms(step, calls)
        finally:
            model.options = before
    return run


def switch_ab(model: Any, switch: str, step: Callable[[], object], calls: int, repeat: int) -> dict[str, Any]:
    """`step` with the `EngineOptions` field `switch` on (ours) vs off (baseline), the other fields as the model
    has them; the model's options are left as they were."""
    ours, baseline = (model.options.updated(**{switch: on}) for on in (True, False))
    return ab({"ours": with_options(model, ours, step, calls),
               "baseline": with_options(model, baseline, step, calls)}, repeat)


def causal_prefill_ab(model: Any, repeat: int, tokens: int = 1024) -> dict[str, Any]:
    """A step prefilling one `tokens`-token prompt from position 0: attention with SDPA's causal flag (ours,
    `EngineOptions.causal_first_chunks`) vs the chunk's explicit mask (baseline)."""
    cache = KVCache(model.kv_shape, rows=1, capacity=tokens)
    step = sb.build_step([], prefills=[(0, 0, [5] * tokens)], sample_tokens=[tokens - 1], device=model.device,
                         dtype=model.dtype)
    return switch_ab(model, "causal_first_chunks", lambda: model.forward(step, cache), 1, repeat)


def one_token_ab(model: Any, repeat: int) -> dict[str, Any]:
    """`model`'s batch-1 decode step (one row at 400 positions) on the one-token path (ours) vs the general
    layers (baseline)."""
    return switch_ab(model, "one_token_path", one_row(model), 10, repeat)


def bf16_one_row(loaded: Any, fp32: Any, repeat: int) -> dict[str, Any]:
    """A bf16 engine's batch-1 decode step (one row at 400 positions) with oneDNN off for its matmuls
    (`EngineOptions.reduced_gemv_tokens`, ours) vs on (the baseline), and the fp32 engine's step for scale."""
    bf16 = loaded.engine_model(dtype=torch.bfloat16)
    step = one_row(bf16)
    gemv_off = DEFAULTS.updated(reduced_gemv_tokens=0)
    fp32_step = one_row(fp32)
    return {"bf16_one_row/decode_1_row_400": {
        **ab({"ours": with_options(bf16, DEFAULTS, step, 10), "baseline": with_options(bf16, gemv_off, step, 10)},
             repeat),
        "fp32_ms": round(min(fastest_ms(fp32_step, 10) for _ in range(repeat)), 1),
        "native_bf16": native_bf16("cpu")},
        "bf16_one_row/fp16_head_vs_fp32_head": switch_ab(bf16, "half_head", step, 10, repeat)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--only", default="", help="comma-separated groups to run (default: all)")
    print(json.dumps(main(parser.parse_args()), indent=2))
