"""`TrainConfig.launch(backend="local")`: load and check the tasks, write the run's config.json, print the
plan (derived values, precision, ignored fields), translate the recipe once (`train.plan.plan_for`, and the
eval sets here), run the local trainer, return a `Run`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from codedojo.agent.engines import profile_for
from codedojo.cache import cache_dir
from codedojo.config.dataset import AgentTaskDataset, DatasetConfig
from codedojo.config.recipe import EvalDefaults, Recipe
from codedojo.config.run import Run
from codedojo.config.train_config import TrainConfig
from codedojo.data.provenance import write_text_atomic
from codedojo.inference.protocol import SamplingParams
from codedojo.inference.specs import resolve_model
from codedojo.precision import check_device, compute_dtype, native_bf16
from codedojo.tasks.task import Task, TaskError
from codedojo.train.plan import agent_config_for, plan_for
from codedojo.train.trainer import EngineFactory, EvalSet, LocalTrainer


def launch_local(config: TrainConfig, *, engine_factory: EngineFactory | None = None) -> Run:
    """Train `config` on this machine; an existing run directory with checkpoints resumes."""
    console = Console(stderr=True)
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    run_dir = Path(config.run_dir) if config.run_dir else Path("runs") / run_id
    if (run_dir / "config.json").is_file():
        run_id = json.loads((run_dir / "config.json").read_text()).get("training_run_id", run_id)
    # Everything the run reads is checked before its directory is made: a bad input leaves nothing behind.
    tasks = load_tasks(config.dataset)
    profile = profile_for(config.model)
    evals = eval_sets(config.recipe, profile=profile)
    device = check_device(config.device)
    resolve_model(config.model)
    if config.baseline is not None:
        resolve_model(config.baseline)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "config.json", json.dumps({
        "training_run_id": run_id, "model": getattr(config.model, "name", str(config.model)),
        "dataset": repr(config.dataset), "recipe_class": type(config.recipe).__name__,
        "recipe": {f.name: getattr(config.recipe, f.name) for f in dataclasses.fields(config.recipe)},
        "derived": config.derived(), "device": device, "tasks": len(tasks),
        "eval_sets": {e.name: len(e.tasks) for e in evals},
    }, indent=2, default=_plain))
    _print_plan(console, config, run_id=run_id, run_dir=run_dir, device=device, tasks=tasks, evals=evals)
    trainer = LocalTrainer(model=config.model, tasks=tasks, plan=plan_for(config.recipe, profile=profile),
                           run_dir=run_dir, device=device, eval_sets=evals, engine_factory=engine_factory,
                           console=console, eval_cache=cache_dir() / "evals" if engine_factory is None else None,
                           baseline=config.baseline, stage_names=config.stage_names)
    summary = asyncio.run(trainer.run())
    console.print(f"metrics: {run_dir / 'metrics.jsonl'} (TensorBoard: {run_dir / 'tensorboard'})")
    console.print(f"report: {summary['report']}; final model: {summary['final_model']}")
    if config.recipe.save:
        console.print(f"checkpoints: {run_dir / config.recipe.save}")
    return Run(training_run_id=run_id, run_dir=run_dir, backend="local", summary=summary)


def _plain(value: Any) -> Any:
    """config.json's encoding of what JSON lacks: records as dicts, anything else as its str."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def load_tasks(dataset: DatasetConfig) -> list[Task]:
    """The dataset's tasks; every invalid one is named (the first 20) before anything starts."""
    tasks, problems = [], []
    for path in dataset.task_paths():
        try:
            tasks.append(Task.load(path))
        except TaskError as e:
            problems.append(str(e))
    if problems:
        raise TaskError(f"{len(problems)} training task(s) are invalid:\n" + "\n".join(problems[:20]))
    if not tasks:
        raise ValueError(f"{dataset!r} has no tasks")
    return tasks


def eval_sets(recipe: Recipe, *, profile: str) -> list[EvalSet]:
    """The recipe's held-out datasets; each setting comes from the dataset, else eval_config.defaults, else
    the recipe. `profile`: the model's prompt profile (agent.engines.profile_for)."""
    config = recipe.eval_config
    if config is None:
        return []
    defaults = config.defaults or EvalDefaults()
    sets = []
    for d in config.datasets:
        def pick(name: str, fallback: Any, d: Any = d) -> Any:
            for source in (d, defaults):
                if getattr(source, name) is not None:
                    return getattr(source, name)
            return fallback

        sampling = SamplingParams(temperature=pick("temperature", 0.6), top_p=pick("top_p", 1.0),
                                  top_k=pick("top_k", 0))
        agent = agent_config_for(recipe, profile=profile, evaluation=True, sampling=sampling,
                                 max_new_tokens=pick("max_response_len",
                                                     recipe.eval_max_response_len or recipe.rollout_max_response_len))
        sets.append(EvalSet(name=d.name, tasks=[Task.load(p) for p in AgentTaskDataset(d.path).task_paths()],
                            n=pick("n_samples_per_eval_prompt", recipe.n_samples_per_eval_prompt), agent=agent))
    return sets


def _print_plan(console: Console, config: TrainConfig, *, run_id: str, run_dir: Path, device: str,
                tasks: list[Task], evals: list[EvalSet]) -> None:
    console.print(f"[bold]codedojo train[/bold] run {run_id} in {run_dir}")
    console.print(f"  model {getattr(config.model, 'name', config.model)} on {device}; {len(tasks)} training tasks; "
                  + (", ".join(f"eval {e.name} {len(e.tasks)}" for e in evals) or "no eval"))
    for key, value in config.derived().items():
        console.print(f"  {key}: {value}")
    console.print(f"  training matmuls: {precision_note(config.recipe.bf16, device)}")
    for name, reason in config.ignored_fields("local"):
        console.print(f"  [dim]ignored locally: {name} ({reason})[/dim]")


def precision_note(bf16: bool | None, device: str) -> str:
    """The training matmuls' dtype and why."""
    dtype = "bf16" if compute_dtype(bf16, device) == torch.bfloat16 else "fp32"
    if bf16 is not None:
        return f"{dtype} (recipe bf16={bf16})"
    return f"{dtype} (bf16 unset: {device} {'has' if native_bf16(device) else 'lacks'} native bf16)"
