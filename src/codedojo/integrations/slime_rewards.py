"""Infrastructure failures kept out of slime's statistics, through the extension points slime 624b824a has.

The generate hook returns an infrastructure failure (sandbox, verifier, engine, a bad row) as a fully
masked sample with reward 0.0 and `remove_sample=True`; slime drops its tokens from the loss but, left
alone, still counts its 0.0 in three places. Each has a hook, and codedojo's rendered command sets all three:

| slime's computation (624b824a) | its hook flag | codedojo's function |
|---|---|---|
| GRPO group mean / std (ray/rollout.py) | `--custom-reward-post-process-path` | `post_process_rewards` |
| dynamic sampling (rollout/filter_hub) | `--dynamic-sampling-filter-path` | `check_valid_reward_nonzero_std` |
| eval means (observability/rollout_metrics.py) | `--custom-eval-rollout-log-function-path` | `log_eval_rollout_data` |

Invariants: advantages are `codedojo.rl.advantages.group_advantages` over each group's valid members
(a removed sample gets 0 and is in no mean or std; a group with fewer than two valid members gets 0
throughout), exactly the local trainer's; everything else follows slime's own rule (which estimators
subtract a group mean, which divide by the std, how samples form groups, the reward key). A group is
kept by dynamic sampling only when its valid rewards differ. Eval means are over valid samples only.

slime is not imported at module level (the filter returns slime's DynamicFilterOutput when slime is
importable and a bool, which slime also accepts, otherwise).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from codedojo.rl.advantages import group_advantages

# slime's estimators that subtract the group mean, and those that also divide by the group std.
GROUP_MEAN_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
GROUP_STD_ESTIMATORS = ("grpo", "gspo", "cispo")
STD_EPSILON = 1e-6
"""slime's (and codedojo's) epsilon added to the group std, and the dynamic filter's zero-std threshold."""

HOOK_PATHS = {
    "custom_reward_post_process_path": "codedojo.integrations.slime_rewards.post_process_rewards",
    "custom_eval_rollout_log_function_path": "codedojo.integrations.slime_rewards.log_eval_rollout_data",
}
DYNAMIC_SAMPLING_FILTER = "codedojo.integrations.slime_rewards.check_valid_reward_nonzero_std"


def reward_value(args: Any, sample: Any) -> float:
    """slime's `Sample.get_reward_value`: the reward, or its `args.reward_key` entry."""
    key = getattr(args, "reward_key", None)
    return float(sample.reward[key] if key else sample.reward)


def _removed(sample: Any) -> bool:
    return bool(getattr(sample, "remove_sample", False))


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """slime's reward post-processing hook: (raw rewards, advantages), one each per sample."""
    raw = [reward_value(args, s) for s in samples]
    estimator = getattr(args, "advantage_estimator", "grpo")
    if estimator not in GROUP_MEAN_ESTIMATORS or not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    normalize_std = estimator in GROUP_STD_ESTIMATORS and bool(getattr(args, "grpo_std_normalization", True))
    group_size = int(args.n_samples_per_prompt)
    # slime's grouping: consecutive runs of n_samples_per_prompt when the rollout is complete, else one group.
    if len(samples) != group_size * int(args.rollout_batch_size):
        group_size = len(samples)
    advantages: list[float] = []
    for start in range(0, len(samples), group_size):
        members = range(start, min(start + group_size, len(samples)))
        rewards = [None if _removed(samples[i]) else raw[i] for i in members]
        advantages += group_advantages(rewards, normalize_std=normalize_std, eps=STD_EPSILON)
    return raw, advantages


def check_valid_reward_nonzero_std(args: Any, samples: Sequence[Any], **kwargs: Any) -> Any:
    """slime's dynamic-sampling filter, over the group's valid members: keep it when their rewards differ."""
    valid = [reward_value(args, s) for s in samples if not _removed(s)]
    keep = len(valid) >= 2 and statistics.stdev(valid) > STD_EPSILON
    reason = None if keep else (f"zero_std_{round(valid[0], 1)}" if len(valid) >= 2 else "too_few_valid")
    try:
        from slime.rollout.filter_hub.base_types import DynamicFilterOutput
    except ImportError:
        return keep
    return DynamicFilterOutput(keep=keep, reason=reason)


def log_eval_rollout_data(rollout_id: int, args: Any, data: dict[str, dict[str, Any]],
                          extra_metrics: dict[str, Any] | None) -> bool:
    """slime's eval-log hook: drops removed samples from each dataset's rewards, truncation flags and samples
    (in place) and returns False, so slime's own logging then averages over valid samples only. A dataset
    with no valid sample is left out (slime would divide by zero); `eval/<name>/removed_frac` says how many
    were removed. slime's --log-passrate needs whole groups and is not combined with this (codedojo never
    renders it)."""
    for name, entry in list(data.items()):
        samples = entry.get("samples")
        if not samples:
            continue
        keep = [i for i, s in enumerate(samples) if not _removed(s)]
        if extra_metrics is not None:
            extra_metrics[f"eval/{name}/removed_frac"] = 1 - len(keep) / len(samples)
        if not keep:
            del data[name]
            continue
        for key in ("rewards", "truncated", "samples"):
            if key in entry:
                entry[key] = [entry[key][i] for i in keep]
    return False
