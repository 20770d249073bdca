"""The trainer's packed forward as it was at d75edee (2026-11-30), kept verbatim as the baseline of
bench/trainer.py ("today's step": vocabulary head at every position, HF's RMSNorm and RoPE, no sharing).
Not used by codedojo itself; codedojo.train.packed is the current implementation."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _apply_rotary(x_hTd: torch.Tensor, cos_Td: torch.Tensor, sin_Td: torch.Tensor) -> torch.Tensor:
    half = x_hTd.shape[-1] // 2
    rotated = torch.cat((-x_hTd[..., half:], x_hTd[..., :half]), dim=-1)
    return x_hTd * cos_Td + rotated * sin_Td


def packed_hidden_states(model: Any, input_ids_T: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """Final hidden states (T, H) of sequences of `lengths` packed in `input_ids_T`."""
    core = model.model
    config = model.config
    positions = torch.cat([torch.arange(n, device=input_ids_T.device) for n in lengths])
    x_TH = core.embed_tokens(input_ids_T)
    cos, sin = core.rotary_emb(x_TH[None], positions[None])
    cos_Td, sin_Td = cos[0].to(x_TH.dtype), sin[0].to(x_TH.dtype)
    num_heads = config.num_attention_heads
    num_kv = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    total = x_TH.shape[0]
    for layer in core.layers:
        attn = layer.self_attn
        h_TH = layer.input_layernorm(x_TH)
        q = attn.q_proj(h_TH).view(total, num_heads, head_dim)
        k = attn.k_proj(h_TH).view(total, num_kv, head_dim)
        v = attn.v_proj(h_TH).view(total, num_kv, head_dim)
        if hasattr(attn, "q_norm"):  # Qwen3 normalises each head of q and k before RoPE
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = _apply_rotary(q.transpose(0, 1), cos_Td, sin_Td)  # (heads, T, d)
        k = _apply_rotary(k.transpose(0, 1), cos_Td, sin_Td)
        v = v.transpose(0, 1)
        outputs = []
        for start, end in itertools.pairwise(bounds):
            outputs.append(F.scaled_dot_product_attention(
                q[None, :, start:end], k[None, :, start:end], v[None, :, start:end],
                is_causal=True, enable_gqa=num_kv != num_heads)[0])
        o_TH = torch.cat(outputs, dim=1).transpose(0, 1).reshape(total, num_heads * head_dim)
        x_TH = x_TH + attn.o_proj(o_TH)
        x_TH = x_TH + layer.mlp(layer.post_attention_layernorm(x_TH))
    return core.norm(x_TH)


def _chunk_logprobs(head: torch.nn.Module, hidden_CH: torch.Tensor, targets_C: torch.Tensor,
                    temperature: float) -> torch.Tensor:
    logits = head(hidden_CH).float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets_C[:, None])[:, 0]


def _chunk_entropy(head: torch.nn.Module, hidden_CH: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(hidden_CH).float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def packed_token_logprobs(
    model: Any,
    sequences: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    chunk_size: int = 128,
    with_entropy: bool = False,
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """For each sequence, the logprob of every token after the first given its prefix: (len - 1,) each.

    Matches `log_softmax(model(seq).logits / temperature)` gathered at the next tokens. With
    `with_entropy`, also each position's entropy (same shapes)."""
    device = next(model.parameters()).device
    lengths = [len(s) for s in sequences]
    ids_T = torch.tensor([t for s in sequences for t in s], dtype=torch.long, device=device)
    hidden_TH = packed_hidden_states(model, ids_T, lengths)
    # position i predicts token i + 1 within its sequence; drop each sequence's last position
    keep, targets = [], []
    offset = 0
    for n in lengths:
        keep.append(torch.arange(offset, offset + n - 1, device=device))
        targets.append(ids_T[offset + 1: offset + n])
        offset += n
    keep_P, targets_P = torch.cat(keep), torch.cat(targets)
    hidden_PH = hidden_TH.index_select(0, keep_P)
    head = model.lm_head
    chunks, entropies = [], []
    for start in range(0, hidden_PH.shape[0], chunk_size):
        h, t = hidden_PH[start:start + chunk_size], targets_P[start:start + chunk_size]
        if torch.is_grad_enabled():
            chunks.append(checkpoint(_chunk_logprobs, head, h, t, temperature, use_reentrant=False))
            if with_entropy:
                entropies.append(checkpoint(_chunk_entropy, head, h, temperature, use_reentrant=False))
        else:
            chunks.append(_chunk_logprobs(head, h, t, temperature))
            if with_entropy:
                entropies.append(_chunk_entropy(head, h, temperature))
    logprobs_P = torch.cat(chunks)
    splits = [n - 1 for n in lengths]
    out = list(torch.split(logprobs_P, splits))
    ent = list(torch.split(torch.cat(entropies), splits)) if with_entropy else None
    return out, ent
