"""The local trainer: GRPO on one machine, for `num_rollout` steps.

Each step: sample `rollout_batch_size` tasks; run `n_samples_per_prompt` episodes of each through the
agent loop, local sandboxes and verifiers; group advantages over valid members; update the policy
(codedojo.train.step); push the new weights to the engine; log, dump, evaluate and checkpoint as the
plan says (`train.plan.TrainPlan`: the recipe translated once at launch; nothing here reads a Recipe).
Training and sampling share the machine: the engine samples while the trainer waits, then the trainer
updates while the engine waits, so every episode is sampled by the latest weights.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from codedojo.agent.loop import AgentConfig
from codedojo.data.provenance import write_text_atomic
from codedojo.inference.protocol import Engine
from codedojo.inference.specs import LoadedModel, ModelLike, resolve_model
from codedojo.memory import peak_rss_gib, return_freed_memory, rss_gib
from codedojo.precision import compute_dtype
from codedojo.rollout.episodes import Episode, EpisodeRequest, RolloutConfig, run_episodes_with_progress
from codedojo.rollout.evaluation import EvalReport, evaluate, paired_difference, reward_trend
from codedojo.tasks.task import Task
from codedojo.threads import to_thread
from codedojo.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, save_hf_folder
from codedojo.train.cost import run_cost, step_cost
from codedojo.train.curriculum import CurriculumSampler, tier_metrics
from codedojo.train.health import Finding, RunUnhealthy, check_evaluation, check_step
from codedojo.train.health import report as health_report
from codedojo.train.observability import MetricsLog, Trace, load_hook
from codedojo.train.optim import build_optimizer, build_scheduler
from codedojo.train.plan import TrainPlan
from codedojo.train.policy import Policy
from codedojo.train.report import learning_lines
from codedojo.train.rollout_metrics import rollout_metrics
from codedojo.train.samples import TrainSample, build_batch, slime_sample
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
    metrics: MetricsLog
    trace: Trace
    hook: Callable[..., Any] | None
    agent_config: AgentConfig
    rollout: RolloutConfig
    train_rows: list[dict[str, Any]]
    """The train rows of metrics.jsonl so far (those kept from before a resume included)."""
    eval_rows: list[dict[str, Any]]
    """The eval rows likewise."""
    findings: list[Finding]
    """The health checks' findings on the latest step or evaluation (train.health)."""


class LocalTrainer:
    """Runs a TrainConfig on this machine; `await trainer.run()`."""

    def __init__(self, *, model: ModelLike, tasks: list[Task], plan: TrainPlan, run_dir: Path, device: str,
                 eval_sets: list[EvalSet] | None = None, engine_factory: EngineFactory | None = None,
                 console: Console | None = None) -> None:
        self.model_spec = model
        self.tasks = tasks
        self.plan = plan
        self.run_dir = run_dir
        self.device = device
        self.eval_sets = eval_sets or []
        self.engine_factory = engine_factory
        self.console = console or Console(stderr=True)
        self.update_config = plan.update
        self._evals: dict[str, list[tuple[int, EvalReport]]] = {}
        """Every evaluation of the run, by eval set (the first is the before-training one): this process's, and
        those a resumed run kept from before its checkpoint (`_restore_evals`)."""

    async def run(self) -> dict[str, Any]:
        """Train from the latest checkpoint (else from step 0) to num_rollout steps; returns a summary."""
        records = self.plan.records
        run = await self._start()
        try:
            if run.state.step == 0 and self.eval_sets and records.eval_before_training:
                await self._evaluate(run, step=0)
            for step in range(run.state.step, self.plan.step.steps):
                row = await self._train_step(run, step)
                run.state.step = step + 1
                run.train_rows.append(row)
                self._print_step(step, row)
                if records.eval_interval and self.eval_sets and (step + 1) % records.eval_interval == 0:
                    await self._evaluate(run, step=step + 1)
                self._checkpoint(run)
                run.trace.flush()
                if run.findings and records.health.action == "stop":
                    raise RunUnhealthy(health_report(run.findings, step=step + 1, config=records.health))
            save_hf_folder(self.run_dir / "final", policy=run.state.policy, hf_config=run.loaded.hf_config,
                           tokenizer=run.loaded.tokenizer)
            learning = self._learning_summary(run.train_rows, run.eval_rows)
        finally:
            await self._close(run)
        from codedojo.train.report import write_report

        report = write_report(self.run_dir)
        return {"run_dir": str(self.run_dir), "report": str(report), "final_model": str(self.run_dir / "final"),
                "last_metrics": run.train_rows[-1] if run.train_rows else {}, "learning": learning}

    async def _start(self) -> _Run:
        """Load the model and the engine, resume from the latest checkpoint, and bring the run's records back
        to its step."""
        plan = self.plan
        torch.manual_seed(plan.step.seed)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        trace = Trace(self.run_dir / "trace.json" if plan.records.capture_trace else None)
        hook = load_hook(plan.records.rollout_log_function)
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
        metrics = MetricsLog(self.run_dir, start=state.step)
        self._forget_episodes(after=state.step)
        self._restore_evals(upto=state.step)
        return _Run(state=state, engine=engine, loaded=loaded, metrics=metrics, trace=trace, hook=hook,
                    agent_config=plan.agent, rollout=plan.rollout,
                    train_rows=[r for r in metrics.kept if r["kind"] == "train"],
                    eval_rows=[r for r in metrics.kept if r["kind"] == "eval"], findings=[])

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
        run.metrics.close()
        run.trace.flush()
        with contextlib.suppress(Exception):
            await run.engine.close()

    async def _train_step(self, run: _Run, step: int) -> dict[str, Any]:
        """One step: episodes, the batch, the update, the new weights to the engine, and the step's records."""
        started = time.monotonic()
        run.findings = []
        with run.trace.span("rollout", step=step):
            episodes, rollout_seconds = await self._rollout(run, step)
            await _free_memory(run.engine)  # the rollout's KV is stale once the weights change
        for e in episodes:
            self._trace_episode(run.trace, e)
        self._write_episodes(step, episodes)
        records = [slime_sample(e, index=i) for i, e in enumerate(episodes)]
        samples, row = self._batch(episodes, records, rollout_seconds=rollout_seconds)
        state = run.state
        if isinstance(state.sampler, CurriculumSampler):
            row.update(state.sampler.record([(tier_of(e.request.task), e.reward) for e in episodes
                                             if e.reward is not None]))
        with run.trace.span("train", step=step):
            row.update(await to_thread(update, state.policy, state.optimizer, state.scheduler, samples,
                                               self.update_config, rng=state.shuffle_rng))
        return_freed_memory()
        row["perf/rss_gib"], row["perf/peak_rss_gib"] = rss_gib(), peak_rss_gib()
        with run.trace.span("weight_sync", step=step):
            row["perf/weight_sync_seconds"] = await self._sync_weights(run.engine, state.policy)
        row["perf/step_seconds"] = time.monotonic() - started
        row.update(step_cost(row, self.plan.records.prices))
        self._health(run, check_step([*run.train_rows, row], self.plan.records.health), row, step=step + 1)
        # a custom hook that returns True has logged the step itself (slime's contract): no TensorBoard then
        hook_args = self.plan.records.hook_args
        logged = run.hook is not None and run.hook(step, hook_args, records, dict(row), rollout_seconds)
        self._dump(step, records, prefix="rollout")
        run.metrics.write(step, "train", row, to_tensorboard=not logged)
        return row

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

    def _health(self, run: _Run, findings: list[Finding], row: dict[str, Any], *, step: int) -> None:
        """Record a step's or an evaluation's findings in its metrics row and the run, and print them."""
        run.findings += findings
        for finding in findings:
            row[f"health/{finding.check}"] = 1.0
        if findings:
            self.console.print(health_report(findings, step=step, config=self.plan.records.health), style="yellow",
                               markup=False, highlight=False)

    def _checkpoint(self, run: _Run) -> None:
        """Save the state after its step: as `last`, or kept as step_N every save_interval steps and at the end."""
        root = self._checkpoint_root()
        if root is None:
            return
        done, interval = run.state.step, self.plan.records.save_interval
        keep = interval is not None and (done % interval == 0 or done == self.plan.step.steps)
        with run.trace.span("checkpoint", step=done - 1):
            save_checkpoint(root, f"step_{done:06d}" if keep else "last", run.state,
                            hf_config=run.loaded.hf_config, tokenizer=run.loaded.tokenizer, with_hf=keep)

    def _checkpoint_root(self) -> Path | None:
        if not self.plan.records.save:
            return None
        path = Path(self.plan.records.save)
        return path if path.is_absolute() else self.run_dir / path

    async def _rollout(self, run: _Run, step: int) -> tuple[list[Episode], float]:
        plan = self.plan.step
        picked = run.state.sampler.take(plan.tasks_per_step)
        requests = [EpisodeRequest(task=self.tasks[t], group=g, sample=s,
                                   seed=(plan.seed * 1_000_003 + step * 10_007 + g * 101 + s) % 2**31)
                    for g, t in enumerate(picked) for s in range(plan.samples_per_task)]
        started = time.monotonic()
        episodes = await run_episodes_with_progress(requests, label=f"step {step + 1}/{plan.steps} episodes",
                                                    console=self.console, engine=run.engine,
                                                    agent_config=run.agent_config, rollout=run.rollout)
        return episodes, time.monotonic() - started

    async def _evaluate(self, run: _Run, *, step: int) -> None:
        """Every eval set after `step` steps: pass@1 (and pass@n), statuses, the gain since the first."""
        with run.trace.span("eval", step=step):
            results: dict[str, Any] = {}
            for eval_set in self.eval_sets:
                results.update(await self._evaluate_set(run, eval_set, step=step))
            await _free_memory(run.engine)
        self._health(run, check_evaluation(run.train_rows, results, self.plan.records.health), results, step=step)
        run.eval_rows.append({"step": step, **results})
        run.metrics.write(step, "eval", results)

    async def _evaluate_set(self, run: _Run, eval_set: EvalSet, *, step: int) -> dict[str, Any]:
        results: dict[str, Any] = {}
        report = await evaluate(eval_set.tasks, engine=run.engine, n=eval_set.n, agent_config=eval_set.agent,
                                rollout=run.rollout, seed=self.plan.step.seed + step, console=self.console)
        data = report.to_dict()
        prefix = f"eval/{eval_set.name}"
        results.update({f"{prefix}/pass@1": data["pass@1"], f"{prefix}/pass@1_stderr": data["pass@1_stderr"],
                        f"{prefix}/tasks": float(len(eval_set.tasks)), f"{prefix}/wall_sec": data["wall_sec"]})
        if eval_set.n > 1:
            results[f"{prefix}/pass@{eval_set.n}"] = data[f"pass@{eval_set.n}"]
        for status, count in report.statuses.items():
            results[f"{prefix}/status/{status}"] = float(count)
        results[f"{prefix}/flagged"] = float(sum(1 for e in report.episodes if e.flags))  # reward hacking
        self._dump(step, [slime_sample(e, index=i) for i, e in enumerate(report.episodes)], prefix="eval")
        history = self._evals.setdefault(eval_set.name, [])
        history.append((step, report))
        write_text_atomic(self._eval_file(eval_set.name, step), json.dumps(data))  # whole, or not at all
        if len(history) > 1:  # the gain since the first evaluation, paired over tasks
            gain = paired_difference(history[0][1], report)
            results.update({f"{prefix}/gain": gain.mean, f"{prefix}/gain_stderr": gain.stderr})
        p1 = data["pass@1"]
        self.console.print(f"eval {eval_set.name} at step {step}: pass@1 "
                           f"{'-' if p1 is None else f'{p1:.3f}'} over {len(eval_set.tasks)} tasks")
        return results

    def _learning_summary(self, train_rows: list[dict[str, Any]], eval_rows: list[dict[str, Any]]
                          ) -> dict[str, Any]:
        """What the run learned: each eval set's pass@1 at its first and last evaluation with the paired
        standard error of the gain, and the training reward and share of mixed groups per step."""
        out: dict[str, Any] = {"train_reward": [r["rollout/reward_mean"] for r in train_rows],
                               "mixed_group_frac": [r["rollout/mixed_group_frac"] for r in train_rows], "eval": {}}
        if (trend := reward_trend(out["train_reward"])) is not None:
            out["train_reward_trend"] = trend
        out["cost"] = run_cost(train_rows, self.plan.records.prices)
        if self.plan.records.health.action != "off":  # each check that fired, with the steps after which it did
            fired: dict[str, list[int]] = {}
            rows = [(i + 1, row) for i, row in enumerate(train_rows)] + [(int(r["step"]), r) for r in eval_rows]
            for steps_done, row in rows:
                for key in row:
                    if key.startswith("health/"):
                        fired.setdefault(key.removeprefix("health/"), []).append(steps_done)
            out["health"] = {name: sorted(set(steps)) for name, steps in sorted(fired.items())}
        for name, history in self._evals.items():
            (first_step, first), (last_step, last) = history[0], history[-1]
            entry: dict[str, Any] = {
                "before": {"step": first_step, "pass@1": first.pass_at(1), "stderr": first.stderr_pass_at_1()},
                "after": {"step": last_step, "pass@1": last.pass_at(1), "stderr": last.stderr_pass_at_1()}}
            if len(history) > 1:
                entry["gain"] = paired_difference(first, last).to_dict()
            out["eval"][name] = entry
        (self.run_dir / "learning.json").write_text(json.dumps(out, indent=2))
        for line in learning_lines(out):
            self.console.print(line)
        return out

    def _write_episodes(self, step: int, episodes: Sequence[Episode]) -> None:
        """Readable episodes of a step (for `codedojo report`): messages, status, reward."""
        folder = self.run_dir / "episodes"
        folder.mkdir(exist_ok=True)
        with (folder / f"step_{step + 1:06d}.jsonl").open("w", encoding="utf-8") as f:
            for e in episodes:
                t = e.trajectory
                messages = [{"role": m["role"], "content": str(m.get("content", ""))[:4000]}
                            for m in (t.messages if t else [])]
                f.write(json.dumps({"step": step + 1, "task": e.request.task.name, "sample": e.request.sample,
                                    "status": e.status, "reward": e.reward, "turns": len(t.turns) if t else 0,
                                    "error": e.error, "messages": messages}) + "\n")

    def _eval_file(self, name: str, step: int) -> Path:
        """Where the per-task results of an evaluation after `step` steps are kept (for a resumed run's gain)."""
        return self.run_dir / "evals" / name / f"step_{step:06d}.json"

    def _restore_evals(self, *, upto: int) -> None:
        """Take back the evaluations written by `upto` steps, so the gain a resumed run reports is measured from
        the run's first evaluation; remove later ones (a run killed before their checkpoint), and all of them
        when the run starts afresh at step 0."""
        for eval_set in self.eval_sets:
            for path in sorted((self.run_dir / "evals" / eval_set.name).glob("step_*.json")):
                step = int(path.stem.removeprefix("step_"))
                if upto == 0 or step > upto:
                    path.unlink()
                else:
                    report = EvalReport.from_dict(json.loads(path.read_text()))
                    self._evals.setdefault(eval_set.name, []).append((step, report))

    def _forget_episodes(self, *, after: int) -> None:
        """Remove the episode files of steps after `after` (written by a run killed before their checkpoint)."""
        for path in (self.run_dir / "episodes").glob("step_*.jsonl"):
            if int(path.stem.removeprefix("step_")) > after:
                path.unlink()

    def _dump(self, step: int, samples: list[dict[str, Any]], *, prefix: str) -> None:
        template = self.plan.records.dump_template
        if not template:
            return
        rollout_id = step if prefix == "rollout" else f"eval_{step}"
        path = Path(template.format(rollout_id=rollout_id))
        path = path if path.is_absolute() else self.run_dir / path
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"rollout_id": rollout_id, "samples": samples}, path)

    async def _sync_weights(self, engine: Engine, policy: Policy) -> float:
        started = time.monotonic()
        await engine.update_weights(await to_thread(policy.engine_state))  # LoRA merges are matmuls
        return time.monotonic() - started

    @staticmethod
    def _trace_episode(trace: Trace, episode: Episode) -> None:
        if not trace.enabled or episode.trajectory is None:
            return
        lane = f"episode {episode.request.group}.{episode.request.sample}"
        end = time.monotonic()
        total = episode.timings.get("agent_total", 0.0)
        trace.add(f"{episode.request.task.name} ({episode.status})", start=end - total, end=end, lane=lane,
                  reward=episode.reward, turns=len(episode.trajectory.turns))

    def _print_step(self, step: int, m: dict[str, Any]) -> None:
        self.console.print(
            f"step {step + 1}/{self.plan.step.steps}: reward {m['rollout/reward_mean']:.3f} "
            f"solved {m['rollout/solved_frac']:.2f} turns {m['rollout/turns_mean']:.1f} "
            f"loss {m.get('train/loss', 0.0):+.4f} clip {m.get('train/clip_frac', 0.0):.3f} "
            f"mismatch {m.get('train/train_rollout_logprob_abs_diff', 0.0):.2e} "
            f"({m['perf/rollout_seconds']:.0f}s rollout, {m.get('perf/train_seconds', 0.0):.0f}s train)")


def tier_of(task: Task) -> str:
    """A task's tier (`metadata.tier`), "untiered" when it has none."""
    tier = task.config.metadata.get("tier")
    return tier if isinstance(tier, str) and tier else "untiered"


async def _free_memory(engine: Engine) -> None:
    """Between phases: the engine drops its cached KV and malloc hands freed pages back (codedojo.memory),
    so a run's footprint stays that of its largest phase instead of growing step by step."""
    await engine.flush_cache()
    return_freed_memory()
