"""`TrainConfig(model, dataset, recipe).launch()`: the public entry point, as in the reference tutorial.

`launch()` picks the backend the recipe was made for: the local trainer for local recipes; a recipe
that needs a cluster (Qwen3_6_27B_Recipe) stops at once with a message naming the backend it needs. At
start it prints the derived values (optimizer steps per rollout, effective clip bounds, ...) and every
recipe field the chosen backend does not use, with the reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codedojo.config.dataset import DatasetConfig
from codedojo.config.recipe import Backend, EvalDefaults, Recipe

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


class BackendRequired(RuntimeError):
    """The recipe cannot run on the requested backend."""


@dataclass(frozen=True)
class Run:
    """A launched training run."""

    training_run_id: str
    run_dir: Path
    backend: str
    summary: dict[str, Any]
    modal_app_url: str | None = None

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    @property
    def report_path(self) -> Path:
        return self.run_dir / "report.html"


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """What to train (model), on what (dataset), and how (recipe)."""

    model: Any
    """A model spec (Qwen3_6_27B(), SmolLM2_135M_Instruct(), HFFolder(...), TinyModel(...)) or a name/path."""
    dataset: DatasetConfig
    """Training tasks, e.g. AgentTaskDataset("train.jsonl")."""
    recipe: Recipe
    """Every setting of the run."""
    run_dir: str | Path | None = None
    """Where the run writes (default: runs/<run id>); an existing run directory with checkpoints resumes."""
    device: str | None = None
    """Torch device of the local backend (default: cuda when available, else cpu)."""

    def __post_init__(self) -> None:
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
        defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())  # type: ignore[misc]
                    for f in dataclasses.fields(Recipe)}
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
        if chosen == "local":
            return self._launch_local(engine_factory=engine_factory)
        from codedojo.integrations import launch_remote

        return launch_remote(self, backend=chosen)  # type: ignore[no-any-return]

    def _launch_local(self, *, engine_factory: Any) -> Run:
        from rich.console import Console

        from codedojo.inference.protocol import SamplingParams
        from codedojo.precision import default_device
        from codedojo.tasks.task import Task, TaskError
        from codedojo.train.trainer import LocalTrainer

        console = Console(stderr=True)
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        run_dir = Path(self.run_dir) if self.run_dir else Path("runs") / run_id
        if (run_dir / "config.json").is_file():
            run_id = json.loads((run_dir / "config.json").read_text()).get("training_run_id", run_id)
        tasks, problems = [], []
        for path in self.dataset.task_paths():
            try:
                tasks.append(Task.load(path))
            except TaskError as e:
                problems.append(str(e))
        if problems:
            raise TaskError(f"{len(problems)} training task(s) are invalid:\n" + "\n".join(problems[:20]))
        if not tasks:
            raise ValueError(f"{self.dataset!r} has no tasks")
        eval_sets = self._eval_sets(SamplingParams, Task)
        device = self.device or default_device()
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps({
            "training_run_id": run_id, "model": getattr(self.model, "name", str(self.model)),
            "dataset": repr(self.dataset), "recipe_class": type(self.recipe).__name__,
            "recipe": {f.name: getattr(self.recipe, f.name) for f in dataclasses.fields(self.recipe)},
            "derived": self.derived(), "device": device, "tasks": len(tasks),
            "eval_sets": {e.name: len(e.tasks) for e in eval_sets},
        }, indent=2, default=lambda o: dataclasses.asdict(o) if dataclasses.is_dataclass(o) else str(o)))
        console.print(f"[bold]codedojo train[/bold] run {run_id} in {run_dir}")
        console.print(f"  model {getattr(self.model, 'name', self.model)} on {device}; {len(tasks)} training tasks; "
                      + (", ".join(f"eval {e.name} {len(e.tasks)}" for e in eval_sets) or "no eval"))
        for key, value in self.derived().items():
            console.print(f"  {key}: {value}")
        console.print(f"  training matmuls: {_precision_note(self.recipe.bf16, device)}")
        for name, reason in self.ignored_fields("local"):
            console.print(f"  [dim]ignored locally: {name} ({reason})[/dim]")
        trainer = LocalTrainer(model=self.model, tasks=tasks, recipe=self.recipe, run_dir=run_dir, device=device,
                               eval_sets=eval_sets, engine_factory=engine_factory, console=console)
        summary = asyncio.run(trainer.run())
        console.print(f"metrics: {run_dir / 'metrics.jsonl'} (TensorBoard: {run_dir / 'tensorboard'})")
        console.print(f"report: {summary['report']}; final model: {summary['final_model']}")
        if self.recipe.save:
            console.print(f"checkpoints: {run_dir / self.recipe.save}")
        return Run(training_run_id=run_id, run_dir=run_dir, backend="local", summary=summary)

    def _eval_sets(self, sampling_cls: Any, task_cls: Any) -> list[Any]:
        from codedojo.config.dataset import AgentTaskDataset
        from codedojo.train.trainer import EvalSet

        config = self.recipe.eval_config
        if config is None:
            return []
        defaults = config.defaults or EvalDefaults()
        sets = []
        for d in config.datasets:
            def pick(name: str, fallback: Any, d: Any = d) -> Any:
                value = getattr(d, name)
                return value if value is not None else (getattr(defaults, name) if getattr(defaults, name) is not None
                                                        else fallback)

            tasks = [task_cls.load(p) for p in AgentTaskDataset(d.path).task_paths()]
            sampling = sampling_cls(temperature=pick("temperature", 0.6), top_p=pick("top_p", 1.0),
                                    top_k=pick("top_k", 0))
            sets.append(EvalSet(name=d.name, tasks=tasks, n=pick("n_samples_per_eval_prompt",
                                                                 self.recipe.n_samples_per_eval_prompt),
                                sampling=sampling, max_new_tokens=pick("max_response_len",
                                                                       self.recipe.eval_max_response_len
                                                                       or self.recipe.rollout_max_response_len)))
        return sets


def _precision_note(bf16: bool | None, device: str) -> str:
    import torch

    from codedojo.precision import compute_dtype, native_bf16

    dtype = "bf16" if compute_dtype(bf16, device) == torch.bfloat16 else "fp32"
    if bf16 is not None:
        return f"{dtype} (recipe bf16={bf16})"
    return f"{dtype} (bf16 unset: {device} {'has' if native_bf16(device) else 'lacks'} native bf16)"

