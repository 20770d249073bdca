"""The docker sandbox's behaviour, against a real engine (podman's Docker API unless DOCKER_HOST is set):
commands, files, images, labels, limits, cleanup. Its security claims are in test_sandbox_docker_security.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import podman_support
from codedojo.sandbox import SandboxClosedError, SandboxLimits, SandboxStartError, start_sandbox
from codedojo.tasks.config import EnvironmentConfig
from conftest import DockerEngine, MakeTask

docker = podman_support.docker_sdk()  # skipped without the SDK, failed under CI

from codedojo.sandbox import docker as docker_sandbox  # noqa: E402
from codedojo.sandbox import docker_host  # noqa: E402 (needs the SDK)
from codedojo.sandbox.docker import DockerSandbox  # noqa: E402


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@pytest.fixture
def engine(docker_engine: DockerEngine) -> Iterator[docker.DockerClient]:
    client = docker.DockerClient(base_url=docker_engine.host, version=docker_host.API_VERSION)
    yield client
    client.close()


def test_commands_run_in_the_workdir_with_the_image_env(engine: object, make_task: MakeTask) -> None:
    # The image's ENTRYPOINT exits at once: the sandbox must replace it with its own keepalive.
    task = make_task(dockerfile="FROM debian:bookworm-slim\nENV GREETING=hi\nWORKDIR /app\nCOPY src/ /app/\n"
                                'ENTRYPOINT ["/bin/false"]\nCMD ["ignored"]\n',
                     files={"environment/src/data.txt": "payload\n", "environment/src/sub/x.py": "X = 1\n"})

    async def go() -> None:
        async with await DockerSandbox.start(task) as sb:
            r = await sb.exec("pwd; cat data.txt; echo $GREETING; python3 -c 'import sub.x as m; print(m.X)'")
            assert (r.return_code, r.stdout) == (0, "/app\npayload\nhi\n1\n")
            r = await sb.exec("echo $EXTRA; pwd", cwd="/tmp", env={"EXTRA": "given"})
            assert r.stdout == "given\n/tmp\n"
            r = await sb.exec("exit 7")
            assert r.return_code == 7 and not r.timed_out and not r.oom_killed
            r = await sb.exec("echo out; echo err >&2; printf 'no newline' >&2")
            # r in the message: once, under a loaded machine, this came back empty ('', ''); what else it said
            # (return code, timed_out, duration) is what a rerun needs to tell why
            assert (r.stdout, r.stderr) == ("out\n", "err\nno newline"), r
            r = await sb.exec("true", cwd="/nowhere")
            assert r.return_code != 0 and "/nowhere" in r.stderr
            r = await sb.exec("ls /logs; cat /proc/1/cmdline | tr '\\0' ' '")
            assert r.stdout.startswith("agent\nartifacts\nverifier\n") and "codedojo-keepalive" in r.stdout

    run(go())


def test_the_environment_image_is_built_once_and_reused(engine: docker.DockerClient, make_task: MakeTask) -> None:
    marker = "built-" + os.urandom(4).hex()
    task = make_task(dockerfile=f"FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo {marker} > built.txt && "
                                "date +%s%N > when\n")

    async def when() -> str:
        async with await DockerSandbox.start(task) as sb:
            return (await sb.exec("cat built.txt when")).stdout

    first, second = run(when()), run(when())
    assert first.startswith(marker) and first == second
    tag = f"{docker_host.ENV_IMAGE_REPOSITORY}:{docker_host.environment_digest(task.environment_dir)[:32]}"
    assert engine.images.get(tag).labels[docker_host.MANAGED_BY] == "codedojo"
    engine.images.remove(tag)  # unique to this run: do not let them pile up on the machine


def test_a_prebuilt_image_with_a_missing_workdir(docker_engine: DockerEngine, make_task: MakeTask) -> None:
    env = EnvironmentConfig(docker_image=docker_engine.base_image, workdir="/srv/repo", network_mode="no-network")
    task = make_task(environment=env)

    async def go() -> None:
        async with await start_sandbox(task, backend="docker") as sb:
            assert sb.workdir == "/srv/repo"
            assert (await sb.exec("pwd")).stdout == "/srv/repo\n"

    run(go())


def test_an_image_that_runs_as_another_user(engine: object, make_task: MakeTask, tmp_path: Path) -> None:
    task = make_task(dockerfile="FROM debian:bookworm-slim\nRUN useradd -m agent && mkdir /app && chown agent /app\n"
                                "USER agent\nWORKDIR /app\n")
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "t.sh").write_text("#!/bin/sh\n")

    async def go() -> None:
        async with await DockerSandbox.start(task) as sb:
            r = await sb.exec("whoami; echo x > /logs/agent/x && echo x > /app/y && echo wrote; sleep 300 &")
            assert r.stdout == "agent\nwrote\n"
            await sb.upload_dir(tmp_path / "up", "/tests")  # the host's transfers act as root
            r = await sb.exec("ls /tests; grep -l '^sleep.300' /proc/[0-9]*/cmdline | wc -l; touch /tests/t.sh")
            assert r.stdout == "t.sh\n0\n" and "Permission denied" in r.stderr

    run(go())


def test_state_persists_across_commands_but_processes_do_not(engine: object, make_task: MakeTask) -> None:
    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            await sb.exec("echo kept > /tmp/t; echo kept > /root/r; echo kept > /app/a; sleep 300 &")
            r = await sb.exec("cat /tmp/t /root/r /app/a; grep -l '^sleep.300' /proc/[0-9]*/cmdline | wc -l")
            assert r.stdout == "kept\nkept\nkept\n0\n"

    run(go())


def test_a_timeout_returns_partial_output_and_the_sandbox_stays_usable(engine: object, make_task: MakeTask) -> None:
    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            r = await sb.exec("echo before; echo warn >&2; sleep 30; echo after", timeout_sec=0.5)
            assert r.timed_out and r.return_code == -9
            assert (r.stdout, r.stderr) == ("before\n", "warn\n")
            r = await sb.exec("echo still usable")
            assert r.stdout == "still usable\n" and not r.timed_out

    run(go())


def test_sandboxes_run_side_by_side(engine: object, make_task: MakeTask) -> None:
    task = make_task()

    async def one(i: int) -> str:
        async with await DockerSandbox.start(task) as sb:
            await sb.write_file("/app/id", str(i).encode())
            return (await sb.exec("sleep 1; cat /app/id")).stdout

    async def go() -> list[str]:
        return list(await asyncio.gather(*(one(i) for i in range(6))))

    assert run(go()) == [str(i) for i in range(6)]


def test_file_transfers_round_trip(engine: object, make_task: MakeTask, tmp_path: Path) -> None:
    src = tmp_path / "up"
    (src / "deep").mkdir(parents=True)
    (src / "deep" / "f.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "deep" / "f.sh").chmod(0o755)
    (src / "top.txt").write_text("top\n")

    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            await sb.upload_dir(src, "/app/data")
            await sb.upload_file(src / "top.txt", "/tmp/new/dir/one.txt")
            r = await sb.exec("/app/data/deep/f.sh; cat /tmp/new/dir/one.txt; echo made > /app/data/new.txt")
            assert r.stdout == "ran\ntop\n"
            await sb.upload_dir(src, "/app/data")  # into an existing directory: merged
            await sb.write_file("/root/w.bin", b"\x00\x01")
            assert await sb.read_file("/root/w.bin") == b"\x00\x01"
            assert await sb.read_file("/app/data/new.txt") == b"made\n"
            assert await sb.read_file("/app/data/new.txt", max_bytes=2) == b"ma"
            await sb.download_dir("/app/data", tmp_path / "down")
            await sb.download_file("/tmp/new/dir/one.txt", tmp_path / "one.txt")
            with pytest.raises(FileNotFoundError):
                await sb.read_file("/app/missing")
            with pytest.raises(FileNotFoundError):
                await sb.download_file("/app/missing/deeper", tmp_path / "x")
            await sb.remove("/app/data/new.txt")
            await sb.remove("/app/data/not-there")
            await sb.remove("/app/absent-dir/not-there")
            assert (await sb.exec("ls /app/data")).stdout == "deep\ntop.txt\n"

    run(go())
    assert (tmp_path / "down" / "deep" / "f.sh").read_text() == "#!/bin/sh\necho ran\n"
    assert os.access(tmp_path / "down" / "deep" / "f.sh", os.X_OK)
    assert (tmp_path / "down" / "new.txt").read_text() == "made\n"
    assert (tmp_path / "one.txt").read_text() == "top\n"


def test_the_container_carries_labels_and_limits(engine: docker.DockerClient, make_task: MakeTask) -> None:
    task = make_task(environment=EnvironmentConfig(cpus=1, memory_mb=300, network_mode="public"))

    async def go() -> None:
        async with await DockerSandbox.start(task, limits=SandboxLimits(max_processes=99)) as sb:
            attrs = engine.containers.get(sb.container_id).attrs
            labels, host = attrs["Config"]["Labels"], attrs["HostConfig"]
            assert labels[docker_host.MANAGED_BY] == "codedojo"
            assert labels[docker_host.OWNER].startswith(f"{socket.gethostname()}:{os.getpid()}:")
            assert labels[docker_host.CREATED].endswith("Z") and labels[docker_host.TASK] == task.name
            assert host["NetworkMode"] != "none"  # a "public" task gets network on this backend (its policy)
            assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (300 << 20, 10**9, 99)
            r = await sb.exec("cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; ulimit -t")
            assert r.stdout == "99\n3600\n"
        async with await DockerSandbox.start(task, limits=SandboxLimits(network=False)) as sb:
            assert engine.containers.get(sb.container_id).attrs["HostConfig"]["NetworkMode"] == "none"

    run(go())


def test_close_removes_the_container_and_is_idempotent(engine: docker.DockerClient, make_task: MakeTask) -> None:
    async def go() -> str:
        sb = await DockerSandbox.start(make_task())
        await sb.exec("echo x > /tmp/x")
        await sb.close()
        await sb.close()
        with pytest.raises(SandboxClosedError):
            await sb.exec("true")
        with pytest.raises(SandboxClosedError):
            await sb.read_file("/tmp/x")
        return sb.container_id

    container_id = run(go())
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(container_id)


def test_a_start_cancelled_at_any_point_leaves_no_container(engine: docker.DockerClient, make_task: MakeTask,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelled before its first step, and during each blocking engine call it makes (each one counted, so
    every point is hit on any machine, instead of wherever a list of delays happened to land)."""
    task = make_task()
    mine = {"label": f"{docker_host.OWNER}={docker_host.owner()}"}
    in_thread = docker_sandbox._in_thread
    calls, cancel_at = 0, -1
    starting: asyncio.Future[DockerSandbox] | None = None

    async def counted(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == cancel_at:
            assert starting is not None
            starting.cancel()  # while this call runs in its thread
        return await in_thread(fn, *args, **kwargs)

    monkeypatch.setattr(docker_sandbox, "_in_thread", counted)

    async def go() -> None:
        nonlocal calls, cancel_at, starting
        await (await DockerSandbox.start(task)).close()  # the image exists: starts are quick
        calls = 0
        sandbox = await DockerSandbox.start(task)
        points = calls
        await sandbox.close()
        for point in range(points + 1):
            calls, cancel_at = 0, point
            starting = asyncio.ensure_future(DockerSandbox.start(task))
            if point == 0:
                starting.cancel()  # before its first step
            with contextlib.suppress(asyncio.CancelledError):
                await (await starting).close()
            assert starting.cancelled(), f"the start went on after a cancellation at blocking call {point}"
        # A bounded poll: a container created after its start was cancelled is removed once it appears.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while engine.containers.list(all=True, filters=mine) and loop.time() < deadline:
            await asyncio.sleep(0.1)

    run(go())
    assert engine.containers.list(all=True, filters=mine) == [], "a cancelled start left a container behind"


def test_a_container_removed_behind_its_back_is_an_infrastructure_error(engine: docker.DockerClient,
                                                                        make_task: MakeTask) -> None:
    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            engine.containers.get(sb.container_id).remove(force=True)
            with pytest.raises(SandboxClosedError):
                await sb.exec("true")
            with pytest.raises(SandboxClosedError):
                await sb.write_file("/tmp/x", b"x")
            with pytest.raises(SandboxClosedError):
                await sb.read_file("/tmp/absent")

    run(go())


def test_the_sweeper_removes_containers_of_dead_owners_only(engine: docker.DockerClient,
                                                            docker_engine: DockerEngine) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    made = {}
    for who, owner in (("dead", f"{socket.gethostname()}:{dead.pid}:1"), ("alive", docker_host.owner()),
                       ("elsewhere", "another-host:1:1")):
        labels = {**docker_host.labels("sweep-test"), docker_host.OWNER: owner}
        made[who] = engine.containers.create(docker_engine.base_image, ["true"], labels=labels).name
    try:
        removed = docker_host.sweep_orphans(engine)
        names = {c.name for c in engine.containers.list(all=True)}
        assert made["dead"] in removed and made["dead"] not in names
        assert made["alive"] in names and made["elsewhere"] in names
    finally:
        for name in made.values():
            try:
                engine.containers.get(name).remove(force=True)
            except docker.errors.NotFound:
                pass


def test_a_failing_build_is_a_start_error_naming_it(engine: object, make_task: MakeTask) -> None:
    task = make_task(dockerfile="FROM debian:bookworm-slim\nRUN echo broken >&2; exit 3\n")
    with pytest.raises(SandboxStartError, match=r"(?s)environment/Dockerfile failed.*exit"):
        run(start_sandbox(task, backend="docker"))


def test_a_missing_image_that_cannot_be_pulled_is_a_start_error(engine: object, make_task: MakeTask) -> None:
    task = make_task(environment=EnvironmentConfig(docker_image="localhost:1/codedojo/absent:1"))
    with pytest.raises(SandboxStartError, match="localhost:1/codedojo/absent:1"):
        run(start_sandbox(task, backend="docker"))


class _LosingAPI:
    """A Docker API whose exec streams come back empty: the transport lost the command's output."""

    def __init__(self, exit_code: int | None, stderr: bytes = b"") -> None:
        self.exit_code, self.stderr, self.execs = exit_code, stderr, 0

    def exec_create(self, container: str, cmd: list[str], **kwargs: object) -> dict[str, str]:
        self.execs += 1
        return {"Id": f"exec-{self.execs}"}

    def exec_start(self, exec_id: str, stream: bool = False, demux: bool = False) -> object:
        return iter([(None, self.stderr)] if self.stderr else []) if stream else b""

    def exec_inspect(self, exec_id: str) -> dict[str, object]:
        return {"ExitCode": self.exit_code}


class _LosingClient:
    def __init__(self, api: _LosingAPI) -> None:
        self.api = api


@pytest.mark.parametrize("exit_code", [0, 1, None])
def test_an_empty_stream_without_the_runners_end_marker_is_lost_output_not_a_silent_command(
        exit_code: int | None) -> None:
    api = _LosingAPI(exit_code)
    sandbox = DockerSandbox(client=_LosingClient(api), container_id="c", name="lost", workdir="/app",  # type: ignore[arg-type]
                            limits=SandboxLimits())
    with pytest.raises(docker_sandbox.SandboxError, match="lost the output of a command"):
        run(sandbox.exec("echo out"))
    assert api.execs == 2  # the command, then the sweep that makes sure nothing of it survives


def test_a_runner_that_stopped_early_says_why_and_is_returned_as_is() -> None:
    # `cd -- "$2" || exit 1`: no end marker, exit 1, and the reason on stderr
    api = _LosingAPI(1, stderr=b"codedojo-exec: cd: /nowhere: No such file or directory\n")
    sandbox = DockerSandbox(client=_LosingClient(api), container_id="c", name="early", workdir="/app",  # type: ignore[arg-type]
                            limits=SandboxLimits())
    result = run(sandbox.exec("true", cwd="/nowhere"))
    assert result.return_code == 1 and "/nowhere" in result.stderr and not result.timed_out
