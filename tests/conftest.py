"""Shared fixtures: tasks written into temporary directories through the public writer, and a Docker API."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from codedojo.tasks.config import AgentPhaseConfig, EnvironmentConfig, TaskConfig, VerifierConfig
from codedojo.tasks.task import Task, write_task

DEBIAN = "FROM debian:bookworm-slim\nWORKDIR /app\n"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Everything tests cache (prepared workspaces, the factory's candidates, warm starts) goes to a per-session
    # cache, never the user's; session-wide, so module-scoped fixtures are covered too.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CODEDOJO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        yield


MakeTask = Callable[..., Task]


@pytest.fixture
def make_task(tmp_path: Path) -> MakeTask:
    """Write a task: `make_task(test_sh=..., solve_sh=..., dockerfile=..., files={...}, **config)`."""
    counter = iter(range(1000))

    def make(
        *,
        test_sh: str = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
        solve_sh: str = "#!/bin/bash\ntrue\n",
        dockerfile: str = DEBIAN,
        files: dict[str, str] | None = None,
        instruction: str = "Do the thing.",
        agent_timeout: float | None = 60.0,
        verifier_timeout: float = 60.0,
        environment: EnvironmentConfig | None = None,
        name: str | None = None,
    ) -> Task:
        config = TaskConfig(
            agent=AgentPhaseConfig(timeout_sec=agent_timeout),
            verifier=VerifierConfig(timeout_sec=verifier_timeout),
            environment=environment or EnvironmentConfig(memory_mb=512, storage_mb=256, network_mode="no-network"),
        )
        all_files = {"environment/Dockerfile": dockerfile, "tests/test.sh": test_sh, "solution/solve.sh": solve_sh,
                     **(files or {})}
        return write_task(tmp_path / (name or f"task{next(counter)}"), instruction=instruction, config=config,
                          files=all_files)

    return make


@dataclass(frozen=True)
class DockerEngine:
    host: str
    """The DOCKER_HOST url every test of the session talks to."""
    base_image: str
    """A small Debian image (python3, git, bash, coreutils, patch) that test images build FROM."""


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEngine]:
    """A Docker API for the docker backend's tests: $DOCKER_HOST when set, else a podman service this session
    starts and stops (tests/podman_support.py), with the base image built once per machine. Without an SDK or
    an engine the tests skip, or fail when CI is set."""
    import podman_support

    podman_support.docker_sdk()  # skipped without it, failed under CI (podman_support.unavailable)
    scratch = tmp_path_factory.mktemp("podman")
    with contextlib.ExitStack() as stack:
        host = os.environ.get("DOCKER_HOST")
        if host is None:
            missing = podman_support.missing_tools()
            if missing:
                podman_support.unavailable(f"no DOCKER_HOST and no {', '.join(missing)} to serve one (./dev setup "
                                           "installs them)")
            host = stack.enter_context(podman_support.podman_service(scratch))
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("DOCKER_HOST", host)
        yield DockerEngine(host=host, base_image=podman_support.ensure_base_image(host, scratch=scratch))
