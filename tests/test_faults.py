"""Each fault kind of bench/chaos.py, short: injected once into the real code path, handled as docs/reliability.md
("Faults") says. Where another file tests a kind too, it is named:

- a sandbox's processes killed mid-command: `test_a_sandbox_killed_mid_command_is_retried_not_scored`;
- a sandbox that fails to start: `test_a_sandbox_that_fails_to_start_leaves_nothing_and_is_retried` (and
  test_trial.py, test_rollout_eval.py);
- a verifier that hangs, writes a malformed or no reward: `test_a_verifier_fault_is_retried_not_scored` (and
  test_trial.py, each message);
- a command printing 100 MB, binary bytes, invalid UTF-8:
  `test_floods_binary_and_invalid_utf8_are_ordinary_observations`;
- the engine server killed and restarted: `test_a_restarted_engine_server_gets_the_trainers_weights_back`;
- the disk filling while a checkpoint is written:
  `test_a_full_disk_fails_the_checkpoint_cleanly_and_keeps_the_last_one`;
- the trainer SIGKILLed: `test_a_kill_between_the_checkpoint_renames_loses_no_checkpoint` (and test_train_resume.py,
  a CLI run killed before its checkpoint; test_train_e2e.py, a resumed run's evaluations and their gain).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from codedojo.agent.loop import AgentConfig, AgentLoop
from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.agent.scripted import ScriptedPolicy
from codedojo.inference.byte_tokenizer import byte_level_tokenizer
from codedojo.inference.chat_templates import CHATML
from codedojo.rollout.episodes import EpisodeRequest, RolloutConfig, run_episodes
from codedojo.sandbox.local import LocalSandbox
from codedojo.tasks.task import Task, examples_dir
from codedojo.trial.runner import run_trial
from codedojo.trial.status import EpisodeStatus
from conftest import MakeTask

TOKENIZER = byte_level_tokenizer(chat_template=CHATML)
SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
FIX = "```bash\necho world > hello.txt\n```"


def _episode(script: list[str], *, task: Task | None = None, agent: AgentConfig | None = None) -> Any:
    task = task or Task.load(examples_dir() / "hello-file")
    (episode,) = asyncio.run(run_episodes([EpisodeRequest(task=task, group=0, sample=0, seed=1)],
                                          engine=ScriptedPolicy(TOKENIZER, script), agent_config=agent or AgentConfig(),
                                          rollout=RolloutConfig()))
    return episode


@pytest.fixture
def sandboxes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[LocalSandbox]]:
    """Every local sandbox the test starts, in a state directory of the test's own (outside pytest's folder,
    which the sandbox's user cannot enter)."""
    state = Path(tempfile.mkdtemp(prefix="codedojo-faults-"))
    state.chmod(0o755)
    monkeypatch.setenv("CODEDOJO_SANDBOX_DIR", str(state))
    started: list[LocalSandbox] = []
    real_start = LocalSandbox.start.__func__  # type: ignore[attr-defined]

    async def start(cls: type[LocalSandbox], task: Task, *, limits: Any = None) -> LocalSandbox:
        started.append(await real_start(cls, task, limits=limits))
        return started[-1]

    monkeypatch.setattr(LocalSandbox, "start", classmethod(start))
    yield started
    shutil.rmtree(state, ignore_errors=True)


# ----- sandboxes ------------------------------------------------------------------------------------------


def test_a_sandbox_killed_mid_command_is_retried_not_scored(sandboxes: list[LocalSandbox],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    # every process of the first sandbox (its init too) is SIGKILLed from outside while `sleep` runs
    script = ["```bash\nsleep 2; echo world > hello.txt\n```", SUBMIT]

    async def go() -> Any:
        playing = asyncio.ensure_future(run_episodes(
            [EpisodeRequest(task=Task.load(examples_dir() / "hello-file"), group=0, sample=0, seed=1)],
            engine=ScriptedPolicy(TOKENIZER, script), agent_config=AgentConfig(), rollout=RolloutConfig()))
        deadline = asyncio.get_running_loop().time() + 60
        while not (sandboxes and sandboxes[0].command_pids()):
            assert not playing.done() and asyncio.get_running_loop().time() < deadline, "no command ran"
            await asyncio.sleep(0.01)  # a bounded poll: until the agent's command runs in the first sandbox
        for pid in sandboxes[0].pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return await playing

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        (episode,) = asyncio.run(go())
        gc.collect()  # a future whose exception nobody read complains when it is collected
    assert not [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
    assert episode.attempts == 2  # the killed attempt was an infrastructure failure, so it ran again
    assert episode.status is EpisodeStatus.SUBMITTED and episode.valid and episode.reward == 1.0


def test_a_sandbox_that_fails_to_start_leaves_nothing_and_is_retried(sandboxes: list[LocalSandbox],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.sandbox.base import SandboxStartError
    from codedojo.sandbox.bwrap import IsolatedShell
    from codedojo.sandbox.host import state_root

    real_shell = IsolatedShell.start.__func__  # type: ignore[attr-defined]
    failed: list[bool] = []

    async def shell(cls: type[IsolatedShell], **kwargs: Any) -> IsolatedShell:
        if not failed:  # the first sandbox's shell fails after its workspace and cgroup were made
            failed.append(True)
            raise SandboxStartError("bubblewrap exited before the sandbox was ready")
        return await real_shell(cls, **kwargs)

    monkeypatch.setattr(IsolatedShell, "start", classmethod(shell))
    episode = _episode([FIX, SUBMIT])
    assert failed and episode.attempts == 2 and episode.valid and episode.reward == 1.0
    assert list(state_root().iterdir()) == []  # the half-built sandbox was torn down, the retried one closed


# ----- verifiers ----------------------------------------------------------------------------------------

FAULTY_TEST_SH = """#!/bin/bash
case "$(cat /tmp/fault 2>/dev/null)" in
  hang) sleep 600 ;;
  malformed) echo '{"reward": 1,' > /logs/verifier/reward.json; exit 0 ;;
  missing) exit 0 ;;
esac
[ "$(cat /app/hello.txt 2>/dev/null)" = world ] && echo 1 > /logs/verifier/reward.txt \
  || echo 0 > /logs/verifier/reward.txt
"""


@pytest.mark.parametrize("fault", ["hang", "malformed", "missing"])
def test_a_verifier_fault_is_retried_not_scored(make_task: MakeTask, monkeypatch: pytest.MonkeyPatch,
                                                fault: str) -> None:
    import codedojo.trial.runner as runner

    real_verify = runner.verify
    planted: list[str] = []

    async def verify(task: Task, sandbox: Any, **kwargs: Any) -> dict[str, float]:
        if not planted:  # the first verification only: the fault is transient
            planted.append(fault)
            await sandbox.exec(f"echo {fault} > /tmp/fault", timeout_sec=30, user="root")
        return await real_verify(task, sandbox, **kwargs)

    monkeypatch.setattr(runner, "verify", verify)
    task = make_task(test_sh=FAULTY_TEST_SH, verifier_timeout=5.0)
    episode = _episode([FIX, SUBMIT], task=task)
    assert planted and episode.attempts == 2  # a verifier error, never a zero: retried
    assert episode.status is EpisodeStatus.SUBMITTED and episode.valid and episode.reward == 1.0


# ----- what a command prints ---------------------------------------------------------------------------


def test_floods_binary_and_invalid_utf8_are_ordinary_observations(tmp_path: Path) -> None:
    flood = "```bash\nhead -c 100000000 /dev/zero | tr '\\0' x\n```"
    binary = "```bash\nhead -c 4096 /bin/sh\n```"
    invalid = "```bash\nprintf 'caf\\xe9 \\xc3\\x28 \\xed\\xa0\\x80 end\\n'\n```"
    agent = AgentLoop(ScriptedPolicy(TOKENIZER, [flood, binary, invalid, FIX, SUBMIT]))
    result = asyncio.run(run_trial(Task.load(examples_dir() / "hello-file"), agent))
    assert result.status is EpisodeStatus.SUBMITTED and result.reward_valid and result.reward == 1.0
    assert result.trajectory is not None
    flooded, dumped, garbled = result.trajectory.turns[:3]
    assert flooded.return_code == dumped.return_code == garbled.return_code == 0
    from codedojo.sandbox.base import SandboxLimits

    assert flooded.output_chars <= SandboxLimits().output_bytes + 100  # the head and tail of 100 MB, and a marker
    observations = [m["content"] for m in result.trajectory.messages if m["role"] == "user"][1:4]
    assert len(observations[0]) < 20_000  # what the model sees: a head, a tail, and how much is not shown
    shown = int(re.search(r"(\d+) characters in the middle are not shown", observations[0]).group(1))  # type: ignore[union-attr]
    assert 99_000_000 < shown < 100_000_000
    assert "\ufffd" in observations[1] and "caf\ufffd \ufffd(" in observations[2] and "end" in observations[2]
    saved = tmp_path / "episode.json"  # the trajectory file holds what the model saw
    result.trajectory.save(saved)
    from codedojo.trial.trajectory import Trajectory

    assert Trajectory.load(saved).messages == result.trajectory.messages


# ----- the engine server -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _serving(port: int) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen([sys.executable, "-m", "codedojo.cli", "serve", "--model", "tiny-llama", "--port",
                                str(port), "--seed", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "serving tiny-llama on URL" once it listens
        assert "serving" in line, line + process.stdout.read()
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_a_restarted_engine_server_gets_the_trainers_weights_back(tmp_path: Path) -> None:
    from codedojo.inference import HTTPEngine, SamplingParams, TinyModel
    from codedojo.train.served import ServedEngine

    loaded = TinyModel().load()
    noise = random.Random(0)
    trained = {k: v + 0.05 * torch.randn(v.shape, generator=torch.Generator().manual_seed(noise.randrange(9999)))
               for k, v in loaded.state_dict.items()}  # the trainer's weights: not the server's own
    prompt = TOKENIZER.encode("hello there, what now?")
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"

    async def go(first: subprocess.Popen[str]) -> tuple[Any, ...]:
        engine = ServedEngine(HTTPEngine(url, tokenizer=loaded.tokenizer), weights_dir=tmp_path / "weights",
                              tied_head=True, reconnect_timeout_s=120)
        own = await engine.client.generate(prompt, params)
        await engine.update_weights(trained)
        before = await engine.generate(prompt, params, session_id="a")
        first.kill()  # the server dies between two turns
        first.wait()
        refused = asyncio.Event()
        health = engine.client.health

        async def watched() -> dict[str, Any]:
            try:
                return await health()
            except Exception:
                refused.set()
                raise

        engine.client.health = watched  # type: ignore[method-assign]
        waiting = asyncio.ensure_future(engine.generate(prompt, params, session_id="a"))
        await asyncio.wait_for(refused.wait(), 60)  # the turn found the server gone and waits for it
        with _serving(port):  # ... which its supervisor restarts, with its own initial weights
            after = await asyncio.wait_for(waiting, 120)
        await engine.close()
        return own, before, after, engine.reloads

    with _serving(port) as first:
        own, before, after, reloads = asyncio.run(go(first))
    assert own.token_ids != before.token_ids  # so sampling from the restarted server's own weights would show
    assert after.token_ids == before.token_ids and reloads == 1
    assert after.logprobs == pytest.approx(before.logprobs, abs=1e-5)
    assert after.weight_version == before.weight_version == 1  # the trainer's weights, loaded once


# ----- checkpoints -------------------------------------------------------------------------------------


def _state() -> Any:
    from codedojo.config import Recipe
    from codedojo.inference import TinyModel
    from codedojo.train.optim import build_optimizer, build_scheduler
    from codedojo.train.plan import update_config_for
    from codedojo.train.policy import Policy
    from codedojo.train.state import TaskSampler, TrainState

    loaded = TinyModel().load()
    policy = Policy(loaded.hf_model())
    config = update_config_for(Recipe(num_rollout=2)).optimizer
    optimizer = build_optimizer(policy.trainable_parameters(), config)
    state = TrainState(policy=policy, optimizer=optimizer, scheduler=build_scheduler(optimizer, config),
                       sampler=TaskSampler(num_tasks=2, seed=0), shuffle_rng=random.Random(0))
    return loaded, state


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB filesystem of its own (a tmpfs, mounted as root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_fails_the_checkpoint_cleanly_and_keeps_the_last_one(tmpfs: Path) -> None:
    from codedojo.train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint

    loaded, state = _state()
    save = dict(hf_config=loaded.hf_config, tokenizer=loaded.tokenizer)
    state.step = 1
    save_checkpoint(tmpfs, "last", state, with_hf=False, **save)
    free = os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize
    (tmpfs / "ballast").write_bytes(b"\0" * (free - 200_000))  # a policy.pt of the tiny model takes ~440 kB
    state.step = 2
    with pytest.raises(CheckpointError) as failed:
        save_checkpoint(tmpfs, "last", state, with_hf=False, **save)
    message = str(failed.value)
    assert "could not write checkpoint last" in message and "the disk is full" in message
    assert "the previous checkpoint (last) is intact" in message and "rerun the same command" in message
    assert sorted(p.name for p in tmpfs.iterdir()) == ["ballast", "last", "latest"]  # nothing half-written left
    resumed = _state()[1]
    path = latest_checkpoint(tmpfs)
    assert path is not None
    load_checkpoint(path, resumed)
    assert resumed.step == 1
    (tmpfs / "ballast").unlink()  # once there is room again, the same save goes through
    save_checkpoint(tmpfs, "last", state, with_hf=False, **save)
    load_checkpoint(tmpfs / "last", resumed)
    assert resumed.step == 2


class _Killed(BaseException):
    """Stands for a SIGKILL: no `except Exception` runs, and what was on disk stays as it was."""


def test_a_kill_between_the_checkpoint_renames_loses_no_checkpoint(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint

    loaded, state = _state()
    save = dict(hf_config=loaded.hf_config, tokenizer=loaded.tokenizer, with_hf=False)
    state.step = 1
    save_checkpoint(tmp_path, "last", state, **save)
    real_rename = Path.rename
    renames: list[Path] = []

    def rename(self: Path, target: Any) -> Any:
        renames.append(self)
        if len(renames) == 2:  # the old `last` is aside, the new one not in place yet
            raise _Killed
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    state.step = 2
    with pytest.raises(_Killed):
        save_checkpoint(tmp_path, "last", state, **save)
    monkeypatch.setattr(Path, "rename", real_rename)
    assert not (tmp_path / "last").exists()  # the window a SIGKILL can fall in
    path = latest_checkpoint(tmp_path)  # what a relaunch resumes from
    assert path == tmp_path / "last"
    resumed = _state()[1]
    load_checkpoint(path, resumed)
    assert resumed.step == 1
    save_checkpoint(tmp_path, "last", state, **save)  # the next save clears what the killed one left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last", "latest"]


def test_engine_url_needs_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from codedojo.cli import main

    dataset = tmp_path / "train.jsonl"
    dataset.write_text("")
    assert main(["train", "--dataset", str(dataset), "--engine-url", "http://127.0.0.1:1"]) == 2
    assert "--engine-url needs --run-dir" in capsys.readouterr().err


def test_every_fault_in_the_reliability_doc_names_a_test_that_exists() -> None:
    from doc_tables import assert_rows_name_existing_tests, section

    table = section("Faults").split("\n| fault |", 1)[1].split("\n\n")[0]  # the table of fault kinds
    rows = [line for line in table.splitlines()[1:] if line.startswith("| ")]
    assert len(rows) >= 8
    assert_rows_name_existing_tests(rows)
