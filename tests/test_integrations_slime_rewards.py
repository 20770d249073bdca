"""Infrastructure failures out of slime's statistics. slime's own formulas at 624b824a are written out below
from reading its code (ray/rollout.py `_post_process_rewards`, rollout/filter_hub `check_reward_nonzero_std`,
observability/rollout_metrics.py `log_eval_rollout_data`): they show the bias on groups with injected failures,
and codedojo's hooks are checked against them on the valid members and against the local trainer."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from codedojo.integrations.slime import fill_sample
from codedojo.integrations.slime_rewards import (
    check_valid_reward_nonzero_std,
    log_eval_rollout_data,
    post_process_rewards,
)
from codedojo.rl.advantages import group_advantages
from codedojo.rollout.episodes import Episode, EpisodeRequest
from codedojo.tasks.task import Task, examples_dir
from codedojo.train.samples import build_batch
from codedojo.trial.result import TrialResult
from codedojo.trial.status import EpisodeStatus
from codedojo.trial.trajectory import Trajectory
from slime_support import Sample


def slime_args(**overrides: Any) -> SimpleNamespace:
    values = dict(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
                  n_samples_per_prompt=8, rollout_batch_size=1, reward_key=None)
    return SimpleNamespace(**(values | overrides))


def slime_default_post_process(args: Any, samples: list[Sample]) -> tuple[list[float], list[float]]:
    """slime's default reward post-processing, as it reads at 624b824a (no custom hook set)."""
    raw = [s.reward if not args.reward_key else s.reward[args.reward_key] for s in samples]
    if args.advantage_estimator in ["grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"] and \
            args.rewards_normalization:
        rewards = torch.tensor(raw, dtype=torch.float)
        if rewards.shape[-1] == args.n_samples_per_prompt * args.rollout_batch_size:
            rewards = rewards.reshape(-1, args.n_samples_per_prompt)
        else:
            rewards = rewards.view(-1, rewards.shape[-1])
        rewards = rewards - rewards.mean(dim=-1, keepdim=True)
        if args.advantage_estimator in ["grpo", "gspo", "cispo"] and args.grpo_std_normalization:
            rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
        return raw, rewards.flatten().tolist()
    return raw, raw


def slime_nonzero_std(samples: list[Sample]) -> bool:
    """slime's check_reward_nonzero_std keep decision."""
    return bool(torch.tensor([s.reward for s in samples], dtype=torch.float64).std() > 1e-6)


def slime_eval_mean(entry: dict[str, Any]) -> float:
    rewards = entry["rewards"]
    return sum(rewards) / len(rewards)


def group(rewards: list[float | None], *, group_index: int = 0) -> list[Sample]:
    """None marks an infrastructure failure as the generate hook returns it: reward 0.0, removed, masked."""
    return [Sample(group_index=group_index, index=i, reward=0.0 if r is None else r, remove_sample=r is None,
                   response_length=2, loss_mask=[0, 0] if r is None else [1, 1]) for i, r in enumerate(rewards)]


def test_one_failure_in_a_solved_group_biases_slime_and_not_codedojo() -> None:
    rewards: list[float | None] = [1.0] * 7 + [None]
    samples, args = group(rewards), slime_args()
    _, slime_advantages = slime_default_post_process(args, samples)
    assert all(a > 0.3 for a in slime_advantages[:7])  # the bias: solved samples look better than their group
    raw, advantages = post_process_rewards(args, samples)
    assert raw == [1.0] * 7 + [0.0]
    assert advantages == group_advantages(rewards) == [0.0] * 8


@pytest.mark.parametrize("normalize_std", [True, False])
def test_mixed_groups_with_failures_get_slimes_advantages_over_the_valid_members(normalize_std: bool) -> None:
    groups: list[list[float | None]] = [[1.0, 0.0, None, 1.0, 0.0, 0.0, None, 1.0],
                                        [0.5, None, 0.0, 1.0, 1.0, 0.25, 0.0, 0.0]]
    samples = group(groups[0]) + group(groups[1], group_index=1)
    args = slime_args(rollout_batch_size=2, grpo_std_normalization=normalize_std)
    _, advantages = post_process_rewards(args, samples)
    for g, rewards in enumerate(groups):
        mine = advantages[8 * g: 8 * g + 8]
        assert mine == pytest.approx(group_advantages(rewards, normalize_std=normalize_std), abs=1e-12)
        valid = [Sample(reward=r) for r in rewards if r is not None]
        _, reference = slime_default_post_process(slime_args(n_samples_per_prompt=len(valid),
                                                              grpo_std_normalization=normalize_std), valid)
        assert [a for a, r in zip(mine, rewards, strict=True) if r is not None] == pytest.approx(reference, abs=1e-5)
        assert [a for a, r in zip(mine, rewards, strict=True) if r is None] == [0.0] * rewards.count(None)


def test_a_group_with_one_valid_member_has_no_baseline() -> None:
    _, advantages = post_process_rewards(slime_args(n_samples_per_prompt=4), group([1.0, None, None, None]))
    assert advantages == [0.0] * 4  # slime's formula on one member would give 0 / (nan + eps)


def test_estimators_without_a_group_baseline_pass_rewards_through_as_slime_does() -> None:
    samples = group([1.0, None, 0.0, 1.0])
    for args in (slime_args(advantage_estimator="reinforce_plus_plus", n_samples_per_prompt=4),
                 slime_args(rewards_normalization=False, n_samples_per_prompt=4)):
        assert post_process_rewards(args, samples) == slime_default_post_process(args, samples)


def test_reward_key_selects_the_reward_as_slime_does() -> None:
    samples = [Sample(reward={"score": r, "other": 9.0}) for r in (1.0, 0.0)]
    raw, advantages = post_process_rewards(slime_args(reward_key="score", n_samples_per_prompt=2), samples)
    assert raw == [1.0, 0.0] and advantages == pytest.approx(group_advantages([1.0, 0.0]))


def test_the_slime_path_gives_the_local_trainers_advantages_on_real_episode_records() -> None:
    """Episodes -> the generate hook's fill_sample -> post_process_rewards, against the local trainer's build_batch."""
    task = Task.load(examples_dir() / "hello-file")
    rewards: list[float | None] = [1.0, 1.0, None, 0.0, 1.0, 0.0, 1.0, 1.0]
    episodes = [_episode(task, group_index=0, index=i, reward=r) for i, r in enumerate(rewards)]
    samples = [Sample(group_index=0, index=i, prompt="x", session_id=f"s{i}") for i in range(8)]
    for sample, episode in zip(samples, episodes, strict=True):
        fill_sample(sample, episode, tokenizer=_Tokenizer())
    assert [s.remove_sample for s in samples] == [r is None for r in rewards]
    _, slime_path = post_process_rewards(slime_args(), samples)
    local = build_batch(episodes, normalize_std=True, drop_uniform=False).samples
    assert [s.advantage for s in local] == pytest.approx([a for a, r in zip(slime_path, rewards, strict=True)
                                                          if r is not None], abs=1e-12)
    assert slime_path[2] == 0.0 and sum(samples[2].loss_mask) == 0


def test_dynamic_sampling_counts_only_valid_members() -> None:
    solved_with_failure = group([1.0, 1.0, 1.0, None])
    assert slime_nonzero_std(solved_with_failure) is True  # slime's own filter keeps a group with no signal
    assert check_valid_reward_nonzero_std(slime_args(), solved_with_failure) is False
    mixed = group([1.0, 0.0, None, 1.0])
    assert slime_nonzero_std(mixed) is True and check_valid_reward_nonzero_std(slime_args(), mixed) is True
    assert check_valid_reward_nonzero_std(slime_args(), group([1.0, None, None, None])) is False


@dataclass
class _FilterOutput:  # slime's DynamicFilterOutput fields (rollout/filter_hub/base_types.py)
    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def test_inside_slime_the_filter_returns_slimes_output_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("slime.rollout.filter_hub.base_types")
    module.DynamicFilterOutput = _FilterOutput  # type: ignore[attr-defined]
    for name in ("slime", "slime.rollout", "slime.rollout.filter_hub"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "slime.rollout.filter_hub.base_types", module)
    assert check_valid_reward_nonzero_std(slime_args(), group([1.0, 1.0, None])) == _FilterOutput(
        keep=False, reason="zero_std_1.0")
    assert check_valid_reward_nonzero_std(slime_args(), group([1.0, None])) == _FilterOutput(
        keep=False, reason="too_few_valid")
    assert check_valid_reward_nonzero_std(slime_args(), group([1.0, 0.0])).keep is True


def test_eval_means_skip_removed_samples() -> None:
    solved = group([1.0, None, 1.0, 0.0])
    data = {"eval": {"rewards": [s.reward for s in solved], "truncated": [False] * 4, "samples": solved},
            "broken": {"rewards": [0.0, 0.0], "truncated": [False, False], "samples": group([None, None])}}
    assert slime_eval_mean(data["eval"]) == 0.5  # slime's mean with the failure counted as 0
    extra: dict[str, Any] = {}
    assert log_eval_rollout_data(3, slime_args(), data, extra) is False  # slime's own logging runs next
    assert slime_eval_mean(data["eval"]) == pytest.approx(2 / 3)
    assert len(data["eval"]["samples"]) == len(data["eval"]["truncated"]) == 3
    assert "broken" not in data  # no valid sample: no mean (slime would divide by zero)
    assert extra == {"eval/eval/removed_frac": 0.25, "eval/broken/removed_frac": 1.0}


class _Tokenizer:
    """What fill_sample reads from a tokenizer."""

    eos_token_id = 2

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return " ".join(map(str, ids))


def _episode(task: Task, *, group_index: int, index: int, reward: float | None) -> Episode:
    tokens = [5, 6, 7, 8, 9]
    status = EpisodeStatus.SUBMITTED if reward is not None else EpisodeStatus.SANDBOX_ERROR
    trajectory = Trajectory(episode_id=f"e{index}", task_name=task.name, task_path=str(task.path), status=status,
                            messages=[{"role": "user", "content": "x"}], turns=[], token_ids=tokens,
                            loss_mask=[0, 0, 1, 1, 1], logprobs=[0.0, 0.0, -0.5, -0.25, -1.0], prompt_length=2)
    result = TrialResult(task_name=task.name, task_path=str(task.path), agent="agent", status=status,
                         rewards=None if reward is None else {"reward": reward}, trajectory=trajectory)
    return Episode(request=EpisodeRequest(task=task, group=group_index, sample=index), result=result,
                   reward_shape="binary", attempts=1)
