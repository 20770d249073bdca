"""bench/trainer.py and bench/gpu.py still run end to end (tiny shapes, on the CPU)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_trainer_bench_measures_every_configuration_on_a_tiny_model() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "trainer.py"), "--tiny", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    result = json.loads(out)
    assert set(result["tokens_per_sec"]) == {"today", "kernels", "head", "bf16", "share", "all", "hf_fp32", "hf_bf16",
                                             "sft_today", "sft_new"}
    assert all(v > 0 for v in result["tokens_per_sec"].values())
    assert {"all_vs_today", "sft_new_vs_sft_today"} <= set(result["ratios"])
    assert any(k.startswith("all_vs_hf_fastest(") for k in result["ratios"])
    assert "native_bf16" in result["capability"]
    # the groups' shared openings are laid out once
    assert result["rl_workload"]["laid_out_with_sharing"] < result["rl_workload"]["tokens"]


def test_gpu_bench_runs_on_the_cpu_with_the_tiny_shape(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_gpu_test", BENCH / "gpu.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_gpu_test"] = bench
    spec.loader.exec_module(bench)
    out = tmp_path / "gpu.json"
    result = bench.main(["--device", "cpu", "--tiny", "--out", str(out)])
    assert json.loads(out.read_text())["shapes"].keys() == {"tiny"}
    tiny = result["shapes"]["tiny"]
    for key in "abc":
        assert tiny["engine"][key]["ours"]["generated"] == tiny["engine"][key]["hf"]["generated"] > 0
    decode = tiny["engine"]["batch1_decode"]
    assert decode["ours_tok_s"] > 0 and decode["hf_tok_s"] > 0 and decode["bandwidth_floor_tok_s"] > 0
    for side in ("all", "hf_bf16"):
        assert tiny["trainer"][side]["tok_s"] > 0 and tiny["trainer"][side]["model_tflops"] >= 0
    assert result["peaks"]["bf16_matmul_tflops"] > 0 and result["peaks"]["copy_gb_per_s"] > 0
