"""The reference tutorial's training script runs unchanged on codedojo's names.

The reference (modal-projects/training-gym, tutorials/coding_agent/main.py) imports five names from its
config package and three from `tutorials.coding_agent.dataset`, subclasses `DatasetConfig`, builds a
`Qwen3_6_27B_Recipe` with its field names and calls `TrainConfig(...).launch()`. `USER_SCRIPT` is that
script as a user ports it: the one substitution is the package name (`modal_training_gym` ->
`codedojo.config`); its Modal volume check is left out (it needs a Modal account); the data root is a
temporary folder. With no Ray address, `launch()` is slime's dry run: it prints the `train.py` command.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import codedojo.config
from slime_support import offline_hf_cache
from tutorials.coding_agent import dataset as tutorial_dataset

IMPORT_BLOCK = textwrap.dedent("""\
    import json
    from pathlib import Path
    from uuid import uuid4

    from codedojo.config import (
        DatasetConfig,
        Qwen3_6_27B,
        Qwen3_6_27B_Recipe,
        TrackioConfig,
        TrainConfig,
    )
    from tutorials.coding_agent.dataset import (
        DATA_VOLUME_NAME,
        SLIME_GIT_REPOSITORY,
        SLIME_GIT_REVISION,
    )
""")
REFERENCE_NAMES = {
    codedojo.config: ("DatasetConfig", "Qwen3_6_27B", "Qwen3_6_27B_Recipe", "TrackioConfig", "TrainConfig"),
    tutorial_dataset: ("DATA_VOLUME_NAME", "SLIME_GIT_REPOSITORY", "SLIME_GIT_REVISION"),
}

# The rest of the script: its settings in smoke mode, its dataset class, its recipe (every field it sets,
# with its values) and its launch.
SCRIPT_BODY = textwrap.dedent("""\
    SMOKE = True
    DATASET_ROOT = "swe_rebench_v2"
    TRAIN_SUBSET = "train-4"
    EVAL_SUBSETS = ("eval-4",)
    NUM_ROLLOUT, ROLLOUT_BATCH_SIZE, N_SAMPLES_PER_PROMPT, MAX_STEPS = 1, 2, 1, 2
    RUN_NAME = f"coding-agent-{uuid4().hex}"
    DATA_ROOT = Path(DATA_PARENT) / DATASET_ROOT


    class AgentTaskDataset(DatasetConfig):
        def __init__(self, path):
            self.path = path

        def input_key(self):
            return "prompt"

        def label_key(self):
            return "label"

        def apply_chat_template(self):
            return False

        def rows(self):
            with self.path.open() as lines:
                yield from (json.loads(line) for line in lines if line.strip())


    train_dataset = AgentTaskDataset(DATA_ROOT / f"{TRAIN_SUBSET}.jsonl")
    hardware = dict(
        gpu_type="B300", actor_num_nodes=1, actor_num_gpus_per_node=1, rollout_num_gpus=1,
        rollout_num_gpus_per_engine=1, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
        context_parallel_size=1, sequence_parallel=False, conversion_tensor_model_parallel_size=1,
        conversion_pipeline_model_parallel_size=1, decoder_last_pipeline_num_layers=None,
        attention_backend="unfused", ref_load="/checkpoints/Qwen3.6-27B_torch_dist_tp1pp1",
        sglang_speculative_algorithm=None, sglang_speculative_num_steps=None,
        sglang_speculative_eagle_topk=None, sglang_speculative_num_draft_tokens=None,
    )
    recipe = Qwen3_6_27B_Recipe(
        slime_git_repository=SLIME_GIT_REPOSITORY,
        slime_git_revision=SLIME_GIT_REVISION,
        data_volume_name=DATA_VOLUME_NAME,
        memory=(1024, 2 * 1024 * 1024),
        train_function_kwargs={"ephemeral_disk": 2 * 1024 * 1024},
        environment={
            "PYTHONPATH": "/root/Megatron-LM/:/root/slime", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            "NCCL_NVLS_ENABLE": "1", "NCCL_RAS_ENABLE": "0", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "ASYNC_RL_TASK_ROOT": "/data", "SLIME_AGENT_SANDBOX_CPU": "2", "SLIME_AGENT_SANDBOX_MEMORY_MB": "4096",
            "ASYNC_RL_REWARD_SHAPE": "binary",
        },
        image_run_commands=[
            "apt-get update && apt-get install -y --no-install-recommends rdma-core libibverbs1 ibverbs-providers",
            "uv pip install --system modal mini-swe-agent datasets",
        ],
        image_env={"MSWEA_SILENT_STARTUP": "1"},
        app_tags={"agentic_rollout": "harbor"},
        colocate=False,
        metrics=TrackioConfig(project="coding-agent"),
        num_rollout=NUM_ROLLOUT,
        rollout_batch_size=ROLLOUT_BATCH_SIZE,
        n_samples_per_prompt=N_SAMPLES_PER_PROMPT,
        global_batch_size=ROLLOUT_BATCH_SIZE * N_SAMPLES_PER_PROMPT,
        advantage_estimator="grpo", lr=4e-6, lr_decay_style="constant", weight_decay=0.1,
        eps_clip=0.2, eps_clip_high=None, use_kl_loss=False, kl_coef=0.0, entropy_coef=0.0,
        rollout_temperature=1.0, rollout_max_response_len=1024, eval_max_response_len=1024,
        eval_interval=NUM_ROLLOUT, n_samples_per_eval_prompt=1, save=None, save_interval=None,
        sglang_server_concurrency=4, max_tokens_per_gpu=16384, log_probs_chunk_size=128, capture_trace=True,
        custom_rollout_log_function="agentic_rl.metrics.log_rollout_data",
        extra_config={
            "custom_generate_function_path": "agentic_rl.generate.generate",
            "agentic_max_steps": MAX_STEPS, "agentic_episode_timeout": 300, "agentic_eval_timeout": 120,
            "agentic_exec_timeout": 60, "router_policy": "consistent_hashing", "skip_eval_before_train": SMOKE,
        },
        eval_config={
            "defaults": {"n_samples_per_eval_prompt": 1, "temperature": 0.6, "top_p": 1.0},
            "datasets": [{"name": subset, "path": str(DATA_ROOT / f"{subset}.jsonl"),
                          "metadata_overrides": {"eval_dataset": subset}} for subset in EVAL_SUBSETS],
        },
        save_debug_rollout_data=f"/checkpoints/agentic_rollout_dumps/{RUN_NAME}/rollout_{{rollout_id}}.pt",
        **hardware,
    )

    run = TrainConfig(model=Qwen3_6_27B(), dataset=train_dataset, recipe=recipe).launch()
    print(f"run id: {run.training_run_id}")
""")


def run_user_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Execute the ported script as a module body in a fresh namespace; its globals afterwards."""
    root = tmp_path / "data" / "swe_rebench_v2"
    root.mkdir(parents=True)
    for subset in ("train-4", "eval-4"):
        (root / f"{subset}.jsonl").write_text("")
    for name in ("CODEDOJO_RAY_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    offline_hf_cache(tmp_path, monkeypatch)  # Qwen3.6-27B's config.json, as `huggingface-cli download` leaves it
    monkeypatch.chdir(tmp_path)  # the dry run writes runs/<run id>/ here
    namespace: dict[str, object] = {"__name__": "__main__", "DATA_PARENT": str(tmp_path / "data")}
    exec(compile(IMPORT_BLOCK + "\n" + SCRIPT_BODY, "reference_main.py", "exec"), namespace)
    return namespace


def test_the_reference_script_runs_unchanged_and_its_dry_run_prints_the_slime_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = run_user_script(tmp_path, monkeypatch)
    run = namespace["run"]
    out, err = capsys.readouterr()
    assert f"run id: {run.training_run_id}" in out  # type: ignore[attr-defined]
    assert "dry run, nothing started" in err
    command = run.summary["command"]  # type: ignore[attr-defined]
    assert run.backend == "slime" and run.summary["submitted"] is False  # type: ignore[attr-defined]
    assert "train.py" in command and "train.py" in err
    data_root = tmp_path / "data" / "swe_rebench_v2"
    assert str(data_root / "train-4.jsonl") in command
    assert "--custom-rollout-log-function-path agentic_rl.metrics.log_rollout_data" in command
    extra = (tmp_path / run.run_dir / "slime" / "extra_config.yaml").read_text()  # type: ignore[attr-defined]
    assert "agentic_rl.generate.generate" in extra and "--custom-config-path" in command
    assert "--lr 4e-06" in command and "--n-samples-per-prompt 1" in command


@pytest.mark.parametrize("module,name", [(m, n) for m, names in REFERENCE_NAMES.items() for n in names])
def test_the_reference_import_block_fails_when_a_name_disappears(
        module: object, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    exec(compile(IMPORT_BLOCK, "reference_main.py", "exec"), {})  # intact, it runs
    monkeypatch.delattr(module, name)
    with pytest.raises(ImportError, match=name):
        exec(compile(IMPORT_BLOCK, "reference_main.py", "exec"), {})
