"""The episode record (rollout.episodes.Episode) and what the trainer builds from it (train.samples), by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codedojo.rollout.episodes import Episode, EpisodeRequest
from codedojo.tasks.task import Task, examples_dir
from codedojo.train.samples import build_batch, slime_sample
from codedojo.train.sft import load_trajectories
from codedojo.trial.result import PhaseTimings, TrialResult
from codedojo.trial.reward import RewardShape
from codedojo.trial.status import EpisodeStatus
from codedojo.trial.trajectory import Trajectory

TASK = Task.load(examples_dir() / "hello-file")


def episode(group: int, sample: int, rewards: dict[str, float] | None, *, status: EpisodeStatus | None = None,
            shape: RewardShape = "binary", trainable: bool = True) -> Episode:
    status = status or (EpisodeStatus.SUBMITTED if rewards is not None else EpisodeStatus.SANDBOX_ERROR)
    mask = [0, 0, 1, 1] if trainable else [0, 0, 0, 0]
    trajectory = Trajectory(episode_id=f"e{group}.{sample}", task_name=TASK.name, task_path=str(TASK.path),
                            status=status, messages=[{"role": "user", "content": "x"}], turns=[],
                            token_ids=[5, 6, 7, 8], loss_mask=mask, logprobs=[0.0, 0.0, -0.5, -0.25] if trainable
                            else [0.0] * 4, prompt_length=2, timings={"generate": 0.5})
    result = TrialResult(task_name=TASK.name, task_path=str(TASK.path), agent="agent", status=status,
                         rewards=rewards, trajectory=trajectory, timings=PhaseTimings(agent=2.0, verifier=1.0))
    return Episode(request=EpisodeRequest(task=TASK, group=group, sample=sample), result=result, reward_shape=shape,
                   attempts=1)


def test_the_record_reads_reward_validity_and_solved_from_the_trial() -> None:
    partial = {"reward": 0.0, "fail_to_pass": 0.5, "pass_to_pass": 1.0}
    fractional = episode(0, 0, partial, shape="fractional")
    assert (fractional.valid, fractional.reward, fractional.solved, fractional.rewards) == (True, 0.5, False, partial)
    assert episode(0, 1, partial).reward == 0.0  # binary: 1 only when the verifier's reward reaches 1
    solved = episode(0, 2, {"reward": 1.0}, status=EpisodeStatus.STEP_LIMIT)
    assert (solved.valid, solved.reward, solved.solved) == (True, 1.0, True)
    broken = episode(0, 3, None, status=EpisodeStatus.VERIFIER_ERROR)
    assert (broken.valid, broken.reward, broken.solved, broken.rewards) == (False, None, False, None)
    assert solved.timings == {"agent": 2.0, "verifier": 1.0, "agent_generate": 0.5}


def test_build_batch_by_hand() -> None:
    """Dr.GRPO (no std division): advantage = reward - the mean of the group's valid rewards."""
    episodes = [episode(0, 0, {"reward": 1.0}), episode(0, 1, {"reward": 0.0}),
                episode(1, 0, {"reward": 1.0}), episode(1, 1, {"reward": 1.0}),  # uniform: dropped
                episode(2, 0, {"reward": 0.0}), episode(2, 1, {"reward": 1.0}), episode(2, 2, None),  # infra
                episode(3, 0, {"reward": 1.0}), episode(3, 1, {"reward": 0.0}, trainable=False)]
    batch = build_batch(episodes, normalize_std=False, drop_uniform=True)
    assert [(s.group, s.advantage) for s in batch.samples] == [(0, 0.5), (0, -0.5), (2, -0.5), (2, 0.5), (3, 0.5)]
    assert batch.groups_total == 4
    assert batch.reward_trained_mean == pytest.approx(3 / 5)
    first = batch.samples[0]
    assert (first.token_ids, first.loss_mask, first.rollout_logprobs) == ([5, 6, 7, 8], [0, 1, 1], [0.0, -0.5, -0.25])
    over = build_batch(episodes, normalize_std=False, drop_uniform=True, max_groups=2)
    assert [s.group for s in over.samples] == [0, 0, 2, 2] and over.reward_trained_mean == pytest.approx(0.5)


def test_slime_records_are_the_records_facts_as_plain_data() -> None:
    truncated = slime_sample(episode(0, 0, {"reward": 1.0}, status=EpisodeStatus.CONTEXT_LIMIT), index=3)
    assert (truncated["status"], truncated["reward"], truncated["remove_sample"]) == ("truncated", 1.0, False)
    meta = truncated["metadata"]
    assert type(meta["episode_status"]) is str and meta["episode_status"] == "context_limit" and meta["solved"]
    failed = slime_sample(episode(0, 1, None), index=4)
    assert (failed["status"], failed["reward"], failed["remove_sample"]) == ("failed", None, True)
    assert (failed["loss_mask"], failed["rollout_log_probs"], failed["response_length"]) == ([1, 1], [-0.5, -0.25], 2)


def test_the_trajectory_file_adds_the_records_outcome_and_sft_filters_on_it(tmp_path: Path) -> None:
    solved, failed = episode(0, 0, {"reward": 1.0}), episode(0, 1, {"reward": 0.0})
    for e in (solved, failed):
        e.save_trajectory(tmp_path)
    assert failed.trajectory is not None
    failed.trajectory.save(tmp_path / "unverified.json")  # as the agent loop writes it: no outcome yet
    data = json.loads((tmp_path / "e0.0.json").read_text())
    assert list(data)[-4:] == ["timings", "rewards", "reward", "metadata"]
    assert (data["rewards"], data["reward"]) == ({"reward": 1.0}, 1.0)
    assert data["metadata"] == {"group": 0, "sample": 0, "attempts": 1, "seed": None, "valid": True, "solved": True,
                                "trial_status": "submitted", "verifier_solved": True, "flags": []}
    assert data["timings"] == {"generate": 0.5, "agent": 2.0, "verifier": 1.0, "agent_generate": 0.5}
    assert json.loads((tmp_path / "unverified.json").read_text())["reward"] is None
    assert Trajectory.load(tmp_path / "unverified.json") == failed.trajectory
    assert [t.episode_id for t in load_trajectories([tmp_path], min_reward=1.0)] == ["e0.0"]
    assert len(load_trajectories([tmp_path])) == 3
