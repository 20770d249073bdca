"""Health checks: each fires on its fault, by hand on metrics rows and injected into real (tiny) runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codedojo.agent.scripted import ScriptedPolicy
from codedojo.config import AgentTaskDataset, ExtraConfig, HealthConfig, Recipe, TrainConfig
from codedojo.inference.specs import TinyModel
from codedojo.records import RecordError
from codedojo.train.health import RunUnhealthy, check_evaluation, check_step
from data_support import ALWAYS_PASSES, RIGHT, SUBMIT, WRONG, make_answer_task, write_rows

CLEAN = {"rollout/reward_mean": 0.5, "rollout/reward_min": 0.0, "rollout/reward_max": 1.0, "rollout/valid": 16.0,
         "rollout/mixed_group_frac": 0.5, "rollout/status/verifier_error_frac": 0.0,
         "rollout/solved_without_command": 0.0, "train/train_rollout_logprob_abs_diff": 4.5e-3}
DEFAULT = HealthConfig()


def names(findings: list[Any]) -> list[str]:
    return [f.check for f in findings]


def test_a_clean_step_raises_nothing() -> None:
    assert check_step([CLEAN] * 5, DEFAULT) == []
    assert check_evaluation([CLEAN] * 3, {"eval/held-out/pass@1": 0.3, "eval/held-out/pass@1_stderr": 0.05},
                            DEFAULT) == []


def test_identical_rewards_over_n_steps() -> None:
    zero = {**CLEAN, "rollout/reward_mean": 0.0, "rollout/reward_max": 0.0, "rollout/mixed_group_frac": 0.0}
    assert "identical_rewards" in names(check_step([CLEAN, zero, zero, zero], DEFAULT))
    assert "identical_rewards" not in names(check_step([zero, zero], DEFAULT))  # fewer than 3 steps
    one = {**zero, "rollout/reward_mean": 1.0, "rollout/reward_min": 1.0, "rollout/reward_max": 1.0}
    assert "identical_rewards" not in names(check_step([zero, one, zero], DEFAULT))  # uniform, not identical


def test_no_mixed_groups_over_n_steps() -> None:
    flat = {**CLEAN, "rollout/mixed_group_frac": 0.0}
    assert names(check_step([flat] * 3, DEFAULT)) == ["no_mixed_groups"]
    assert check_step([CLEAN, flat, flat], DEFAULT) == []


@pytest.mark.parametrize(("key", "bad", "fine", "check"), [
    ("rollout/status/verifier_error_frac", 0.25, 0.2, "verifier_errors"),
    ("rollout/solved_without_command", 1.0, 0.0, "solved_without_work"),
    ("train/train_rollout_logprob_abs_diff", 0.05, 7.9e-3, "logprob_mismatch"),
])
def test_each_limit_fires_above_it_only(key: str, bad: float, fine: float, check: str) -> None:
    assert names(check_step([{**CLEAN, key: bad}], DEFAULT)) == [check]
    assert check_step([{**CLEAN, key: fine}], DEFAULT) == []
    assert check_step([{**CLEAN, key: bad}], HealthConfig(action="off")) == []


def test_the_train_eval_gap_needs_the_gap_and_three_standard_errors() -> None:
    zero = {**CLEAN, "rollout/reward_mean": 0.0, "rollout/valid": 48.0}
    # 144 training episodes at 0 against 0.7 on 100 tasks: a gap of 0.7, three bounds 3 * hypot(0.042, 0.05) = 0.20
    seen = check_evaluation([zero] * 3, {"eval/held-out/pass@1": 0.7, "eval/held-out/tasks": 100.0}, DEFAULT)
    assert names(seen) == ["train_eval_gap"] and "held-out" in seen[0].message
    assert check_evaluation([{**zero, "rollout/reward_mean": 0.4}], {"eval/held-out/pass@1": 0.7,
                                                                      "eval/held-out/tasks": 100.0}, DEFAULT) == []
    # a gap of 0.6 on 2 tasks is within what 2 tasks can show by chance (3 * 0.5 / sqrt(2) > 1), even when every
    # task scored alike and the estimated standard error is 0
    assert check_evaluation([zero] * 3, {"eval/h/pass@1": 0.6, "eval/h/pass@1_stderr": 0.0, "eval/h/tasks": 2.0},
                            DEFAULT) == []


def test_settings_are_checked() -> None:
    with pytest.raises(RecordError, match="at least 1"):
        HealthConfig(no_mixed_group_steps=0)
    with pytest.raises(RecordError, match="train_eval_gap"):
        HealthConfig(train_eval_gap=0.0)
    assert Recipe(health={"action": "stop", "max_logprob_mismatch": 0.01}).health == HealthConfig(
        action="stop", max_logprob_mismatch=0.01)


# ----- injected into runs ---------------------------------------------------------------------------------


def _run(tmp_path: Path, tasks: list[Any], script: list[str], *, health: HealthConfig, eval_tasks: list[Any] = (),
         engine: Any = None, num_rollout: int = 1) -> Any:
    data = write_rows(tmp_path / "data" / "train.jsonl", tasks)
    extra: dict[str, Any] = {}
    if eval_tasks:
        path = write_rows(tmp_path / "data" / "eval.jsonl", list(eval_tasks))
        extra = {"eval_interval": 1, "eval_config": {"defaults": {"n_samples_per_eval_prompt": 2},
                                                     "datasets": [{"name": "held-out", "path": str(path)}]}}
    recipe = Recipe(num_rollout=num_rollout, rollout_batch_size=len(tasks), n_samples_per_prompt=2, lr=1e-4,
                    max_tokens_per_gpu=2048, rollout_max_response_len=32, rollout_max_context_len=2048,
                    save="checkpoints", max_open_sandboxes=4, health=health, **extra,
                    extra_config=ExtraConfig(agentic_max_steps=2, skip_eval_before_train=True,
                                             agentic_max_infra_retries=0))

    async def scripted(loaded: Any) -> Any:
        return engine(loaded) if engine is not None else ScriptedPolicy(loaded.tokenizer, script)

    return TrainConfig(model=TinyModel(seed=3), dataset=AgentTaskDataset(data), recipe=recipe,
                       run_dir=tmp_path / "run", device="cpu").launch(engine_factory=scripted)


def _rows(tmp_path: Path, kind: str = "train") -> list[dict[str, Any]]:
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_a_task_solved_without_work_stops_the_run_after_its_checkpoint(tmp_path: Path) -> None:
    tasks = [make_answer_task(tmp_path / "tasks", "always", test_sh=ALWAYS_PASSES)]  # a grader that passes anything
    with pytest.raises(RunUnhealthy, match="solved_without_work") as stopped:
        _run(tmp_path, tasks, [SUBMIT], health=HealthConfig(action="stop", identical_reward_steps=1),
             num_rollout=3)
    assert "identical_rewards" in str(stopped.value) and "health={action" in str(stopped.value)
    (row,) = _rows(tmp_path)  # stopped after the first step, which was saved whole
    assert row["health/solved_without_work"] == 1.0 and row["health/identical_rewards"] == 1.0
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == "last"


def test_a_verifier_that_writes_no_reward_warns(tmp_path: Path) -> None:
    tasks = [make_answer_task(tmp_path / "tasks", "broken", test_sh="#!/bin/bash\nexit 3\n")]
    _run(tmp_path, tasks, [RIGHT, SUBMIT], health=DEFAULT)
    (row,) = _rows(tmp_path)
    assert row["rollout/status/verifier_error_frac"] == 1.0 and row["health/verifier_errors"] == 1.0
    learning = json.loads((tmp_path / "run" / "learning.json").read_text())
    assert learning["health"]["verifier_errors"] == [1]  # the end summary names the check and the step


def test_an_engine_on_other_weights_shows_as_a_logprob_mismatch(tmp_path: Path) -> None:
    from codedojo.inference import LocalEngine

    tasks = [make_answer_task(tmp_path / "tasks", f"t{i}") for i in range(2)]
    stale = TinyModel(seed=4).load()  # not the trained model's weights (TinyModel(seed=3))

    def engine(loaded: Any) -> Any:
        return LocalEngine(stale.engine_model(), loaded.tokenizer, seed=0)

    _run(tmp_path, tasks, [], health=HealthConfig(max_logprob_mismatch=0.01, no_mixed_group_steps=3), engine=engine)
    (row,) = _rows(tmp_path)
    if "train/train_rollout_logprob_abs_diff" not in row:
        pytest.fail(f"no update ran, so nothing was compared: {row}")
    assert row["train/train_rollout_logprob_abs_diff"] > 0.01 and row["health/logprob_mismatch"] == 1.0  # 0.19 seen


def test_an_engine_on_the_trained_weights_shows_no_mismatch(tmp_path: Path) -> None:
    from codedojo.inference import LocalEngine

    tasks = [make_answer_task(tmp_path / "tasks", f"t{i}") for i in range(2)]
    _run(tmp_path, tasks, [], health=HealthConfig(max_logprob_mismatch=0.01, no_mixed_group_steps=3),
         engine=lambda loaded: LocalEngine(loaded.engine_model(), loaded.tokenizer, seed=0))
    (row,) = _rows(tmp_path)
    assert row["train/train_rollout_logprob_abs_diff"] < 0.01 and "health/logprob_mismatch" not in row  # 2.7e-4


def test_a_training_reward_far_from_the_held_out_one_is_a_finding(tmp_path: Path) -> None:
    train = [make_answer_task(tmp_path / "tasks", f"ok{i}") for i in range(8)]
    never = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    held = [make_answer_task(tmp_path / "held", f"never{i}", test_sh=never) for i in range(12)]
    # 16 training episodes at 1 against 0 on 12 tasks: a gap of 1 > 3 * hypot(0.125, 0.144) = 0.57
    _run(tmp_path, train, [RIGHT, SUBMIT], health=DEFAULT, eval_tasks=held)
    (evaluation,) = _rows(tmp_path, "eval")
    assert evaluation["eval/held-out/pass@1"] == 0.0 and evaluation["health/train_eval_gap"] == 1.0


def test_a_policy_that_never_solves_shows_no_mixed_groups(tmp_path: Path) -> None:
    tasks = [make_answer_task(tmp_path / "tasks", f"t{i}") for i in range(2)]
    _run(tmp_path, tasks, [WRONG, SUBMIT], health=HealthConfig(no_mixed_group_steps=1, identical_reward_steps=1))
    (row,) = _rows(tmp_path)
    assert row["health/no_mixed_groups"] == 1.0 and row["health/identical_rewards"] == 1.0
