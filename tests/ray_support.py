"""A real local Ray head for the slime launch tests: one CPU, its own ports and temporary directory, the job
server (Ray's dashboard process serves the job API) bound to 127.0.0.1. The fixture stops exactly the
processes its `ray start --block` started (their process group), never `ray stop`, which would stop every
Ray cluster on the machine."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

STARTUP_LIMIT_SEC = 180.0
"""How long the head may take to answer (a bound for a stuck start, not a performance claim)."""


@dataclass(frozen=True)
class RayHead:
    address: str
    """The job server's URL (what `ray job submit --address` takes)."""
    startup_sec: float
    """Seconds from `ray start` to the job API answering (printed; the CI budget question)."""


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture(scope="module", name="ray_head")
def ray_head_fixture() -> Iterator[RayHead]:
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:  # ray is in the dev extra: a missing one is a broken set-up, never a reason to skip
        pytest.fail("ray is not installed: the live Ray tests need it; run `pip install -e .[dev]`", pytrace=False)
    gcs, dashboard, client, agent_http, agent_grpc, metrics, runtime_env, node, objects = _free_ports(9)
    temp = tempfile.mkdtemp(prefix="cdray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "RAY_USAGE_STATS_ENABLED": "0"}
    for name in ("RAY_ADDRESS", "CODEDOJO_RAY_ADDRESS"):
        env.pop(name, None)
    argv = [ray, "start", "--head", "--block", "--num-cpus", "1", "--num-gpus", "0", "--port", str(gcs),
            "--node-ip-address", "127.0.0.1", "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
            "--dashboard-port", str(dashboard), "--ray-client-server-port", str(client),
            "--dashboard-agent-listen-port", str(agent_http), "--dashboard-agent-grpc-port", str(agent_grpc),
            "--metrics-export-port", str(metrics), "--runtime-env-agent-port", str(runtime_env),
            "--node-manager-port", str(node), "--object-manager-port", str(objects),
            "--object-store-memory", str(100 * 1024 * 1024), "--temp-dir", temp, "--disable-usage-stats"]
    log = open(Path(temp) / "ray-start.log", "w")  # closed in finally
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"ray start exited with {process.returncode}: "
                                   f"{(Path(temp) / 'ray-start.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{address}/api/version", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - started > STARTUP_LIMIT_SEC:
                raise RuntimeError(f"the Ray head did not answer at {address} within {STARTUP_LIMIT_SEC:.0f} s")
            time.sleep(0.5)
        head = RayHead(address=address, startup_sec=time.monotonic() - started)
        print(f"\nRay head at {address} answered after {head.startup_sec:.1f} s")
        yield head
    finally:
        _stop_group(process)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the head's process group (only what `ray start` started), SIGKILL to what still runs after
    5 s (gcs_server was seen to outlive SIGTERM). Ray's workers start their own sessions and exit once the
    raylet they serve is gone."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while _live_members(process.pid) and time.monotonic() < deadline:
        process.poll()
        time.sleep(0.2)
    for pid in _live_members(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=10)


def _live_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that have not exited (zombies, reparented away from their parent, are left)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members
