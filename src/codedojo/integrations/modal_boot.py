"""Starting Modal sandboxes: settings, lifetimes that outlast an episode, images, paced creation, sweeping.

`sandbox_timeouts` checks that a sandbox lives strictly longer than the longest episode that can use it
(start + agent budget + the trial runner's grace + verifier): a sandbox that dies mid-episode turns the
agent's time into an infrastructure failure. `paced_create` takes a token from the process-wide
bucket, holds the boot cap, retries transient failures and is shielded: when the caller is cancelled
mid-creation (the trial's build timeout, slime aborting a step) the sandbox is terminated as soon as
Modal hands it over. `sweep_once` removes orphans of dead runs on the first start of a process.

modal is imported inside the functions that call it; the rest is plain Python tested offline.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import posixpath
import re
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from codedojo.config.recipe import ExtraConfig
from codedojo.integrations.modal_limits import TokenBucket
from codedojo.integrations.modal_sweeper import sweep
from codedojo.sandbox.base import SandboxLimits, SandboxStartError, network_for_task
from codedojo.tasks.task import Task
from codedojo.trial.runner import AGENT_GRACE_SEC

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_LIFETIME_SEC = 24 * 3600
"""Modal's longest sandbox lifetime."""
TEARDOWN_MARGIN_SEC = 120.0
"""Lifetime beyond the episode budget: log collection, close, clock skew."""
DEFAULT_IDLE_TIMEOUT_SEC = 900
"""Longer than the longest model turn (a /generate request may take 600 s under load)."""


@dataclass(frozen=True, kw_only=True)
class ModalSandboxConfig:
    """Settings of the backend; `from_env` reads them from CODEDOJO_MODAL_* variables."""

    app_name: str = "codedojo-sandboxes"
    """Modal app the sandboxes belong to (created when missing)."""
    lifetime_sec: int | None = None
    """Sandbox lifetime; None: the episode budget plus a margin (capped at 24 h)."""
    idle_timeout_sec: int = DEFAULT_IDLE_TIMEOUT_SEC
    """Terminate a sandbox with no command running for this long (a run that vanished)."""
    episode_timeout_sec: float = ExtraConfig().agentic_episode_timeout
    """The agent loop's wall clock (agentic_episode_timeout), for tasks without [agent].timeout_sec."""
    registry_secret: str | None = None
    """Modal secret with registry credentials (Docker Hub rate limits, private images)."""
    region: str | None = None
    """Modal region to run sandboxes in."""
    create_attempts: int = 3
    """Tries of Sandbox.create before the start fails (each waits for a rate-limit token)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ModalSandboxConfig:
        env = os.environ if env is None else env
        default = cls()

        def number(name: str, kind: Callable[[str], Any], fallback: Any) -> Any:
            return kind(env[name]) if env.get(name) else fallback

        return cls(
            app_name=env.get("CODEDOJO_MODAL_APP") or default.app_name,
            lifetime_sec=number("CODEDOJO_MODAL_SANDBOX_TIMEOUT", int, None),
            idle_timeout_sec=number("CODEDOJO_MODAL_IDLE_TIMEOUT", int, default.idle_timeout_sec),
            episode_timeout_sec=number("CODEDOJO_EPISODE_TIMEOUT", float, default.episode_timeout_sec),
            registry_secret=env.get("CODEDOJO_MODAL_REGISTRY_SECRET") or None,
            region=env.get("CODEDOJO_MODAL_REGION") or None,
        )


def episode_budget_sec(task: Task, *, episode_timeout_sec: float) -> float:
    """The longest a trial may hold its sandbox: start, agent (its own budget plus the runner's grace),
    verifier."""
    config = task.config
    agent = config.agent.timeout_sec
    agent_budget = episode_timeout_sec if agent is None else min(agent, episode_timeout_sec)
    return config.environment.build_timeout_sec + agent_budget + AGENT_GRACE_SEC + config.verifier.timeout_sec


def sandbox_timeouts(task: Task, config: ModalSandboxConfig) -> tuple[int, int]:
    """(lifetime, idle timeout) in whole seconds; raises SandboxStartError when they cannot hold an episode."""
    budget = episode_budget_sec(task, episode_timeout_sec=config.episode_timeout_sec)
    lifetime = config.lifetime_sec
    if lifetime is None:
        lifetime = min(MAX_LIFETIME_SEC, math.ceil(budget + TEARDOWN_MARGIN_SEC))
    if lifetime <= budget:
        raise SandboxStartError(
            f"{task.name}: sandbox lifetime {lifetime} s is not longer than the episode budget {budget:.0f} s "
            "(build + agent + grace + verifier): the sandbox would die mid-episode")
    if lifetime > MAX_LIFETIME_SEC:
        raise SandboxStartError(f"sandbox lifetime {lifetime} s exceeds Modal's maximum of {MAX_LIFETIME_SEC} s")
    idle = config.idle_timeout_sec
    if not 0 < idle <= lifetime:
        raise SandboxStartError(f"idle timeout {idle} s must be positive and at most the lifetime {lifetime} s")
    return lifetime, idle


def task_workdir(task: Task) -> str:
    """[environment].workdir, else the Dockerfile's last WORKDIR, else /."""
    if task.config.environment.workdir:
        return posixpath.normpath(task.config.environment.workdir)
    workdir = "/"
    if task.dockerfile is not None:
        for line in task.dockerfile.read_text(encoding="utf-8", errors="replace").splitlines():
            match = re.match(r"\s*WORKDIR\s+(\S+)", line, re.IGNORECASE)
            if match:
                workdir = posixpath.normpath(posixpath.join(workdir, match.group(1)))
    return workdir


def effective_limits(task: Task, limits: SandboxLimits) -> SandboxLimits:
    """The caller's limits, else the task's resources; network as the task's policy says
    (sandbox.base.network_for_task: Modal can give a "public" task network without an opt-in)."""
    env = task.config.environment
    return replace(limits, cpus=limits.cpus if limits.cpus is not None else env.cpus,
                   memory_mb=limits.memory_mb or env.memory_mb,
                   network=network_for_task(task, limits.network, backend="modal", follows_task=True))


async def paced_create(create: Callable[[], Awaitable[T]], *, terminate: Callable[[T], Awaitable[object]],
                       bucket: TokenBucket, gate: asyncio.Semaphore, attempts: int = 3,
                       retryable: Callable[[BaseException], bool] = lambda e: True,
                       sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> T:
    """Create under the rate limit and boot cap, retrying transient failures; a caller cancelled while
    the creation is in flight gets the sandbox terminated once it exists."""
    attempt = 0
    while True:
        attempt += 1
        await bucket.acquire(sleep=sleep)
        async with gate:
            creating = asyncio.ensure_future(create())
            try:
                return await asyncio.shield(creating)
            except asyncio.CancelledError:
                creating.add_done_callback(lambda done: _terminate_when_created(done, terminate))
                raise
            except Exception as error:
                if attempt >= attempts or not retryable(error):
                    raise
                log.warning("Modal sandbox creation failed (attempt %d of %d): %s", attempt, attempts, error)
        await sleep(2.0 ** (attempt - 1))


_background: set[asyncio.Future[Any]] = set()


def _terminate_when_created(done: asyncio.Future[Any], terminate: Callable[[Any], Awaitable[object]]) -> None:
    if done.cancelled() or done.exception() is not None:
        return
    job = asyncio.ensure_future(terminate(done.result()))
    _background.add(job)  # keep a reference until it finishes
    job.add_done_callback(_background.discard)


class ModalListing:
    """`SandboxListing` over Modal's API (for modal_sweeper.sweep)."""

    def __init__(self, *, app_id: str | None) -> None:
        self.app_id = app_id

    async def list_sandboxes(self, tags: Mapping[str, str]) -> list[Any]:
        import modal

        return [_Handle(sb) async for sb in modal.Sandbox.list.aio(app_id=self.app_id, tags=dict(tags))]


class _Handle:
    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox
        self.object_id = sandbox.object_id

    async def get_tags(self) -> dict[str, str]:
        return dict(await self.sandbox.get_tags.aio())

    async def terminate(self) -> None:
        await self.sandbox.terminate.aio()


_apps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = weakref.WeakKeyDictionary()
_swept_apps: set[str] = set()


async def app_for(name: str) -> Any:
    import modal

    per_loop = _apps.setdefault(asyncio.get_running_loop(), {})
    if name not in per_loop:
        per_loop[name] = await modal.App.lookup.aio(name, create_if_missing=True)
    return per_loop[name]


async def sweep_once(app: Any, name: str) -> None:
    """The first start of a process removes sandboxes its dead predecessors left (never fails a start)."""
    if name in _swept_apps:
        return
    _swept_apps.add(name)
    try:
        removed = await asyncio.wait_for(sweep(ModalListing(app_id=getattr(app, "app_id", None))), 60)
    except Exception as error:
        log.warning("sweeping orphaned Modal sandboxes failed: %s", error)
        return
    for swept in removed:
        log.info("terminated orphaned Modal sandbox %s of run %s: %s", swept.object_id, swept.run, swept.reason)


def task_image(task: Task, *, registry_secret: str | None) -> Any:
    import modal

    env = task.config.environment
    secret = modal.Secret.from_name(registry_secret) if registry_secret else None
    if env.docker_image:
        if ".dkr.ecr." in env.docker_image and secret is not None:
            image = modal.Image.from_aws_ecr(env.docker_image, secret=secret)
        else:
            image = modal.Image.from_registry(env.docker_image, secret=secret)
    elif task.dockerfile is not None:
        image = modal.Image.from_dockerfile(task.dockerfile, context_dir=task.environment_dir)
    else:
        raise SandboxStartError(f"{task.path}: neither [environment].docker_image nor environment/Dockerfile")
    return image.entrypoint([])


def retryable(error: BaseException) -> bool:
    """Configuration mistakes are not worth retrying; rate limits and transient API errors are."""
    import modal.exception

    return not isinstance(error, modal.exception.InvalidError | modal.exception.NotFoundError)


