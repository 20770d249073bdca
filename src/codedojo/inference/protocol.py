"""The contract every engine speaks: sampling parameters in, a completion out.

The local engine (`LocalEngine`), the HTTP client (`HTTPEngine`), the session router (`SessionRouter`) and
the scripted policy (`agent.scripted.ScriptedPolicy`) all implement `Engine`, so an agent loop written
against it runs in-process, against `codedojo serve`, or against a real SGLang / vLLM server without
change.

Logprob convention (what `Completion.logprobs` holds, and what a trainer must compute to compare):
`log_softmax(logits / temperature)` at the sampled token, i.e. the temperature-scaled distribution
*before* top-k / top-p truncation; with temperature 0 (greedy) the raw `log_softmax(logits)`. A trainer
gets the same numbers from one full forward pass over the sequence with its logits divided by the same
temperature. This is also SGLang's default (without `SGLANG_RETURN_ORIGINAL_LOGPROB`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from codedojo.inference.errors import InvalidRequestError

FinishReason = Literal["stop", "length", "abort"]
MAX_TOP_LOGPROBS = 20
ENGINE_DTYPES = ("float32", "bfloat16", "float16", "auto")
"""Compute dtypes a local engine takes by name (`engine.engine_dtype`, `codedojo serve --dtype`); "auto" is
bf16 where the device computes it natively, fp32 elsewhere."""


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How to sample one turn. Invalid values raise `InvalidRequestError` at construction."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p (1 = off)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 = off)."""
    max_new_tokens: int = 256
    """Most tokens to sample in this turn (the turn also ends at the model's context length)."""
    stop: tuple[str, ...] = ()
    """Stop strings. The turn ends with the token that completes one; that token stays in the output
    (tokens are never cut, so the text may run a few characters past the stop string)."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra stop tokens; the tokenizer's eos always stops unless `ignore_eos`. The stop token is kept."""
    ignore_eos: bool = False
    """Sample through the tokenizer's eos (benchmarks; `stop_token_ids` still apply)."""
    seed: int | None = None
    """Same seed + same inputs -> same tokens (bit-for-bit with the same batch composition)."""
    top_logprobs: int = 0
    """Also report this many most likely tokens at each sampled position, with their logprobs (same
    distribution as `Completion.logprobs`); at most 20, as in OpenAI's API."""

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            problems.append(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not (0 < self.top_p <= 1):
            problems.append(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            problems.append(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            problems.append(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            problems.append(f"stop must be a tuple of non-empty strings, got {self.stop!r}")
        if isinstance(self.stop_token_ids, int) or not all(
            isinstance(t, int) and t >= 0 for t in self.stop_token_ids
        ):
            problems.append(f"stop_token_ids must be a tuple of token ids, got {self.stop_token_ids!r}")
        if not isinstance(self.top_logprobs, int) or not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            problems.append(f"top_logprobs must be an int in [0, {MAX_TOP_LOGPROBS}], got {self.top_logprobs!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            problems.append(f"seed must be an int or None, got {self.seed!r}")
        if problems:
            raise InvalidRequestError("invalid sampling parameters: " + "; ".join(problems))


@dataclass(frozen=True, kw_only=True)
class Completion:
    """One sampled turn."""

    token_ids: tuple[int, ...]
    """Sampled tokens, including the stop token when one ended the turn."""
    logprobs: tuple[float, ...]
    """One per sampled token (see the module docstring for the exact definition)."""
    finish_reason: FinishReason
    """"stop": a stop token or string; "length": max_new_tokens or the context; "abort": cancelled or
    interrupted by a weight update."""
    prompt_tokens: int
    """Length of the prompt this turn received."""
    cached_tokens: int
    """Prompt tokens whose KV was reused instead of recomputed (SGLang's meta_info name)."""
    weight_version: int
    """Version of the weights that sampled these tokens (bumped by every weight update)."""
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
    """With `SamplingParams.top_logprobs` = k: per sampled token, the k most likely (token id, logprob)
    pairs, most likely first; empty otherwise (and from engines that do not report them)."""


@runtime_checkable
class Engine(Protocol):
    """Generates for many concurrent sessions; implemented by local and remote engines alike."""

    tokenizer: Any
    """A transformers tokenizer with a chat template."""

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None
    ) -> Completion:
        """Sample one turn after `prompt_ids`, the session's full token sequence so far.

        With a `session_id` the engine keeps the session's KV cache after the turn and reuses the longest
        prefix it holds on the next call, prefilling only the new tokens.
        """
        ...

    async def end_session(self, session_id: str) -> None:
        """Free a session's cache. Raises `UnknownSessionError` for a session the engine never saw."""
        ...

    async def update_weights(self, state: Mapping[str, Any]) -> int:
        """Sample with these HF-named weights (tensors, e.g. a trainer's `Policy.engine_state()`) from now
        on; returns the new weight version. An engine without weights of its own (the scripted policy)
        ignores them and returns its version unchanged; one whose server takes weights only from disk
        (`HTTPEngine`) refuses, naming the call that does."""
        ...

    async def flush_cache(self) -> bool:
        """Drop the KV the engine keeps between requests (sessions' parked KV, the prefix cache) to free its
        memory, e.g. once a rollout is done and before the weights change; True when it was dropped, False when
        the engine declined (requests still running, or a cache it does not own)."""
        ...

    async def close(self) -> None:
        """Release the engine; pending requests fail with `EngineClosedError`."""
        ...


def eos_token_ids(tokenizer: Any) -> list[int]:
    """The tokenizer's end-of-sequence id(s): HF tokenizers hold an int, some configs a list."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        return [eos]
    if isinstance(eos, list):
        return [int(t) for t in eos]
    return []
