"""The tutorial end to end on a CPU: its dataset step (ingest, validate, split, sample, probe, mixed) with a
scripted policy, then its training step with a tiny model, which must train on exactly the kept rows."""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from pathlib import Path
from typing import Any

import pytest

from codedojo.agent.scripted import ScriptedPolicy
from codedojo.config import AgentTaskDataset, TrainConfig
from codedojo.data.probe import episode_seed
from codedojo.inference.byte_tokenizer import byte_level_tokenizer
from codedojo.inference.chat_templates import CHATML
from codedojo.inference.specs import TinyModel
from data_support import RIGHT, SUBMIT, WRONG, make_answer_task
from slime_support import offline_hf_cache
from tutorials.coding_agent import dataset as tutorial_dataset
from tutorials.coding_agent import main as tutorial_main

N = 2
SESSION = re.compile(r"^(?P<task>.*)-s(?P<seed>\d{10})$")
# Four repositories of two tasks: a task named mix-* is solved by sample 0 of the probe only, win-* always,
# fail-* never. The split puts one repository in eval; the rest are sampled into train-4 and probed.
TASKS = {"alpha": ("mix-a1", "win-a2"), "bravo": ("mix-b1", "fail-b2"), "charlie": ("fail-c1", "mix-c2"),
         "delta": ("win-d1", "mix-d2")}


def _script(session_id: str) -> list[str]:
    match = SESSION.match(session_id)
    assert match, session_id
    task, seed = match["task"], int(match["seed"])
    probe_sample = next((j for j in range(N) if episode_seed(0, task, j) == seed), None)
    if probe_sample is not None:
        solved = task.startswith("win") or (task.startswith("mix") and probe_sample == 0)
    else:  # training and eval episodes: half of them solve it, so GRPO groups have variance
        solved = zlib.crc32(session_id.encode()) % 2 == 0
    return [RIGHT if solved else WRONG, SUBMIT]


def test_the_tutorial_trains_on_exactly_the_rows_its_dataset_step_kept(tmp_path: Path) -> None:
    assert tutorial_main.DATA_VOLUME_NAME and tutorial_main.SLIME_GIT_REPOSITORY
    assert len(tutorial_main.SLIME_GIT_REVISION) == 40
    folder = tmp_path / "harbor-tasks"
    for repo, names in TASKS.items():
        for name in names:
            make_answer_task(folder, name, repository=repo)
    root = tmp_path / "data" / "harbor"
    sizes = tutorial_dataset.Sizes(tier=None, limit=None, train_sizes=(4, 100), eval_sizes=(2,),
                                   probe_subset="train-4", n=N, smoke=True)

    counts = tutorial_dataset.prepare(root, source="folder", folder=folder, sizes=sizes, workers=4)
    assert counts == {"eval": 2, "train-full": 6, "eval-2": 2, "train-4": 4}
    assert not (root / "train-100.jsonl").exists()
    policy = ScriptedPolicy(byte_level_tokenizer(chat_template=CHATML), _script)
    asyncio.run(tutorial_dataset.probe(root, sizes=sizes, model="smollm2-135m-instruct", model_name="scripted",
                                       engine=policy))
    report = tutorial_dataset.mixed(root, sizes=sizes, model_name="scripted")
    probed = [json.loads(line)["label"] for line in (root / "train-4.jsonl").read_text().splitlines()]
    kept = [r["label"] for r in report.rows]
    assert kept == [name for name in probed if name.startswith("mix")] and kept
    assert report.path == root / "train-4-mixed-reward-scripted-agentic-n2.jsonl"
    for name in ("all", "validated", "eval", "train-full", "train-4", "eval-2", "train-4-probe-scripted-n2",
                 "train-4-mixed-reward-scripted-agentic-n2"):
        assert (root / f"{name}.provenance.json").is_file(), name

    recipe = tutorial_main.make_recipe(smoke=True, backend="local", data_root=root, eval_subsets=("eval-2",),
                                       num_rollout=1, rollout_batch_size=len(kept), n_samples_per_prompt=2)

    async def scripted_engine(loaded: Any) -> ScriptedPolicy:
        return ScriptedPolicy(loaded.tokenizer, _script)

    config = TrainConfig(model=TinyModel(seed=7), dataset=AgentTaskDataset(report.path), recipe=recipe,
                         run_dir=tmp_path / "run", device="cpu")
    run = config.launch(engine_factory=scripted_engine)
    trained = [json.loads(line) for line in (run.run_dir / "episodes" / "step_000001.jsonl").read_text().splitlines()]
    assert sorted({e["task"] for e in trained}) == sorted(kept)
    assert len(trained) == 2 * len(kept)
    assert json.loads((run.run_dir / "config.json").read_text())["tasks"] == len(kept)


def test_the_training_script_renders_the_cluster_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "builtin"
    root.mkdir()
    for subset in ("train-4", "eval-4"):
        (root / f"{subset}.jsonl").write_text("")
    monkeypatch.setattr(tutorial_main, "DATA_DIR", tmp_path)
    monkeypatch.setattr(tutorial_main, "DATASET_ROOT", "builtin")
    for name in ("CODEDOJO_RAY_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    offline_hf_cache(tmp_path, monkeypatch)  # Qwen3.6-27B's config.json, as `huggingface-cli download` leaves it
    run = tutorial_main.main(["--backend", "slime", "--train-subset", "train-4", "--run-dir", str(tmp_path / "run")])
    assert run.backend == "slime" and run.summary["submitted"] is False
    assert str(root / "train-4.jsonl") in run.summary["command"]
    assert "source " not in run.summary["command"] and "--load " in run.summary["command"]
    with pytest.raises(SystemExit, match="missing"):
        tutorial_main.main(["--train-subset", "train-300"])


def test_the_warm_step_fine_tunes_on_the_training_pool_and_main_trains_that_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.inference.specs import HFFolder
    from codedojo.train import default

    folder = tmp_path / "harbor-tasks"
    for repo, names in TASKS.items():
        for name in names:
            make_answer_task(folder, name, repository=repo)
    root = tmp_path / "data" / "harbor"
    sizes = tutorial_dataset.Sizes(tier=None, limit=None, train_sizes=(4,), eval_sizes=(2,), probe_subset="train-4",
                                   n=N, smoke=True)
    tutorial_dataset.prepare(root, source="folder", folder=folder, sizes=sizes, workers=4)
    seen: dict[str, Any] = {}

    def fake_warm_start(*, model: str, tasks: list[Any], sft_config: Any, budget: Any, device: str,
                        console: Any) -> Path:  # the real one records demonstrations and runs SFT (minutes)
        seen.update(model=model, tasks=sorted(t.name for t in tasks), budget=budget, sft=sft_config)
        return tmp_path / "sft" / "final"

    monkeypatch.setattr(default, "warm_start", fake_warm_start)
    assert tutorial_dataset.warm_model(root) is None
    model = tutorial_dataset.warm(root, sizes=sizes, model="smollm2-135m-instruct")
    train_pool = [json.loads(line)["label"] for line in (root / "train-full.jsonl").read_text().splitlines()]
    assert seen["tasks"] == sorted(train_pool) and len(train_pool) == 6  # train-full: never the eval repository
    assert (seen["budget"].max_steps, seen["budget"].max_new_tokens) == (6, 96)  # the local recipe's budget
    assert (seen["sft"].epochs, seen["sft"].lr) == (default.SFT_EPOCHS, default.SFT_LR)
    assert tutorial_dataset.warm_model(root) == model == tmp_path / "sft" / "final"
    chosen = tutorial_main.model_for("local", root)
    assert isinstance(chosen, HFFolder) and chosen.path == str(model)
    assert not isinstance(tutorial_main.model_for("local", tmp_path), HFFolder)  # no warm step: the base model
    assert tutorial_main.make_recipe(smoke=True, backend="slime").extra_config.agentic_max_steps == 3
    assert tutorial_dataset.main(["warm", "--source", "folder", "--folder", str(folder),
                                  "--data-dir", str(tmp_path / "data")]) == 2  # no expert for other sources
