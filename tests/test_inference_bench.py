"""bench/engine.py still runs end to end (tiny model, every count scaled down)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from pathlib import Path
from typing import Any


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
