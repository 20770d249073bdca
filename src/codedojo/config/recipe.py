"""Recipes: every training setting, with the reference tutorial's names and slime's meanings.

A recipe accepts every field of the tutorial's `Qwen3_6_27B_Recipe` (hardware layout, parallelism, GRPO
settings, rollout and eval budgets, checkpointing, logging hooks, the launcher's image and volume
settings) plus slime flags the local trainer implements (TIS, KL loss, dynamic sampling, warm-up, ...).
Names and meanings follow slime (`--<field-with-dashes>`); see docs/training.md for the table of which
backend uses which field. Unknown fields are errors that name the field and the closest known one.

The tutorial's `extra_config` keys (`agentic_*`, `router_policy`, `custom_generate_function_path`,
`skip_eval_before_train`) are the typed `ExtraConfig`, and its environment variables
(`ASYNC_RL_REWARD_SHAPE`, `SLIME_AGENT_SANDBOX_CPU`, `SLIME_AGENT_SANDBOX_MEMORY_MB`) become the typed
fields `reward_shape`, `sandbox_cpus` and `sandbox_memory_mb` (given both ways they must agree).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from codedojo.records import RecordError, record_fields

RewardShape = Literal["binary", "fractional"]
Backend = Literal["local", "slime", "modal"]


@dataclass(frozen=True, kw_only=True)
class TrackioConfig:
    """Where the tutorial's launcher sends metrics (Trackio). The local backend writes JSONL and TensorBoard."""

    project: str = "codedojo"
    """Trackio project name."""
    space_id: str | None = None
    """Hugging Face Space hosting the dashboard."""
    slime_logger: Literal["tensorboard", "wandb"] = "tensorboard"
    """What carries the metrics on the slime backend, which has no Trackio logger: TensorBoard under
    tensorboard_log/<project>/ (no account needed) or W&B project <project> (WANDB_API_KEY in the job env)."""


@dataclass(frozen=True, kw_only=True)
class ExtraConfig:
    """The tutorial's `extra_config` (slime's --custom-config-path YAML), typed."""

    agentic_max_steps: int = 75
    """Model replies per episode."""
    agentic_episode_timeout: float = 1800.0
    """Wall clock of one training episode, seconds."""
    agentic_eval_timeout: float | None = None
    """Wall clock of one eval episode, seconds (None: the episode timeout)."""
    agentic_exec_timeout: float = 120.0
    """Wall clock of one command, seconds."""
    agentic_max_format_errors: int = 3
    """Consecutive replies without exactly one command before an episode ends."""
    agentic_max_infra_retries: int = 2
    """Fresh attempts for an episode that failed for infrastructure reasons."""
    router_policy: str | None = "consistent_hashing"
    """How requests spread over inference servers; consistent hashing keeps a session on one server."""
    custom_generate_function_path: str | None = "codedojo.integrations.slime.generate"
    """slime's generate hook (the slime backend); the local backend always runs codedojo's agent loop."""
    skip_eval_before_train: bool = False
    """Skip the evaluation before the first step."""


@dataclass(frozen=True, kw_only=True)
class EvalDataset:
    """One dataset of `eval_config.datasets` (slime's EvalDatasetConfig, the fields codedojo uses)."""

    name: str
    """Name used in metrics (eval/<name>/...)."""
    path: str
    """JSONL of rows {prompt, label, metadata{task_path}}."""
    n_samples_per_eval_prompt: int | None = None
    """Episodes per task (default: eval_config.defaults, then the recipe)."""
    temperature: float | None = None
    """Sampling temperature."""
    top_p: float | None = None
    """Nucleus sampling."""
    top_k: int | None = None
    """Top-k sampling."""
    max_response_len: int | None = None
    """Tokens per reply."""
    metadata_overrides: dict[str, Any] = field(default_factory=dict)
    """Merged into every row's metadata."""


@dataclass(frozen=True, kw_only=True)
class EvalDefaults:
    """`eval_config.defaults`: applied to every eval dataset that does not set the field."""

    n_samples_per_eval_prompt: int | None = None
    """Episodes per task."""
    temperature: float | None = None
    """Sampling temperature (the tutorial uses 0.6)."""
    top_p: float | None = None
    """Nucleus sampling."""
    top_k: int | None = None
    """Top-k sampling."""
    max_response_len: int | None = None
    """Tokens per reply."""


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """slime's --eval-config: defaults plus named datasets."""

    defaults: EvalDefaults = field(default_factory=EvalDefaults)
    """Defaults for every dataset."""
    datasets: tuple[EvalDataset, ...] = ()
    """The held-out sets."""


@dataclass(frozen=True, kw_only=True)
class CurriculumConfig:
    """Draw training tasks from tiers (each task's `metadata.tier`), easiest first, with shares that move
    with the model's pass rate. Every share starts on `tiers[0]` unless `start` says otherwise. After each
    step, from the hardest tier down to the easiest (so a share moves at most one tier a step), a tier whose
    rolling pass rate over its last `window` episodes (once it has `min_episodes`) has reached `promote_at`
    hands `shift` of the whole share (at most what it holds) to the next tier; one at `retire_at` or above
    hands over all it holds and is retired (it is solved nearly always: its groups teach GRPO nothing). Shares
    only move towards harder tiers; the hardest tier keeps what it gets. Logged each step as
    `curriculum/<tier>/share` and `curriculum/<tier>/pass_rate` (codedojo.train.curriculum)."""

    tiers: tuple[str, ...]
    """The tiers, easiest first, e.g. ("guided", "hinted", "warmup"); every training task must be in one."""
    start: tuple[float, ...] | None = None
    """Initial share of each tier (sums to 1); None: all on the first tier."""
    promote_at: float = 0.5
    """Rolling pass rate at which a tier starts handing its share to the next."""
    retire_at: float = 0.9
    """Rolling pass rate at which a tier hands over all of its share."""
    shift: float = 0.25
    """Share handed to the next tier per step."""
    window: int = 32
    """Episodes per tier in its rolling pass rate."""
    min_episodes: int = 8
    """Episodes a tier needs before its pass rate moves any share."""

    def __post_init__(self) -> None:
        problems = []
        if not self.tiers or len(set(self.tiers)) != len(self.tiers):
            problems.append(f"tiers must be distinct and at least one, got {self.tiers!r}")
        if self.start is not None and (len(self.start) != len(self.tiers) or any(x < 0 for x in self.start)
                                       or abs(sum(self.start) - 1.0) > 1e-6):
            problems.append(f"start must give a share >= 0 to each of the {len(self.tiers)} tiers, summing to 1, "
                            f"got {self.start!r}")
        if not 0 < self.promote_at <= self.retire_at <= 1:
            problems.append(f"need 0 < promote_at <= retire_at <= 1, got {self.promote_at} and {self.retire_at}")
        if not 0 < self.shift <= 1:
            problems.append(f"shift must be in (0, 1], got {self.shift}")
        if self.window < 1 or not 1 <= self.min_episodes <= self.window:
            problems.append(f"need window >= 1 and 1 <= min_episodes <= window, got {self.window} and "
                            f"{self.min_episodes}")
        if problems:
            raise RecordError("CurriculumConfig: " + "; ".join(problems))


@dataclass(frozen=True, kw_only=True)
class HealthConfig:
    """The local trainer's health checks after every step (codedojo.train.health): what a finding does, and the
    limits of each check."""

    action: Literal["warn", "stop", "off"] = "warn"
    """warn: print and log health/<check>; stop: also stop the run after the step's checkpoint; off: no checks."""
    identical_reward_steps: int = 3
    """Steps in a row in which every episode got one and the same reward."""
    no_mixed_group_steps: int = 3
    """Steps in a row without a group of mixed rewards."""
    max_verifier_error_frac: float = 0.2
    """Share of a step's episodes whose verifier failed."""
    max_solved_without_command: int = 0
    """Solved episodes in a step that ran no command but the submission."""
    max_logprob_mismatch: float = 0.03
    """Mean |trainer - sampler| logprob per token (bf16 training against an fp32 engine: 1e-3 to 8e-3)."""
    train_eval_gap: float = 0.5
    """Training reward minus held-out pass@1, in absolute value (it must also exceed three standard errors)."""

    def __post_init__(self) -> None:
        if self.identical_reward_steps < 1 or self.no_mixed_group_steps < 1:
            raise RecordError("HealthConfig: identical_reward_steps and no_mixed_group_steps must be at least 1")
        if not 0 <= self.max_verifier_error_frac <= 1 or not 0 < self.train_eval_gap <= 1:
            raise RecordError("HealthConfig: max_verifier_error_frac must be in [0, 1] and train_eval_gap in (0, 1]")
        if self.max_solved_without_command < 0 or self.max_logprob_mismatch <= 0:
            raise RecordError("HealthConfig: max_solved_without_command must be >= 0 and max_logprob_mismatch > 0")


@dataclass(frozen=True, kw_only=True)
class PriceTable:
    """What the machine and the sandboxes cost, for the cost per solved episode in money (codedojo.train.cost)."""

    machine_per_hour: float
    """The training machine (engine and trainer), per hour of the run's wall clock."""
    sandbox_per_hour: float = 0.0
    """One sandbox, per hour it is held (local sandboxes run on the machine: 0)."""
    currency: str = "USD"
    """What the two prices are in."""

    def __post_init__(self) -> None:
        if self.machine_per_hour < 0 or self.sandbox_per_hour < 0:
            raise RecordError("PriceTable: prices must be >= 0")


_ENV_FIELDS = {
    "ASYNC_RL_REWARD_SHAPE": ("reward_shape", str),
    "SLIME_AGENT_SANDBOX_CPU": ("sandbox_cpus", float),
    "SLIME_AGENT_SANDBOX_MEMORY_MB": ("sandbox_memory_mb", int),
}


def field_default(f: dataclasses.Field[Any]) -> Any:
    """A dataclass field's default (a fresh value from its default_factory)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if callable(f.default_factory):
        return f.default_factory()
    raise TypeError(f"field {f.name} has no default")


@dataclass(frozen=True, kw_only=True, init=False)
class Recipe:
    """Every training setting. Construct with keyword arguments; unknown names are errors."""

    REQUIRES_BACKEND: ClassVar[tuple[str, ...]] = ("local", "slime", "modal")
    DEFAULTS: ClassVar[dict[str, Any]] = {}

    # --- hardware and parallelism (slime / Megatron / SGLang; the local backend uses one device) ---
    gpu_type: str | None = None
    """Accelerator type for the launcher (e.g. "H200")."""
    actor_num_nodes: int = 1
    """Training nodes."""
    actor_num_gpus_per_node: int = 8
    """Training GPUs per node."""
    rollout_num_gpus: int | None = None
    """GPUs for inference engines (None: the actor GPUs when colocated)."""
    rollout_num_gpus_per_engine: int = 1
    """GPUs per SGLang engine (its tensor parallelism)."""
    tensor_model_parallel_size: int = 1
    """Megatron tensor parallelism."""
    pipeline_model_parallel_size: int = 1
    """Megatron pipeline parallelism."""
    context_parallel_size: int = 1
    """Megatron context parallelism."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism."""
    decoder_last_pipeline_num_layers: int | None = None
    """Layers on the last pipeline stage (uneven split)."""
    attention_backend: str | None = None
    """Megatron attention backend ("flash", "unfused", ...)."""
    conversion_tensor_model_parallel_size: int | None = None
    """Tensor parallelism of the HF -> Megatron checkpoint conversion (launcher)."""
    conversion_pipeline_model_parallel_size: int | None = None
    """Pipeline parallelism of the checkpoint conversion (launcher)."""
    conversion_dir: str = "/checkpoints/torch_dist"
    """Where the launcher keeps converted torch_dist checkpoints, one folder per model and conversion layout
    (a persistent path the training nodes share; an existing conversion is reused)."""
    colocate: bool = False
    """Training and inference share GPUs."""
    ref_load: str | None = None
    """Reference (and initial) Megatron checkpoint; empty: the launcher's conversion of the HF checkpoint."""
    load: str | None = None
    """Megatron checkpoint training resumes from (slime starts from ref_load when it holds none); None: `save`,
    else the initial weights."""
    sglang_speculative_algorithm: str | None = None
    """SGLang speculative decoding ("EAGLE")."""
    sglang_speculative_num_steps: int | None = None
    """Speculative steps."""
    sglang_speculative_eagle_topk: int | None = None
    """EAGLE top-k."""
    sglang_speculative_num_draft_tokens: int | None = None
    """Draft tokens."""
    sglang_server_concurrency: int = 512
    """In-flight requests per inference engine (locally: generations in flight)."""

    # --- rollout ----------------------------------------------------------------------------------
    num_rollout: int = 10
    """Training steps (rollout + update)."""
    rollout_batch_size: int = 4
    """Tasks per step."""
    n_samples_per_prompt: int = 8
    """Episodes per task (the GRPO group size)."""
    rollout_temperature: float = 1.0
    """Sampling temperature of training episodes."""
    rollout_top_p: float = 1.0
    """Nucleus sampling of training episodes."""
    rollout_max_response_len: int = 1024
    """Tokens per reply (per turn, as agent adapters read slime's flag)."""
    rollout_max_context_len: int = 32768
    """Tokens per episode (prompt, replies and outputs)."""
    over_sampling_batch_size: int | None = None
    """Tasks sampled per step before dynamic sampling keeps rollout_batch_size of them."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal (they carry no learning signal)."""
    curriculum: CurriculumConfig | None = None
    """Draw tasks from tiers with shares that follow the pass rate (local backend; None: uniformly)."""

    # --- optimisation ------------------------------------------------------------------------------
    global_batch_size: int | None = None
    """Samples per optimizer step (None: rollout_batch_size * n_samples_per_prompt, one step per rollout)."""
    advantage_estimator: Literal["grpo", "dr_grpo"] = "grpo"
    """grpo: group mean and std; dr_grpo: group mean only."""
    disable_grpo_std_normalization: bool = False
    """slime's flag for Dr.GRPO (same as advantage_estimator="dr_grpo")."""
    lr: float = 1e-6
    """Peak learning rate."""
    min_lr: float = 0.0
    """Floor of the decayed learning rate."""
    lr_decay_style: Literal["constant", "linear", "cosine"] = "constant"
    """Schedule after warm-up."""
    lr_warmup_iters: int = 0
    """Optimizer steps of linear warm-up."""
    lr_decay_iters: int | None = None
    """Optimizer steps over which the rate decays (None: the whole run)."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.98
    """AdamW beta2."""
    adam_eps: float = 1e-8
    """AdamW epsilon."""
    clip_grad: float = 1.0
    """Gradient norm clip (0: off)."""
    eps_clip: float = 0.2
    """Lower (and, unless eps_clip_high, upper) clip of the policy ratio."""
    eps_clip_high: float | None = None
    """Upper clip (DAPO clip-higher); None means eps_clip."""
    use_kl_loss: bool = False
    """Add a KL penalty against the frozen initial policy to the loss."""
    kl_loss_coef: float = 0.0
    """Weight of the KL loss."""
    kl_loss_type: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator."""
    kl_coef: float = 0.0
    """Reward-shaping KL (slime); must be 0 locally (use use_kl_loss)."""
    entropy_coef: float = 0.0
    """Entropy bonus weight."""
    use_tis: bool = False
    """Truncated importance sampling between sampler and trainer logprobs."""
    tis_clip: float = 2.0
    """TIS weight cap."""
    max_tokens_per_gpu: int = 4096
    """Token budget of a training micro-batch."""
    log_probs_chunk_size: int = 128
    """Tokens per chunk when computing logprobs (bounds the vocabulary-sized logits in memory)."""
    bf16: bool | None = None
    """Local training matmuls in bf16 over fp32 master weights; None: bf16 where the device computes it
    natively (CUDA, CPUs with AVX-512 BF16 or AMX), fp32 elsewhere. slime always trains in bf16."""
    lora_rank: int = 0
    """LoRA rank (0: full fine-tuning)."""
    lora_alpha: float = 16.0
    """LoRA scale numerator (scale = alpha / rank)."""
    seed: int = 1234
    """Seed of task sampling, sampling and initialisation."""

    # --- evaluation, checkpoints, logging ------------------------------------------------------------
    eval_interval: int | None = None
    """Evaluate every this many steps (None: never during training)."""
    eval_max_response_len: int | None = None
    """Tokens per reply in eval (None: rollout_max_response_len)."""
    n_samples_per_eval_prompt: int = 1
    """Episodes per eval task."""
    eval_config: EvalConfig | None = None
    """Held-out datasets and their sampling."""
    save: str | None = None
    """Checkpoint directory (local: under the run directory when relative)."""
    save_interval: int | None = None
    """Checkpoint every this many steps (the last step is always saved when set)."""
    health: HealthConfig = field(default_factory=HealthConfig)
    """Health checks after every step (local backend): a run whose rewards look wrong warns or stops."""
    prices: PriceTable | None = None
    """Prices of the machine and the sandboxes: the cost per solved episode also in money (local backend)."""
    save_debug_rollout_data: str | None = None
    """Path template of per-step rollout dumps, with {rollout_id}."""
    custom_rollout_log_function: str | None = None
    """"module:function" called as fn(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool."""
    capture_trace: bool = False
    """Write a Chrome-trace timeline of the phases."""
    metrics: TrackioConfig | None = None
    """Trackio settings for the launcher."""

    # --- agent and sandboxes ---------------------------------------------------------------------------
    extra_config: ExtraConfig = field(default_factory=ExtraConfig)
    """The tutorial's extra_config, typed."""
    reward_shape: RewardShape = "binary"
    """binary: solved or not; fractional: share of FAIL_TO_PASS passing, 0 if PASS_TO_PASS breaks."""
    sandbox_cpus: float | None = None
    """CPU cores per sandbox (None: the task's)."""
    sandbox_memory_mb: int | None = None
    """Memory per sandbox (None: the task's)."""
    flagged_episodes: Literal["zero", "keep"] = "zero"
    """What an episode with a reward-hacking flag gets (codedojo.trial.hacking): "zero" (reward 0, unsolved in
    evaluation; the flag counted apart from model failures) or "keep" (the verifier's verdict)."""
    sandbox_network: bool | None = False
    """Network of every training and eval episode's sandbox: False none (the safe default for a policy under
    training, whatever the task allows), None each task's network_mode (as `codedojo trial` does), True allow."""
    sandbox_backend: str = "local"
    """Sandbox backend of the local trainer."""
    max_open_sandboxes: int = 8
    """Episodes holding a sandbox at once."""

    # --- launcher (Modal) ------------------------------------------------------------------------------
    slime_git_repository: str | None = None
    """slime repository the launcher installs."""
    slime_git_revision: str | None = None
    """slime revision."""
    data_volume_name: str | None = None
    """Modal volume holding the data."""
    memory: int | tuple[int, ...] | None = None
    """Memory request (or (request, limit)) of the training container, MiB."""
    train_function_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra arguments of the Modal training function."""
    environment: dict[str, str] = field(default_factory=dict)
    """Environment variables of the training job."""
    image_run_commands: tuple[str, ...] = ()
    """Extra image build commands."""
    image_env: dict[str, str] = field(default_factory=dict)
    """Extra image environment."""
    app_tags: dict[str, str] = field(default_factory=dict)
    """Modal app tags."""
    async_mode: bool = False
    """slime's train_async.py (one-step-off pipelining) instead of train.py."""

    def __init__(self, **kwargs: Any) -> None:
        values = record_fields(type(self), kwargs, where=type(self).__name__)
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, values[f.name] if f.name in values else field_default(f))
        self._apply_environment()
        self._validate()

    def _apply_environment(self) -> None:
        for var, (name, kind) in _ENV_FIELDS.items():
            if var not in self.environment:
                continue
            try:
                value = kind(self.environment[var])
            except ValueError:
                raise RecordError(f"{type(self).__name__}: environment {var}={self.environment[var]!r} is not a "
                                  f"{kind.__name__}") from None
            current = getattr(self, name)
            default = next(f.default for f in dataclasses.fields(self) if f.name == name)
            if current != default and current != value:
                raise RecordError(f"{type(self).__name__}: {name}={current!r} disagrees with environment "
                                  f"{var}={value!r}; set one of them")
            object.__setattr__(self, name, value)

    def _validate(self) -> None:
        problems = []
        if self.reward_shape not in ("binary", "fractional"):
            problems.append(f"reward_shape must be 'binary' or 'fractional', got {self.reward_shape!r}")
        for name in ("num_rollout", "rollout_batch_size", "n_samples_per_prompt", "max_tokens_per_gpu",
                     "log_probs_chunk_size", "rollout_max_response_len", "rollout_max_context_len",
                     "max_open_sandboxes", "sglang_server_concurrency"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.rollout_temperature <= 0:
            problems.append("rollout_temperature must be > 0 (slime validates the same)")
        if self.global_batch_size is not None and self.global_batch_size < 1:
            problems.append("global_batch_size must be at least 1")
        if self.save_interval is not None and not self.save:
            problems.append("save_interval needs save (a checkpoint directory)")
        if self.eval_interval is not None and not (self.eval_config and self.eval_config.datasets):
            problems.append("eval_interval needs eval_config with at least one dataset")
        if self.kl_coef and self.kl_loss_coef:
            problems.append("kl_coef and kl_loss_coef cannot both be non-zero (slime refuses the same)")
        if self.over_sampling_batch_size is not None and self.over_sampling_batch_size < self.rollout_batch_size:
            problems.append("over_sampling_batch_size must be at least rollout_batch_size")
        if self.lora_rank < 0:
            problems.append("lora_rank must be >= 0")
        if problems:
            raise RecordError(f"{type(self).__name__}: " + "; ".join(problems))

    # --- derived values (printed at start) --------------------------------------------------------------

    @property
    def samples_per_rollout(self) -> int:
        return self.rollout_batch_size * self.n_samples_per_prompt

    @property
    def effective_global_batch_size(self) -> int:
        return self.global_batch_size or self.samples_per_rollout

    @property
    def optimizer_steps_per_rollout(self) -> int:
        return max(1, -(-self.samples_per_rollout // self.effective_global_batch_size))

    @property
    def effective_clip(self) -> tuple[float, float]:
        return (self.eps_clip, self.eps_clip if self.eps_clip_high is None else self.eps_clip_high)

    @property
    def normalize_group_std(self) -> bool:
        return self.advantage_estimator == "grpo" and not self.disable_grpo_std_normalization

    def replace(self, **changes: Any) -> Recipe:
        """A copy with `changes` applied (and validated)."""
        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return type(self)(**{**current, **changes})


class Qwen3_6_27B_Recipe(Recipe):
    """The reference tutorial's recipe for Qwen3.6-27B: defaults of its full configuration (16 H200 for
    training, 32 for rollouts). It needs the slime or modal backend; `launch()` locally says so."""

    REQUIRES_BACKEND = ("slime", "modal")
    DEFAULTS: ClassVar[dict[str, Any]] = dict(
        gpu_type="H200", actor_num_nodes=2, actor_num_gpus_per_node=8, rollout_num_gpus=32,
        rollout_num_gpus_per_engine=2, tensor_model_parallel_size=4, pipeline_model_parallel_size=2,
        context_parallel_size=2, sequence_parallel=True, conversion_tensor_model_parallel_size=4,
        conversion_pipeline_model_parallel_size=2, decoder_last_pipeline_num_layers=30, attention_backend="flash",
        num_rollout=500, rollout_batch_size=32, n_samples_per_prompt=8, global_batch_size=256, lr=4e-6,
        lr_decay_style="constant", weight_decay=0.1, rollout_max_response_len=8192, eval_max_response_len=8192,
        sglang_server_concurrency=32, max_tokens_per_gpu=16384, log_probs_chunk_size=128,
        sandbox_cpus=2.0, sandbox_memory_mb=4096,
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**self.DEFAULTS, **kwargs})


class SmolLM2_Recipe(Recipe):
    """A recipe with the same fields, sized for one laptop CPU and SmolLM2-135M-Instruct."""

    REQUIRES_BACKEND = ("local",)
    DEFAULTS: ClassVar[dict[str, Any]] = dict(
        num_rollout=8, rollout_batch_size=4, n_samples_per_prompt=4, lr=2e-5, lr_warmup_iters=2, weight_decay=0.0,
        dynamic_sampling=True,
        eps_clip=0.2, eps_clip_high=0.28, rollout_temperature=1.0, rollout_max_response_len=96,
        rollout_max_context_len=2048, max_tokens_per_gpu=2048, log_probs_chunk_size=256,
        sglang_server_concurrency=16, max_open_sandboxes=16,
        extra_config=ExtraConfig(agentic_max_steps=6, agentic_episode_timeout=300.0, agentic_exec_timeout=20.0,
                                 skip_eval_before_train=False),
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**self.DEFAULTS, **kwargs})
