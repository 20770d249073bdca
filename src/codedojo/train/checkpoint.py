"""Checkpoints: a run's whole `TrainState` (train.state), so it continues exactly, plus a Hugging Face folder
of the weights.

    checkpoints/<name>/policy.pt      trainable weights (all of them, or only the LoRA adapters)
    checkpoints/<name>/optimizer.pt   AdamW state and the learning-rate schedule
    checkpoints/<name>/state.pt       step, the task sampler's position, random generator states (shuffle, torch)
    checkpoints/<name>/hf/            merged weights as safetensors + config + tokenizer (what `eval`,
                                      `serve` and the engine load)
    checkpoints/latest                the name of the newest complete checkpoint

A checkpoint is written to a temporary directory and renamed into place, and `latest` is updated last,
so a run killed while saving resumes from the previous checkpoint. Replacing a checkpoint of the same name
(`last`) moves the old one aside first: a run killed between the two renames finds it there, and
`latest_checkpoint` puts it back. A write that fails (a full disk) removes its temporary directory and
raises `CheckpointError`, which says what to do; the previous checkpoint stays whole. What a killed run
left half-written is removed by the next save.
"""

from __future__ import annotations

import errno
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


class CheckpointError(OSError):
    """A checkpoint could not be written; the previous one is intact (the message says how to go on)."""


def save_checkpoint(root: Path, name: str, state: TrainState, *, hf_config: Any, tokenizer: Any,
                    with_hf: bool = True) -> Path:
    """Write `state` (and the global torch generator) as checkpoint `name`; with_hf also the HF folder.
    Raises CheckpointError when it cannot be written."""
    root.mkdir(parents=True, exist_ok=True)
    for stale in [*root.glob(".tmp-*"), *root.glob(".old-*")]:  # a killed save's; one trainer writes a run's
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp-{name}-{os.getpid()}"
    try:
        tmp.mkdir()
        _write(tmp, state, hf_config=hf_config, tokenizer=tokenizer, with_hf=with_hf)
        _move_into_place(root, name, tmp)
    except Exception as e:
        full = _disk_full(root, e)  # before the cleanup gives the space back
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(_failure(root, name, e, full=full)) from e
    return root / name


def _write(tmp: Path, state: TrainState, *, hf_config: Any, tokenizer: Any, with_hf: bool) -> None:
    torch.save(state.policy.trainable_state(), tmp / "policy.pt")
    torch.save({"optimizer": state.optimizer.state_dict(), "scheduler": state.scheduler.state_dict()},
               tmp / "optimizer.pt")
    torch.save({"step": state.step, "data": state.sampler.state(),
                "rng": {"shuffle": state.shuffle_rng.getstate(), "torch": torch.get_rng_state()},
                "optimizer_steps": int(state.scheduler.last_epoch)}, tmp / "state.pt")
    if with_hf:
        save_hf_folder(tmp / "hf", policy=state.policy, hf_config=hf_config, tokenizer=tokenizer)


def _move_into_place(root: Path, name: str, tmp: Path) -> None:
    final = root / name
    if final.exists():
        old = root / f".old-{name}-{os.getpid()}"
        final.rename(old)
        tmp.rename(final)  # killed just before this, `latest_checkpoint` moves `old` back
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(name + "\n")
    latest_tmp.replace(root / "latest")


FULL_BELOW_BYTES = 64 << 20
"""A write that failed with less free space than this left failed for want of space: torch.save says only
"unexpected pos" when the disk fills."""


def _disk_full(root: Path, error: Exception) -> bool:
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left" in str(error) or shutil.disk_usage(root).free < FULL_BELOW_BYTES


def _failure(root: Path, name: str, error: Exception, *, full: bool) -> str:
    """Why checkpoint `name` was not written, and how to go on."""
    free = shutil.disk_usage(root).free
    why = "the disk is full" if full else f"{type(error).__name__}: {error}"
    previous = latest_checkpoint(root)
    resume = (f"the previous checkpoint ({previous.name}) is intact and a relaunch resumes from it"
              if previous is not None else "there is no earlier checkpoint: a relaunch starts over")
    return (f"could not write checkpoint {name} in {root}: {why} ({free / 2**20:.1f} MiB free there); {resume}. "
            "Free some space (or point `save` elsewhere) and rerun the same command.")


def latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint `latest` names, or None. One that a killed save had moved aside to replace it is put
    back first."""
    marker = root / "latest"
    if not marker.is_file():
        return None
    path = root / marker.read_text().strip()
    if not (path / "state.pt").is_file():
        for moved in sorted(root.glob(f".old-{path.name}-*")):
            if (moved / "state.pt").is_file():
                shutil.rmtree(path, ignore_errors=True)
                moved.rename(path)
                break
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
