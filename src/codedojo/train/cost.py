"""What a solved episode costs: tokens, sandbox-seconds, machine-seconds, and money with a price table.

Per step (`step_cost`, logged as `cost/*` in the step's metrics row) and per run (`run_cost`, in the end
summary): the totals, and each divided by the solved episodes (the training episodes whose task the verifier
passed). Machine-seconds are the step's wall clock (`perf/step_seconds`: rollout, update and weight sync; on
one machine the engine, the trainer and local sandboxes share it), so they are what the run holds a machine
for; sandbox-seconds are what the episodes held their sandboxes for (codedojo.train.rollout_metrics), which
a remote backend (Modal) bills on top. Evaluation is not counted: it solves nothing that is trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codedojo.config.recipe import PriceTable

TOTALS = {"machine_seconds": "perf/step_seconds", "sampled_tokens": "rollout/sampled_tokens",
          "prefilled_tokens": "rollout/prefilled_tokens", "sandbox_seconds": "rollout/sandbox_seconds"}
"""What is counted, and the metric of a step's row it is read from."""


def money(totals: dict[str, float], prices: PriceTable) -> float:
    return (totals["machine_seconds"] * prices.machine_per_hour + totals["sandbox_seconds"] * prices.sandbox_per_hour) \
        / 3600


def _costs(totals: dict[str, float], solved: float, prices: PriceTable | None) -> dict[str, float]:
    out = {"solved_episodes": solved, **totals}
    if prices is not None:
        out["money"] = money(totals, prices)
    if solved:
        out.update({f"{key}_per_solved": value / solved for key, value in list(out.items())
                    if key != "solved_episodes"})
    return out


def solved_episodes(row: dict[str, Any]) -> float:
    """A step's solved training episodes (its solved share of the valid ones)."""
    return round(row.get("rollout/solved_frac", 0.0) * row.get("rollout/valid", 0.0))


def step_cost(row: dict[str, Any], prices: PriceTable | None) -> dict[str, float]:
    """A step's costs as `cost/*` metrics (the `*_per_solved` ones only when it solved something)."""
    totals = {key: float(row.get(metric, 0.0)) for key, metric in TOTALS.items()}
    return {f"cost/{key}": value for key, value in _costs(totals, solved_episodes(row), prices).items()}


def run_cost(rows: Sequence[dict[str, Any]], prices: PriceTable | None) -> dict[str, Any]:
    """A run's costs over its training steps' rows, with the currency when priced."""
    totals = {key: sum(float(r.get(metric, 0.0)) for r in rows) for key, metric in TOTALS.items()}
    out: dict[str, Any] = _costs(totals, sum(solved_episodes(r) for r in rows), prices)
    if prices is not None:
        out["currency"] = prices.currency
    return out
