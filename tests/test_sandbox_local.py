"""The local sandbox's behaviour: commands, files, limits, lifecycle (its security claims are in
test_sandbox_security.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from codedojo.cache import cache_dir
from codedojo.sandbox import SandboxClosedError, SandboxLimits, SandboxStartError, start_sandbox
from codedojo.sandbox.host import state_root
from codedojo.sandbox.local import LocalSandbox
from codedojo.tasks.config import EnvironmentConfig
from conftest import MakeTask


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_commands_run_in_the_workdir_with_the_task_files(make_task: MakeTask) -> None:
    task = make_task(dockerfile="FROM python:3.11-slim\nENV GREETING=hi\nWORKDIR /app\nCOPY src/ /app/\n",
                     files={"environment/src/data.txt": "payload\n", "environment/src/sub/x.py": "X = 1\n"})

    async def go() -> None:
        async with await LocalSandbox.start(task) as sb:
            r = await sb.exec("pwd; cat data.txt; echo $GREETING; python3 -c 'import sub.x as m; print(m.X)'")
            assert (r.return_code, r.stdout) == (0, "/app\npayload\nhi\n1\n")
            r = await sb.exec("echo $EXTRA; pwd", cwd="/tmp", env={"EXTRA": "given"})
            assert r.stdout == "given\n/tmp\n"
            r = await sb.exec("exit 7")
            assert r.return_code == 7 and not r.timed_out
            r = await sb.exec("echo out; echo err >&2")
            assert (r.stdout, r.stderr) == ("out\n", "err\n")
            r = await sb.exec("true", cwd="/nowhere")
            assert r.return_code != 0 and "/nowhere" in r.stderr

    run(go())


def test_state_persists_across_commands_but_processes_do_not(make_task: MakeTask) -> None:
    task = make_task()

    async def go() -> None:
        async with await LocalSandbox.start(task) as sb:
            await sb.exec("echo kept > /tmp/t; echo kept > /root/r; echo kept > /app/a; sleep 300 &")
            r = await sb.exec("cat /tmp/t /root/r /app/a; ps -e -o comm= | grep -c sleep")
            assert r.stdout == "kept\nkept\nkept\n0\n"

    run(go())


def test_each_episode_starts_from_the_pristine_workspace(make_task: MakeTask) -> None:
    task = make_task(dockerfile="FROM debian:bookworm\nWORKDIR /app\nCOPY f.txt /app/\n",
                     files={"environment/f.txt": "original\n"})

    async def go() -> None:
        async with await LocalSandbox.start(task) as first:
            await first.exec("echo changed > f.txt; echo new > g.txt; rm -f f.txt")
            r = await first.exec("ls")
            assert r.stdout == "g.txt\n"
            async with await LocalSandbox.start(task) as second:
                r = await second.exec("cat f.txt; ls")
                assert r.stdout == "original\nf.txt\n"

    run(go())
    lower = next((cache_dir() / "workspaces").glob("*/f.txt"))
    assert lower.read_text() == "original\n"


def test_workspace_run_steps_are_applied_once_and_cached(make_task: MakeTask) -> None:
    marker = "built-" + os.urandom(4).hex()
    dockerfile = f"FROM debian:bookworm\nWORKDIR /app\nRUN echo {marker} > built.txt && date +%N > when\n"
    task = make_task(dockerfile=dockerfile)

    async def go() -> tuple[str, str]:
        async with await LocalSandbox.start(task) as a:
            first = (await a.exec("cat built.txt when")).stdout
        async with await LocalSandbox.start(task) as b:
            second = (await b.exec("cat built.txt when")).stdout
        return first, second

    first, second = run(go())
    assert first.startswith(marker) and first == second


def test_a_failing_run_step_is_a_start_error_naming_it(make_task: MakeTask) -> None:
    task = make_task(dockerfile="FROM debian:bookworm\nWORKDIR /app\nRUN echo broken >&2; exit 3\n")
    with pytest.raises(SandboxStartError, match=r"(?s)RUN 'echo broken >&2; exit 3' exited 3.*broken"):
        run(start_sandbox(task))


def test_a_run_step_cannot_install_into_the_system(make_task: MakeTask) -> None:
    task = make_task(dockerfile="FROM debian:bookworm\nWORKDIR /app\nRUN touch /usr/bin/installed\n")
    with pytest.raises(SandboxStartError, match="Read-only file system"):
        run(start_sandbox(task))
    assert not Path("/usr/bin/installed").exists()


def test_a_timeout_returns_partial_output(make_task: MakeTask) -> None:
    task = make_task()

    async def go() -> None:
        async with await LocalSandbox.start(task) as sb:
            r = await sb.exec("echo before; sleep 30; echo after", timeout_sec=0.5)
            assert r.timed_out and r.stdout == "before\n" and r.duration_sec < 10
            r = await sb.exec("echo still usable")
            assert r.stdout == "still usable\n"

    run(go())


def test_file_transfers_round_trip(make_task: MakeTask, tmp_path: Path) -> None:
    task = make_task()
    src = tmp_path / "up"
    (src / "deep").mkdir(parents=True)
    (src / "deep" / "f.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "deep" / "f.sh").chmod(0o755)
    (src / "top.txt").write_text("top\n")

    async def go() -> None:
        async with await LocalSandbox.start(task) as sb:
            await sb.upload_dir(src, "/app/data")
            await sb.upload_file(src / "top.txt", "/tmp/one.txt")
            r = await sb.exec("/app/data/deep/f.sh; cat /tmp/one.txt; echo made > /app/data/new.txt")
            assert r.stdout == "ran\ntop\n"
            await sb.write_file("/root/w.bin", b"\x00\x01")
            assert await sb.read_file("/root/w.bin") == b"\x00\x01"
            assert await sb.read_file("/app/data/new.txt") == b"made\n"
            await sb.download_dir("/app/data", tmp_path / "down")
            await sb.download_file("/tmp/one.txt", tmp_path / "one.txt")
            with pytest.raises(FileNotFoundError):
                await sb.read_file("/app/missing")
            await sb.remove("/app/data/new.txt")
            await sb.remove("/app/data/not-there")
            assert (await sb.exec("ls /app/data")).stdout == "deep\ntop.txt\n"

    run(go())
    assert (tmp_path / "down" / "deep" / "f.sh").read_text() == "#!/bin/sh\necho ran\n"
    assert (tmp_path / "down" / "new.txt").read_text() == "made\n"
    assert (tmp_path / "one.txt").read_text() == "top\n"


def test_close_leaves_no_process_and_no_file(make_task: MakeTask) -> None:
    task = make_task()

    async def go() -> LocalSandbox:
        sb = await LocalSandbox.start(task)
        await sb.exec("echo x > /tmp/x")
        await sb.close()
        await sb.close()  # idempotent
        with pytest.raises(SandboxClosedError):
            await sb.exec("true")
        return sb

    sb = run(go())
    assert not (state_root() / sb.sandbox_id).exists()
    assert not any(p.name == sb.sandbox_id for p in Path("/sys/fs/cgroup/pids/codedojo").glob("*"))


def test_a_killed_init_is_an_infrastructure_error(make_task: MakeTask) -> None:
    task = make_task()

    async def go() -> None:
        async with await LocalSandbox.start(task) as sb:
            assert sb._shell is not None and sb._shell.init_pid_host is not None
            os.kill(sb._shell.init_pid_host, 9)
            # bwrap exits when its PID 1 dies: once it has, the sandbox is dead, not merely dying.
            await asyncio.wait_for(sb._shell._proc.wait(), 30)
            with pytest.raises(SandboxClosedError, match="its init process is gone"):
                await sb.exec("true")

    run(go())


def test_limits_come_from_the_task_and_can_be_overridden(make_task: MakeTask) -> None:
    task = make_task(environment=EnvironmentConfig(cpus=1, memory_mb=300, storage_mb=64, network_mode="no-network"))

    async def go() -> None:
        async with await LocalSandbox.start(task) as sb:
            assert (sb.limits.memory_mb, sb.limits.storage_mb, sb.limits.cpus, sb.limits.network) == (
                300, 64, 1, False)
            r = await sb.exec("head -c 80M /dev/zero > /tmp/big; echo rc=$?")
            assert "No space left on device" in r.stderr and "rc=1" in r.stdout
        async with await LocalSandbox.start(task, limits=SandboxLimits(memory_mb=700)) as sb:
            assert sb.limits.memory_mb == 700

    run(go())


def test_unsupported_environments_fail_to_start_with_the_reason(make_task: MakeTask) -> None:
    task = make_task(environment=EnvironmentConfig(docker_image="swerebenchv2/x:1"))
    with pytest.raises(Exception, match="prebuilt image; the local backend does not pull images"):
        run(start_sandbox(task))


def test_a_task_refused_for_its_network_policy_builds_no_workspace(make_task: MakeTask, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.sandbox.base import NetworkPolicyError

    monkeypatch.setenv("CODEDOJO_CACHE_DIR", str(tmp_path / "cache"))
    public = make_task(dockerfile="FROM debian:bookworm\nWORKDIR /app\nRUN echo built > built.txt\n",
                       environment=EnvironmentConfig(memory_mb=512, storage_mb=256))  # network_mode "public"
    with pytest.raises(NetworkPolicyError, match="`--network`"):
        run(start_sandbox(public))
    assert not (cache_dir() / "workspaces").exists()  # the RUN step never ran

    async def with_the_choice_made() -> str:
        async with await start_sandbox(public, limits=SandboxLimits(network=False)) as sb:
            return (await sb.exec("cat built.txt")).stdout

    assert run(with_the_choice_made()) == "built\n" and (cache_dir() / "workspaces").is_dir()


def test_a_bubblewrap_failure_is_a_start_error_with_its_message(tmp_path: Path) -> None:
    from codedojo.sandbox.bwrap import Bind, IsolatedShell, Launch

    launch = Launch(uid=None, cgroup_procs=(), limits=SandboxLimits(), rlimit_memory=False, nproc_limit=None)
    missing = tmp_path / "not-there"

    async def go() -> None:
        with pytest.raises(SandboxStartError, match=r"the sandbox did not start: .*not-there"):
            await IsolatedShell.start(launch=launch, binds=[Bind(str(missing), "/x", writable=False)], cwd="/",
                                      timeout_sec=10)

    run(go())


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
def test_the_init_and_its_commands_are_inside_every_sandbox_cgroup(make_task: MakeTask) -> None:
    task = make_task()

    async def go() -> None:
        async with await LocalSandbox.start(task) as sb:
            if sb._cgroup is None:
                pytest.skip("no cgroup v1 hierarchy on this host")
            assert sb._shell is not None and sb._shell.init_pid_host is not None
            # The command says it has started, then waits on a FIFO until the test has looked.
            running = asyncio.create_task(sb.exec("mkfifo /tmp/go && touch /tmp/started && read -r _ < /tmp/go"))
            tmp = sb._mounts["/tmp"]
            deadline = asyncio.get_running_loop().time() + 30
            while not (tmp / "started").exists():  # a bounded poll: until the command runs
                assert not running.done(), running.result()
                assert asyncio.get_running_loop().time() < deadline, "the command did not start within 30 s"
                await asyncio.sleep(0.01)
            commands = sb.command_pids()
            assert commands, "the running command is not in the sandbox's cgroup"
            for procs in sb._cgroup.procs_files:
                members = {int(p) for p in Path(procs).read_text().split()}
                assert {sb._shell.init_pid_host, *commands} <= members, procs
            go = os.open(tmp / "go", os.O_RDWR)  # O_RDWR: never blocks, and the line waits in the pipe
            try:
                os.write(go, b"go\n")
                assert (await asyncio.wait_for(running, 30)).return_code == 0
            finally:
                os.close(go)

    run(go())
