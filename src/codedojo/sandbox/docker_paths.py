"""Where a transfer lands in a container, refusing any path that passes through a symlink.

The engine's archive endpoints resolve symlinks inside the container, so a link the agent planted
(/logs/verifier -> /app, /app/x -> /etc/shadow) would silently redirect a transfer. Every component of
a path is therefore stat'ed first (HEAD /containers/{id}/archive, about 5 ms each) and a link anywhere
is refused, as the local backend does. The check is sound because transfers run between commands, when
no process of the agent is alive to swap a directory for a link.
"""

from __future__ import annotations

import base64
import json
import posixpath
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors

from codedojo.sandbox.base import SandboxPathError, sandbox_path

# Type bits of Go's os.FileMode, which the engine reports.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_TYPE = _MODE_DIR | _MODE_SYMLINK | 1 << 26 | 1 << 25 | 1 << 24 | 1 << 21 | 1 << 19


@dataclass(frozen=True, kw_only=True)
class Where:
    """A resolved sandbox path and, for writes, how to reach it with one archive."""

    path: str
    """The normalised absolute path."""
    exists: bool
    is_dir: bool
    is_regular: bool
    base: str
    """The deepest existing directory on the way: archives are extracted there."""
    parents: tuple[str, ...]
    """Missing directories between `base` and the path, relative to `base`, outermost first."""
    name: str
    """The path relative to `base` ("" when the path is `base` itself)."""

    def require_file(self, label: str) -> None:
        if not self.exists:
            raise FileNotFoundError(label)
        if not self.is_regular:
            raise SandboxPathError(f"{label}: not a regular file")


class PathProbe:
    """Stats paths in one container through the Docker API."""

    def __init__(self, *, client: docker.DockerClient, container_id: str) -> None:
        self._client = client
        self._container_id = container_id

    def stat(self, path: str) -> dict[str, Any] | None:
        """The engine's stat of `path` without following a final symlink; None when absent."""
        api = self._client.api
        # The SDK wraps GET and PUT of this endpoint but not HEAD, which is the one that only stats.
        response = api.head(api._url("/containers/{0}/archive", self._container_id), params={"path": path})
        header = response.headers.get("X-Docker-Container-Path-Stat")
        if response.status_code == 404 and not header:
            # A HEAD reply has no body to tell a missing path from a missing container: ask about the latter.
            api.inspect_container(self._container_id)
            return None
        if response.status_code >= 400 and response.status_code != 404:
            api._raise_for_status(response)
        if not header:
            return None
        value: dict[str, Any] = json.loads(base64.b64decode(header))
        return value

    def resolve(self, path: str, *, create_parents: bool) -> Where:
        """Check every component of `path`; FileNotFoundError when a parent is missing and not to be made."""
        path = sandbox_path(path)
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise SandboxPathError("/ itself cannot be transferred; name a file or directory below it")
        base = "/"
        missing: list[str] = []
        for i, part in enumerate(parts):
            current = posixpath.join(base, part) if not missing else None
            st = self.stat(current) if current is not None else None
            last = i == len(parts) - 1
            if st is not None and int(st["mode"]) & _MODE_SYMLINK:
                raise SandboxPathError(f"{path}: {current} is a symlink; transfers never follow links")
            if st is None:
                if not last and not create_parents:
                    raise FileNotFoundError(path)
                missing.append(part)
                continue
            is_dir = bool(int(st["mode"]) & _MODE_DIR)
            if last:
                return Where(path=path, exists=True, is_dir=is_dir, is_regular=not int(st["mode"]) & _MODE_TYPE,
                             base=path if is_dir else base, parents=(), name="" if is_dir else part)
            if not is_dir:
                raise SandboxPathError(f"{path}: {current} is not a directory")
            base = current  # type: ignore[assignment]
        parents = tuple("/".join(missing[: j + 1]) for j in range(len(missing) - 1))
        return Where(path=path, exists=False, is_dir=False, is_regular=False, base=base, parents=parents,
                     name="/".join(missing))
