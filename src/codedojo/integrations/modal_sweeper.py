"""Finding and removing Modal sandboxes left behind by runs that died.

An interrupted `Sandbox.create` still leaves a running, billed sandbox, and a run killed mid-episode
never closes its sandboxes. Every sandbox codedojo creates carries tags naming its owner (run id, host,
process id, creation time, lifetime deadline). A sandbox is an orphan when:

* its owner process ran on this host and is gone (the common case: a crashed run restarted on the same
  head node), or
* its run id is one the caller declares dead, or
* it is past its lifetime deadline (Modal should have stopped it; terminating is harmless).

Sandboxes without codedojo's managed tag, and sandboxes of live owners on other hosts, are never
touched: a sweeper only removes what codedojo made and provably nobody uses.

The listing is a small protocol (`list_sandboxes(tags)` -> handles with `object_id`, `get_tags()`,
`terminate()`), so the logic is tested against a fake; `modal_sandbox.ModalListing` is the real one.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

MANAGED = "codedojo.managed"
RUN = "codedojo.run"
HOST = "codedojo.host"
PID = "codedojo.pid"
CREATED = "codedojo.created"
DEADLINE = "codedojo.deadline"
TASK = "codedojo.task"
# A run id for this process unless the launcher names one (slime's rollout process inherits it).
PROCESS_RUN_ID = os.environ.get("CODEDOJO_RUN_ID") or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class SandboxHandle(Protocol):
    object_id: str

    async def get_tags(self) -> dict[str, str]: ...

    async def terminate(self) -> None: ...


class SandboxListing(Protocol):
    async def list_sandboxes(self, tags: Mapping[str, str]) -> list[SandboxHandle]: ...


def owner_tags(*, task_name: str, lifetime_sec: int, now: float | None = None, run_id: str | None = None,
               host: str | None = None, pid: int | None = None) -> dict[str, str]:
    """The tags a new sandbox carries."""
    created = int(time.time() if now is None else now)
    return {MANAGED: "1", RUN: run_id or PROCESS_RUN_ID, HOST: host or socket.gethostname(),
            PID: str(os.getpid() if pid is None else pid), CREATED: str(created),
            DEADLINE: str(created + lifetime_sec), TASK: task_name[:60]}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def orphan_reason(tags: Mapping[str, str], *, now: float, host: str, dead_runs: Collection[str] = (),
                  alive: Callable[[int], bool] = pid_alive, live_run: str = PROCESS_RUN_ID) -> str | None:
    """Why a sandbox with `tags` is an orphan, or None when it must be left alone."""
    if tags.get(MANAGED) != "1":
        return None
    run = tags.get(RUN, "")
    if run == live_run:
        return None  # this very process owns it
    if run in dead_runs:
        return f"run {run} was declared dead"
    deadline = tags.get(DEADLINE, "")
    if deadline.isdigit() and now > int(deadline):
        return f"past its lifetime deadline ({int(now) - int(deadline)} s ago)"
    pid = tags.get(PID, "")
    if tags.get(HOST) == host and pid.isdigit() and not alive(int(pid)):
        return f"its owner (pid {pid} on {host}) is gone"
    return None


@dataclass(frozen=True, kw_only=True)
class Swept:
    object_id: str
    run: str
    reason: str


async def sweep(listing: SandboxListing, *, dead_runs: Collection[str] = (), now: float | None = None,
                host: str | None = None, alive: Callable[[int], bool] = pid_alive,
                live_run: str = PROCESS_RUN_ID) -> list[Swept]:
    """Terminate every orphaned codedojo sandbox the listing shows; returns what was removed."""
    removed = []
    clock = time.time() if now is None else now
    here = host or socket.gethostname()
    for handle in await listing.list_sandboxes({MANAGED: "1"}):
        with contextlib.suppress(Exception):  # a sandbox that vanished meanwhile is already swept
            tags = await handle.get_tags()
            reason = orphan_reason(tags, now=clock, host=here, dead_runs=dead_runs, alive=alive, live_run=live_run)
            if reason is None:
                continue
            await handle.terminate()
            removed.append(Swept(object_id=handle.object_id, run=tags.get(RUN, ""), reason=reason))
    return removed
