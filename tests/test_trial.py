"""The trial runner: Harbor's phase order, timeouts from task.toml, and what each failure becomes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from codedojo.sandbox import SandboxClosedError
from codedojo.sandbox.local import LocalSandbox
from codedojo.tasks.task import Task, discover_tasks, examples_dir
from codedojo.trial import EpisodeStatus, NopAgent, OracleAgent, TrialOptions, TrialResult, run_trial
from codedojo.trial.agents import AgentOutcome
from conftest import MakeTask

EXAMPLES = discover_tasks([examples_dir()])


def trial(task: Task, agent: object, **options: object) -> TrialResult:
    return asyncio.run(run_trial(task, agent, options=TrialOptions(**options)))  # type: ignore[arg-type]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_scores_one_with_oracle_and_zero_with_nop(path: Path) -> None:
    task = Task.load(path)
    oracle = trial(task, OracleAgent())
    nop = trial(task, NopAgent())
    assert (oracle.status, oracle.reward, oracle.solved, oracle.failure_kind) == (
        EpisodeStatus.SUBMITTED, 1.0, True, None)
    assert (nop.status, nop.reward, nop.solved, nop.failure_kind) == (EpisodeStatus.SUBMITTED, 0.0, False, "task")


def test_the_cli_reports_json(tmp_path: Path) -> None:
    example = examples_dir() / "fix-add"
    for agent, reward in (("oracle", 1.0), ("nop", 0.0)):
        proc = subprocess.run([sys.executable, "-m", "codedojo.cli", "trial", str(example), "--agent", agent,
                               "--json", "--trials-dir", str(tmp_path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        assert data["reward"] == reward and data["status"] == "submitted"
        assert data["rewards"]["pass_to_pass"] == 1.0
        assert set(data["timings"]) == {"environment_setup", "agent", "verifier", "teardown"}
        trial_dir = Path(data["trial_dir"])
        assert json.loads((trial_dir / "result.json").read_text())["reward"] == reward
        assert (trial_dir / "verifier" / "test-stdout.txt").read_text()
        assert (trial_dir / "verifier" / "reward.json").exists()


def test_reward_json_wins_over_reward_txt_and_test_sh_runs_in_the_workdir(make_task: MakeTask) -> None:
    test_sh = ("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
               "[ \"$(pwd)\" = /app ] && echo '{\"reward\": 1, \"extra\": 3}' > /logs/verifier/reward.json\n")
    result = trial(make_task(test_sh=test_sh), NopAgent())
    assert result.rewards == {"reward": 1.0, "extra": 3.0}


def test_the_verifier_env_reaches_test_sh(make_task: MakeTask, monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.tasks.config import AgentPhaseConfig, EnvironmentConfig, TaskConfig, VerifierConfig
    from codedojo.tasks.task import write_task

    monkeypatch.setenv("CODEDOJO_TEST_HOST_VALUE", "0.5")
    base = make_task()
    config = TaskConfig(agent=AgentPhaseConfig(timeout_sec=30),
                        environment=EnvironmentConfig(network_mode="no-network"),
                        verifier=VerifierConfig(env={"SCORE": "${CODEDOJO_TEST_HOST_VALUE}"}))
    files = {"environment/Dockerfile": (base.path / "environment/Dockerfile").read_text(),
             "tests/test.sh": "#!/bin/bash\necho $SCORE > /logs/verifier/reward.txt\n",
             "solution/solve.sh": "#!/bin/bash\n"}
    task = write_task(base.path.parent / "env-task", instruction="x", config=config, files=files)
    assert trial(task, NopAgent()).reward == 0.5
    monkeypatch.delenv("CODEDOJO_TEST_HOST_VALUE")
    missing = trial(task, NopAgent())  # Harbor fails on a missing variable; it never becomes ""
    assert missing.status is EpisodeStatus.TASK_ERROR and missing.reward is None
    assert missing.error is not None and "'CODEDOJO_TEST_HOST_VALUE'" in missing.error
    assert missing.timings.environment_setup is None  # refused before anything started


@pytest.mark.parametrize(
    ("test_sh", "message"),
    [
        ("#!/bin/bash\necho no reward here\n", "wrote neither"),
        ("#!/bin/bash\n: > /logs/verifier/reward.txt\n", "reward.txt is empty"),
        ("#!/bin/bash\necho '{\"reward\": \"high\"}' > /logs/verifier/reward.json\n", "not a finite number"),
        ("#!/bin/bash\nexit 3\n", "test.sh exited 3"),
        ("#!/bin/bash\nsleep 30\necho 1 > /logs/verifier/reward.txt\n", "ran past the verifier timeout of 1s"),
    ],
)
def test_a_bad_verifier_is_an_infrastructure_failure_not_a_zero(make_task: MakeTask, test_sh: str,
                                                                 message: str) -> None:
    result = trial(make_task(test_sh=test_sh, verifier_timeout=1.0), NopAgent())
    assert result.status is EpisodeStatus.VERIFIER_ERROR
    assert result.reward is None and not result.reward_valid and result.failure_kind == "infrastructure"
    assert result.error is not None and message in result.error


def test_a_verifier_error_shows_the_end_of_test_sh_output(make_task: MakeTask) -> None:
    # test.sh's stdout and stderr go to /logs/verifier/test-stdout.txt; the hint must come from there.
    test_sh = ("#!/bin/bash\nseq 1 5000\necho 'collected 0 items'\n"
               "echo 'ModuleNotFoundError: no module named frobnicate' >&2\nexit 2\n")
    result = trial(make_task(test_sh=test_sh), NopAgent())
    assert result.status is EpisodeStatus.VERIFIER_ERROR and result.error is not None
    assert "(test.sh exited 2; its output ends: " in result.error
    assert result.error.endswith("collected 0 items\nModuleNotFoundError: no module named frobnicate)")
    assert "\n1\n2\n3\n" not in result.error and len(result.error) < 500  # the end, not the whole log
    silent = trial(make_task(test_sh="#!/bin/bash\nexit 0\n"), NopAgent())
    assert silent.error is not None and silent.error.endswith("nor reward.txt (test.sh exited 0)")


class _MovableClock(asyncio.SelectorEventLoop):
    """An event loop whose clock the test moves forward: a timeout then fires when the test says, after what
    it must come after, instead of wherever the machine's speed puts it."""

    ahead = 0.0

    def time(self) -> float:
        return super().time() + self.ahead


def test_a_slow_or_failing_agent_is_still_verified(make_task: MakeTask) -> None:
    test_sh = ("#!/bin/bash\n[ -f /app/started ] && echo 1 > /logs/verifier/reward.txt "
               "|| echo 0 > /logs/verifier/reward.txt\n")
    slow = make_task(test_sh=test_sh, solve_sh="#!/bin/bash\ntouch started\nsleep 600\n", agent_timeout=60.0)

    async def time_out_after_the_work() -> TrialResult:
        sandboxes: list[LocalSandbox] = []

        async def factory(task: Task) -> LocalSandbox:
            sandboxes.append(await LocalSandbox.start(task))
            return sandboxes[-1]

        loop = asyncio.get_running_loop()
        assert isinstance(loop, _MovableClock)
        running = asyncio.ensure_future(run_trial(slow, OracleAgent(), sandbox_factory=factory))
        deadline = loop.time() + 20
        while not (sandboxes and sandboxes[0]._host_path("/app/started", create_parents=False).exists()):
            assert not running.done(), running.result()
            assert loop.time() < deadline, "solve.sh did not touch /app/started within 20 s"
            await asyncio.sleep(0.01)  # a bounded poll: until solve.sh has done its work
        loop.ahead += 60.0  # now its 60 s budget is spent: the timeout falls mid-`sleep 600`, after the work
        return await running

    with asyncio.Runner(loop_factory=_MovableClock) as runner:
        result = runner.run(time_out_after_the_work())
    assert result.status is EpisodeStatus.EPISODE_TIMEOUT and result.reward == 1.0 and result.solved
    failing = make_task(test_sh=test_sh, solve_sh="#!/bin/bash\nexit 4\n")
    result = trial(failing, OracleAgent())
    assert (result.status, result.agent_exit_code, result.reward, result.failure_kind) == (
        EpisodeStatus.AGENT_FAILED, 4, 0.0, "agent")


def test_the_timeout_multiplier_scales_task_timeouts(make_task: MakeTask) -> None:
    # A 2 s solve.sh under a 1 s timeout: it always times out unscaled (it cannot finish sooner), and scaled
    # a hundredfold it has 98 s to spare, a bound for a stuck machine rather than a duration guess.
    task = make_task(solve_sh="#!/bin/bash\nsleep 2\n", agent_timeout=1.0)
    assert trial(task, OracleAgent()).status is EpisodeStatus.EPISODE_TIMEOUT
    assert trial(task, OracleAgent(), timeout_multiplier=100.0).status is EpisodeStatus.SUBMITTED


def test_an_environment_that_cannot_start_is_a_sandbox_error(make_task: MakeTask) -> None:
    result = trial(make_task(dockerfile="FROM alpine:3\nWORKDIR /app\n"), OracleAgent())
    assert result.status is EpisodeStatus.SANDBOX_ERROR and result.failure_kind == "infrastructure"
    assert result.error is not None and "FROM alpine:3" in result.error
    assert result.timings.agent is None


class _Crasher:
    name = "crasher"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def run(self, task, sandbox, *, timeout_sec):  # type: ignore[no-untyped-def]
        await sandbox.exec("true")
        raise self.exc


class _Killer:
    """Simulates the sandbox dying under the agent."""

    name = "killer"

    async def run(self, task, sandbox, *, timeout_sec):  # type: ignore[no-untyped-def]
        await sandbox.close()
        await sandbox.exec("echo never")
        return AgentOutcome(status=EpisodeStatus.SUBMITTED)


def test_agent_crashes_and_dead_sandboxes_are_classified(make_task: MakeTask) -> None:
    task = make_task()
    died = trial(task, _Killer())
    assert died.status is EpisodeStatus.SANDBOX_ERROR and died.reward is None
    lost = trial(task, _Crasher(SandboxClosedError("gone")))
    assert lost.status is EpisodeStatus.SANDBOX_ERROR and "gone" in (lost.error or "")
    bug = trial(task, _Crasher(ZeroDivisionError("oops")))
    assert bug.status is EpisodeStatus.INTERNAL_ERROR and "ZeroDivisionError" in (bug.error or "")


class _FailsBetweenSteps:
    """A real local sandbox that fails (as one dying between steps would) when the second step is prepared:
    on the upload of its workdir/, or on the command that empties the previous step's grading files."""

    def __init__(self, inner: object, *, failing: str) -> None:
        self._inner = inner
        self._failing = failing
        self._resets = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    @property
    def workdir(self) -> str:
        return self._inner.workdir  # type: ignore[attr-defined]

    async def exec(self, command: str, **kwargs: object) -> object:
        if command.startswith("rm -rf /tests; mkdir -p /tests"):
            self._resets += 1
            if self._failing == "exec" and self._resets == 2:
                raise SandboxClosedError("the sandbox died between steps")
        return await self._inner.exec(command, **kwargs)  # type: ignore[attr-defined]

    async def upload_dir(self, source: Path, target: str) -> None:
        if self._failing == "upload_dir" and target == self.workdir:
            raise SandboxClosedError("the sandbox died between steps")
        await self._inner.upload_dir(source, target)  # type: ignore[attr-defined]


@pytest.mark.parametrize("failing", ["exec", "upload_dir"])
def test_a_sandbox_failing_while_a_step_is_prepared_is_a_sandbox_error(failing: str) -> None:
    from codedojo.sandbox import start_sandbox

    async def factory(task: Task) -> object:
        return _FailsBetweenSteps(await start_sandbox(task, backend="local"), failing=failing)

    task = Task.load(Path(__file__).parent / "harbor_compat" / "multi-step")
    result = asyncio.run(run_trial(task, OracleAgent(), sandbox_factory=factory))  # type: ignore[arg-type]
    assert result.status is EpisodeStatus.SANDBOX_ERROR and result.failure_kind == "infrastructure"
    assert result.error == "sandbox failed preparing step 'extend': the sandbox died between steps"
    assert result.reward is None and not result.reward_valid
    assert [(s["step"], s["status"]) for s in result.details["steps"]] == [("write", "submitted"),
                                                                           ("extend", "sandbox_error")]
