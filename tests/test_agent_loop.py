"""The agent loop with a scripted policy: real commands, real sandboxes, real tokens."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from codedojo.agent.actions import Action, FormatError, format_for_template, parse_action
from codedojo.agent.loop import AgentConfig, AgentLoop
from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.agent.scripted import ScriptedPolicy
from codedojo.inference.byte_tokenizer import byte_level_tokenizer
from codedojo.inference.chat_templates import CHATML, QWEN3_STYLE
from codedojo.inference.errors import EngineUnavailableError
from codedojo.tasks.task import Task, examples_dir
from codedojo.trial import EpisodeStatus, TrialOptions, TrialResult, run_trial
from codedojo.trial.trajectory import Trajectory
from conftest import MakeTask

if TYPE_CHECKING:
    from codedojo.sandbox.local import LocalSandbox

SUBMIT = f"Done.\n```bash\necho {SUBMIT_SENTINEL}\n```"
FIX_ADD = [
    "Let me look at the code first.\n```bash\ncat -n calc.py\n```",
    "Line 5 subtracts. Fix it:\n```bash\nsed -i '5s/a - b/a + b/' calc.py && "
    "python3 -c 'import calc; print(calc.add(2, 3))'\n```",
    SUBMIT,
]


@pytest.fixture(scope="module")
def chatml() -> object:
    return byte_level_tokenizer(chat_template=CHATML)


def play(task: Task, script: list[str], tokenizer: object, *, config: AgentConfig | None = None,
         trials_dir: Path | None = None) -> TrialResult:
    agent = AgentLoop(ScriptedPolicy(tokenizer, script), config=config or AgentConfig(max_new_tokens=512))
    return asyncio.run(run_trial(task, agent, options=TrialOptions(trials_dir=trials_dir)))


def test_a_scripted_policy_solves_a_task_through_real_commands(chatml: object) -> None:
    task = Task.load(examples_dir() / "fix-add")
    result = play(task, FIX_ADD, chatml)
    assert (result.status, result.reward) == (EpisodeStatus.SUBMITTED, 1.0)
    traj: Trajectory = result.trajectory
    assert [t.command for t in traj.turns] == ["cat -n calc.py",
                                               "sed -i '5s/a - b/a + b/' calc.py && python3 -c 'import calc; "
                                               "print(calc.add(2, 3))'",
                                               f"echo {SUBMIT_SENTINEL}"]
    assert traj.turns[1].return_code == 0
    assert "5" in traj.messages[-2]["content"]  # the observation of the fix shows add(2, 3) == 5


def test_a_wrong_script_scores_zero(chatml: object) -> None:
    task = Task.load(examples_dir() / "fix-add")
    result = play(task, ["```bash\nls\n```", SUBMIT], chatml)
    assert (result.status, result.reward, result.failure_kind) == (EpisodeStatus.SUBMITTED, 0.0, "task")


def test_tokens_are_faithful_to_the_conversation(chatml: object) -> None:
    result = play(Task.load(examples_dir() / "fix-add"), FIX_ADD, chatml)
    traj: Trajectory = result.trajectory
    traj.validate()
    assert traj.drift == 0
    # the kept tokens decode to exactly what the chat template renders for the messages
    rendered = chatml.apply_chat_template(traj.messages, tokenize=False)
    assert chatml.decode(traj.token_ids, skip_special_tokens=False) == rendered.removesuffix("\n")
    sampled = [i for i, m in enumerate(traj.loss_mask) if m]
    assert len(sampled) == sum(t.sampled_tokens for t in traj.turns)
    assert all(traj.logprobs[i] == -0.5 for i in sampled)
    # each sampled span decodes to a reply of the script plus the stop token
    replies = [m["content"] for m in traj.messages if m["role"] == "assistant"][-3:]
    assert replies == FIX_ADD


def test_a_template_that_rewrites_history_shows_as_drift_not_as_changed_tokens() -> None:
    qwen3 = byte_level_tokenizer(chat_template=QWEN3_STYLE)
    think = "<think>\nI should list the files first.\n</think>\n\n```bash\nls\n```"
    result = play(Task.load(examples_dir() / "hello-file"), [think, SUBMIT], qwen3)
    traj: Trajectory = result.trajectory
    assert traj.drift > 0  # a full re-render drops the earlier <think> block ...
    kept = qwen3.decode(traj.token_ids, skip_special_tokens=False)
    assert "I should list the files first." in kept  # ... but the kept sequence is what was sampled
    traj.validate()


def test_format_errors_are_corrected_then_end_the_episode(chatml: object) -> None:
    script = ["I will just think.", "```bash\nls\n```\n```bash\npwd\n```", "nothing"]
    result = play(Task.load(examples_dir() / "hello-file"), script, chatml)
    traj: Trajectory = result.trajectory
    assert result.status is EpisodeStatus.FORMAT_ERROR and result.reward == 0.0 and result.failure_kind == "agent"
    assert [t.format_error is not None for t in traj.turns] == [True, True, True]
    corrections = [m["content"] for m in traj.messages if m["role"] == "user"][-2:]
    assert "no command" in corrections[0] and "2 code blocks" in corrections[1]


def test_one_good_reply_resets_the_format_error_count(chatml: object) -> None:
    script = ["hmm", "hmm", "```bash\nls\n```", "hmm", "hmm", "```bash\necho world > hello.txt\n```", SUBMIT]
    result = play(Task.load(examples_dir() / "hello-file"), script, chatml)
    assert (result.status, result.reward) == (EpisodeStatus.SUBMITTED, 1.0)


def test_step_limit(chatml: object) -> None:
    result = play(Task.load(examples_dir() / "hello-file"), ["```bash\nls\n```"], chatml,
                  config=AgentConfig(max_steps=3))
    assert result.status is EpisodeStatus.STEP_LIMIT and len(result.trajectory.turns) == 3 and result.reward == 0.0


def test_a_command_timeout_returns_partial_output(chatml: object) -> None:
    script = ["```bash\necho partial-output; sleep 30\n```", SUBMIT]
    result = play(Task.load(examples_dir() / "hello-file"), script, chatml, config=AgentConfig(command_timeout_sec=1))
    traj: Trajectory = result.trajectory
    assert traj.turns[0].timed_out
    observation = traj.messages[-2]["content"] if traj.messages[-1]["role"] == "assistant" else ""
    assert "partial-output" in observation and "stopped after 1 seconds" in observation


def test_long_output_is_cut_to_head_and_tail(chatml: object) -> None:
    script = ["```bash\nseq 1 20000\n```", SUBMIT]
    result = play(Task.load(examples_dir() / "hello-file"), script, chatml, config=AgentConfig(max_output_chars=1000))
    observation = [m["content"] for m in result.trajectory.messages if m["role"] == "user"][-1]
    assert observation.count("\n") < 300 and "characters in the middle are not shown" in observation
    assert "<output_head>\n1\n2\n3" in observation and "19999\n20000\n</output_tail>" in observation
    total = sum(len(str(i)) + 1 for i in range(1, 20001))
    assert f"{total - 1 - 1000} characters" in observation


def test_the_context_budget_ends_the_episode(chatml: object) -> None:
    result = play(Task.load(examples_dir() / "hello-file"), ["```bash\nseq 1 300\n```"], chatml,
                  config=AgentConfig(max_context_tokens=4000))
    assert result.status is EpisodeStatus.CONTEXT_LIMIT and result.reward == 0.0
    assert len(result.trajectory.token_ids) <= 4000 + 2000  # the last observation may overshoot once


class _KillsTheSandbox(ScriptedPolicy):
    """Kills the sandbox's init process before its second reply: the sandbox dies mid-episode."""

    sandbox: LocalSandbox | None = None

    async def generate(self, prompt_ids, params, *, session_id=None):  # type: ignore[no-untyped-def]
        if self.calls == 1 and self.sandbox is not None:
            shell = self.sandbox._shell
            assert shell is not None and shell.init_pid_host is not None
            os.kill(shell.init_pid_host, 9)
            await asyncio.wait_for(shell._proc.wait(), 30)  # bwrap exits with its PID 1: the sandbox is dead
        return await super().generate(prompt_ids, params, session_id=session_id)


def test_a_sandbox_killed_mid_episode_is_an_infrastructure_failure(chatml: object) -> None:
    from codedojo.sandbox.local import LocalSandbox

    task = Task.load(examples_dir() / "hello-file")
    policy = _KillsTheSandbox(chatml, ["```bash\nls\n```", "```bash\necho world > hello.txt\n```", SUBMIT])

    async def factory(t: Task) -> LocalSandbox:
        policy.sandbox = await LocalSandbox.start(t)
        return policy.sandbox

    result = asyncio.run(run_trial(task, AgentLoop(policy), sandbox_factory=factory))
    assert result.status is EpisodeStatus.SANDBOX_ERROR
    assert result.reward is None and not result.reward_valid and result.failure_kind == "infrastructure"
    assert result.trajectory is not None and len(result.trajectory.turns) == 2


class _Unreachable(ScriptedPolicy):
    async def generate(self, prompt_ids, params, *, session_id=None):  # type: ignore[no-untyped-def]
        raise EngineUnavailableError("connection refused by http://127.0.0.1:1")


def test_an_engine_failure_is_an_infrastructure_failure(chatml: object) -> None:
    result = asyncio.run(run_trial(Task.load(examples_dir() / "hello-file"), AgentLoop(_Unreachable(chatml, []))))
    assert result.status is EpisodeStatus.ENGINE_ERROR and result.reward is None
    assert "connection refused" in (result.error or "")


def test_the_episode_clock_stops_a_slow_agent(make_task: MakeTask, chatml: object) -> None:
    task = make_task(agent_timeout=2.0)
    result = play(task, ["```bash\nsleep 1\n```"], chatml)
    assert result.status is EpisodeStatus.EPISODE_TIMEOUT and result.reward == 0.0


def test_trajectory_files_round_trip(chatml: object, tmp_path: Path) -> None:
    agent = AgentLoop(ScriptedPolicy(chatml, FIX_ADD))
    result = asyncio.run(run_trial(Task.load(examples_dir() / "fix-add"), agent))
    assert result.trajectory is not None
    result.trajectory.save(tmp_path / f"{result.trajectory.episode_id}.json")
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    loaded = Trajectory.load(files[0])
    assert loaded == result.trajectory


@pytest.mark.parametrize(
    ("fmt", "text", "expected"),
    [
        ("fenced", "x\n```bash\nls -la\n```", Action("ls -la")),
        ("fenced", "```\ncat a |\n  wc -l\n```", Action("cat a |\n  wc -l")),
        ("fenced", "no block", FormatError),
        ("fenced", "```bash\nls\n```\n```bash\npwd\n```", FormatError),
        ("hermes", '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>', Action("ls")),
        ("hermes", '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}</tool_call>',
         Action("pwd")),
        ("hermes", '<tool_call>{"name": "python", "arguments": {}}</tool_call>', FormatError),
        ("hermes", "<tool_call>{not json}</tool_call>", FormatError),
        ("qwen3_coder", "<tool_call>\n<function=bash>\n<parameter=command>\ngit status\n</parameter>\n</function>\n"
                        "</tool_call>", Action("git status")),
        ("qwen3_coder", "<tool_call><function=edit></function></tool_call>", FormatError),
    ],
)
def test_action_parsing(fmt: str, text: str, expected: object) -> None:
    got = parse_action(text, fmt=fmt)  # type: ignore[arg-type]
    if expected is FormatError:
        assert isinstance(got, FormatError) and got.problem
    else:
        assert got == expected


def test_the_action_format_follows_the_chat_template() -> None:
    assert format_for_template(CHATML) == "fenced"
    assert format_for_template("...<tool_call>\n{{ tool_call }}</tool_call>") == "hermes"
    assert format_for_template("<tool_call>\n<function=x>\n<parameter=y>") == "qwen3_coder"
