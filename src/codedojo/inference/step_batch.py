"""One forward step's worth of work: decode tokens of running rows plus prefill chunks, packed.

Token order in a step is fixed: first one token per decoding row (in row order), then each prefill chunk
in turn. The linear layers see all of them as one `[num_tokens, hidden]` matrix (no padding anywhere);
only attention looks at rows, through `DecodeRun`s (contiguous decoding rows, one attention call each,
shorter rows masked) and `PrefillChunk`s (one causal attention call each, against the row's past).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from codedojo.inference.options import EngineOptions


@dataclass(frozen=True, kw_only=True)
class DecodeRun:
    """Decoding rows row_start..row_stop-1, whose tokens are token_start.. in the step."""

    row_start: int
    row_stop: int
    token_start: int
    kv_len: int
    """Longest KV length in the run, the new token included."""
    mask: torch.Tensor | None
    """[rows, 1, 1, kv_len] additive (0 where a row has a valid position, -inf past its end), in the
    model's dtype so attention need not convert it once per layer; None when every row is kv_len long."""


@dataclass(frozen=True, kw_only=True)
class PrefillChunk:
    """num_tokens prompt tokens of `row` at positions past..past+num_tokens-1."""

    row: int
    token_start: int
    num_tokens: int
    past: int
    mask: torch.Tensor
    """[num_tokens, past + num_tokens] bool, causal with the past fully visible."""


@dataclass(frozen=True, kw_only=True)
class StepBatch:
    token_ids: torch.Tensor
    """[num_tokens] int64."""
    positions: torch.Tensor
    """[num_tokens] int64 position of each token in its sequence."""
    rows: torch.Tensor
    """[num_tokens] int64 KV row of each token: one indexed write per layer stores every token's K/V."""
    num_decode: int
    """The first num_decode tokens are decode tokens, one per decoding row."""
    decode_meta: torch.Tensor
    """[num_decode, 2] int32 on the CPU: each decode token's KV row and that row's length with the token
    (what the native decode attention reads instead of runs and masks)."""
    decode_runs: tuple[DecodeRun, ...]
    prefills: tuple[PrefillChunk, ...]
    sample_tokens: torch.Tensor
    """[num_samples] int64 indices of the tokens whose next-token logits are wanted."""
    samples_every_token: bool
    """sample_tokens is 0..num_tokens-1 (a decode-only step): the head needs no gather."""


def _split_runs(decode: list[tuple[int, int, int]], call_cost: float = EngineOptions.run_call_cost
                ) -> list[tuple[int, int]]:
    """[start, stop) index ranges of decode runs: contiguous rows, split where that saves reads.

    A run reads every row up to its longest row's length, so a short row next to a long one reads
    (masked) positions it never uses (bench/engine_steps.py's 16 ragged rows: docs/results/engine-steps.json,
    `decode_runs/kv_positions_read`). Within each stretch of contiguous rows, a dynamic program picks the split
    minimising rows * kv_len summed over runs plus call_cost (`EngineOptions.run_call_cost`) per run; an
    infinite call_cost keeps each stretch one run."""
    stretches = []
    start = 0
    while start < len(decode):
        stop = start + 1
        while stop < len(decode) and decode[stop][0] == decode[stop - 1][0] + 1:
            stop += 1
        stretches.append((start, stop))
        start = stop
    runs = []
    for first, end in stretches:
        if call_cost == float("inf"):
            runs.append((first, end))
            continue
        lengths = [position + 1 for _, position, _ in decode[first:end]]
        n = len(lengths)
        best = [0.0] + [float("inf")] * n  # best[j]: cheapest split of rows [0, j)
        cut = [0] * (n + 1)
        for j in range(1, n + 1):
            longest = 0
            for i in range(j - 1, -1, -1):  # last run is rows [i, j)
                longest = max(longest, lengths[i])
                cost = best[i] + (j - i) * longest + call_cost
                if cost < best[j]:
                    best[j], cut[j] = cost, i
        bounds = []
        j = n
        while j > 0:
            bounds.append((first + cut[j], first + j))
            j = cut[j]
        runs.extend(reversed(bounds))
    return runs


def build_step(
    decode: list[tuple[int, int, int]],
    *,
    prefills: list[tuple[int, int, list[int]]],
    sample_tokens: list[int],
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    run_call_cost: int = EngineOptions.run_call_cost,
) -> StepBatch:
    """Pack a step.

    decode: (row, position, token) per decoding row, rows ascending; the token's KV goes to `position`.
    prefills: (row, past, tokens) per chunk. sample_tokens: indices into the packed token order.
    run_call_cost: `EngineOptions.run_call_cost`, on the CPU (off it, where a GPU's launch costs many thousands
    of positions' reads, every stretch of decoding rows stays one attention call).
    """
    tokens = [token for _, _, token in decode]
    positions = [position for _, position, _ in decode]
    rows = [row for row, _, _ in decode]
    runs = []
    on_cpu = torch.device(device).type == "cpu"
    for start, stop in _split_runs(decode, run_call_cost if on_cpu else float("inf")):
        lengths = torch.tensor([position + 1 for _, position, _ in decode[start:stop]])
        kv_len = int(lengths.max())
        mask = None
        if int(lengths.min()) < kv_len:  # [rows, 1, 1, kv_len]: each row sees its own valid prefix only
            beyond = torch.arange(kv_len)[None, :] >= lengths[:, None]
            mask = torch.zeros(beyond.shape, dtype=dtype).masked_fill_(beyond, float("-inf"))[:, None, None, :]
            mask = mask.to(device)
        runs.append(
            DecodeRun(
                row_start=decode[start][0],
                row_stop=decode[stop - 1][0] + 1,
                token_start=start,
                kv_len=kv_len,
                mask=mask,
            )
        )
    chunks = []
    for row, past, chunk in prefills:
        n = len(chunk)
        query = torch.arange(n)[:, None]
        key = torch.arange(past + n)[None, :]
        chunks.append(
            PrefillChunk(
                row=row,
                token_start=len(tokens),
                num_tokens=n,
                past=past,
                mask=(key <= past + query).to(device),
            )
        )
        tokens.extend(chunk)
        positions.extend(range(past, past + n))
        rows.extend([row] * n)
    return StepBatch(
        token_ids=torch.tensor(tokens, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        rows=torch.tensor(rows, dtype=torch.int64, device=device),
        num_decode=len(decode),
        decode_meta=torch.tensor([(row, position + 1) for row, position, _ in decode], dtype=torch.int32
                                 ).reshape(len(decode), 2),
        decode_runs=tuple(runs),
        prefills=tuple(chunks),
        sample_tokens=torch.tensor(sample_tokens, dtype=torch.int64, device=device),
        samples_every_token=list(sample_tokens) == list(range(len(tokens))),
    )
