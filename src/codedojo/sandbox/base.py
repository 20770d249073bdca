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
    network: bool = False
    """Whether commands may reach the network (the host's)."""
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
    ) -> ExecResult:
        """Run `command` with `bash -c` in a fresh shell; cwd defaults to the workdir."""
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


def limits_for_task(task: Task, base: SandboxLimits) -> SandboxLimits:
    """Apply the task's [environment] resources to `base`; a task that forbids network keeps it off."""
    env = task.config.environment
    return replace(
        base,
        cpus=base.cpus if base.cpus is not None else env.cpus,
        memory_mb=base.memory_mb or env.memory_mb or DEFAULT_MEMORY_MB,
        storage_mb=base.storage_mb or env.storage_mb or DEFAULT_STORAGE_MB,
        network=base.network and env.network_mode != "no-network",
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
