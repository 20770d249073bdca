"""The recipe translated once, at launch, into what the local trainer needs (`TrainPlan`).

`plan_for(recipe, profile=...)` is the only place under train/ that reads a `Recipe`'s fields: the agent's
budget and sampling, how episodes run (sandboxes, retries, reward shape, flagged episodes), the update (loss,
clipping, optimizer and schedule), how a step picks and trains its groups, when to evaluate and checkpoint,
and what the run records. The trainer, the step and the records read the plan's typed parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codedojo.agent.budget import recipe_budget
from codedojo.agent.loop import AgentConfig
from codedojo.config.recipe import CurriculumConfig, HealthConfig, PriceTable, Recipe
from codedojo.inference.protocol import SamplingParams
from codedojo.rollout.episodes import RolloutConfig
from codedojo.sandbox.base import SandboxLimits
from codedojo.train.optim import OptimizerConfig
from codedojo.train.step import UpdateConfig
from codedojo.trial.runner import TrialOptions


@dataclass(frozen=True, kw_only=True)
class StepPlan:
    """How one training step picks its tasks and builds its batch."""

    steps: int
    """Training steps of the run (`num_rollout`)."""
    seed: int
    tasks_per_step: int
    """Tasks rolled out a step: the over-sampling batch when set, else `rollout_batch_size`."""
    samples_per_task: int
    """Episodes per task (the GRPO group's size)."""
    groups_trained: int | None
    """With over-sampling, at most this many groups train (`rollout_batch_size`); None: all of them."""
    normalize_group_std: bool
    drop_uniform_groups: bool
    """Dynamic sampling: groups whose rewards are all equal are left out."""
    curriculum: CurriculumConfig | None


@dataclass(frozen=True, kw_only=True)
class PolicyPlan:
    """The trained policy: LoRA (rank 0: full fine-tuning) and the `bf16` setting the device resolves."""

    lora_rank: int
    lora_alpha: float
    bf16: bool | None


@dataclass(frozen=True, kw_only=True)
class RecordsPlan:
    """When the run evaluates and checkpoints, and what it records besides metrics."""

    eval_interval: int | None
    eval_before_training: bool
    save: str | None
    """The checkpoint folder, relative to the run directory; None: no checkpoints (and no resume)."""
    save_interval: int | None
    capture_trace: bool
    rollout_log_function: str | None
    """`module:function` called with each step's samples (`custom_rollout_log_function`)."""
    dump_template: str | None
    """`save_debug_rollout_data`: a path template with `{rollout_id}`."""
    health: HealthConfig
    prices: PriceTable | None
    hook_args: Any = None
    """What the rollout-log hook receives where slime passes its parsed arguments: the Recipe (opaque here)."""


@dataclass(frozen=True, kw_only=True)
class TrainPlan:
    step: StepPlan
    agent: AgentConfig
    """The training episodes' agent settings (evaluation sets carry their own)."""
    rollout: RolloutConfig
    update: UpdateConfig
    policy: PolicyPlan
    records: RecordsPlan


def plan_for(recipe: Recipe, *, profile: str) -> TrainPlan:
    """`recipe` as the local trainer reads it, for the model's prompt profile `profile`."""
    return TrainPlan(
        step=StepPlan(steps=recipe.num_rollout, seed=recipe.seed,
                      tasks_per_step=recipe.over_sampling_batch_size or recipe.rollout_batch_size,
                      samples_per_task=recipe.n_samples_per_prompt,
                      groups_trained=recipe.rollout_batch_size if recipe.over_sampling_batch_size else None,
                      normalize_group_std=recipe.normalize_group_std, drop_uniform_groups=recipe.dynamic_sampling,
                      curriculum=recipe.curriculum),
        agent=agent_config_for(recipe, profile=profile),
        rollout=rollout_config_for(recipe),
        update=update_config_for(recipe),
        policy=PolicyPlan(lora_rank=recipe.lora_rank, lora_alpha=recipe.lora_alpha, bf16=recipe.bf16),
        records=RecordsPlan(eval_interval=recipe.eval_interval,
                            eval_before_training=not recipe.extra_config.skip_eval_before_train,
                            save=recipe.save, save_interval=recipe.save_interval, capture_trace=recipe.capture_trace,
                            rollout_log_function=recipe.custom_rollout_log_function,
                            dump_template=recipe.save_debug_rollout_data, health=recipe.health,
                            prices=recipe.prices, hook_args=recipe),
    )


def agent_config_for(recipe: Recipe, *, profile: str, evaluation: bool = False,
                     sampling: SamplingParams | None = None, max_new_tokens: int | None = None) -> AgentConfig:
    """The agent's budget, timeouts and sampling for training episodes, or with `evaluation` for an eval set's
    (its own sampling and reply length)."""
    extra = recipe.extra_config
    timeout = extra.agentic_eval_timeout if evaluation and extra.agentic_eval_timeout else extra.agentic_episode_timeout
    budget = recipe_budget(recipe, profile=profile).agent_fields()
    if max_new_tokens:
        budget["max_new_tokens"] = max_new_tokens
    return AgentConfig(
        **budget, episode_timeout_sec=timeout, command_timeout_sec=extra.agentic_exec_timeout,
        max_format_errors=extra.agentic_max_format_errors, prompt_profile=profile,
        sampling=sampling or SamplingParams(temperature=recipe.rollout_temperature, top_p=recipe.rollout_top_p),
    )


def rollout_config_for(recipe: Recipe) -> RolloutConfig:
    """How the trainer runs every training and eval episode. Sandboxes get no network unless the recipe
    says otherwise (`sandbox_network`): a policy under training is the least trusted code codedojo runs."""
    limits = SandboxLimits(cpus=recipe.sandbox_cpus, memory_mb=recipe.sandbox_memory_mb,
                           network=recipe.sandbox_network)
    return RolloutConfig(
        max_open_sandboxes=recipe.max_open_sandboxes, max_inflight_generations=recipe.sglang_server_concurrency,
        max_infra_retries=recipe.extra_config.agentic_max_infra_retries, reward_shape=recipe.reward_shape,
        flagged_episodes=recipe.flagged_episodes,
        trial=TrialOptions(backend=recipe.sandbox_backend, limits=limits),
    )


def update_config_for(recipe: Recipe) -> UpdateConfig:
    """The loss, clipping, optimizer and schedule of every update."""
    low, high = recipe.effective_clip
    optimizer = OptimizerConfig(
        lr=recipe.lr, min_lr=recipe.min_lr, lr_decay_style=recipe.lr_decay_style,
        lr_warmup_iters=recipe.lr_warmup_iters, lr_decay_iters=recipe.lr_decay_iters,
        total_steps=recipe.num_rollout * recipe.optimizer_steps_per_rollout, weight_decay=recipe.weight_decay,
        adam_beta1=recipe.adam_beta1, adam_beta2=recipe.adam_beta2, adam_eps=recipe.adam_eps)
    return UpdateConfig(
        optimizer=optimizer, global_batch_size=recipe.effective_global_batch_size,
        max_tokens_per_gpu=recipe.max_tokens_per_gpu, log_probs_chunk_size=recipe.log_probs_chunk_size,
        temperature=recipe.rollout_temperature, eps_clip=low, eps_clip_high=high, clip_grad=recipe.clip_grad,
        use_kl=recipe.use_kl_loss and recipe.kl_loss_coef != 0.0, kl_loss_coef=recipe.kl_loss_coef,
        kl_loss_type=recipe.kl_loss_type, entropy_coef=recipe.entropy_coef, use_tis=recipe.use_tis,
        tis_clip=recipe.tis_clip)
