"""The metrics of one rollout, computed once for both backends from its slime-shaped records.

The records are the dicts of `train.samples.slime_sample` (the local trainer) or slime `Sample` objects
filled by the generate hook (`integrations.slime`); both carry tokens, loss_mask, reward, remove_sample,
group_index, weight_versions and the episode's metadata (episode_status, turns, timings, attempts, solved,
exec_timeouts, drift; commands in the local trainer's). `rollout_metrics(records, prefix=...)` names them
under `prefix`: "agentic/" in slime (the reference tutorial's names, beside slime's own rollout/*), "rollout/"
in the local trainer's metrics.jsonl. Weight-version spread is always "async/*".

    episodes, valid                  records, and those with a valid reward (not removed)
    removed_frac                     episodes without a valid reward (infrastructure failures)
    reward_mean, solved_frac         over valid episodes (0 when there are none)
    reward_min, reward_max           over valid episodes (0 when there are none)
    solved_without_command           valid solved episodes that ran no command but the submission (records whose
                                     metadata counts `commands`: a broken task or grader, never a solve)
    mixed_group_frac                 of groups with two or more valid members, those whose rewards differ
    reward_by_status/<status>        mean reward of the valid episodes that ended so
    status/<status>_frac             share of episodes per ending
    budget_hit_frac                  episodes that ran out of turns, context or time (EpisodeStatus.is_truncated)
    turns_mean|max|p90               agent turns per episode
    exec_timeout_frac                episodes with at least one command timeout
    infra_retries_mean               extra attempts per episode
    phase/<phase>_sec_mean|max       wall seconds per phase (environment_setup, agent, verifier, ...)
    sampled_tokens, total_tokens     tokens the policy sampled, and all tokens of the episodes
    prefilled_tokens                 prompt tokens the engine computed (not served from its cache; records that
                                     count them)
    sandbox_seconds                  sum over episodes of the seconds each held its sandbox (the trial's phases)
    flagged_frac, flag/<name>_frac   episodes with any reward-hacking flag (trial.hacking), and with each one
    trained_token_frac               sampled tokens of valid episodes / response tokens
    drift_tokens                     tokens re-encoded differently from how they were sampled
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from codedojo.trial.result import TRIAL_PHASES
from codedojo.trial.status import EpisodeStatus

PHASES = (*TRIAL_PHASES, "agent_generate", "agent_exec")
"""The trial's phases (an episode holds its sandbox through them: their sum is its sandbox-seconds) and the agent
phase's two parts, generation and command execution."""


def _get(sample: Any, name: str) -> Any:
    return sample.get(name) if isinstance(sample, Mapping) else getattr(sample, name, None)


def _truncated(status: Any) -> bool:
    try:
        return EpisodeStatus(status).is_truncated
    except ValueError:
        return False


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def rollout_metrics(samples: Sequence[Any], *, prefix: str = "agentic/") -> dict[str, float]:
    """The metrics of one rollout's records (see the module docstring), named under `prefix`."""
    if not samples:
        return {}
    meta = [_get(s, "metadata") or {} for s in samples]
    valid = [not _get(s, "remove_sample") for s in samples]
    out = _outcomes(samples, meta, valid) | _behaviour(meta) | _tokens(samples, meta, valid)
    named = {prefix + key: value for key, value in out.items()}
    versions = [int(v) for s in samples for v in (_get(s, "weight_versions") or []) if str(v).lstrip("-").isdigit()]
    if versions:
        named["async/version_span"] = float(max(versions) - min(versions))
        named["async/versions_in_batch"] = float(len(set(versions)))
    return named


def _outcomes(samples: Sequence[Any], meta: list[dict[str, Any]], valid: list[bool]) -> dict[str, float]:
    """Rewards and endings."""
    n = len(samples)
    scored = [(s, m) for s, m, ok in zip(samples, meta, valid, strict=True)
              if ok and isinstance(_get(s, "reward"), int | float)]
    rewards = [float(_get(s, "reward")) for s, _ in scored]
    kept = [m for m, ok in zip(meta, valid, strict=True) if ok]
    out = {"episodes": float(n), "valid": float(sum(valid)), "removed_frac": 1.0 - sum(valid) / n,
           "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
           "reward_min": min(rewards, default=0.0), "reward_max": max(rewards, default=0.0),
           "solved_frac": sum(bool(m.get("solved")) for m in kept) / len(kept) if kept else 0.0,
           "budget_hit_frac": sum(_truncated(m.get("episode_status")) for m in meta) / n}
    statuses = Counter(str(m.get("episode_status", "unknown")) for m in meta)
    out.update({f"status/{name}_frac": count / n for name, count in sorted(statuses.items())})
    # a solve without any command but the submission: the task or its grader is broken, not solved
    out["solved_without_command"] = float(sum(1 for m in kept if m.get("solved") and m.get("commands") == 0))
    # reward hacking (trial.hacking), counted apart from the model's failures: the share flagged, and per flag
    flags = [m.get("flags") or [] for m in meta]
    out["flagged_frac"] = sum(1 for f in flags if f) / n
    for name in sorted({x for f in flags for x in f}):
        out[f"flag/{name}_frac"] = sum(1 for f in flags if name in f) / n
    by_status: dict[str, list[float]] = {}
    groups: dict[Any, list[float]] = {}
    for (s, m), reward in zip(scored, rewards, strict=True):
        by_status.setdefault(str(m.get("episode_status", "unknown")), []).append(reward)
        groups.setdefault(_get(s, "group_index"), []).append(reward)
    out.update({f"reward_by_status/{name}": statistics.fmean(r) for name, r in sorted(by_status.items())})
    # the groups GRPO learns from: at least two valid members whose rewards differ
    compared = [r for r in groups.values() if len(r) >= 2]
    out["mixed_group_frac"] = sum(len(set(r)) > 1 for r in compared) / len(compared) if compared else 0.0
    return out


def _behaviour(meta: list[dict[str, Any]]) -> dict[str, float]:
    """Turns, command timeouts, retries and phase timings."""
    n = len(meta)
    turns = [float(m.get("turns") or 0) for m in meta]
    out = {"turns_mean": statistics.fmean(turns), "turns_max": max(turns), "turns_p90": percentile(turns, 90),
           "exec_timeout_frac": sum((m.get("exec_timeouts") or 0) > 0 for m in meta) / n,
           "infra_retries_mean": statistics.fmean(max(0, (m.get("attempts") or 1) - 1) for m in meta)}
    out["sandbox_seconds"] = sum(float((m.get("timings") or {}).get(phase) or 0.0) for m in meta
                                 for phase in TRIAL_PHASES)
    for phase in PHASES:
        values = [float(m["timings"][phase]) for m in meta if phase in (m.get("timings") or {})]
        if values:
            out[f"phase/{phase}_sec_mean"] = statistics.fmean(values)
            out[f"phase/{phase}_sec_max"] = max(values)
    return out


def _tokens(samples: Sequence[Any], meta: list[dict[str, Any]], valid: list[bool]) -> dict[str, float]:
    """Sampled, total, trained and drifted tokens."""
    masks = [_get(s, "loss_mask") or [] for s in samples]
    response_tokens = sum(int(_get(s, "response_length") or 0) for s in samples)
    trained = sum(sum(mask) for mask, ok in zip(masks, valid, strict=True) if ok)
    return {"sampled_tokens": float(sum(sum(mask) for mask in masks)),
            "total_tokens": float(sum(len(_get(s, "tokens") or []) for s in samples)),
            "prefilled_tokens": float(sum(int(m.get("prefilled_tokens") or 0) for m in meta)),
            "trained_token_frac": trained / response_tokens if response_tokens else 0.0,
            "drift_tokens": float(sum(int(m.get("drift") or 0) for m in meta))}
