"""Agentic rollout metrics and slime's rollout-log hook.

`log_rollout_data(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool` has slime's
signature (`--custom-rollout-log-function-path`). It computes `agentic/*` and `async/*` metrics from the
samples the generate hook filled (turns mean/max/p90, episode-status mix, phase timings, solved, budget
hits, command timeouts, removed samples, trained-token fraction, weight-version spread) and:

* adds them to `rollout_extra_metrics` when slime passes a dict, so slime's default logging (which runs
  because the hook returns False) logs them at the same `rollout/step`;
* otherwise logs them through `slime.observability.logging_utils` when slime is importable;
* otherwise (the local trainer, tests) only computes them.

Samples may be slime `Sample` objects or the dicts of `codedojo.train.samples.slime_sample`, so the local
trainer can use the same hook.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from codedojo.trial.result import EpisodeStatus

PHASES = ("environment_setup", "agent", "verifier", "teardown", "agent_generate", "agent_exec")


def _get(sample: Any, name: str) -> Any:
    return sample.get(name) if isinstance(sample, Mapping) else getattr(sample, name, None)


def _truncated(status: Any) -> bool:
    """Whether a sample's metadata.episode_status names a truncated ending (EpisodeStatus decides)."""
    try:
        return EpisodeStatus(status).is_truncated
    except ValueError:
        return False


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def agentic_metrics(samples: Sequence[Any]) -> dict[str, float]:
    """`agentic/*` and `async/*` metrics of one rollout's samples."""
    if not samples:
        return {}
    n = len(samples)
    meta = [_get(s, "metadata") or {} for s in samples]
    removed = [bool(_get(s, "remove_sample")) for s in samples]
    kept = [m for m, r in zip(meta, removed, strict=True) if not r]
    turns = [float(m.get("turns") or 0) for m in meta]
    statuses = Counter(str(m.get("episode_status", "unknown")) for m in meta)
    out: dict[str, float] = {
        "agentic/turns_mean": statistics.fmean(turns),
        "agentic/turns_max": max(turns),
        "agentic/turns_p90": percentile(turns, 90),
        "agentic/solved_frac": sum(bool(m.get("solved")) for m in kept) / len(kept) if kept else 0.0,
        "agentic/budget_hit_frac": sum(_truncated(m.get("episode_status")) for m in meta) / n,
        "agentic/exec_timeout_frac": sum((m.get("exec_timeouts") or 0) > 0 for m in meta) / n,
        "agentic/removed_frac": sum(removed) / n,
        "agentic/infra_retries_mean": statistics.fmean(max(0, (m.get("attempts") or 1) - 1) for m in meta),
    }
    out.update({f"agentic/status/{name}_frac": count / n for name, count in sorted(statuses.items())})
    for phase in PHASES:
        values = [float(m["timings"][phase]) for m in meta if phase in (m.get("timings") or {})]
        if values:
            out[f"agentic/phase/{phase}_sec_mean"] = statistics.fmean(values)
            out[f"agentic/phase/{phase}_sec_max"] = max(values)
    rewards = [float(_get(s, "reward")) for s, r in zip(samples, removed, strict=True)
               if not r and isinstance(_get(s, "reward"), int | float)]
    if rewards:
        out["agentic/reward_mean"] = statistics.fmean(rewards)
    response_tokens = sum(int(_get(s, "response_length") or 0) for s in samples)
    trained = sum(sum(_get(s, "loss_mask") or []) for s, r in zip(samples, removed, strict=True) if not r)
    out["agentic/trained_token_frac"] = trained / response_tokens if response_tokens else 0.0
    versions = [int(v) for s in samples for v in (_get(s, "weight_versions") or []) if str(v).lstrip("-").isdigit()]
    if versions:
        out["async/version_span"] = float(max(versions) - min(versions))
        out["async/versions_in_batch"] = float(len(set(versions)))
    return out


def log_rollout_data(rollout_id: int, args: Any, samples: Sequence[Any], rollout_extra_metrics: Any,
                     rollout_time: float) -> bool:
    """slime's rollout-log hook; returns False so slime's default logging still runs."""
    metrics = agentic_metrics(samples)
    if isinstance(rollout_extra_metrics, dict):
        rollout_extra_metrics.update(metrics)
        return False
    _log_with_slime(rollout_id, args, metrics)
    return False


def _log_with_slime(rollout_id: int, args: Any, metrics: dict[str, float]) -> None:
    try:
        from slime.observability import logging_utils
        from slime.observability.metric_utils import compute_rollout_step
    except ImportError:
        return  # not inside slime: computing was the point
    logging_utils.log(args, {**metrics, "rollout/step": compute_rollout_step(args, rollout_id)},
                      step_key="rollout/step")
