"""The local sandbox backend: bubblewrap namespaces over the host's read-only system, no container engine.

Layout inside a sandbox: the host's /usr, /bin, /sbin, /lib*, /etc read-only; the task workspace at its
workdir as an overlayfs copy-on-write layer over a cached, prepared lower directory (starting an episode
copies nothing); private writable /tmp, /root and /logs; directories created by uploads (/tests,
/solution, ...); a fresh /proc and a minimal /dev. Nothing else of the host exists inside.

Threat model. The agent is untrusted code that may try to read host secrets, write to the host, reach the
network, exhaust resources, outlive its episode or tamper with grading. Running as root (the supported
set-up), the sandbox provides, each with an adversarial test in tests/test_sandbox_security.py:

1. No network: a fresh network namespace with only a loopback device, so the host's loopback services
   and every outside address are unreachable. A task that allows internet is refused unless the caller
   decides: `network=False` keeps this claim, `network=True` shares the host's network and gives it up.
2. No host secrets: /root, /home, /tmp, /var, /run, /srv, /mnt, /opt and the project checkout are not
   mounted; the system directories are read-only and commands run as an unprivileged host uid (shown
   as root inside a user namespace), so root-only files such as /etc/shadow are unreadable.
3. No writes to the host: the only writable places are the overlay's upper layer and the sandbox's own
   tmpfs, both discarded on close.
4. Bounded resources: a cgroup per sandbox caps memory (the OOM killer acts inside it), processes
   (fork bombs) and CPU share; rlimits cap CPU seconds per process and file size; a tmpfs caps storage;
   output is capped per stream (the middle is dropped and counted).
5. Nothing outlives a command or the episode: each command runs in a new PID namespace whose init dies
   with bwrap, so a timeout kills the whole process tree; close() kills what is left in the
   cgroup, unmounts, and deletes every file.
6. Grading is not tamperable by the agent: tests/ is uploaded only after the agent finishes and files
   are transferred by the host without following links (a planted symlink cannot redirect a transfer);
   `..` and relative paths are refused; the trial runner deletes stale reward files before verifying.

Not covered: kernel exploits (namespaces share the host kernel; use a VM-backed backend such as Modal
for hostile code at scale); side channels and timing; CPU time of a process tree beyond the cgroup's CPU
share plus the command timeout; disk I/O bandwidth; the host's read-only system files are readable (what
a container image would show). Without root, overlayfs and cgroups are unavailable: the workspace is
copied, memory is limited per process (RLIMIT_AS) and processes per uid (RLIMIT_NPROC), storage is not
limited, and the sandbox runs as the invoking user; cgroup v2-only hosts get the same rlimit fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import stat
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from codedojo.sandbox.base import (
    DEFAULT_STORAGE_MB,
    LOG_DIRS,
    PROTECTED_MOUNTS,
    ExecResult,
    NetworkPolicyError,
    SandboxClosedError,
    SandboxError,
    SandboxLimits,
    SandboxPathError,
    SandboxStartError,
    is_root_user,
    limits_for_task,
    refuse_other_users,
    sandbox_path,
    task_environment,
)
from codedojo.sandbox.bwrap import Bind, IsolatedShell, Launch
from codedojo.sandbox.host import SANDBOX_PATH, CgroupV1, is_root, mount, state_root, umount
from codedojo.sandbox.workspace import plan_for, prepare_environment
from codedojo.tasks.task import Task

DEFAULT_SANDBOX_UID = 900_000
_swept = False


def sandbox_uid() -> int | None:
    """The host uid sandboxes run as: unprivileged and unused by real accounts (None when not root)."""
    if not is_root():
        return None
    return int(os.environ.get("CODEDOJO_SANDBOX_UID", DEFAULT_SANDBOX_UID))


class LocalSandbox:
    """A sandbox made of bubblewrap namespaces; create it with `await LocalSandbox.start(task)`."""

    def __init__(self, *, sandbox_id: str, root: Path, workdir: str, env: dict[str, str],
                 limits: SandboxLimits, uid: int | None, cgroup: CgroupV1 | None, overlay: bool) -> None:
        self.sandbox_id = sandbox_id
        self._root = root
        self._workdir = workdir
        self._env = env
        self.limits = limits
        self._cgroup = cgroup
        self._overlay = overlay
        self._uid = uid
        self._lock = asyncio.Lock()
        self._closed = False
        self._shell: IsolatedShell | None = None
        self._infrastructure_pids: frozenset[int] = frozenset()
        self._mounts = _mounts(root, workdir)

    @property
    def workdir(self) -> str:
        return self._workdir

    @classmethod
    async def start(cls, task: Task, *, limits: SandboxLimits | None = None) -> LocalSandbox:
        _sweep_orphans_once()
        # Every refusal comes before the workspace is built: a task this backend cannot run costs nothing.
        refuse_other_users(task, backend="local", reason="runs every command as root (one uid mapped into its user "
                           "namespace), so it cannot run a phase as another user")
        try:
            limits = limits_for_task(task, limits or SandboxLimits(), backend="local", follows_task=False)
        except NetworkPolicyError:
            # An environment this backend cannot realise at all (prebuilt image, unsupported Dockerfile) is the
            # refusal to report: no network choice would make the task run here.
            await asyncio.to_thread(plan_for, task)
            raise
        task_env = task_environment(task)
        uid = sandbox_uid()
        prepared = await prepare_environment(task, uid=uid)
        sandbox_id = f"{task.name[:40].replace('/', '_')}-{secrets.token_hex(4)}"
        root = state_root() / sandbox_id
        overlay = is_root()
        cgroup = CgroupV1(sandbox_id) if CgroupV1.available() else None
        env = {"PATH": SANDBOX_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root", **prepared.env, **task_env}
        sandbox = cls(sandbox_id=sandbox_id, root=root, workdir=prepared.workdir, env=env, limits=limits,
                      uid=uid, cgroup=cgroup, overlay=overlay)
        try:
            await asyncio.to_thread(_make_layout, root, lower=prepared.lower, uid=uid, overlay=overlay,
                                    storage_mb=limits.storage_mb)
            if cgroup is not None:
                cgroup.create(memory_mb=limits.memory_mb, max_processes=limits.max_processes, cpus=limits.cpus)
            launch = Launch(
                uid=uid,
                cgroup_procs=tuple(cgroup.procs_files) if cgroup else (),
                limits=limits,
                rlimit_memory=cgroup is None,
                nproc_limit=None if cgroup else _nproc_budget(limits.max_processes),
            )
            sandbox._shell = await IsolatedShell.start(
                launch=launch, binds=sandbox._binds(), cwd=prepared.workdir,
                timeout_sec=task.config.environment.build_timeout_sec,
            )
            if cgroup is not None:
                sandbox._infrastructure_pids = frozenset(cgroup.pids())  # the init
            if cgroup is not None and sandbox._shell.init_pid_host is not None:
                # The OOM killer must pick the agent's processes, never the init that runs them.
                with contextlib.suppress(OSError):
                    Path(f"/proc/{sandbox._shell.init_pid_host}/oom_score_adj").write_text("-1000")
        except BaseException as e:
            await sandbox.close()
            if isinstance(e, OSError):
                raise SandboxStartError(f"could not set up the sandbox for {task.name}: {e}") from e
            raise
        return sandbox

    # -- commands -------------------------------------------------------------------------------

    async def exec(self, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                   timeout_sec: float | None = None, user: str | int | None = None) -> ExecResult:
        if not is_root_user(user):
            raise SandboxError(f"sandbox {self.sandbox_id}: the local backend runs every command as root (one uid "
                               f"mapped into its user namespace) and cannot run one as {user!r}; use the docker "
                               "backend for tasks that set a user")
        async with self._lock:
            self._check_alive()
            cwd = sandbox_path(cwd) if cwd else self._workdir
            oom_before = self._cgroup.oom_kills() if self._cgroup else 0
            assert self._shell is not None
            result = await self._shell.exec(
                command, env={**self._env, **(env or {})}, cwd=cwd,
                timeout_sec=timeout_sec if timeout_sec is not None else self.limits.default_timeout_sec,
            )
            if self._cgroup is not None and self._cgroup.oom_kills() > oom_before:
                result = replace(result, oom_killed=True)
            return result

    def pids(self) -> list[int]:
        """Host pids of every process in the sandbox, its init included (empty without cgroups): what an
        operator kills to take the sandbox down from outside."""
        return self._cgroup.pids() if self._cgroup is not None else []

    def command_pids(self) -> list[int]:
        """Host pids of processes started by commands that are still alive (empty between commands)."""
        if self._cgroup is None:
            return []
        return [p for p in self._cgroup.pids() if p not in self._infrastructure_pids]

    def _binds(self) -> list[Bind]:
        return [Bind(str(host), target, True) for target, host in self._mounts.items()]

    def _check_alive(self) -> None:
        if self._closed:
            raise SandboxClosedError(f"sandbox {self.sandbox_id} is closed")
        if self._shell is None or not self._shell.alive:
            raise SandboxClosedError(f"sandbox {self.sandbox_id} died (its init process is gone)")
        ws = self._mounts[self._workdir]
        if not ws.is_dir() or (self._overlay and not os.path.ismount(ws)):
            raise SandboxClosedError(f"sandbox {self.sandbox_id} lost its workspace (it was torn down)")

    # -- files ----------------------------------------------------------------------------------

    def _host_path(self, path: str, *, create_parents: bool) -> Path:
        """The host path behind a sandbox path, refusing anything that is or passes through a symlink."""
        path = sandbox_path(path)
        for target in sorted(self._mounts, key=len, reverse=True):
            if path == target or path.startswith(target.rstrip("/") + "/"):
                base, rel = self._mounts[target], path[len(target):].strip("/")
                break
        else:
            places = ", ".join(sorted(self._mounts))
            raise SandboxPathError(f"{path}: files can be transferred only under {places}")
        current = base
        parts = [p for p in rel.split("/") if p]
        for i, part in enumerate(parts):
            current = current / part
            try:
                st = current.lstat()
            except FileNotFoundError:
                if i < len(parts) - 1:
                    if not create_parents:
                        raise FileNotFoundError(path) from None
                    current.mkdir()
                    self._own(current)
                continue
            if stat.S_ISLNK(st.st_mode):
                raise SandboxPathError(f"{path}: {'/'.join(parts[: i + 1])} is a symlink; transfers never follow links")
        return current

    def _protected(self, path: Path) -> bool:
        return any(path == p or p in path.parents for p in (self._mounts[m] for m in PROTECTED_MOUNTS))

    def _own(self, path: Path) -> None:
        """Hand a host-created file to the sandbox user; in the host-filled directories (/tests, /solution),
        which stay the host's, make it readable (and directories searchable) by the sandbox user instead."""
        if self._protected(path):
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            os.chmod(path, mode | (0o555 if stat.S_ISDIR(os.lstat(path).st_mode) else 0o444))
            return
        if self._uid is None:
            return
        os.lchown(path, self._uid, self._uid)

    async def upload_file(self, source: Path, target: str) -> None:
        async with self._lock:
            self._check_alive()
            dest = self._host_path(target, create_parents=True)
            await asyncio.to_thread(self._put_file, Path(source), dest)

    def _put_file(self, source: Path, dest: Path) -> None:
        if dest.is_dir() and not dest.is_symlink():
            raise SandboxPathError(f"{dest.name}: a directory is in the way of the upload")
        tmp = dest.with_name(f".{dest.name}.codedojo-upload")
        shutil.copyfile(source, tmp, follow_symlinks=True)
        os.chmod(tmp, stat.S_IMODE(os.stat(source).st_mode))
        self._own(tmp)
        os.replace(tmp, dest)

    async def upload_dir(self, source: Path, target: str) -> None:
        async with self._lock:
            self._check_alive()
            dest = self._host_path(target, create_parents=True)
            if sandbox_path(target) in PROTECTED_MOUNTS:  # never merge with what might have been planted
                await asyncio.to_thread(_empty_dir, dest)
            await asyncio.to_thread(self._put_dir, Path(source), dest)

    def _put_dir(self, source: Path, dest: Path) -> None:
        if dest.is_symlink():
            raise SandboxPathError(f"{dest}: is a symlink")
        dest.mkdir(exist_ok=True)
        self._own(dest)
        for dirpath, dirnames, filenames in os.walk(source):
            rel = Path(dirpath).relative_to(source)
            for name in dirnames:
                d = dest / rel / name
                if d.is_symlink():
                    raise SandboxPathError(f"{d}: is a symlink")
                d.mkdir(exist_ok=True)
                self._own(d)
            for name in filenames:
                self._put_file(Path(dirpath) / name, dest / rel / name)

    async def download_file(self, source: str, target: Path) -> None:
        async with self._lock:
            self._check_alive()
            src = self._host_path(source, create_parents=False)
            await asyncio.to_thread(_copy_regular, src, Path(target), source)

    async def download_dir(self, source: str, target: Path) -> None:
        async with self._lock:
            self._check_alive()
            src = self._host_path(source, create_parents=False)
            await asyncio.to_thread(_copy_tree_safely, src, Path(target))

    async def read_file(self, path: str, *, max_bytes: int = 1 << 20) -> bytes:
        async with self._lock:
            self._check_alive()
            src = self._host_path(path, create_parents=False)
            fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise SandboxPathError(f"{path}: not a regular file")
                return os.read(fd, max_bytes)
            finally:
                os.close(fd)

    async def write_file(self, path: str, data: bytes) -> None:
        async with self._lock:
            self._check_alive()
            dest = self._host_path(path, create_parents=True)
            if dest.is_dir() and not dest.is_symlink():
                raise SandboxPathError(f"{path}: is a directory")
            tmp = dest.with_name(f".{dest.name}.codedojo-upload")
            tmp.write_bytes(data)
            self._own(tmp)
            os.replace(tmp, dest)

    async def remove(self, path: str) -> None:
        async with self._lock:
            self._check_alive()
            try:
                target = self._host_path(path, create_parents=False)
            except FileNotFoundError:
                return
            with contextlib.suppress(FileNotFoundError):
                if target.is_dir() and not target.is_symlink():
                    raise SandboxPathError(f"{path}: is a directory")
                target.unlink()

    # -- lifecycle ------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._shell is not None:
            await asyncio.shield(self._shell.close())
        await asyncio.shield(asyncio.to_thread(_teardown, self._root, self._cgroup))

    async def __aenter__(self) -> LocalSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _nproc_budget(max_processes: int) -> int:
    """RLIMIT_NPROC counts every process of the uid, so the sandbox's budget comes on top of those."""
    uid = os.geteuid()
    mine = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    mine += 1
    return mine + max_processes


def _mounts(root: Path, workdir: str) -> dict[str, Path]:
    data = root / "data"
    return {workdir: root / "ws", "/tmp": data / "tmp", "/root": data / "home", "/logs": data / "logs",
            **{m: data / m.strip("/") for m in PROTECTED_MOUNTS}}


def _make_layout(root: Path, *, lower: Path, uid: int | None, overlay: bool, storage_mb: int | None) -> None:
    data, ws = root / "data", root / "ws"
    data.mkdir(parents=True)
    ws.mkdir()
    (root / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
    if overlay:
        mount("tmpfs", data, "tmpfs", options=f"size={storage_mb or DEFAULT_STORAGE_MB}m,mode=0755")
    owned = ("upper", "work", "tmp", "home", *(f"logs/{d}" for d in LOG_DIRS))
    for name in (*owned, "logs", *(m.strip("/") for m in PROTECTED_MOUNTS)):
        (data / name).mkdir(parents=True, exist_ok=True)
    os.chmod(data / "tmp", 0o1777)
    if uid is not None:
        for name in owned:
            os.lchown(data / name, uid, uid)
    if overlay:
        if any(c in str(lower) for c in ",:"):
            raise OSError(f"the workspace cache path {lower} contains ',' or ':', which overlayfs cannot take")
        mount("overlay", ws, "overlay",
              options=f"lowerdir={lower},upperdir={data / 'upper'},workdir={data / 'work'}")
    else:
        shutil.copytree(lower, ws, symlinks=True, dirs_exist_ok=True)


def _teardown(root: Path, cgroup: CgroupV1 | None) -> None:
    if cgroup is not None:
        cgroup.remove()
    umount(root / "ws")
    umount(root / "data")
    shutil.rmtree(root, ignore_errors=True)
    if root.exists():  # a busy lazy unmount can leave the directory for a moment
        time.sleep(0.05)
        shutil.rmtree(root, ignore_errors=True)


def _empty_dir(path: Path) -> None:
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _copy_regular(src: Path, dest: Path, label: str) -> None:
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SandboxPathError(f"{label}: not a regular file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.dup(fd), "rb") as f_in, dest.open("wb") as f_out:
            shutil.copyfileobj(f_in, f_out)
    finally:
        os.close(fd)


def _copy_tree_safely(src: Path, dest: Path) -> None:
    """Copy directories and regular files only: symlinks, devices, fifos and sockets are skipped."""
    if not src.is_dir() or src.is_symlink():
        raise SandboxPathError(f"{src.name}: not a directory")
    dest.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(src):
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            _copy_tree_safely(Path(entry.path), dest / entry.name)
        elif stat.S_ISREG(st.st_mode):
            _copy_regular(Path(entry.path), dest / entry.name, entry.name)


def _start_time(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _sweep_orphans_once() -> None:
    """Tear down sandboxes whose owning process is gone (a run killed with SIGKILL leaves mounts)."""
    global _swept
    if _swept:
        return
    _swept = True
    root = state_root()
    if not root.is_dir():
        return
    for entry in root.iterdir():
        try:
            pid_text, start = (entry / "owner").read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if pid == os.getpid() or (Path(f"/proc/{pid}").exists() and _start_time(pid) == start):
            continue
        cgroup = CgroupV1(entry.name) if CgroupV1.available() else None
        with contextlib.suppress(OSError):
            _teardown(entry, cgroup)
