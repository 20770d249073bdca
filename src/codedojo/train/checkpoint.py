"""Checkpoints: a run's whole `TrainState` (train.state), so it continues exactly, plus a Hugging Face folder
of the weights.

    checkpoints/<name>/policy.pt      trainable weights (all of them, or only the LoRA adapters)
    checkpoints/<name>/optimizer.pt   AdamW state and the learning-rate schedule
    checkpoints/<name>/state.pt       step, the task sampler's position, random generator states (shuffle, torch)
    checkpoints/<name>/hf/            merged weights as safetensors + config + tokenizer (what `eval`,
                                      `serve` and the engine load)
    checkpoints/latest                the name of the newest complete checkpoint

A checkpoint is written to a temporary directory and renamed into place, and `latest` is updated last,
so a run killed while saving resumes from the previous checkpoint.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from codedojo.train.policy import Policy
from codedojo.train.state import TrainState


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


def save_checkpoint(root: Path, name: str, state: TrainState, *, hf_config: Any, tokenizer: Any,
                    with_hf: bool = True) -> Path:
    """Write `state` (and the global torch generator) as checkpoint `name`; with_hf also the HF folder."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(state.policy.trainable_state(), tmp / "policy.pt")
    torch.save({"optimizer": state.optimizer.state_dict(), "scheduler": state.scheduler.state_dict()},
               tmp / "optimizer.pt")
    torch.save({"step": state.step, "data": state.sampler.state(),
                "rng": {"shuffle": state.shuffle_rng.getstate(), "torch": torch.get_rng_state()},
                "optimizer_steps": int(state.scheduler.last_epoch)}, tmp / "state.pt")
    if with_hf:
        save_hf_folder(tmp / "hf", policy=state.policy, hf_config=hf_config, tokenizer=tokenizer)
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


def load_checkpoint(path: Path, state: TrainState) -> None:
    """Restore `state` (and the global torch generator) from checkpoint `path`, in place."""
    policy = state.policy
    policy.load_trainable_state(torch.load(path / "policy.pt", map_location=policy.device, weights_only=True))
    opt = torch.load(path / "optimizer.pt", map_location=policy.device, weights_only=False)
    state.optimizer.load_state_dict(opt["optimizer"])
    state.scheduler.load_state_dict(opt["scheduler"])
    saved = torch.load(path / "state.pt", weights_only=False)
    state.step = saved["step"]
    state.sampler.restore(saved["data"])
    state.shuffle_rng.setstate(saved["rng"]["shuffle"])
    torch.set_rng_state(saved["rng"]["torch"])
