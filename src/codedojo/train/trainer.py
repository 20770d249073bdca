"""The local trainer: GRPO on one machine, for `num_rollout` steps.

Each step: sample `rollout_batch_size` tasks; run `n_samples_per_prompt` episodes of each through the
agent loop, local sandboxes and verifiers; group advantages over valid members; update the policy
(codedojo.train.step); push the new weights to the engine; evaluate and checkpoint as the
plan says (`train.plan.TrainPlan`: the recipe translated once at launch; nothing here reads a Recipe). What
the run writes and prints besides checkpoints (metrics, episodes, evaluations, dumps, the summary) is one
`train.run_records.RunRecords`, called once per event.
Training and sampling share the machine: the engine samples while the trainer waits, then the trainer
updates while the engine waits, so every episode is sampled by the latest weights.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from codedojo.agent.loop import AgentConfig
from codedojo.inference.engine import LocalEngine
from codedojo.inference.protocol import Engine
from codedojo.inference.specs import HFFolder, LoadedModel, ModelLike, resolve_model
from codedojo.memory import peak_rss_gib, return_freed_memory, rss_gib
from codedojo.precision import compute_dtype
from codedojo.rollout.episodes import Episode, EpisodeRequest, RolloutConfig, run_episodes_with_progress
from codedojo.rollout.evaluation import EvalReport, evaluate
from codedojo.tasks.task import Task
from codedojo.threads import to_thread
from codedojo.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, save_hf_folder
from codedojo.train.cost import step_cost
from codedojo.train.curriculum import CurriculumSampler, tier_metrics
from codedojo.train.health import RunUnhealthy
from codedojo.train.health import report as health_report
from codedojo.train.observability import load_hook
from codedojo.train.optim import build_optimizer, build_scheduler
from codedojo.train.plan import TrainPlan
from codedojo.train.policy import Policy
from codedojo.train.report import STAGE_NAMES
from codedojo.train.rollout_metrics import rollout_metrics
from codedojo.train.run_records import RunRecords
from codedojo.train.samples import TrainSample, build_batch
from codedojo.train.state import Sampler, TaskSampler, TrainState
from codedojo.train.step import update

EngineFactory = Callable[[LoadedModel], Awaitable[Engine]]
"""Opens the engine episodes sample from, given the loaded model (tests pass a scripted policy)."""


@dataclass(frozen=True)
class EvalSet:
    name: str
    tasks: list[Task]
    n: int
    agent: AgentConfig
    """The eval episodes' agent settings: the set's sampling and reply length (train.plan.agent_config_for)."""


@dataclass
class _Run:
    """What the steps of one run share."""

    state: TrainState
    engine: Engine
    loaded: LoadedModel
    """The model as loaded: its HF config and tokenizer go into every HF folder the run writes."""
    records: RunRecords
    agent_config: AgentConfig
    rollout: RolloutConfig


class LocalTrainer:
    """Runs a TrainConfig on this machine; `await trainer.run()`."""

    def __init__(self, *, model: ModelLike, tasks: list[Task], plan: TrainPlan, run_dir: Path, device: str,
                 eval_sets: list[EvalSet] | None = None, engine_factory: EngineFactory | None = None,
                 console: Console | None = None, eval_cache: Path | None = None, baseline: ModelLike | None = None,
                 stage_names: tuple[str, str, str] = STAGE_NAMES) -> None:
        self.model_spec = model
        self.tasks = tasks
        self.plan = plan
        self.run_dir = run_dir
        self.device = device
        self.eval_sets = eval_sets or []
        self.engine_factory = engine_factory
        self.console = console or Console(stderr=True)
        self.update_config = plan.update
        self.eval_cache = eval_cache
        """Where the before-training evaluation of a start model given as a folder keeps its episodes, by the
        weights' digest and the evaluation's settings, so a later run from the same weights (the main job's cached
        warm start) reads them back instead of running them again; None: not kept."""
        self.baseline = baseline
        """A model evaluated on the eval sets before a fresh run starts (TrainConfig.baseline); None: none."""
        self.stage_names = stage_names

    async def run(self) -> dict[str, Any]:
        """Train from the latest checkpoint (else from step 0) to num_rollout steps; returns a summary."""
        plan = self.plan.records
        # before the start model is loaded: one model in memory at a time, and a served engine gets the start
        # model's weights after the baseline's
        baseline = await self._evaluate_baseline() if self.baseline is not None and self._starts_fresh() else None
        run = await self._start()
        records = run.records
        if baseline is not None:
            records.baseline(baseline, model=getattr(self.baseline, "name", str(self.baseline)))
        try:
            if run.state.step == 0 and self.eval_sets and plan.eval_before_training:
                await self._evaluate(run, step=0)
            for step in range(run.state.step, self.plan.step.steps):
                await self._train_step(run, step)
                run.state.step = step + 1
                if plan.eval_interval and self.eval_sets and (step + 1) % plan.eval_interval == 0:
                    await self._evaluate(run, step=step + 1)
                self._checkpoint(run)
                records.trace.flush()
                if records.findings and plan.health.action == "stop":
                    raise RunUnhealthy(health_report(records.findings, step=step + 1, config=plan.health))
            save_hf_folder(self.run_dir / "final", policy=run.state.policy, hf_config=run.loaded.hf_config,
                           tokenizer=run.loaded.tokenizer)
        finally:
            await self._close(run)
        learning, report = records.finish()
        return {"run_dir": str(self.run_dir), "report": str(report), "final_model": str(self.run_dir / "final"),
                "last_metrics": records.train_rows[-1] if records.train_rows else {}, "learning": learning}

    async def _start(self) -> _Run:
        """Load the model and the engine, resume from the latest checkpoint, and bring the run's records back
        to its step."""
        plan = self.plan
        torch.manual_seed(plan.step.seed)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        hook = load_hook(plan.records.rollout_log_function)  # a bad path fails before the model loads
        with self.console.status("loading the model"):
            loaded, policy = await self._load()
            engine = await self._open_engine(loaded)
        optimizer = build_optimizer(policy.trainable_parameters(), self.update_config.optimizer)
        state = TrainState(policy=policy, optimizer=optimizer,
                           scheduler=build_scheduler(optimizer, self.update_config.optimizer),
                           sampler=self._sampler(), shuffle_rng=random.Random(plan.step.seed))
        root = self._checkpoint_root()
        resumed_from = latest_checkpoint(root) if root is not None else None
        if resumed_from is not None:
            load_checkpoint(resumed_from, state)
            await self._sync_weights(engine, policy)
            self.console.print(f"resumed from {resumed_from} at step {state.step}")
        records = RunRecords(self.run_dir, plan.records, steps=plan.step.steps, start=state.step,
                             eval_sets=[e.name for e in self.eval_sets], console=self.console, hook=hook,
                             stage_names=self.stage_names)
        return _Run(state=state, engine=engine, loaded=loaded, records=records, agent_config=plan.agent,
                    rollout=plan.rollout)

    def _starts_fresh(self) -> bool:
        """No checkpoint to resume from and eval sets to evaluate: the run begins with its evaluations."""
        root = self._checkpoint_root()
        return bool(self.eval_sets) and (root is None or latest_checkpoint(root) is None)

    async def _evaluate_baseline(self) -> list[tuple[str, EvalReport, int, int]]:
        """The baseline model on every eval set, in an engine of its own, closed before training starts. Its
        episodes are kept in the eval cache by the weights' digest like the start model's (`_kept_evaluation`)."""
        assert self.baseline is not None
        spec = resolve_model(self.baseline)
        with self.console.status(f"loading the baseline model {spec.name}"):
            loaded = await to_thread(spec.load, device=self.device, dtype=torch.float32)
            engine = await self._open_engine(loaded)
        reports = []
        rollout = self.plan.rollout
        try:
            for eval_set in self.eval_sets:
                kept = self._kept_evaluation(eval_set, rollout, model=self.baseline, loaded=loaded)
                self.console.print(f"evaluating the baseline {spec.name} on {eval_set.name}")
                report = await evaluate(eval_set.tasks, engine=engine, n=eval_set.n, agent_config=eval_set.agent,
                                        rollout=rollout, seed=self.plan.step.seed, console=self.console,
                                        trajectory_dir=kept[0] if kept else None, model=kept[1] if kept else None)
                reports.append((eval_set.name, report, eval_set.n, len(eval_set.tasks)))
        finally:
            with contextlib.suppress(Exception):
                await engine.close()
        del loaded, engine
        return_freed_memory()
        return reports

    def _sampler(self) -> Sampler:
        """Uniform passes over the tasks, or the tier curriculum."""
        step = self.plan.step
        if step.curriculum is None:
            return TaskSampler(num_tasks=len(self.tasks), seed=step.seed)
        return CurriculumSampler(config=step.curriculum, task_tiers=[tier_of(t) for t in self.tasks], seed=step.seed)

    async def _load(self) -> tuple[LoadedModel, Policy]:
        spec, policy = resolve_model(self.model_spec), self.plan.policy

        def load() -> tuple[LoadedModel, Policy]:
            loaded = spec.load(device=self.device, dtype=torch.float32)
            return loaded, Policy(loaded.hf_model(), lora_rank=policy.lora_rank, lora_alpha=policy.lora_alpha,
                                  keep_reference=self.update_config.use_kl,
                                  compute_dtype=compute_dtype(policy.bf16, self.device))

        return await to_thread(load)  # off the event loop; the thread then frees its OpenMP pool

    async def _open_engine(self, loaded: LoadedModel) -> Engine:
        if self.engine_factory is not None:
            return await self.engine_factory(loaded)
        from codedojo.inference.engine import LocalEngine

        return LocalEngine(loaded.engine_model(), loaded.tokenizer, seed=self.plan.step.seed)

    async def _close(self, run: _Run) -> None:
        run.records.close()
        with contextlib.suppress(Exception):
            await run.engine.close()

    async def _train_step(self, run: _Run, step: int) -> None:
        """One step: episodes, the batch, the update, the new weights to the engine, and the step's records."""
        started = time.monotonic()
        state, records, trace = run.state, run.records, run.records.trace
        with trace.span("rollout", step=step):
            episodes, rollout_seconds, engine_time = await self._rollout(run, step)
            await _free_memory(run.engine)  # the rollout's KV is stale once the weights change
        samples_records = records.episodes(step, episodes)
        samples, row = self._batch(episodes, samples_records, rollout_seconds=rollout_seconds)
        row.update(engine_time_metrics(engine_time, rollout_seconds=rollout_seconds))
        if isinstance(state.sampler, CurriculumSampler):
            row.update(state.sampler.record([(tier_of(e.request.task), e.reward) for e in episodes
                                             if e.reward is not None]))
        with trace.span("train", step=step):
            row.update(await to_thread(update, state.policy, state.optimizer, state.scheduler, samples,
                                               self.update_config, rng=state.shuffle_rng))
        return_freed_memory()
        row["perf/rss_gib"], row["perf/peak_rss_gib"] = rss_gib(), peak_rss_gib()
        with trace.span("weight_sync", step=step):
            row["perf/weight_sync_seconds"] = await self._sync_weights(run.engine, state.policy)
        row["perf/step_seconds"] = time.monotonic() - started
        row.update(step_cost(row, self.plan.records.prices))
        records.step(step, row, samples_records, rollout_seconds=rollout_seconds)

    def _batch(self, episodes: list[Episode], records: list[dict[str, Any]], *, rollout_seconds: float
               ) -> tuple[list[TrainSample], dict[str, Any]]:
        """The samples to train on (dynamic sampling and over-sampling applied) and the rollout's metrics
        (train.rollout_metrics over the episodes' records, as slime's hook computes them)."""
        plan = self.plan.step
        batch = build_batch(episodes, normalize_std=plan.normalize_group_std, drop_uniform=plan.drop_uniform_groups,
                            max_groups=plan.groups_trained)
        samples = batch.samples
        row: dict[str, Any] = rollout_metrics(records, prefix="rollout/")
        groups: dict[int, list[Episode]] = {}
        for e in episodes:
            groups.setdefault(e.request.group, []).append(e)
        if plan.curriculum is not None or len({tier_of(e.request.task) for e in episodes}) > 1:
            row.update(tier_metrics([(tier_of(g[0].request.task), [e.reward for e in g if e.reward is not None])
                                     for g in groups.values()]))
        row.update({"perf/rollout_seconds": rollout_seconds,
                    "perf/rollout_sampled_tokens_per_sec": row["rollout/sampled_tokens"] / max(rollout_seconds, 1e-9),
                    "rollout/groups": float(batch.groups_total),
                    "rollout/groups_trained": float(len({s.group for s in samples})),
                    "rollout/reward_trained_mean": batch.reward_trained_mean})
        return samples, row

    def _checkpoint(self, run: _Run) -> None:
        """Save the state after its step: as `last`, or kept as step_N every save_interval steps and at the end."""
        root = self._checkpoint_root()
        if root is None:
            return
        done, interval = run.state.step, self.plan.records.save_interval
        keep = interval is not None and (done % interval == 0 or done == self.plan.step.steps)
        with run.records.trace.span("checkpoint", step=done - 1):
            save_checkpoint(root, f"step_{done:06d}" if keep else "last", run.state,
                            hf_config=run.loaded.hf_config, tokenizer=run.loaded.tokenizer, with_hf=keep)

    def _checkpoint_root(self) -> Path | None:
        if not self.plan.records.save:
            return None
        path = Path(self.plan.records.save)
        return path if path.is_absolute() else self.run_dir / path

    async def _rollout(self, run: _Run, step: int) -> tuple[list[Episode], float, dict[str, float]]:
        """The step's episodes, the rollout's wall seconds and what the engine spent on it (`_engine_time` after
        minus before; empty for an engine that keeps no such totals)."""
        plan = self.plan.step
        picked = run.state.sampler.take(plan.tasks_per_step)
        requests = [EpisodeRequest(task=self.tasks[t], group=g, sample=s,
                                   seed=(plan.seed * 1_000_003 + step * 10_007 + g * 101 + s) % 2**31)
                    for g, t in enumerate(picked) for s in range(plan.samples_per_task)]
        before = await _engine_time(run.engine)
        started = time.monotonic()
        episodes = await run_episodes_with_progress(requests, label=f"step {step + 1}/{plan.steps} episodes",
                                                    console=self.console, engine=run.engine,
                                                    agent_config=run.agent_config, rollout=run.rollout)
        seconds = time.monotonic() - started
        after = await _engine_time(run.engine)
        return episodes, seconds, {k: after[k] - before[k] for k in after}

    async def _evaluate(self, run: _Run, *, step: int) -> None:
        """Every eval set after `step` steps: pass@1 (and pass@n), statuses, the gain since the first."""
        with run.records.trace.span("eval", step=step):
            reports = []
            for eval_set in self.eval_sets:
                kept = self._kept_evaluation(eval_set, run.rollout) if step == 0 else None
                report = await evaluate(eval_set.tasks, engine=run.engine, n=eval_set.n, agent_config=eval_set.agent,
                                        rollout=run.rollout, seed=self.plan.step.seed + step, console=self.console,
                                        trajectory_dir=kept[0] if kept else None, model=kept[1] if kept else None)
                reports.append((eval_set.name, report, eval_set.n, len(eval_set.tasks)))
            await _free_memory(run.engine)
        run.records.evaluation(step, reports)

    def _kept_evaluation(self, eval_set: EvalSet, rollout: RolloutConfig, *, model: ModelLike | None = None,
                         loaded: LoadedModel | None = None) -> tuple[Path, str] | None:
        """The folder the before-training evaluation of `model` (default: the start model) on `eval_set` keeps
        its episodes in, and the name of the weights it evaluates (for the evaluation's settings journal); None
        without an eval cache, or when the model is neither a folder nor `loaded` (weights in memory to digest).
        The folder's name covers everything the episodes depend on: the weights' bytes, the device and its
        precision, the tasks, n, the seed, the agent's settings and the reward's shape."""
        model = self.model_spec if model is None else model
        if self.eval_cache is None:
            return None
        weights = hashlib.sha256()
        if isinstance(model, HFFolder):
            for path in sorted(Path(model.path).iterdir()):
                if path.is_file():
                    weights.update(path.name.encode() + b"\0" + path.read_bytes())
            label = model.path
        elif loaded is not None:
            for key, tensor in sorted(loaded.state_dict.items()):
                weights.update(key.encode() + b"\0" + str(tensor.dtype).encode() + b"\0")
                weights.update(tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            label = loaded.name
        else:
            return None
        name = f"{label}@{weights.hexdigest()[:16]}"
        key = json.dumps([weights.hexdigest(), self.device, str(compute_dtype(self.plan.policy.bf16, self.device)),
                          eval_set.name, [t.name for t in eval_set.tasks], eval_set.n, self.plan.step.seed,
                          dataclasses.asdict(eval_set.agent), rollout.reward_shape, rollout.flagged_episodes],
                         sort_keys=True, default=str)
        return self.eval_cache / hashlib.sha256(key.encode()).hexdigest()[:20], name

    async def _sync_weights(self, engine: Engine, policy: Policy) -> float:
        started = time.monotonic()
        await engine.update_weights(await to_thread(policy.engine_state))  # LoRA merges are matmuls
        return time.monotonic() - started

def tier_of(task: Task) -> str:
    """A task's tier (`metadata.tier`), "untiered" when it has none."""
    tier = task.config.metadata.get("tier")
    return tier if isinstance(tier, str) and tier else "untiered"


async def _free_memory(engine: Engine) -> None:
    """Between phases: the engine drops its cached KV and malloc hands freed pages back (codedojo.memory),
    so a run's footprint stays that of its largest phase instead of growing step by step."""
    await engine.flush_cache()
    return_freed_memory()


ENGINE_TIME_KEYS = ("step_seconds", "prefill_step_seconds", "idle_seconds", "prefill_tokens", "decode_tokens",
                    "decode_steps")


async def _engine_time(engine: Engine) -> dict[str, float]:
    """The local engine's running totals of step, prefill-step and idle seconds and of computed tokens; empty
    for an engine that keeps none (a scripted policy, a remote server)."""
    if not isinstance(engine, LocalEngine):
        return {}
    stats = await engine.stats()
    return {k: float(stats[k]) for k in ENGINE_TIME_KEYS}


def engine_time_metrics(spent: dict[str, float], *, rollout_seconds: float) -> dict[str, float]:
    """Where a rollout's seconds went in the engine: stepping (prefill steps and decode-only steps) and idle (no
    row to step: every open episode waited on its sandbox or the agent loop), as seconds and as shares of the
    rollout (what neither covers is the worker handling commands between steps); the tokens it computed; and
    the mean number of rows a decoding step carried (a rollout's last episodes decode a row or two at a time)."""
    if not spent:
        return {}
    busy, idle = spent["step_seconds"], spent["idle_seconds"]
    wall = max(rollout_seconds, 1e-9)
    return {"perf/engine_step_seconds": busy, "perf/engine_prefill_step_seconds": spent["prefill_step_seconds"],
            "perf/engine_decode_step_seconds": busy - spent["prefill_step_seconds"],
            "perf/engine_idle_seconds": idle, "perf/engine_busy_frac": min(busy / wall, 1.0),
            "perf/engine_idle_frac": min(idle / wall, 1.0),
            "rollout/engine_prefill_tokens": spent["prefill_tokens"],
            "rollout/engine_decode_tokens": spent["decode_tokens"],
            "perf/engine_decode_rows_mean": spent["decode_tokens"] / max(spent["decode_steps"], 1.0)}
