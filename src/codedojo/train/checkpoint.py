"""Checkpoints: everything needed to continue a run exactly, plus a Hugging Face folder of the weights.

    checkpoints/<name>/policy.pt      trainable weights (all of them, or only the LoRA adapters)
    checkpoints/<name>/optimizer.pt   AdamW state and the learning-rate schedule
    checkpoints/<name>/state.pt       step, data position, random generator states
    checkpoints/<name>/hf/            merged weights as safetensors + config + tokenizer (what `eval`,
                                      `serve` and the engine load)
    checkpoints/latest                the name of the newest complete checkpoint

A checkpoint is written to a temporary directory and renamed into place, and `latest` is updated last,
so a run killed while saving resumes from the previous checkpoint.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from codedojo.train.policy import Policy


@dataclass
class TrainerState:
    step: int
    """The next rollout id to run."""
    data: dict[str, Any]
    """The task sampler's position."""
    rng: dict[str, Any]
    """Random generator states."""
    optimizer_steps: int


def save_hf_folder(folder: Path, *, policy: Policy, hf_config: Any, tokenizer: Any) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = policy.engine_state()
    if getattr(hf_config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    hf_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_checkpoint(root: Path, name: str, *, policy: Policy, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, state: TrainerState, hf_config: Any,
                    tokenizer: Any, with_hf: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(policy.trainable_state(), tmp / "policy.pt")
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / "optimizer.pt")
    torch.save({"step": state.step, "data": state.data, "rng": state.rng, "optimizer_steps": state.optimizer_steps},
               tmp / "state.pt")
    if with_hf:
        save_hf_folder(tmp / "hf", policy=policy, hf_config=hf_config, tokenizer=tokenizer)
    if final.exists():
        old = root / f".old-{name}-{os.getpid()}"
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(name + "\n")
    latest_tmp.replace(root / "latest")
    return final


def latest_checkpoint(root: Path) -> Path | None:
    marker = root / "latest"
    if not marker.is_file():
        return None
    path = root / marker.read_text().strip()
    return path if (path / "state.pt").is_file() else None


def load_checkpoint(path: Path, *, policy: Policy, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler) -> TrainerState:
    policy.load_trainable_state(torch.load(path / "policy.pt", map_location=policy.device, weights_only=True))
    opt = torch.load(path / "optimizer.pt", map_location=policy.device, weights_only=False)
    optimizer.load_state_dict(opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    saved = torch.load(path / "state.pt", weights_only=False)
    return TrainerState(step=saved["step"], data=saved["data"], rng=saved["rng"],
                        optimizer_steps=saved["optimizer_steps"])
