"""bench/trainer.py and bench/gpu.py still run end to end (tiny shapes, on the CPU)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from codedojo.precision import native_bf16

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_trainer_bench_measures_every_configuration_on_a_tiny_model() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "trainer.py"), "--tiny", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    result = json.loads(out)
    measured = {"today", "kernels", "head", "share", "all", "hf_fp32", "sft_today", "sft_new", "sft_share"}
    # bf16 configurations only where the CPU computes bf16 natively (emulated bf16 would take hours)
    emulated = set() if native_bf16("cpu") else {"bf16", "hf_bf16"}
    assert set(result["tokens_per_sec"]) == measured | ({"bf16", "hf_bf16"} - emulated)
    assert set(result["left_out"]) == emulated
    assert result["all_dtype"] == ("bfloat16" if native_bf16("cpu") else "float32")
    assert all(v > 0 for v in result["tokens_per_sec"].values())
    assert {"all_vs_today", "sft_new_vs_sft_today", "sft_share_vs_sft_new"} <= set(result["ratios"])
    assert any(k.startswith("all_vs_hf_fastest(") for k in result["ratios"])
    assert "native_bf16" in result["capability"]
    # the groups' shared openings are laid out once
    assert result["rl_workload"]["laid_out_with_sharing"] < result["rl_workload"]["tokens"]


def test_trainer_bench_can_time_each_configuration_in_a_process_of_its_own() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "trainer.py"), "--tiny", "--repeat", "1", "--only",
                          "today,all", "--isolate"], capture_output=True, text=True, timeout=300, check=True).stdout
    result = json.loads(out)
    assert result["isolated"] is True and set(result["tokens_per_sec"]) == {"today", "all"}
    assert all(v > 0 for v in result["tokens_per_sec"].values()) and "all_vs_today" in result["ratios"]


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


def _learning_bench():
    spec = importlib.util.spec_from_file_location("bench_learning_test", BENCH / "learning.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_learning_test"] = bench
    spec.loader.exec_module(bench)
    return bench


def test_the_learning_plan_is_registered_once_and_a_different_one_is_refused(tmp_path: Path) -> None:
    bench = _learning_bench()
    plan = {"hypothesis": bench.HYPOTHESIS, "command": "python bench/learning.py", "git_commit": "abc",
            "settings": {"n": 2, "tier": "guided"}, "seeds": {"eval": 7}, "held_out_tasks": ["a-001-guided"]}
    registered = bench.register(plan, tmp_path)
    on_disk = json.loads((tmp_path / "plan.json").read_text())
    assert on_disk == registered and len(registered["sha256"]) == 64 and registered["registered_at"]
    # the same plan again (another commit, another spelling of the command) keeps the first registration
    again = bench.register({**plan, "git_commit": "def", "command": "python bench/learning.py --n 2"}, tmp_path)
    assert again == registered
    try:
        bench.register({**plan, "settings": {"n": 4, "tier": "guided"}, "seeds": {"eval": 8}}, tmp_path)
    except bench.PlanMismatch as refused:
        assert "seeds, settings" in str(refused) and "new --work" in str(refused)
    else:
        raise AssertionError("a different plan was accepted in the same work folder")
    assert json.loads((tmp_path / "plan.json").read_text()) == registered


def test_rejection_sampling_rolls_out_at_least_as_many_episodes_as_grpo() -> None:
    bench = _learning_bench()
    tasks = [f"t{i}" for i in range(10)]
    for episodes in (1, 7, 10, 48, 192):
        chosen, per_task = bench.rs_tasks(tasks, episodes)
        assert episodes <= len(chosen) * per_task < episodes + per_task
        assert chosen == tasks[:len(chosen)]
    assert bench.rs_tasks(tasks, 48) == (tasks[:10], 5)
    # the baseline matches every episode GRPO rolls out, the over-sampled groups included
    args = bench.parse_args(["--grpo-steps", "12", "--rollout-batch-size", "8", "--n-samples", "4"])
    assert bench.grpo_episodes(args) == 12 * 8 * 4
    args = bench.parse_args(["--grpo-steps", "12", "--rollout-batch-size", "8", "--over-sampling", "16",
                             "--n-samples", "4"])
    assert bench.grpo_episodes(args) == 12 * 16 * 4


def test_the_learning_bench_runs_every_stage_on_a_tiny_model(tmp_path: Path) -> None:
    """Every stage end to end with the tiny random model (which solves nothing: the rejection-sampling baseline
    then falls back to the SFT model); the plan is registered first and a second run reuses every stage."""
    import shutil

    from codedojo.tasks.task import examples_dir

    bench = _learning_bench()
    tasks = tmp_path / "tasks"
    for name, repo in (("fix-add", "calc"), ("fix-greeting", "greet")):
        shutil.copytree(examples_dir() / name, tasks / name)
        toml = tasks / name / "task.toml"
        toml.write_text(toml.read_text().replace("[metadata]\n", f'[metadata]\nrepository = "{repo}"\n'))
    argv = ["--tasks", str(tasks), "--held-out", "calc", "--model", "tiny-llama", "--work", str(tmp_path / "work"),
            "--out", str(tmp_path / "out"), "--n", "1", "--sft-epochs", "1", "--grpo-steps", "1",
            "--rollout-batch-size", "1", "--n-samples", "2", "--max-new-tokens", "160", "--max-context", "4096",
            "--concurrency", "2"]
    assert bench.main(argv) == 0
    result = json.loads((tmp_path / "out" / "learning.json").read_text())
    # the expert needs a git work tree to read its reference fix from: fix-greeting has one, fix-add not
    assert result["plan"]["held_out_tasks"] == ["fix-add"] and result["plan"]["training_tasks"] == ["fix-greeting"]
    assert result["plan"]["rs_episodes"] == 2 and result["rs_solved_episodes"] == 0
    for name in ("base", "sft", "grpo", "rs"):
        assert result[name]["tasks"] == 1 and result[name]["pass@1"] is not None
    assert set(result["grpo_minus_sft"]) == {"mean", "stderr", "tasks", "exceeds_2_stderr"}
    assert len(result["reward_curve"]) == 1
    assert (tmp_path / "out" / "learning.png").stat().st_size > 0
    times = json.loads((tmp_path / "work" / "times.json").read_text())
    # the hypothesis's two evaluations run right after GRPO, before the baseline's stages
    order = list(times)
    assert order.index("eval_sft") < order.index("eval_grpo") < order.index("rs") < order.index("eval_base")
    assert bench.main(argv) == 0  # every stage cached: nothing reruns, the stage times stay the first run's
    assert json.loads((tmp_path / "work" / "times.json").read_text()) == times


def test_the_grpo_probe_runs_each_learning_rate_from_one_sft_model(tmp_path: Path) -> None:
    """bench/grpo_probe.py: the learning bench's first stages once, then a short GRPO run per learning rate,
    each step's training figures in the JSON; no held-out task is run."""
    import shutil

    from codedojo.tasks.task import examples_dir

    _learning_bench()
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_grpo_probe_test", BENCH / "grpo_probe.py")
        assert spec is not None and spec.loader is not None
        probe = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(probe)
    finally:
        sys.path.remove(str(BENCH))
    tasks = tmp_path / "tasks"
    for name, repo in (("fix-add", "calc"), ("fix-greeting", "greet")):
        shutil.copytree(examples_dir() / name, tasks / name)
        toml = tasks / name / "task.toml"
        toml.write_text(toml.read_text().replace("[metadata]\n", f'[metadata]\nrepository = "{repo}"\n'))
    work = tmp_path / "work"
    argv = ["--lrs", "1e-5,1e-4", "--steps", "1", "--tasks", str(tasks), "--held-out", "calc", "--model",
            "tiny-llama", "--work", str(work), "--rollout-batch-size", "1", "--n-samples", "2",
            "--max-new-tokens", "160", "--max-context", "4096", "--concurrency", "2", "--global-batch-size", "1",
            "--over-sampling", "2", "--dynamic-sampling", "--lr-warmup", "1"]
    assert probe.main(argv) == 0
    result = json.loads((work / "grpo_probe.json").read_text())
    assert set(result["runs"]) == {"1e-05", "0.0001"} and result["global_batch_size"] == 1
    assert result["episodes_per_step"] == 4 and result["dynamic_sampling"] and result["lr_warmup"] == 1
    for lr, rows in result["runs"].items():
        assert [r["step"] for r in rows] == [0] and "rollout/reward_mean" in rows[0]
        # the settings reached the trainer: two groups rolled out; the tiny model solves nothing, so both groups
        # are uniform and dynamic sampling drops them: no optimizer step
        assert rows[0]["rollout/groups_trained"] == 0 and "train/optimizer_steps" not in rows[0]
        run = work / f"probe_lr{float(lr):g}_gbs1_os2of1_ds_wu1"
        episodes = [json.loads(line) for line in (run / "metrics.jsonl").open()]
        assert any(r.get("rollout/groups") == 2.0 for r in episodes)
    assert (work / "sft" / "final" / "config.json").is_file()
    assert not list(work.glob("eval_*")) and not (work / "plan.json").exists()  # nothing held out ran


def test_default_run_summary_reads_a_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"recipe": {"bf16": False}, "device": "cpu"}))
    rows = [{"step": 0, "kind": "eval", "eval/held-out/pass@1": 0.25},
            {"step": 0, "kind": "train", "rollout/reward_mean": 0.5, "rollout/mixed_group_frac": 0.5,
             "rollout/turns_mean": 4.0, "perf/rollout_seconds": 80.04, "perf/train_seconds": 60.0,
             "perf/rollout_sampled_tokens_per_sec": 30.0, "perf/rss_gib": 3.666, "perf/peak_rss_gib": 7.1}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "learning.json").write_text(json.dumps({"train_reward": [0.5]}))
    (tmp_path / "cache" / "sft" / "k").mkdir(parents=True)
    (tmp_path / "cache" / "sft" / "k" / "sft.json").write_text(json.dumps({"tokens": 1000, "seconds": 10.0}))
    (tmp_path / "time.log").write_text("\tElapsed (wall clock) time (h:mm:ss or m:ss): 38:28.30\n"
                                       "\tMaximum resident set size (kbytes): 11047876\n")
    out = subprocess.run([sys.executable, str(BENCH / "default_run.py"), str(run), "--cache", str(tmp_path / "cache"),
                          "--time-log", str(tmp_path / "time.log")], capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    assert result["training_precision"] == "float32"
    assert result["grpo_steps"] == [{"step": 1, "reward_mean": 0.5, "mixed_group_frac": 0.5, "turns_mean": 4.0,
                                     "rollout_s": 80.0, "train_s": 60.0, "rollout_sampled_tok_s": 30.0,
                                     "rss_gib": 3.67, "peak_rss_gib": 7.1}]
    assert result["sft"] == {"tokens": 1000, "seconds": 10.0, "tokens_per_sec": 100.0}
    assert result["wall_clock"] == "38:28.30" and result["peak_rss_gib"] == 10.54
    assert result["learning"] == {"train_reward": [0.5]}


def test_trainer_bench_counts_a_steps_arithmetic_by_hand() -> None:
    """step_flops on a group of two sequences sharing a 20-token opening, against the count by hand."""
    spec = importlib.util.spec_from_file_location("bench_trainer_flops_test", BENCH / "trainer.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up
    spec.loader.exec_module(bench)
    shape = dict(bench.SMOLLM2_SHAPE, vocab_size=100, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1)
    opening = list(range(1, 21))
    data = [bench.Seq([*opening, 30, 31, 32], [0] * 19 + [1, 1, 0], 0), bench.Seq([*opening, 40], [0] * 19 + [1], 0)]
    weights = 2 * (8 * 4 * 4 + 8 * 8 + 3 * 8 * 16)  # layers x (q|k|v, o, gate|up|down); head_dim 4
    pairs = 20 * 21 / 2 + (3 * 20 + 3 * 4 / 2) + (1 * 20 + 1)  # prefix causal, each suffix on prefix + itself
    shared = bench.step_flops(data, budget=100, share=True, shape=shape)
    assert shared["laid_out_tokens"] == 24
    assert shared["layer_matmuls"] == 6 * weights * 24
    assert shared["attention"] == pairs * 2 * 2 * 4 * 2 * 2 * 3.5  # 2 products x 2 FLOPs x dim x heads x layers
    assert shared["head"] == 6 * 100 * 8 * 3
    assert shared["total"] == shared["layer_matmuls"] + shared["attention"] + shared["head"]
    alone = bench.step_flops(data, budget=100, share=False, shape=shape)
    assert alone["laid_out_tokens"] == 44
    assert alone["attention"] == (23 * 24 / 2 + 21 * 22 / 2) * 2 * 2 * 4 * 2 * 2 * 3.5
