"""The docker sandbox backend: one container per sandbox, driven through the Docker API (podman serves it too).

A sandbox is a container of the task's image ([environment].docker_image, or environment/Dockerfile built
once and cached by content) with the task's cpus and memory, a pids limit, no network unless the caller
opts in, and a keepalive shell as PID 1 (the image's ENTRYPOINT and CMD are replaced: many task images
set one that exits). Files move as tar streams; every blocking SDK call runs in a thread.

How a command runs. Each `exec` starts `RUNNER` (POSIX sh, builtins only, so it works in any image with
bash) in the container's PID namespace. The runner first kills every process but PID 1 and itself
(`kill -KILL -1`), starts a watchdog that does the same at the timeout, runs `bash -c command`, and when
bash returns kills everything again, then reports the exit status and the cgroup's OOM-kill counter in a
trailer line on stderr tagged with a random nonce. kill(-1, SIGKILL) is atomic against fork (the kernel
signals the whole namespace under the task-list lock), so a timeout or the end of a command leaves no
process behind: not `setsid`/`nohup` children, not a fork bomb. The watchdog is started before the
command, so it works even when a fork bomb has used up the pids limit. Should the runner itself not
finish (it was killed, or the watchdog failed), the host kills the namespace with a second exec.

Threat model (compare codedojo/sandbox/local.py; docs/sandbox.md has the table and the tests):

1. No network for tasks that say `no-network` (and with `SandboxLimits(network=False)`): `network_mode=
   "none"`, loopback only. A task that allows internet gets the engine's default network
   (`sandbox.base.network_for_task`).
2. No host secrets: the container sees its image and nothing of the host filesystem.
3. No writes to the host: only the container's own layer is writable; downloads write only regular
   files and directories under the chosen host directory and never follow links.
4. Bounded resources: memory (no swap), pids and CPU quota per container; CPU seconds and file size per
   process (ulimit in the runner); output capped per stream. Storage is not limited (most storage
   drivers cannot), and the default seccomp/capabilities of the engine apply.
5. Nothing outlives a command: see above; close() removes the container.
6. Grading: transfers refuse `..`, relative paths and any path through a symlink (checked component by
   component, which is sound because no agent process runs between commands); /tests and /solution are
   removed and recreated before an upload.

Not covered: the container shares the host kernel (kernel exploits, side channels); the agent is root
inside the container, so it can write anywhere in the image's filesystem, including /tests during its
own phase (they are replaced at upload); the image's own contents are the task's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import re
import secrets
import shlex
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import docker
import docker.errors
import requests

from codedojo.sandbox import archive, docker_host
from codedojo.sandbox.base import (
    LOG_DIRS,
    PROTECTED_MOUNTS,
    ExecResult,
    SandboxClosedError,
    SandboxError,
    SandboxLimits,
    SandboxPathError,
    SandboxStartError,
    limits_for_task,
    sandbox_path,
    task_environment,
)
from codedojo.sandbox.docker_paths import PathProbe
from codedojo.sandbox.output import OutputCapture
from codedojo.tasks.task import COMPOSE_FILES, Task

T = TypeVar("T")

# PID 1 of every container: never exits, and reaps orphans (sh's `wait` reaps any child, adopted ones too).
KEEPALIVE = "while :; do sleep 2147483647 & wait; done"

# $1 timeout seconds, $2 cwd, $3 command, $4 nonce, $5 CPU seconds, $6 file size in 512-byte blocks.
RUNNER = r"""
oom() {
  for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
    if [ -r "$f" ]; then
      while read -r k v; do if [ "$k" = oom_kill ]; then echo "$v"; return; fi; done < "$f"
    fi
  done
  echo -
}
kill -KILL -1 2>/dev/null
before=$(oom)
ulimit -t "$5" 2>/dev/null
ulimit -f "$6" 2>/dev/null
cd -- "$2" || exit 1
( sleep "$1" && kill -KILL -1 ) >/dev/null 2>&1 </dev/null &
bash -c "$3" </dev/null &
wait $!
rc=$?
kill -KILL -1 2>/dev/null
printf '%s %s %s %s\n' "$4" "$rc" "$before" "$(oom)" >&2
exit $rc
"""
SWEEP = ["/bin/sh", "-c", "kill -KILL -1 2>/dev/null; exit 0"]
_TRAILER = re.compile(rb"([0-9a-f]{16}) (\d+) (\S+) (\S+)\n\Z")
_TRAILER_MAX = 96
# How long past a command's timeout the host waits for the runner's own watchdog before stepping in.
_KILL_GRACE_SEC = 10.0


class DockerSandbox:
    """A sandbox in a container; create it with `await DockerSandbox.start(task)`."""

    def __init__(self, *, client: docker.DockerClient, container_id: str, name: str, workdir: str,
                 limits: SandboxLimits) -> None:
        self.sandbox_id = name
        self.container_id = container_id
        self.limits = limits
        self._client = client
        self._workdir = workdir
        self._paths = PathProbe(client=client, container_id=container_id)
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def workdir(self) -> str:
        return self._workdir

    @classmethod
    async def start(cls, task: Task, *, limits: SandboxLimits | None = None) -> DockerSandbox:
        limits = limits_for_task(task, limits or SandboxLimits(), backend="docker", follows_task=True)
        task_env = task_environment(task)
        client = await _in_thread(docker_host.connect)
        handed_off = False  # whether a callback now owns the client (to remove a container made too late)
        try:
            await _in_thread(docker_host.sweep_orphans_once, client)
            image = await _in_thread(docker_host.task_image, client, task)
            config = await _in_thread(docker_host.image_config, client, image)
            workdir = sandbox_path(task.config.environment.workdir or config.get("WorkingDir") or "/")
            name = f"codedojo-{re.sub(r'[^a-zA-Z0-9_.-]', '_', task.name)[:40]}-{secrets.token_hex(4)}"
            creating = asyncio.ensure_future(_in_thread(
                _create, client, image=image, name=name, workdir=workdir, env=task_env,
                limits=limits, labels=docker_host.labels(task.name)))
            try:
                container = await asyncio.shield(creating)
            except asyncio.CancelledError:
                # The engine creates it anyway: remove it once it exists rather than leak it.
                creating.add_done_callback(functools.partial(_remove_created, client))
                handed_off = True
                raise
        except BaseException as e:
            if not handed_off:
                client.close()
            if isinstance(e, docker.errors.DockerException | requests.RequestException):
                raise SandboxStartError(f"could not start a container for {task.name}: {e}") from e
            raise
        sandbox = cls(client=client, container_id=container.id, name=name, workdir=workdir, limits=limits)
        try:
            await _in_thread(container.start)
            dirs = " ".join(f"/logs/{d}" for d in LOG_DIRS)
            # Writable by whatever user the image runs commands as.
            await sandbox._shell(f"mkdir -p -- {dirs} {shlex.quote(workdir)} && chmod 777 {dirs}")
            if _loose_environment_files(task):  # Harbor: a prebuilt image gets environment/ in its workdir
                await sandbox.upload_dir(task.environment_dir, workdir)
        except BaseException as e:
            await sandbox.close()
            if isinstance(e, docker.errors.DockerException | requests.RequestException | SandboxError):
                raise SandboxStartError(f"could not start the container for {task.name}: {e}") from e
            raise
        return sandbox

    # -- commands -------------------------------------------------------------------------------

    async def exec(self, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                   timeout_sec: float | None = None, user: str | int | None = None) -> ExecResult:
        async with self._lock:
            self._check_open()
            cwd = sandbox_path(cwd) if cwd else self._workdir
            timeout = self.limits.default_timeout_sec if timeout_sec is None else timeout_sec
            return await self._run(command, cwd=cwd, env=dict(env or {}), timeout=max(timeout, 0.001), user=user)

    async def _run(self, command: str, *, cwd: str, env: dict[str, str], timeout: float,
                   user: str | int | None = None) -> ExecResult:
        nonce = secrets.token_hex(8)
        args = [f"{timeout:.3f}", cwd, command, nonce, str(self.limits.cpu_time_sec),
                str(self.limits.file_size_mb * 2048)]
        started = time.monotonic()
        # As another user the runner's `kill -KILL -1` reaches only that user's processes; every command
        # still ends with its own user's processes killed, so nothing survives into the next command, and a
        # runner that did not finish is followed by a sweep as root.
        exec_id = (await self._api(self._client.api.exec_create, self.container_id,
                                   ["/bin/sh", "-c", RUNNER, "codedojo-exec", *args], environment=env,
                                   user="" if user is None else str(user)))["Id"]
        stream = await self._api(self._client.api.exec_start, exec_id, stream=True, demux=True)
        out = OutputCapture(self.limits.output_bytes)
        err = _HeldBack(OutputCapture(self.limits.output_bytes))
        pump = asyncio.ensure_future(_in_thread(_pump, stream, out, err))
        pump.add_done_callback(_retrieve)  # after a cancellation nobody awaits it; its error is not news
        try:
            done, _ = await asyncio.wait({pump}, timeout=timeout + _KILL_GRACE_SEC)
            if not done:  # the runner's watchdog did not act: kill the namespace from a second exec
                await self._sweep()
                done, _ = await asyncio.wait({pump}, timeout=_KILL_GRACE_SEC)
                if not done:
                    raise SandboxError(f"sandbox {self.sandbox_id}: a timed-out command could not be stopped")
            pump.result()
        except (docker.errors.DockerException, requests.RequestException, OSError) as e:
            stream.close()
            raise SandboxError(f"sandbox {self.sandbox_id}: lost the output of a command: {e}") from e
        except BaseException:
            stream.close()
            raise
        duration = time.monotonic() - started
        exit_code = (await self._api(self._client.api.exec_inspect, exec_id)).get("ExitCode")
        trailer = err.finish()
        # The runner reports the status it exits with; anything else means it was killed (by the watchdog,
        # the OOM killer or the agent) before its final kill, so the host makes sure nothing survives.
        finished = trailer is not None and exit_code == int(trailer.group(2)) and exit_code < 128
        if not finished:
            await self._sweep()
        timed_out = trailer is None and duration >= timeout
        if trailer is None and not timed_out and (exit_code is None or exit_code < 128) \
                and not out.text() and not err.capture.text():
            # The runner writes its end marker whenever it exits by itself, and when it stops early (a bad
            # working directory) the reason is on stderr; an empty stream without the marker, neither killed
            # nor timed out, is output the transport lost (seen once under load): an infrastructure failure,
            # never a command that printed nothing.
            raise SandboxError(f"sandbox {self.sandbox_id}: lost the output of a command (the stream ended empty, "
                               f"without the runner's end marker; exit code {exit_code})")
        oom = trailer is not None and trailer.group(3) != trailer.group(4)
        return ExecResult(stdout=out.text(), stderr=err.capture.text(),
                          return_code=-9 if timed_out else int(exit_code if exit_code is not None else -1),
                          timed_out=timed_out, oom_killed=oom, truncated_bytes=out.dropped + err.capture.dropped,
                          duration_sec=duration)

    async def _sweep(self) -> None:
        """Kill every process but PID 1 from a fresh exec (as root: whatever user the image runs as)."""
        exec_id = (await self._api(self._client.api.exec_create, self.container_id, SWEEP, user="root"))["Id"]
        await self._api(self._client.api.exec_start, exec_id)

    # -- files ----------------------------------------------------------------------------------

    async def upload_file(self, source: Path, target: str) -> None:
        async with self._lock:
            self._check_open()
            where = await self._api(self._paths.resolve, target, create_parents=True)
            if where.is_dir:
                raise SandboxPathError(f"{target}: a directory is in the way of the upload")
            await self._put(where.base, archive.pack, Path(source), name=where.name, parents=where.parents)

    async def upload_dir(self, source: Path, target: str) -> None:
        async with self._lock:
            self._check_open()
            path = sandbox_path(target)
            if path in PROTECTED_MOUNTS:  # never merge with what the agent may have planted there
                await self._shell(f"rm -rf -- {path}")
            where = await self._api(self._paths.resolve, path, create_parents=True)
            if where.exists and not where.is_dir:
                raise SandboxPathError(f"{target}: not a directory")
            await self._put(where.base, archive.pack, Path(source), name=where.name, parents=where.parents)

    async def download_file(self, source: str, target: Path) -> None:
        async with self._lock:
            self._check_open()
            where = await self._api(self._paths.resolve, source, create_parents=False)
            where.require_file(source)
            target = Path(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            chunks = await self._get(where.path)
            with target.open("wb") as f:
                await self._api(archive.read_single_file, chunks, label=source, into=f)

    async def download_dir(self, source: str, target: Path) -> None:
        async with self._lock:
            self._check_open()
            where = await self._api(self._paths.resolve, source, create_parents=False)
            if not where.is_dir:
                raise SandboxPathError(f"{source}: not a directory")
            chunks = await self._get(where.path)
            await self._api(archive.extract_tree, chunks, Path(target))

    async def read_file(self, path: str, *, max_bytes: int = 1 << 20) -> bytes:
        async with self._lock:
            self._check_open()
            where = await self._api(self._paths.resolve, path, create_parents=False)
            where.require_file(path)
            chunks = await self._get(where.path)
            try:
                return await self._api(archive.read_single_file, chunks, label=path, max_bytes=max_bytes)
            finally:
                with contextlib.suppress(AttributeError):
                    chunks.close()  # type: ignore[attr-defined]

    async def write_file(self, path: str, data: bytes) -> None:
        async with self._lock:
            self._check_open()
            where = await self._api(self._paths.resolve, path, create_parents=True)
            if where.is_dir:
                raise SandboxPathError(f"{path}: is a directory")
            await self._put(where.base, archive.pack_bytes, data, name=where.name, parents=where.parents)

    async def remove(self, path: str) -> None:
        async with self._lock:
            self._check_open()
            try:
                where = await self._api(self._paths.resolve, path, create_parents=False)
            except FileNotFoundError:
                return
            if where.is_dir:
                raise SandboxPathError(f"{path}: is a directory")
            if where.exists:
                await self._shell(f"rm -f -- {shlex.quote(where.path)}")

    async def _put(self, base: str, pack: Callable[..., IO[bytes]], *args: Any, **kwargs: Any) -> None:
        tar = await _in_thread(pack, *args, **kwargs)
        try:
            ok = await self._api(self._client.api.put_archive, self.container_id, base, tar)
        finally:
            tar.close()
        if not ok:
            raise SandboxError(f"sandbox {self.sandbox_id}: the engine refused the upload into {base}")

    async def _get(self, path: str) -> Iterator[bytes]:
        chunks, _ = await self._api(self._client.api.get_archive, self.container_id, path, chunk_size=1 << 16)
        return chunks  # type: ignore[no-any-return]

    async def _shell(self, script: str) -> None:
        """Run a short housekeeping script of ours as root (no runner: no agent process is alive between
        commands)."""
        exec_id = (await self._api(self._client.api.exec_create, self.container_id, ["/bin/sh", "-c", script],
                                   user="root"))["Id"]
        output = await self._api(self._client.api.exec_start, exec_id)
        code = (await self._api(self._client.api.exec_inspect, exec_id)).get("ExitCode")
        if code != 0:
            raise SandboxError(f"sandbox {self.sandbox_id}: {script!r} exited {code}: {output[-500:]!r}")

    # -- engine calls ---------------------------------------------------------------------------

    async def _api(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call the blocking SDK in a thread; engine failures become SandboxError(s)."""
        try:
            return await _in_thread(fn, *args, **kwargs)
        except docker.errors.NotFound as e:
            if "container" in str(e).lower():
                raise SandboxClosedError(f"sandbox {self.sandbox_id} is gone: {e}") from e
            raise FileNotFoundError(str(e)) from e
        except docker.errors.APIError as e:
            if e.status_code == 409 or "not running" in str(e) or "stopped" in str(e):
                raise SandboxClosedError(f"sandbox {self.sandbox_id} is not running: {e}") from e
            raise SandboxError(f"sandbox {self.sandbox_id}: {e}") from e
        except (docker.errors.DockerException, requests.RequestException, ConnectionError) as e:
            raise SandboxError(f"sandbox {self.sandbox_id}: {e}") from e

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError(f"sandbox {self.sandbox_id} is closed")

    # -- lifecycle ------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.shield(_in_thread(_remove, self._client, self.container_id))

    async def __aenter__(self) -> DockerSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _loose_environment_files(task: Task) -> bool:
    """A prebuilt-image task with files in environment/ and nothing there to build them into an image."""
    env_dir = task.environment_dir
    if not task.config.environment.docker_image or not env_dir.is_dir() or task.dockerfile is not None:
        return False
    return not any((env_dir / f).exists() for f in COMPOSE_FILES) and any(env_dir.iterdir())


class _HeldBack:
    """Feeds a stream to a capture, holding back its last bytes until the end to find the runner's trailer."""

    def __init__(self, capture: OutputCapture) -> None:
        self.capture = capture
        self._held = b""

    def feed(self, chunk: bytes) -> None:
        held = self._held + chunk
        if len(held) > _TRAILER_MAX:
            self.capture.feed(held[:-_TRAILER_MAX])
            held = held[-_TRAILER_MAX:]
        self._held = held

    def finish(self) -> re.Match[bytes] | None:
        """The trailer (nonce, status, OOM kills before, after), or None when the runner did not finish."""
        match = _TRAILER.search(self._held)
        self.capture.feed(self._held[:match.start()] if match else self._held)
        self._held = b""
        return match


@functools.cache
def _executor() -> concurrent.futures.ThreadPoolExecutor:
    # Each running command holds a thread while it streams output, so asyncio's default pool (a few
    # threads per core) would make concurrent sandboxes queue behind one another, timeouts included.
    return concurrent.futures.ThreadPoolExecutor(max_workers=512, thread_name_prefix="codedojo-docker")


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (the docker SDK's) in the backend's own thread pool."""
    return await asyncio.get_running_loop().run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _pump(stream: Iterator[tuple[bytes | None, bytes | None]], out: OutputCapture, err: _HeldBack) -> None:
    for stdout, stderr in stream:
        if stdout:
            out.feed(stdout)
        if stderr:
            err.feed(stderr)


def _create(client: docker.DockerClient, *, image: str, name: str, workdir: str, env: Mapping[str, str],
            limits: SandboxLimits, labels: dict[str, str]) -> Any:
    memory = f"{limits.memory_mb}m" if limits.memory_mb else None
    return client.containers.create(
        image, name=name, entrypoint=["/bin/sh", "-c", KEEPALIVE, "codedojo-keepalive"], command=None,
        working_dir=workdir, environment=dict(env), labels=labels, detach=True,
        network_mode="bridge" if limits.network else "none",
        nano_cpus=int(limits.cpus * 1e9) if limits.cpus else None,
        mem_limit=memory, memswap_limit=memory, pids_limit=limits.max_processes,
        security_opt=["no-new-privileges"],
    )


def _remove_created(client: docker.DockerClient, creating: asyncio.Future[Any]) -> None:
    if creating.cancelled() or creating.exception() is not None:
        client.close()
        return
    _executor().submit(_remove, client, creating.result().id)


def _remove(client: docker.DockerClient, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
    finally:
        client.close()
