"""slime's rollout-log hook, with the agentic metrics of codedojo.train.rollout_metrics.

`log_rollout_data(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool` has slime's
signature (`--custom-rollout-log-function-path`). It computes `agentic/*` and `async/*` metrics from the
samples the generate hook filled (`rollout_metrics(samples, prefix="agentic/")`: the same function, over
the same record shape, as the local trainer's `rollout/*`) and:

* adds them to `rollout_extra_metrics` when slime passes a dict, so slime's default logging (which runs
  because the hook returns False) logs them at the same `rollout/step`;
* otherwise logs them through `slime.observability.logging_utils` when slime is importable;
* otherwise only computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codedojo.train.rollout_metrics import rollout_metrics


def log_rollout_data(rollout_id: int, args: Any, samples: Sequence[Any], rollout_extra_metrics: Any,
                     rollout_time: float) -> bool:
    """slime's rollout-log hook; returns False so slime's default logging still runs."""
    metrics = rollout_metrics(samples, prefix="agentic/")
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
