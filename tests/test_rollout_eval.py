"""The rollout scheduler (caps, retries, reward shapes) and evaluation (pass@k) with a scripted policy."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from codedojo.agent.loop import AgentConfig
from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.agent.scripted import ScriptedPolicy
from codedojo.inference.byte_tokenizer import byte_level_tokenizer
from codedojo.inference.chat_templates import CHATML
from codedojo.rollout.episodes import EpisodeRequest, RolloutConfig, run_episodes
from codedojo.rollout.evaluation import evaluate, pass_at_k
from codedojo.sandbox.local import LocalSandbox
from codedojo.tasks.task import Task, examples_dir
from codedojo.trial.result import TrialResult
from codedojo.trial.reward import shaped_reward
from codedojo.trial.status import EpisodeStatus
from conftest import MakeTask

SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
TOKENIZER = byte_level_tokenizer(chat_template=CHATML)


def test_pass_at_k_by_hand() -> None:
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0 and pass_at_k(5, 3, 3) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_reward_shapes() -> None:
    def result(rewards: dict[str, float] | None, status: EpisodeStatus = EpisodeStatus.SUBMITTED) -> TrialResult:
        return TrialResult(task_name="t", task_path="t", agent="a", status=status, rewards=rewards)

    partial = result({"reward": 0.0, "fail_to_pass": 0.5, "pass_to_pass": 1.0})
    broken = result({"reward": 0.0, "fail_to_pass": 1.0, "pass_to_pass": 0.9})
    assert shaped_reward(partial, "binary") == 0.0 and shaped_reward(partial, "fractional") == 0.5
    assert shaped_reward(broken, "fractional") == 0.0
    assert shaped_reward(result({"reward": 0.75}), "fractional") == 0.75
    assert shaped_reward(result({"reward": 0.75}), "binary") == 0.0
    assert shaped_reward(result(None, EpisodeStatus.VERIFIER_ERROR), "binary") is None


def _script(session_id: str) -> list[str]:
    # hello-file is solved, sum-numbers is not: a policy with a known pass rate per task
    if session_id.startswith("hello-file"):
        return ["```bash\necho world > hello.txt\n```", SUBMIT]
    return ["```bash\nls\n```", SUBMIT]


def test_evaluation_reports_pass_at_k_per_task() -> None:
    tasks = [Task.load(examples_dir() / "hello-file"), Task.load(examples_dir() / "sum-numbers")]
    report = asyncio.run(evaluate(tasks, engine=ScriptedPolicy(TOKENIZER, _script), n=3, agent_config=AgentConfig(),
                                  rollout=RolloutConfig(max_open_sandboxes=3)))
    assert [(t.task, t.samples, t.solved) for t in report.tasks] == [("hello-file", 3, 3), ("sum-numbers", 3, 0)]
    assert report.pass_at(1) == pytest.approx(0.5) and report.pass_at(3) == pytest.approx(0.5)
    assert report.statuses == {"submitted": 6}
    data = report.to_dict()
    assert data["pass@1"] == pytest.approx(0.5) and data["per_task"][0]["pass@3"] == 1.0


def test_caps_on_open_sandboxes_are_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    open_now = peak = 0
    two_open = asyncio.Event()
    real_start, real_close = LocalSandbox.start.__func__, LocalSandbox.close  # type: ignore[attr-defined]

    async def start(cls, task, *, limits=None):  # type: ignore[no-untyped-def]
        nonlocal open_now, peak
        open_now += 1
        peak = max(peak, open_now)
        if open_now == 2:
            two_open.set()
        return await real_start(cls, task, limits=limits)

    async def close(self):  # type: ignore[no-untyped-def]
        nonlocal open_now
        if not self._closed:
            # No sandbox closes before a second one is open, so the cap of 2 is reached on any machine, not
            # when episodes happen to overlap. With the cap working this returns at once; the 30 s only bound
            # a cap that never lets two open (the peak of 1 then fails the test).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(two_open.wait(), 30)
            two_open.set()
            open_now -= 1
        await real_close(self)

    monkeypatch.setattr(LocalSandbox, "start", classmethod(start))
    monkeypatch.setattr(LocalSandbox, "close", close)
    task = Task.load(examples_dir() / "hello-file")
    requests = [EpisodeRequest(task=task, group=0, sample=i) for i in range(6)]
    script = ["```bash\ntrue\n```", SUBMIT]
    episodes = asyncio.run(run_episodes(requests, engine=ScriptedPolicy(TOKENIZER, script), agent_config=AgentConfig(),
                                        rollout=RolloutConfig(max_open_sandboxes=2)))
    assert len(episodes) == 6 and all(e.status == "submitted" for e in episodes)
    assert peak == 2


def test_infrastructure_failures_are_retried_then_marked_invalid(make_task: MakeTask) -> None:
    broken = make_task(dockerfile="FROM alpine:3\nWORKDIR /app\n")
    requests = [EpisodeRequest(task=broken, group=0, sample=0)]
    episodes = asyncio.run(run_episodes(requests, engine=ScriptedPolicy(TOKENIZER, [SUBMIT]),
                                        agent_config=AgentConfig(), rollout=RolloutConfig(max_infra_retries=2)))
    (episode,) = episodes
    assert episode.attempts == 3 and episode.status == "sandbox_error"
    assert not episode.valid and episode.reward is None


def test_a_flaky_sandbox_succeeds_on_retry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_start = LocalSandbox.start.__func__  # type: ignore[attr-defined]
    calls = 0

    async def start(cls, task, *, limits=None):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        sandbox = await real_start(cls, task, limits=limits)
        if calls == 1:
            with contextlib.suppress(Exception):
                await sandbox.close()  # the first sandbox dies right away
        return sandbox

    monkeypatch.setattr(LocalSandbox, "start", classmethod(start))
    task = Task.load(examples_dir() / "hello-file")
    script = ["```bash\necho world > hello.txt\n```", SUBMIT]
    (episode,) = asyncio.run(run_episodes([EpisodeRequest(task=task, group=0, sample=0)],
                                          engine=ScriptedPolicy(TOKENIZER, script), agent_config=AgentConfig(),
                                          rollout=RolloutConfig(), trajectory_dir=tmp_path))
    assert episode.attempts == 2 and episode.status is EpisodeStatus.SUBMITTED and episode.reward == 1.0
    (written,) = [json.loads(f.read_text()) for f in tmp_path.glob("*.json")]  # the trajectory file, with the outcome
    assert written["metadata"] == {"group": 0, "sample": 0, "attempts": 2, "seed": None, "valid": True,
                                   "solved": True, "trial_status": "submitted", "verifier_solved": True, "flags": []}
    assert (written["rewards"], written["reward"]) == ({"reward": 1.0}, 1.0)


def test_eval_budgets_follow_the_profile_unless_given() -> None:
    from codedojo.config.recipe import SmolLM2_Recipe
    from codedojo.rollout.cli import episode_budgets

    recipe = SmolLM2_Recipe()
    small = episode_budgets("small", max_steps=None, max_new_tokens=None, max_context_tokens=None)
    assert small == {"max_steps": recipe.extra_config.agentic_max_steps,
                     "max_new_tokens": recipe.rollout_max_response_len,
                     "max_context_tokens": recipe.rollout_max_context_len, "max_output_chars": 2000}
    assert episode_budgets("small", max_steps=3, max_new_tokens=None, max_context_tokens=None)["max_steps"] == 3
    standard = episode_budgets("standard", max_steps=None, max_new_tokens=512, max_context_tokens=None)
    assert standard == {"max_steps": 75, "max_new_tokens": 512, "max_context_tokens": 32768,
                        "max_output_chars": 10000}


def test_the_paired_standard_error_matches_a_hand_computation() -> None:
    from codedojo.rollout.evaluation import EvalReport, TaskScore, paired_difference

    def report(solved: dict[str, int]) -> EvalReport:
        return EvalReport(tasks=[TaskScore(task=t, samples=4, solved=c, mean_reward=c / 4, statuses={})
                                 for t, c in solved.items()], n=4, statuses={}, wall_sec=0.0)

    before = report({"a": 0, "b": 1, "c": 2, "d": 0})
    after = report({"a": 2, "b": 1, "c": 4, "d": 1, "e": 4})  # "e" has no before: left out
    diff = paired_difference(before, after)
    # per-task differences 0.5, 0, 0.5, 0.25: mean 0.3125; sample std sqrt(0.0572917) = 0.239357; / sqrt(4)
    assert diff.tasks == 4
    assert diff.mean == pytest.approx(0.3125)
    assert diff.stderr == pytest.approx(0.239357 / 2, rel=1e-5)
    assert diff.cluster_stderr is None and "cluster_stderr" not in diff.to_dict()
    # clustered by repository (a, b in r1; c, d in r2): deviations from the mean sum to -0.125 and 0.125;
    # sqrt(2 / 1 * (0.125^2 + 0.125^2)) / 4 tasks = 0.0625
    clustered = paired_difference(before, after, cluster_of=lambda name: "r1" if name in "ab" else "r2")
    assert clustered.mean == pytest.approx(0.3125) and clustered.stderr == diff.stderr
    assert clustered.cluster_stderr == pytest.approx(0.0625) and clustered.clusters == 2
    assert paired_difference(before, after, cluster_of=lambda name: "one").cluster_stderr is None
    with pytest.raises(ValueError, match="share no task"):
        paired_difference(report({"x": 1}), report({"y": 1}))


def test_the_reward_trend_matches_a_hand_computation() -> None:
    from codedojo.rollout.evaluation import reward_trend
    from codedojo.train.report import learning_lines

    trend = reward_trend([0.25, 0.5, 0.9, 0.75, 1.0])  # odd: the middle step (0.9) is in neither half
    # halves [0.25, 0.5] and [0.75, 1.0]: means 0.375 and 0.875; variances 0.03125 each; / 2 steps each
    assert trend is not None and trend["steps_per_half"] == 2
    assert trend["first_half"] == pytest.approx(0.375) and trend["second_half"] == pytest.approx(0.875)
    assert trend["change"] == pytest.approx(0.5)
    assert trend["stderr"] == pytest.approx((0.03125 / 2 + 0.03125 / 2) ** 0.5)
    assert reward_trend([0.1, 0.2, 0.3]) is None  # one step per half has no spread to measure
    lines = learning_lines({"eval": {}, "train_reward": [0.25, 0.5, 0.9, 0.75, 1.0], "mixed_group_frac": [0.5] * 5,
                            "train_reward_trend": trend})
    assert lines[-1] == "training reward, first 2 steps 0.375 -> last 2 0.875: +0.500 +- 0.177 (step-to-step spread)"
