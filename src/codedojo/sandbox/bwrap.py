"""A bubblewrap namespace with an init process that runs commands on request (`IsolatedShell`).

Starting a sandbox launches, once, two programs (Python never forks with a callback, which would copy a
large trainer process and is unsafe with threads; the uid and groups are dropped by subprocess's own C
code between fork and exec):

    bwrap (as the unprivileged sandbox uid when started as root): new user/pid/net/ipc/uts/cgroup/mount
          namespaces and the filesystem layout, then exec of
    -> python3 init : PID 1 of the namespace (codedojo/sandbox/init_server.py)

The init's host pid comes back on bwrap's status descriptor and is written into the sandbox's cgroups
before `start()` returns, so every command (forked by the init, only after that) is born inside them;
until then the init runs nothing but its own start-up.

Each command is then a fork+exec of `bash -c` by the init process, which costs about as much as a
plain subprocess; rlimits are applied in the forked child. The init process and everything in the
namespace die with the launcher (bwrap --die-with-parent, PID-namespace teardown).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import functools
import json
import marshal
import os
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codedojo.sandbox.base import (
    ExecResult,
    SandboxClosedError,
    SandboxError,
    SandboxLimits,
    SandboxStartError,
)
from codedojo.sandbox.host import SYSTEM_DIRS, bwrap_path, sandbox_python
from codedojo.sandbox.output import OutputCapture

_KILL_GRACE_SEC = 5.0


@functools.cache
def _init_source() -> str:
    return (Path(__file__).with_name("init_server.py")).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Bind:
    """A host directory made visible at `target` inside the sandbox."""

    host: str
    target: str
    writable: bool


@dataclass(frozen=True)
class Launch:
    """How a sandbox is started and what every command in it is limited to."""

    uid: int | None
    """Host uid the sandbox runs as (None: stay the current user)."""
    cgroup_procs: tuple[str, ...]
    """cgroup.procs files the launcher joins before anything else runs."""
    limits: SandboxLimits
    rlimit_memory: bool
    """Also cap address space per process (when no memory cgroup is available)."""
    nproc_limit: int | None
    """RLIMIT_NPROC for the sandbox uid (when no pids cgroup is available)."""

    def rlimits(self) -> dict[str, int]:
        limits = self.limits
        out = {"core": 0, "cpu": limits.cpu_time_sec, "fsize": limits.file_size_mb * 2**20}
        if self.rlimit_memory and limits.memory_mb:
            out["as"] = limits.memory_mb * 2**20
        if self.nproc_limit is not None:
            out["nproc"] = self.nproc_limit
        return out


def bwrap_args(*, binds: Sequence[Bind], cwd: str, network: bool, status_fd: int) -> list[str]:
    args = [bwrap_path(), "--unshare-all", "--uid", "0", "--gid", "0", "--hostname", "sandbox",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--as-pid-1",
            "--json-status-fd", str(status_fd)]
    if network:
        args.append("--share-net")
    for name in SYSTEM_DIRS:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for bind in sorted(binds, key=lambda b: b.target.count("/")):
        args += ["--bind" if bind.writable else "--ro-bind", bind.host, bind.target]
    args += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--chdir", cwd]
    return args


async def _drain(fd: int, capture: OutputCapture) -> None:
    """Read a pipe to EOF without blocking the event loop."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    readable = asyncio.Event()
    loop.add_reader(fd, readable.set)
    try:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                readable.clear()
                await readable.wait()
                continue
            if not chunk:
                return
            capture.feed(chunk)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


class IsolatedShell:
    """One bubblewrap namespace whose init process runs commands; create with `await IsolatedShell.start()`."""

    def __init__(self, *, proc: asyncio.subprocess.Process, sock: socket.socket, launch: Launch,
                 init_pid_host: int | None) -> None:
        self._proc = proc
        self._sock = sock
        self._launch = launch
        self.init_pid_host = init_pid_host
        self._dead = False

    @classmethod
    async def start(cls, *, launch: Launch, binds: Sequence[Bind], cwd: str, timeout_sec: float = 30.0
                    ) -> IsolatedShell:
        python = sandbox_python()
        if python is None:
            raise SandboxStartError("the local sandbox needs the host's python3 in /usr/bin (apt-get install python3)")
        host_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        status_r, status_w = os.pipe()
        argv = bwrap_args(binds=binds, cwd=cwd, network=launch.limits.network is True, status_fd=status_w)
        argv += ["--", python, "-I", "-S", "-c", _init_source(), str(child_sock.fileno())]
        identity: dict[str, Any] = {} if launch.uid is None else {"user": launch.uid, "group": launch.uid,
                                                                  "extra_groups": []}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, start_new_session=True,
                pass_fds=(child_sock.fileno(), status_w), env={}, **identity,
            )
        except OSError as e:
            raise SandboxStartError(f"could not start bubblewrap: {e}") from e
        finally:
            child_sock.close()
            os.close(status_w)
        host_sock.setblocking(False)
        shell = cls(proc=proc, sock=host_sock, launch=launch, init_pid_host=None)
        try:
            await asyncio.wait_for(shell._boot(status_r), timeout=timeout_sec)
        except (TimeoutError, SandboxError) as e:
            await shell.close()
            stderr = b""
            if proc.stderr is not None:
                with contextlib.suppress(TimeoutError):
                    stderr = await asyncio.wait_for(proc.stderr.read(), timeout=1.0)
            detail = stderr.decode("utf-8", "replace").strip() or str(e) or "no answer from the init process"
            raise SandboxStartError(f"the sandbox did not start: {detail}") from None
        except BaseException:  # cancelled while starting: nothing may keep running
            await asyncio.shield(shell.close())
            raise
        return shell

    async def _boot(self, status_fd: int) -> None:
        """Learn the init's host pid, move it into the cgroups while its interpreter starts, await its ready.

        A cgroup v1 migration waits for an RCU grace period (milliseconds each); done in a thread, the
        writes overlap the init's start-up instead of adding to it. The init runs no command before
        `start()` returns, and that waits for the writes.
        """
        self.init_pid_host = await _child_pid(status_fd)
        joining = asyncio.ensure_future(asyncio.to_thread(self._join_cgroups))
        try:
            ready = await self._receive()
        finally:
            await asyncio.wait({joining})
        joining.result()
        if ready.get("op") != "ready":
            raise SandboxStartError(f"unexpected first message from the sandbox: {ready}")

    def _join_cgroups(self) -> None:
        if not self._launch.cgroup_procs:
            return
        if self.init_pid_host is None:
            raise SandboxStartError("bubblewrap did not report the init's pid, so it cannot join the sandbox's cgroups")
        for procs in self._launch.cgroup_procs:
            try:
                Path(procs).write_text(f"{self.init_pid_host}\n")
            except OSError as e:
                raise SandboxStartError(f"could not move the sandbox's init into {procs}: {e}") from e

    async def _receive(self) -> dict[str, object]:
        loop = asyncio.get_running_loop()
        try:
            data = await loop.sock_recv(self._sock, 1 << 16)
        except OSError as e:
            self._dead = True
            raise SandboxClosedError(f"lost the sandbox's init process: {e}") from e
        if not data:
            self._dead = True
            raise SandboxClosedError("the sandbox's init process exited")
        message: dict[str, object] = marshal.loads(data)
        return message

    def _send(self, message: Mapping[str, object], fds: Sequence[int] = ()) -> None:
        payload = marshal.dumps(dict(message), 2)
        try:
            if fds:
                self._sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            else:
                self._sock.send(payload)
        except OSError as e:
            self._dead = True
            raise SandboxClosedError(f"lost the sandbox's init process: {e}") from e

    @property
    def alive(self) -> bool:
        return not self._dead and self._proc.returncode is None

    async def exec(self, command: str, *, env: Mapping[str, str], cwd: str, timeout_sec: float) -> ExecResult:
        """Run `bash -c command`; one at a time (the caller serialises)."""
        if not self.alive:
            raise SandboxClosedError("the sandbox is not running")
        limits = self._launch.limits
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        started = time.monotonic()
        try:
            self._send({"op": "exec", "argv": ["/bin/bash", "-c", command], "cwd": cwd, "env": dict(env),
                        "rlimits": self._launch.rlimits()}, fds=(out_w, err_w))
        except SandboxError:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        out, err = OutputCapture(limits.output_bytes), OutputCapture(limits.output_bytes)
        readers = asyncio.gather(_drain(out_r, out), _drain(err_r, err))
        exited = asyncio.ensure_future(self._receive())
        timed_out = False
        try:
            done, _ = await asyncio.wait({exited}, timeout=timeout_sec)
            if not done:
                timed_out = True
                self._send({"op": "kill"})
                done, _ = await asyncio.wait({exited}, timeout=_KILL_GRACE_SEC)
                if not done:
                    raise SandboxError(f"the sandbox did not stop a timed-out command within {_KILL_GRACE_SEC}s")
            message = exited.result()
            await asyncio.wait_for(readers, timeout=_KILL_GRACE_SEC)
        except BaseException:
            exited.cancel()
            readers.cancel()
            # the readers' cancellation is this path's own doing: read it, or asyncio reports it as an error
            # ("_GatheringFuture exception was never retrieved") on the console of a run whose sandbox died
            readers.add_done_callback(_read_outcome)
            raise
        status = int(message["status"])  # type: ignore[call-overload]
        return ExecResult(stdout=out.text(), stderr=err.text(), return_code=status, timed_out=timed_out,
                          truncated_bytes=out.dropped + err.dropped, duration_sec=time.monotonic() - started)

    async def close(self) -> None:
        """Kill the namespace (bwrap, init and every command) and wait for it to go."""
        self._dead = True
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            await self._proc.wait()


def _read_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _child_pid(fd: int) -> int | None:
    """bwrap reports the host pid of the sandbox's PID 1 on its status descriptor (None: it exited first)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    readable = asyncio.Event()
    loop.add_reader(fd, readable.set)
    data = b""
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                readable.clear()
                await readable.wait()
                continue
            data += chunk
            lines = data.split(b"\n")
            for line in lines[:-1] if chunk else lines:
                with contextlib.suppress(json.JSONDecodeError, AttributeError, TypeError, ValueError):
                    pid = json.loads(line).get("child-pid")
                    if pid is not None:
                        return int(pid)
            if not chunk:
                return None
    finally:
        loop.remove_reader(fd)
        os.close(fd)
