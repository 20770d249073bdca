"""One episode's lifecycle: start the environment, run the agent, verify, close — Harbor's order.

    environment_setup  sandbox start, under [environment].build_timeout_sec
    agent              agent.run, under [agent].timeout_sec (None = no limit); a timed-out or failed
                       agent is still verified, as in Harbor
    verifier           tests/ uploaded only now; test.sh under [verifier].timeout_sec
    teardown           sandbox closed, also on failure and cancellation

Nothing raises out of `run_trial` except cancellation: every failure becomes a status on the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codedojo.sandbox import SandboxError, SandboxLimits, start_sandbox
from codedojo.sandbox.base import Sandbox
from codedojo.tasks.dockerfile import UnsupportedEnvironment
from codedojo.tasks.task import Task
from codedojo.trial.agents import Agent, AgentOutcome
from codedojo.trial.result import EpisodeStatus, PhaseTimings, TrialResult
from codedojo.trial.verifier import VerifierError, verify

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
    try:
        status, fields = await _phases(task, agent, options=options, trial_dir=trial_dir, timings=timings,
                                       sandboxes=sandboxes, sandbox_factory=sandbox_factory)
    except Exception:
        status, fields = EpisodeStatus.INTERNAL_ERROR, {"error": traceback.format_exc()}
    finally:
        for sandbox in sandboxes:
            t0 = time.monotonic()
            with contextlib.suppress(Exception):
                await asyncio.shield(sandbox.close())
            timings["teardown"] = time.monotonic() - t0
    out = TrialResult(task_name=task.name, task_path=str(task.path), agent=agent.name, status=status,
                      timings=PhaseTimings(**timings), trial_dir=str(trial_dir) if trial_dir else None, **fields)
    if trial_dir is not None:
        (trial_dir / "result.json").write_text(out.to_json() + "\n")
    return out


async def _phases(task: Task, agent: Agent, *, options: TrialOptions, trial_dir: Path | None,
                  timings: dict[str, float], sandboxes: list[Sandbox],
                  sandbox_factory: SandboxFactory | None) -> tuple[EpisodeStatus, dict[str, Any]]:
    scale = options.timeout_multiplier
    t0 = time.monotonic()
    try:
        starting = sandbox_factory(task) if sandbox_factory is not None else start_sandbox(
            task, backend=options.backend, limits=options.limits)
        sandbox = await asyncio.wait_for(starting, task.config.environment.build_timeout_sec * scale)
    except (SandboxError, UnsupportedEnvironment, OSError, TimeoutError) as e:
        timings["environment_setup"] = time.monotonic() - t0
        why = "timed out" if isinstance(e, TimeoutError) else str(e)
        return EpisodeStatus.SANDBOX_ERROR, {"error": f"environment did not start: {why}"}
    sandboxes.append(sandbox)
    timings["environment_setup"] = time.monotonic() - t0

    t0 = time.monotonic()
    agent_timeout = task.config.agent.timeout_sec
    budget = agent_timeout * scale if agent_timeout is not None else None
    try:
        outcome = await asyncio.wait_for(agent.run(task, sandbox, timeout_sec=budget),
                                         None if budget is None else budget + AGENT_GRACE_SEC)
    except TimeoutError:
        outcome = AgentOutcome(status=EpisodeStatus.EPISODE_TIMEOUT, detail=f"agent ran past {budget:g}s")
    except SandboxError as e:
        return EpisodeStatus.SANDBOX_ERROR, {"error": f"sandbox failed during the agent phase: {e}"}
    finally:
        timings["agent"] = time.monotonic() - t0
    fields: dict[str, Any] = {"error": outcome.detail, "agent_exit_code": outcome.exit_code,
                              "details": outcome.details, "trajectory": outcome.trajectory}
    if outcome.status.is_infrastructure:
        return outcome.status, fields

    t0 = time.monotonic()
    try:
        fields["rewards"] = await verify(task, sandbox, timeout_sec=task.config.verifier.timeout_sec * scale)
        status = outcome.status
    except VerifierError as e:
        status, fields["error"] = EpisodeStatus.VERIFIER_ERROR, str(e)
    except SandboxError as e:
        return EpisodeStatus.SANDBOX_ERROR, {**fields, "error": f"sandbox failed during verification: {e}"}
    finally:
        timings["verifier"] = time.monotonic() - t0
    await _collect_logs(sandbox, trial_dir)
    return status, fields


async def _collect_logs(sandbox: Sandbox, trial_dir: Path | None) -> None:
    if trial_dir is None:
        return
    for name in ("agent", "verifier"):
        with contextlib.suppress(Exception):
            await sandbox.download_dir(f"/logs/{name}", trial_dir / name)
