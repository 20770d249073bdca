"""`TrainConfig(model, dataset, recipe).launch()`: the public entry point, as in the reference tutorial.

`launch()` picks the backend the recipe was made for: the local trainer for local recipes; a recipe
that needs a cluster (Qwen3_6_27B_Recipe) stops at once with a message naming the backend it needs. At
start it prints the derived values (optimizer steps per rollout, effective clip bounds, ...) and every
recipe field the chosen backend does not use, with the reason.

The launchers (train.launch, integrations.slime_launch, integrations.modal_app) are named by import path
in `LAUNCHERS`; they import this module, never the reverse, and share `Run` and `BackendRequired` from
config.run.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codedojo.config.dataset import DatasetConfig
from codedojo.config.recipe import Backend, Recipe, field_default
from codedojo.config.run import BackendRequired, Run

if TYPE_CHECKING:
    from codedojo.inference.specs import ModelLike

LAUNCHERS: dict[str, str] = {
    "local": "codedojo.train.launch:launch_local",
    "slime": "codedojo.integrations.slime_launch:launch_slime",
    "modal": "codedojo.integrations.modal_app:launch_modal",
}
"""Each backend's launcher, as an import path: it is imported only when that backend launches (and this
module imports none of them)."""

# Fields the local backend does not use, grouped by why. A field is reported only when it differs from
# its default.
LOCAL_IGNORES: dict[str, tuple[str, ...]] = {
    "one process trains and samples on one device; there is no cluster to lay out": (
        "gpu_type", "actor_num_nodes", "actor_num_gpus_per_node", "rollout_num_gpus", "rollout_num_gpus_per_engine",
        "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size", "sequence_parallel",
        "decoder_last_pipeline_num_layers", "attention_backend", "conversion_tensor_model_parallel_size",
        "conversion_pipeline_model_parallel_size", "conversion_dir", "colocate"),
    "the local engine does not do speculative decoding": (
        "sglang_speculative_algorithm", "sglang_speculative_num_steps", "sglang_speculative_eagle_topk",
        "sglang_speculative_num_draft_tokens"),
    "the local trainer starts from the model's own weights and resumes from its run directory": ("ref_load", "load"),
    "local training is synchronous (every episode uses the latest weights)": ("async_mode",),
    "launcher settings of the Modal backend": (
        "slime_git_repository", "slime_git_revision", "data_volume_name", "memory", "train_function_kwargs",
        "image_run_commands", "image_env", "app_tags", "environment"),
    "local metrics go to metrics.jsonl and TensorBoard in the run directory": ("metrics",),
}
LOCAL_IGNORED_EXTRA: dict[str, str] = {
    "router_policy": "one local engine serves every session (its KV cache is kept per session)",
    "custom_generate_function_path": "the local trainer runs codedojo's agent loop directly",
}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """What to train (model), on what (dataset), and how (recipe)."""

    model: ModelLike
    """A model spec (Qwen3_6_27B(), SmolLM2_135M_Instruct(), HFFolder(...), TinyModel(...)) or a name/path."""
    dataset: DatasetConfig
    """Training tasks, e.g. AgentTaskDataset("train.jsonl")."""
    recipe: Recipe
    """Every setting of the run."""
    run_dir: str | Path | None = None
    """Where the run writes (default: runs/<run id>); an existing run directory with checkpoints resumes."""
    device: str | None = None
    """Torch device of the local backend (default: cuda when available, else cpu)."""
    baseline: ModelLike | None = None
    """A model evaluated once on the eval sets before training, beside the start model, e.g. the base model a
    warm start was fine-tuned from: the summary and the report then show the baseline, the start model and the
    trained model on the same tasks, each difference paired over them. Local backend only; its episodes are
    kept in the evaluation cache like the start model's before-training evaluation."""
    stage_names: tuple[str, str, str] = ("baseline", "start", "trained")
    """What the summary calls the baseline, the start model and the trained model (the main job: base, after
    SFT, after GRPO)."""

    def __post_init__(self) -> None:
        for name in ("model", "baseline"):
            value = getattr(self, name)
            if name == "baseline" and value is None:
                continue
            if not isinstance(value, str) and not callable(getattr(value, "load", None)):
                raise TypeError(f"{name} must be a model spec (e.g. SmolLM2_135M_Instruct(), HFFolder(path=...)) or "
                                f"a model name or folder, got {type(value).__name__}")
        names = self.stage_names
        if not (isinstance(names, tuple) and len(names) == 3 and all(isinstance(x, str) and x.strip() for x in names)):
            raise ValueError(f"stage_names must be three non-empty names (baseline, start, trained), got {names!r}")
        if not isinstance(self.dataset, DatasetConfig):
            raise TypeError(f"dataset must be a DatasetConfig (e.g. AgentTaskDataset(path)), got "
                            f"{type(self.dataset).__name__}")
        if not isinstance(self.recipe, Recipe):
            raise TypeError(f"recipe must be a Recipe (e.g. SmolLM2_Recipe(...)), got {type(self.recipe).__name__}")

    def derived(self) -> dict[str, Any]:
        r = self.recipe
        low, high = r.effective_clip
        return {
            "samples per rollout": r.samples_per_rollout,
            "global batch size": r.effective_global_batch_size,
            "optimizer steps per rollout": r.optimizer_steps_per_rollout,
            "total optimizer steps": r.num_rollout * r.optimizer_steps_per_rollout,
            "clip bounds": f"[{1 - low:g}, {1 + high:g}]" + (" (clip-higher)" if high != low else " (symmetric)"),
            "advantages": "GRPO (mean and std)" if r.normalize_group_std else "Dr.GRPO (mean only)",
            "reward shape": r.reward_shape,
        }

    def ignored_fields(self, backend: str) -> list[tuple[str, str]]:
        """(field, reason) for every field set away from its default that `backend` does not use."""
        if backend != "local":
            return []
        defaults = {f.name: field_default(f) for f in dataclasses.fields(Recipe)}
        out = []
        for reason, names in LOCAL_IGNORES.items():
            for name in names:
                if getattr(self.recipe, name) != defaults[name]:
                    out.append((name, reason))
        extra = self.recipe.extra_config
        for name, reason in LOCAL_IGNORED_EXTRA.items():
            if getattr(extra, name) is not None:
                out.append((f"extra_config.{name}", reason))
        return out

    def launch(self, *, backend: Backend | None = None, engine_factory: Any = None) -> Run:
        """Train. `backend` defaults to the first the recipe supports."""
        chosen = backend or self.recipe.REQUIRES_BACKEND[0]
        if chosen not in self.recipe.REQUIRES_BACKEND:
            needs = " or ".join(self.recipe.REQUIRES_BACKEND)
            raise BackendRequired(
                f"{type(self.recipe).__name__} targets the {needs} backend (it describes a multi-GPU cluster); "
                f"launch it with config.launch(backend={self.recipe.REQUIRES_BACKEND[0]!r}), or train locally with "
                "a local recipe such as SmolLM2_Recipe"
            )
        if engine_factory is not None and chosen != "local":
            raise ValueError("engine_factory is an option of the local backend only")
        if self.baseline is not None and chosen != "local":
            raise ValueError(f"baseline is evaluated by the local backend only; the {chosen} backend would not "
                             "evaluate it: leave it out, or evaluate that model with `codedojo eval`")
        module, _, name = LAUNCHERS[chosen].partition(":")
        launcher = getattr(importlib.import_module(module), name)
        run: Run = launcher(self, engine_factory=engine_factory) if chosen == "local" else launcher(self)
        return run
