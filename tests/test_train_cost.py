"""Cost per solved episode: hand-computed from metrics rows, and present in a real (tiny) run's records."""

from __future__ import annotations

import pytest

from codedojo.config import PriceTable, Recipe
from codedojo.records import RecordError
from codedojo.train.cost import run_cost, step_cost

ROW = {"perf/step_seconds": 100.0, "rollout/sampled_tokens": 2000.0, "rollout/prefilled_tokens": 5000.0,
       "rollout/sandbox_seconds": 300.0, "rollout/solved_frac": 0.25, "rollout/valid": 16.0}
PRICES = PriceTable(machine_per_hour=3.6, sandbox_per_hour=0.36)


def test_a_steps_cost_per_solved_episode_by_hand() -> None:
    cost = step_cost(ROW, PRICES)
    # 4 solved episodes; money (100 s x 3.6 + 300 s x 0.36) / 3600 = 0.13
    assert cost["cost/solved_episodes"] == 4
    assert cost["cost/machine_seconds_per_solved"] == 25.0 and cost["cost/sampled_tokens_per_solved"] == 500.0
    assert cost["cost/prefilled_tokens_per_solved"] == 1250.0 and cost["cost/sandbox_seconds_per_solved"] == 75.0
    assert cost["cost/money"] == pytest.approx(0.13) and cost["cost/money_per_solved"] == pytest.approx(0.0325)
    unpriced = step_cost(ROW, None)
    assert "cost/money" not in unpriced and unpriced["cost/machine_seconds"] == 100.0
    nothing = step_cost({**ROW, "rollout/solved_frac": 0.0}, PRICES)
    assert nothing["cost/solved_episodes"] == 0 and not any(k.endswith("_per_solved") for k in nothing)


def test_a_runs_cost_sums_its_steps() -> None:
    cost = run_cost([ROW, {**ROW, "rollout/solved_frac": 0.0}], PRICES)
    assert cost["solved_episodes"] == 4 and cost["machine_seconds"] == 200.0 and cost["currency"] == "USD"
    assert cost["machine_seconds_per_solved"] == 50.0 and cost["money_per_solved"] == pytest.approx(0.26 / 4)


def test_prices_are_checked_and_read_from_a_table() -> None:
    with pytest.raises(RecordError, match=">= 0"):
        PriceTable(machine_per_hour=-1.0)
    assert Recipe(prices={"machine_per_hour": 2.0, "currency": "EUR"}).prices == PriceTable(machine_per_hour=2.0,
                                                                                            currency="EUR")
