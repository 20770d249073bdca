"""A recipe -> slime's command line (`train.py`, or `train_async.py` in async mode) and its YAML files.

The launcher's rules (modal-projects/training-gym `SlimeRecipe.cli_args`): every recipe field becomes
`--field-name value`; True becomes a bare flag; None, False and "" are dropped; lists expand; fields
only the launcher reads never reach slime. `extra_config` is written to a YAML passed as
`--custom-config-path` (slime sets every key on `args` after validation, which is how the generate hook
reads the agentic limits) and `eval_config` to a YAML passed as `--eval-config`.

Every Recipe field is in exactly one of three places below, so a new field forces a decision:
`LAUNCHER_ONLY` (kept out of slime, with the reason), `MAPPED` (codedojo fields that become other flags,
YAML keys or environment variables; the mapping is in `_mapped`), or passed through by the rule.

The model's architecture (MODEL_ARGS) is derived from its config.json and rendered inline
(`slime_model`); the initial weights are `--load` / `--ref-load`, produced by a conversion step before
training when the recipe names no Megatron checkpoint (`slime_weights`); slime's reward post-processing,
dynamic-sampling filter and eval-log hooks keep infrastructure failures out of its statistics
(`slime_rewards`). slime ignores flags it does not know, so every flag rendered here is checked against
the pinned revision's parser in the tests.

Checks slime itself skips (or makes only after a GPU allocation) run here first: the Megatron layout
(TP x PP x CP must divide the actor GPUs, the pipeline split must divide the layers), engines per rollout
GPU, batch arithmetic, KL settings, loadable weights, top-p, checkpoint and eval prerequisites. Derived
values (data parallelism, engines, clip bounds, optimizer steps) are printed at launch.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from codedojo.config.recipe import EvalConfig, Recipe
from codedojo.integrations.slime_model import ModelArgs, ModelArgsError, load_hf_config, model_args
from codedojo.integrations.slime_rewards import DYNAMIC_SAMPLING_FILTER, HOOK_PATHS
from codedojo.integrations.slime_weights import (
    DEFAULT_MEGATRON_ROOT,
    Conversion,
    InitialWeights,
    initial_weights,
    missing_weights,
)
from codedojo.records import record_to_dict

if TYPE_CHECKING:
    from codedojo.inference.specs import ModelLike

EXTRA_CONFIG_FILE = "extra_config.yaml"
EVAL_CONFIG_FILE = "eval_config.yaml"

LAUNCHER_ONLY: dict[str, str] = {
    "gpu_type": "the Modal launcher's accelerator type (slime sees GPUs through Ray)",
    "conversion_tensor_model_parallel_size": "the launcher's HF -> torch_dist conversion step before training",
    "conversion_pipeline_model_parallel_size": "the launcher's HF -> torch_dist conversion step before training",
    "conversion_dir": "where the launcher's conversion step keeps its torch_dist checkpoints",
    "capture_trace": "codedojo's local Chrome trace; slime has no such flag (the launcher's rollout tracing)",
    "slime_git_repository": "the Modal image installs slime from it",
    "slime_git_revision": "the Modal image installs slime at it",
    "data_volume_name": "the Modal volume mounted at /data",
    "memory": "the Modal training container's memory",
    "train_function_kwargs": "extra arguments of the Modal training function",
    "image_run_commands": "Modal image build steps",
    "image_env": "Modal image environment",
    "app_tags": "Modal app tags",
    "bf16": "the local trainer's matmul precision; slime trains Megatron in bf16 regardless (its arguments set "
            "bf16 = not fp16)",
    "lora_alpha": "LoRA is local-only: slime's Megatron backend trains full weights (lora_rank > 0 is refused)",
    "max_open_sandboxes": "slime bounds episodes in flight by sglang_server_concurrency x engines; Modal "
                          "sandboxes add their own boot cap",
}
MAPPED: dict[str, str] = {
    "advantage_estimator": "--advantage-estimator grpo; dr_grpo adds --disable-grpo-std-normalization and "
                           "--calculate-per-token-loss",
    "disable_grpo_std_normalization": "--disable-grpo-std-normalization --calculate-per-token-loss (Dr.GRPO)",
    "ref_load": "--ref-load; empty: the conversion step's output",
    "load": "--load; None: save, else the --ref-load value",
    "metrics": "--use-tensorboard --tb-project-name <project>, or --use-wandb --wandb-project <project>",
    "global_batch_size": "--global-batch-size, None rendered as rollout_batch_size x n_samples_per_prompt",
    "dynamic_sampling": f"--dynamic-sampling-filter-path {DYNAMIC_SAMPLING_FILTER}",
    "max_tokens_per_gpu": "--use-dynamic-batch-size --max-tokens-per-gpu (token-budget packing, as locally)",
    "seed": "--seed (Megatron) and --rollout-seed (task sampling)",
    "lora_rank": "0 dropped; > 0 refused (no LoRA in slime's Megatron backend)",
    "curriculum": "None dropped; set, refused (slime samples its prompt dataset uniformly)",
    "health": "the local trainer's health checks; not run on slime (its agentic/* metrics carry what they read)",
    "prices": "the local trainer's cost in money; not rendered (slime's agentic/* metrics carry tokens and phases)",
    "eval_config": f"written to {EVAL_CONFIG_FILE}, --eval-config; each dataset gets metadata_overrides.task_root",
    "extra_config": f"written to {EXTRA_CONFIG_FILE}, --custom-config-path",
    "custom_rollout_log_function": "--custom-rollout-log-function-path (module:function becomes module.function)",
    "sandbox_backend": f"{EXTRA_CONFIG_FILE}: agentic_sandbox_backend",
    "sandbox_network": f"{EXTRA_CONFIG_FILE}: agentic_sandbox_network",
    "flagged_episodes": f"{EXTRA_CONFIG_FILE}: agentic_flagged_episodes",
    "reward_shape": "environment ASYNC_RL_REWARD_SHAPE",
    "sandbox_cpus": "environment SLIME_AGENT_SANDBOX_CPU",
    "sandbox_memory_mb": "environment SLIME_AGENT_SANDBOX_MEMORY_MB",
    "environment": "the job's environment (Ray runtime env / Modal function env)",
    "async_mode": "the entry point: train_async.py instead of train.py",
}


class SlimeConfigError(ValueError):
    """The recipe cannot run on slime as it stands; the message lists every problem."""


@dataclass(frozen=True, kw_only=True)
class SlimeCommand:
    """What a launcher needs to start slime for one recipe."""

    entry: str
    """"train.py" or "train_async.py" (relative to slime's checkout)."""
    args: tuple[str, ...]
    """Flags after the entry point and MODEL_ARGS."""
    files: dict[str, str]
    """File name -> text of the YAML files the flags name (written into `files_dir`)."""
    env: dict[str, str]
    """The job's environment variables."""
    model_args: tuple[str, ...]
    """The Megatron architecture flags (MODEL_ARGS), derived from the checkpoint's config.json."""
    conversion: Conversion | None
    """The HF -> torch_dist step run first, or None when the recipe names a Megatron checkpoint."""
    report: tuple[str, ...]
    """Derived values, printed at launch."""
    warnings: tuple[str, ...] = ()
    dropped: tuple[tuple[str, str], ...] = ()
    """(field, reason) for every launcher-only field set away from its default."""

    def argv(self, *, slime_root: str) -> list[str]:
        return ["python3", f"{slime_root.rstrip('/')}/{self.entry}", *self.model_args, *self.args]

    def shell(self, *, slime_root: str, megatron_root: str = DEFAULT_MEGATRON_ROOT) -> str:
        """One bash line: the conversion step when there is one, then the entry point."""
        train = shlex.join(self.argv(slime_root=slime_root))
        if self.conversion is None:
            return train
        convert = self.conversion.shell(slime_root=slime_root, megatron_root=megatron_root,
                                        model_args=self.model_args)
        return f"{convert} && {train}"

    def rendered_flags(self) -> list[str]:
        """Every flag name this command passes to slime's parsers (training and conversion)."""
        tokens = [*self.model_args, *self.args]
        if self.conversion is not None:
            tokens += self.conversion.flags(model_args=self.model_args)
        return sorted({t for t in tokens if t.startswith("--")})


@dataclass(kw_only=True)
class _Flags:
    args: list[str] = field(default_factory=list)

    def add(self, name: str, value: Any) -> None:
        """The launcher's rule for one `--name value`."""
        if value is None or value is False or value == "":
            return
        flag = "--" + name.replace("_", "-")
        if value is True:
            self.args.append(flag)
        elif isinstance(value, list | tuple):
            self.args += [flag, *(str(v) for v in value)]
        else:
            self.args += [flag, str(value)]


def render_slime_command(recipe: Recipe, *, model: ModelLike, dataset: Any, files_dir: str,
                         hf_config: dict[str, Any] | None = None) -> SlimeCommand:
    """The slime command for `recipe` training `model` on `dataset`; YAML paths are under `files_dir`.

    `hf_config` is the checkpoint's config.json; None reads it from the HF folder or the HF cache
    (`slime_model.load_hf_config`). Raises SlimeConfigError naming every problem before anything starts."""
    checkpoint = hf_checkpoint(model)
    architecture = derive_model_args(checkpoint, hf_config=hf_config)
    report, warnings = check_recipe(recipe, num_layers=architecture.num_layers)
    weights = initial_weights(recipe, hf_checkpoint=checkpoint)
    flags = _Flags()
    flags.add("hf_checkpoint", checkpoint)
    flags.add("prompt_data", str(dataset.path) if hasattr(dataset, "path") else None)
    flags.add("input_key", dataset.input_key())
    flags.add("label_key", dataset.label_key())
    flags.add("metadata_key", "metadata")
    flags.add("apply_chat_template", bool(dataset.apply_chat_template()))
    flags.add("rollout_shuffle", True)  # the local trainer samples tasks at random too
    files: dict[str, str] = {}
    for f in dataclasses.fields(Recipe):
        if f.name in LAUNCHER_ONLY:
            continue
        value = getattr(recipe, f.name)
        if f.name in MAPPED:
            _mapped(f.name, value, recipe=recipe, flags=flags, files=files, files_dir=files_dir, weights=weights)
        else:
            flags.add(f.name, value)
    for name, path in HOOK_PATHS.items():  # infrastructure failures out of slime's statistics
        flags.add(name, path)
    if recipe.extra_config.custom_generate_function_path is None:
        warnings.append("extra_config.custom_generate_function_path is None: slime's default generate will run, "
                        "which knows no agent tasks (use codedojo.integrations.slime.generate)")
    if recipe.metrics is None:
        warnings.append("metrics is None: slime logs agentic/* metrics only to its log lines (set metrics to "
                        "TrackioConfig(project=...) for TensorBoard or W&B)")
    if weights.conversion is not None:
        c = weights.conversion
        report.append(f"initial weights: {c.hf_checkpoint} converted to torch_dist at {c.output} "
                      f"(TP {c.tensor_model_parallel_size} x PP {c.pipeline_model_parallel_size}, "
                      f"{c.num_processes} GPU(s); skipped when already converted)")
    report.append(f"--load {weights.load} --ref-load {weights.ref_load or '(none)'}")
    return SlimeCommand(
        entry="train_async.py" if recipe.async_mode else "train.py", args=tuple(flags.args), files=files,
        env=job_environment(recipe), model_args=architecture.flags, conversion=weights.conversion,
        report=tuple(report), warnings=tuple(warnings), dropped=tuple(dropped_fields(recipe)),
    )


def derive_model_args(checkpoint: str, *, hf_config: dict[str, Any] | None = None) -> ModelArgs:
    """MODEL_ARGS of `checkpoint`; a config that cannot be read or mapped is a SlimeConfigError."""
    try:
        return model_args(hf_config if hf_config is not None else load_hf_config(checkpoint))
    except ModelArgsError as e:
        raise SlimeConfigError(f"the recipe cannot run on slime: {e}") from None


def _mapped(name: str, value: Any, *, recipe: Recipe, flags: _Flags, files: dict[str, str], files_dir: str,
            weights: InitialWeights) -> None:
    if name == "advantage_estimator":
        flags.add("advantage_estimator", "grpo")
        # Dr.GRPO: no std division, and the loss normalised over tokens rather than per sample.
        flags.add("disable_grpo_std_normalization", not recipe.normalize_group_std)
        flags.add("calculate_per_token_loss", not recipe.normalize_group_std)
    elif name == "ref_load":
        flags.add("ref_load", weights.ref_load)
    elif name == "load":
        flags.add("load", weights.load)
    elif name == "metrics" and value is not None:
        if value.slime_logger == "wandb":
            flags.add("use_wandb", True)
            flags.add("wandb_project", value.project)
        else:
            flags.add("use_tensorboard", True)
            flags.add("tb_project_name", value.project)
    elif name == "global_batch_size":
        flags.add("global_batch_size", recipe.effective_global_batch_size)
    elif name == "dynamic_sampling":
        flags.add("dynamic_sampling_filter_path", DYNAMIC_SAMPLING_FILTER if value else None)
    elif name == "max_tokens_per_gpu":
        flags.add("use_dynamic_batch_size", True)
        flags.add("max_tokens_per_gpu", value)
    elif name == "seed":
        flags.add("seed", value)
        flags.add("rollout_seed", value)
    elif name == "eval_config" and value is not None:
        files[EVAL_CONFIG_FILE] = to_yaml(eval_config_data(value))
        flags.add("eval_config", f"{files_dir}/{EVAL_CONFIG_FILE}")
    elif name == "extra_config":
        files[EXTRA_CONFIG_FILE] = to_yaml(extra_config_data(recipe))
        flags.add("custom_config_path", f"{files_dir}/{EXTRA_CONFIG_FILE}")
    elif name == "custom_rollout_log_function" and value:
        flags.add("custom_rollout_log_function_path", value.replace(":", "."))
    # lora_rank and curriculum (checked), health and prices (local only), sandbox_backend, sandbox_network and
    # flagged_episodes (extra_config), async_mode (entry point), disable_grpo_std_normalization (with
    # advantage_estimator) and the environment fields (job_environment) need nothing here.


def extra_config_data(recipe: Recipe) -> dict[str, Any]:
    """Every ExtraConfig key (None included, so the hook sees exactly the recipe) plus codedojo's own."""
    data = {f.name: getattr(recipe.extra_config, f.name) for f in dataclasses.fields(recipe.extra_config)}
    data["agentic_sandbox_backend"] = recipe.sandbox_backend
    data["agentic_sandbox_network"] = recipe.sandbox_network
    data["agentic_flagged_episodes"] = recipe.flagged_episodes
    return data


def eval_config_data(config: EvalConfig) -> dict[str, Any]:
    """slime's eval YAML (the mapping itself, as the launcher writes it); rows resolve their relative task
    paths from their own file's folder through metadata_overrides.task_root."""
    data = record_to_dict(config)
    for entry in data.get("datasets", []):
        overrides = entry.setdefault("metadata_overrides", {})
        folder = entry["path"].rsplit("/", 1)[0] if "/" in entry["path"] else "."
        overrides.setdefault("task_root", folder)
    return data


def job_environment(recipe: Recipe) -> dict[str, str]:
    """The recipe's environment plus the tutorial's variables for the typed agent fields and the episode
    budget the sandbox backend sizes lifetimes from."""
    env = dict(recipe.environment)
    env["ASYNC_RL_REWARD_SHAPE"] = recipe.reward_shape
    # Sandbox backends size sandbox lifetimes from the longest episode (modal_boot.sandbox_timeouts).
    extra = recipe.extra_config
    env["CODEDOJO_EPISODE_TIMEOUT"] = f"{max(extra.agentic_episode_timeout, extra.agentic_eval_timeout or 0):g}"
    if recipe.sandbox_cpus is not None:
        env["SLIME_AGENT_SANDBOX_CPU"] = f"{recipe.sandbox_cpus:g}"
    if recipe.sandbox_memory_mb is not None:
        env["SLIME_AGENT_SANDBOX_MEMORY_MB"] = str(recipe.sandbox_memory_mb)
    return env


def dropped_fields(recipe: Recipe) -> list[tuple[str, str]]:
    defaults = Recipe()
    return [(name, why) for name, why in LAUNCHER_ONLY.items() if getattr(recipe, name) != getattr(defaults, name)]


def hf_checkpoint(model: ModelLike) -> str:
    """What slime loads the tokenizer and SGLang weights from: an HF repo id or folder."""
    for attribute in ("hf_repo", "path"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return str(getattr(model, "name", model))


def check_recipe(recipe: Recipe, *, num_layers: int | None = None) -> tuple[list[str], list[str]]:
    """(derived values, warnings) for slime; raises SlimeConfigError naming every blocking problem.

    `num_layers` (the model's decoder layers) enables the pipeline-split checks."""
    r = recipe
    problems: list[str] = []
    warnings: list[str] = []
    actor_gpus = r.actor_num_nodes * r.actor_num_gpus_per_node
    model_parallel = r.tensor_model_parallel_size * r.pipeline_model_parallel_size * r.context_parallel_size
    data_parallel = actor_gpus // model_parallel if model_parallel and actor_gpus % model_parallel == 0 else 0
    if not data_parallel:
        problems.append(f"TP x PP x CP = {r.tensor_model_parallel_size} x {r.pipeline_model_parallel_size} x "
                        f"{r.context_parallel_size} = {model_parallel} does not divide the {actor_gpus} actor GPUs")
    if r.sequence_parallel and r.tensor_model_parallel_size < 2:
        problems.append("sequence_parallel needs tensor_model_parallel_size > 1")
    if r.decoder_last_pipeline_num_layers is not None and r.pipeline_model_parallel_size < 2:
        problems.append("decoder_last_pipeline_num_layers needs pipeline_model_parallel_size > 1")
    rollout_gpus = r.rollout_num_gpus if r.rollout_num_gpus is not None else (actor_gpus if r.colocate else None)
    if rollout_gpus is None:
        problems.append("rollout_num_gpus must be set when not colocated (GPUs for the SGLang engines)")
    elif rollout_gpus % r.rollout_num_gpus_per_engine:
        problems.append(f"rollout_num_gpus {rollout_gpus} is not a multiple of rollout_num_gpus_per_engine "
                        f"{r.rollout_num_gpus_per_engine}")
    engines = (rollout_gpus or 0) // r.rollout_num_gpus_per_engine
    gbs = r.effective_global_batch_size
    if r.samples_per_rollout % gbs:
        problems.append(f"rollout_batch_size x n_samples_per_prompt = {r.samples_per_rollout} is not a multiple of "
                        f"global_batch_size {gbs}")
    if data_parallel and gbs % data_parallel:
        problems.append(f"global_batch_size {gbs} is not a multiple of the data-parallel size {data_parallel}")
    if r.async_mode and r.colocate:
        problems.append("async_mode (train_async.py) cannot run colocated: slime asserts not colocate")
    if r.kl_coef and r.kl_loss_coef:
        problems.append("kl_coef (reward KL) and kl_loss_coef (KL loss) cannot both be non-zero")
    if r.save_interval is not None and not r.save:
        problems.append("save_interval needs save (a checkpoint directory)")
    if r.eval_interval is not None and not (r.eval_config and r.eval_config.datasets):
        problems.append("eval_interval needs eval_config with at least one dataset")
    if r.lora_rank:
        problems.append("lora_rank > 0: slime's Megatron backend trains full weights (LoRA is local-only)")
    if r.curriculum is not None:
        problems.append("curriculum: slime samples its prompt dataset uniformly (the tier curriculum is local-only); "
                        "train each tier's rows as a dataset of its own, or use the local backend")
    if r.rollout_top_p < 1.0:
        problems.append(f"rollout_top_p={r.rollout_top_p:g} < 1: slime then trains on the kept top-p token ids of "
                        "every step (rollout_top_p_token_ids), which codedojo's generate hook and `codedojo serve` do "
                        "not return; slime would fail at the first train step (use rollout_top_p=1.0)")
    if (r.use_kl_loss or r.kl_coef) and r.load and not r.ref_load:
        problems.append("a KL term needs ref_load (slime checks it exists) when load names the starting checkpoint")
    if (why := missing_weights(r)) is not None:
        problems.append(why)
    if num_layers is not None:
        problems += _pipeline_problems(r, num_layers=num_layers)
    if problems:
        raise SlimeConfigError("the recipe cannot run on slime: " + "; ".join(problems))
    if r.kl_loss_coef and not r.use_kl_loss:
        warnings.append(f"kl_loss_coef={r.kl_loss_coef:g} has no effect without use_kl_loss")
    if r.use_kl_loss and not r.kl_loss_coef:
        warnings.append("use_kl_loss with kl_loss_coef=0 computes a KL (and loads the reference model) for nothing")
    low, high = r.effective_clip
    report = [
        f"actor GPUs {actor_gpus} = TP {r.tensor_model_parallel_size} x PP {r.pipeline_model_parallel_size} x "
        f"CP {r.context_parallel_size} x DP {data_parallel}",
        f"rollout GPUs {rollout_gpus}: {engines} SGLang engine(s) x {r.rollout_num_gpus_per_engine} GPU(s); "
        f"{r.sglang_server_concurrency * engines} requests in flight",
        f"samples per rollout {r.samples_per_rollout}; global batch {gbs}; optimizer steps per rollout "
        f"{r.optimizer_steps_per_rollout}; total {r.num_rollout * r.optimizer_steps_per_rollout}",
        f"clip bounds [{1 - low:g}, {1 + high:g}] " + ("(clip-higher)" if high != low else "(symmetric)"),
        f"entry point {'train_async.py (one step off-policy)' if r.async_mode else 'train.py (synchronous)'}",
    ]
    return report, warnings


def _pipeline_problems(r: Recipe, *, num_layers: int) -> list[str]:
    """Megatron's layer split (validate_args) for training and, when it runs, the conversion."""
    problems = []
    pp, last = r.pipeline_model_parallel_size, r.decoder_last_pipeline_num_layers
    if last is not None and pp > 1 and (last >= num_layers or (num_layers - last) % (pp - 1)):
        problems.append(f"decoder_last_pipeline_num_layers {last} leaves {num_layers - last} of {num_layers} layers, "
                        f"not a multiple of the other {pp - 1} pipeline stage(s)")
    elif last is None and num_layers % pp:
        problems.append(f"pipeline_model_parallel_size {pp} does not divide the model's {num_layers} layers "
                        "(set decoder_last_pipeline_num_layers for an uneven split)")
    if not (r.load or r.ref_load) and missing_weights(r) is None:
        tp, cpp = r.conversion_tensor_model_parallel_size or 1, r.conversion_pipeline_model_parallel_size or 1
        if num_layers % cpp:
            problems.append(f"conversion_pipeline_model_parallel_size {cpp} does not divide the model's "
                            f"{num_layers} layers")
        if tp * cpp > num_layers:
            problems.append(f"the conversion's {tp * cpp} processes exceed the model's {num_layers} layers "
                            "(slime's conversion tool refuses that)")
    return problems


def to_yaml(data: dict[str, Any]) -> str:
    import yaml

    return str(yaml.safe_dump(_plain(data), sort_keys=False, default_flow_style=False))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value
