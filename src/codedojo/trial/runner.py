"""One episode's lifecycle: start the environment, run the agent, verify, close — Harbor's order.

    preflight          `${VAR}` templates of [environment].env and [verifier].env resolved from the host;
                       a missing variable is a task error before anything starts
    environment_setup  sandbox start, under [environment].build_timeout_sec (the backend settles the
                       task's network policy and users here, refusing what it cannot give); then, with
                       `scrub_history`, the history that could hold the fix is removed from the workdir
                       (trial.contamination: stashes, remotes, refs ahead of HEAD, reflog, unreachable
                       objects, pip caches)
    agent              agent.run as [agent].user, under [agent].timeout_sec (None = no limit); a
                       timed-out or failed agent is still verified, as in Harbor
    verifier           the workdir's changes read first (trial.hacking, `detect_hacking`); tests/ uploaded
                       only now; test.sh as [verifier].user under [verifier].timeout_sec; then the
                       reward-hacking flags from the changes, the commands and the verdict
    teardown           sandbox closed, also on failure and cancellation

A multi-step task repeats agent and verifier per step in the same sandbox (see `_steps`).

Nothing raises out of `run_trial` except cancellation: every failure becomes a status on the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import shlex
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from codedojo.sandbox import SandboxError, SandboxLimits, start_sandbox
from codedojo.sandbox.base import AsUser, Sandbox
from codedojo.tasks.config import StepConfig
from codedojo.tasks.dockerfile import UnsupportedEnvironment
from codedojo.tasks.env import MissingVariable, resolve_env
from codedojo.tasks.task import Task
from codedojo.trial.agents import Agent, AgentOutcome
from codedojo.trial.contamination import scrub
from codedojo.trial.hacking import detect, literals_in_tests, workspace_changes
from codedojo.trial.result import PhaseTimings, TrialResult
from codedojo.trial.status import EpisodeStatus
from codedojo.trial.verifier import VerifierError, verifier_env, verify

# How long past its own budget an agent may take to wind down before it is cancelled.
AGENT_GRACE_SEC = 30.0

SandboxFactory = Callable[[Task], Awaitable[Sandbox]]


@dataclass(frozen=True, kw_only=True)
class TrialOptions:
    """How a trial runs; the timeouts themselves come from task.toml."""

    backend: str = "local"
    """Sandbox backend name (see codedojo.sandbox.BACKENDS)."""
    limits: SandboxLimits | None = None
    """Sandbox limits; None uses the task's [environment] resources."""
    timeout_multiplier: float = 1.0
    """Scales every task timeout (slow machines, debugging)."""
    trials_dir: Path | None = None
    """Where each trial's directory (result.json, agent/, verifier/) is written; None keeps nothing."""
    scrub_history: bool = True
    """Remove what could hold the fix from the workdir before the agent starts (trial.contamination.scrub)."""
    detect_hacking: bool = True
    """Read the workdir's changes after the agent and flag reward hacking (trial.hacking; single-step tasks)."""


def _trial_dir(task: Task, options: TrialOptions) -> Path | None:
    if options.trials_dir is None:
        return None
    path = Path(options.trials_dir) / f"{task.name[:32].replace('/', '_')}__{secrets.token_hex(4)}"
    path.mkdir(parents=True, exist_ok=False)
    return path


async def run_trial(task: Task, agent: Agent, *, options: TrialOptions | None = None,
                    sandbox_factory: SandboxFactory | None = None) -> TrialResult:
    """Run `agent` on `task` once and return what happened."""
    options = options or TrialOptions()
    trial_dir = _trial_dir(task, options)
    timings: dict[str, float] = {}
    sandboxes: list[Sandbox] = []
    # every phase fills in what it learns by `replace`; a path that set no status reads as codedojo's failure
    unfinished = TrialResult(task_name=task.name, task_path=str(task.path), agent=agent.name,
                             status=EpisodeStatus.INTERNAL_ERROR)
    try:
        out = await _phases(task, agent, unfinished, options=options, trial_dir=trial_dir, timings=timings,
                            sandboxes=sandboxes, sandbox_factory=sandbox_factory)
    except Exception:
        out = replace(unfinished, error=traceback.format_exc())
    finally:
        for sandbox in sandboxes:
            t0 = time.monotonic()
            with contextlib.suppress(Exception):
                await asyncio.shield(sandbox.close())
            timings["teardown"] = time.monotonic() - t0
    out = replace(out, timings=PhaseTimings(**timings), trial_dir=str(trial_dir) if trial_dir else None)
    if trial_dir is not None:
        (trial_dir / "result.json").write_text(out.to_json() + "\n")
    return out


async def _phases(task: Task, agent: Agent, unfinished: TrialResult, *, options: TrialOptions,
                  trial_dir: Path | None, timings: dict[str, float], sandboxes: list[Sandbox],
                  sandbox_factory: SandboxFactory | None) -> TrialResult:
    scale = options.timeout_multiplier
    problem = _preflight(task)
    if problem is not None:
        return replace(unfinished, status=EpisodeStatus.TASK_ERROR, error=problem)
    t0 = time.monotonic()
    try:
        starting = sandbox_factory(task) if sandbox_factory is not None else start_sandbox(
            task, backend=options.backend, limits=options.limits)
        sandbox = await asyncio.wait_for(starting, task.config.environment.build_timeout_sec * scale)
    except (SandboxError, UnsupportedEnvironment, OSError, TimeoutError) as e:
        timings["environment_setup"] = time.monotonic() - t0
        why = "timed out" if isinstance(e, TimeoutError) else str(e)
        return replace(unfinished, status=EpisodeStatus.SANDBOX_ERROR, error=f"environment did not start: {why}")
    sandboxes.append(sandbox)
    if options.scrub_history:
        try:
            await scrub(sandbox)
        except SandboxError as e:
            timings["environment_setup"] = time.monotonic() - t0
            return replace(unfinished, status=EpisodeStatus.SANDBOX_ERROR, error=f"scrubbing the workdir failed: {e}")
    timings["environment_setup"] = time.monotonic() - t0
    if not task.steps:
        config = task.config
        out = await _episode(task, agent, sandbox, unfinished, scale=scale, timings=timings,
                             agent_timeout=config.agent.timeout_sec, verifier_timeout=config.verifier.timeout_sec,
                             agent_user=config.agent.user, detect_hacking=options.detect_hacking)
    else:
        out = await _steps(task, agent, sandbox, unfinished, scale=scale, timings=timings)
    await _collect_logs(sandbox, trial_dir)
    return out


def _preflight(task: Task) -> str | None:
    """What keeps the task from running at all, found before any sandbox starts: a `${VAR}` its
    [environment] or [verifier] env needs that the host lacks."""
    views = [task.for_step(step.name) for step in task.steps] or [task]
    try:
        resolve_env(task.config.environment.env, section="[environment].env")
        for view in views:
            verifier_env(view)
    except MissingVariable as e:
        return str(e)
    return None


async def _episode(task: Task, agent: Agent, sandbox: Sandbox, unfinished: TrialResult, *, scale: float,
                   timings: dict[str, float], agent_timeout: float | None, verifier_timeout: float,
                   agent_user: str | int | None, detect_hacking: bool = False) -> TrialResult:
    """One agent phase and one verification (a single-step task, or one step of a multi-step one)."""
    t0 = time.monotonic()
    budget = agent_timeout * scale if agent_timeout is not None else None
    try:
        outcome = await asyncio.wait_for(agent.run(task, AsUser(sandbox, agent_user), timeout_sec=budget),
                                         None if budget is None else budget + AGENT_GRACE_SEC)
    except TimeoutError:
        outcome = AgentOutcome(status=EpisodeStatus.EPISODE_TIMEOUT, detail=f"agent ran past {budget:g}s")
    except SandboxError as e:
        return replace(unfinished, status=EpisodeStatus.SANDBOX_ERROR,
                       error=f"sandbox failed during the agent phase: {e}")
    except MissingVariable as e:
        return replace(unfinished, status=EpisodeStatus.TASK_ERROR, error=str(e))
    finally:
        timings["agent"] = timings.get("agent", 0.0) + time.monotonic() - t0
    acted = replace(unfinished, status=outcome.status, error=outcome.detail, agent_exit_code=outcome.exit_code,
                    details=outcome.details, trajectory=outcome.trajectory)
    if outcome.status.is_infrastructure:
        return acted

    t0 = time.monotonic()
    try:
        changes = await workspace_changes(sandbox) if detect_hacking else None  # before the verifier touches it
        verified = replace(acted, rewards=await verify(task, sandbox, timeout_sec=verifier_timeout * scale))
        if changes is None:
            return verified
        found = await literals_in_tests(sandbox, changes)
        return replace(verified, flags=detect(changes, verified.trajectory, solved=verified.solved,
                                              submitted=verified.status is EpisodeStatus.SUBMITTED,
                                              literals_in_tests=found))
    except VerifierError as e:
        return replace(acted, status=EpisodeStatus.VERIFIER_ERROR, error=str(e))
    except SandboxError as e:
        return replace(acted, status=EpisodeStatus.SANDBOX_ERROR, error=f"sandbox failed during verification: {e}")
    finally:
        timings["verifier"] = timings.get("verifier", 0.0) + time.monotonic() - t0


async def _steps(task: Task, agent: Agent, sandbox: Sandbox, unfinished: TrialResult, *, scale: float,
                 timings: dict[str, float]) -> TrialResult:
    """A multi-step task, as Harbor's MultiStepTrial runs it: the steps in order in one sandbox; before each,
    /tests and /logs/verifier are emptied, steps/<name>/workdir/ is uploaded into the workdir and its
    setup.sh run; then the agent on the step's instruction (as the step's agent user, under its timeout)
    and the step's verifier. A step whose verifier fails, or whose rewards fall below its min_reward,
    ends the run. The trial's rewards are the per-key mean over the steps that were verified (missing
    keys count 0), or the last step's with multi_step_reward_strategy = "final"."""
    step_results: list[dict[str, Any]] = []
    out = replace(unfinished, status=EpisodeStatus.SUBMITTED)
    for step in task.steps:
        view = task.for_step(step.name)
        try:
            setup_error = await _prepare_step(view, sandbox, step, user=_step_agent_user(task, step))
        except SandboxError as e:  # the sandbox failed the host, not the task: infrastructure
            out = replace(unfinished, status=EpisodeStatus.SANDBOX_ERROR,
                          error=f"sandbox failed preparing step {step.name!r}: {e}")
            step_results.append({"step": step.name, "status": str(out.status), "error": out.error})
            break
        if setup_error is not None:
            out = replace(unfinished, status=EpisodeStatus.TASK_ERROR, error=setup_error)
            step_results.append({"step": step.name, "status": str(out.status), "error": setup_error})
            break
        agent_timeout = step.agent.timeout_sec if step.agent and step.agent.timeout_sec is not None \
            else task.config.agent.timeout_sec
        verifier_timeout = step.verifier.timeout_sec if step.verifier else task.config.verifier.timeout_sec
        out = await _episode(view, agent, sandbox, unfinished, scale=scale, timings=timings,
                             agent_timeout=agent_timeout, verifier_timeout=verifier_timeout,
                             agent_user=_step_agent_user(task, step))
        step_results.append({"step": step.name, "status": str(out.status), "rewards": out.rewards,
                             "error": out.error})
        if out.status.is_infrastructure or _below_min_reward(out.rewards, step.min_reward):
            break
    verified = [r["rewards"] for r in step_results if r.get("rewards") is not None]
    details = {**out.details, "steps": step_results}
    if out.status.is_infrastructure:
        return replace(out, details=details, rewards=None)
    if task.config.multi_step_reward_strategy == "final":
        rewards = step_results[-1].get("rewards")
    else:
        keys = sorted({k for rewards in verified for k in rewards})
        rewards = {k: sum(r.get(k, 0.0) for r in verified) / len(verified) for k in keys}
    return replace(out, details=details, rewards=rewards)


def _step_agent_user(task: Task, step: StepConfig) -> str | int | None:
    if step.agent is not None and step.agent.user is not None:
        return step.agent.user
    return task.config.agent.user


def _below_min_reward(rewards: dict[str, float] | None, min_reward: float | dict[str, float] | None) -> bool:
    """Harbor's gate: a float gates the `reward` key, a table each key it names; a missing key is -inf."""
    if min_reward is None:
        return False
    thresholds = {"reward": min_reward} if isinstance(min_reward, int | float) else min_reward
    return any((rewards or {}).get(key, -math.inf) < value for key, value in thresholds.items())


_STEP_RESET = "rm -rf /tests; mkdir -p /tests /logs/verifier; find /logs/verifier -mindepth 1 -delete"


async def _prepare_step(view: Task, sandbox: Sandbox, step: StepConfig, *, user: str | int | None) -> str | None:
    """Empty the previous step's grading files, upload the step's workdir/, run its setup.sh; the error or None."""
    reset = await sandbox.exec(_STEP_RESET, timeout_sec=60, user="root")
    if reset.return_code != 0:
        return f"step {step.name!r}: could not clear /tests and /logs/verifier: {reset.stderr.strip()[:300]}"
    workdir_files = view.path / "steps" / step.name / "workdir"
    if not workdir_files.is_dir():
        return None
    await sandbox.upload_dir(workdir_files, sandbox.workdir)
    if not (workdir_files / "setup.sh").is_file():
        return None
    setup = f"bash {shlex.quote(sandbox.workdir.rstrip('/') + '/setup.sh')}"
    result = await sandbox.exec(setup, timeout_sec=view.config.environment.build_timeout_sec, user=user)
    if result.return_code != 0:
        return f"step {step.name!r}: workdir/setup.sh exited {result.return_code}: {result.stderr.strip()[-300:]}"
    return None


async def _collect_logs(sandbox: Sandbox, trial_dir: Path | None) -> None:
    if trial_dir is None:
        return
    for name in ("agent", "verifier"):
        with contextlib.suppress(Exception):
            await sandbox.download_dir(f"/logs/{name}", trial_dir / name)
