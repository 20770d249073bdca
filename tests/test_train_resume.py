"""A CLI training run killed with SIGKILL between a step's metrics and its checkpoint, then relaunched,
records every step exactly once (metrics.jsonl and TensorBoard), with the numbers of an uninterrupted run.

The kill is deterministic: the run's rollout-log hook (`kill_before_checkpoint`, called with each step's
metrics just before they are written) arms, at the step named by $KILL_AT_STEP, a SIGKILL in place of the
checkpoint that follows the metrics.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import codedojo
from codedojo.config import task_row
from codedojo.tasks.task import Task, examples_dir

STEPS = 3
KILLED_AT = 1
VOLATILE = ("time", "perf/", "rollout/phase/")
"""Keys that measure wall time, which no two runs share, with every `*_seconds` key (sandbox-seconds, the cost
metrics' machine- and sandbox-seconds)."""


def _volatile(key: str) -> bool:
    return key.startswith(VOLATILE) or key.endswith("_seconds")
CLOSE = {"rel": 1e-6, "abs": 1e-6}
"""The sampler's logprobs vary by ~1e-8 between runs (the engine's batches depend on timing), and so does
the train/sampler mismatch measured from them; everything else is equal exactly."""


def kill_before_checkpoint(rollout_id: int, args: Any, samples: list[dict[str, Any]], extra: dict[str, float],
                           rollout_time: float) -> bool:
    if os.environ.get("KILL_AT_STEP") == str(rollout_id):
        import codedojo.train.trainer as trainer

        def die(*_: Any, **__: Any) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        trainer.save_checkpoint = die  # type: ignore[assignment]
    return False  # the metrics go to TensorBoard too


def _train(tmp: Path, run_dir: Path, *, kill_at: int | None = None) -> subprocess.CompletedProcess[str]:
    dataset = tmp / "train.jsonl"
    if not dataset.exists():
        rows = [task_row(examples_dir() / n, instruction=Task.load(examples_dir() / n).instruction)
                for n in ("hello-file", "fix-add")]
        dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = [f"num_rollout={STEPS}", "rollout_batch_size=2", "n_samples_per_prompt=2", "global_batch_size=2",
                "rollout_max_response_len=16", "lr=1e-3", "entropy_coef=0.01", "bf16=false", "seed=5",
                "dynamic_sampling=false",  # every step trains (SmolLM2_Recipe drops uniform groups by default)
                "save=\"checkpoints\"", "extra_config={agentic_max_steps=2, skip_eval_before_train=true}",
                "custom_rollout_log_function=\"test_train_resume:kill_before_checkpoint\""]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                                        str(Path(codedojo.__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    env.pop("KILL_AT_STEP", None)
    if kill_at is not None:
        env["KILL_AT_STEP"] = str(kill_at)
    command = [sys.executable, "-m", "codedojo.cli", "train", "--dataset", str(dataset), "--model", "tiny-llama",
               "--device", "cpu", "--run-dir", str(run_dir)]
    for item in settings:
        command += ["--set", item]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    """The train rows of metrics.jsonl (the run has no evaluation), without the wall-time keys."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r.pop("kind") for r in rows} <= {"train"}
    return [{k: v for k, v in r.items() if not _volatile(k)} for r in rows]


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
            if not _volatile(tag)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("resume")
    straight = _train(tmp, tmp / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    killed = _train(tmp, tmp / "killed", kill_at=KILLED_AT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    return tmp, tmp / "straight", tmp / "killed"


def test_the_kill_lands_between_the_metrics_and_the_checkpoint(runs: tuple[Path, Path, Path]) -> None:
    _, _, killed = runs
    assert [r["step"] for r in _rows(killed)] == [0, 1]
    assert [s for s, _ in _scalars(killed)["train/loss"]] == [0, 1]
    state = (killed / "checkpoints" / "latest").read_text().strip()
    import torch

    assert torch.load(killed / "checkpoints" / state / "state.pt", weights_only=False)["step"] == KILLED_AT


def test_the_relaunch_records_every_step_once_as_an_uninterrupted_run(runs: tuple[Path, Path, Path]) -> None:
    tmp, straight, killed = runs
    relaunched = _train(tmp, killed)
    assert relaunched.returncode == 0, relaunched.stderr[-3000:]
    assert f"at step {KILLED_AT}" in " ".join(relaunched.stderr.split())  # rich wraps the line
    expected, got = _rows(straight), _rows(killed)
    assert [r["step"] for r in got] == list(range(STEPS))
    for g, e in zip(got, expected, strict=True):
        assert g.keys() == e.keys() and g == pytest.approx(e, **CLOSE), g["step"]
    assert expected[-1]["train/entropy"] != expected[0]["train/entropy"]  # the weights did move
    tb_expected, tb_got = _scalars(straight), _scalars(killed)
    assert [s for s, _ in tb_got["train/loss"]] == list(range(STEPS))
    assert tb_got.keys() == tb_expected.keys()
    for tag, points in tb_expected.items():
        assert [s for s, _ in tb_got[tag]] == [s for s, _ in points], tag
        assert [v for _, v in tb_got[tag]] == pytest.approx([v for _, v in points], **CLOSE), tag
    learning = json.loads((killed / "learning.json").read_text())
    assert len(learning["train_reward"]) == STEPS
    assert sorted(p.name for p in (killed / "episodes").iterdir()) == [f"step_{s:06d}.jsonl" for s in (1, 2, 3)]


def test_a_restart_keeps_the_rows_written_before_its_checkpoint(tmp_path: Path) -> None:
    from codedojo.train.observability import MetricsLog, read_metrics

    log = MetricsLog(tmp_path)
    # the order of a run with eval_interval=1: eval after 0 steps, then per step its row and the eval after it
    log.write(0, "eval", {"eval/p": 0.0})
    for step in range(3):
        log.write(step, "train", {"train/loss": float(step)})
        log.write(step + 1, "eval", {"eval/p": 10.0 + step})
    log.close()
    # killed after step 2's metrics and its eval, before checkpoint 3: the relaunch starts at 2
    log = MetricsLog(tmp_path, start=2)
    assert [(r["kind"], r["step"]) for r in log.kept] == [("eval", 0), ("train", 0), ("eval", 1), ("train", 1),
                                                          ("eval", 2)]
    log.write(2, "train", {"train/loss": 2.5})
    log.close()
    assert [(r["kind"], r["step"]) for r in read_metrics(tmp_path)] == [*[(r["kind"], r["step"]) for r in log.kept],
                                                                        ("train", 2)]
    scalars = _scalars(tmp_path)
    assert scalars["train/loss"] == [(0, 0.0), (1, 1.0), (2, 2.5)]
    assert scalars["eval/p"] == [(0, 0.0), (1, 10.0), (2, 11.0)]
    assert MetricsLog(tmp_path, tensorboard=False).kept == [] and read_metrics(tmp_path) == []  # a fresh start
