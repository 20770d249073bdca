"""Key/value storage for the running batch, and the parked copies that sessions keep between turns.

Layout: one K and one V tensor per layer, `[rows, num_kv_heads, capacity, head_dim]`. Row r holds the
r-th running sequence; its first `length` positions are valid. The running rows are kept dense (rows
0..n-1, see `move_row`) so that one attention call per layer covers every decoding sequence with a
plain slice instead of a gather, and new tokens are written in place instead of concatenated (the
`torch.cat` of HF's DynamicCache costs 25-37% of a CPU decode step).

A finished turn's KV is copied out into a `ParkedKV` of exactly its length and copied back in when the
session's next turn arrives: a parked session costs only its own tokens, not a padded row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class KVShape:
    """What one token's KV looks like, per layer."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device

    @property
    def bytes_per_token(self) -> int:
        element = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element


class ParkedKV:
    """A session's KV between turns: `[num_layers, 2, num_kv_heads, length, head_dim]`."""

    def __init__(self, data: torch.Tensor) -> None:
        self.data = data

    @property
    def length(self) -> int:
        return self.data.shape[3]


class KVCache:
    """The running batch's KV; grows (by reallocation) in rows and in capacity, never shrinks."""

    def __init__(self, shape: KVShape, *, rows: int = 0, capacity: int = 0) -> None:
        self.shape = shape
        self.rows = 0
        self.capacity = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.reserve(rows=rows, capacity=capacity, keep=[])

    @property
    def allocated_tokens(self) -> int:
        return self.rows * self.capacity

    def reserve(self, *, rows: int, capacity: int, keep: list[int]) -> None:
        """Make room for `rows` x `capacity`, keeping row r's first keep[r] positions."""
        if rows <= self.rows and capacity <= self.capacity:
            return
        rows, capacity = max(rows, self.rows), max(capacity, self.capacity)
        s = self.shape
        size = (rows, s.num_kv_heads, capacity, s.head_dim)
        new_keys = [torch.zeros(size, dtype=s.dtype, device=s.device) for _ in range(s.num_layers)]
        new_values = [torch.zeros(size, dtype=s.dtype, device=s.device) for _ in range(s.num_layers)]
        for layer in range(s.num_layers if self.rows else 0):
            for row, length in enumerate(keep):
                if length:
                    new_keys[layer][row, :, :length] = self.keys[layer][row, :, :length]
                    new_values[layer][row, :, :length] = self.values[layer][row, :, :length]
        self.keys, self.values = new_keys, new_values
        self.rows, self.capacity = rows, capacity

    def release(self) -> None:
        """Drop all storage (after a weight update nothing in it is valid)."""
        self.keys, self.values = [], []
        self.rows = self.capacity = 0

    def move_row(self, src: int, dst: int, length: int) -> None:
        """Copy row src's first `length` positions into row dst (used to keep running rows dense)."""
        for k, v in zip(self.keys, self.values, strict=True):
            k[dst, :, :length] = k[src, :, :length]
            v[dst, :, :length] = v[src, :, :length]

    def park(self, row: int, length: int) -> ParkedKV:
        """A compact copy of row's first `length` positions."""
        s = self.shape
        data = torch.empty(
            (s.num_layers, 2, s.num_kv_heads, length, s.head_dim), dtype=s.dtype, device=s.device
        )
        for layer, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            data[layer, 0] = k[row, :, :length]
            data[layer, 1] = v[row, :, :length]
        return ParkedKV(data)

    def restore(self, row: int, parked: ParkedKV, length: int) -> None:
        """Copy the first `length` positions of a parked KV into row."""
        for layer, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            k[row, :, :length] = parked.data[layer, 0, :, :length]
            v[row, :, :length] = parked.data[layer, 1, :, :length]
