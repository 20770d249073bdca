"""The network policy every backend applies at start (codedojo.sandbox.base.network_for_task)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codedojo.sandbox.base import NetworkPolicyError, network_for_task
from codedojo.tasks.config import AgentPhaseConfig, EnvironmentConfig, StepConfig, TaskConfig, VerifierConfig
from codedojo.tasks.task import Task


def task(**config: object) -> Task:
    return Task(path=Path("/tasks/t"), config=TaskConfig(**config), instruction="x")  # type: ignore[arg-type]


CLOSED = {"environment": EnvironmentConfig(network_mode="no-network")}


@pytest.mark.parametrize("requested", [None, True, False])
def test_a_closed_task_never_gets_network(requested: bool | None) -> None:
    for backend, follows in (("local", False), ("docker", True)):
        assert network_for_task(task(**CLOSED), requested, backend=backend, follows_task=follows) is False


def test_a_public_task_gets_network_where_the_backend_follows_the_task_and_needs_a_choice_locally() -> None:
    public = task()  # Harbor's default network_mode is "public"
    assert network_for_task(public, None, backend="docker", follows_task=True) is True
    assert network_for_task(public, True, backend="local", follows_task=False) is True
    assert network_for_task(public, False, backend="docker", follows_task=True) is False
    with pytest.raises(NetworkPolicyError, match=r"local backend gives no network unless asked.*`--network`"):
        network_for_task(public, None, backend="local", follows_task=False)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"environment": EnvironmentConfig(network_mode="allowlist", allowed_hosts=("pypi.org",))},
         r'\[environment\].network_mode = "allowlist": the docker backend cannot restrict'),
        ({"agent": AgentPhaseConfig(network_mode="no-network")},
         r'\[agent\].network_mode = "no-network" while another phase allows internet'),
        ({**CLOSED, "verifier": VerifierConfig(network_mode="public")},
         r'\[environment\].network_mode = "no-network" while another phase'),
        ({**CLOSED, "steps": (StepConfig(name="s", agent=AgentPhaseConfig(network_mode="allowlist")),)},
         r"\[\[steps\]\] 's' agent.network_mode = \"allowlist\""),
    ],
)
def test_allowlists_and_disagreeing_phases_are_refused_unless_network_is_off(config: dict[str, object],
                                                                             message: str) -> None:
    for requested in (None, True):
        with pytest.raises(NetworkPolicyError, match=message):
            network_for_task(task(**config), requested, backend="docker", follows_task=True)
    assert network_for_task(task(**config), False, backend="docker", follows_task=True) is False
