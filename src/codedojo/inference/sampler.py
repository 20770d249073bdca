"""Turning next-token logits into tokens and the logprobs a trainer can reproduce.

Each request samples with its own `torch.Generator` and consumes exactly one uniform number per token
(inverse-CDF sampling), so a seeded request draws the same numbers whatever else shares its batch.

The reported logprob is `log_softmax(logits / temperature)` at the chosen token, taken before top-k /
top-p truncation (raw `log_softmax(logits)` for greedy rows): the distribution a trainer recomputes with
one forward pass, not the truncated one the token was drawn from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class RowSampling:
    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator | None
    """None for greedy rows."""


def sample(logits: torch.Tensor, rows: list[RowSampling]) -> tuple[list[int], list[float]]:
    """logits [rows, vocab] fp32 -> (token per row, logprob per row)."""
    temperatures = torch.tensor(
        [r.temperature if r.temperature > 0 else 1.0 for r in rows], dtype=logits.dtype, device=logits.device
    )
    logprobs = torch.log_softmax(logits / temperatures[:, None], dim=-1)  # [rows, vocab]
    tokens = torch.empty(len(rows), dtype=torch.int64, device=logits.device)
    sampled = [i for i, r in enumerate(rows) if r.temperature > 0]
    greedy = [i for i, r in enumerate(rows) if r.temperature == 0]
    if greedy:
        index = torch.tensor(greedy, device=logits.device)
        tokens[index] = logits[index].argmax(dim=-1)
    if sampled:
        index = torch.tensor(sampled, device=logits.device)
        # float64 so that the running sum over a 150k vocabulary stays accurate.
        probs = logprobs[index].double().exp()  # [sampled, vocab]
        for j, i in enumerate(sampled):
            if rows[i].top_k or rows[i].top_p < 1:
                probs[j] = _truncate(probs[j], top_k=rows[i].top_k, top_p=rows[i].top_p)
        cdf = probs.cumsum(dim=-1)
        uniforms = torch.stack(
            [torch.rand((), generator=rows[i].generator, dtype=torch.float64) for i in sampled]
        ).to(logits.device)
        # First token whose cumulative mass exceeds u * total: zero-probability tokens never win.
        targets = (uniforms * cdf[:, -1])[:, None]
        chosen = torch.searchsorted(cdf, targets, right=True)[:, 0]
        tokens[index] = chosen.clamp_(max=logits.shape[-1] - 1)
    chosen_logprobs = logprobs.gather(1, tokens[:, None])[:, 0]
    return tokens.tolist(), chosen_logprobs.tolist()


def _truncate(probs: torch.Tensor, *, top_k: int, top_p: float) -> torch.Tensor:
    """Zero all but the top-k tokens and then all outside the top-p nucleus. probs [vocab]."""
    ordered, order = probs.sort(descending=True)
    keep = torch.ones_like(ordered, dtype=torch.bool)
    if top_k:
        keep[top_k:] = False
    if top_p < 1:
        # Keep a token if the mass strictly before it is still below top_p (the top token always stays).
        before = ordered.cumsum(0) - ordered
        keep &= before < top_p * ordered[keep].sum()
    out = torch.zeros_like(probs)
    out[order[keep]] = ordered[keep]
    return out
