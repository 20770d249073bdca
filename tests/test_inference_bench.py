"""bench/engine.py still runs end to end (tiny model, every count scaled down)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import pytest


def _bench() -> Any:
    path = Path(__file__).resolve().parents[1] / "bench" / "engine.py"
    spec = importlib.util.spec_from_file_location("bench_engine", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _args(**changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**{**dict(model="tiny-llama", device="cpu", dtype="float32", workloads="abcd",
                                        scale=0.1, repeat=1, threads=0, peer=None, peer_dtypes="f32,bf16",
                                        no_hf=False), **changes})


def test_engine_bench_runs_all_workloads_on_a_tiny_model() -> None:
    bench = _bench()
    args = _args()
    results = asyncio.run(bench.main(args))
    for name in "abc":
        workload = results[name]
        assert workload["ours"]["generated"] == workload["hf"]["generated"] > 0
        assert workload["ratio"] > 0
    assert results["b"]["ours"]["prompt_tokens_computed"] < results["b"]["hf"]["prompt_tokens_computed"]
    batch1 = results["d"]
    assert batch1["shape"] == {"prompt": 40, "new_tokens": 13}
    assert batch1["ours"]["decode_tok_s"] > 0 and batch1["hf"]["prefill_tok_s"] > 0


def test_engine_bench_without_hf_reports_ours_alone() -> None:
    results = asyncio.run(_bench().main(_args(workloads="bd", no_hf=True)))
    assert results["b"]["ours"]["generated"] > 0 and "hf" not in results["b"] and "ratio" not in results["b"]
    assert results["d"]["ours"]["decode_tok_s"] > 0 and "hf" not in results["d"]


def test_engine_steps_times_the_bf16_one_row_step_and_its_fp16_head_on_a_tiny_model() -> None:
    """bench/engine_steps.py's bf16 one-row, one-token-path and causal-prefill entries run (a tiny model with
    room for 400 positions) and put the engine's switches back."""
    import importlib.util as util

    import torch

    from codedojo.inference import EngineOptions
    from codedojo.inference.specs import TinyModel

    path = Path(__file__).resolve().parents[1] / "bench" / "engine_steps.py"
    spec = util.spec_from_file_location("bench_engine_steps", path)
    assert spec is not None and spec.loader is not None
    steps = util.module_from_spec(spec)
    spec.loader.exec_module(steps)
    loaded = TinyModel(max_positions=512).load()
    out = steps.bf16_one_row(loaded, loaded.engine_model(), 1)
    assert torch._C._get_mkldnn_enabled()
    fp32 = loaded.engine_model()
    out["one_token_path/fp32_decode_1_row_400"] = steps.one_token_ab(fp32, 1)
    assert fp32.options == EngineOptions()
    out["one_token_path/bf16_decode_1_row_400"] = steps.one_token_ab(loaded.engine_model(dtype=torch.bfloat16), 1)
    out["causal_prefill/prefill_64_from_0"] = steps.causal_prefill_ab(fp32, 1, tokens=64)
    assert fp32.options == EngineOptions()
    for key in ("bf16_one_row/decode_1_row_400", "bf16_one_row/fp16_head_vs_fp32_head",
                "one_token_path/bf16_decode_1_row_400", "one_token_path/fp32_decode_1_row_400",
                "causal_prefill/prefill_64_from_0"):
        assert out[key]["ours_ms"] > 0 and out[key]["baseline_ms"] > 0 and out[key]["ratio"] > 0


def test_engine_steps_times_the_few_row_kernels_against_onednn_on_a_tiny_model() -> None:
    """bench/engine_steps.py's few-row matmul entries run on a tiny model at every row count, each side timed, and
    its CPU line names the CPU and its vector width."""
    import importlib.util as util

    from codedojo.inference.specs import TinyModel

    path = Path(__file__).resolve().parents[1] / "bench" / "engine_steps.py"
    spec = util.spec_from_file_location("bench_engine_steps_rows", path)
    assert spec is not None and spec.loader is not None
    steps = util.module_from_spec(spec)
    spec.loader.exec_module(steps)
    out = steps.few_rows_matmuls(TinyModel(max_positions=64).load().engine_model(), 1, counts=(4, 16))
    assert sorted(out) == ["few_rows/head_16_rows", "few_rows/head_4_rows", "few_rows/layer_matmuls_16_rows",
                           "few_rows/layer_matmuls_4_rows"]
    for entry in out.values():  # a tiny model's matmuls can round to 0.0 ms; the ratio is of the exact times
        assert entry["ours_ms"] >= 0 and entry["baseline_ms"] >= 0 and entry["ratio"] > 0
    assert steps.cpu_name().rsplit(", ", 1)[1] in ("AVX-512", "AVX2", "no AVX2")


def test_engine_threads_times_the_step_on_each_thread_and_restores_the_thread_count() -> None:
    """bench/engine_threads.py runs on a tiny model: every side timed, torch's thread count put back."""
    import importlib.util as util
    import sys

    import torch

    from codedojo.inference.specs import TinyModel

    bench_dir = Path(__file__).resolve().parents[1] / "bench"
    sys.path.insert(0, str(bench_dir))
    try:
        spec = util.spec_from_file_location("bench_engine_threads", bench_dir / "engine_threads.py")
        assert spec is not None and spec.loader is not None
        probe = util.module_from_spec(spec)
        spec.loader.exec_module(probe)
    finally:
        sys.path.remove(str(bench_dir))
    threads = torch.get_num_threads()
    out = probe.measure(TinyModel(max_positions=512).load(), 3)
    assert torch.get_num_threads() == threads == out["torch_threads"]
    for side in ("main_ms", "worker_ms", "main_after_worker_ms", "worker_after_release_ms", "main_after_release_ms",
                 "main_1_thread_ms", "worker_1_thread_ms"):
        fastest, median = out[side]
        assert 0 < fastest <= median


def test_engine_bounds_times_each_kind_of_call_in_place_on_a_tiny_model() -> None:
    """bench/engine_bounds.py runs on a tiny model at a tenth of the lengths: every step's kinds of calls are
    timed and leave a non-negative rest, and the engine's switches and kernels are put back."""
    import importlib.util as util

    from codedojo.inference import transformer
    from codedojo.inference.specs import TinyModel

    path = Path(__file__).resolve().parents[1] / "bench" / "engine_bounds.py"
    spec = util.spec_from_file_location("bench_engine_bounds", path)
    assert spec is not None and spec.loader is not None
    bounds = util.module_from_spec(spec)
    spec.loader.exec_module(bounds)
    norm = transformer.rms_norm
    out = bounds.measure(TinyModel(max_positions=512).load(), 1, scale=0.1)
    assert transformer.rms_norm is norm
    for step in ("decode_1_row_400", "decode_16_ragged_rows", "decode_32_ragged_rows", "prefill_1024_tokens"):
        entry = out[step]
        assert entry["step_ms"] > 0 and entry["layer_matmuls_ms"] > 0 and entry["attention_ms"] > 0
        assert entry["head_ms"] > 0 and entry["rms_norm_ms"] > 0 and entry["other_ms"] >= 0
        assert 0 < entry["attention_share"] < 1
    assert out["prefill_1024_tokens"]["layer_matmul_gflop_s"] > 0
    rates = out["rates"]
    assert rates["sum_over_layer_weights_gb_s"] > 0 and rates["layer_matmuls_one_row_back_to_back_gb_s"] > 0
    assert all(v > 0 for v in rates["decode_attention_16_rows_1600"].values())
    assert rates["layer_matmuls_512_rows_gflop_s"] > 0
    floors = out["floors"]
    assert set(floors) == {"decode_16_ragged_rows", "decode_32_ragged_rows", "prefill_1024_tokens"}
    for entry in floors.values():
        assert entry["floor_ms"] == max(entry["bandwidth_ms"], entry["compute_ms"]) > 0
        # the bench rounds the ratio to two decimals: a tiny model's ratio can be below 0.1
        assert entry["ratio"] == pytest.approx(entry["step_ms"] / entry["floor_ms"], rel=0.02, abs=0.005)
    # twice the rows: the same weights, more K/V and FLOPs
    assert floors["decode_32_ragged_rows"]["bytes_mb"] > floors["decode_16_ragged_rows"]["bytes_mb"]
    assert floors["decode_32_ragged_rows"]["gflop"] > floors["decode_16_ragged_rows"]["gflop"]
    # a prefill reads each row's K/V once, not once per token: at a tenth of the lengths, 13 decode rows of 91
    # positions and chunks of 60 + 40, 90 + 30 and 0 + 31, besides the weights
    model = TinyModel(max_positions=512).load().engine_model()
    c = model.config
    per_position = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4
    weights = 4 * (model.lm_head.numel() + sum(m.numel() for layer in model.layers
                                               for m in (layer.qkv, layer.o, layer.gate_up, layer.down)))
    expected = (weights + per_position * (13 * 91 + 100 + 120 + 31)) / 1e6
    assert floors["prefill_1024_tokens"]["bytes_mb"] == pytest.approx(expected, abs=0.06)
