"""The tier curriculum: the share rule by hand, the sampler, its validation, and a run that climbs."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from codedojo.agent.scripted import ScriptedPolicy
from codedojo.config import AgentTaskDataset, CurriculumConfig, ExtraConfig, Recipe, TrainConfig
from codedojo.inference.specs import TinyModel
from codedojo.records import RecordError
from codedojo.train.curriculum import CurriculumSampler, shares_after, split_count, tier_metrics
from data_support import RIGHT, SUBMIT, WRONG, make_answer_task, write_rows

THREE = CurriculumConfig(tiers=("guided", "hinted", "warmup"), promote_at=0.5, retire_at=0.9, shift=0.25,
                         window=8, min_episodes=4)


def test_shares_move_one_tier_a_step_hardest_pair_first() -> None:
    # guided passes 0.6 (>= promote_at): a quarter of the whole share moves on; hinted has too few episodes
    assert shares_after([1.0, 0.0, 0.0], [0.6, None, None], THREE) == ([0.75, 0.25, 0.0], [False] * 3)
    # both promote: hinted hands 0.25 to warm-up before guided hands 0.25 to hinted (no share skips a tier)
    assert shares_after([0.5, 0.5, 0.0], [0.7, 0.55, None], THREE) == ([0.25, 0.5, 0.25], [False] * 3)
    # guided at 0.95 retires: all of what it holds moves; hinted below promote_at keeps its own
    assert shares_after([0.5, 0.5, 0.0], [0.95, 0.2, 0.0], THREE) == ([0.0, 1.0, 0.0], [True, False, False])
    # a tier holding less than shift hands over what it holds; the hardest tier keeps everything
    assert shares_after([0.1, 0.0, 0.9], [0.6, None, 1.0], THREE) == ([0.0, 0.1, 0.9], [False] * 3)
    # nothing at or above promote_at: nothing moves
    assert shares_after([1.0, 0.0, 0.0], [0.49, 0.0, 0.0], THREE) == ([1.0, 0.0, 0.0], [False] * 3)


def test_split_count_is_largest_remainder_and_sums_to_count() -> None:
    assert split_count(4, [0.75, 0.25, 0.0]) == [3, 1, 0]
    assert split_count(3, [0.5, 0.5, 0.0]) == [2, 1, 0]  # the tie goes to the easier tier
    assert split_count(16, [0.25, 0.5, 0.25]) == [4, 8, 4]
    assert split_count(5, [0.1, 0.1, 0.8]) == [1, 0, 4]
    assert sum(split_count(7, [0.3, 0.3, 0.4])) == 7


def test_the_sampler_takes_by_share_records_rates_and_resumes() -> None:
    tiers = ["guided", "hinted", "warmup"] * 4  # task i is of tier i % 3
    sampler = CurriculumSampler(config=THREE, task_tiers=tiers, seed=0)
    picked = sampler.take(4)
    assert len(picked) == 4 and {tiers[i] for i in picked} == {"guided"} and len(set(picked)) == 4
    metrics = sampler.record([("guided", 1.0)] * 3 + [("guided", 0.0)])  # 0.75 over 4 episodes: promote
    assert metrics == {"curriculum/guided/share": 1.0, "curriculum/hinted/share": 0.0,
                       "curriculum/warmup/share": 0.0, "curriculum/guided/pass_rate": 0.75}
    assert sampler.shares == [0.75, 0.25, 0.0]
    assert sorted(tiers[i] for i in sampler.take(4)) == ["guided", "guided", "guided", "hinted"]
    saved = json.loads(json.dumps(sampler.state()))  # what a checkpoint keeps
    after = sampler.take(8)
    again = CurriculumSampler(config=THREE, task_tiers=tiers, seed=0)
    again.restore(saved)
    assert again.shares == [0.75, 0.25, 0.0] and again.rates() == sampler.rates()
    assert again.take(8) == after


def test_the_sampler_refuses_tasks_outside_its_tiers_and_tiers_without_tasks() -> None:
    with pytest.raises(ValueError, match=r"tiers \['easy'\] are not in the curriculum"):
        CurriculumSampler(config=THREE, task_tiers=["guided", "easy", "hinted", "warmup"], seed=0)
    with pytest.raises(ValueError, match=r"tiers \['warmup'\] have no training task"):
        CurriculumSampler(config=THREE, task_tiers=["guided", "hinted"], seed=0)


def test_tier_metrics_by_hand() -> None:
    groups = [("guided", [1.0, 1.0, 1.0, 1.0]), ("guided", [1.0, 0.0, 1.0, 0.0]), ("warmup", [0.0, 0.0, 0.0, 1.0]),
              ("warmup", [0.0] * 4), ("warmup", [])]
    assert tier_metrics(groups) == {
        "tier/guided/episodes": 8.0, "tier/guided/pass_rate": 0.75, "tier/guided/mixed_group_frac": 0.5,
        "tier/warmup/episodes": 8.0, "tier/warmup/pass_rate": 0.125, "tier/warmup/mixed_group_frac": 0.5}


@pytest.mark.parametrize(("fields", "message"), [
    ({"tiers": ()}, "distinct and at least one"),
    ({"tiers": ("a", "a")}, "distinct"),
    ({"tiers": ("a", "b"), "start": (0.5, 0.4)}, "summing to 1"),
    ({"tiers": ("a", "b"), "start": (1.0,)}, "each of the 2 tiers"),
    ({"tiers": ("a",), "promote_at": 0.9, "retire_at": 0.5}, "promote_at <= retire_at"),
    ({"tiers": ("a",), "shift": 0.0}, "shift must be in"),
    ({"tiers": ("a",), "window": 4, "min_episodes": 8}, "min_episodes <= window"),
])
def test_curriculum_settings_are_checked(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError, match=message):
        CurriculumConfig(**fields)


def test_a_recipe_takes_the_curriculum_as_a_table() -> None:
    recipe = Recipe(curriculum={"tiers": ["guided", "warmup"], "promote_at": 0.6})
    assert recipe.curriculum == CurriculumConfig(tiers=("guided", "warmup"), promote_at=0.6)
    with pytest.raises(RecordError, match="did you mean 'promote_at'"):
        Recipe(curriculum={"tiers": ["guided"], "promote": 0.6})


def _script(session_id: str) -> list[str]:
    # guided tasks are always solved; warm-up ones by half the episodes, so their groups carry a signal
    solved = session_id.startswith("g-") or zlib.crc32(session_id.encode()) % 2 == 0
    return [RIGHT if solved else WRONG, SUBMIT]


async def _scripted(loaded: Any) -> ScriptedPolicy:
    return ScriptedPolicy(loaded.tokenizer, _script)


def test_a_run_climbs_from_a_solved_tier_and_resumes_with_its_shares(tmp_path: Path) -> None:
    tasks = [make_answer_task(tmp_path / "tasks", f"g-{i}", tier="guided") for i in range(2)]
    tasks += [make_answer_task(tmp_path / "tasks", f"w-{i}", tier="warmup") for i in range(2)]
    data = write_rows(tmp_path / "data" / "train.jsonl", tasks)

    def launch(num_rollout: int) -> Any:
        recipe = Recipe(num_rollout=num_rollout, rollout_batch_size=2, n_samples_per_prompt=4, lr=1e-4,
                        max_tokens_per_gpu=2048, rollout_max_response_len=32, rollout_max_context_len=2048,
                        save="checkpoints", max_open_sandboxes=4,
                        curriculum=CurriculumConfig(tiers=("guided", "warmup"), window=8, min_episodes=8),
                        extra_config=ExtraConfig(agentic_max_steps=2))
        return TrainConfig(model=TinyModel(seed=3), dataset=AgentTaskDataset(data), recipe=recipe,
                           run_dir=tmp_path / "run", device="cpu").launch(engine_factory=_scripted)

    launch(1)
    run = launch(2)  # resumes after step 1: the shares come back from the checkpoint
    rows = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    first, second = (r for r in rows if r["kind"] == "train")
    # step 1: every task guided, all 8 solved: the tier retires and hands its whole share to warm-up
    assert first["curriculum/guided/share"] == 1.0 and first["curriculum/guided/pass_rate"] == 1.0
    assert first["curriculum/guided/retired"] == 1.0 and first["tier/guided/episodes"] == 8.0
    assert "tier/warmup/episodes" not in first
    # step 2: every task warm-up, half solved: logged with its mixed groups
    assert second["curriculum/warmup/share"] == 1.0 and second["curriculum/guided/share"] == 0.0
    assert second["tier/warmup/episodes"] == 8.0 and "tier/guided/episodes" not in second
    assert 0 < second["tier/warmup/pass_rate"] < 1 and second["tier/warmup/mixed_group_frac"] > 0
    step2 = [json.loads(line) for line in (run.run_dir / "episodes" / "step_000002.jsonl").read_text().splitlines()]
    assert {e["task"][0] for e in step2} == {"w"}


def test_codedojo_train_takes_the_curriculum_as_a_toml_table() -> None:
    from codedojo.config import SmolLM2_Recipe
    from codedojo.train.cli import parse_overrides

    overrides = parse_overrides(['curriculum={tiers=["guided", "hinted", "warmup"], promote_at=0.6, window=48}'])
    assert SmolLM2_Recipe(**overrides).curriculum == CurriculumConfig(tiers=("guided", "hinted", "warmup"),
                                                                      promote_at=0.6, window=48)
