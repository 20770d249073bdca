"""The Modal sandbox backend offline: token-bucket math on an injected clock, paced and cancelled creation,
the orphan sweeper against a fake listing, lifetimes, exit-code mapping, and exec through a fake Modal
sandbox object. One test runs against real Modal when MODAL_TOKEN_ID is set."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from codedojo.integrations.modal_boot import ModalSandboxConfig, paced_create, sandbox_timeouts, task_workdir
from codedojo.integrations.modal_limits import TokenBucket
from codedojo.integrations.modal_sandbox import ModalSandbox, classify_exit
from codedojo.integrations.modal_sweeper import MANAGED, orphan_reason, owner_tags, sweep
from codedojo.sandbox import BACKENDS, SandboxClosedError, SandboxError, SandboxLimits, SandboxStartError
from codedojo.tasks.config import AgentPhaseConfig, EnvironmentConfig, TaskConfig, VerifierConfig
from codedojo.tasks.task import Task, examples_dir


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:  # time passes without waiting
        self.now += seconds


def test_the_token_bucket_allows_a_burst_then_paces_at_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=5.0, burst=150, clock=clock)
    assert [bucket.reserve() for _ in range(150)] == [0.0] * 150
    waits = [bucket.reserve() for _ in range(3)]  # queued behind each other, 1/5 s apart
    assert waits == pytest.approx([0.2, 0.4, 0.6])
    clock.now += 0.6  # the three reservations are due; the bucket is empty again
    assert bucket.available == pytest.approx(0.0)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now += 1000.0
    assert bucket.available == 150.0  # refill stops at the burst


def test_acquire_waits_exactly_as_long_as_reserved() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=1, clock=clock)

    async def run() -> list[float]:
        return [await bucket.acquire(sleep=clock.sleep) for _ in range(4)]

    assert asyncio.run(run()) == pytest.approx([0.0, 0.5, 0.5, 0.5])  # each waiter's clock moved on
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)


class FakeSandboxes:
    """What Modal would hand back, with a scripted creation outcome."""

    def __init__(self, outcomes: list[str]) -> None:
        self.outcomes = outcomes
        self.created: list[str] = []
        self.terminated: list[str] = []
        self.release = asyncio.Event()

    async def create(self) -> str:
        outcome = self.outcomes.pop(0)
        if outcome == "slow":
            await self.release.wait()
        if outcome == "fail":
            raise RuntimeError("RESOURCE_EXHAUSTED: Sandbox creation rate limit (5/s) exceeded")
        name = f"sb-{len(self.created)}"
        self.created.append(name)
        return name

    async def terminate(self, sandbox: str) -> None:
        self.terminated.append(sandbox)


def test_paced_create_retries_and_takes_a_token_per_attempt() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=0.5, burst=1, clock=clock)  # one token every 2 s
    fake = FakeSandboxes(["fail", "fail", "ok"])

    async def run() -> str:
        return await paced_create(fake.create, terminate=fake.terminate, bucket=bucket, gate=asyncio.Semaphore(1),
                                  attempts=3, sleep=clock.sleep)

    assert asyncio.run(run()) == "sb-0"
    # 1 s backoff, 1 s more until the second token, 2 s backoff (the third token has refilled meanwhile)
    assert clock.now == pytest.approx(104.0)
    fake = FakeSandboxes(["fail", "fail"])
    with pytest.raises(RuntimeError, match="rate limit"):
        asyncio.run(paced_create(fake.create, terminate=fake.terminate, bucket=TokenBucket(clock=clock),
                                 gate=asyncio.Semaphore(1), attempts=2, sleep=clock.sleep))
    fake = FakeSandboxes(["fail"])
    with pytest.raises(RuntimeError):  # not retryable: one attempt only
        asyncio.run(paced_create(fake.create, terminate=fake.terminate, bucket=TokenBucket(clock=clock),
                                 gate=asyncio.Semaphore(1), retryable=lambda e: False, sleep=clock.sleep))


def test_a_creation_cancelled_midway_is_terminated_once_it_exists() -> None:
    fake = FakeSandboxes(["slow"])

    async def run() -> None:
        starting = asyncio.ensure_future(paced_create(fake.create, terminate=fake.terminate, bucket=TokenBucket(),
                                                      gate=asyncio.Semaphore(1)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        starting.cancel()  # e.g. the trial's build timeout fired
        with pytest.raises(asyncio.CancelledError):
            await starting
        assert fake.terminated == []  # Modal has not answered yet
        fake.release.set()  # ... now it does
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(run())
    assert fake.created == ["sb-0"] and fake.terminated == ["sb-0"]


class FakeHandle:
    def __init__(self, object_id: str, tags: dict[str, str], log: list[str]) -> None:
        self.object_id = object_id
        self.tags = tags
        self.log = log

    async def get_tags(self) -> dict[str, str]:
        return self.tags

    async def terminate(self) -> None:
        self.log.append(self.object_id)


class FakeListing:
    """Modal's Sandbox.list as the sweeper sees it: filtered by tags."""

    def __init__(self, sandboxes: dict[str, dict[str, str]]) -> None:
        self.terminated: list[str] = []
        self.handles = [FakeHandle(i, t, self.terminated) for i, t in sandboxes.items()]

    async def list_sandboxes(self, tags: dict[str, str]) -> list[FakeHandle]:
        return [h for h in self.handles if all(h.tags.get(k) == v for k, v in tags.items())]


def test_the_sweeper_removes_only_orphans_of_dead_runs() -> None:
    now = 10_000.0

    def tags(run: str, *, host: str = "head", pid: int = 11, created: float = now - 60) -> dict[str, str]:
        return owner_tags(task_name="t", lifetime_sec=3600, now=created, run_id=run, host=host, pid=pid)

    listing = FakeListing({
        "mine": tags("live-run", pid=10),
        "dead-pid": tags("crashed", pid=12),
        "other-host": tags("elsewhere", host="worker-3", pid=12),
        "declared-dead": tags("stopped", host="worker-3"),
        "expired": tags("old", host="worker-3", created=now - 7200),
        "not-ours": {"harbor.managed": "1"},
        "untagged-copy": {**tags("crashed", pid=12), MANAGED: "0"},
    })
    alive = {10, 11}.__contains__
    swept = asyncio.run(sweep(listing, dead_runs={"stopped"}, now=now, host="head", alive=alive,
                              live_run="live-run"))
    assert sorted(s.object_id for s in swept) == ["dead-pid", "declared-dead", "expired"]
    assert sorted(listing.terminated) == ["dead-pid", "declared-dead", "expired"]
    reasons = {s.object_id: s.reason for s in swept}
    assert "(pid 12 on head) is gone" in reasons["dead-pid"] and "past its lifetime" in reasons["expired"]
    assert orphan_reason(tags("x", pid=11), now=now, host="head", alive=alive) is None  # alive owner


def _task(*, agent: float | None = 300.0, verifier: float = 120.0, build: float = 600.0,
          workdir: str | None = None) -> Task:
    config = TaskConfig(agent=AgentPhaseConfig(timeout_sec=agent), verifier=VerifierConfig(timeout_sec=verifier),
                        environment=EnvironmentConfig(build_timeout_sec=build, docker_image="x/y:1", workdir=workdir))
    return Task(path=Path("/tasks/t"), config=config, instruction="do")


def test_sandbox_lifetime_outlasts_the_episode_budget() -> None:
    # budget = build 600 + min(agent 300, episode 1800) + runner grace 30 + verifier 120 = 1050
    lifetime, idle = sandbox_timeouts(_task(), ModalSandboxConfig())
    assert lifetime == 1050 + 120 and idle == 900
    lifetime, _ = sandbox_timeouts(_task(agent=None), ModalSandboxConfig(episode_timeout_sec=1800))
    assert lifetime == 600 + 1800 + 30 + 120 + 120
    with pytest.raises(SandboxStartError, match="not longer than the episode budget 1050 s"):
        sandbox_timeouts(_task(), ModalSandboxConfig(lifetime_sec=1050))
    with pytest.raises(SandboxStartError, match="idle timeout"):
        sandbox_timeouts(_task(), ModalSandboxConfig(idle_timeout_sec=5000))
    with pytest.raises(SandboxStartError, match="maximum"):
        sandbox_timeouts(_task(), ModalSandboxConfig(lifetime_sec=100_000))
    env = {"CODEDOJO_MODAL_SANDBOX_TIMEOUT": "4000", "CODEDOJO_EPISODE_TIMEOUT": "90", "CODEDOJO_MODAL_APP": "a"}
    config = ModalSandboxConfig.from_env(env)
    assert (config.lifetime_sec, config.episode_timeout_sec, config.app_name) == (4000, 90.0, "a")


def test_exit_codes_and_workdirs() -> None:
    assert classify_exit(-1, duration_sec=0.1, timeout_sec=10) == (True, False)  # Modal's exec timeout
    assert classify_exit(137, duration_sec=9.9, timeout_sec=10) == (True, False)  # killed at the timeout
    assert classify_exit(137, duration_sec=1.0, timeout_sec=10) == (False, True)  # killed early: OOM
    assert classify_exit(1, duration_sec=1.0, timeout_sec=10) == (False, False)
    assert task_workdir(_task(workdir="/repo/")) == "/repo"
    assert task_workdir(Task.load(examples_dir() / "hello-file")) == "/app"  # the Dockerfile's WORKDIR


@pytest.mark.parametrize(("config", "where"), [
    ({"agent": AgentPhaseConfig(user="agent")}, "[agent].user = 'agent'"),
    ({"verifier": VerifierConfig(user=1000)}, "[verifier].user = 1000"),
])
def test_a_task_that_runs_as_another_user_is_refused_before_modal_is_asked(
        config: dict[str, Any], where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import codedojo.integrations.modal_sandbox as backend

    async def no_app(name: str) -> None:
        raise AssertionError("the refusal must come before any Modal call")

    monkeypatch.setattr(backend, "app_for", no_app)
    task = Task(path=Path("/tasks/t"), instruction="do",
                config=TaskConfig(environment=EnvironmentConfig(docker_image="x/y:1"), **config))  # type: ignore[arg-type]
    with pytest.raises(SandboxStartError, match=rf"^/tasks/t: {re.escape(where)}: the modal backend does not run "
                                                r"commands as another user yet; use the docker backend$"):
        asyncio.run(ModalSandbox.start(task))


class _Aio:
    """Modal's client methods are called as `obj.method.aio(...)`."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.aio = fn


class FakeModalSandbox:
    """A Modal Sandbox object answering exec with scripted (stdout, stderr, code) results."""

    object_id = "sb-fake"

    def __init__(self, script: Callable[[str], tuple[bytes, bytes, int]]) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []
        self.dead = False
        self.terminated = 0
        self.exec = _Aio(self._exec)
        self.poll = _Aio(self._poll)
        self.terminate = _Aio(self._terminate)

    async def _exec(self, *args: str, **kwargs: Any) -> Any:
        self.calls.append({"args": args, **kwargs})
        if self.dead:
            raise RuntimeError("Sandbox terminated")
        out, err, code = self.script(args[-1])

        async def value(v: Any) -> Any:
            return v

        return SimpleNamespace(stdout=SimpleNamespace(read=_Aio(lambda: value(out))),
                               stderr=SimpleNamespace(read=_Aio(lambda: value(err))), wait=_Aio(lambda: value(code)))

    async def _poll(self) -> int | None:
        return 137 if self.dead else None

    async def _terminate(self) -> None:
        self.terminated += 1


def test_exec_maps_modal_results_onto_the_sandbox_protocol() -> None:
    def script(command: str) -> tuple[bytes, bytes, int]:
        return {"ok": (b"out\n", b"", 0), "slow": (b"partial", b"", -1), "hog": (b"", b"Killed", 137),
                "loud": (b"x" * 100, b"", 0)}[command]

    fake = FakeModalSandbox(script)
    box = ModalSandbox(sandbox=fake, workdir="/app", env={"TASK_VAR": "1"},
                       limits=SandboxLimits(output_bytes=10))

    async def run() -> None:
        ok = await box.exec("ok", env={"X": "2"}, timeout_sec=7.5)
        assert (ok.stdout, ok.return_code, ok.timed_out, ok.oom_killed) == ("out\n", 0, False, False)
        call = fake.calls[-1]
        assert call["args"] == ("bash", "-c", "ok") and call["workdir"] == "/app" and call["timeout"] == 8
        assert call["env"] == {"TASK_VAR": "1", "X": "2"}
        slow = await box.exec("slow", cwd="/tmp", timeout_sec=1)
        assert slow.timed_out and not slow.oom_killed and slow.stdout == "partial"
        assert fake.calls[-1]["workdir"] == "/tmp"
        hog = await box.exec("hog", timeout_sec=60)
        assert hog.oom_killed and not hog.timed_out
        loud = await box.exec("loud")  # capped per stream: first and last 5 bytes kept
        assert loud.truncated_bytes == 90 and loud.stdout.startswith("xxxxx\n[... 90 bytes")
        fake.dead = True  # the sandbox itself is gone: infrastructure, not the agent's failure
        with pytest.raises(SandboxClosedError):
            await box.exec("ok")
        await box.close()
        await box.close()
        assert fake.terminated == 1
        with pytest.raises(SandboxClosedError):
            await box.exec("ok")

    asyncio.run(run())
    assert BACKENDS["modal"] == "codedojo.integrations.modal_sandbox:ModalSandbox"


def test_a_sandbox_that_dies_of_oom_is_an_infrastructure_failure() -> None:
    fake = FakeModalSandbox(lambda command: (b"", b"", 137))

    async def run() -> None:
        box = ModalSandbox(sandbox=fake, workdir="/", env={}, limits=SandboxLimits())
        fake.dead = False
        result = await box.exec("x", timeout_sec=60)
        assert result.oom_killed
        fake.poll = _Aio(lambda: asyncio.sleep(0, result=137))  # the whole sandbox went down with it
        with pytest.raises(SandboxClosedError, match="likely out of memory"):
            await box.exec("x", timeout_sec=60)

    asyncio.run(run())
    assert issubclass(SandboxClosedError, SandboxError)


class HostModalSandbox(FakeModalSandbox):
    """A Modal Sandbox object whose container is this host: exec runs bash for real, the filesystem API
    reads and writes host paths (tests give it paths under tmp_path)."""

    def __init__(self) -> None:
        super().__init__(lambda command: (b"", b"", 0))
        self.exec = _Aio(self._run)

        async def write_bytes(data: bytes, path: str) -> None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(data)

        async def read_bytes(path: str) -> bytes:
            return Path(path).read_bytes()

        self.filesystem = SimpleNamespace(write_bytes=_Aio(write_bytes), read_bytes=_Aio(read_bytes))

    async def _run(self, *args: str, workdir: str, env: dict[str, str] | None, timeout: int, text: bool) -> Any:
        process = await asyncio.create_subprocess_exec(*args, cwd=workdir, env={**os.environ, **(env or {})},
                                                       stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await process.communicate()

        async def value(v: Any) -> Any:
            return v

        return SimpleNamespace(stdout=SimpleNamespace(read=_Aio(lambda: value(out))),
                               stderr=SimpleNamespace(read=_Aio(lambda: value(err))),
                               wait=_Aio(lambda: value(process.returncode)))


def test_files_travel_as_archives_and_come_back_without_links(tmp_path: Path) -> None:
    source = tmp_path / "host" / "tests"
    (source / "sub").mkdir(parents=True)
    (source / "test.sh").write_text("#!/bin/bash\necho ok\n")
    (source / "sub" / "data.txt").write_text("data")
    remote = tmp_path / "sandbox"
    box = ModalSandbox(sandbox=HostModalSandbox(), workdir=str(tmp_path), env={}, limits=SandboxLimits())

    async def run() -> None:
        await box.upload_dir(source, f"{remote}/tests")
        assert (remote / "tests" / "sub" / "data.txt").read_text() == "data"
        (remote / "tests" / "link").symlink_to("/etc/hostname")  # planted by an agent
        await box.download_dir(f"{remote}/tests", tmp_path / "back")
        await box.write_file(f"{remote}/a.bin", b"\x00\x01")
        assert await box.read_file(f"{remote}/a.bin", max_bytes=1) == b"\x00"
        await box.remove(f"{remote}/a.bin")
        with pytest.raises(FileNotFoundError):
            await box.read_file(f"{remote}/a.bin")
        with pytest.raises(SandboxError, match="archiving"):
            await box.download_dir(f"{remote}/missing", tmp_path / "none")

    asyncio.run(run())
    back = tmp_path / "back"
    assert sorted(p.relative_to(back).as_posix() for p in back.rglob("*")) == ["sub", "sub/data.txt", "test.sh"]
    staged = [*Path("/tmp").glob("codedojo-upload-*.tar"), *Path("/tmp").glob("codedojo-download-*.tar")]
    assert staged == []  # staging archives are removed in the sandbox


def test_a_real_modal_sandbox_runs_an_example_task(tmp_path: Path) -> None:
    if not os.environ.get("MODAL_TOKEN_ID"):
        pytest.skip("no Modal credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET to run this against Modal")
    from codedojo.trial import OracleAgent, TrialOptions, run_trial

    task = Task.load(examples_dir() / "hello-file")

    async def run() -> None:
        box = await ModalSandbox.start(task)
        try:
            assert (await box.exec("pwd")).stdout.strip() == "/app"
            slow = await box.exec("sleep 30", timeout_sec=2)
            assert slow.timed_out
            await box.write_file("/tmp/a.txt", b"hi")
            assert await box.read_file("/tmp/a.txt") == b"hi"
            (tmp_path / "up").mkdir()
            (tmp_path / "up" / "f").write_text("f")
            await box.upload_dir(tmp_path / "up", "/tests")
            await box.download_dir("/tests", tmp_path / "down")
            assert (tmp_path / "down" / "f").read_text() == "f"
            assert (await box.exec("curl -sS -m 5 https://example.com || echo blocked")).stdout.strip().endswith(
                "blocked")
        finally:
            await box.close()
        result = await run_trial(task, OracleAgent(), options=TrialOptions(backend="modal"))
        assert result.reward == 1.0

    asyncio.run(run())
