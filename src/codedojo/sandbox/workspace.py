"""The read-only lower layer of a local sandbox: a task's files laid out at its workdir.

A task's Dockerfile (the subset `codedojo.tasks.dockerfile` accepts) is realised once: its COPY steps
copy files from environment/ and its workspace RUN steps run inside an isolated shell whose only
writable path is the workdir. The result is cached under `$CODEDOJO_CACHE_DIR/workspaces/<key>`, keyed
by the plan and the bytes of every copied file, so each episode mounts it as the lower layer of an
overlay and copies nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import posixpath
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from codedojo.cache import cache_dir
from codedojo.sandbox.base import SandboxLimits, SandboxStartError
from codedojo.sandbox.bwrap import Bind, IsolatedShell, Launch
from codedojo.sandbox.host import SANDBOX_PATH, SYSTEM_DIRS, check_requirements, host_system, state_root
from codedojo.tasks.dockerfile import COMPOSE_NOTE, BuildPlan, Copy, UnsupportedEnvironment, parse_dockerfile
from codedojo.tasks.task import COMPOSE_FILES, Task

_FORMAT = "workspace-v1"


class EnvironmentBuildError(SandboxStartError):
    """A workspace step of the task's Dockerfile failed."""


@dataclass(frozen=True)
class PreparedEnvironment:
    """A task's realised environment."""

    lower: Path
    """Directory holding the workspace as it appears at `workdir` (read-only, shared by episodes)."""
    workdir: str
    env: dict[str, str]
    """Environment variables from the Dockerfile's ENV instructions ([environment].env is added per sandbox)."""


def plan_for(task: Task) -> BuildPlan:
    """The task's build plan, or UnsupportedEnvironment explaining why the local backend cannot run it."""
    env_config = task.config.environment
    if env_config.docker_image:
        raise UnsupportedEnvironment(
            f"{task.path}: [environment].docker_image = {env_config.docker_image!r} is a prebuilt image; the "
            "local backend does not pull images (use the docker or modal backend)"
        )
    dockerfile = task.dockerfile
    if dockerfile is None:
        compose = [f for f in COMPOSE_FILES if (task.environment_dir / f).is_file()]
        what = f"a compose file ({compose[0]})" if compose else "no Dockerfile"
        raise UnsupportedEnvironment(f"{task.path}: environment/ has {what}; {COMPOSE_NOTE}")
    plan = parse_dockerfile(
        dockerfile.read_text(encoding="utf-8"), context=task.environment_dir, host=host_system(),
        workdir_override=env_config.workdir, where=str(dockerfile),
    )
    check_requirements(plan.requirements, where=str(dockerfile))
    taken = [d for d in (*SYSTEM_DIRS, "/proc", "/dev", "/sys", "/tmp", "/root", "/logs", "/tests", "/solution")
             if plan.workdir == d or plan.workdir.startswith(d + "/")]
    if taken or plan.workdir == "/":
        raise UnsupportedEnvironment(
            f"{dockerfile}: workdir {plan.workdir} lies in {taken[0] if taken else '/'}, which the local sandbox "
            "provides itself (read-only system or private directory); use a workdir such as /app"
        )
    return plan


def _source_paths(task: Task, plan: BuildPlan) -> list[Path]:
    paths: list[Path] = []
    for step in plan.steps:
        if isinstance(step, Copy):
            for src in step.sources:
                root = task.environment_dir / src
                paths.extend([root] if not root.is_dir() else sorted(root.rglob("*")))
    return paths


_digests: dict[tuple[object, ...], str] = {}


def _digest(task: Task, plan: BuildPlan, uid: int | None) -> str:
    """Cache key of the workspace: the plan plus the bytes of every copied file. Content hashes are
    memoised per process on (path, size, mtime) so an unchanged task is not re-read every episode."""
    stats = tuple((str(p), st.st_size, st.st_mtime_ns, st.st_mode)
                  for p in _source_paths(task, plan) for st in (p.lstat(),))
    memo = (str(task.environment_dir), repr(plan), uid, stats)
    if memo not in _digests:
        _digests[memo] = _content_digest(task, plan, uid)
    return _digests[memo]


def _content_digest(task: Task, plan: BuildPlan, uid: int | None) -> str:
    h = hashlib.sha256()
    h.update(f"{_FORMAT}\0{uid}\0{plan!r}\0".encode())
    for step in plan.steps:
        if not isinstance(step, Copy):
            continue
        for src in step.sources:
            root = task.environment_dir / src
            paths = [root] if not root.is_dir() else sorted(p for p in root.rglob("*"))
            for p in paths:
                rel = p.relative_to(task.environment_dir).as_posix()
                st = p.lstat()
                h.update(f"{rel}\0{st.st_mode}\0".encode())
                if p.is_symlink():
                    h.update(os.readlink(p).encode())
                elif p.is_file():
                    h.update(p.read_bytes())
    return h.hexdigest()[:32]


def _copy(task: Task, step: Copy, *, ws: Path, workdir: str) -> None:
    dest_rel = posixpath.relpath(step.dest, workdir)
    dest = ws if dest_rel == "." else ws / dest_rel
    for src in step.sources:
        source = task.environment_dir / src
        if source.is_dir():
            shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
        else:
            target = dest / source.name if step.dest_is_dir else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)


def _chown_tree(root: Path, uid: int) -> None:
    os.lchown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


_prepared: dict[tuple[str, int | None, str], PreparedEnvironment] = {}

# How often a coroutine waiting for a workspace lock tries again (seconds, doubling up to the cap).
LOCK_POLL_SEC = (0.02, 0.5)


@contextlib.asynccontextmanager
async def file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive flock on `path` for the block, shared between processes and between coroutines.

    It waits by polling a non-blocking flock from the event loop, never in a worker thread: a blocking
    flock per waiter would hold one of asyncio's few default executor threads each (6 on 2 cores), and
    once every thread waited, the holder's own `to_thread` calls could never run (the evaluation of new
    tasks with several episodes each deadlocked that way)."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        delay = LOCK_POLL_SEC[0]
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, LOCK_POLL_SEC[1])
        yield
    finally:
        os.close(fd)  # releases the lock


async def prepare_environment(task: Task, *, uid: int | None) -> PreparedEnvironment:
    """Realise the task's environment once (cached) and return its lower layer.

    Within a process a task's environment is read once: episodes of the same task reuse the result without
    walking its files again (edit a task's files between processes, not during a run)."""
    memo = (str(task.path.resolve()), uid, str(cache_dir()))
    known = _prepared.get(memo)
    if known is not None and known.lower.is_dir():
        return known
    plan = await asyncio.to_thread(plan_for, task)
    env = dict(plan.env)
    key = await asyncio.to_thread(_digest, task, plan, uid)
    root = cache_dir() / "workspaces"
    final = root / key
    if not final.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        async with file_lock(root / f"{key}.lock"):
            if not final.is_dir():
                await _build(task, plan, env=env, uid=uid, final=final)
    _prepared[memo] = PreparedEnvironment(lower=final, workdir=plan.workdir, env=env)
    return _prepared[memo]


async def _build(task: Task, plan: BuildPlan, *, env: dict[str, str], uid: int | None, final: Path) -> None:
    # Built where the unprivileged sandbox user can reach it (the cache may sit under a private home),
    # then moved into the cache.
    tmp = state_root() / f".build-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    ws = tmp / "ws"
    ws.mkdir(parents=True)
    launch = Launch(uid=uid, cgroup_procs=(), limits=SandboxLimits(memory_mb=4096), rlimit_memory=True,
                    nproc_limit=None)
    shell: IsolatedShell | None = None
    try:
        for step in plan.steps:
            if isinstance(step, Copy):
                await asyncio.to_thread(_copy, task, step, ws=ws, workdir=plan.workdir)
                continue
            if uid is not None:
                await asyncio.to_thread(_chown_tree, ws, uid)
            if shell is None:
                shell = await IsolatedShell.start(launch=launch, binds=[Bind(str(ws), plan.workdir, True)],
                                                  cwd=plan.workdir)
            step_env = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **dict(step.env)}
            result = await shell.exec(step.command, env=step_env, cwd=step.cwd,
                                      timeout_sec=task.config.environment.build_timeout_sec)
            if result.return_code != 0 or result.timed_out:
                why = "timed out" if result.timed_out else f"exited {result.return_code}"
                output = (result.stdout + result.stderr).strip()[-2000:]
                raise EnvironmentBuildError(
                    f"{task.dockerfile}: RUN {step.command!r} {why} while preparing the workspace:\n{output}"
                )
        if uid is not None:
            await asyncio.to_thread(_chown_tree, ws, uid)
        staged = final.with_name(f".tmp-{final.name}-{os.getpid()}")
        shutil.move(ws, staged)
        os.rename(staged, final)
    finally:
        if shell is not None:
            await shell.close()
        shutil.rmtree(tmp, ignore_errors=True)
