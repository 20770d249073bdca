"""bench/trainer.py and bench/gpu.py still run end to end (tiny shapes, on the CPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    plan = {"hypotheses": bench.HYPOTHESES, "command": "python bench/learning.py", "git_commit": "abc",
            "settings": {"n": 2}, "seeds": {"eval": 7}, "held_out_tasks": {"warmup": ["a-061-warmup"]}}
    registered = bench.register(plan, tmp_path)
    on_disk = json.loads((tmp_path / "plan.json").read_text())
    assert on_disk == registered and len(registered["sha256"]) == 64 and registered["registered_at"]
    # the same plan again (another commit, another spelling of the command) keeps the first registration
    again = bench.register({**plan, "git_commit": "def", "command": "python bench/learning.py --n 2"}, tmp_path)
    assert again == registered
    try:
        bench.register({**plan, "settings": {"n": 4}, "seeds": {"eval": 8}}, tmp_path)
    except bench.PlanMismatch as refused:
        assert "seeds, settings" in str(refused) and "new --work" in str(refused)
    else:
        raise AssertionError("a different plan was accepted in the same work folder")
    assert json.loads((tmp_path / "plan.json").read_text()) == registered


def test_an_evaluation_runs_only_at_the_plans_commit_or_one_stated_harmless(tmp_path: Path, monkeypatch) -> None:
    bench = _learning_bench()
    monkeypatch.setattr(bench, "git", lambda *args: "" if args[0] == "status" else None)
    monkeypatch.setattr(bench, "git_commit", lambda: "b" * 40)
    plan = {"git_commit": "a" * 40}
    problem = bench.check_code(plan, tmp_path)
    assert problem is not None and "aaaaaaaaaa" in problem and "plan_log.json" in problem
    (tmp_path / "plan_log.json").write_text(json.dumps({"commits": {"b" * 40: "docs only"}}))
    assert bench.check_code(plan, tmp_path) is None
    assert bench.check_code({"git_commit": "b" * 40}, tmp_path / "elsewhere") is None
    monkeypatch.setattr(bench, "git", lambda *args: " M src/codedojo/x.py" if args[0] == "status" else None)
    assert "uncommitted" in (bench.check_code({"git_commit": "b" * 40}, tmp_path) or "")


def _tier_tasks(root: Path) -> Path:
    """fix-greeting (a git work tree: the expert can read its fix) as the training repository's three tiers, and
    fix-add as the held-out repository's."""
    import shutil

    from codedojo.tasks.task import examples_dir

    tasks = root / "tasks"
    for source, repo in (("fix-greeting", "greet"), ("fix-add", "calc")):
        for tier in ("guided", "hinted", "warmup"):
            target = tasks / f"{repo}-001-{tier}"
            shutil.copytree(examples_dir() / source, target)
            toml = target / "task.toml"
            toml.write_text(toml.read_text().replace("[metadata]\n", f'[metadata]\nrepository = "{repo}"\n'
                                                                      f'tier = "{tier}"\n'))
    return tasks


def test_the_learning_bench_runs_every_stage_on_a_tiny_model(tmp_path: Path) -> None:
    """Every arm and evaluation end to end with the tiny random model (which solves nothing: rejection sampling
    then falls back to its start); the plan is registered first and a second run reuses every stage."""
    bench = _learning_bench()
    argv = ["--tasks", str(_tier_tasks(tmp_path)), "--held-out", "calc", "--model", "tiny-llama",
            "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"), "--n", "1", "--grpo-steps", "1",
            "--rollout-batch-size", "1", "--over-sampling", "2", "--n-samples", "2", "--global-batch-size", "2",
            "--max-new-tokens", "256", "--max-context", "8192", "--concurrency", "2", "--min-episodes", "1"]
    # one arm at a time (a session that cannot keep checkpoints): only that arm is trained and evaluated
    assert bench.main([*argv, "--arms", "guided_grpo"]) == 0
    first = json.loads((tmp_path / "out" / "learning.json").read_text())
    assert set(first["results"]) == {f"guided_grpo/{t}" for t in ("warmup", "hinted", "guided")}
    assert not {"sft_cur", "grpo_cur", "rs"} & set(json.loads((tmp_path / "work" / "times.json").read_text()))
    with pytest.raises(SystemExit, match="unknown arm"):
        bench.main([*argv, "--arms", "guided_grpo,cur_gpro"])
    assert bench.main(argv) == 0
    result = json.loads((tmp_path / "out" / "learning.json").read_text())
    plan = result["plan"]
    assert plan["held_out_tasks"] == {t: [f"calc-001-{t}"] for t in ("guided", "hinted", "warmup")}
    assert plan["training_tasks"] == {t: [f"greet-001-{t}"] for t in ("guided", "hinted", "warmup")}
    assert set(result["results"]) == {f"{a}/{t}" for a, t in bench.EVALS}
    assert set(result["hypotheses"]) == {"H1", "H2", "H3"} and result["hypotheses"]["H1"]["holds"] is False
    assert {"cluster_stderr", "clusters", "exceeds_2_cluster_stderr"} <= set(
        result["differences"]["cur_grpo/warmup-vs-guided_grpo/warmup"])
    # rejection sampling rolled out exactly what curriculum GRPO rolled out: its one step drew the one guided
    # task twice (over-sampling 2, all the share on guided), 2 episodes each
    assert result["rs_sampling"] == {"episodes": 4, "tasks": 1, "solved": 0}
    curve = result["grpo_curves"]["grpo_cur"]
    assert len(curve) == 1 and curve[0]["curriculum/guided/share"] == 1.0
    for arm, tier in bench.EVALS:
        assert (tmp_path / "out" / "trajectories" / f"eval_{arm}_{tier}.tar.gz").stat().st_size > 0
    assert (tmp_path / "out" / "learning.png").stat().st_size > 0
    times = json.loads((tmp_path / "work" / "times.json").read_text())
    order = list(times)  # the hypotheses' figures come first
    assert order.index("eval_guided_grpo_guided") < order.index("eval_cur_grpo_warmup") < order.index("rs") \
        < order.index("eval_cur_sft_warmup")
    assert bench.main(argv) == 0  # every stage cached: nothing reruns, the stage times stay the first run's
    assert json.loads((tmp_path / "work" / "times.json").read_text()) == times


def test_the_curriculum_probe_calibrates_on_training_repositories_only(tmp_path: Path) -> None:
    """bench/curriculum_probe.py: the plan's first stages, the SFT model on calibration tasks of every tier at two
    temperatures, a short curriculum GRPO run; no held-out task runs."""
    _learning_bench()
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_curriculum_probe_test", BENCH / "curriculum_probe.py")
        assert spec is not None and spec.loader is not None
        probe = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(probe)
    finally:
        sys.path.remove(str(BENCH))
    work = tmp_path / "work"
    argv = ["--probe-steps", "1", "--tasks", str(_tier_tasks(tmp_path)), "--held-out", "calc", "--model",
            "tiny-llama", "--work", str(work), "--rollout-batch-size", "1", "--over-sampling", "1", "--n-samples",
            "2", "--max-new-tokens", "256", "--max-context", "8192", "--concurrency", "2", "--min-episodes", "1"]
    assert probe.main(argv) == 0
    result = json.loads((work / "probe.json").read_text())
    assert result["training_tasks"] == {"guided": 1, "hinted": 1, "warmup": 1}
    assert result["demonstrations"]["solved"] == 3 and set(result["demonstration_budget"]) == {
        "guided", "hinted", "warmup"}
    assert [r["step"] for r in result["grpo"]["curve"]] == [0]
    assert not list(work.glob("eval_*")) and not (work / "plan.json").exists()  # nothing held out ran


def test_default_run_summary_reads_a_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"recipe": {"bf16": False}, "device": "cpu"}))
    rows = [{"step": 0, "kind": "eval", "eval/held-out/pass@1": 0.25},
            {"step": 0, "kind": "train", "rollout/reward_mean": 0.5, "rollout/mixed_group_frac": 0.5,
             "rollout/turns_mean": 4.0, "perf/rollout_seconds": 80.04, "perf/train_seconds": 60.0,
             "perf/rollout_sampled_tokens_per_sec": 30.0, "perf/rss_gib": 3.666, "perf/peak_rss_gib": 7.1},
            {"step": 1, "kind": "train", "rollout/reward_mean": 0.25, "rollout/mixed_group_frac": 0.0,
             "rollout/turns_mean": 3.0, "perf/rollout_seconds": 50.0, "perf/train_seconds": 0.0,
             "perf/rollout_sampled_tokens_per_sec": 40.0, "perf/rss_gib": 3.7, "perf/peak_rss_gib": 7.1,
             "perf/engine_step_seconds": 45.04, "perf/engine_prefill_step_seconds": 30.01,
             "perf/engine_decode_step_seconds": 15.03, "perf/engine_idle_seconds": 4.0,
             "rollout/engine_prefill_tokens": 9000.0, "rollout/engine_decode_tokens": 2000.0,
             "perf/engine_decode_rows_mean": 9.26}]
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
                                     "rss_gib": 3.67, "peak_rss_gib": 7.1},
                                    {"step": 2, "reward_mean": 0.25, "mixed_group_frac": 0.0, "turns_mean": 3.0,
                                     "rollout_s": 50.0, "train_s": 0.0, "rollout_sampled_tok_s": 40.0,
                                     "rss_gib": 3.7, "peak_rss_gib": 7.1, "engine_prefill_step_s": 30.0,
                                     "engine_decode_step_s": 15.0, "engine_idle_s": 4.0,
                                     "engine_prefill_tokens": 9000, "engine_decode_tokens": 2000,
                                     "engine_decode_rows_mean": 9.3}]
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


def test_the_probe_suggests_start_shares_where_grpo_has_a_signal() -> None:
    _learning_bench()
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_curriculum_probe_shares", BENCH / "curriculum_probe.py")
        assert spec is not None and spec.loader is not None
        probe = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(probe)
    finally:
        sys.path.remove(str(BENCH))

    def calibrated(*rates: float) -> dict[str, dict[str, object]]:
        return {f"{tier}/rollout": {"pass@1": r} for tier, r in zip(("guided", "hinted", "warmup"), rates, strict=True)}

    assert probe.mixed_probability(0.5, 4) == 0.875  # 1 - 2 / 16
    assert probe.suggested_start(calibrated(0.5, 0.5, 0.5), group_size=4) == [0.33, 0.33, 0.34]
    # a tier solved always or never gives no mixed group: all the share goes where there is a signal
    assert probe.suggested_start(calibrated(1.0, 0.2, 0.0), group_size=4) == [0.0, 1.0, 0.0]
    assert probe.suggested_start(calibrated(1.0, 1.0, 0.0), group_size=4) is None
    assert probe.suggested_start({"guided/rollout": {"pass@1": 0.5}}, group_size=4) is None


def test_fresh_clone_run_times_a_clone_of_head_and_writes_its_figures(tmp_path: Path) -> None:
    """bench/fresh_clone_run.sh on a stand-in repository: its `./dev run` writes a run directory and its `time`
    writes GNU time's two lines; the script must clone HEAD (not the uncommitted change), pass the run directory
    and the extra arguments, use an empty cache, and write OUT.json from bench/default_run.py's figures."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    for name in ("fresh_clone_run.sh", "default_run.py"):
        (repo / "bench" / name).write_text((BENCH / name).read_text())
    (repo / "bench" / "fresh_clone_run.sh").chmod(0o755)
    dev = repo / "dev"
    dev.write_text(f"""#!/usr/bin/env bash
set -euo pipefail
mkdir -p .venv/bin && printf '#!/bin/sh\\nexec {sys.executable} "$@"\\n' > .venv/bin/python && chmod +x .venv/bin/python
[[ $1 == run && $2 == --run-dir ]] || exit 9
run=$3; shift 3
mkdir -p "$run" "$CODEDOJO_CACHE_DIR"
[[ -z $(ls -A "$CODEDOJO_CACHE_DIR") ]] || exit 8
echo '{{"recipe": {{"bf16": false}}, "device": "cpu"}}' > "$run/config.json"
echo '{{"step": 0, "kind": "train", "rollout/reward_mean": 0.5}}' > "$run/metrics.jsonl"
printf '{{"args": "%s", "marker": "%s"}}' "$*" "$(cat marker)" > "$run/learning.json"
""")
    dev.chmod(0o755)
    (repo / "marker").write_text("committed")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    (repo / "marker").write_text("uncommitted")
    timer = tmp_path / "time"
    timer.write_text("""#!/usr/bin/env bash
[[ $1 == -v && $2 == -o ]] || exit 7
log=$3; shift 3
"$@"; status=$?
printf '\\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02.50\\n' > "$log"
printf '\\tMaximum resident set size (kbytes): 2097152\\n' >> "$log"
exit $status
""")
    timer.chmod(0o755)
    out = tmp_path / "out.json"
    done = subprocess.run([str(repo / "bench" / "fresh_clone_run.sh"), str(out), "--eval-size", "48x2"],
                          capture_output=True, text=True, env={**os.environ, "TIME_BIN": str(timer),
                                                               "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "uncommitted changes" in done.stderr
    result = json.loads(out.read_text())
    assert result["learning"] == {"args": "--eval-size 48x2", "marker": "committed"}
    assert result["wall_clock"] == "1:02.50" and result["peak_rss_gib"] == 2.0
    assert result["grpo_steps"][0]["reward_mean"] == 0.5 and result["command"].endswith("--eval-size 48x2")
    assert len(result["commit"]) >= 7 and result["cores"] == os.cpu_count() and result["cpu"]
