"""One episode's lifecycle with Harbor's semantics: start, agent, verify, classify."""

from __future__ import annotations

from codedojo.trial.agents import BUILTIN_AGENTS, Agent, AgentOutcome, NopAgent, OracleAgent
from codedojo.trial.result import PhaseTimings, TrialResult
from codedojo.trial.runner import TrialOptions, run_trial
from codedojo.trial.status import EpisodeStatus

__all__ = [
    "BUILTIN_AGENTS",
    "Agent",
    "AgentOutcome",
    "EpisodeStatus",
    "NopAgent",
    "OracleAgent",
    "PhaseTimings",
    "TrialOptions",
    "TrialResult",
    "run_trial",
]
