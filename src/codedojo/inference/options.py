"""`EngineOptions`: every switch of the local engine, in one frozen record.

The scheduler (`LocalEngine`, `scheduler.Scheduler`) and the forward's kernel choices (`transformer.Transformer`,
`step_batch.build_step`) read their switches from here and from nowhere else. The defaults are the engine's
behaviour; each kernel choice's default is the side that won its A/B in `bench/engine_steps.py`, and a benchmark
times the other side by giving the engine (or `Transformer.options`) another EngineOptions, never by patching a
module. docs/inference.md has the table.

Importing this module loads neither torch nor anything else heavy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from codedojo.records import record_fields


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """The local engine's switches. Unknown names and values of the wrong type are errors (`updated`)."""

    # ----- scheduling (LocalEngine)
    kv_budget_tokens: int | None = None
    """KV positions the engine may hold, running rows and parked sessions together; None: a quarter of RAM up to
    8 GiB on the CPU, 40% of the free memory on a GPU."""
    max_running: int = 64
    """Requests decoding at once; the rest wait."""
    max_step_tokens: int = 1024
    """Tokens in one forward step (a token per decoding row plus prefill chunks); at least 2 * max_running."""
    seed: int | None = None
    """Draws the seed of each request that brings none; None: a random seed."""
    prefix_cache: bool = True
    """Requests without a session id park their KV too, for a later request that shares the prefix (automatic
    prefix caching); off: only sessions keep KV between requests (`codedojo serve --no-prefix-cache`)."""

    # ----- the forward's kernels (Transformer; the CPU unless said)
    packed_weights: bool = True
    """Linear layers multiply copies of the matrices in oneDNN's blocked layout (`transformer.pack_weight`,
    rebuilt after each weight load; one more copy of the matrices in memory); off: the HF-layout matrices
    through the same kernel. docs/results/engine-steps.json, `packed_weights/*`."""
    small_step_tokens: int = 1
    """With at most `small_step_max_threads` torch threads, steps of at most this many tokens (batch-1
    decode) multiply the HF-layout matrices with F.linear (MKL's one-thread matrix-vector kernel), which
    beats the packed copies at one thread only (bench/engine_steps.py `small_step`)."""
    small_step_max_threads: int = 1
    """See `small_step_tokens`."""
    run_call_cost: int = 256
    """What one more SDPA call per layer costs, in KV positions read per row: a run of decoding rows of
    different lengths is split where the masked positions it would read cost more (`step_batch`; CPU only,
    and only where SDPA attends decode tokens, see `native_attention`). docs/results/engine-steps.json,
    `decode_runs/*`."""
    causal_first_chunks: bool = True
    """A prefill chunk with no past (a prompt's first) attends with SDPA's causal flag instead of its explicit
    mask: the same values, and the kernel skips the blocks above the diagonal (on any device).
    docs/results/engine-steps-causal-prefill-avx2.json."""
    one_token_path: bool = True
    """One-token steps (batch-1 decode) take `Transformer._one_token_layers`: the same math in fewer small
    kernels, which cost more between the weight reads of such a step than alone.
    docs/results/engine-steps-native-avx2.json, `one_token_path/*`."""
    native_attention: bool = True
    """fp32 decode tokens attend through our compiled kernel (`native.decode_attention`) where it builds and
    supports the model's heads; off: SDPA. docs/results/engine-steps-native-avx2.json, `native_attention/*`."""
    native_rows: bool = True
    """fp32 and bf16 one-token steps multiply through our one-row kernels (`native.linear_row`, `swiglu_row`)
    where they build; off: oneDNN or F.linear. docs/results/engine-steps-native-rows-avx2.json."""
    native_rows_max_tokens: int = 32
    """fp32 steps of up to this many tokens that the one-token path does not take (batched decode, short
    prefills) multiply the HF-layout matrices through our few-row kernels (`native.linear_rows`, `swiglu_rows`)
    where they build, and the head too where at most `transformer.ROWS_HEAD_MAX` rows are sampled; 0: never
    (oneDNN on the packed copies). docs/results/engine-rows-avx2.json, `few_rows/*`."""
    reduced_gemv_tokens: int = 1
    """A bf16 (or fp16) engine's steps of at most this many tokens run their matmuls with oneDNN off, on
    torch's reduced-precision matrix-vector kernel; 0: never. docs/results/engine-steps-bf16-one-row.json."""
    half_head: bool = True
    """In those steps the vocabulary head multiplies an fp16 copy of its matrix (`transformer.HALF_HEAD_LIMIT`);
    off: the fp32 head. docs/results/engine-steps-fp16-head.json, docs/results/head-precision.json."""
    wide_steps_fp32: bool | None = None
    """A reduced-precision engine's steps of more than `transformer.EMULATED_BF16_MAX_TOKENS` tokens multiply
    fp32 copies of the (bf16-rounded) matrices; None: exactly on a CPU that emulates bf16
    (`codedojo.precision.native_bf16`)."""

    def __post_init__(self) -> None:
        record_fields(EngineOptions, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                      where="EngineOptions")
        for name in ("max_running", "max_step_tokens", "kv_budget_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"EngineOptions.{name} must be at least 1, got {value} (no request could run)")
        if self.native_rows_max_tokens < 0:
            raise ValueError(f"EngineOptions.native_rows_max_tokens must be 0 (off) or more, got "
                             f"{self.native_rows_max_tokens}")

    def updated(self, **changes: Any) -> EngineOptions:
        """A copy with `changes` (self without any); a name that is not a field is a RecordError naming it and
        the closest field."""
        if not changes:
            return self
        return dataclasses.replace(self, **record_fields(EngineOptions, changes, where="engine options"))
