"""slime test support: the tutorial's full recipe, and a stand-in for slime's `Sample`
(slime/utils/types.py at THUDM/slime 624b824a8) with exactly its field names, its Status values and its
two info records; slime itself is not on PyPI.

`slots=True` makes the stand-in refuse any attribute slime's Sample does not have, so a hook that
writes a misspelt field fails here instead of silently on a cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from codedojo.config import Qwen3_6_27B_Recipe, Recipe

SAMPLE_FIELDS = (
    "group_index", "index", "rollout_id", "prompt", "tokens", "multimodal_inputs", "multimodal_train_inputs",
    "multimodal_train_input_id", "apply_chat_template_kwargs", "response", "response_length", "label", "reward",
    "loss_mask", "weight_versions", "rollout_log_probs", "rollout_top_p_token_ids", "rollout_top_p_token_offsets",
    "rollout_routed_experts", "remove_sample", "teacher_log_probs", "status", "metadata", "generate_function_path",
    "custom_rm_path", "train_metadata", "session_id", "non_generation_time", "spec_info", "prefix_cache_info",
)


@dataclass(slots=True)
class SpecInfo:
    spec_accept_token_num: int = 0
    spec_draft_token_num: int = 0
    spec_verify_ct: int = 0
    completion_token_num: int = 0


@dataclass(slots=True)
class PrefixCacheInfo:
    cached_tokens: int = 0
    total_prompt_tokens: int = 0

    def add(self, meta_info: dict[str, Any]) -> None:
        self.cached_tokens += meta_info.get("cached_tokens", 0)
        self.total_prompt_tokens += meta_info.get("prompt_tokens", 0)


class Status(Enum):
    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass(slots=True)
class Sample:
    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: int | None = None
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: list[int] | None = None
    rollout_top_p_token_offsets: list[int] | None = None
    rollout_routed_experts: Any = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None
    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict[str, Any] | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0
    spec_info: SpecInfo = field(default_factory=SpecInfo)
    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)

    Status = Status  # slime nests the enum in the class: hooks reach it as type(sample).Status

    def get_reward_value(self, args: Any) -> float:
        return self.reward if not args.reward_key else self.reward[args.reward_key]  # type: ignore[index,return-value]

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length


assert tuple(f.name for f in fields(Sample)) == SAMPLE_FIELDS


DATA = "/data/swe_rebench_v2"


def tutorial_recipe(**overrides: object) -> Recipe:
    """modal-projects/training-gym tutorials/coding_agent/main.py with SMOKE = False. The fork's hooks
    (agentic_rl.generate.generate, agentic_rl.metrics.log_rollout_data) are codedojo's here: that swap is
    the point of the integration."""
    values: dict[str, object] = dict(
        slime_git_repository="https://github.com/modal-projects/slime",
        slime_git_revision="a9f2e5631634affa2032d5f3f9df8d3f2bcbca62",
        data_volume_name="slime-data", memory=(1024, 2 * 1024 * 1024),
        train_function_kwargs={"ephemeral_disk": 2 * 1024 * 1024},
        environment={"PYTHONPATH": "/root/Megatron-LM/:/root/slime", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                     "NCCL_NVLS_ENABLE": "1", "NCCL_RAS_ENABLE": "0",
                     "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "ASYNC_RL_TASK_ROOT": "/data",
                     "SLIME_AGENT_SANDBOX_CPU": "2", "SLIME_AGENT_SANDBOX_MEMORY_MB": "4096",
                     "ASYNC_RL_REWARD_SHAPE": "binary"},
        image_run_commands=["apt-get update && apt-get install -y --no-install-recommends rdma-core libibverbs1 "
                            "ibverbs-providers", "uv pip install --system modal mini-swe-agent datasets"],
        image_env={"MSWEA_SILENT_STARTUP": "1"}, app_tags={"agentic_rollout": "harbor"}, colocate=False,
        metrics={"project": "coding-agent"}, num_rollout=500, rollout_batch_size=32, n_samples_per_prompt=8,
        global_batch_size=256, advantage_estimator="grpo", lr=4e-6, lr_decay_style="constant", weight_decay=0.1,
        eps_clip=0.2, eps_clip_high=None, use_kl_loss=False, kl_coef=0.0, entropy_coef=0.0, rollout_temperature=1.0,
        rollout_max_response_len=8192, eval_max_response_len=8192, eval_interval=None, n_samples_per_eval_prompt=1,
        save="/checkpoints", save_interval=20, sglang_server_concurrency=32, max_tokens_per_gpu=16384,
        log_probs_chunk_size=128, capture_trace=True,
        custom_rollout_log_function="codedojo.integrations.slime.log_rollout_data",
        extra_config={"custom_generate_function_path": "codedojo.integrations.slime.generate",
                      "agentic_max_steps": 75, "agentic_episode_timeout": 1800, "agentic_eval_timeout": None,
                      "agentic_exec_timeout": 120, "router_policy": "consistent_hashing",
                      "skip_eval_before_train": False},
        eval_config={"defaults": {"n_samples_per_eval_prompt": 1, "temperature": 0.6, "top_p": 1.0},
                     "datasets": [{"name": "eval", "path": f"{DATA}/eval.jsonl",
                                   "metadata_overrides": {"eval_dataset": "eval"}}]},
        save_debug_rollout_data="/checkpoints/agentic_rollout_dumps/coding-agent-run/rollout_{rollout_id}.pt",
        gpu_type="H200", actor_num_nodes=2, actor_num_gpus_per_node=8, rollout_num_gpus=32,
        rollout_num_gpus_per_engine=2, tensor_model_parallel_size=4, pipeline_model_parallel_size=2,
        context_parallel_size=2, sequence_parallel=True, conversion_tensor_model_parallel_size=4,
        conversion_pipeline_model_parallel_size=2, decoder_last_pipeline_num_layers=30, attention_backend="flash",
        ref_load="", sglang_speculative_algorithm="EAGLE", sglang_speculative_num_steps=3,
        sglang_speculative_eagle_topk=1, sglang_speculative_num_draft_tokens=4,
    )
    return Qwen3_6_27B_Recipe(**{**values, **overrides})


FIXTURES = Path(__file__).parent / "fixtures" / "slime_624b824a"
TUTORIAL_CHECKPOINT = "Qwen/Qwen3.6-27B"


def hf_config(name: str) -> dict[str, Any]:
    """A recorded config.json (tests/fixtures/slime_624b824a/hf_configs)."""
    return dict(json.loads((FIXTURES / "hf_configs" / f"{name}.json").read_text()))


def recorded_flags() -> set[str]:
    """Every flag of slime 624b824a's parser, those its image's Megatron patch adds, and the --sglang- prefixed
    SGLang flags codedojo renders (names only)."""
    names: set[str] = set()
    for file in ("flags.txt", "flags_image_patch.txt", "flags_sglang_prefixed.txt"):
        names |= {line.strip() for line in (FIXTURES / file).read_text().splitlines() if line.startswith("--")}
    return names


def offline_hf_cache(root: Path, monkeypatch: Any, *, repo: str = TUTORIAL_CHECKPOINT,
                     config: dict[str, Any] | None = None) -> Path:
    """An HF hub cache under `root` holding `repo`'s config.json (the tutorial model's fixture by default),
    made the process's cache: what `huggingface-cli download <repo> config.json` leaves on a laptop."""
    import huggingface_hub.constants

    cache = root / "hf-hub"
    folder = cache / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text(json.dumps(config or hf_config("qwen3.6-27B")))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache
