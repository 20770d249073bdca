"""bench/update_probe.py end to end on the tiny model: the plan is registered before anything runs, every arm is
trained from the same warm start and scored on the same held-out pool against it and against the first rate, a
rerun reuses every stage, and another plan in the same folder or a bad rate is refused by name."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from codedojo.tasks.task import examples_dir

BENCH = Path(__file__).resolve().parents[1] / "bench" / "update_probe.py"


def _probe():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_update_probe_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_update_probe_test"] = module
    spec.loader.exec_module(module)
    return module


def _tasks(root: Path) -> Path:
    """fix-greeting as a training repository's task, fix-add as a held-out repository's (moneybox)."""
    tasks = root / "tasks"
    for source, repo in (("fix-greeting", "greet"), ("fix-add", "moneybox")):
        target = tasks / f"{repo}-001-guided"
        shutil.copytree(examples_dir() / source, target)
        toml = target / "task.toml"
        toml.write_text(toml.read_text().replace("[metadata]\n", f'[metadata]\nrepository = "{repo}"\n'
                                                                  'tier = "guided"\n'))
    return tasks


def test_every_rate_trains_from_one_start_and_is_scored_on_one_pool(tmp_path: Path) -> None:
    probe = _probe()
    argv = ["--tasks", str(_tasks(tmp_path)), "--model", "tiny-llama", "--work", str(tmp_path / "work"),
            "--out", str(tmp_path / "out"), "--lrs", "1e-3,3e-3", "--steps", "1", "--n", "1", "--concurrency", "2",
            "--max-new-tokens", "256", "--max-context", "8192"]
    assert probe.main(argv) == 0
    plan = json.loads((tmp_path / "work" / "plan.json").read_text())
    assert plan["training_tasks"] == ["greet-001-guided"] and plan["held_out_tasks"] == ["moneybox-001-guided"]
    result = json.loads((tmp_path / "out" / "update-probe.json").read_text())
    assert set(result["arms"]) == {"lr0.001", "lr0.003"}
    assert result["start"]["tasks"] == 1 and result["training_precision"] in ("float32", "bfloat16")
    first, second = result["arms"]["lr0.001"], result["arms"]["lr0.003"]
    assert first["gain_over_start"]["tasks"] == 1 and "minus_lr0.001" not in first
    assert second["minus_lr0.001"]["tasks"] == 1
    assert [row["step"] for row in first["training"]] == [1] and "rollout/reward_mean" in first["training"][0]
    stages = sorted(p.name for p in (tmp_path / "work").iterdir())
    assert {"eval_start.json", "eval_lr0.001.json", "eval_lr0.003.json", "lr0.001", "lr0.003"} <= set(stages)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "work").glob("eval_*.json")}
    assert probe.main(argv) == 0  # every stage cached
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "work").glob("eval_*.json")} == before
    other = [*argv]
    other[other.index("--lrs") + 1] = "1e-3"
    with pytest.raises(SystemExit, match="holds another plan"):
        probe.main(other)
    other[other.index("--lrs") + 1] = "0"
    with pytest.raises(SystemExit, match="positive learning rates"):
        probe.main(other)
