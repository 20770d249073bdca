"""The agent protocol, and the two agents that need no model: oracle and nop.

An agent acts in a started sandbox and says how it ended. It never verifies and never reads tests/:
the trial runner uploads tests only after the agent has returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from codedojo.sandbox.base import Sandbox
from codedojo.tasks.task import Task
from codedojo.trial.result import EpisodeStatus


@dataclass(frozen=True, kw_only=True)
class AgentOutcome:
    status: EpisodeStatus
    exit_code: int | None = None
    detail: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    """Facts the trial result should carry (turns, tokens, ...)."""
    trajectory: Any = None
    """The episode's trajectory when the agent keeps one (codedojo.agent.trajectory.Trajectory)."""


class Agent(Protocol):
    name: str

    async def run(self, task: Task, sandbox: Sandbox, *, timeout_sec: float | None) -> AgentOutcome:
        """Act on `task` in `sandbox`, stopping by itself within `timeout_sec` (None: no limit)."""
        ...


class OracleAgent:
    """Runs the task's reference solution: solution/ is uploaded to /solution and solve.sh runs in the
    workdir with its output in /logs/agent/oracle.txt (Harbor's oracle semantics)."""

    name = "oracle"

    async def run(self, task: Task, sandbox: Sandbox, *, timeout_sec: float | None) -> AgentOutcome:
        await sandbox.upload_dir(task.solution_dir, "/solution")
        env = {"DEBIAN_FRONTEND": "noninteractive", **task.config.solution.env}
        result = await sandbox.exec(
            "chmod +x /solution/solve.sh 2>/dev/null; /solution/solve.sh > /logs/agent/oracle.txt 2>&1",
            env=env, timeout_sec=timeout_sec,
        )
        if result.timed_out:
            return AgentOutcome(status=EpisodeStatus.EPISODE_TIMEOUT, detail=f"solve.sh ran past {timeout_sec}s")
        if result.return_code != 0:
            return AgentOutcome(status=EpisodeStatus.AGENT_FAILED, exit_code=result.return_code,
                                detail=f"solve.sh exited {result.return_code}; see agent/oracle.txt")
        return AgentOutcome(status=EpisodeStatus.SUBMITTED, exit_code=0)


class NopAgent:
    """Does nothing: the baseline every task must score 0 on."""

    name = "nop"

    async def run(self, task: Task, sandbox: Sandbox, *, timeout_sec: float | None) -> AgentOutcome:
        return AgentOutcome(status=EpisodeStatus.SUBMITTED, exit_code=0)


BUILTIN_AGENTS: dict[str, type[OracleAgent] | type[NopAgent]] = {"oracle": OracleAgent, "nop": NopAgent}
