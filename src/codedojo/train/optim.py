"""AdamW and the learning-rate schedule (linear warm-up, then constant, linear or cosine decay to min_lr).

As in Megatron, weight decay applies to matrices only: biases and normalisation weights (1-D) are not
decayed.
"""

from __future__ import annotations

import math

import torch

from codedojo.config.recipe import Recipe


def build_optimizer(parameters: list[torch.nn.Parameter], recipe: Recipe) -> torch.optim.AdamW:
    decay = [p for p in parameters if p.ndim >= 2]
    no_decay = [p for p in parameters if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": recipe.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=recipe.lr,
                             betas=(recipe.adam_beta1, recipe.adam_beta2), eps=recipe.adam_eps)


def lr_factor(step: int, *, recipe: Recipe, total_steps: int) -> float:
    """Multiplier of recipe.lr at optimizer step `step` (0-based)."""
    warmup = recipe.lr_warmup_iters
    if warmup and step < warmup:
        return (step + 1) / warmup
    if recipe.lr_decay_style == "constant":
        return 1.0
    span = max(1, (recipe.lr_decay_iters or total_steps) - warmup)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    floor = recipe.min_lr / recipe.lr if recipe.lr else 0.0
    if recipe.lr_decay_style == "linear":
        return floor + (1.0 - floor) * (1.0 - progress)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, recipe: Recipe, *, total_steps: int
                    ) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, recipe=recipe, total_steps=total_steps))
