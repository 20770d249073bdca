"""Tar streams for sandboxes whose files move through an API (docker's put_archive / get_archive).

Packing takes host files by content (a host symlink to a file is sent as the file, a symlink to a
directory as an empty directory, as the local backend copies them). Unpacking trusts nothing that comes
out of a sandbox: only regular files and directories are written, member names must stay below the
destination, symlinks/hard links/devices/fifos are skipped, and nothing on the host is followed through a
link. Archives are streamed, so a large file never sits in memory whole.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from codedojo.sandbox.base import SandboxPathError

# Archives up to this size are built in memory; larger ones spill to a temporary file.
_SPOOL_BYTES = 16 << 20


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info


def pack(source: Path, *, name: str, parents: Iterable[str] = ()) -> IO[bytes]:
    """A tar (rewound) holding `source` (a file, or a directory's tree) as `name`, under new `parents`.

    A directory packed with name "" contributes its contents only. Directories are made 0755 whatever
    their mode on the host (a private temporary directory must not become unreadable in the sandbox).

    `parents` are directories to create first, outermost first, e.g. ("a", "a/b") for name "a/b/c".
    Every member belongs to root; file modes are kept.
    """
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for parent in parents:
            tar.addfile(_dir_info(parent))
        if source.is_dir():
            _add_tree(tar, source, name)
        else:
            _add_file(tar, source, name)
    spool.seek(0)
    return spool


def pack_bytes(data: bytes, *, name: str, parents: Iterable[str] = ()) -> IO[bytes]:
    """A tar (rewound) holding one file `name` with `data` (mode 0644), under new `parents`."""
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for parent in parents:
            tar.addfile(_dir_info(parent))
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    spool.seek(0)
    return spool


def _add_file(tar: tarfile.TarFile, path: Path, name: str) -> None:
    with path.open("rb") as f:  # follows a host symlink on purpose: the task's files are trusted
        st = os.fstat(f.fileno())
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = st.st_size, stat.S_IMODE(st.st_mode), int(st.st_mtime)
        tar.addfile(info, f)


def _add_tree(tar: tarfile.TarFile, root: Path, name: str) -> None:
    if name:  # "" adds the tree's contents only, leaving the existing directory they go into as it is
        tar.addfile(_dir_info(name))
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        for d in sorted(dirnames):
            tar.addfile(_dir_info(posixpath.join(name, *rel.parts, d)))
        for f in sorted(filenames):
            _add_file(tar, Path(dirpath) / f, posixpath.join(name, *rel.parts, f))


class _ChunkStream(io.RawIOBase):
    """A readable file over an iterator of byte chunks (an HTTP response body)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def open_stream(chunks: Iterable[bytes]) -> tarfile.TarFile:
    """A tar reader over a chunked stream, reading members in order without seeking."""
    return tarfile.open(fileobj=io.BufferedReader(_ChunkStream(chunks), 1 << 16), mode="r|")


def read_single_file(chunks: Iterable[bytes], *, label: str, max_bytes: int | None = None,
                     into: IO[bytes] | None = None) -> bytes:
    """The first member of an archive of one file: its first `max_bytes` (or all of it written to `into`)."""
    with open_stream(chunks) as tar:
        member = tar.next()
        if member is None:
            raise FileNotFoundError(label)
        if not member.isreg():
            what = "a symlink" if member.issym() or member.islnk() else "not a regular file"
            raise SandboxPathError(f"{label}: {what}; transfers never follow links")
        f = tar.extractfile(member)
        assert f is not None
        if into is not None:
            shutil.copyfileobj(f, into)
            return b""
        return f.read(member.size if max_bytes is None else min(max_bytes, member.size))


def extract_tree(chunks: Iterable[bytes], dest: Path) -> None:
    """Write the directories and regular files of a directory's archive into `dest`.

    The archive's top entry is the directory itself (docker names members `<dir>/...`); that first
    component is dropped. Anything else (links, devices, fifos, names with `..` or absolute names) is
    skipped, and a host path that is not a plain directory is never written through.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with open_stream(chunks) as tar:
        for member in tar:
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if not parts or ".." in parts or member.name.startswith("/"):
                continue
            rel = parts[1:]
            if not rel or not (member.isdir() or member.isreg()):
                continue
            target = _safe_parent(dest, rel[:-1]) / rel[-1]
            if member.isdir():
                if not target.is_symlink() and not target.exists():
                    target.mkdir()
                continue
            f = tar.extractfile(member)
            assert f is not None
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(f, out)
                os.fchmod(out.fileno(), member.mode & 0o755)


def _safe_parent(dest: Path, parts: list[str]) -> Path:
    """`dest/parts...`, creating missing directories and refusing a link or file in the way."""
    current = dest
    for part in parts:
        current = current / part
        try:
            st = current.lstat()
        except FileNotFoundError:
            current.mkdir()
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise SandboxPathError(f"{current}: not a plain directory on the host; refusing to write through it")
    return current
