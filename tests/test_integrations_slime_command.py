"""Recipe -> slime command: the tutorial's full recipe against a golden flag list, every rendered flag against
the pinned slime revision's parser, the launcher's rules, initial weights and their conversion, the checks slime
skips, and config.launch(backend="slime") as a dry run and as a `ray job submit`."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from codedojo.config import AgentTaskDataset, Qwen3_6_27B, Recipe, TrainConfig
from codedojo.integrations.slime_args import HookConfigError, HookSettings
from codedojo.integrations.slime_command import (
    LAUNCHER_ONLY,
    MAPPED,
    SlimeConfigError,
    _Flags,
    check_recipe,
    render_slime_command,
)
from codedojo.integrations.slime_launch import ray_executable, ray_submit_argv
from ray_support import RayHead, ray_head_fixture  # noqa: F401 - the module's Ray head fixture
from slime_support import DATA, hf_config, offline_hf_cache, recorded_flags, tutorial_recipe
from tutorials.coding_agent.main import make_recipe

CONVERTED = "/checkpoints/torch_dist/Qwen--Qwen3.6-27B-tp4-pp2"
STANDIN = Path(__file__).parent / "fixtures" / "slime_standin"

GOLDEN = [
    "--hf-checkpoint", "Qwen/Qwen3.6-27B",
    "--prompt-data", f"{DATA}/train-300.jsonl", "--input-key", "prompt", "--label-key", "label",
    "--metadata-key", "metadata", "--rollout-shuffle",
    "--actor-num-nodes", "2", "--actor-num-gpus-per-node", "8", "--rollout-num-gpus", "32",
    "--rollout-num-gpus-per-engine", "2", "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2",
    "--context-parallel-size", "2", "--sequence-parallel", "--decoder-last-pipeline-num-layers", "30",
    "--attention-backend", "flash", "--ref-load", CONVERTED, "--load", "/checkpoints",
    "--sglang-speculative-algorithm", "EAGLE", "--sglang-speculative-num-steps", "3",
    "--sglang-speculative-eagle-topk", "1", "--sglang-speculative-num-draft-tokens", "4",
    "--sglang-server-concurrency", "32",
    "--num-rollout", "500", "--rollout-batch-size", "32", "--n-samples-per-prompt", "8",
    "--rollout-temperature", "1.0", "--rollout-top-p", "1.0", "--rollout-max-response-len", "8192",
    "--rollout-max-context-len", "32768",
    "--global-batch-size", "256", "--advantage-estimator", "grpo", "--lr", "4e-06", "--min-lr", "0.0",
    "--lr-decay-style", "constant", "--lr-warmup-iters", "0", "--weight-decay", "0.1", "--adam-beta1", "0.9",
    "--adam-beta2", "0.98", "--adam-eps", "1e-08", "--clip-grad", "1.0", "--eps-clip", "0.2",
    "--kl-loss-coef", "0.0", "--kl-loss-type", "k3", "--kl-coef", "0.0", "--entropy-coef", "0.0",
    "--tis-clip", "2.0", "--use-dynamic-batch-size", "--max-tokens-per-gpu", "16384",
    "--log-probs-chunk-size", "128", "--seed", "1234", "--rollout-seed", "1234",
    "--eval-max-response-len", "8192", "--n-samples-per-eval-prompt", "1", "--eval-config", "/cfg/eval_config.yaml",
    "--save", "/checkpoints", "--save-interval", "20",
    "--save-debug-rollout-data", "/checkpoints/agentic_rollout_dumps/coding-agent-run/rollout_{rollout_id}.pt",
    "--custom-rollout-log-function-path", "codedojo.integrations.slime.log_rollout_data",
    "--use-tensorboard", "--tb-project-name", "coding-agent",
    "--custom-config-path", "/cfg/extra_config.yaml",
    "--custom-reward-post-process-path", "codedojo.integrations.slime_rewards.post_process_rewards",
    "--custom-eval-rollout-log-function-path", "codedojo.integrations.slime_rewards.log_eval_rollout_data",
]


def _render(recipe: Recipe, *, config: str = "qwen3.6-27B") -> Any:
    return render_slime_command(recipe, model=Qwen3_6_27B(), dataset=AgentTaskDataset(f"{DATA}/train-300.jsonl"),
                                files_dir="/cfg", hf_config=hf_config(config))


def test_the_tutorial_recipe_renders_the_golden_command() -> None:
    command = _render(tutorial_recipe())
    assert list(command.args) == GOLDEN
    assert command.entry == "train.py"
    assert command.model_args[:3] == ("--spec", "slime_plugins.models.qwen3_5", "get_qwen3_5_spec")
    shell = command.shell(slime_root="/root/slime")
    assert "source" not in shell and "scripts/models" not in shell  # MODEL_ARGS inline, no script to miss
    convert, train = shell.split(" && ")
    assert convert.startswith(f"if [ ! -f {CONVERTED}/latest_checkpointed_iteration.txt ]; then "
                              'PYTHONPATH=/root/Megatron-LM:"${PYTHONPATH:-}" torchrun --nproc-per-node 8 '
                              "/root/slime/tools/convert_hf_to_torch_dist.py --spec ")
    assert convert.endswith(f"--hf-checkpoint Qwen/Qwen3.6-27B --save {CONVERTED} --tensor-model-parallel-size 4 "
                            "--pipeline-model-parallel-size 2; fi")
    assert train.startswith("python3 /root/slime/train.py --spec slime_plugins.models.qwen3_5 get_qwen3_5_spec ")
    assert " ".join(command.model_args) in convert and " ".join(command.model_args) in train
    assert yaml.safe_load(command.files["extra_config.yaml"]) == {
        "agentic_max_steps": 75, "agentic_episode_timeout": 1800.0, "agentic_eval_timeout": None,
        "agentic_exec_timeout": 120.0, "agentic_max_format_errors": 3, "agentic_max_infra_retries": 2,
        "router_policy": "consistent_hashing", "custom_generate_function_path": "codedojo.integrations.slime.generate",
        "skip_eval_before_train": False, "agentic_sandbox_backend": "local", "agentic_sandbox_network": False,
        "agentic_flagged_episodes": "zero"}
    assert yaml.safe_load(command.files["eval_config.yaml"]) == {
        "defaults": {"n_samples_per_eval_prompt": 1, "temperature": 0.6, "top_p": 1.0},
        "datasets": [{"name": "eval", "path": f"{DATA}/eval.jsonl",
                      "metadata_overrides": {"eval_dataset": "eval", "task_root": DATA}}]}
    assert command.env["ASYNC_RL_REWARD_SHAPE"] == "binary"
    assert command.env["SLIME_AGENT_SANDBOX_CPU"] == "2" and command.env["SLIME_AGENT_SANDBOX_MEMORY_MB"] == "4096"
    assert command.env["PYTHONPATH"] == "/root/Megatron-LM/:/root/slime"
    assert "actor GPUs 16 = TP 4 x PP 2 x CP 2 x DP 1" in command.report
    assert f"--load /checkpoints --ref-load {CONVERTED}" in command.report
    assert "clip bounds [0.8, 1.2] (symmetric)" in command.report
    assert {name for name, _ in command.dropped} >= {"gpu_type", "capture_trace", "memory",
                                                     "slime_git_revision", "image_run_commands", "app_tags"}


def test_every_recipe_field_is_passed_mapped_or_kept_out_on_purpose() -> None:
    names = {f.name for f in dataclasses.fields(Recipe)}
    assert not set(LAUNCHER_ONLY) & set(MAPPED)
    assert (set(LAUNCHER_ONLY) | set(MAPPED)) <= names
    rendered = " ".join(_render(tutorial_recipe(use_tis=True, use_kl_loss=True, kl_loss_coef=0.01, ref_load="/ref",
                                                lr_decay_iters=100, over_sampling_batch_size=64, eval_interval=5,
                                                dynamic_sampling=True, colocate=True, rollout_num_gpus=None)).args)
    for name in names - set(LAUNCHER_ONLY) - set(MAPPED):  # passed through by the launcher's rule
        value = getattr(Recipe(), name)
        flag = "--" + name.replace("_", "-")
        assert flag in rendered or value in (None, False, ""), name


@pytest.mark.parametrize("network", [False, None, True])
def test_the_recipes_sandbox_network_reaches_the_generate_hook(network: bool | None) -> None:
    # The hook reads slime's args, which hold every key of extra_config.yaml; False is the recipe's default.
    command = _render(tutorial_recipe() if network is False else tutorial_recipe(sandbox_network=network))
    args = SimpleNamespace(sglang_router_ip="127.0.0.1", sglang_router_port=30000, hf_checkpoint="tiny-llama",
                           **yaml.safe_load(command.files["extra_config.yaml"]))
    limits = HookSettings.from_args(args, evaluation=False, environ=command.env).sandbox_limits
    assert limits.network is network and (limits.cpus, limits.memory_mb) == (2.0, 4096)


def test_the_generate_hook_gives_no_network_without_codedojos_yaml() -> None:
    args = SimpleNamespace(sglang_router_ip="127.0.0.1", sglang_router_port=30000, hf_checkpoint="tiny-llama")
    assert HookSettings.from_args(args, evaluation=True, environ={}).sandbox_limits.network is False
    args.agentic_sandbox_network = "yes"
    with pytest.raises(HookConfigError, match=r"agentic_sandbox_network = 'yes': expected true, false or null"):
        HookSettings.from_args(args, evaluation=False, environ={})


def test_the_launchers_rules() -> None:
    flags = _Flags()
    for name, value in [("on", True), ("off", False), ("none", None), ("empty", ""), ("zero", 0.0),
                        ("many", (1, 2)), ("word", "x")]:
        flags.add(name, value)
    assert flags.args == ["--on", "--zero", "0.0", "--many", "1", "2", "--word", "x"]


def test_codedojo_only_fields_map_deliberately() -> None:
    command = _render(tutorial_recipe(advantage_estimator="dr_grpo", dynamic_sampling=True, async_mode=True,
                                      reward_shape="fractional", sandbox_backend="modal",
                                      environment={"ASYNC_RL_REWARD_SHAPE": "fractional"}))
    args = list(command.args)
    assert command.entry == "train_async.py"
    assert args[args.index("--advantage-estimator") + 1] == "grpo" and "--disable-grpo-std-normalization" in args
    assert "--calculate-per-token-loss" in args  # Dr.GRPO's token-level loss normalisation
    assert args[args.index("--dynamic-sampling-filter-path") + 1] == (
        "codedojo.integrations.slime_rewards.check_valid_reward_nonzero_std")
    assert command.env["ASYNC_RL_REWARD_SHAPE"] == "fractional"
    assert yaml.safe_load(command.files["extra_config.yaml"])["agentic_sandbox_backend"] == "modal"
    assert "train_async.py (one step off-policy)" in " ".join(command.report)


@pytest.mark.parametrize(("overrides", "problem"), [
    ({"tensor_model_parallel_size": 3}, "does not divide the 16 actor GPUs"),
    ({"rollout_num_gpus": 31}, "not a multiple of rollout_num_gpus_per_engine"),
    ({"global_batch_size": 96}, "is not a multiple of global_batch_size 96"),
    ({"async_mode": True, "colocate": True, "rollout_num_gpus": None}, "cannot run colocated"),
    ({"rollout_num_gpus": None}, "rollout_num_gpus must be set when not colocated"),
    ({"tensor_model_parallel_size": 1, "context_parallel_size": 1}, "sequence_parallel needs"),
    ({"lora_rank": 8}, "slime's Megatron backend trains full weights"),
    ({"curriculum": {"tiers": ["guided", "warmup"]}}, "the tier curriculum is local-only"),
    ({"rollout_top_p": 0.9}, "rollout_top_p=0.9 < 1: slime then trains on the kept top-p token ids"),
    ({"conversion_tensor_model_parallel_size": None}, "no loadable weights"),
    ({"load": "/ckpt", "use_kl_loss": True, "kl_loss_coef": 0.01}, "a KL term needs ref_load"),
])
def test_what_slime_would_trip_on_later_is_refused_now(overrides: dict[str, object], problem: str) -> None:
    with pytest.raises(SlimeConfigError, match=problem):
        check_recipe(tutorial_recipe(**overrides))


def test_kl_and_clip_settings_are_reported() -> None:
    report, warnings = check_recipe(tutorial_recipe(kl_loss_coef=0.01, eps_clip_high=0.28))
    assert "clip bounds [0.8, 1.28] (clip-higher)" in report
    assert any("kl_loss_coef=0.01 has no effect without use_kl_loss" in w for w in warnings)
    _, warnings = check_recipe(tutorial_recipe(use_kl_loss=True))
    assert any("kl_loss_coef=0 computes a KL" in w for w in warnings)


def test_every_flag_codedojo_renders_exists_at_the_pinned_slime_revision() -> None:
    """slime drops unknown flags silently (ignore_unknown_args): a typo must fail here instead."""
    known = recorded_flags()
    assert len(known) > 800 and "--use-gated-attention" in known and "--no-such-flag" not in known
    recipes = [
        tutorial_recipe(),
        tutorial_recipe(advantage_estimator="dr_grpo", dynamic_sampling=True, async_mode=True, use_tis=True,
                        use_kl_loss=True, kl_loss_coef=0.01, ref_load="/ref", load="/resume", lr_decay_iters=100,
                        lr_warmup_iters=5, eps_clip_high=0.28, over_sampling_batch_size=64, eval_interval=5,
                        metrics={"project": "p", "slime_logger": "wandb"}, colocate=False),
        make_recipe(smoke=True, backend="slime", sandbox="modal", data_root=Path(DATA)),
    ]
    rendered: set[str] = set()
    for recipe in recipes:
        for config in ("qwen3.6-27B", "qwen3-30B-A3B", "llama3.1-8B-Instruct", "qwen2.5-7B", "qwen3-8B"):
            fitted = recipe if config == "qwen3.6-27B" else recipe.replace(decoder_last_pipeline_num_layers=None)
            command = _render(fitted, config=config)
            rendered |= set(command.rendered_flags())
            if command.conversion is not None:
                rendered |= {t for t in command.conversion.flags(model_args=command.model_args) if t[:2] == "--"}
    assert sorted(rendered - known) == []
    assert {"--load", "--ref-load", "--calculate-per-token-loss", "--use-wandb", "--use-tensorboard",
            "--custom-reward-post-process-path", "--spec"} <= rendered


def test_initial_weights_come_from_the_recipe_or_one_cached_conversion_per_model_and_layout() -> None:
    other_layout = _render(tutorial_recipe(conversion_tensor_model_parallel_size=8,
                                           conversion_pipeline_model_parallel_size=1))
    assert other_layout.conversion is not None
    assert other_layout.conversion.output == "/checkpoints/torch_dist/Qwen--Qwen3.6-27B-tp8-pp1"
    given = _render(tutorial_recipe(ref_load="/ref"))
    assert given.conversion is None and "torchrun" not in given.shell(slime_root="/root/slime")
    args = list(given.args)
    assert args[args.index("--ref-load") + 1] == "/ref" and args[args.index("--load") + 1] == "/checkpoints"
    resumed = list(_render(tutorial_recipe(load="/resume")).args)
    assert resumed[resumed.index("--load") + 1] == "/resume" and "--ref-load" not in resumed
    unsaved = list(_render(tutorial_recipe(save=None, save_interval=None)).args)
    assert unsaved[unsaved.index("--load") + 1] == unsaved[unsaved.index("--ref-load") + 1] == CONVERTED


def test_megatrons_layer_split_is_checked_against_the_model() -> None:
    odd = {**hf_config("qwen3.6-27B"), "text_config": {**hf_config("qwen3.6-27B")["text_config"],
                                                        "num_hidden_layers": 63}}
    with pytest.raises(SlimeConfigError, match="conversion_pipeline_model_parallel_size 2 does not divide"):
        render_slime_command(tutorial_recipe(decoder_last_pipeline_num_layers=31), model=Qwen3_6_27B(),
                             dataset=AgentTaskDataset("t.jsonl"), files_dir=".", hf_config=odd)
    with pytest.raises(SlimeConfigError, match="decoder_last_pipeline_num_layers 64 leaves 0 of 64"):
        _render(tutorial_recipe(decoder_last_pipeline_num_layers=64))
    with pytest.raises(SlimeConfigError, match="pipeline_model_parallel_size 2 does not divide the model's 63"):
        render_slime_command(tutorial_recipe(decoder_last_pipeline_num_layers=None, ref_load="/ref"),
                             model=Qwen3_6_27B(), dataset=AgentTaskDataset("t.jsonl"), files_dir=".", hf_config=odd)


def test_metrics_reach_slimes_loggers() -> None:
    wandb = list(_render(tutorial_recipe(metrics={"project": "p", "slime_logger": "wandb"})).args)
    assert wandb[wandb.index("--use-wandb") + 1:wandb.index("--use-wandb") + 3] == ["--wandb-project", "p"]
    silent = _render(tutorial_recipe(metrics=None))
    assert not {"--use-wandb", "--use-tensorboard"} & set(silent.args)
    assert any("metrics is None" in w for w in silent.warnings)


def test_a_model_codedojo_cannot_map_is_refused_before_anything_starts(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.integrations.slime_launch import launch_slime

    offline_hf_cache(tmp_path, monkeypatch, config={"model_type": "deepseek_v3", "kv_lora_rank": 512,
                                                    "num_hidden_layers": 61})
    submitted: list[list[str]] = []
    with pytest.raises(SlimeConfigError, match=r"'deepseek_v3' has no Megatron mapping.*kv_lora_rank"):
        launch_slime(_config(tmp_path), address="http://head:8265", runner=submitted.append)
    assert submitted == [] and not (tmp_path / "run").exists()


def _config(tmp_path: Path) -> TrainConfig:
    return TrainConfig(model=Qwen3_6_27B(), dataset=AgentTaskDataset(tmp_path / "train.jsonl"),
                       recipe=tutorial_recipe(), run_dir=tmp_path / "run")


def test_launch_without_an_address_is_a_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    offline_hf_cache(tmp_path, monkeypatch)  # config.json as `huggingface-cli download` leaves it
    for variable in ("CODEDOJO_RAY_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(variable, raising=False)
    run = _config(tmp_path).launch(backend="slime")
    files = tmp_path / "run" / "slime"
    assert run.backend == "slime" and run.summary["submitted"] is False
    assert yaml.safe_load((files / "extra_config.yaml").read_text())["agentic_max_steps"] == 75
    assert (files / "eval_config.yaml").is_file()
    script = (files / "command.sh").read_text()
    assert f"--custom-config-path {files}/extra_config.yaml" in script
    assert "export ASYNC_RL_REWARD_SHAPE=binary" in script
    assert "dry run" in capsys.readouterr().err


def test_launch_with_an_address_submits_one_ray_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.integrations.slime_launch import launch_slime

    offline_hf_cache(tmp_path, monkeypatch)
    submitted: list[list[str]] = []
    run = launch_slime(_config(tmp_path), address="http://head:8265", runner=submitted.append)
    (argv,) = submitted
    assert Path(argv[0]).name == "ray" and argv[1:5] == ["job", "submit", "--address", "http://head:8265"]
    assert argv[argv.index("--submission-id") + 1] == run.training_run_id
    assert argv[argv.index("--working-dir") + 1] == str((tmp_path / "run" / "slime").resolve())
    assert "--no-wait" in argv and argv[-3:-1] == ["bash", "-c"]
    assert "--custom-config-path ./extra_config.yaml" in argv[-1]  # relative to the uploaded working dir
    assert run.summary["submitted"] is True


def test_a_live_ray_cluster_sees_the_files_and_environment(tmp_path: Path, ray_head: RayHead) -> None:
    """A real local Ray head (or CODEDOJO_RAY_ADDRESS / RAY_ADDRESS when set, e.g. a real cluster)."""
    address = os.environ.get("CODEDOJO_RAY_ADDRESS") or os.environ.get("RAY_ADDRESS") or ray_head.address
    command = _render(tutorial_recipe())
    (tmp_path / "extra_config.yaml").write_text(command.files["extra_config.yaml"])
    # The same submission with a probe instead of training, waited for: the job must see the uploaded
    # YAML in its working directory and the recipe's environment.
    probe = ("import os, yaml; assert yaml.safe_load(open('extra_config.yaml'))['agentic_max_steps'] == 75; "
             "assert os.environ['ASYNC_RL_REWARD_SHAPE'] == 'binary'")
    argv = ray_submit_argv(address=address, submission_id=f"codedojo-probe-{os.getpid()}", working_dir=tmp_path,
                           env=command.env, entrypoint=[sys.executable, "-c", probe], wait=True,
                           ray=ray_executable() or "ray")
    subprocess.run(argv, check=True, timeout=600)


def test_launch_submits_the_rendered_job_to_a_real_ray_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            ray_head: RayHead) -> None:
    """launch(backend="slime") against a local head: the tutorial's cluster recipe (smoke layout) runs its
    conversion step and a stand-in train.py that parses every flag with the recorded parser's names."""
    from codedojo.integrations.slime_launch import job_logs, job_status

    offline_hf_cache(tmp_path, monkeypatch)
    monkeypatch.setenv("CODEDOJO_RAY_ADDRESS", ray_head.address)
    monkeypatch.setenv("SLIME_ROOT", str(STANDIN))
    recipe = make_recipe(smoke=True, backend="slime", sandbox="local", data_root=Path(DATA)).replace(
        conversion_dir=str(tmp_path / "torch_dist"))
    config = TrainConfig(model=Qwen3_6_27B(), dataset=AgentTaskDataset(tmp_path / "train.jsonl"), recipe=recipe,
                         run_dir=tmp_path / "run")
    run = config.launch(backend="slime")
    assert run.summary["submitted"] is True
    deadline = time.monotonic() + 300  # a bound for a stuck job, not a performance claim
    while (status := job_status(run.training_run_id, address=ray_head.address)) not in ("SUCCEEDED", "FAILED",
                                                                                         "STOPPED"):
        assert time.monotonic() < deadline, f"job still {status}"
        time.sleep(1)
    logs = job_logs(run.training_run_id, address=ray_head.address)
    assert status == "SUCCEEDED", logs
    converted = tmp_path / "torch_dist" / "Qwen--Qwen3.6-27B-tp1-pp1"
    assert f"STANDIN-CONVERT Qwen/Qwen3.6-27B -> {converted} world size 1" in logs
    line = next(line for line in logs.splitlines() if line.startswith("STANDIN-TRAIN "))
    parsed = json.loads(line.removeprefix("STANDIN-TRAIN "))
    train = shlex.split(run.summary["command"].split(" && ")[-1])
    assert parsed["entry"] == "train.py" and parsed["flags"] == sum(t.startswith("--") for t in train) == 77
    assert parsed["load"] == parsed["ref_load"] == [str(converted)]
    assert parsed["spec"] == ["slime_plugins.models.qwen3_5", "get_qwen3_5_spec"] and parsed["num_layers"] == ["64"]
    assert parsed["reward_shape"] == "binary"
    assert parsed["post_process"] == ["codedojo.integrations.slime_rewards.post_process_rewards"]


def test_the_scale_out_doc_says_where_every_recipe_field_goes() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "scale-out.md").read_text()
    missing = [f.name for f in dataclasses.fields(Recipe) if f"`{f.name}`" not in doc]
    assert missing == []


def test_the_generate_hook_reads_what_a_flagged_episode_gets() -> None:
    command = _render(tutorial_recipe(flagged_episodes="keep"))
    args = SimpleNamespace(sglang_router_ip="127.0.0.1", sglang_router_port=30000, hf_checkpoint="tiny-llama",
                           **yaml.safe_load(command.files["extra_config.yaml"]))
    assert HookSettings.from_args(args, evaluation=False, environ=command.env).flagged_episodes == "keep"
    bare = SimpleNamespace(sglang_router_ip="127.0.0.1", sglang_router_port=30000, hf_checkpoint="tiny-llama")
    assert HookSettings.from_args(bare, evaluation=False, environ={}).flagged_episodes == "zero"
    bare.agentic_flagged_episodes = "hide"
    with pytest.raises(HookConfigError, match="agentic_flagged_episodes = 'hide'"):
        HookSettings.from_args(bare, evaluation=False, environ={})
