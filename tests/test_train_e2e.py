"""The local trainer end to end on a CPU: tiny model, scripted rollouts, real sandboxes and verifiers."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

from codedojo.agent.prompts import SUBMIT_SENTINEL
from codedojo.agent.scripted import ScriptedPolicy
from codedojo.config import (
    AgentTaskDataset,
    BackendRequired,
    EvalConfig,
    EvalDataset,
    ExtraConfig,
    Qwen3_6_27B,
    Qwen3_6_27B_Recipe,
    Recipe,
    TrainConfig,
    task_row,
)
from codedojo.inference.specs import TinyModel
from codedojo.records import RecordError
from codedojo.tasks.task import Task, examples_dir
from conftest import MakeTask

SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
RIGHT = {"hello-file": "```bash\necho world > hello.txt\n```",
         "fix-add": "```bash\nsed -i '5s/a - b/a + b/' calc.py\n```"}
HOOK_CALLS: list[tuple[int, int, float]] = []


def log_hook(rollout_id: int, args: Any, samples: list[dict[str, Any]], extra: dict[str, float],
             rollout_time: float) -> bool:
    """A custom_rollout_log_function with slime's signature."""
    assert args.n_samples_per_prompt == 4 and {"tokens", "loss_mask", "rollout_log_probs", "reward"} <= set(samples[0])
    HOOK_CALLS.append((rollout_id, len(samples), extra["rollout/reward_mean"]))
    return False


def _script(session_id: str) -> list[str]:
    task = "hello-file" if session_id.startswith("hello-file") else "fix-add"
    right = zlib.crc32(session_id.encode()) % 2 == 0  # half the episodes solve it: groups have variance
    return [RIGHT[task] if right else "```bash\nls\n```", SUBMIT]


async def _scripted_engine(loaded: Any) -> ScriptedPolicy:
    return ScriptedPolicy(loaded.tokenizer, _script)


def _dataset(folder: Path) -> AgentTaskDataset:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.jsonl"
    rows = [task_row(examples_dir() / name, instruction=Task.load(examples_dir() / name).instruction)
            for name in ("hello-file", "fix-add")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return AgentTaskDataset(path)


def _recipe(tmp: Path, *, num_rollout: int) -> Recipe:
    data = _dataset(tmp / "data")
    return Recipe(
        num_rollout=num_rollout, rollout_batch_size=2, n_samples_per_prompt=4, global_batch_size=4, lr=1e-3,
        weight_decay=0.0, eps_clip_high=0.28, max_tokens_per_gpu=2048, log_probs_chunk_size=64,
        rollout_max_response_len=64, rollout_max_context_len=4096, save="checkpoints", save_interval=1,
        save_debug_rollout_data="dumps/rollout_{rollout_id}.pt", capture_trace=True,
        custom_rollout_log_function="test_train_e2e:log_hook", eval_interval=1, max_open_sandboxes=4,
        eval_config={"defaults": {"n_samples_per_eval_prompt": 2}, "datasets": [{"name": "held-out", "path":
                                                                                    str(data.path)}]},
        extra_config=ExtraConfig(agentic_max_steps=3, skip_eval_before_train=True),
    )


def _train(tmp: Path, run_dir: Path, *, num_rollout: int) -> Any:
    config = TrainConfig(model=TinyModel(seed=7), dataset=_dataset(tmp / "data"),
                         recipe=_recipe(tmp, num_rollout=num_rollout), run_dir=run_dir, device="cpu")
    return config.launch(engine_factory=_scripted_engine)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    tmp = tmp_path_factory.mktemp("train")
    HOOK_CALLS.clear()
    run = _train(tmp, tmp / "run", num_rollout=2)
    return tmp, run


def test_a_run_trains_every_parameter_and_writes_everything(trained: tuple[Path, Any]) -> None:
    _, run = trained
    records = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in train] == [0, 1] and [r["step"] for r in evals] == [1, 2]
    for r in train:
        assert torch.isfinite(torch.tensor(r["train/loss"])) and r["train/optimizer_steps"] == 2.0
        assert r["rollout/episodes"] == 8 and r["rollout/valid"] == 8
        assert 0 < r["rollout/reward_mean"] < 1 and r["rollout/groups_trained"] == 2
        assert r["train/train_rollout_logprob_abs_diff"] > 0  # scripted logprobs are not the model's
    assert evals[0]["eval/held-out/tasks"] == 2 and evals[0]["eval/held-out/pass@1"] is not None
    # half the scripted episodes solve their task: most groups have mixed rewards
    assert all(0 < r["rollout/mixed_group_frac"] <= 1 for r in train)
    # no health check fires on this clean run, but the one that sees scripted logprobs are not the model's
    assert {k for r in [*train, *evals] for k in r if k.startswith("health/")} <= {"health/logprob_mismatch"}
    learning = json.loads((run.run_dir / "learning.json").read_text())
    assert learning == run.summary["learning"]
    assert set(learning["health"]) <= {"logprob_mismatch"}
    # what a solved episode cost, per step and over the run (the sandboxes held and the prompts computed)
    assert all(r["cost/sandbox_seconds"] > 0 and r["cost/prefilled_tokens"] > 0 for r in train)
    cost = learning["cost"]
    assert cost["solved_episodes"] == sum(round(r["rollout/solved_frac"] * r["rollout/valid"]) for r in train) > 0
    assert cost["machine_seconds_per_solved"] == pytest.approx(cost["machine_seconds"] / cost["solved_episodes"])
    assert learning["train_reward"] == [r["rollout/reward_mean"] for r in train]
    held = learning["eval"]["held-out"]
    assert (held["before"]["step"], held["after"]["step"]) == (1, 2) and held["gain"]["tasks"] == 2
    assert held["gain"]["mean"] == pytest.approx(held["after"]["pass@1"] - held["before"]["pass@1"])
    assert evals[1]["eval/held-out/gain"] == pytest.approx(held["gain"]["mean"])

    initial = TinyModel(seed=7).load().state_dict
    final = load_file(str(run.run_dir / "final" / "model.safetensors"))
    assert set(final) <= set(initial)
    unchanged = [name for name, tensor in final.items() if torch.equal(tensor, initial[name])]
    assert unchanged == []

    assert (run.run_dir / "dumps" / "rollout_0.pt").is_file() and (run.run_dir / "dumps" / "rollout_1.pt").is_file()
    assert (run.run_dir / "dumps" / "rollout_eval_1.pt").is_file()
    dump = torch.load(run.run_dir / "dumps" / "rollout_1.pt", weights_only=False)
    assert dump["rollout_id"] == 1 and len(dump["samples"]) == 8
    sample = dump["samples"][0]
    assert len(sample["loss_mask"]) == sample["response_length"] == len(sample["rollout_log_probs"])
    assert [c[:2] for c in HOOK_CALLS] == [(0, 8), (1, 8)]
    trace = json.loads((run.run_dir / "trace.json").read_text())
    assert {"rollout", "train", "weight_sync", "eval", "checkpoint"} <= {e["name"] for e in trace["traceEvents"]}
    assert (run.run_dir / "report.html").is_file()
    assert (run.run_dir / "checkpoints" / "latest").read_text().strip() == "step_000002"


def test_metrics_reach_tensorboard(trained: tuple[Path, Any]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run = trained
    events = EventAccumulator(str(run.run_dir / "tensorboard"))
    events.Reload()
    assert "rollout/reward_mean" in events.Tags()["scalars"]
    assert [e.step for e in events.Scalars("train/loss")] == [0, 1]


def test_a_resumed_run_continues_exactly_like_an_uninterrupted_one(trained: tuple[Path, Any],
                                                                     tmp_path: Path) -> None:
    tmp, straight = trained
    resumed_dir = tmp_path / "resumed"
    _train(tmp, resumed_dir, num_rollout=1)   # "killed" after step 1 ...
    _train(tmp, resumed_dir, num_rollout=2)   # ... and relaunched
    a = load_file(str(straight.run_dir / "final" / "model.safetensors"))
    b = load_file(str(resumed_dir / "final" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], atol=1e-7) for k in a)
    la = [json.loads(x) for x in straight.metrics_path.read_text().splitlines() if '"train"' in x][-1]
    lb = [json.loads(x) for x in (resumed_dir / "metrics.jsonl").read_text().splitlines() if '"train"' in x][-1]
    assert la["train/loss"] == pytest.approx(lb["train/loss"], abs=1e-7)
    # the relaunch measures its evaluation's gain from the run's first evaluation, as the straight run does
    ea = [json.loads(x) for x in straight.metrics_path.read_text().splitlines() if '"eval"' in x]
    eb = [json.loads(x) for x in (resumed_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
    assert [r["step"] for r in eb] == [r["step"] for r in ea] == [1, 2]
    for key in ("eval/held-out/pass@1", "eval/held-out/gain", "eval/held-out/gain_stderr"):
        assert eb[-1][key] == ea[-1][key], key
    learned = json.loads((resumed_dir / "learning.json").read_text())["eval"]["held-out"]
    assert learned == json.loads((straight.run_dir / "learning.json").read_text())["eval"]["held-out"]


def test_the_27b_recipe_needs_a_cluster_backend(tmp_path: Path) -> None:
    config = TrainConfig(model=Qwen3_6_27B(), dataset=_dataset(tmp_path), recipe=Qwen3_6_27B_Recipe())
    with pytest.raises(BackendRequired, match="targets the slime or modal backend"):
        config.launch(backend="local")


def test_recipe_fields_are_typed_and_unknown_ones_are_named() -> None:
    with pytest.raises(RecordError, match=r"unknown key 'lrr'.*did you mean 'lr'"):
        Recipe(lrr=1e-5)
    with pytest.raises(RecordError, match=r"unknown key 'agentic_max_step'.*agentic_max_steps"):
        Recipe(extra_config={"agentic_max_step": 3})
    with pytest.raises(RecordError, match="rollout_batch_size must be at least 1"):
        Recipe(rollout_batch_size=0)
    with pytest.raises(RecordError, match="eval_interval needs eval_config"):
        Recipe(eval_interval=5)
    r = Qwen3_6_27B_Recipe(environment={"ASYNC_RL_REWARD_SHAPE": "fractional", "SLIME_AGENT_SANDBOX_CPU": "2",
                                        "SLIME_AGENT_SANDBOX_MEMORY_MB": "4096"},
                           eval_config={"defaults": {"temperature": 0.6}, "datasets": [{"name": "eval", "path": "x"}]})
    assert (r.reward_shape, r.sandbox_cpus, r.sandbox_memory_mb) == ("fractional", 2.0, 4096)
    assert isinstance(r.eval_config, EvalConfig) and isinstance(r.eval_config.datasets[0], EvalDataset)
    assert r.optimizer_steps_per_rollout == 1 and r.effective_clip == (0.2, 0.2)
    with pytest.raises(RecordError, match="disagrees with environment"):
        Recipe(reward_shape="fractional", environment={"ASYNC_RL_REWARD_SHAPE": "binary"})


def test_ignored_fields_are_reported_with_reasons(tmp_path: Path) -> None:
    recipe = Recipe(tensor_model_parallel_size=4, sglang_speculative_algorithm="EAGLE", async_mode=True)
    config = TrainConfig(model=TinyModel(), dataset=_dataset(tmp_path), recipe=recipe)
    ignored = dict(config.ignored_fields("local"))
    assert "tensor_model_parallel_size" in ignored and "speculative" in ignored["sglang_speculative_algorithm"]
    assert "synchronous" in ignored["async_mode"]
    assert "extra_config.router_policy" in ignored
    assert config.derived()["optimizer steps per rollout"] == 1


def test_training_and_eval_sandboxes_get_no_network_unless_the_recipe_says(make_task: MakeTask) -> None:
    import asyncio

    from codedojo.tasks.config import EnvironmentConfig
    from codedojo.train.plan import rollout_config_for
    from codedojo.trial import EpisodeStatus, NopAgent, run_trial

    for recipe in (Recipe(), Recipe(sandbox_backend="docker"), Qwen3_6_27B_Recipe()):
        assert rollout_config_for(recipe).trial.limits.network is False
    assert rollout_config_for(Recipe(sandbox_network=None)).trial.limits.network is None  # as `codedojo trial`
    limits = rollout_config_for(Recipe(sandbox_network=True, sandbox_cpus=1.5, sandbox_memory_mb=900)).trial.limits
    assert (limits.network, limits.cpus, limits.memory_mb) == (True, 1.5, 900)
    # A task that allows internet (Harbor's default) runs in the trainer's sandbox with only a loopback device.
    only_loopback = "[ \"$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ')\" = lo ] && echo 1 || echo 0"
    public = make_task(test_sh=f"#!/bin/bash\n({only_loopback}) > /logs/verifier/reward.txt\n",
                       environment=EnvironmentConfig(memory_mb=512, storage_mb=256))
    assert public.config.environment.network_mode == "public"
    result = asyncio.run(run_trial(public, NopAgent(), options=rollout_config_for(Recipe()).trial))
    assert (result.status, result.reward) == (EpisodeStatus.SUBMITTED, 1.0), result.error


def test_the_update_config_is_the_recipe_resolved_once() -> None:
    from codedojo.train.optim import lr_factor
    from codedojo.train.plan import update_config_for

    config = update_config_for(Recipe(num_rollout=3, rollout_batch_size=2, n_samples_per_prompt=4, global_batch_size=4,
                                      eps_clip_high=0.28, use_kl_loss=True, kl_loss_coef=0.0, lr=1e-3, min_lr=1e-4,
                                      lr_warmup_iters=2, lr_decay_style="cosine"))
    assert (config.global_batch_size, config.eps_clip, config.eps_clip_high) == (4, 0.2, 0.28)
    assert config.use_kl is False  # use_kl_loss with a zero coefficient computes no KL
    assert update_config_for(Recipe(use_kl_loss=True, kl_loss_coef=0.1)).use_kl is True
    # 3 rollouts x 2 optimizer steps; warm-up over 2, then cosine from 1 to 0.1 over the other 4
    assert config.optimizer.total_steps == 6
    factors = [lr_factor(step, config.optimizer) for step in range(7)]
    assert factors == pytest.approx([0.5, 1.0, 1.0, 0.1 + 0.9 * 0.5 * (1 + 2 ** -0.5), 0.55,
                                     0.1 + 0.9 * 0.5 * (1 - 2 ** -0.5), 0.1])


def test_the_before_training_evaluation_of_a_folder_is_kept_for_the_next_run_from_the_same_weights(
        trained: tuple[Path, Any], tmp_path: Path) -> None:
    """A run from a model folder (the main job's cached warm start) keeps its before-training evaluation's
    episodes in the eval cache; a second run from the same weights reads them back and samples none of them."""
    import asyncio
    import dataclasses

    from codedojo.inference.specs import HFFolder
    from codedojo.train.launch import eval_sets, load_tasks
    from codedojo.train.plan import plan_for
    from codedojo.train.trainer import LocalTrainer

    tmp, run = trained
    start = HFFolder(path=str(run.run_dir / "final"))
    base = _recipe(tmp, num_rollout=1)
    recipe = dataclasses.replace(base, extra_config=dataclasses.replace(base.extra_config,
                                                                        skip_eval_before_train=False))
    replies: list[str] = []

    async def counting_engine(loaded: Any) -> ScriptedPolicy:
        def script(session_id: str) -> list[str]:
            replies.append(session_id)
            return _script(session_id)
        return ScriptedPolicy(loaded.tokenizer, script)

    def sessions(name: str, cache: Path | None) -> int:
        replies.clear()
        trainer = LocalTrainer(model=start, tasks=load_tasks(_dataset(tmp / "data")),
                               plan=plan_for(recipe, profile="small"), run_dir=tmp_path / name, device="cpu",
                               eval_sets=eval_sets(recipe, profile="small"), engine_factory=counting_engine,
                               eval_cache=cache)
        asyncio.run(trainer.run())
        return len(set(replies))

    before = 2 * 2  # the before-training evaluation: 2 tasks x n = 2
    first, second = sessions("first", tmp_path / "evals"), sessions("second", tmp_path / "evals")
    assert first - second == before
    report = "evals/held-out/step_000000.json"
    assert json.loads((tmp_path / "first" / report).read_text())["per_task"] == \
        json.loads((tmp_path / "second" / report).read_text())["per_task"]
    assert sessions("uncached", None) == first  # without the cache every run samples its own


def test_following_one_training_step_enters_no_file_more_than_three_times(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43's measure of a readable step: from the trainer (train/trainer.py), one step (rollout, batch,
    update, weight sync, records, the evaluation after it and the checkpoint) calls into each other codedojo file
    at most 3 separate times. Recorded with sys.setprofile: each call made from trainer.py into another file,
    consecutive calls into the same file counting as one entry."""
    import collections
    import sys

    import codedojo
    import codedojo.train.trainer as trainer

    src, spine = str(Path(codedojo.__file__).parent) + "/", trainer.__file__
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        back = frame.f_back
        callee = frame.f_code.co_filename
        if event == "call" and back is not None and back.f_code.co_filename == spine and callee != spine \
                and callee.startswith(src) and (not entered or entered[-1] != callee):
            entered.append(callee)

    step, checkpoint = trainer.LocalTrainer._train_step, trainer.LocalTrainer._checkpoint

    async def profiled_step(self: Any, run: Any, index: int) -> None:
        sys.setprofile(profile)
        await step(self, run, index)

    def checkpoint_then_stop(self: Any, run: Any) -> None:
        try:
            checkpoint(self, run)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(trainer.LocalTrainer, "_train_step", profiled_step)
    monkeypatch.setattr(trainer.LocalTrainer, "_checkpoint", checkpoint_then_stop)
    _train(tmp_path, tmp_path / "run", num_rollout=1)
    files = collections.Counter(path.removeprefix(src) for path in entered)
    assert {"rollout/episodes.py", "train/samples.py", "train/run_records.py", "train/checkpoint.py"} <= set(files)
    assert max(files.values()) <= 3, files.most_common()


def test_a_baseline_is_evaluated_first_on_the_same_tasks_and_paired_with_both_models(trained: tuple[Path, Any],
                                                                                    tmp_path: Path) -> None:
    """TrainConfig.baseline (the main job's base model): evaluated on the eval sets before the start model is
    loaded, kept in the eval cache, written beside the run's evaluations (and read back by a resumed run), and
    learning.json pairs the start and the trained model with it over the same tasks."""
    import asyncio
    import dataclasses

    from codedojo.inference.specs import HFFolder
    from codedojo.train.launch import eval_sets, load_tasks
    from codedojo.train.plan import plan_for
    from codedojo.train.report import learning_lines
    from codedojo.train.run_records import RunRecords
    from codedojo.train.trainer import LocalTrainer

    tmp, run = trained
    start, baseline = HFFolder(path=str(run.run_dir / "final")), TinyModel(seed=3)
    base = _recipe(tmp, num_rollout=1)
    recipe = dataclasses.replace(base, extra_config=dataclasses.replace(base.extra_config,
                                                                        skip_eval_before_train=False))
    opened: list[str] = []
    baseline_sessions: list[str] = []

    async def engines(loaded: Any) -> ScriptedPolicy:
        opened.append("start" if loaded.folder is not None else "baseline")  # the start model is a folder
        if loaded.folder is not None:  # solves every task
            return ScriptedPolicy(loaded.tokenizer, lambda session_id: [RIGHT[
                "hello-file" if session_id.startswith("hello-file") else "fix-add"], SUBMIT])

        def never_solves(session_id: str) -> list[str]:
            baseline_sessions.append(session_id)
            return ["```bash\nls\n```", SUBMIT]
        return ScriptedPolicy(loaded.tokenizer, never_solves)

    def train(name: str) -> dict[str, Any]:
        opened.clear()
        baseline_sessions.clear()
        trainer = LocalTrainer(model=start, tasks=load_tasks(_dataset(tmp / "data")),
                               plan=plan_for(recipe, profile="small"), run_dir=tmp_path / name, device="cpu",
                               eval_sets=eval_sets(recipe, profile="small"), engine_factory=engines,
                               eval_cache=tmp_path / "evals", baseline=baseline,
                               stage_names=("base", "after SFT", "after GRPO"))
        return asyncio.run(trainer.run())["learning"]

    learning = train("first")
    assert opened == ["baseline", "start"]  # the baseline's engine first, then the start model's
    assert len(set(baseline_sessions)) == 2 * 2  # 2 tasks x n = 2
    entry = learning["eval"]["held-out"]
    assert entry["baseline"] == {"model": baseline.name, "pass@1": 0.0, "stderr": 0.0}
    assert entry["before"]["pass@1"] == entry["after"]["pass@1"] == 1.0
    assert entry["before_vs_baseline"] == entry["after_vs_baseline"] == {"mean": 1.0, "stderr": 0.0, "tasks": 2}
    assert entry["after_vs_baseline"]["tasks"] == 2 and learning["stage_names"] == ["base", "after SFT", "after GRPO"]
    lines = learning_lines(learning)
    assert f"  base ({baseline.name}): 0.000 +- 0.000" in lines
    assert any(line.startswith("  after GRPO - base: ") for line in lines)
    rows = [json.loads(line) for line in (tmp_path / "first" / "metrics.jsonl").read_text().splitlines()]
    assert [r["baseline/held-out/pass@1"] for r in rows if r["kind"] == "baseline"] == [0.0]
    kept = json.loads((tmp_path / "first" / "evals" / "held-out" / "baseline.json").read_text())
    assert kept["model"] == baseline.name and kept["pass@1"] == 0.0

    # a second run from the same weights reads the baseline's episodes back from the eval cache
    assert train("second")["eval"]["held-out"]["baseline"]["pass@1"] == 0.0 and not baseline_sessions

    # a run resumed after its first step takes the baseline's evaluation back with the others
    plan = plan_for(recipe, profile="small").records
    records = RunRecords(tmp_path / "first", plan, steps=1, eval_sets=["held-out"], start=1, console=Console(),
                         hook=None, stage_names=("base", "after SFT", "after GRPO"))
    resumed, _ = records.finish()
    records.close()
    assert resumed["eval"]["held-out"]["baseline"] == entry["baseline"]
    assert resumed["eval"]["held-out"]["after_vs_baseline"] == entry["after_vs_baseline"]


def test_a_baseline_is_a_model_and_the_stage_names_are_three(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "data")
    with pytest.raises(TypeError, match="baseline must be a model spec"):
        TrainConfig(model=TinyModel(), dataset=data, recipe=Recipe(), baseline=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stage_names must be three non-empty names"):
        TrainConfig(model=TinyModel(), dataset=data, recipe=Recipe(), stage_names=("base", ""))  # type: ignore[arg-type]
    config = TrainConfig(model=TinyModel(), dataset=data, recipe=Recipe(), baseline=TinyModel(seed=1))
    with pytest.raises(ValueError, match="baseline is evaluated by the local backend only"):
        config.launch(backend="slime")
