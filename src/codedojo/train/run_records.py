"""What a local run writes and prints besides its checkpoints, owned by one object the trainer calls once per
event: `RunRecords`.

The events: a step's episodes (`episodes`: the readable episode file and the trace's lanes, returning the
slime-shaped records the metrics and hooks read), a finished step (`step`: its health checks, the rollout-log
hook, the rollout dump, metrics.jsonl and TensorBoard, the printed line), an evaluation (`evaluation`: each eval
set's metrics, dump and per-task file for a resumed run's gain, the gain since the first evaluation, the health
checks, the eval row) and the end of the run (`finish`: learning.json, the printed summary and the report page).
The health checks' findings of the latest step and evaluation are `findings`: the trainer decides what to do
with them. A relaunched run's records are brought back to its checkpoint's step when they are opened: metrics
rows, episode files and evaluations written after it are dropped, earlier evaluations read back.

Files in the run directory: metrics.jsonl, tensorboard/, episodes/step_N.jsonl, evals/<set>/step_N.json,
learning.json, report.html, and trace.json and rollout dumps when the plan asks for them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from codedojo.data.provenance import write_text_atomic
from codedojo.rollout.episodes import Episode
from codedojo.rollout.evaluation import EvalReport, paired_difference, reward_trend
from codedojo.train.cost import run_cost
from codedojo.train.health import Finding, check_evaluation, check_step
from codedojo.train.health import report as health_report
from codedojo.train.observability import MetricsLog, Trace
from codedojo.train.plan import RecordsPlan
from codedojo.train.report import STAGE_NAMES, learning_lines
from codedojo.train.samples import slime_sample


class RunRecords:
    """The records of one run in `run_dir`, opened at step `start` (0, or the step a resumed run restarts at)."""

    def __init__(self, run_dir: Path, plan: RecordsPlan, *, steps: int, eval_sets: Sequence[str], start: int,
                 console: Console, hook: Callable[..., Any] | None,
                 stage_names: tuple[str, str, str] = STAGE_NAMES) -> None:
        """`hook`: the rollout-log hook, `load_hook(plan.rollout_log_function)` (the caller loads it before anything
        slow, so a bad path fails at once)."""
        self.run_dir, self.plan, self.steps, self.console = run_dir, plan, steps, console
        run_dir.mkdir(parents=True, exist_ok=True)
        self.trace = Trace(run_dir / "trace.json" if plan.capture_trace else None)
        self._hook = hook
        self._metrics = MetricsLog(run_dir, start=start)
        self.train_rows: list[dict[str, Any]] = [r for r in self._metrics.kept if r["kind"] == "train"]
        """The train rows of metrics.jsonl so far (those kept from before a resume included)."""
        self.eval_rows: list[dict[str, Any]] = [r for r in self._metrics.kept if r["kind"] == "eval"]
        """The eval rows likewise."""
        self.findings: list[Finding] = []
        """The health checks' findings on the latest step or evaluation (train.health)."""
        self._evals: dict[str, list[tuple[int, EvalReport]]] = {}
        """Every evaluation of the run, by eval set (the first is the before-training one): this process's, and
        those kept from before a resume."""
        self.stage_names = stage_names
        """What the summary calls the baseline, the start model and the trained model."""
        self._baselines: dict[str, tuple[str, EvalReport]] = {}
        """The baseline model's evaluation of each eval set (model name, report), when the run has a baseline."""
        self._forget_episodes(after=start)
        self._restore_evals(eval_sets, upto=start)

    # ----- a training step --------------------------------------------------------------------------------------

    def episodes(self, step: int, episodes: Sequence[Episode]) -> list[dict[str, Any]]:
        """A new step's episodes (its findings start empty): their trace lanes and readable file; returns their
        slime-shaped records."""
        self.findings = []
        for episode in episodes:
            self._trace_episode(episode)
        self._write_episodes(step, episodes)
        return [slime_sample(e, index=i) for i, e in enumerate(episodes)]

    def step(self, step: int, row: dict[str, Any], records: list[dict[str, Any]], *, rollout_seconds: float) -> None:
        """A finished step: its health checks (their findings into the row and printed), the rollout-log hook, the
        dump, its metrics row and its printed line."""
        self._health(check_step([*self.train_rows, row], self.plan.health), row, step=step + 1)
        # a custom hook that returns True has logged the step itself (slime's contract): no TensorBoard then
        logged = self._hook is not None and self._hook(step, self.plan.hook_args, records, dict(row), rollout_seconds)
        self._dump(step, records, prefix="rollout")
        self._metrics.write(step, "train", row, to_tensorboard=not logged)
        self.train_rows.append(row)
        self._print_step(step, row)

    # ----- evaluations ------------------------------------------------------------------------------------------

    def evaluation(self, step: int, reports: Sequence[tuple[str, EvalReport, int, int]]) -> dict[str, Any]:
        """Every eval set's report after `step` steps, as (name, report, n, task count): each set's metrics
        (pass@1, pass@n, statuses, flagged episodes, the gain since the first evaluation), dump and per-task
        file, then the health checks on them and the eval row. Returns the row."""
        results: dict[str, Any] = {}
        for name, report, n, tasks in reports:
            results.update(self._eval_set(name, report, step=step, n=n, tasks=tasks))
        self._health(check_evaluation(self.train_rows, results, self.plan.health), results, step=step)
        self.eval_rows.append({"step": step, **results})
        self._metrics.write(step, "eval", results)
        return results

    def baseline(self, reports: Sequence[tuple[str, EvalReport, int, int]], *, model: str) -> None:
        """The baseline model's report on every eval set, as (name, report, n, task count), before training: kept
        in evals/<set>/baseline.json (read back by a resumed run) and a metrics row of kind "baseline"."""
        results: dict[str, Any] = {}
        for name, report, _n, tasks in reports:
            data = report.to_dict()
            self._baselines[name] = (model, report)
            write_text_atomic(self._baseline_file(name), json.dumps({"model": model, **data}))
            results.update(_headline(f"baseline/{name}", data, tasks=tasks))
            p1 = data["pass@1"]
            self.console.print(f"eval {name}, the {self.stage_names[0]} {model}: pass@1 "
                               f"{'-' if p1 is None else f'{p1:.3f}'} over {tasks} tasks")
        self._metrics.write(0, "baseline", {"model": model, **results})

    def _eval_set(self, name: str, report: EvalReport, *, step: int, n: int, tasks: int) -> dict[str, Any]:
        data = report.to_dict()
        prefix = f"eval/{name}"
        results = _headline(prefix, data, tasks=tasks)
        if n > 1:
            results[f"{prefix}/pass@{n}"] = data[f"pass@{n}"]
        for status, count in report.statuses.items():
            results[f"{prefix}/status/{status}"] = float(count)
        results[f"{prefix}/flagged"] = float(sum(1 for e in report.episodes if e.flags))  # reward hacking
        self._dump(step, [slime_sample(e, index=i) for i, e in enumerate(report.episodes)], prefix="eval")
        history = self._evals.setdefault(name, [])
        history.append((step, report))
        write_text_atomic(self._eval_file(name, step), json.dumps(data))  # whole, or not at all
        if len(history) > 1:  # the gain since the first evaluation, paired over tasks
            gain = paired_difference(history[0][1], report)
            results.update({f"{prefix}/gain": gain.mean, f"{prefix}/gain_stderr": gain.stderr})
        p1 = data["pass@1"]
        self.console.print(f"eval {name} at step {step}: pass@1 {'-' if p1 is None else f'{p1:.3f}'} over "
                           f"{tasks} tasks")
        return results

    # ----- the end ----------------------------------------------------------------------------------------------

    def finish(self) -> tuple[dict[str, Any], Path]:
        """What the run learned (learning.json, printed) and the report page's path."""
        from codedojo.train.report import write_report

        learning = self._learning_summary()
        return learning, write_report(self.run_dir)

    def close(self) -> None:
        self._metrics.close()
        self.trace.flush()

    # ----- the files --------------------------------------------------------------------------------------------

    def _health(self, findings: list[Finding], row: dict[str, Any], *, step: int) -> None:
        """A step's or an evaluation's findings: into its metrics row and the run's findings, and printed."""
        self.findings += findings
        for finding in findings:
            row[f"health/{finding.check}"] = 1.0
        if findings:
            self.console.print(health_report(findings, step=step, config=self.plan.health), style="yellow",
                               markup=False, highlight=False)

    def _learning_summary(self) -> dict[str, Any]:
        """Each eval set's pass@1 at its first and last evaluation with the paired standard error of the gain,
        the training reward and share of mixed groups per step, the cost and the health checks that fired."""
        train_rows = self.train_rows
        out: dict[str, Any] = {"train_reward": [r["rollout/reward_mean"] for r in train_rows],
                               "mixed_group_frac": [r["rollout/mixed_group_frac"] for r in train_rows], "eval": {}}
        if (trend := reward_trend(out["train_reward"])) is not None:
            out["train_reward_trend"] = trend
        out["cost"] = run_cost(train_rows, self.plan.prices)
        if self.plan.health.action != "off":  # each check that fired, with the steps after which it did
            fired: dict[str, list[int]] = {}
            rows = [(i + 1, row) for i, row in enumerate(train_rows)] + [(int(r["step"]), r) for r in self.eval_rows]
            for steps_done, row in rows:
                for key in row:
                    if key.startswith("health/"):
                        fired.setdefault(key.removeprefix("health/"), []).append(steps_done)
            out["health"] = {name: sorted(set(steps)) for name, steps in sorted(fired.items())}
        out["stage_names"] = list(self.stage_names)
        for name in [*self._evals, *(n for n in self._baselines if n not in self._evals)]:
            entry: dict[str, Any] = {}
            base = self._baselines.get(name)
            if base is not None:
                entry["baseline"] = {"model": base[0], "pass@1": base[1].pass_at(1),
                                     "stderr": base[1].stderr_pass_at_1()}
            if history := self._evals.get(name):
                (first_step, first), (last_step, last) = history[0], history[-1]
                entry["before"] = {"step": first_step, "pass@1": first.pass_at(1), "stderr": first.stderr_pass_at_1()}
                entry["after"] = {"step": last_step, "pass@1": last.pass_at(1), "stderr": last.stderr_pass_at_1()}
                if len(history) > 1:
                    entry["gain"] = paired_difference(first, last).to_dict()
                if base is not None:  # each evaluation against the baseline, paired over the same tasks
                    entry["before_vs_baseline"] = paired_difference(base[1], first).to_dict()
                    if len(history) > 1:
                        entry["after_vs_baseline"] = paired_difference(base[1], last).to_dict()
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

    def _baseline_file(self, name: str) -> Path:
        return self.run_dir / "evals" / name / "baseline.json"

    def _restore_evals(self, names: Sequence[str], *, upto: int) -> None:
        """Take back the evaluations written by `upto` steps, so the gain a resumed run reports is measured from
        the run's first evaluation; remove later ones (a run killed before their checkpoint), and all of them
        (the baseline's too) when the run starts afresh at step 0."""
        for name in names:
            if (path := self._baseline_file(name)).is_file():
                if upto == 0:
                    path.unlink()
                else:
                    data = json.loads(path.read_text())
                    self._baselines[name] = (data.get("model", "?"), EvalReport.from_dict(data))
            for path in sorted((self.run_dir / "evals" / name).glob("step_*.json")):
                step = int(path.stem.removeprefix("step_"))
                if upto == 0 or step > upto:
                    path.unlink()
                else:
                    self._evals.setdefault(name, []).append((step, EvalReport.from_dict(json.loads(path.read_text()))))

    def _forget_episodes(self, *, after: int) -> None:
        """Remove the episode files of steps after `after` (written by a run killed before their checkpoint)."""
        for path in (self.run_dir / "episodes").glob("step_*.jsonl"):
            if int(path.stem.removeprefix("step_")) > after:
                path.unlink()

    def _dump(self, step: int, samples: list[dict[str, Any]], *, prefix: str) -> None:
        template = self.plan.dump_template
        if not template:
            return
        rollout_id = step if prefix == "rollout" else f"eval_{step}"
        path = Path(template.format(rollout_id=rollout_id))
        path = path if path.is_absolute() else self.run_dir / path
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"rollout_id": rollout_id, "samples": samples}, path)

    def _trace_episode(self, episode: Episode) -> None:
        if not self.trace.enabled or episode.trajectory is None:
            return
        lane = f"episode {episode.request.group}.{episode.request.sample}"
        end = time.monotonic()
        total = episode.timings.get("agent_total", 0.0)
        self.trace.add(f"{episode.request.task.name} ({episode.status})", start=end - total, end=end, lane=lane,
                       reward=episode.reward, turns=len(episode.trajectory.turns))

    def _print_step(self, step: int, m: dict[str, Any]) -> None:
        self.console.print(
            f"step {step + 1}/{self.steps}: reward {m['rollout/reward_mean']:.3f} "
            f"solved {m['rollout/solved_frac']:.2f} turns {m['rollout/turns_mean']:.1f} "
            f"loss {m.get('train/loss', 0.0):+.4f} clip {m.get('train/clip_frac', 0.0):.3f} "
            f"mismatch {m.get('train/train_rollout_logprob_abs_diff', 0.0):.2e} "
            f"({m['perf/rollout_seconds']:.0f}s rollout, {m.get('perf/train_seconds', 0.0):.0f}s train)")


def _headline(prefix: str, data: dict[str, Any], *, tasks: int) -> dict[str, Any]:
    """An evaluation's pass@1, its standard error, task count and wall time as metrics under `prefix`."""
    return {f"{prefix}/pass@1": data["pass@1"], f"{prefix}/pass@1_stderr": data["pass@1_stderr"],
            f"{prefix}/tasks": float(tasks), f"{prefix}/wall_sec": data["wall_sec"]}
