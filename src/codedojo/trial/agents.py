"""The agent protocol, and the two agents that need no model: oracle and nop.

An agent acts in a started sandbox and says how it ended. It never verifies and never reads tests/:
the trial runner uploads tests only after the agent has returned. Its commands run as the task's
`[agent].user` (the runner hands it a sandbox whose default user is that one). For a step of a
multi-step task it gets the step's view of the task (`task.step`, the step's instruction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from codedojo.sandbox.base import Sandbox
from codedojo.tasks.env import resolve_env
from codedojo.tasks.task import Task
from codedojo.trial.staging import staged
from codedojo.trial.status import EpisodeStatus
from codedojo.trial.trajectory import Trajectory


@dataclass(frozen=True, kw_only=True)
class AgentOutcome:
    status: EpisodeStatus
    exit_code: int | None = None
    detail: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    """Facts the trial result should carry (turns, tokens, ...)."""
    trajectory: Trajectory | None = None
    """The episode's trajectory, when the agent keeps one (the agent loop does; oracle and nop do not)."""


class Agent(Protocol):
    name: str

    async def run(self, task: Task, sandbox: Sandbox, *, timeout_sec: float | None) -> AgentOutcome:
        """Act on `task` in `sandbox`, stopping by itself within `timeout_sec` (None: no limit)."""
        ...


class OracleAgent:
    """Runs the task's reference solution (Harbor's oracle): solution/ (a step's own solution/ when it has
    one) is uploaded to /solution with solve.sh made executable on the host, and solve.sh runs in the
    workdir as the agent's user with `DEBIAN_FRONTEND=noninteractive` and `[solution].env` (templates
    resolved from the host), its output in /logs/agent/oracle.txt. A task without solve.sh cannot be run by
    the oracle: that is a task error, not a score."""

    name = "oracle"

    async def run(self, task: Task, sandbox: Sandbox, *, timeout_sec: float | None) -> AgentOutcome:
        solve = task.solution_dir / "solve.sh"
        if not solve.is_file():
            return AgentOutcome(status=EpisodeStatus.TASK_ERROR,
                                detail=f"{solve} is missing: the oracle agent needs the task's reference solution")
        env = {"DEBIAN_FRONTEND": "noninteractive",
               **resolve_env(task.config.solution.env, section="[solution].env")}
        with staged([task.solution_dir], executable="solve.sh") as solution:
            await sandbox.upload_dir(solution, "/solution")
        result = await sandbox.exec("/solution/solve.sh > /logs/agent/oracle.txt 2>&1", env=env,
                                    timeout_sec=timeout_sec)
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
