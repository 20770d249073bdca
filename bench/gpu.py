"""One script for a session lent a GPU: rollout and training throughput in bf16 against Hugging Face, and
against what the device can do, measured in the same run.

    python bench/gpu.py [--shapes smollm2-135m,qwen3-0.6b,qwen3-1.7b] [--scale 1.0] [--out results.json]
    python bench/gpu.py --device cpu --tiny        # the CPU smoke test the suite runs

No weights can be downloaded on the device machine, so each model is a random-init model of the named
shape (the same tensor sizes, so the same FLOPs and bytes per token). For each shape, in bf16:

  engine      bench/engine.py's workloads (a: 32 ragged prompts, b: a multi-turn GRPO group, c: 16
              agentic episodes) through codedojo's engine and through HF `generate`, plus batch-1 decode
              (400-token prompt, 128 new tokens) on both; decode is also reported as a fraction of the
              memory-bandwidth floor (weight bytes read per token / the copy bandwidth measured here)
  trainer     bench/trainer.py's RL step (GRPO groups, 2 x 4 episodes) with every saving on, against HF over
              padded pairs under bf16 autocast; reported as tokens/s and model FLOPs utilisation against the
              bf16 matmul rate measured here (and against --peak-tflops when given)

Before the shapes it measures the device: a large bf16 matmul (TFLOP/s) and a large copy (GB/s). Prints one
JSON object (also written to --out), flushed per shape so a run cut short keeps what it finished.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from codedojo.inference import LocalEngine, SamplingParams
from codedojo.inference.byte_tokenizer import byte_level_tokenizer
from codedojo.inference.chat_templates import CHATML
from codedojo.inference.specs import LoadedModel, count_parameters

SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         tie_word_embeddings=True, rope_theta=100000.0),
    "qwen3-0.6b": dict(model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       tie_word_embeddings=True, rope_theta=1000000.0),
    "qwen3-1.7b": dict(model_type="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       tie_word_embeddings=True, rope_theta=1000000.0),
    # the smoke test's shape
    "tiny": dict(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=10000.0),
}


def _bench_module(name: str) -> ModuleType:
    """bench/<name>.py as a module (the bench folder is scripts, not a package)."""
    key = f"bench_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, Path(__file__).resolve().parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_peaks(device: torch.device, *, tiny: bool) -> dict[str, float]:
    """bf16 matmul TFLOP/s and copy GB/s, best of a few runs."""
    n = 512 if tiny else 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    best_mm = float("inf")
    for _ in range(3 if tiny else 10):
        _sync(device)
        t0 = time.perf_counter()
        a @ b
        _sync(device)
        best_mm = min(best_mm, time.perf_counter() - t0)
    src = torch.empty((1 << 20) if tiny else (1 << 30), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best_copy = float("inf")
    for _ in range(3 if tiny else 10):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best_copy = min(best_copy, time.perf_counter() - t0)
    # a copy reads and writes every byte
    # 4 significant digits, not 2 decimals: a CPU without native bf16 emulates it at ~0.001 TFLOP/s
    return {"bf16_matmul_tflops": float(f"{2 * n ** 3 / best_mm / 1e12:.4g}"),
            "copy_gb_per_s": round(2 * src.numel() / best_copy / 1e9, 1)}


def random_model(shape: dict[str, Any], *, device: torch.device, dtype: torch.dtype, seed: int = 0) -> LoadedModel:
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    fields = dict(shape)
    family = fields.pop("model_type")
    common = dict(max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if family == "qwen3":
        config = Qwen3Config(**fields, **common, architectures=["Qwen3ForCausalLM"])
    else:
        config = LlamaConfig(**fields, **common, architectures=["LlamaForCausalLM"])
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    # the byte tokenizer only supplies eos/pad ids: every workload samples token ids directly
    return LoadedModel(name=f"random-{family}", hf_config=config,
                       tokenizer=byte_level_tokenizer(chat_template=CHATML), state_dict=state)


async def batch1_decode(engine: LocalEngine, hf_model: Any, *, vocab: int, prompt_len: int, new: int,
                        device: torch.device) -> dict[str, float]:
    prompt = [3 + (i * 7919) % (vocab - 3) for i in range(prompt_len)]
    params = SamplingParams(max_new_tokens=new, ignore_eos=True, seed=0)
    await engine.generate(prompt[:32], SamplingParams(max_new_tokens=4, ignore_eos=True))
    best_ours = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        out = await engine.generate(prompt, params)
        best_ours = min(best_ours, time.perf_counter() - t0)
    assert len(out.token_ids) == new
    ids = torch.tensor([prompt], device=device)
    best_hf = float("inf")
    for _ in range(2):
        _sync(device)
        t0 = time.perf_counter()
        hf_model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=True, top_k=0, pad_token_id=0)
        _sync(device)
        best_hf = min(best_hf, time.perf_counter() - t0)
    return {"ours_tok_s": round(new / best_ours, 1), "hf_tok_s": round(new / best_hf, 1),
            "ratio": round(best_hf / best_ours, 2)}


def training_flops(data: list[Any], *, shape: dict[str, Any], used_only: bool) -> float:
    """Model FLOPs of one training step (forward + backward = 3x forward): 2 per weight per token for the
    matmuls, the vocabulary head only where logprobs are read when `used_only`, and causal attention."""
    count = count_parameters(shape) or 0
    head = shape["vocab_size"] * shape["hidden_size"]
    body = count - head  # embeddings are a lookup; the tied head is counted separately
    heads = shape["num_attention_heads"]
    head_dim = shape.get("head_dim") or shape["hidden_size"] // heads
    flops = 0.0
    for s in data:
        n = len(s.ids)
        head_rows = sum(s.mask) if used_only else n
        flops += 2 * body * n + 2 * head * head_rows
        flops += 2 * shape["num_hidden_layers"] * heads * head_dim * n * n  # QK^T and PV, causal half
    return 3 * flops


def bench_shape(name: str, *, device: torch.device, scale: float, peaks: dict[str, float],
                peak_tflops: float | None, tiny: bool) -> dict[str, Any]:
    engine_bench, trainer_bench = _bench_module("engine"), _bench_module("trainer")
    shape = SHAPES[name]
    result: dict[str, Any] = {"shape": name, "parameters": count_parameters(shape)}
    loaded = random_model(shape, device=device, dtype=torch.bfloat16)
    hf_model = loaded.hf_model()
    engine = LocalEngine(loaded.engine_model(), loaded.tokenizer, seed=0)
    del loaded
    hf = engine_bench.HFBaseline(hf_model, pad_id=0)
    vocab = shape["vocab_size"]

    async def engine_side() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, workload in (("a", engine_bench.workload_a), ("b", engine_bench.workload_b),
                              ("c", engine_bench.workload_c)):
            out[key] = await workload(engine, hf, vocab, scale, 1)
        out["batch1_decode"] = await batch1_decode(engine, hf_model, vocab=vocab, prompt_len=16 if tiny else 400,
                                                   new=8 if tiny else 128, device=device)
        await engine.close()
        return out

    started = time.perf_counter()
    result["engine"] = asyncio.run(engine_side())
    weight_bytes = 2 * (count_parameters(shape) or 0)  # bf16: every weight is read once per decode step
    floor_tok_s = peaks["copy_gb_per_s"] * 1e9 / weight_bytes
    decode = result["engine"]["batch1_decode"]
    decode["bandwidth_floor_tok_s"] = round(floor_tok_s, 1)
    decode["ours_fraction_of_floor"] = round(decode["ours_tok_s"] / floor_tok_s, 3)
    decode["hf_fraction_of_floor"] = round(decode["hf_tok_s"] / floor_tok_s, 3)
    result["engine_seconds"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    fields = {k: v for k, v in shape.items()}
    data = trainer_bench.rl_workload(groups=2, group_size=4, seed=0, scale=0.05 if tiny else 1.0, vocab=vocab - 10)
    configs = trainer_bench.configurations(data, [], budget=8192, shape=fields, device=str(device))
    train: dict[str, Any] = {"tokens": sum(len(s.ids) for s in data), "trainable": sum(sum(s.mask) for s in data)}
    for key, flops_used_only in (("all", True), ("hf_bf16", False)):
        seconds = trainer_bench.time_steps(configs[key][1], repeat=2)
        flops = training_flops(data, shape=shape, used_only=flops_used_only)
        entry = {"tok_s": round(train["tokens"] / seconds, 1), "seconds": round(seconds, 3),
                 "model_tflops": round(flops / seconds / 1e12, 2),
                 "mfu_vs_measured_matmul": (round(flops / seconds / 1e12 / peaks["bf16_matmul_tflops"], 3)
                                            if peaks["bf16_matmul_tflops"] > 0 else None)}
        if peak_tflops:
            entry["mfu_vs_nominal"] = round(flops / seconds / 1e12 / peak_tflops, 3)
        train[key] = entry
    train["all_vs_hf_bf16"] = round(train["all"]["tok_s"] / train["hf_bf16"]["tok_s"], 2)
    result["trainer"] = train
    result["trainer_seconds"] = round(time.perf_counter() - started, 1)
    if device.type == "cuda":
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 1)
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default="smollm2-135m,qwen3-0.6b,qwen3-1.7b")
    parser.add_argument("--scale", type=float, default=1.0, help="engine workloads' counts (bench/engine.py)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's nominal dense bf16 peak")
    parser.add_argument("--tiny", action="store_true", help="the tiny shape, scaled-down workloads (smoke test)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    shapes = ["tiny"] if args.tiny else args.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    started = time.perf_counter()
    peaks = device_peaks(device, tiny=args.tiny)
    results: dict[str, Any] = {
        "bench": "gpu", "command": " ".join(["bench/gpu.py", *(argv if argv is not None else sys.argv[1:])]),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "dtype": "bf16", "peaks": peaks, "shapes": {},
    }
    for name in shapes:
        results["shapes"][name] = bench_shape(name, device=device, scale=0.1 if args.tiny else args.scale,
                                              peaks=peaks, peak_tflops=args.peak_tflops, tiny=args.tiny)
        print(json.dumps({name: results["shapes"][name]}), flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=2))
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
