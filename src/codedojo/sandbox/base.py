"""The sandbox protocol: where an agent's commands run.

A sandbox is started from a task and offers a small surface: run a shell command with a timeout, move
files in and out, close. Every backend (local bubblewrap, docker, modal) implements the same methods with
the same failure semantics:

* a command that fails, times out or is killed is a normal `ExecResult` (the agent sees it);
* the sandbox itself failing (could not start, died, was closed) raises `SandboxError` — an
  infrastructure failure, never to be scored as the agent's failure;
* a bad path (relative, `..`, escaping through a symlink) raises `SandboxPathError` — a caller bug or an
  attack, refused before anything is touched.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from codedojo.tasks.task import Task

# Harbor's in-environment layout, the same on every backend.
LOG_DIRS = ("agent", "verifier", "artifacts")
"""Subdirectories of /logs every sandbox starts with."""
PROTECTED_MOUNTS = ("/tests", "/solution")
"""Directories the host fills (after the agent, for /tests): emptied before every upload."""
DEFAULT_MEMORY_MB = 4096
DEFAULT_STORAGE_MB = 2048


class SandboxError(RuntimeError):
    """The sandbox could not do its job (start, exec, transfer): an infrastructure failure."""


class SandboxStartError(SandboxError):
    """The environment could not be started."""


class SandboxClosedError(SandboxError):
    """The sandbox was closed or died."""


class SandboxPathError(ValueError):
    """A path given to a file transfer is not a plain absolute path inside the sandbox."""


@dataclass(frozen=True, kw_only=True)
class ExecResult:
    """The outcome of one command. Output is decoded as UTF-8 with replacement."""

    stdout: str
    stderr: str
    return_code: int
    """Exit status; negative when killed by a signal (-9 after a timeout)."""
    timed_out: bool = False
    """The command ran past its timeout and every process it started was killed."""
    oom_killed: bool = False
    """A process was killed for exceeding the memory limit."""
    truncated_bytes: int = 0
    """Bytes of output dropped from the middle of stdout and stderr to respect the output limit."""
    duration_sec: float = 0.0
    """Wall time of the command."""


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    """Resource limits of one sandbox. `None` for cpus/memory/storage means the backend's default."""

    cpus: float | None = None
    """CPU cores (a CFS quota locally)."""
    memory_mb: int | None = None
    """Memory of all processes together."""
    storage_mb: int | None = None
    """Writable storage (workspace changes, /tmp, logs)."""
    max_processes: int = 512
    """Processes and threads alive at once (contains fork bombs)."""
    cpu_time_sec: int = 3600
    """CPU seconds per process."""
    file_size_mb: int = 1024
    """Largest file a process may write."""
    output_bytes: int = 1 << 20
    """Output kept per stream of one command; the middle of anything longer is dropped."""
    network: bool | None = None
    """Network access: None follows the task's policy where the backend can give network (docker, modal:
    on for "public" tasks, off for "no-network"; the local backend refuses a task that allows internet
    unless told), True opts in (the local backend then shares the host's network), False runs without
    network whatever the task says. See `network_for_task`."""
    default_timeout_sec: float = 600.0
    """Timeout of a command that does not give one."""


@runtime_checkable
class Sandbox(Protocol):
    """One running environment. Commands run one at a time, each in a fresh shell."""

    @property
    def workdir(self) -> str:
        """The default working directory of every command."""
        ...

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_sec: float | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """Run `command` with `bash -c` in a fresh shell; cwd defaults to the workdir. `user` (a name or
        uid) runs it as that user; None is the environment's default user (the image's USER, else root).
        A backend that cannot switch users raises SandboxError for any user but root."""
        ...

    async def upload_file(self, source: Path, target: str) -> None:
        """Copy a host file to an absolute path in the sandbox."""
        ...

    async def upload_dir(self, source: Path, target: str) -> None:
        """Copy a host directory's contents to an absolute directory in the sandbox."""
        ...

    async def download_file(self, source: str, target: Path) -> None:
        """Copy a sandbox file to the host."""
        ...

    async def download_dir(self, source: str, target: Path) -> None:
        """Copy a sandbox directory's contents to the host (symlinks and special files are skipped)."""
        ...

    async def read_file(self, path: str, *, max_bytes: int = 1 << 20) -> bytes:
        """Read up to `max_bytes` of a sandbox file; FileNotFoundError when absent."""
        ...

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or replace a sandbox file."""
        ...

    async def remove(self, path: str) -> None:
        """Delete a sandbox file if it exists (not following symlinks)."""
        ...

    async def close(self) -> None:
        """Stop every process and delete every file the sandbox made. Idempotent."""
        ...


def is_root_user(user: str | int | None) -> bool:
    """Whether `user` (as task.toml gives it: a name, a uid, "uid:gid") is root or unset."""
    return user is None or str(user).split(":")[0] in ("root", "0")


def task_users(task: Task) -> dict[str, str | int]:
    """Every non-root user the task asks for, keyed by where it is set (e.g. "[agent].user")."""
    config = task.config
    found: dict[str, str | int | None] = {"[agent].user": config.agent.user, "[verifier].user": config.verifier.user}
    for step in config.steps:
        found[f"[[steps]] {step.name!r} agent.user"] = step.agent.user if step.agent else None
        found[f"[[steps]] {step.name!r} verifier.user"] = step.verifier.user if step.verifier else None
    return {k: v for k, v in found.items() if v is not None and not is_root_user(v)}


def refuse_other_users(task: Task, *, backend: str, reason: str) -> None:
    """SandboxStartError naming the first non-root user the task asks for (`task_users`), for a backend that
    runs every command as root; `reason` says why (it follows "the <backend> backend")."""
    users = task_users(task)
    if users:
        where, user = next(iter(users.items()))
        raise SandboxStartError(f"{task.path}: {where} = {user!r}: the {backend} backend {reason}; use the docker "
                                "backend")


class NetworkPolicyError(SandboxStartError):
    """The task's network policy cannot be given by this backend as asked; the message names the override."""


def network_modes(task: Task) -> dict[str, str]:
    """Each phase's effective network_mode (Harbor: a phase's own network_mode overrides [environment]'s)."""
    config = task.config
    base = config.environment.network_mode
    modes: dict[str, str] = {"[environment]": base}
    if config.agent.network_mode is not None:
        modes["[agent]"] = config.agent.network_mode
    if config.verifier.network_mode is not None:
        modes["[verifier]"] = config.verifier.network_mode
    for step in config.steps:
        for phase, section in (("agent", step.agent), ("verifier", step.verifier)):
            if section is not None and section.network_mode is not None:
                modes[f"[[steps]] {step.name!r} {phase}"] = section.network_mode
    return modes


def network_for_task(task: Task, requested: bool | None, *, backend: str, follows_task: bool) -> bool:
    """Whether the sandbox gets network, or NetworkPolicyError when the task's policy cannot be met as asked.

    `requested` is SandboxLimits.network; `follows_task` says the backend can give a task the network it
    allows without an opt-in (docker, modal). Never silently a sandbox without the network a task relies on:
    a task whose phases all say "no-network" gets none; False is the caller's explicit "run without it";
    otherwise an allowlist (not enforced by codedojo's backends) or phases that disagree (network is one
    setting per sandbox here) are refused, and so is a "public" task on a backend that needs an opt-in."""
    modes = network_modes(task)
    if requested is False or set(modes.values()) == {"no-network"}:
        return False
    overrides = ("pass SandboxLimits(network=False) (`--no-network`) to run it without network, accepting that "
                 "what needs the network fails")
    allowlisted = [where for where, mode in modes.items() if mode == "allowlist"]
    if allowlisted:
        raise NetworkPolicyError(
            f"{task.path}: {allowlisted[0]}.network_mode = \"allowlist\": the {backend} backend cannot restrict "
            f"network access to allowed_hosts; {overrides}")
    if len(set(modes.values())) > 1:
        closed = next(where for where, mode in modes.items() if mode == "no-network")
        raise NetworkPolicyError(
            f"{task.path}: {closed}.network_mode = \"no-network\" while another phase allows internet: the "
            f"{backend} backend gives one network setting per sandbox, not one per phase; {overrides}")
    if requested is True or follows_task:
        return True
    raise NetworkPolicyError(
        f"{task.path}: the task allows internet ([environment].network_mode = \"public\", Harbor's default) and "
        f"the {backend} backend gives no network unless asked: pass SandboxLimits(network=True) (`--network`) to "
        "share the host's network with it (see the threat model in docs/sandbox.md), or "
        f"{overrides.removeprefix('pass ')}; or set network_mode = \"no-network\" in task.toml if it needs none")


def limits_for_task(task: Task, base: SandboxLimits, *, backend: str, follows_task: bool) -> SandboxLimits:
    """Apply the task's [environment] resources to `base` and settle network (see `network_for_task`)."""
    env = task.config.environment
    return replace(
        base,
        cpus=base.cpus if base.cpus is not None else env.cpus,
        memory_mb=base.memory_mb or env.memory_mb or DEFAULT_MEMORY_MB,
        storage_mb=base.storage_mb or env.storage_mb or DEFAULT_STORAGE_MB,
        network=network_for_task(task, base.network, backend=backend, follows_task=follows_task),
    )


def sandbox_path(path: str) -> str:
    """Normalise an absolute sandbox path, refusing relative paths, `..` and NUL bytes."""
    if not isinstance(path, str) or not path:
        raise SandboxPathError(f"sandbox path must be a non-empty string, got {path!r}")
    if "\x00" in path:
        raise SandboxPathError(f"sandbox path {path!r} contains a NUL byte")
    if not path.startswith("/"):
        raise SandboxPathError(f"sandbox path {path!r} must be absolute")
    if ".." in path.split("/"):
        raise SandboxPathError(f"sandbox path {path!r} must not contain '..'")
    return posixpath.normpath(path).replace("//", "/")


def task_environment(task: Task) -> dict[str, str]:
    """The task's `[environment].env` with its `${VAR}` templates resolved from the host (Harbor's rule);
    SandboxStartError naming the variable when the host lacks one."""
    from codedojo.tasks.env import MissingVariable, resolve_env

    try:
        return resolve_env(task.config.environment.env, section="[environment].env")
    except MissingVariable as e:
        raise SandboxStartError(f"{task.name}: {e}") from None


class AsUser:
    """A view of a sandbox whose commands run as `user` unless a command names its own (Harbor's
    `with_default_user`): the trial runner gives the agent one for `[agent].user`. Transfers and close go to
    the sandbox itself."""

    def __init__(self, sandbox: Sandbox, user: str | int | None) -> None:
        self._sandbox = sandbox
        self.user = user

    @property
    def workdir(self) -> str:
        return self._sandbox.workdir

    async def exec(self, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                   timeout_sec: float | None = None, user: str | int | None = None) -> ExecResult:
        return await self._sandbox.exec(command, cwd=cwd, env=env, timeout_sec=timeout_sec,
                                        user=self.user if user is None else user)

    async def upload_file(self, source: Path, target: str) -> None:
        await self._sandbox.upload_file(source, target)

    async def upload_dir(self, source: Path, target: str) -> None:
        await self._sandbox.upload_dir(source, target)

    async def download_file(self, source: str, target: Path) -> None:
        await self._sandbox.download_file(source, target)

    async def download_dir(self, source: str, target: Path) -> None:
        await self._sandbox.download_dir(source, target)

    async def read_file(self, path: str, *, max_bytes: int = 1 << 20) -> bytes:
        return await self._sandbox.read_file(path, max_bytes=max_bytes)

    async def write_file(self, path: str, data: bytes) -> None:
        await self._sandbox.write_file(path, data)

    async def remove(self, path: str) -> None:
        await self._sandbox.remove(path)

    async def close(self) -> None:
        await self._sandbox.close()
