"""One adversarial test per claim of the docker sandbox's threat model (codedojo/sandbox/docker.py), run against
a real engine. They mirror test_sandbox_security.py where a claim applies to containers."""

from __future__ import annotations

import asyncio
import io
import secrets
import socket
import tarfile
import threading
from pathlib import Path

import pytest

import podman_support
from codedojo.sandbox import SandboxLimits, SandboxPathError
from codedojo.sandbox.archive import extract_tree
from codedojo.trial import EpisodeStatus, NopAgent, OracleAgent, TrialOptions, run_trial
from codedojo.trial.agents import AgentOutcome
from conftest import DockerEngine, MakeTask

podman_support.docker_sdk()  # skipped without the SDK, failed under CI

from codedojo.sandbox.docker import DockerSandbox  # noqa: E402 (needs the SDK)

DOCKER = TrialOptions(backend="docker")


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def _engine(docker_engine: DockerEngine) -> None:
    """Every test here talks to the engine."""


# Claim 1: no network.
def test_a_server_on_the_hosts_loopback_is_unreachable(make_task: MakeTask) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        server.settimeout(5)
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    probe = (f"import socket; s = socket.socket(); s.settimeout(2); s.connect(('127.0.0.1', {port})); "
             "print('CONNECTED')")

    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            r = await sb.exec(f"python3 -c \"{probe}\"; python3 -c \"import socket; "
                              f"socket.create_connection(('1.1.1.1', 53), timeout=2)\"; cat /proc/net/dev")
            assert "CONNECTED" not in r.stdout
            assert "Connection refused" in r.stderr and "Network is unreachable" in r.stderr
            assert "eth0" not in r.stdout and "lo:" in r.stdout  # a loopback device and nothing else

    try:
        run(go())
    finally:
        thread.join()
        server.close()
    assert not accepted


# Claim 2: no host secrets.
def test_host_files_and_the_checkout_are_not_visible(make_task: MakeTask) -> None:
    token = "secret-" + secrets.token_hex(6)
    planted = [Path(f"/root/.codedojo-test-{token}"), Path(f"/tmp/codedojo-test-{token}")]
    for path in planted:
        path.write_text(token + "\n")
    here = Path(__file__).resolve()
    try:
        async def go() -> None:
            async with await DockerSandbox.start(make_task()) as sb:
                r = await sb.exec(f"cat {planted[0]} {planted[1]} {here}; "
                                  f"grep -rs {token} /root /home /tmp /var /opt /srv /mnt /app; echo done")
                assert token not in r.stdout and r.stdout.endswith("done\n")
                assert f"{here}: No such file or directory" in r.stderr

        run(go())
    finally:
        for path in planted:
            path.unlink()


# Claim 3: no writes to the host.
def test_writes_anywhere_in_the_container_never_reach_the_host(make_task: MakeTask) -> None:
    token = secrets.token_hex(4)
    targets = [f"/usr/local/bin/pwn-{token}", f"/etc/pwn-{token}", f"/tmp/pwn-{token}", f"/root/pwn-{token}",
               f"/var/tmp/pwn-{token}", f"/pwn-{token}"]

    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            r = await sb.exec("; ".join(f"echo x > {t}" for t in targets) + f"; cat {' '.join(targets)}")
            assert r.stdout == "x\n" * len(targets)  # the container's own files

    run(go())
    for target in targets:
        assert not Path(target).exists(), target


# Claim 4: bounded resources.
def test_a_fork_bomb_is_contained_and_leaves_no_process_or_zombie(make_task: MakeTask) -> None:
    async def go() -> None:
        async with await DockerSandbox.start(make_task(), limits=SandboxLimits(max_processes=64)) as sb:
            r = await sb.exec("bomb() { bomb | bomb & }; bomb; sleep 3", timeout_sec=6)
            assert r.timed_out or "Resource temporarily unavailable" in r.stderr
            r = await sb.exec("for p in /proc/[0-9]*; do read -r line < $p/stat && echo \"${line#*) }\"; done")
            states = [line.split()[0] for line in r.stdout.splitlines()]
            assert "Z" not in states, r.stdout
            # PID 1 and its sleep, the runner, its watchdog and the watchdog's sleep, bash: nothing else.
            assert len(states) <= 6, r.stdout
            assert (await sb.exec("echo alive")).stdout == "alive\n"

    run(go())


def test_a_memory_bomb_is_oom_killed_inside_the_container(make_task: MakeTask) -> None:
    async def go() -> None:
        async with await DockerSandbox.start(make_task(), limits=SandboxLimits(memory_mb=128)) as sb:
            r = await sb.exec("python3 -c 'x = bytearray(1500 * 2**20); print(len(x))'", timeout_sec=60)
            assert r.oom_killed and r.return_code == 137 and r.stdout == ""
            r = await sb.exec("echo alive")
            assert r.stdout == "alive\n" and not r.oom_killed

    run(go())


def test_huge_output_is_truncated_without_exhausting_memory(make_task: MakeTask) -> None:
    def peak_rss_kb() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            before = peak_rss_kb()
            r = await sb.exec("head -c 100000000 /dev/zero | tr '\\0' a; echo; echo END; "
                              "head -c 100000000 /dev/zero | tr '\\0' b >&2", timeout_sec=120)
            grown_mb = (peak_rss_kb() - before) / 1024
            assert r.return_code == 0
            assert r.truncated_bytes > 196_000_000
            assert len(r.stdout) < 1_100_000 and r.stdout.endswith("END\n")
            assert len(r.stderr) < 1_100_000 and r.stderr.endswith("bbb")
            assert "bytes of output dropped" in r.stdout and "bytes of output dropped" in r.stderr
            assert grown_mb < 50, f"capturing 200 MB raised peak memory by {grown_mb:.0f} MB"

    run(go())


# Claim 5: nothing outlives a command or the episode.
def _host_processes_running(argument: str) -> list[str]:
    """Command lines of host processes (container processes included: same kernel) that mention `argument`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if argument in cmdline.split():
                found.append(cmdline)
    return found


def test_a_timeout_kills_the_whole_tree_with_no_survivor(make_task: MakeTask) -> None:
    seconds = str(900_000 + secrets.randbelow(99_999))  # a sleep no other process on this host runs

    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            r = await sb.exec(f"(setsid sleep {seconds} &); nohup sleep {seconds} >/dev/null 2>&1 & "
                              "trap '' TERM; while true; do :; done", timeout_sec=1)
            assert r.timed_out and r.return_code == -9
            assert _host_processes_running(seconds) == []
            r = await sb.exec(f"grep -l '^sleep.{seconds}' /proc/[0-9]*/cmdline | wc -l")
            assert r.stdout == "0\n"

    run(go())


def test_killing_the_runner_does_not_let_a_process_escape(make_task: MakeTask) -> None:
    seconds = str(900_000 + secrets.randbelow(99_999))

    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            # Detach a sleeper from the command's output, wait until it is `sleep` (setsid has exec'd it: a
            # bounded poll, the command's 30 s timeout), then kill the shell that runs the command.
            r = await sb.exec(f"setsid sleep {seconds} >/dev/null 2>&1 </dev/null & "
                              "until grep -qa '^sleep' /proc/$!/cmdline; do sleep 0.01; done; kill -9 $PPID",
                              timeout_sec=30)
            assert not r.timed_out
            assert _host_processes_running(seconds) == []

    run(go())


def test_close_leaves_no_process_behind(make_task: MakeTask) -> None:
    seconds = str(900_000 + secrets.randbelow(99_999))

    async def go() -> None:
        sb = await DockerSandbox.start(make_task())
        exec_task = asyncio.ensure_future(sb.exec(f"sleep {seconds}", timeout_sec=600))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not _host_processes_running(seconds):  # a bounded poll: until the command runs
            assert not exec_task.done(), exec_task.result()
            assert loop.time() < deadline, "the command did not start within 60 s"
            await asyncio.sleep(0.05)
        exec_task.cancel()  # an episode abandoned mid-command, as a cancelled rollout would be
        await sb.close()

    run(go())
    assert _host_processes_running(seconds) == []


# Claim 6: grading is not tamperable.
@pytest.mark.parametrize("path", ["../etc/passwd", "/app/../etc/passwd", "relative.txt", "/app/x\0y", "/"])
def test_path_tricks_in_transfers_are_refused(make_task: MakeTask, tmp_path: Path, path: str) -> None:
    source = tmp_path / "f"
    source.write_text("x")

    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            with pytest.raises(SandboxPathError):
                await sb.upload_file(source, path)
            with pytest.raises(SandboxPathError):
                await sb.download_file(path, tmp_path / "out")

    run(go())


def test_planted_symlinks_cannot_redirect_transfers(make_task: MakeTask, tmp_path: Path) -> None:
    token = secrets.token_hex(4)
    source = tmp_path / "payload"
    source.write_text("payload\n")

    async def go() -> None:
        async with await DockerSandbox.start(make_task()) as sb:
            await sb.exec("ln -s /etc/shadow /app/shadow; ln -s /root /app/hostroot; ln -s / /tmp/slash; "
                          "ln -s /nowhere /app/dangling; ln -s /etc /logs/agent/etc; echo x > /logs/agent/real.txt")
            for path in ("/app/shadow", "/app/hostroot/.bashrc", "/tmp/slash/etc/hostname", "/app/dangling"):
                with pytest.raises(SandboxPathError, match="symlink"):
                    await sb.download_file(path, tmp_path / "leak")
                with pytest.raises(SandboxPathError, match="symlink"):
                    await sb.read_file(path)
            with pytest.raises(SandboxPathError, match="symlink"):
                await sb.upload_file(source, f"/app/hostroot/pwn-{token}")
            with pytest.raises(SandboxPathError, match="symlink"):
                await sb.write_file(f"/app/hostroot/pwn-{token}", b"x")
            with pytest.raises(SandboxPathError, match="symlink"):
                await sb.upload_dir(tmp_path, "/app/hostroot")
            with pytest.raises(SandboxPathError, match="symlink"):
                await sb.remove("/app/hostroot/.bashrc")
            await sb.download_dir("/logs/agent", tmp_path / "logs")  # the link is skipped, not followed
            assert (await sb.exec(f"ls /root/pwn-{token} 2>&1; echo $?")).stdout.endswith("2\n")

    run(go())
    assert not (tmp_path / "leak").exists()
    assert (tmp_path / "logs" / "real.txt").read_text() == "x\n"
    assert not (tmp_path / "logs" / "etc").exists()


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> list[bytes]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = buffer.getvalue()
    return [raw[i:i + 1000] for i in range(0, len(raw), 1000)]  # as chunks, the way the API streams it


def test_a_hostile_archive_writes_only_plain_files_below_the_destination(tmp_path: Path) -> None:
    def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode = kind, link, 0o4755
        return info

    outside = tmp_path / "outside"
    chunks = _tar([
        (member("d", tarfile.DIRTYPE), None),
        (member("d/ok.txt"), b"fine\n"),
        (member("d/../../outside"), b"escaped\n"),
        (member("/abs"), b"absolute\n"),
        (member("d/link", tarfile.SYMTYPE, "/etc/passwd"), None),
        (member("d/link/x"), b"through the link\n"),
        (member("d/hard", tarfile.LNKTYPE, "/etc/passwd"), None),
        (member("d/fifo", tarfile.FIFOTYPE), None),
    ])
    dest = tmp_path / "dest"
    extract_tree(chunks, dest)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["link", "link/x", "ok.txt"]
    assert not (dest / "link").is_symlink() and (dest / "link" / "x").read_text() == "through the link\n"
    assert not outside.exists() and not Path("/abs").exists()
    assert oct((dest / "ok.txt").stat().st_mode & 0o7777) == "0o755"  # no setuid bit comes through


class _Spy:
    """An agent that looks for the tests and plants things; records what it saw."""

    name = "spy"

    def __init__(self, commands: list[str]) -> None:
        self.commands = commands
        self.outputs: list[str] = []

    async def run(self, task, sandbox, *, timeout_sec):  # type: ignore[no-untyped-def]
        for command in self.commands:
            r = await sandbox.exec(command)
            self.outputs.append(r.stdout + r.stderr)
        return AgentOutcome(status=EpisodeStatus.SUBMITTED)


def test_tests_are_invisible_to_the_agent_and_what_it_plants_there_is_gone(make_task: MakeTask) -> None:
    # The agent is root in its container, so it can write to /tests; what it wrote is removed before upload.
    checks = ("#!/bin/bash\n# hidden-marker-7f3a\n"
              "if [ -e /tests/conftest.py ] || [ -L /solution ]; then echo 1; else echo 0; fi "
              "> /logs/verifier/reward.txt\n")
    task = make_task(test_sh=checks, files={"tests/helper_data.txt": "hidden-marker-7f3a\n"})
    spy = _Spy(["ls -la /tests; cat /tests/test.sh",
                "grep -rs hidden-marker-7f3a /tests /app /tmp /root /logs /solution /home; echo scanned",
                "mkdir -p /tests && echo 'import sys; sys.exit(0)' > /tests/conftest.py; echo planted=$?"])
    result = run(run_trial(task, spy, options=DOCKER))
    seen = "\n".join(spy.outputs)
    assert "hidden-marker-7f3a" not in seen and "helper_data" not in seen
    assert "scanned" in seen and "planted=0" in seen
    assert result.status is EpisodeStatus.SUBMITTED and result.reward == 0.0


def test_a_reward_planted_by_the_agent_is_removed_before_the_verifier_runs(make_task: MakeTask,
                                                                            tmp_path: Path) -> None:
    plant = ("echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json; "
             "ln -s /app /logs/verifier/test-stdout.txt; chmod 000 /logs/verifier")
    records_stale = ("#!/bin/bash\nls /logs/verifier | grep -vx test-stdout.txt > /tmp/seen\n"
                     "if [ -s /tmp/seen ]; then echo stale > /logs/verifier/stale; fi\n"
                     "echo 0 > /logs/verifier/reward.txt\n")
    options = TrialOptions(backend="docker", trials_dir=tmp_path / "trials")
    result = run(run_trial(make_task(test_sh=records_stale), _Spy([plant]), options=options))
    assert result.status is EpisodeStatus.SUBMITTED and result.reward == 0.0
    assert result.trial_dir is not None and not (Path(result.trial_dir) / "verifier" / "stale").exists()

    writes_nothing = "#!/bin/bash\necho 'tests crashed before writing a reward'\n"
    result = run(run_trial(make_task(test_sh=writes_nothing), _Spy([plant]), options=options))
    assert result.status is EpisodeStatus.VERIFIER_ERROR and result.reward is None


def test_a_background_process_cannot_tamper_with_verification(make_task: MakeTask) -> None:
    # A detached loop that would overwrite the reward while test.sh runs: it must not outlive its command.
    forger = ("nohup setsid bash -c 'while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done' "
              ">/dev/null 2>&1 &")
    task = make_task(test_sh="#!/bin/bash\nsleep 1\necho 0 > /logs/verifier/reward.txt\nsleep 1\n")
    result = run(run_trial(task, _Spy([forger]), options=DOCKER))
    assert result.status is EpisodeStatus.SUBMITTED and result.reward == 0.0


def test_nop_cannot_be_rewarded_by_leftovers_of_an_earlier_episode(make_task: MakeTask) -> None:
    task = make_task(solve_sh="#!/bin/bash\necho done > marker\n",
                     test_sh="#!/bin/bash\n[ -f /app/marker ] && echo 1 > /logs/verifier/reward.txt "
                             "|| echo 0 > /logs/verifier/reward.txt\n")
    assert run(run_trial(task, OracleAgent(), options=DOCKER)).reward == 1.0
    assert run(run_trial(task, NopAgent(), options=DOCKER)).reward == 0.0


def test_no_container_is_left_behind(docker_engine: DockerEngine, make_task: MakeTask) -> None:
    import docker

    from codedojo.sandbox import docker_host

    run(run_trial(make_task(), OracleAgent(), options=DOCKER))
    client = docker.DockerClient(base_url=docker_engine.host, version=docker_host.API_VERSION)
    try:
        mine = client.containers.list(all=True, filters={"label": f"{docker_host.OWNER}={docker_host.owner()}"})
    finally:
        client.close()
    assert mine == []
