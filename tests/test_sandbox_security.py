"""One adversarial test per claim of the local sandbox's threat model (codedojo/sandbox/local.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from codedojo.sandbox import SandboxLimits, SandboxPathError
from codedojo.sandbox.host import state_root
from codedojo.sandbox.local import LocalSandbox
from codedojo.trial import EpisodeStatus, NopAgent, TrialOptions, run_trial
from codedojo.trial.agents import AgentOutcome
from conftest import MakeTask


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


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
        async with await LocalSandbox.start(make_task()) as sb:
            r = await sb.exec(f"python3 -c \"{probe}\"; python3 -c \"import socket; "
                              f"socket.create_connection(('1.1.1.1', 53), timeout=2)\"")
            assert "CONNECTED" not in r.stdout
            assert "Connection refused" in r.stderr and "Network is unreachable" in r.stderr

    try:
        run(go())
    finally:
        thread.join()
        server.close()
    assert not accepted


def _loopback_probe(make_task: MakeTask, *, limits: SandboxLimits | None) -> list[object]:
    """Start a sandbox for a task that allows internet (Harbor's default) and let it connect to a server on
    the host's loopback; the connections the server accepted."""
    from codedojo.tasks.config import EnvironmentConfig

    task = make_task(environment=EnvironmentConfig(memory_mb=512, storage_mb=256))  # network_mode "public"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(5)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()

    async def go() -> None:
        async with await LocalSandbox.start(task, limits=limits) as sb:
            await sb.exec(f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"")

    try:
        run(go())
    finally:
        thread.join()
        server.close()
    return accepted


# Claim 1 under the network policy: a task that allows internet is refused unless the caller decides.
def test_a_task_that_allows_internet_is_refused_without_an_explicit_choice(
        make_task: MakeTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.sandbox.base import NetworkPolicyError

    # a state folder of this test's own: other runs on the machine start and end sandboxes in the shared one
    monkeypatch.setenv("CODEDOJO_SANDBOX_DIR", str(tmp_path / "sandboxes"))
    with pytest.raises(NetworkPolicyError, match=r"`--network`.*`--no-network`"):
        _loopback_probe(make_task, limits=None)
    assert not state_root().is_dir() or not any(state_root().iterdir())  # refused before any mount existed


def test_no_network_chosen_explicitly_keeps_the_host_unreachable(make_task: MakeTask) -> None:
    assert _loopback_probe(make_task, limits=SandboxLimits(network=False)) == []


def test_the_network_opt_in_shares_the_hosts_network_as_documented(make_task: MakeTask) -> None:
    # Not a protection but the documented cost of `--network`: the sandbox is in the host's network
    # namespace, so the host's loopback services are reachable (docs/sandbox.md, threat model).
    assert len(_loopback_probe(make_task, limits=SandboxLimits(network=True))) == 1


# Claim 2: no host secrets.
def test_root_home_and_the_checkout_are_not_readable(make_task: MakeTask) -> None:
    token = "secret-" + os.urandom(6).hex()
    secrets = [Path("/root/.codedojo-test-secret"), Path("/home/codedojo-test-secret")]
    for path in secrets:
        path.write_text(token + "\n")
    here = Path(__file__).resolve()
    try:
        async def go() -> None:
            async with await LocalSandbox.start(make_task()) as sb:
                r = await sb.exec(f"cat {secrets[0]} {secrets[1]} {here} /etc/shadow; ls /root /home; "
                                  f"grep -rs {token} /root /home /tmp /var /opt /work /srv /mnt /app; echo done")
                assert token not in r.stdout
                assert r.stdout.strip().endswith("done")
                assert "/etc/shadow: Permission denied" in r.stderr
                assert f"{here}: No such file or directory" in r.stderr

        run(go())
    finally:
        for path in secrets:
            path.unlink()


# Claim 3: no writes to the host.
def test_writes_outside_the_workspace_never_reach_the_host(make_task: MakeTask) -> None:
    token = os.urandom(4).hex()
    targets = [f"/usr/local/bin/pwn-{token}", f"/etc/pwn-{token}", f"/tmp/pwn-{token}", f"/root/pwn-{token}",
               f"/var/tmp/pwn-{token}", f"/pwn-{token}"]

    async def go() -> None:
        async with await LocalSandbox.start(make_task()) as sb:
            await sb.exec("; ".join(f"echo x > {t}" for t in targets) + f"; echo x > /app/mine-{token}")
            r = await sb.exec(f"cat /tmp/pwn-{token} /root/pwn-{token}")
            assert r.stdout == "x\nx\n"  # the sandbox's own private /tmp and /root

    run(go())
    for target in targets:
        assert not Path(target).exists(), target
    leftovers = subprocess.run(["find", "/tmp", "/root", "/var/tmp", "-name", f"*{token}*"],
                               capture_output=True, text=True).stdout
    assert leftovers == ""


# Claim 4: bounded resources.
def test_a_fork_bomb_is_contained_and_the_host_stays_responsive(make_task: MakeTask) -> None:
    async def go() -> None:
        limits = SandboxLimits(max_processes=64)
        async with await LocalSandbox.start(make_task(), limits=limits) as sb:
            started = time.monotonic()
            r = await sb.exec("bomb() { bomb | bomb & }; bomb; sleep 3", timeout_sec=6)
            assert time.monotonic() - started < 15
            host = time.monotonic()
            subprocess.run(["true"], check=True)
            assert time.monotonic() - host < 2
            assert r.timed_out or "Resource temporarily unavailable" in r.stderr
            assert (await sb.exec("echo alive")).stdout == "alive\n"
            assert sb._cgroup is not None and sb.command_pids() == []

    run(go())


def test_a_memory_bomb_is_killed_inside_the_sandbox(make_task: MakeTask) -> None:
    async def go() -> None:
        async with await LocalSandbox.start(make_task(), limits=SandboxLimits(memory_mb=128)) as sb:
            r = await sb.exec("python3 -c 'x = bytearray(1500 * 2**20); print(len(x))'", timeout_sec=60)
            assert r.oom_killed and r.return_code in (137, -9) and r.stdout == ""
            assert (await sb.exec("echo alive")).stdout == "alive\n"

    run(go())


def test_huge_output_is_truncated_without_exhausting_memory(make_task: MakeTask) -> None:
    def peak_rss_kb() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    async def go() -> None:
        async with await LocalSandbox.start(make_task()) as sb:
            before = peak_rss_kb()
            r = await sb.exec("head -c 100000000 /dev/zero | tr '\\0' a; echo; echo END", timeout_sec=120)
            grown_mb = (peak_rss_kb() - before) / 1024
            assert r.return_code == 0
            assert r.truncated_bytes > 98_000_000
            assert len(r.stdout) < 1_100_000 and r.stdout.endswith("END\n")
            assert "bytes of output dropped" in r.stdout
            assert grown_mb < 50, f"capturing 100 MB raised peak memory by {grown_mb:.0f} MB"

    run(go())


# Claim 5: nothing outlives a command or the episode.
def test_an_infinite_loop_is_killed_at_its_timeout_with_no_survivor(make_task: MakeTask) -> None:
    async def go() -> None:
        async with await LocalSandbox.start(make_task()) as sb:
            r = await sb.exec("(setsid sleep 1000 &); nohup sleep 1000 & while true; do :; done", timeout_sec=1)
            assert r.timed_out and r.return_code < 0
            assert sb._cgroup is not None and sb.command_pids() == []
            assert (await sb.exec("ps -e -o comm= | grep -c sleep")).stdout == "0\n"
            uid_processes = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _uid(p) == 900_000]
        assert not [p for p in uid_processes if _cmdline(p).startswith("sleep")]

    run(go())


def _uid(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# Claim 6: grading is not tamperable.
@pytest.mark.parametrize("path", ["../etc/passwd", "/app/../etc/passwd", "relative.txt", "/app/x\0y", "/etc/x",
                                  "/usr/bin/x", "/proc/1/environ"])
def test_path_tricks_in_transfers_are_refused(make_task: MakeTask, tmp_path: Path, path: str) -> None:
    source = tmp_path / "f"
    source.write_text("x")

    async def go() -> None:
        async with await LocalSandbox.start(make_task()) as sb:
            with pytest.raises(SandboxPathError):
                await sb.upload_file(source, path)
            with pytest.raises(SandboxPathError):
                await sb.download_file(path, tmp_path / "out")

    run(go())


def test_planted_symlinks_cannot_redirect_transfers_to_the_host(make_task: MakeTask, tmp_path: Path) -> None:
    token = os.urandom(4).hex()
    source = tmp_path / "payload"
    source.write_text("payload\n")

    async def go() -> None:
        async with await LocalSandbox.start(make_task()) as sb:
            await sb.exec("ln -s /etc/shadow /app/shadow; ln -s /root /app/hostroot; ln -s / /tmp/slash; "
                          "mkdir -p /logs/agent && ln -s /etc /logs/agent/etc")
            for path in ("/app/shadow", "/app/hostroot/.bashrc", "/tmp/slash/etc/hostname"):
                with pytest.raises(SandboxPathError, match="symlink"):
                    await sb.download_file(path, tmp_path / "leak")
                with pytest.raises(SandboxPathError, match="symlink"):
                    await sb.read_file(path)
            with pytest.raises(SandboxPathError, match="symlink"):
                await sb.upload_file(source, f"/app/hostroot/pwn-{token}")
            with pytest.raises(SandboxPathError, match="symlink"):
                await sb.write_file(f"/app/hostroot/pwn-{token}", b"x")
            await sb.download_dir("/logs/agent", tmp_path / "logs")  # the link is skipped, not followed

    run(go())
    assert not (tmp_path / "leak").exists()
    assert not Path(f"/root/pwn-{token}").exists()
    assert not (tmp_path / "logs" / "etc").exists()


class _Spy:
    """An agent that looks for the tests and plants rewards; records what it saw."""

    name = "spy"

    def __init__(self, commands: list[str]) -> None:
        self.commands = commands
        self.outputs: list[str] = []

    async def run(self, task, sandbox, *, timeout_sec):  # type: ignore[no-untyped-def]
        for command in self.commands:
            r = await sandbox.exec(command)
            self.outputs.append(r.stdout + r.stderr)
        return AgentOutcome(status=EpisodeStatus.SUBMITTED)


SECRET_TEST = "#!/bin/bash\n# hidden-marker-7f3a\necho 0 > /logs/verifier/reward.txt\n"


def test_tests_are_invisible_to_the_agent_until_verification(make_task: MakeTask) -> None:
    task = make_task(test_sh=SECRET_TEST, files={"tests/helper_data.txt": "hidden-marker-7f3a\n"})
    spy = _Spy(["ls -la /tests; cat /tests/test.sh",
                "grep -rs hidden-marker-7f3a /tests /app /tmp /root /logs /solution /home /work; echo scanned",
                "echo 'import sys; sys.exit(0)' > /tests/conftest.py; echo planted=$?"])
    result = run(run_trial(task, spy))
    seen = "\n".join(spy.outputs)
    assert "hidden-marker-7f3a" not in seen and "helper_data" not in seen
    assert "scanned" in seen and "planted=1" in seen  # /tests is read-only for the agent
    assert result.status is EpisodeStatus.SUBMITTED and result.reward == 0.0


def test_a_reward_planted_by_the_agent_is_removed_before_the_verifier_runs(make_task: MakeTask,
                                                                            tmp_path: Path) -> None:
    plant = ("echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json; "
             "ln -s /app /logs/verifier/test-stdout.txt; chmod 000 /logs/verifier")
    records_stale = ("#!/bin/bash\nls /logs/verifier | grep -vx test-stdout.txt > /tmp/seen\n"
                     "if [ -s /tmp/seen ]; then echo stale > /logs/verifier/stale; fi\n"
                     "echo 0 > /logs/verifier/reward.txt\n")
    options = TrialOptions(trials_dir=tmp_path / "trials")
    result = run(run_trial(make_task(test_sh=records_stale), _Spy([plant]), options=options))
    assert result.status is EpisodeStatus.SUBMITTED and result.reward == 0.0
    assert result.trial_dir is not None and not (Path(result.trial_dir) / "verifier" / "stale").exists()

    writes_nothing = "#!/bin/bash\necho 'tests crashed before writing a reward'\n"
    result = run(run_trial(make_task(test_sh=writes_nothing), _Spy([plant]), options=options))
    assert result.status is EpisodeStatus.VERIFIER_ERROR and result.reward is None


def test_nop_cannot_be_rewarded_by_leftovers_of_an_earlier_episode(make_task: MakeTask) -> None:
    # Each episode has its own upper layer: what the oracle wrote is gone for the next episode.
    task = make_task(solve_sh="#!/bin/bash\necho done > marker\n",
                     test_sh="#!/bin/bash\n[ -f /app/marker ] && echo 1 > /logs/verifier/reward.txt "
                             "|| echo 0 > /logs/verifier/reward.txt\n")
    from codedojo.trial import OracleAgent

    assert run(run_trial(task, OracleAgent())).reward == 1.0
    assert run(run_trial(task, NopAgent())).reward == 0.0
