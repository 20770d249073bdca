"""Sandboxes: where an agent's commands run. See `base` for the protocol and `local` for the default backend.

Backends are imported only when used, so a backend's heavy dependencies (docker SDK, modal) are needed
only by the users of that backend.
"""

from __future__ import annotations

import importlib
from typing import Any

from codedojo.sandbox.base import (
    ExecResult,
    Sandbox,
    SandboxClosedError,
    SandboxError,
    SandboxLimits,
    SandboxPathError,
    SandboxStartError,
)
from codedojo.tasks.task import Task

# Backend name -> "module:class"; the class has `async start(task, *, limits) -> Sandbox`.
BACKENDS = {
    "local": "codedojo.sandbox.local:LocalSandbox",
    "modal": "codedojo.integrations.modal_sandbox:ModalSandbox",
    "docker": "codedojo.sandbox.docker:DockerSandbox",
}

__all__ = [
    "BACKENDS",
    "ExecResult",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "SandboxLimits",
    "SandboxPathError",
    "SandboxStartError",
    "start_sandbox",
]


def backend_class(name: str) -> Any:
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of: {', '.join(sorted(BACKENDS))}") from None
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


async def start_sandbox(task: Task, *, backend: str = "local", limits: SandboxLimits | None = None) -> Sandbox:
    """Start a sandbox for `task` on the named backend."""
    sandbox: Sandbox = await backend_class(backend).start(task, limits=limits)
    return sandbox
