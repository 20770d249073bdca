"""From finished episodes to training samples: group advantages, filters, and slime-shaped records.

Both read the rollout's `Episode` record (rollout.episodes) and decide nothing again: its reward, validity,
solved and status are the record's. Each episode's trajectory already holds the token sequence, loss mask
and sampler logprobs. Here the group advantage (GRPO over the group's valid members) is attached to every
sampled token of the episode, episodes without a valid reward are dropped from training, and — with dynamic
sampling — groups whose rewards are all equal are dropped too (they carry no gradient). A `TrainSample` is
what the update step needs of an episode (tokens, mask, sampler logprobs, advantage, group) and no more.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.rl.advantages import group_advantages, is_uniform
from codedojo.rollout.episodes import Episode
from codedojo.trial.trajectory import Trajectory


@dataclass(frozen=True, kw_only=True)
class TrainSample:
    """One sequence for the policy update. Arrays cover positions 1..n-1 (each token given its prefix)."""

    token_ids: list[int]
    loss_mask: list[int]
    """Per predicted position (length n - 1): 1 where the model sampled the token."""
    rollout_logprobs: list[float]
    """Sampler logprobs per predicted position (0 where masked)."""
    advantage: float
    group: int

    @property
    def num_trainable(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True, kw_only=True)
class Batch:
    samples: list[TrainSample]
    groups_total: int
    reward_trained_mean: float
    """Mean training reward of the episodes the samples come from (0 without samples)."""


def build_batch(episodes: Sequence[Episode], *, normalize_std: bool, drop_uniform: bool,
                max_groups: int | None = None) -> Batch:
    """The samples of `episodes`, in group order; with `max_groups`, only those of the first `max_groups`
    groups that have any (over-sampling: the rollout ran more groups than a step trains on)."""
    groups: dict[int, list[Episode]] = {}
    for e in episodes:
        groups.setdefault(e.request.group, []).append(e)
    trained: list[tuple[TrainSample, float]] = []
    for group, members in sorted(groups.items()):
        rewards = [e.reward for e in members]
        if drop_uniform and is_uniform(rewards):
            continue
        advantages = group_advantages(rewards, normalize_std=normalize_std)
        for episode, reward, advantage in zip(members, rewards, advantages, strict=True):
            trajectory = episode.trajectory
            if reward is None or trajectory is None or sum(trajectory.loss_mask) == 0:
                continue
            trained.append((TrainSample(
                token_ids=list(trajectory.token_ids), loss_mask=list(trajectory.loss_mask[1:]),
                rollout_logprobs=list(trajectory.logprobs[1:]), advantage=advantage, group=group,
            ), reward))
    if max_groups is not None:
        chosen = set(sorted({sample.group for sample, _ in trained})[:max_groups])
        trained = [(sample, reward) for sample, reward in trained if sample.group in chosen]
    return Batch(samples=[sample for sample, _ in trained], groups_total=len(groups),
                 reward_trained_mean=statistics.fmean(r for _, r in trained) if trained else 0.0)


def slime_sample(episode: Episode, *, index: int) -> dict[str, Any]:
    """An episode with slime `Sample` field names (for rollout dumps and slime-signature log hooks). Plain data
    only (the status as its string): dumps load with `torch.load(weights_only=True)` and cross process bounds."""
    t = episode.trajectory
    tokens = list(t.token_ids) if t else []
    prompt_length = t.prompt_length if t else 0
    status = "truncated" if episode.status.is_truncated else "completed" if episode.valid else "failed"
    return {
        "group_index": episode.request.group, "index": index, "rollout_id": index,
        "prompt": t.messages[:1] if t else [], "tokens": tokens,
        "response_length": len(tokens) - prompt_length,
        "loss_mask": list(t.loss_mask[prompt_length:]) if t else [],
        "rollout_log_probs": list(t.logprobs[prompt_length:]) if t else [],
        "reward": episode.reward, "status": status, "remove_sample": not episode.valid,
        "session_id": t.episode_id if t else None,
        "weight_versions": [str(turn.weight_version) for turn in t.turns] if t else [],
        "label": episode.request.task.name,
        "metadata": {"task_path": str(episode.request.task.path), "episode_status": str(episode.status),
                     "rewards": episode.rewards, "attempts": episode.attempts, "timings": episode.timings,
                     "turns": len(t.turns) if t else 0, "error": episode.error, "solved": episode.solved,
                     "exec_timeouts": sum(turn.timed_out for turn in t.turns) if t else 0,
                     "commands": work_commands(t), "drift": t.drift if t else 0, "flags": list(episode.flags),
                     "prefilled_tokens": sum(turn.prompt_tokens - turn.cached_tokens for turn in t.turns) if t else 0},
    }


def work_commands(trajectory: Trajectory | None) -> int:
    """The commands an episode ran other than its submission (a reply whose command echoes the sentinel)."""
    if trajectory is None:
        return 0
    return sum(1 for turn in trajectory.turns if turn.command is not None and SUBMIT_SENTINEL not in turn.command)
