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


# Inverse-CDF sampling searches the vocabulary in two levels: first which block of this many tokens
# holds the target mass, then where inside that block (a float64 cumulative sum over the block sums and
# one over a single block per row, instead of a float64 copy and cumulative sum of the whole
# vocabulary; `bench/engine_steps.py` times the two).
BLOCK = 256


def sample(logits: torch.Tensor, rows: list[RowSampling]) -> tuple[list[int], list[float]]:
    """logits [rows, vocab] fp32 -> (token per row, logprob per row)."""
    if all(r.temperature in (0.0, 1.0) for r in rows):
        logprobs = torch.log_softmax(logits, dim=-1)  # [rows, vocab]
    else:
        temperatures = torch.tensor(
            [r.temperature if r.temperature > 0 else 1.0 for r in rows], dtype=logits.dtype, device=logits.device
        )
        logprobs = torch.log_softmax(logits / temperatures[:, None], dim=-1)
    tokens = torch.empty(len(rows), dtype=torch.int64, device=logits.device)
    sampled = [i for i, r in enumerate(rows) if r.temperature > 0]
    greedy = [i for i, r in enumerate(rows) if r.temperature == 0]
    if greedy:
        index = torch.tensor(greedy, device=logits.device)
        tokens[index] = logits[index].argmax(dim=-1)
    if sampled:
        every = len(sampled) == len(rows)
        index = torch.arange(len(rows), device=logits.device) if every else torch.tensor(sampled, device=logits.device)
        probs = (logprobs if every else logprobs[index]).exp()  # [sampled, vocab]
        for j, i in enumerate(sampled):
            if rows[i].top_k or rows[i].top_p < 1:
                probs[j] = _truncate(probs[j], top_k=rows[i].top_k, top_p=rows[i].top_p)
        uniforms = torch.stack(
            [torch.rand((), generator=rows[i].generator, dtype=torch.float64) for i in sampled]
        ).to(logits.device)
        tokens[index] = inverse_cdf(probs, uniforms)
    chosen_logprobs = logprobs.gather(1, tokens[:, None])[:, 0]
    return tokens.tolist(), chosen_logprobs.tolist()


def top_logprobs(
    logits: torch.Tensor, rows: list[RowSampling], counts: list[int]
) -> list[tuple[tuple[int, float], ...]]:
    """The counts[i] most likely tokens of row i with their logprobs, in the same distribution `sample`
    reports (temperature-scaled, before truncation; raw for greedy rows), most likely first."""
    out: list[tuple[tuple[int, float], ...]] = []
    for i, (row, k) in enumerate(zip(rows, counts, strict=True)):
        if not k:
            out.append(())
            continue
        scaled = logits[i] / row.temperature if row.temperature not in (0.0, 1.0) else logits[i]
        values, ids = torch.log_softmax(scaled, dim=-1).topk(min(k, logits.shape[-1]))
        out.append(tuple(zip(ids.tolist(), values.tolist(), strict=True)))
    return out


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row, the first token whose cumulative mass exceeds u * total mass (sums in float64, so the
    running total over a 150k vocabulary stays accurate), in two levels: blocks of BLOCK tokens, then the
    tokens of the chosen block. Zero-probability tokens never win.
    probs [rows, vocab] (any float dtype, unnormalised), uniforms [rows] in [0, 1)."""
    rows, vocab = probs.shape
    blocks = -(-vocab // BLOCK)
    padded = torch.nn.functional.pad(probs, (0, blocks * BLOCK - vocab)).view(rows, blocks, BLOCK)
    block_mass = padded.sum(dim=-1).to(torch.float64)  # [rows, blocks]; 256 terms each, fp32 is enough
    block_cdf = block_mass.cumsum(dim=-1)
    targets = uniforms.to(torch.float64) * block_cdf[:, -1]  # [rows]
    # Rounding (u * total can round up to total) can put the target at or past a running total: then
    # the answer is the last block, and in it the last token, that has mass.
    block = torch.searchsorted(block_cdf, targets[:, None], right=True)[:, 0]
    block = torch.minimum(block, _last_positive(block_mass))
    before = (block_cdf.gather(1, block[:, None]) - block_mass.gather(1, block[:, None]))[:, 0]
    inside = padded[torch.arange(rows, device=probs.device), block].to(torch.float64)  # [rows, BLOCK]
    cdf = inside.cumsum(dim=-1) + before[:, None]
    offset = torch.searchsorted(cdf, targets[:, None], right=True)[:, 0]
    return block * BLOCK + torch.minimum(offset, _last_positive(inside))


def _last_positive(values: torch.Tensor) -> torch.Tensor:
    """Index of the last positive entry of each row of values [rows, n]."""
    return values.shape[-1] - 1 - (values > 0).flip(-1).to(torch.int64).argmax(dim=-1)


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
