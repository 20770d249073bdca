"""What the local sandbox needs from the host: facts about its system, mounts, and cgroup v1 groups.

Nothing here runs at import time; host facts are read once on first use and cached.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from codedojo.tasks.dockerfile import HostSystem, Requirement, UnsupportedEnvironment

# Directories of the host system visible (read-only) inside every local sandbox. Home directories,
# /root, /tmp, /var, /run, /mnt, /srv, /opt and everything else are not.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MNT_DETACH = 2


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mount(source: str, target: str | Path, fstype: str, *, options: str = "") -> None:
    """mount(2); raises OSError with the kernel's reason."""
    rc = _libc().mount(source.encode(), str(target).encode(), fstype.encode(), 0,
                       options.encode() if options else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount -t {fstype} {target} ({options}): {os.strerror(err)}")


def umount(target: str | Path) -> None:
    """Unmount, detaching lazily when the mount is busy; a path that is not mounted is fine."""
    path = str(target).encode()
    if _libc().umount2(path, 0) == 0:
        return
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOENT):
        return
    if _libc().umount2(path, MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):
            raise OSError(err, f"umount {target}: {os.strerror(err)}")


def state_root() -> Path:
    """Where running sandboxes keep their mounts and private directories."""
    return Path(os.environ.get("CODEDOJO_SANDBOX_DIR") or f"/tmp/codedojo-sandboxes-{os.geteuid()}")


def is_root() -> bool:
    return os.geteuid() == 0


@functools.cache
def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise UnsupportedEnvironment(
            "bubblewrap (bwrap) is not installed; the local sandbox needs it: apt-get install bubblewrap"
        )
    return path


@functools.cache
def sandbox_python() -> str | None:
    """The python3 that commands inside the sandbox find first on PATH (None if none is visible)."""
    for directory in SANDBOX_PATH.split(":"):
        candidate = Path(directory) / "python3"
        if candidate.exists():
            real = os.path.realpath(candidate)
            if any(real == d or real.startswith(d + "/") for d in SYSTEM_DIRS):
                return str(candidate)
    return None


@functools.cache
def host_system() -> HostSystem:
    os_release = {}
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            key, _, value = line.partition("=")
            os_release[key] = value.strip('"')
    python = sandbox_python()
    version = (0, 0)
    if python is not None:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            major, minor = out.stdout.split()
            version = (int(major), int(minor))
    return HostSystem(python_version=version, debian_version=os_release.get("VERSION_ID", ""),
                      debian_codename=os_release.get("VERSION_CODENAME", ""))


@functools.cache
def _pip_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    python = sandbox_python()
    if python is None:
        return {n: None for n in names}
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([python, "-c", script, *names], capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout) if proc.returncode == 0 else {n: None for n in names}


@functools.cache
def _apt_installed(names: tuple[str, ...]) -> frozenset[str]:
    if shutil.which("dpkg-query") is None:
        return frozenset()
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\n", *names],
                          capture_output=True, text=True, timeout=60)
    return frozenset(line.split()[0] for line in proc.stdout.splitlines() if line.endswith("install ok installed"))


def _specifier_ok(version: str, specifier: str) -> bool:
    if not specifier:
        return True
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:  # exact pins are still checkable without packaging
        m = re.fullmatch(r"==\s*(\S+)", specifier)
        return m is not None and m.group(1) == version
    return SpecifierSet(specifier).contains(version, prereleases=True)


def check_requirements(requirements: Iterable[Requirement], *, where: str) -> None:
    """Raise UnsupportedEnvironment naming the first package the host lacks."""
    reqs = list(requirements)
    pip = tuple(sorted({r.name for r in reqs if r.kind == "pip"}))
    apt = tuple(sorted({r.name for r in reqs if r.kind == "apt"}))
    versions = _pip_versions(pip) if pip else {}
    installed = _apt_installed(apt) if apt else frozenset()
    for r in reqs:
        if r.kind == "pip":
            have = versions.get(r.name)
            if have is None:
                raise UnsupportedEnvironment(
                    f"{where}:{r.line}: pip package {r.name!r} is not installed for the host's python3 "
                    f"({sandbox_python()}); install it on the host or use the docker or modal backend"
                )
            if not _specifier_ok(have, r.specifier):
                raise UnsupportedEnvironment(
                    f"{where}:{r.line}: pip package {r.name}{r.specifier} is required but the host has "
                    f"{r.name} {have}; relax the pin or use the docker or modal backend"
                )
        elif r.kind == "apt" and r.name not in installed:
            raise UnsupportedEnvironment(
                f"{where}:{r.line}: Debian package {r.name!r} is not installed on the host; "
                f"apt-get install {r.name} on the host or use the docker or modal backend"
            )


class CgroupV1:
    """A group in the memory, pids and cpu hierarchies of cgroup v1 (the kind this host has).

    The sandbox's init is written into each `cgroup.procs` (see `procs_files`) before it is given its
    first command, so every command is born inside the limits.
    """

    ROOT = Path("/sys/fs/cgroup")
    CONTROLLERS = ("memory", "pids", "cpu")

    def __init__(self, name: str) -> None:
        self.paths = {c: self.ROOT / c / "codedojo" / name for c in self.CONTROLLERS}

    @classmethod
    def available(cls) -> bool:
        return is_root() and all(
            (cls.ROOT / c / "cgroup.procs").exists() and not (cls.ROOT / c / "cgroup.subtree_control").exists()
            for c in cls.CONTROLLERS
        )

    def create(self, *, memory_mb: int | None, max_processes: int, cpus: float | None) -> None:
        for path in self.paths.values():
            path.mkdir(parents=True, exist_ok=True)
        if memory_mb is not None:
            limit = str(memory_mb * 2**20)
            (self.paths["memory"] / "memory.limit_in_bytes").write_text(limit)
            memsw = self.paths["memory"] / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                with contextlib.suppress(OSError):
                    memsw.write_text(limit)
        (self.paths["pids"] / "pids.max").write_text(str(max_processes))
        if cpus is not None:
            period = 100_000
            (self.paths["cpu"] / "cpu.cfs_period_us").write_text(str(period))
            (self.paths["cpu"] / "cpu.cfs_quota_us").write_text(str(max(1000, int(cpus * period))))

    @property
    def procs_files(self) -> list[str]:
        return [str(p / "cgroup.procs") for p in self.paths.values()]

    def pids(self) -> list[int]:
        try:
            text = (self.paths["pids"] / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(x) for x in text.split()]

    def oom_kills(self) -> int:
        try:
            text = (self.paths["memory"] / "memory.oom_control").read_text()
        except OSError:
            return 0
        m = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        return int(m.group(1)) if m else 0

    def kill_all(self, *, timeout_sec: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_sec
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> None:
        self.kill_all()
        for path in self.paths.values():
            for _ in range(200):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        raise
                    time.sleep(0.005)
