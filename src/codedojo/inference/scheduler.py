"""The local engine's bookkeeping: which sequence runs in which KV row, which sessions keep parked KV,
and what goes into the next forward step (continuous batching).

Invariants (the scheduler is single-threaded: only the engine's worker thread touches it):
- `rows[i]` is the request whose KV lives in cache row i; rows are dense (a finished row is filled by
  moving the last row into it).
- A running request has `kv_len` positions of KV. While prefilling, kv_len < len(prompt); once decoding,
  kv_len == len(prompt) + len(output) - 1 (the newest sampled token is fed in the next step).
- A session between turns holds a `ParkedKV` for exactly `tokens`; during a turn its KV is in a row.
- Every request starts from the longest prefix any resident sequence (its own session, another parked
  session, or a running row) shares with its prompt, and prefills only the rest. A request whose prompt
  is also being prefilled by another row waits one step and then copies that row's KV: a GRPO group
  sharing one task prompt prefills it once.
- Automatic prefix caching: with `prefix_cache`, a request without a session id parks its KV too, as an
  anonymous entry in `cached` (an entry whose tokens are a prefix of a newer one's is dropped, it adds
  nothing). Parked KV of sessions and entries is found through a block-hash `PrefixIndex`, so a client
  that never sends a session id (the OpenAI SDK, litellm) still prefills only what is new each turn.
  An anonymous sequence shorter than one index block (`BLOCK_TOKENS`) is not parked: the index could
  never find it (a session's own parked KV, however short, is found directly).
- Parked KV + allocated rows stay within `kv_budget_tokens`. Anonymous entries are evicted first, least
  recently used first, then sessions' parked KV, least recently used first (sessions stay the fast
  path); an evicted sequence's next turn is recomputed from scratch, transparently.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from codedojo.inference.errors import InvalidRequestError, SessionBusyError, UnknownSessionError
from codedojo.inference.kv_cache import KVCache, ParkedKV
from codedojo.inference.prefix_index import BLOCK_TOKENS, PrefixIndex, block_hashes
from codedojo.inference.protocol import Completion, FinishReason, SamplingParams
from codedojo.inference.sampler import RowSampling, sample, top_logprobs
from codedojo.inference.step_batch import build_step
from codedojo.inference.stopping import StopStrings
from codedojo.inference.transformer import Transformer

# A request waits for another row's prefill only when that saves at least this many tokens.
MIN_SHARED_PREFILL = 32
# Row capacities are multiples of this many positions.
CAPACITY_STEP = 256
# With no running rows, a cache allocation larger than this is freed.
IDLE_CACHE_TOKENS = 16384
# Session records kept after their KV is gone (so `end_session` can tell "evicted" from "unknown").
MAX_SESSION_RECORDS = 100_000

Deliver = Callable[[Completion | BaseException], None]
OnToken = Callable[[int, float, tuple[tuple[int, float], ...]], None]
"""(token id, logprob, top logprobs) of each sampled token."""


@dataclass(eq=False, kw_only=True)
class Request:
    prompt: list[int]
    params: SamplingParams
    session_id: str | None
    max_new_tokens: int
    """params.max_new_tokens, clipped so the sequence stays within the context."""
    stop_token_ids: frozenset[int]
    stop_strings: StopStrings | None
    sampling: RowSampling
    deliver: Deliver
    rid: str | None = None
    """The caller's request id (SGLang's `rid`), what `abort` matches."""
    on_token: OnToken | None = None
    """Called on the worker thread with each sampled token (streaming)."""
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    kv_len: int = 0
    cached_tokens: int = 0
    weight_version: int = 0
    cancelled: bool = False
    """Set from the caller's thread when it stops waiting; the row is dropped at the next step."""

    @property
    def prefilling(self) -> bool:
        return self.kv_len < len(self.prompt)

    def tokens(self) -> list[int]:
        return self.prompt + self.output

    def completion(self, finish_reason: FinishReason) -> Completion:
        return Completion(
            token_ids=tuple(self.output),
            logprobs=tuple(self.logprobs),
            top_logprobs=tuple(self.top_logprobs),
            finish_reason=finish_reason,
            prompt_tokens=len(self.prompt),
            cached_tokens=self.cached_tokens,
            weight_version=self.weight_version,
        )


@dataclass(eq=False)
class Session:
    tokens: np.ndarray
    """The tokens whose KV `parked` holds (int64)."""
    parked: ParkedKV | None = None
    running: Request | None = None
    ended: bool = False


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def _round_up_pow2(n: int, *, minimum: int) -> int:
    return max(minimum, 1 << max(n - 1, 0).bit_length())


def _grown_capacity(needed: int, current: int, *, limit: int) -> int:
    """Row capacity for `needed` positions: multiples of 256 (padding every row to a power of two would
    waste up to half the cache), growing by at least a quarter so regrowth (a full copy) stays rare."""
    if needed <= current:
        return current
    target = max(needed, current + current // 4)
    return min(-(-target // CAPACITY_STEP) * CAPACITY_STEP, limit)


class Scheduler:
    def __init__(
        self,
        model: Transformer,
        *,
        kv_budget_tokens: int,
        max_running: int,
        max_step_tokens: int,
        prefix_cache: bool = True,
    ) -> None:
        if max_step_tokens < 2 * max_running:
            raise ValueError(f"max_step_tokens ({max_step_tokens}) must be >= 2 * max_running ({max_running})")
        self.model = model
        self.cache = KVCache(model.kv_shape)
        self.kv_budget_tokens = kv_budget_tokens
        self.max_running = max_running
        self.max_step_tokens = max_step_tokens
        self.waiting: deque[Request] = deque()
        self.rows: list[Request] = []
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.prefix_cache = prefix_cache
        self.cached: OrderedDict[Session, None] = OrderedDict()
        """Anonymous parked entries (requests without a session id), least recently used first."""
        self.index: PrefixIndex[Session] = PrefixIndex()
        """Every parked KV, sessions' and anonymous, by block hashes of its tokens."""
        self.parked_tokens = 0
        self.weight_version = 0
        self.counters = {
            "steps": 0,
            "prefill_tokens": 0,
            "decode_tokens": 0,
            "decode_steps": 0,
            "cached_tokens": 0,
            "prompt_tokens": 0,
            "evictions": 0,
        }
        self.kv_peak_tokens = 0
        """Most KV positions held at once (allocated rows plus parked sessions)."""
        self.step_seconds = 0.0
        """Wall seconds spent in steps (the forward pass, sampling and delivery), since the scheduler began."""
        self.prefill_step_seconds = 0.0
        """The part of `step_seconds` spent in steps that prefilled at least one chunk (the rest decoded only)."""

    # ----- commands -------------------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        sid = request.session_id
        if sid is not None:
            session = self.sessions.get(sid)
            if session is not None and session.running is not None and session.running.cancelled:
                self._retire(session.running)  # its caller gave up; the session is free again
            if session is not None and session.running is not None:
                request.deliver(SessionBusyError(f"session {sid!r} already has a request running"))
                return
            if session is None:
                session = self.sessions[sid] = Session(tokens=np.zeros(0, dtype=np.int64))
                self._forget_old_sessions()
            session.running = request
            session.ended = False
        self.waiting.append(request)

    def _retire(self, request: Request) -> None:
        if request in self.rows:
            self._finish(self.rows.index(request), None, park=True)
        else:
            self.waiting.remove(request)
            self._settle(request, None)

    def end_session(self, session_id: str) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            raise UnknownSessionError(f"unknown session {session_id!r} (never seen, or already ended)")
        if session.running is not None:
            session.ended = True  # dropped when its turn finishes
            return
        self._drop_parked(session)
        del self.sessions[session_id]

    def has_work(self) -> bool:
        return bool(self.rows or self.waiting)

    def abort_all(self, error: BaseException | None = None) -> None:
        """End every running and waiting request: with `error`, or as finish_reason "abort"."""
        for request in list(self.waiting):
            self._settle(request, error)
        self.waiting.clear()
        for row in reversed(range(len(self.rows))):
            self._finish(row, error, park=error is None)

    @torch.no_grad()
    def load_weights(self, state: Mapping[str, torch.Tensor], *, strict: bool) -> int:
        """New weights; every cached KV was computed with the old ones and is dropped. Needs no rows."""
        assert not self.rows, "weights change only between turns"
        self.model.load_state_dict(state, strict=strict)
        self.flush()
        self.weight_version += 1
        return self.weight_version

    def flush(self) -> bool:
        """Drop every parked KV (sessions' and anonymous); False, doing nothing, while requests run."""
        if self.rows:
            return False
        for session in self.sessions.values():
            self._drop_parked(session)
        for entry in list(self.cached):
            self._drop_parked(entry)
        self.cache.release()
        return True

    def abort(self, *, rid: str | None = None) -> int:
        """Mark running and waiting requests with this rid (None: all) cancelled; they end as "abort"
        at the next step with the tokens sampled so far. Returns how many were marked."""
        marked = 0
        for request in [*self.rows, *self.waiting]:
            if rid is None or request.rid == rid:
                request.cancelled = True
                marked += 1
        return marked

    def drop_cancelled(self) -> None:
        """Finish cancelled rows and waiting requests now (also while generation is paused)."""
        for row in reversed(range(len(self.rows))):
            if self.rows[row].cancelled:
                self._finish(row, None, park=True)
        for request in [r for r in self.waiting if r.cancelled]:
            self.waiting.remove(request)
            self._settle(request, None)

    # ----- one step -------------------------------------------------------------------------------

    def step(self, *, admit: bool = True) -> None:
        for row in reversed(range(len(self.rows))):
            if self.rows[row].cancelled:
                self._finish(row, None, park=True)
        if admit:
            self._admit()
        if not self.rows:
            return
        started = time.perf_counter()
        prefilled = self._step()
        seconds = time.perf_counter() - started
        self.step_seconds += seconds
        if prefilled:
            self.prefill_step_seconds += seconds

    def _step(self) -> bool:
        """One forward pass over the running rows; True when it prefilled a chunk."""
        decode, prefills, sampled = [], [], []
        for row, request in enumerate(self.rows):
            if not request.prefilling:
                decode.append((row, request.kv_len, request.output[-1]))
                sampled.append(row)
        budget = self.max_step_tokens - len(decode)
        offset = len(decode)
        sample_tokens = list(range(len(decode)))
        for row, request in enumerate(self.rows):
            if request.prefilling and budget > 0:
                chunk = request.prompt[request.kv_len : request.kv_len + budget]
                prefills.append((row, request.kv_len, chunk))
                budget -= len(chunk)
                offset += len(chunk)
                if request.kv_len + len(chunk) == len(request.prompt):
                    sample_tokens.append(offset - 1)
                    sampled.append(row)
        self._reserve(extra={row: len(chunk) for row, _, chunk in prefills})
        batch = build_step(
            decode, prefills=prefills, sample_tokens=sample_tokens, device=self.model.device, dtype=self.model.dtype,
            run_call_cost=self.model.options.run_call_cost,
        )
        logits = self.model.forward(batch, self.cache)
        tokens, logprobs = sample(logits, [self.rows[row].sampling for row in sampled])
        tops = [self.rows[row].params.top_logprobs for row in sampled]
        top = top_logprobs(logits, [self.rows[row].sampling for row in sampled], tops) if any(tops) else None
        self.counters["steps"] += 1
        self.counters["decode_tokens"] += len(decode)
        self.counters["decode_steps"] += bool(decode)
        for row, _, chunk in prefills:
            self.rows[row].kv_len += len(chunk)
            self.counters["prefill_tokens"] += len(chunk)
        for row, _, _ in decode:
            self.rows[row].kv_len += 1
        done: list[tuple[int, FinishReason]] = []
        for j, (row, token, logprob) in enumerate(zip(sampled, tokens, logprobs, strict=True)):
            request = self.rows[row]
            request.output.append(token)
            request.logprobs.append(logprob)
            top_j = top[j] if top is not None else ()
            if request.params.top_logprobs:
                request.top_logprobs.append(top_j)
            if request.on_token is not None:
                request.on_token(token, logprob, top_j)
            reason = self._finish_reason(request, token)
            if reason is not None:
                done.append((row, reason))
        for row, reason in sorted(done, reverse=True):
            self._finish(row, reason, park=True)
        return bool(prefills)

    def _finish_reason(self, request: Request, token: int) -> FinishReason | None:
        if token in request.stop_token_ids:
            return "stop"
        if request.stop_strings is not None and request.stop_strings.hit(request.output):
            return "stop"
        if len(request.output) >= request.max_new_tokens:
            return "length"
        return None

    # ----- admission ------------------------------------------------------------------------------

    def _admit(self) -> None:
        deferred: list[Request] = []
        while self.waiting and len(self.rows) < self.max_running:
            request = self.waiting.popleft()
            if request.cancelled:
                self._settle(request, None)
                continue
            prompt = np.asarray(request.prompt, dtype=np.int64)
            source, reuse = self._best_prefix(request, prompt)
            if self._prefill_in_flight(prompt) >= reuse + MIN_SHARED_PREFILL:
                deferred.append(request)
                continue
            try:
                room = self._make_room(len(request.prompt) + 1, keep=source)
            except InvalidRequestError as error:
                self._settle(request, error)
                continue
            if not room:
                self.waiting.appendleft(request)
                break
            row = len(self.rows)
            self.rows.append(request)
            self._reserve(extra={row: reuse})
            self._copy_prefix(source, row, reuse)
            request.kv_len = request.cached_tokens = reuse
            request.weight_version = self.weight_version
            self.counters["cached_tokens"] += reuse
            self.counters["prompt_tokens"] += len(request.prompt)
            if isinstance(source, Session) and source in self.cached:
                self.cached.move_to_end(source)
            if request.session_id is not None:
                self._drop_parked(self.sessions[request.session_id])
        self.waiting.extendleft(reversed(deferred))

    def _best_prefix(self, request: Request, prompt: np.ndarray) -> tuple[Session | int | None, int]:
        """The resident sequence sharing the longest prefix with prompt: a session, a row, or None."""
        best: Session | int | None = None
        best_len = 0
        own = self.sessions.get(request.session_id) if request.session_id is not None else None
        candidates: list[tuple[Session | int, np.ndarray]] = []
        if own is not None and own.parked is not None:
            candidates.append((own, own.tokens))
        candidates += [(s, s.tokens) for s in self.index.candidates(prompt) if s is not own]
        candidates += [
            (row, np.asarray(r.tokens()[: r.kv_len], dtype=np.int64)) for row, r in enumerate(self.rows)
        ]
        for candidate, tokens in candidates:
            shared = _common_prefix(tokens, prompt)
            if shared > best_len:
                best, best_len = candidate, shared
        # At least one prompt token is always prefilled: its logits give the first sampled token.
        return best, min(best_len, len(prompt) - 1)

    def _prefill_in_flight(self, prompt: np.ndarray) -> int:
        """Longest prefix shared with a prompt that a running row is still prefilling."""
        shared = 0
        for request in self.rows:
            if request.prefilling:
                shared = max(shared, _common_prefix(np.asarray(request.prompt, dtype=np.int64), prompt))
        return shared

    def _copy_prefix(self, source: Session | int | None, row: int, length: int) -> None:
        if length == 0 or source is None:
            return
        if isinstance(source, Session):
            assert source.parked is not None
            self.cache.restore(row, source.parked, length)
        else:
            self.cache.move_row(source, row, length)

    # ----- memory ---------------------------------------------------------------------------------

    def _reserve(self, *, extra: dict[int, int]) -> None:
        """Grow the cache for the current rows, each needing kv_len + extra[row] (+1 decode) positions."""
        needed = 0
        for row, request in enumerate(self.rows):
            needed = max(needed, request.kv_len + extra.get(row, 0) + 1)
        rows = _round_up_pow2(len(self.rows), minimum=4)
        capacity = _grown_capacity(needed, self.cache.capacity, limit=self.model.config.max_positions)
        if rows > self.cache.rows or capacity > self.cache.capacity:
            keep = [r.kv_len for r in self.rows]
            self.cache.reserve(rows=rows, capacity=capacity, keep=keep + [0] * (self.cache.rows - len(keep)))
            self._evict(protect=None)
        self._note_peak()

    def _note_peak(self) -> None:
        self.kv_peak_tokens = max(self.kv_peak_tokens, self.cache.allocated_tokens + self.parked_tokens)

    def _make_room(self, length: int, *, keep: Session | int | None) -> bool:
        """Can one more row of `length` positions be allocated within budget (evicting parked KV)?"""
        rows = _round_up_pow2(len(self.rows) + 1, minimum=4)
        capacity = _grown_capacity(length, self.cache.capacity, limit=self.model.config.max_positions)
        allocation = max(rows, self.cache.rows) * capacity
        protect = keep if isinstance(keep, Session) else None
        self._evict(protect=protect, allocation=allocation)
        if allocation + self.parked_tokens <= self.kv_budget_tokens:
            return True
        if self.rows:
            return False  # wait for running rows to finish
        if allocation > self.kv_budget_tokens:
            raise InvalidRequestError(
                f"a {length}-token sequence needs {allocation} KV tokens, over the engine's "
                f"kv_budget_tokens={self.kv_budget_tokens}"
            )
        return True

    def _evict(self, *, protect: Session | None, allocation: int | None = None) -> None:
        allocated = self.cache.allocated_tokens if allocation is None else allocation
        if allocated + self.parked_tokens <= self.kv_budget_tokens:
            return  # the usual case (every admission and finish asks): no list of every parked entry
        for session in [*self.cached, *self.sessions.values()]:
            if allocated + self.parked_tokens <= self.kv_budget_tokens:
                return
            if session.parked is not None and session is not protect:
                self._drop_parked(session)
                self.counters["evictions"] += 1

    def _drop_parked(self, session: Session) -> None:
        if session.parked is not None:
            self.parked_tokens -= session.parked.length
        session.parked = None
        session.tokens = np.zeros(0, dtype=np.int64)
        self.index.remove(session)
        self.cached.pop(session, None)

    def _park(self, session: Session, row: int, tokens: np.ndarray, *, hashes: list[int] | None = None) -> None:
        session.parked = self.cache.park(row, len(tokens))
        session.tokens = tokens
        self.parked_tokens += len(tokens)
        self.index.add(session, tokens, hashes=hashes)

    def _cache_anonymous(self, row: int, tokens: np.ndarray) -> None:
        """Park a sessionless request's KV as an anonymous entry, replacing entries it extends."""
        hashes = list(block_hashes(tokens))  # once, for both the lookup and the registration
        for entry in self.index.candidates(tokens, hashes=hashes):
            if entry in self.cached and _common_prefix(entry.tokens, tokens) == len(entry.tokens):
                self._drop_parked(entry)
        entry = Session(tokens=tokens)
        self._park(entry, row, tokens, hashes=hashes)
        self.cached[entry] = None

    def _forget_old_sessions(self) -> None:
        while len(self.sessions) > MAX_SESSION_RECORDS:
            sid, session = next(iter(self.sessions.items()))
            if session.running is not None:
                break
            self._drop_parked(session)
            del self.sessions[sid]

    # ----- finishing ------------------------------------------------------------------------------

    def _finish(self, row: int, outcome: FinishReason | BaseException | None, *, park: bool) -> None:
        """Deliver row's result (None: aborted), park its KV with its session, and free the row."""
        request = self.rows[row]
        if request.session_id is not None:
            session = self.sessions[request.session_id]
            session.running = None
            if session.ended:
                del self.sessions[request.session_id]
            elif park and request.kv_len:
                self._park(session, row, np.asarray(request.tokens()[: request.kv_len], dtype=np.int64))
                self.sessions.move_to_end(request.session_id)
                self._note_peak()
        elif park and self.prefix_cache and request.kv_len >= BLOCK_TOKENS:
            self._cache_anonymous(row, np.asarray(request.tokens()[: request.kv_len], dtype=np.int64))
            self._note_peak()
        last = len(self.rows) - 1
        if row != last:
            self.cache.move_row(last, row, self.rows[last].kv_len)
            self.rows[row] = self.rows[last]
        self.rows.pop()
        if isinstance(outcome, str):
            request.deliver(request.completion(outcome))
        else:
            self._settle(request, outcome)
        if not self.rows and self.cache.allocated_tokens > IDLE_CACHE_TOKENS:
            self.cache.release()  # nothing runs: hand a big batch's rows back to the parked sessions
        self._evict(protect=None)

    def _settle(self, request: Request, error: BaseException | None) -> None:
        if request.session_id is not None:
            session = self.sessions.get(request.session_id)
            if session is not None and session.running is request:
                session.running = None
                if session.ended:
                    del self.sessions[request.session_id]
        request.deliver(error if error is not None else request.completion("abort"))
