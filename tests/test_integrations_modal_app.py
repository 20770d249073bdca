"""The Modal launch, offline: the tutorial's full recipe becomes an app plan (GPU spec and node count,
volumes, environment, image steps, the slime command) and a `modal.App` built without credentials."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codedojo.config import AgentTaskDataset, Qwen3_6_27B, TrainConfig
from codedojo.integrations.modal_app import (
    CODEDOJO_ROOT,
    DEFAULT_SLIME_IMAGE,
    SLIME_ROOT,
    build_app,
    build_plan,
    node_commands,
)
from slime_support import DATA, offline_hf_cache, tutorial_recipe

REVISION = "a9f2e5631634affa2032d5f3f9df8d3f2bcbca62"


@pytest.fixture(autouse=True)
def _model_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The plan derives MODEL_ARGS from the model's config.json, read from the HF cache as on a laptop.
    offline_hf_cache(tmp_path, monkeypatch)


def _config(**overrides: object) -> TrainConfig:
    return TrainConfig(model=Qwen3_6_27B(), dataset=AgentTaskDataset(f"{DATA}/train-300.jsonl"),
                       recipe=tutorial_recipe(**overrides))


def test_the_tutorial_recipe_becomes_a_six_node_h200_app_plan() -> None:
    plan = build_plan(_config(), run_id="run-1")
    assert plan.gpu == "H200:8" and plan.num_nodes == 6  # 16 actor + 32 rollout GPUs, not colocated
    assert plan.volumes == {"/data": "slime-data", "/checkpoints": "codedojo-qwen3_6_27b-checkpoints",
                            "/root/.cache/huggingface": "codedojo-hf-cache"}
    assert plan.env["PYTHONPATH"] == "/root/Megatron-LM/:/root/slime" and plan.env["NCCL_NVLS_ENABLE"] == "1"
    assert plan.env["ASYNC_RL_REWARD_SHAPE"] == "binary" and plan.env["CODEDOJO_RUN_ID"] == "run-1"
    assert plan.memory == (1024, 2 * 1024 * 1024) and plan.function_kwargs == {"ephemeral_disk": 2 * 1024 * 1024}
    assert plan.app_tags == {"codedojo.run": "run-1", "agentic_rollout": "harbor"}
    methods = [step[0] for step in plan.image_steps]
    assert methods == ["from_registry", "entrypoint", "run_commands", "run_commands", "add_local_dir",
                       "run_commands", "env"]
    assert plan.image_steps[0][1] == (DEFAULT_SLIME_IMAGE,)
    overlay = plan.image_steps[2][1][0]
    assert "https://github.com/modal-projects/slime" in overlay and f'rev-parse HEAD)" = {REVISION}' in overlay
    assert overlay.endswith(f"mv /tmp/slime-checkout {SLIME_ROOT}")
    assert plan.image_steps[3][1][1] == "uv pip install --system modal mini-swe-agent datasets"
    source, target = plan.image_steps[4][1]
    assert target == CODEDOJO_ROOT and (Path(source) / "src" / "codedojo").is_dir()
    assert f"--no-deps {CODEDOJO_ROOT}" in plan.image_steps[5][1][0]
    assert plan.image_steps[6][1] == ({"MSWEA_SILENT_STARTUP": "1"},)
    convert, train = plan.command.split(" && ")  # the cached HF -> torch_dist conversion, then training
    assert f"torchrun --nproc-per-node 8 {SLIME_ROOT}/tools/convert_hf_to_torch_dist.py --spec " in convert
    assert train.startswith(f"python3 {SLIME_ROOT}/train.py --spec slime_plugins.models.qwen3_5 get_qwen3_5_spec ")
    assert "--custom-config-path ./extra_config.yaml" in plan.command  # written next to the job on the head
    assert yaml.safe_load(plan.files["extra_config.yaml"])["custom_generate_function_path"] == (
        "codedojo.integrations.slime.generate")


def test_the_app_is_constructible_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    import modal

    for variable in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(variable, raising=False)
    plan = build_plan(_config(), run_id="run-2")
    built = build_app(plan)
    assert isinstance(built.app, modal.App) and built.app.name == "codedojo-qwen3_6_27b"
    assert isinstance(built.train, modal.Function)
    spec = getattr(built.train, "_spec_", None)  # Modal's private record of the function's resources
    if spec is not None:
        assert spec.gpus == "H200:8" and set(spec.volumes) == set(plan.volumes) and spec.memory == plan.memory


def test_layouts_and_revisions() -> None:
    colocated = build_plan(_config(colocate=True, rollout_num_gpus=None), run_id="r")
    assert colocated.num_nodes == 2
    with pytest.raises(ValueError, match="full 40-character commit SHA"):
        build_plan(_config(slime_git_revision="ba324beb"), run_id="r")
    with pytest.raises(ValueError, match="gpu_type"):
        build_plan(_config(gpu_type=None), run_id="r")
    assert node_commands(rank=0, head_ip="10.0.0.1", gpus=8)[0][:3] == ["ray", "start", "--head"]
    worker = node_commands(rank=3, head_ip="10.0.0.1", gpus=8)[0]
    assert "--address=10.0.0.1:6379" in worker and "--block" in worker
