"""The trainer's forward pass: sequences packed end to end, attention within each sequence only.

HF's own forward over a padded batch wastes compute on padding, and over one packed row it needs a
block-diagonal mask whose attention cost grows with the square of the whole row. Here the model's own
modules (embeddings, norms, projections, MLPs, rotary embedding — so LoRA-wrapped projections and both
Llama and Qwen3 work unchanged) run once over every token of the micro-batch, and attention runs per
sequence with SDPA.

Three savings, each exact (the same numbers as the plain computation, up to float summation order):
- **Logprobs only where they are read.** `used` marks, per sequence, the positions whose logprob a loss,
  metric or ratio reads (the loss mask); the vocabulary head and log-softmax run at those positions only,
  in chunks that the backward pass recomputes, so vocabulary-sized logits never sit in memory at once.
  Unread positions come back as 0.
- **One prefix per group.** Sequences given the same `groups` key (a GRPO group: same system prompt, task
  and first observation) share their longest common token prefix: it is laid out once, its tokens attend
  causally among themselves, and each member's suffix attends to the whole prefix and causally to itself.
  The prefix's gradient is the sum of its members' gradients, as in the unshared computation.
- Norms, projections and MLPs see each shared token once, so a prefix that is a third of every sequence
  costs a third less of everything but the suffix attention.

RMSNorm runs through torch's fused kernel and RoPE as one roll and a fused multiply-add (the same
arithmetic as HF's modules in fewer passes over memory). The caller picks the matmul precision
(codedojo.precision: bf16 autocast over fp32 weights); the vocabulary head and log-softmax stay fp32.

Shapes: T tokens laid out (shared prefixes once), H hidden size, Q head rows (positions whose logprob is
read), V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from codedojo.rl.packing import shared_prefix_length

MIN_SHARED_PREFIX = 16
"""Shorter common prefixes are not worth an extra attention call per member."""


@dataclass(frozen=True)
class _Block:
    """Tokens laid out contiguously: a prefix, then zero or more suffixes that each attend to all of it.

    A plain sequence is a block with no suffix; a shared group is its common prefix plus one suffix per
    member (each at least one token long)."""

    start: int
    prefix: int
    suffixes: tuple[int, ...]

    @property
    def size(self) -> int:
        return self.prefix + sum(self.suffixes)


@dataclass(frozen=True)
class Layout:
    """Where each sequence's tokens lie in the packed row.

    `rows[i][t]` is the row of token t of sequence i (shared prefix tokens map to the same row for every
    member of their group)."""

    blocks: tuple[_Block, ...]
    rows: tuple[tuple[int, ...], ...]
    input_ids: tuple[int, ...]
    positions: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)


def layout(sequences: Sequence[Sequence[int]], groups: Sequence[Any] | None = None,
           *, min_shared: int = MIN_SHARED_PREFIX) -> Layout:
    """Lay out `sequences`; members of a group (same key in `groups`) share their common token prefix
    when it is at least `min_shared` tokens. Every member keeps at least one token of its own."""
    order: list[list[int]] = []
    if groups is None:
        order = [[i] for i in range(len(sequences))]
    else:
        if len(groups) != len(sequences):
            raise ValueError(f"{len(groups)} group keys for {len(sequences)} sequences")
        by_key: dict[Any, list[int]] = {}
        for i, key in enumerate(groups):
            by_key.setdefault(key, []).append(i)
        order = list(by_key.values())
    blocks: list[_Block] = []
    rows: list[tuple[int, ...]] = [()] * len(sequences)
    ids: list[int] = []
    positions: list[int] = []
    for members in order:
        shared = shared_prefix_length([sequences[i] for i in members], min_shared=min_shared)
        if not shared:
            for i in members:  # plain sequences, each its own block
                seq = sequences[i]
                start = len(ids)
                blocks.append(_Block(start=start, prefix=len(seq), suffixes=()))
                rows[i] = tuple(range(start, start + len(seq)))
                ids.extend(seq)
                positions.extend(range(len(seq)))
            continue
        start = len(ids)
        ids.extend(sequences[members[0]][:shared])
        positions.extend(range(shared))
        suffixes = []
        for i in members:
            tail = sequences[i][shared:]
            rows[i] = tuple(range(start, start + shared)) + tuple(range(len(ids), len(ids) + len(tail)))
            ids.extend(tail)
            positions.extend(range(shared, shared + len(tail)))
            suffixes.append(len(tail))
        blocks.append(_Block(start=start, prefix=shared, suffixes=tuple(suffixes)))
    return Layout(blocks=tuple(blocks), rows=tuple(rows), input_ids=tuple(ids), positions=tuple(positions))


def _rotary_tables(cos_Td: torch.Tensor, sin_Td: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and a signed sin such that RoPE is `x * cos + roll(x, d/2) * signed_sin` (HF's rotate_half
    layout: rolling by half swaps the halves, the sign of the first half goes into the table)."""
    half = sin_Td.shape[-1] // 2
    return cos_Td, torch.cat((-sin_Td[..., :half], sin_Td[..., half:]), dim=-1)


def _apply_rotary(x_hTd: torch.Tensor, cos_Td: torch.Tensor, signed_sin_Td: torch.Tensor) -> torch.Tensor:
    # one roll and a fused multiply-add instead of HF's slice, negate, cat and two products (half the passes)
    return torch.addcmul(x_hTd * cos_Td, x_hTd.roll(x_hTd.shape[-1] // 2, dims=-1), signed_sin_Td)


def _norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """An HF RMSNorm (Llama, Qwen3) through torch's fused kernel: same fp32 arithmetic as the module's own
    forward (it upcasts too), about a third of its time forward and backward on a CPU. Other norms run as
    they are."""
    eps = getattr(module, "variance_epsilon", None)
    weight = getattr(module, "weight", None)
    if eps is None or weight is None or not type(module).__name__.endswith("RMSNorm"):
        return module(x)
    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps)


def _suffix_masks(blocks: Sequence[_Block], device: torch.device) -> dict[tuple[int, int], torch.Tensor]:
    """Boolean masks (suffix, prefix + suffix): the whole prefix visible, the suffix causal (the fallback
    path of `_attention`, off the CPU)."""
    masks: dict[tuple[int, int], torch.Tensor] = {}
    for b in blocks:
        for s in b.suffixes:
            if (b.prefix, s) not in masks:
                mask = torch.ones(s, b.prefix + s, dtype=torch.bool, device=device)
                mask[:, b.prefix:] = torch.ones(s, s, dtype=torch.bool, device=device).tril()
                masks[(b.prefix, s)] = mask
    return masks


_CPU_FLASH: Any = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_CPU_FLASH_BACKWARD: Any = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def _cpu_flash(device: torch.device) -> bool:
    """Whether `_attention` calls torch's CPU flash kernels directly on `device`."""
    return device.type == "cpu" and _CPU_FLASH is not None and _CPU_FLASH_BACKWARD is not None


class _SuffixAttention(torch.autograd.Function):
    """A shared group's suffixes attending to the whole prefix and causally to themselves, without a mask.

    Two kinds of flash call, merged by their log-sum-exp: every suffix's queries against the prefix in one
    unmasked call, and each suffix against itself in a causal one (which skips the masked half, where a
    masked call computes it all). The backward pass hands each call the merged output and log-sum-exp, so
    each computes its keys' share of the exact gradient of the merged softmax (the split used by
    ring attention). Inputs are (heads, tokens, d) with as many key heads as query heads."""

    @staticmethod
    def forward(ctx: Any, q_S: torch.Tensor, k_P: torch.Tensor, v_P: torch.Tensor, k_S: torch.Tensor,
                v_S: torch.Tensor, suffixes: tuple[int, ...]) -> torch.Tensor:
        o_cross, lse_cross = _CPU_FLASH(q_S[None], k_P[None], v_P[None])
        own_o, own_lse, s0 = [], [], 0
        for s in suffixes:
            o, lse = _CPU_FLASH(q_S[None, :, s0:s0 + s], k_S[None, :, s0:s0 + s], v_S[None, :, s0:s0 + s],
                                is_causal=True)
            own_o.append(o)
            own_lse.append(lse)
            s0 += s
        o_own, lse_own = torch.cat(own_o, dim=2), torch.cat(own_lse, dim=2)
        lse = torch.logaddexp(lse_cross, lse_own)
        out = (o_cross.float() * (lse_cross - lse).exp()[..., None]
               + o_own.float() * (lse_own - lse).exp()[..., None]).to(q_S.dtype)
        ctx.suffixes = suffixes
        ctx.save_for_backward(q_S, k_P, v_P, k_S, v_S, out, lse)
        return out[0]

    @staticmethod
    def backward(ctx: Any, grad_hSd: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q_S, k_P, v_P, k_S, v_S, out, lse = ctx.saved_tensors
        grad = grad_hSd[None].to(out.dtype).contiguous()
        dq, dk_P, dv_P = _CPU_FLASH_BACKWARD(grad, q_S[None], k_P[None], v_P[None], out, lse, 0.0, False)
        dq_own, dk_S, dv_S, s0 = [], [], [], 0
        for s in ctx.suffixes:
            part = slice(s0, s0 + s)
            dq_s, dk_s, dv_s = _CPU_FLASH_BACKWARD(
                grad[:, :, part], q_S[None, :, part], k_S[None, :, part], v_S[None, :, part],
                out[:, :, part], lse[:, :, part], 0.0, True)
            dq_own.append(dq_s)
            dk_S.append(dk_s)
            dv_S.append(dv_s)
            s0 += s
        return (dq[0] + torch.cat(dq_own, dim=2)[0], dk_P[0], dv_P[0], torch.cat(dk_S, dim=2)[0],
                torch.cat(dv_S, dim=2)[0], None)


def block_attention(q_hTd: torch.Tensor, k_hTd: torch.Tensor, v_hTd: torch.Tensor, lay: Layout, *,
                    merged: bool | None = None) -> torch.Tensor:
    """One layer's attention within each block of `lay`, as `packed_hidden_states` computes it: q (heads, T, d),
    k and v (key heads, T, d) -> (heads, T, d). merged: a shared group's suffixes through torch's CPU flash
    kernels merged by log-sum-exp (`_SuffixAttention`), or (False) through explicit masks, the path other
    devices take; None: merged exactly where those kernels are (the CPU). bench/bf16_probe.py times both."""
    merged = _cpu_flash(q_hTd.device) if merged is None else merged
    masks = None if merged else _suffix_masks(lay.blocks, q_hTd.device)
    return _attention(q_hTd, k_hTd, v_hTd, lay.blocks, masks, cpu=merged)


def _attention(q_hTd: torch.Tensor, k_hTd: torch.Tensor, v_hTd: torch.Tensor, blocks: Sequence[_Block],
               masks: dict[tuple[int, int], torch.Tensor] | None, *, cpu: bool | None = None) -> torch.Tensor:
    """Attention within each block. On the CPU (`cpu`; None: `_cpu_flash`), key and value heads are repeated up
    to the query heads (the CPU flash kernel is about a tenth faster on them than with `enable_gqa`) and suffixes
    go through `_SuffixAttention`; elsewhere suffixes take an explicit mask from `masks`."""
    groups = q_hTd.shape[0] // k_hTd.shape[0]
    cpu = _cpu_flash(q_hTd.device) if cpu is None else cpu
    if cpu and groups > 1:
        k_hTd, v_hTd = k_hTd.repeat_interleave(groups, dim=0), v_hTd.repeat_interleave(groups, dim=0)
    gqa = k_hTd.shape[0] != q_hTd.shape[0]
    outputs = []
    for b in blocks:
        p0, p1 = b.start, b.start + b.prefix
        outputs.append(F.scaled_dot_product_attention(
            q_hTd[None, :, p0:p1], k_hTd[None, :, p0:p1], v_hTd[None, :, p0:p1], is_causal=True,
            enable_gqa=gqa)[0])
        if not b.suffixes:
            continue
        if cpu:
            s1 = p1 + sum(b.suffixes)
            outputs.append(_SuffixAttention.apply(q_hTd[:, p1:s1], k_hTd[:, p0:p1], v_hTd[:, p0:p1],
                                                  k_hTd[:, p1:s1], v_hTd[:, p1:s1], b.suffixes))
            continue
        assert masks is not None
        s0 = p1
        for s in b.suffixes:
            k = torch.cat((k_hTd[:, p0:p1], k_hTd[:, s0:s0 + s]), dim=1)
            v = torch.cat((v_hTd[:, p0:p1], v_hTd[:, s0:s0 + s]), dim=1)
            outputs.append(F.scaled_dot_product_attention(
                q_hTd[None, :, s0:s0 + s], k[None], v[None], attn_mask=masks[(b.prefix, s)], enable_gqa=gqa)[0])
            s0 += s
    return torch.cat(outputs, dim=1)


def packed_hidden_states(model: Any, lay: Layout) -> torch.Tensor:
    """Final hidden states (T, H) of the tokens laid out in `lay`, before the final norm."""
    core = model.model
    config = model.config
    device = next(model.parameters()).device
    input_ids_T = torch.tensor(lay.input_ids, dtype=torch.long, device=device)
    positions = torch.tensor(lay.positions, dtype=torch.long, device=device)
    x_TH = core.embed_tokens(input_ids_T)
    cos, sin = core.rotary_emb(x_TH[None], positions[None])
    # RoPE in the dtype q and k come out of their projections (bf16 under autocast, as HF does)
    rope_dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else x_TH.dtype
    cos_Td, sin_Td = _rotary_tables(cos[0].to(rope_dtype), sin[0].to(rope_dtype))
    num_heads = config.num_attention_heads
    num_kv = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
    masks = None if _cpu_flash(device) else _suffix_masks(lay.blocks, device)
    total = x_TH.shape[0]
    for layer in core.layers:
        attn = layer.self_attn
        h_TH = _norm(layer.input_layernorm, x_TH)
        q = attn.q_proj(h_TH).view(total, num_heads, head_dim)
        k = attn.k_proj(h_TH).view(total, num_kv, head_dim)
        v = attn.v_proj(h_TH).view(total, num_kv, head_dim)
        if hasattr(attn, "q_norm"):  # Qwen3 normalises each head of q and k before RoPE
            q, k = _norm(attn.q_norm, q), _norm(attn.k_norm, k)
        q = _apply_rotary(q.transpose(0, 1), cos_Td, sin_Td)  # (heads, T, d)
        k = _apply_rotary(k.transpose(0, 1), cos_Td, sin_Td)
        o = _attention(q, k, v.transpose(0, 1), lay.blocks, masks)
        x_TH = x_TH + attn.o_proj(o.transpose(0, 1).reshape(total, num_heads * head_dim))
        x_TH = x_TH + layer.mlp(_norm(layer.post_attention_layernorm, x_TH))
    return x_TH


def _chunk_logits(norm: torch.nn.Module, head: torch.nn.Module, hidden_CH: torch.Tensor,
                  temperature: float) -> torch.Tensor:
    # The head runs in fp32 even under bf16 autocast: it sees only the positions whose logprob is read
    # (a small share of the step's FLOPs), and bf16 logits would double the logprob error (measured on
    # SmolLM2, docs/training.md).
    with torch.autocast(device_type=hidden_CH.device.type, enabled=False):
        logits = head(_norm(norm, hidden_CH.float())).float()
    return logits / temperature if temperature != 1.0 else logits


def _chunk_logprobs(norm: torch.nn.Module, head: torch.nn.Module, hidden_CH: torch.Tensor,
                    targets_C: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = _chunk_logits(norm, head, hidden_CH, temperature)
    return torch.log_softmax(logits, dim=-1).gather(-1, targets_C[:, None])[:, 0]


def _chunk_logprobs_entropy(norm: torch.nn.Module, head: torch.nn.Module, hidden_CH: torch.Tensor,
                            targets_C: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The logprobs of the targets and each position's entropy, from one pass through the head."""
    logp = torch.log_softmax(_chunk_logits(norm, head, hidden_CH, temperature), dim=-1)
    return logp.gather(-1, targets_C[:, None])[:, 0], -(logp.exp() * logp).sum(dim=-1)


def _head_queries(lay: Layout, sequences: Sequence[Sequence[int]], used: Sequence[Sequence[int]] | None
                  ) -> tuple[list[int], list[int], list[list[int]]]:
    """The (row, target) pairs the head must score, each once, and per sequence the index of each
    predicted position's pair (or -1 where it is not read)."""
    index: dict[tuple[int, int], int] = {}
    rows: list[int] = []
    targets: list[int] = []
    maps: list[list[int]] = []
    for i, seq in enumerate(sequences):
        mask = used[i] if used is not None else None
        if mask is not None and len(mask) != len(seq) - 1:
            raise ValueError(f"sequence {i}: {len(mask)} used-position flags for {len(seq) - 1} predicted positions")
        seq_rows = lay.rows[i]
        seq_map = []
        for t in range(len(seq) - 1):
            if mask is not None and not mask[t]:
                seq_map.append(-1)
                continue
            key = (seq_rows[t], seq[t + 1])
            slot = index.get(key)
            if slot is None:
                slot = index[key] = len(rows)
                rows.append(key[0])
                targets.append(key[1])
            seq_map.append(slot)
        maps.append(seq_map)
    return rows, targets, maps


def packed_token_logprobs(
    model: Any,
    sequences: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    chunk_size: int = 128,
    with_entropy: bool = False,
    used: Sequence[Sequence[int]] | None = None,
    groups: Sequence[Any] | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """For each sequence, the logprob of every token after the first given its prefix: (len - 1,) each.

    Matches `log_softmax(model(seq).logits / temperature)` gathered at the next tokens, at the positions
    `used` marks (each a 0/1 list of length len - 1; None: all); unread positions are 0. `groups` (one
    key per sequence) lets members of a group share their common prefix. With `with_entropy`, also each
    read position's entropy (same shapes)."""
    lay = layout(sequences, groups)
    hidden_TH = packed_hidden_states(model, lay)
    device = hidden_TH.device
    rows, targets, maps = _head_queries(lay, sequences, used)
    hidden_QH = hidden_TH.index_select(0, torch.tensor(rows, dtype=torch.long, device=device))
    targets_Q = torch.tensor(targets, dtype=torch.long, device=device)
    norm, head = model.model.norm, model.lm_head
    chunks, entropies = [], []
    for start in range(0, hidden_QH.shape[0], chunk_size):
        h, t = hidden_QH[start:start + chunk_size], targets_Q[start:start + chunk_size]
        grad = torch.is_grad_enabled()
        if with_entropy:
            lp, ent = (checkpoint(_chunk_logprobs_entropy, norm, head, h, t, temperature, use_reentrant=False)
                       if grad else _chunk_logprobs_entropy(norm, head, h, t, temperature))
            chunks.append(lp)
            entropies.append(ent)
        else:
            chunks.append(checkpoint(_chunk_logprobs, norm, head, h, t, temperature, use_reentrant=False)
                          if grad else _chunk_logprobs(norm, head, h, t, temperature))
    zero = hidden_QH.new_zeros(1, dtype=torch.float32)
    # slot Q is a constant 0 for unread positions: one gather per sequence puts every value in place
    num_q = len(rows)
    index = [torch.tensor([num_q if m < 0 else m for m in seq_map], dtype=torch.long, device=device)
             for seq_map in maps]
    logprobs_Q = torch.cat([*chunks, zero])
    out = [logprobs_Q.index_select(0, ix) for ix in index]
    ent = None
    if with_entropy:
        entropy_Q = torch.cat([*entropies, zero])
        ent = [entropy_Q.index_select(0, ix) for ix in index]
    return out, ent
