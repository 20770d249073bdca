"""Policy-gradient losses, KL estimators and importance weights, token by token.

Every loss here returns `(loss, metrics)` and is normalised by `num_tokens`, the count of trainable
tokens in the WHOLE optimizer step (all micro-batches), not of the micro-batch: summing the micro-batch
losses then gives exactly the loss of one big batch, so gradient accumulation over 8 micro-batches of 1
equals one batch of 8.

Variants compose instead of switching on a loss type: GRPO is the clipped surrogate with symmetric
bounds; DAPO's clip-higher is `eps_clip_high > eps_clip`; truncated importance sampling multiplies in
`tis_weights`; a KL penalty adds `kl_coef * kl`.

Tensors are 1-D over the tokens of a packed micro-batch: (T,).
"""

from __future__ import annotations

from typing import Literal

import torch

KLEstimator = Literal["k1", "k2", "k3"]


def clipped_policy_loss(
    logprobs_T: torch.Tensor,
    old_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    mask_T: torch.Tensor,
    *,
    num_tokens: int,
    eps_clip: float = 0.2,
    eps_clip_high: float | None = None,
    tis_weights_T: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate: sum over trainable tokens of max(-A r, -A clip(r, 1-eps, 1+eps_high)),
    divided by `num_tokens`. r = exp(logprob - old_logprob)."""
    high = eps_clip if eps_clip_high is None else eps_clip_high
    mask = mask_T.to(logprobs_T.dtype)
    ratio = torch.exp(logprobs_T - old_logprobs_T)
    unclipped = -advantages_T * ratio
    clipped = -advantages_T * torch.clamp(ratio, 1.0 - eps_clip, 1.0 + high)
    per_token = torch.maximum(unclipped, clipped)
    if tis_weights_T is not None:
        per_token = per_token * tis_weights_T
    loss = (per_token * mask).sum() / max(num_tokens, 1)
    with torch.no_grad():
        n = mask.sum().clamp_min(1)
        clipped_frac = ((clipped > unclipped).to(mask.dtype) * mask).sum() / n
        metrics = {"clip_frac": float(clipped_frac), "ratio_mean": float((ratio * mask).sum() / n),
                   "ratio_max": float(ratio[mask.bool()].max()) if mask.any() else 1.0}
    return loss, metrics


def kl_divergence(logprobs_T: torch.Tensor, ref_logprobs_T: torch.Tensor, *, estimator: KLEstimator) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled tokens (Schulman's k1, k2, k3).

    k1 = log r, k2 = (log r)^2 / 2, k3 = exp(-log r) - 1 + log r, with log r = logprob - ref_logprob.
    k3 is unbiased and never negative.
    """
    log_ratio = logprobs_T - ref_logprobs_T
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.exp(-log_ratio) - 1.0 + log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}; choose k1, k2 or k3")


def masked_token_sum(values_T: torch.Tensor, mask_T: torch.Tensor, *, num_tokens: int) -> torch.Tensor:
    """Sum over trainable tokens divided by the step's trainable-token count (same normaliser as the loss)."""
    return (values_T * mask_T.to(values_T.dtype)).sum() / max(num_tokens, 1)


def truncated_importance_weights(old_logprobs_T: torch.Tensor, rollout_logprobs_T: torch.Tensor, *,
                                 cap: float = 2.0) -> torch.Tensor:
    """min(pi_trainer / pi_sampler, cap) per token: corrects for trainer/sampler mismatch (TIS)."""
    return torch.exp(old_logprobs_T - rollout_logprobs_T).clamp(max=cap).detach()

