"""The warm-start chain through the command line with a tiny model, each stage reading what the one before
wrote to disk: `codedojo demos` -> `codedojo sft` -> `codedojo train` (GRPO from the SFT folder) ->
`codedojo eval` (of the GRPO folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from codedojo.cli import main
from codedojo.config import task_row
from codedojo.inference.specs import TinyModel
from codedojo.tasks.task import Task, examples_dir

TASKS = ("hello-file", "fix-add", "fix-greeting", "sum-numbers")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_demos_sft_grpo_eval_chain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = [str(examples_dir() / name) for name in TASKS]

    demos = tmp_path / "demos"
    # the byte-level tokenizer spends a token per character: a reply budget of 256 holds the expert's replies
    assert main(["demos", "--model", "tiny-llama", "--tasks", *tasks, "--out", str(demos), "--per-task", "4",
                 "--max-new-tokens", "256", "--max-context", "4096"]) == 0
    # Only fix-greeting's solution is a diff the expert can learn the fix from; it solves all 4 episodes.
    assert sorted(p.name.split("-s")[0] for p in demos.glob("*.json")) == ["fix-greeting"] * 4

    sft = tmp_path / "sft"
    assert main(["sft", "--model", "tiny-llama", "--trajectories", str(demos), "--out", str(sft), "--epochs", "12",
                 "--lr", "3e-3", "--batch", "2", "--device", "cpu"]) == 0
    losses = [json.loads(line)["sft/loss"] for line in (sft / "metrics.jsonl").read_text().splitlines()
              if '"sft/loss"' in line]
    assert len(losses) == 24
    assert _mean(losses[-4:]) < 0.75 * _mean(losses[:4]), losses  # the demonstrations are being learned

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(task_row(Path(t), instruction=Task.load(Path(t)).instruction)) + "\n"
                            for t in tasks[1:3]))
    run = tmp_path / "run"
    settings = ["num_rollout=1", "rollout_batch_size=2", "n_samples_per_prompt=2", "global_batch_size=4",
                "rollout_max_response_len=24", "rollout_max_context_len=4096", "max_open_sandboxes=4",
                "dynamic_sampling=false",  # the step trains (and reports a loss) even when every group is uniform
                "extra_config={agentic_max_steps=2, skip_eval_before_train=true}"]
    argv = ["train", "--dataset", str(data), "--model", str(sft / "final"), "--run-dir", str(run), "--device", "cpu"]
    assert main(argv + [a for s in settings for a in ("--set", s)]) == 0
    train = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert [r["step"] for r in train] == [0] and train[0]["rollout/episodes"] == 4
    base = TinyModel().load().state_dict
    warm = load_file(str(sft / "final" / "model.safetensors"))
    trained = load_file(str(run / "final" / "model.safetensors"))
    assert warm.keys() == trained.keys() and all(not torch.equal(warm[k], base[k]) for k in warm)
    moved = [k for k in warm if not torch.equal(warm[k], trained[k])]
    assert torch.isfinite(torch.tensor(train[0]["train/loss"]))
    if train[0]["train/optimizer_steps"]:  # some group had different rewards: GRPO moved the SFT weights
        assert moved
    else:  # every reward equal (the tiny model solves nothing): no update, the SFT weights went through unchanged
        assert train[0]["train/skipped_zero_advantage"] == 4 and moved == []

    capsys.readouterr()
    assert main(["eval", "--model", str(run / "final"), "--tasks", *tasks[:2], "--n", "2", "--max-steps", "2",
                 "--max-new-tokens", "24", "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == str(run / "final")
    assert sum(report["statuses"].values()) == 4 and report["pass@1"] is not None
