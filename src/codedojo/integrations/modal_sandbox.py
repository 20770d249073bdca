"""The "modal" sandbox backend: one Modal Sandbox (a gVisor container in Modal's cloud) per episode.

    BACKENDS["modal"] = "codedojo.integrations.modal_sandbox:ModalSandbox"

Start (modal_boot): the task's image (`[environment].docker_image` through `Image.from_registry`, else
`environment/Dockerfile` through `Image.from_dockerfile`; entrypoint cleared because task images often
set one), `Sandbox.create("sleep", "infinity", ...)` with the task's CPU and memory (request = limit),
`block_network` unless the task's network policy gives network (sandbox.base.network_for_task), an
explicit lifetime strictly longer than the episode budget, an idle timeout and owner tags; creation paced
by the token bucket and the boot cap, shielded against cancellation; orphans of dead runs swept on the first start.

Exec: `bash -c` with the task's env, the workdir and Modal's per-exec `timeout`. Modal reports an exec
timeout as return code -1 (sometimes 137); 137 well before the timeout is an out-of-memory kill, and a
sandbox that is itself gone raises SandboxClosedError (infrastructure), as the protocol requires. A
Modal call that hangs past the command's timeout plus a grace period is a SandboxError. Output is capped
per stream like every backend (sandbox.output). Files move through Modal's filesystem API (single files)
and tar archives (directories, with sandbox.archive: unpacking on the host keeps only regular files and
directories below the target and never writes through a link).
close() terminates the sandbox: Modal keeps an unterminated one (billed) until its lifetime ends.

modal is imported only inside functions, so the module imports without it and without credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import posixpath
import secrets
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codedojo.integrations.modal_boot import (
    ModalSandboxConfig,
    app_for,
    effective_limits,
    paced_create,
    retryable,
    sandbox_timeouts,
    sweep_once,
    task_image,
    task_workdir,
)
from codedojo.integrations.modal_limits import boot_gate, creation_bucket
from codedojo.integrations.modal_sweeper import owner_tags
from codedojo.sandbox.archive import extract_tree, pack
from codedojo.sandbox.base import LOG_DIRS as BASE_LOG_DIRS
from codedojo.sandbox.base import (
    ExecResult,
    SandboxClosedError,
    SandboxError,
    SandboxLimits,
    SandboxPathError,
    SandboxStartError,
    is_root_user,
    refuse_other_users,
    sandbox_path,
    task_environment,
)
from codedojo.sandbox.output import OutputCapture
from codedojo.tasks.task import Task

q = shlex.quote
RPC_GRACE_SEC = 30.0
"""How long past a command's own timeout a Modal call may take before the sandbox counts as broken."""
LOG_DIRS = tuple(f"/logs/{d}" for d in BASE_LOG_DIRS)


def classify_exit(return_code: int, *, duration_sec: float, timeout_sec: float) -> tuple[bool, bool]:
    """(timed_out, oom_killed) for an exec's return code: Modal reports a timeout as -1 (sometimes 137,
    SIGKILL); a 137 well before the timeout is the kernel's OOM killer."""
    if return_code == -1:
        return True, False
    if return_code == 137:
        timed_out = duration_sec >= 0.95 * timeout_sec
        return timed_out, not timed_out
    return False, False


class ModalSandbox:
    """A running Modal Sandbox; create it with `await ModalSandbox.start(task)`."""

    def __init__(self, *, sandbox: Any, workdir: str, env: dict[str, str], limits: SandboxLimits) -> None:
        self._sandbox = sandbox
        self._workdir = workdir
        self._env = env
        self.limits = limits
        self._closed = False

    @property
    def workdir(self) -> str:
        return self._workdir

    @property
    def object_id(self) -> str:
        return str(self._sandbox.object_id)

    @classmethod
    async def start(cls, task: Task, *, limits: SandboxLimits | None = None,
                    config: ModalSandboxConfig | None = None) -> ModalSandbox:
        import modal

        config = config or ModalSandboxConfig.from_env()
        limits = effective_limits(task, limits or SandboxLimits())
        if task.config.environment.gpus:
            raise SandboxStartError(f"{task.name}: the modal sandbox backend does not give tasks GPUs")
        lifetime, idle = sandbox_timeouts(task, config)
        workdir = task_workdir(task)
        task_env = task_environment(task)
        refuse_other_users(task, backend="modal", reason="does not run commands as another user yet")
        try:
            app = await app_for(config.app_name)
            await sweep_once(app, config.app_name)
            image = task_image(task, registry_secret=config.registry_secret)
        except modal.exception.Error as e:
            raise SandboxStartError(f"{task.name}: Modal refused the app or image: {e}") from e
        cpu = (limits.cpus, limits.cpus) if limits.cpus else None
        memory = (limits.memory_mb, limits.memory_mb) if limits.memory_mb else None

        async def create() -> Any:
            return await modal.Sandbox.create.aio(
                "sleep", "infinity", app=app, image=image, cpu=cpu, memory=memory, timeout=lifetime,
                idle_timeout=idle, block_network=not limits.network, workdir=workdir, region=config.region,
                tags=owner_tags(task_name=task.name, lifetime_sec=lifetime))

        async def terminate(sandbox: Any) -> None:
            await sandbox.terminate.aio()

        try:
            sandbox = await paced_create(create, terminate=terminate, bucket=creation_bucket(), gate=boot_gate(),
                                         attempts=config.create_attempts, retryable=retryable)
        except modal.exception.Error as e:
            raise SandboxStartError(f"{task.name}: Modal could not create the sandbox: {e}") from e
        box = cls(sandbox=sandbox, workdir=workdir, env=task_env, limits=limits)
        prepare = f"mkdir -p {shlex.join((workdir, *LOG_DIRS))} && chmod 777 {shlex.join(LOG_DIRS)}"
        try:
            prepared = await box.exec(prepare, cwd="/", timeout_sec=60)
            if prepared.return_code != 0:
                raise SandboxStartError(f"{task.name}: preparing the sandbox failed: "
                                        f"{prepared.stdout}{prepared.stderr}")
        except BaseException:
            await asyncio.shield(box.close())
            raise
        return box

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError("the sandbox was closed")

    async def exec(self, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                   timeout_sec: float | None = None, user: str | int | None = None) -> ExecResult:
        if not is_root_user(user):
            raise SandboxError(f"the modal backend does not run commands as another user ({user!r}) yet; use the "
                               "docker backend for tasks that set [agent].user or [verifier].user")
        self._check_open()
        timeout = float(timeout_sec if timeout_sec is not None else self.limits.default_timeout_sec)
        merged = {**self._env, **(env or {})}
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout + RPC_GRACE_SEC):
                stdout, stderr, code = await self._run(command, cwd=cwd, env=merged, timeout=timeout)
        except TimeoutError:
            raise SandboxError(f"a command did not come back within {timeout + RPC_GRACE_SEC:.0f} s "
                               "(Modal unreachable or the sandbox hung)") from None
        except Exception as e:
            raise await self._failure(e) from e
        duration = time.monotonic() - started
        timed_out, oom_killed = classify_exit(code, duration_sec=duration, timeout_sec=timeout)
        if oom_killed and await self._gone():
            raise SandboxClosedError("the sandbox died (137 with no termination requested: likely out of memory)")
        out, err = OutputCapture(self.limits.output_bytes), OutputCapture(self.limits.output_bytes)
        out.feed(stdout)
        err.feed(stderr)
        return ExecResult(stdout=out.text(), stderr=err.text(), return_code=code, timed_out=timed_out,
                          oom_killed=oom_killed, truncated_bytes=out.dropped + err.dropped, duration_sec=duration)

    async def _run(self, command: str, *, cwd: str | None, env: dict[str, str],
                   timeout: float) -> tuple[bytes, bytes, int]:
        import modal.exception

        process = await self._sandbox.exec.aio("bash", "-c", command, workdir=cwd or self._workdir, env=env or None,
                                               timeout=max(1, math.ceil(timeout)), text=False)
        try:
            stdout, stderr = await asyncio.gather(process.stdout.read.aio(), process.stderr.read.aio())
            code = await process.wait.aio()
        except modal.exception.ExecTimeoutError:  # some client versions raise instead of returning -1
            return b"", b"", -1
        return _bytes(stdout), _bytes(stderr), int(code)

    async def _gone(self) -> bool:
        try:
            return await self._sandbox.poll.aio() is not None
        except Exception:
            return True

    async def _failure(self, error: BaseException) -> SandboxError:
        if await self._gone():
            return SandboxClosedError(f"the sandbox is gone: {error}")
        return SandboxError(f"Modal failed: {type(error).__name__}: {error}")

    async def _checked(self, command: str, *, what: str) -> ExecResult:
        result = await self.exec(command, cwd="/", timeout_sec=300)
        if result.return_code != 0:
            raise SandboxError(f"{what} failed ({result.return_code}): {(result.stdout + result.stderr)[-500:]}")
        return result

    async def upload_file(self, source: Path, target: str) -> None:
        self._check_open()
        target = sandbox_path(target)
        try:
            await self._sandbox.filesystem.copy_from_local.aio(str(source), target)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            raise
        except Exception as e:
            raise await self._failure(e) from e

    async def upload_dir(self, source: Path, target: str) -> None:
        """One archive per directory: per-file transfers of large trees were seen to skip files silently."""
        self._check_open()
        target = sandbox_path(target)
        staging = f"/tmp/codedojo-upload-{secrets.token_hex(6)}.tar"
        archive = await asyncio.to_thread(lambda: pack(Path(source), name="").read())
        await self.write_file(staging, archive)
        await self._checked(f"mkdir -p {q(target)} && tar -xf {q(staging)} -C {q(target)} && rm -f {q(staging)}",
                            what=f"unpacking into {target}")

    async def download_file(self, source: str, target: Path) -> None:
        data = await self.read_file(source, max_bytes=1 << 40)
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_bytes(data)

    async def download_dir(self, source: str, target: Path) -> None:
        """The directory as one archive; on the host only its directories and regular files are written."""
        source = sandbox_path(source)
        if source == "/":
            raise SandboxPathError("refusing to download the whole sandbox")
        staging = f"/tmp/codedojo-download-{secrets.token_hex(6)}.tar"
        parent, name = posixpath.split(source)
        await self._checked(f"test -d {q(source)} && tar -cf {q(staging)} -C {q(parent)} {q(name)}",
                            what=f"archiving {source}")
        try:
            data = await self.read_file(staging, max_bytes=1 << 40)
        finally:
            with contextlib.suppress(SandboxError):
                await self.remove(staging)
        await asyncio.to_thread(extract_tree, [data], Path(target))

    async def read_file(self, path: str, *, max_bytes: int = 1 << 20) -> bytes:
        self._check_open()
        path = sandbox_path(path)
        try:
            data = await self._sandbox.filesystem.read_bytes.aio(path)
        except Exception as e:
            if "NotFound" in type(e).__name__ or isinstance(e, FileNotFoundError):
                raise FileNotFoundError(path) from e
            raise await self._failure(e) from e
        return bytes(data[:max_bytes])

    async def write_file(self, path: str, data: bytes) -> None:
        self._check_open()
        path = sandbox_path(path)
        try:
            await self._sandbox.filesystem.write_bytes.aio(data, path)
        except Exception as e:
            raise await self._failure(e) from e

    async def remove(self, path: str) -> None:
        path = sandbox_path(path)
        await self._checked(f"rm -f -- {q(path)}", what=f"removing {path}")

    async def close(self) -> None:
        """Terminate the sandbox (idempotent): Modal keeps an unterminated one until its lifetime ends."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._sandbox.terminate.aio(), RPC_GRACE_SEC)


def _bytes(data: Any) -> bytes:
    return data if isinstance(data, bytes) else str(data or "").encode()
