"""What the docker backend needs from the engine: a client, labels, images, and the orphan sweeper.

Everything here is blocking (the docker SDK is); `DockerSandbox` calls it in threads. Every object the
backend creates carries labels saying who made it and when:

    io.codedojo.managed-by = codedojo          what sweeping and cleanup look for
    io.codedojo.owner      = <host>:<pid>:<process start ticks>
    io.codedojo.run        = a random id per process (all sandboxes of one run share it)
    io.codedojo.created    = ISO 8601 UTC creation time
    io.codedojo.task       = the task's name

A container whose owner process is gone (same host, and no process with that pid and start time) is an
orphan of a run that died without closing its sandboxes; `sweep_orphans` removes those. Images are a
cache keyed by content and are kept.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.utils import parse_repository_tag

from codedojo.sandbox.base import SandboxStartError
from codedojo.tasks.task import Task

MANAGED_BY = "io.codedojo.managed-by"
OWNER = "io.codedojo.owner"
RUN = "io.codedojo.run"
CREATED = "io.codedojo.created"
TASK = "io.codedojo.task"
IMAGE_DIGEST = "io.codedojo.environment-digest"
ENV_IMAGE_REPOSITORY = "codedojo-env"
API_TIMEOUT_SEC = 120
# A fixed API version: asking the engine ("auto") costs a /version call, about 1 s on podman. 1.41 is served
# by Docker Engine 20.10 and later and by podman 4; DOCKER_API_VERSION overrides it.
API_VERSION = "1.41"

_sweep_lock = threading.Lock()
_swept = False
_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()


def connect() -> docker.DockerClient:
    """A client for the engine named by DOCKER_HOST (default: the local Docker socket)."""
    try:
        return docker.from_env(version=os.environ.get("DOCKER_API_VERSION", API_VERSION), timeout=API_TIMEOUT_SEC)
    except docker.errors.DockerException as e:
        host = os.environ.get("DOCKER_HOST", "the default socket /var/run/docker.sock")
        raise SandboxStartError(
            f"cannot reach a Docker API at {host}: {e}. Start Docker, or serve the API with podman "
            "(`podman system service --time=0 unix:///tmp/podman.sock`) and set DOCKER_HOST=unix:///tmp/podman.sock"
        ) from e


@functools.cache
def _run_id() -> str:
    return secrets.token_hex(6)


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot ('?' where /proc is not available)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def owner() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


def labels(task_name: str) -> dict[str, str]:
    """Labels for a container made now by this process for `task_name`."""
    return {MANAGED_BY: "codedojo", OWNER: owner(), RUN: _run_id(),
            CREATED: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), TASK: task_name[:200]}


def _owner_alive(value: str) -> bool:
    """Whether the process named by an owner label may still be running (unknown hosts count as alive)."""
    parts = value.rsplit(":", 2)
    if len(parts) != 3:
        return True
    host, pid_text, ticks = parts
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return ticks == "?" or _start_ticks(pid) in ("?", ticks)


def sweep_orphans(client: docker.DockerClient | None = None) -> list[str]:
    """Remove codedojo containers whose owner process on this host is gone; returns their names."""
    own = client is None
    client = client or connect()
    removed = []
    try:
        for container in client.containers.list(all=True, filters={"label": f"{MANAGED_BY}=codedojo"}):
            if _owner_alive(container.labels.get(OWNER, "")):
                continue
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True, v=True)
                removed.append(container.name)
    finally:
        if own:
            client.close()
    return removed


def sweep_orphans_once(client: docker.DockerClient) -> None:
    """Sweep on the first sandbox start of this process only (a crashed earlier run left them)."""
    global _swept
    with _sweep_lock:
        if _swept:
            return
        _swept = True
    with contextlib.suppress(docker.errors.APIError):
        sweep_orphans(client)


def environment_digest(env_dir: Path) -> str:
    """A hash of every file under environment/ (names, executable bits, contents, link targets)."""
    digest = hashlib.sha256()
    for path in sorted(env_dir.rglob("*")):
        rel = path.relative_to(env_dir).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {rel} {os.access(path, os.X_OK)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        elif path.is_dir():
            digest.update(f"D {rel}\0".encode())
    return digest.hexdigest()


def task_image(client: docker.DockerClient, task: Task) -> str:
    """The image to run: [environment].docker_image (pulled if absent), else environment/Dockerfile built
    once and tagged by the digest of environment/ so every later start reuses it."""
    env = task.config.environment
    if env.docker_image:
        return _present_or_pulled(client, env.docker_image)
    if task.dockerfile is None:
        raise SandboxStartError(f"{task.path}: no [environment].docker_image and no environment/Dockerfile")
    digest = environment_digest(task.environment_dir)
    tag = f"{ENV_IMAGE_REPOSITORY}:{digest[:32]}"
    with _build_locks_guard:
        lock = _build_locks.setdefault(tag, threading.Lock())
    with lock:  # two sandboxes of one task starting together build once
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        try:
            client.images.build(
                path=str(task.environment_dir), dockerfile="Dockerfile", tag=tag, rm=True, forcerm=True,
                pull=False, timeout=int(env.build_timeout_sec) + 1,
                labels={MANAGED_BY: "codedojo", IMAGE_DIGEST: digest, TASK: task.name[:200]},
            )
        except docker.errors.BuildError as e:
            log = "".join(str(line.get("stream") or line.get("error") or "") for line in e.build_log)
            raise SandboxStartError(f"{task.path}: building environment/Dockerfile failed: {e}\n{log[-2000:]}") from e
        except docker.errors.APIError as e:
            raise SandboxStartError(f"{task.path}: building environment/Dockerfile failed: {e}") from e
    return tag


def _present_or_pulled(client: docker.DockerClient, image: str) -> str:
    try:
        client.images.get(image)
        return image
    except docker.errors.ImageNotFound:
        pass
    repository, tag = parse_repository_tag(image)
    try:
        client.images.pull(repository, tag=tag or "latest")
    except docker.errors.APIError as e:
        raise SandboxStartError(f"image {image} is not present and could not be pulled: {e}") from e
    return image


def image_config(client: docker.DockerClient, image: str) -> dict[str, Any]:
    """The image's Config block (WorkingDir, Env, User, ...)."""
    config: dict[str, Any] = client.images.get(image).attrs.get("Config") or {}
    return config
