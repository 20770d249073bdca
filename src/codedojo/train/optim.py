"""AdamW and the learning-rate schedule (linear warm-up, then constant, linear or cosine decay to min_lr).

As in Megatron, weight decay applies to matrices only: biases and normalisation weights (1-D) are not
decayed. `OptimizerConfig` holds every setting read here; the RL trainer builds it from the recipe
(train.plan.update_config_for), SFT from its own config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """AdamW and its schedule."""

    lr: float
    """Peak learning rate."""
    min_lr: float
    """Floor of the decayed learning rate."""
    lr_decay_style: Literal["constant", "linear", "cosine"]
    """Schedule after warm-up."""
    lr_warmup_iters: int
    """Optimizer steps of linear warm-up."""
    lr_decay_iters: int | None
    """Optimizer steps over which the rate decays (None: total_steps)."""
    total_steps: int
    """Optimizer steps of the whole run."""
    weight_decay: float
    """AdamW weight decay of matrices."""
    adam_beta1: float
    adam_beta2: float
    adam_eps: float


def build_optimizer(parameters: list[torch.nn.Parameter], config: OptimizerConfig) -> torch.optim.AdamW:
    decay = [p for p in parameters if p.ndim >= 2]
    no_decay = [p for p in parameters if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=config.lr,
                             betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps)


def lr_factor(step: int, config: OptimizerConfig) -> float:
    """Multiplier of config.lr at optimizer step `step` (0-based)."""
    warmup = config.lr_warmup_iters
    if warmup and step < warmup:
        return (step + 1) / warmup
    if config.lr_decay_style == "constant":
        return 1.0
    span = max(1, (config.lr_decay_iters or config.total_steps) - warmup)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    floor = config.min_lr / config.lr if config.lr else 0.0
    if config.lr_decay_style == "linear":
        return floor + (1.0 - floor) * (1.0 - progress)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, config: OptimizerConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, config))
