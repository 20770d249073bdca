"""`LocalEngine`: the in-process engine. Many asyncio tasks call `generate`; one worker thread batches
them (continuous batching: requests join and leave the running batch between forward steps).

Threading: the event loop thread only validates requests and posts commands to the worker's queue; the
worker owns the scheduler, the model and the KV cache, and hands results back with
`loop.call_soon_threadsafe`. torch releases the GIL inside its kernels, so an aiohttp server on the
same event loop stays responsive while the worker computes. OpenMP: each thread that runs torch keeps
its own pool of helper threads, and pools beyond the core count slow every step (`codedojo.threads`), so
the engine drops the pool of the thread that built it, and the worker drops its own after
`IDLE_RELEASE_SECONDS` with nothing to do (a trainer update then has the cores to itself).

Weight updates wait until the running requests finish (new requests queue meanwhile, as slime does
before a sync), or abort them with `abort_running=True`; then every cached KV is dropped and
`weight_version` goes up by one. While generation is paused with requests kept in place, those requests
never finish: an update then fails at once (InvalidRequestError naming the pause mode) unless it aborts
them.

Control (SGLang's admin routes call these): `abort(rid=...)` ends matching requests as "abort" with what
they sampled so far; `pause(mode=...)` stops stepping until `resume()` ("abort" first aborts everything,
"in_place" keeps running requests and their KV where they are); `flush_cache()` drops every parked KV
when nothing runs. `stream()` yields tokens as they are sampled.
"""

from __future__ import annotations

import asyncio
import queue
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from codedojo.inference.errors import (
    ContextLengthError,
    EngineClosedError,
    InferenceError,
    InvalidRequestError,
)
from codedojo.inference.options import EngineOptions
from codedojo.inference.protocol import ENGINE_DTYPES, Completion, SamplingParams, eos_token_ids
from codedojo.inference.sampler import RowSampling
from codedojo.inference.scheduler import Request, Scheduler
from codedojo.inference.stopping import StopStrings
from codedojo.inference.transformer import Transformer
from codedojo.threads import release_omp_threads, to_thread

# Without an explicit budget: this share of the device's memory (CPU: RAM) holds KV, at most 8 GiB.
DEFAULT_KV_MEMORY_FRACTION = 0.25
DEFAULT_KV_MEMORY_CAP = 8 << 30

IDLE_RELEASE_SECONDS = 0.05
"""The worker frees its OpenMP pool after this long with nothing to step or apply (an agent's tool call
between turns is usually longer; restarting the pool costs one thread creation)."""


class StreamedToken(NamedTuple):
    """One token as `LocalEngine.stream` yields it."""

    token_id: int
    logprob: float
    top_logprobs: tuple[tuple[int, float], ...]
    """(token id, logprob) pairs when SamplingParams.top_logprobs asks for them, else empty."""


@dataclass(frozen=True)
class _EndSession:
    session_id: str
    done: Callable[[BaseException | None], None]


@dataclass(frozen=True)
class _UpdateWeights:
    state: Mapping[str, torch.Tensor]
    strict: bool
    abort_running: bool
    done: Callable[[int | BaseException], None]


@dataclass(frozen=True)
class _Call:
    """Run fn(scheduler) on the worker thread between steps (stats, tests)."""

    fn: Callable[[Scheduler], Any]
    done: Callable[[Any], None]


@dataclass(frozen=True)
class _Control:
    """abort / pause / resume / flush, run on the worker thread between steps."""

    kind: str
    done: Callable[[Any], None]
    rid: str | None = None
    mode: str = "abort"


PAUSE_MODES = ("abort", "in_place", "retract")


class _Close:
    pass


def engine_dtype(setting: torch.dtype | str, device: str | torch.device) -> torch.dtype:
    """The engine's compute dtype for a setting: a torch dtype, one of ENGINE_DTYPES, where "auto" is bf16
    exactly where `device` computes it natively (`codedojo.precision.native_bf16`) and fp32 elsewhere."""
    if isinstance(setting, torch.dtype):
        return setting
    if setting not in ENGINE_DTYPES:
        raise ValueError(f"engine dtype must be one of {list(ENGINE_DTYPES)}, got {setting!r}")
    if setting == "auto":
        from codedojo.precision import compute_dtype

        return compute_dtype(None, device)
    dtype: torch.dtype = getattr(torch, setting)
    return dtype


def default_kv_budget_tokens(model: Transformer) -> int:
    if model.device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(model.device)
        memory = int(free * 0.4)
    else:
        import psutil

        memory = min(int(psutil.virtual_memory().total * DEFAULT_KV_MEMORY_FRACTION), DEFAULT_KV_MEMORY_CAP)
    return max(memory // model.kv_shape.bytes_per_token, 4096)


class LocalEngine:
    """An `Engine` running a `Transformer` in this process. See the module docstring."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Any,
        *,
        options: EngineOptions | None = None,
        **changes: Any,
    ) -> None:
        """options: every switch of the engine (`EngineOptions`; default: the model's, `Transformer.options`);
        `changes`: fields of EngineOptions changed on top of them (kv_budget_tokens=, max_running=,
        max_step_tokens=, seed=, prefix_cache=, ...), checked by name and type. The model runs with the result."""
        self.options = (model.options if options is None else options).updated(**changes)
        model.options = self.options
        self.model = model
        self.tokenizer = tokenizer
        self.kv_budget_tokens = self.options.kv_budget_tokens or default_kv_budget_tokens(model)
        self.scheduler = Scheduler(
            model,
            kv_budget_tokens=self.kv_budget_tokens,
            max_running=self.options.max_running,
            max_step_tokens=self.options.max_step_tokens,
            prefix_cache=self.options.prefix_cache,
        )
        self.paused = False
        """Set by `pause`, cleared by `resume` (read by the event loop; written by the worker)."""
        self.pause_mode: str | None = None
        """The mode of the pause in force, None when not paused."""
        self._eos = frozenset(eos_token_ids(tokenizer))
        seed = self.options.seed
        self._seeds = torch.Generator().manual_seed(secrets.randbits(62) if seed is None else seed)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self.idle_seconds = 0.0
        """Wall seconds the worker waited for a command with nothing to step (written by the worker)."""
        self._post_lock = threading.Lock()  # nothing is posted after _Close, so nothing waits forever
        self._worker = threading.Thread(target=self._run, name="codedojo-engine", daemon=True)
        release_omp_threads()  # the caller's pool (it built the model): only the worker's should remain
        self._worker.start()

    @classmethod
    def from_spec(
        cls,
        spec: Any,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        options: EngineOptions | None = None,
        **changes: Any,
    ) -> LocalEngine:
        """Load a model spec (or a name `resolve_model` knows) and wrap it in an engine (`options` and
        `changes` as for the constructor).

        dtype: the compute dtype (see `engine_dtype`: a torch dtype, its name, or "auto"). The weights are
        read in fp32 and the layers' matrices cast once, so norms, embeddings and head keep their values."""
        from codedojo.inference.specs import resolve_model

        options = (options or EngineOptions()).updated(**changes)  # a misspelt name fails before the load
        loaded = resolve_model(spec).load(device=device, dtype=torch.float32)
        model = loaded.engine_model(dtype=engine_dtype(dtype, device), options=options)
        return cls(model, loaded.tokenizer, options=options)

    # ----- the Engine protocol --------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self.scheduler.weight_version

    @property
    def max_context(self) -> int:
        return self.model.config.max_positions

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None,
        rid: str | None = None,
    ) -> Completion:
        prompt = self.validate_request(prompt_ids, params, session_id=session_id)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Completion] = loop.create_future()
        request = self._request(prompt, params, session_id, deliver_to(loop, future), rid=rid)
        self._post(request)
        try:
            return await future
        except asyncio.CancelledError:
            request.cancelled = True  # the worker drops the row at its next step
            raise

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None,
        rid: str | None = None,
    ) -> AsyncIterator[StreamedToken | Completion]:
        """Like `generate`, but yields each sampled token as it comes, then the `Completion`.

        Closing the iterator early (or cancelling its consumer) cancels the request. Being a generator, it
        checks the request only when first iterated: a server that answers with a stream calls
        `validate_request` before it sends its status line."""
        prompt = self.validate_request(prompt_ids, params, session_id=session_id)
        loop = asyncio.get_running_loop()
        tokens: asyncio.Queue[StreamedToken | Completion | BaseException] = asyncio.Queue()

        def on_token(token: int, logprob: float, top: tuple[tuple[int, float], ...]) -> None:
            try:
                loop.call_soon_threadsafe(tokens.put_nowait, StreamedToken(token, logprob, top))
            except RuntimeError:
                pass  # the caller's event loop is gone

        def deliver(outcome: Completion | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(tokens.put_nowait, outcome)
            except RuntimeError:
                pass

        request = self._request(prompt, params, session_id, deliver, rid=rid, on_token=on_token)
        self._post(request)
        try:
            while True:
                item = await tokens.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, Completion):
                    return
        finally:
            request.cancelled = True  # a no-op once finished; otherwise the worker drops the row

    async def abort(self, *, rid: str | None = None) -> int:
        """End running and waiting requests with this rid (None: every request) as finish_reason "abort"
        at the next step; returns how many were found."""
        return await self._control("abort", rid=rid)

    async def pause(self, *, mode: str = "abort") -> None:
        """Stop generating until `resume`. mode "abort" aborts every request first; "in_place" (and
        "retract", which behaves the same here) keeps them, with their KV, until `resume`. Requests that
        arrive meanwhile wait."""
        if mode not in PAUSE_MODES:
            raise InvalidRequestError(f"pause mode must be one of {list(PAUSE_MODES)}, got {mode!r}")
        await self._control("pause", mode=mode)

    async def resume(self) -> None:
        await self._control("resume")

    async def flush_cache(self) -> bool:
        """Drop every parked KV (sessions' and the prefix cache's); False while requests run or wait."""
        return await self._control("flush")

    async def _control(self, kind: str, **fields: Any) -> Any:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._post(_Control(kind, deliver_to(loop, future), **fields))
        return await future

    async def end_session(self, session_id: str) -> None:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._post(_EndSession(session_id, deliver_to(loop, future)))
        await future

    async def update_weights(
        self, state: Mapping[str, torch.Tensor], *, strict: bool = True, abort_running: bool = False
    ) -> int:
        """Load HF-named weights (e.g. a trainer's `model.state_dict()`); returns the new weight_version.

        strict=False allows a partial update. Running requests finish first unless abort_running, which
        ends them with finish_reason "abort". While paused ("in_place"/"retract") with running requests,
        only abort_running=True can go ahead; otherwise InvalidRequestError naming the pause mode.
        """
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        self._post(_UpdateWeights(state, strict, abort_running, deliver_to(loop, future)))
        return await future

    async def load_weights_from_disk(self, path: str | Path, *, abort_running: bool = False) -> int:
        """Load the safetensors files of an HF folder (what a trainer's save_pretrained writes)."""
        from codedojo.inference.checkpoints import read_safetensors

        state = await to_thread(read_safetensors, Path(path))
        return await self.update_weights(state, abort_running=abort_running)

    async def call(self, fn: Callable[[Scheduler], Any]) -> Any:
        """Run fn(scheduler) on the worker thread between steps and return its result."""
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._post(_Call(fn, deliver_to(loop, future)))
        return await future

    async def stats(self) -> dict[str, Any]:
        def read(s: Scheduler) -> dict[str, Any]:
            return {
                "weight_version": s.weight_version,
                "running": len(s.rows),
                "waiting": len(s.waiting),
                "sessions": len(s.sessions),
                "parked_sessions": [sid for sid, x in s.sessions.items() if x.parked is not None],
                "parked_tokens": s.parked_tokens,
                "kv_allocated_tokens": s.cache.allocated_tokens,
                "kv_budget_tokens": s.kv_budget_tokens,
                "kv_peak_tokens": s.kv_peak_tokens,
                "kv_bytes_per_token": s.cache.shape.bytes_per_token,
                "prefix_cache": s.prefix_cache,
                "prefix_cache_entries": len(s.cached),
                "prefix_cache_tokens": sum(len(e.tokens) for e in s.cached),
                "paused": self.paused,
                "step_seconds": s.step_seconds,
                "prefill_step_seconds": s.prefill_step_seconds,
                "idle_seconds": self.idle_seconds,
                **s.counters,
            }

        return await self.call(read)

    async def close(self) -> None:
        with self._post_lock:
            if self._closed:
                return
            self._closed = True
            self._inbox.put(_Close())
        await asyncio.to_thread(self._worker.join)

    # ----- request preparation (caller's thread) --------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("the engine is closed")

    def _post(self, command: Any) -> None:
        with self._post_lock:
            self._check_open()
            self._inbox.put(command)

    def validate_request(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None
    ) -> list[int]:
        """The prompt as ints, or the error `generate` would raise for this request (a closed engine, bad
        params or session id, token ids outside the vocabulary, a prompt that fills the context)."""
        self._check_open()
        if not isinstance(params, SamplingParams):
            raise InvalidRequestError(f"params must be a SamplingParams, got {type(params).__name__}")
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise InvalidRequestError(f"session_id must be a non-empty string or None, got {session_id!r}")
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise InvalidRequestError("prompt_ids is empty")
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise InvalidRequestError(f"token ids outside the vocabulary [0, {vocab}): {bad[:5]}")
        if len(prompt) >= self.max_context:
            # The first sentence is what litellm (and other OpenAI clients) recognise as a context overflow.
            raise ContextLengthError(
                f"This model's maximum context length is {self.max_context} tokens, and the prompt has "
                f"{len(prompt)} tokens, which leaves no room to generate: shorten the prompt or messages",
                param="messages",
            )
        return prompt

    def _request(
        self, prompt: list[int], params: SamplingParams, session_id: str | None, deliver: Any, *,
        rid: str | None = None, on_token: Callable[[int, float, tuple[tuple[int, float], ...]], None] | None = None,
    ) -> Request:
        seed = params.seed if params.seed is not None else int(torch.randint(2**62, (), generator=self._seeds))
        generator = torch.Generator().manual_seed(seed) if params.temperature > 0 else None
        stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else set(self._eos))
        return Request(
            prompt=prompt,
            params=params,
            session_id=session_id,
            max_new_tokens=min(params.max_new_tokens, self.max_context - len(prompt)),
            stop_token_ids=frozenset(stop_ids),
            stop_strings=StopStrings(self.tokenizer, params.stop) if params.stop else None,
            sampling=RowSampling(
                temperature=params.temperature, top_k=params.top_k, top_p=params.top_p, generator=generator
            ),
            deliver=deliver,
            rid=rid,
            on_token=on_token,
        )

    # ----- the worker thread ----------------------------------------------------------------------

    def _run(self) -> None:
        scheduler = self.scheduler
        update: _UpdateWeights | None = None
        while True:
            # Block for commands when there is nothing to step, unless a weight update can be applied now.
            idle = (self.paused or not scheduler.has_work()) and (update is None or bool(scheduler.rows))
            for command in self._drain(block=idle):
                if isinstance(command, _Close):
                    scheduler.abort_all(EngineClosedError("the engine was closed while the request ran"))
                    if update is not None:
                        update.done(EngineClosedError("the engine was closed before the weight update"))
                    return
                if isinstance(command, Request):
                    scheduler.submit(command)
                elif isinstance(command, _EndSession):
                    try:
                        scheduler.end_session(command.session_id)
                        command.done(None)
                    except InferenceError as error:
                        command.done(error)
                elif isinstance(command, _Control):
                    command.done(self._apply(command))
                elif isinstance(command, _Call):
                    try:
                        command.done(command.fn(scheduler))
                    except Exception as error:
                        command.done(error)
                elif isinstance(command, _UpdateWeights):
                    if update is not None:
                        update.done(InvalidRequestError("superseded by a newer weight update"))
                    update = command
                    if command.abort_running:
                        for request in scheduler.rows:
                            request.cancelled = True
                        scheduler.drop_cancelled()  # now: a paused engine takes no step that would
            if update is not None and scheduler.rows and self.paused:
                # Paused rows never step, so they never finish: waiting for them would hang the update.
                update.done(InvalidRequestError(
                    f"cannot update weights while generation is paused (mode {self.pause_mode!r}) with "
                    f"{len(scheduler.rows)} request(s) kept in place: continue generation first, pause with "
                    "mode 'abort', or abort them with the update (abort_all_requests / abort_running)"
                ))
                update = None
            if update is not None and not scheduler.rows:
                try:
                    update.done(scheduler.load_weights(update.state, strict=update.strict))
                except Exception as error:
                    update.done(error)
                update = None
            if scheduler.has_work() and not self.paused:
                try:
                    scheduler.step(admit=update is None)
                except Exception as error:  # a bug or out of memory: fail the batch, keep serving
                    failure = InferenceError(f"engine step failed: {type(error).__name__}: {error}")
                    failure.__cause__ = error
                    scheduler.abort_all(failure)

    def _apply(self, command: _Control) -> Any:
        scheduler = self.scheduler
        if command.kind == "abort":
            marked = scheduler.abort(rid=command.rid)
            scheduler.drop_cancelled()  # now, not at the next step: that may be after a pause
            return marked
        if command.kind == "pause":
            if command.mode == "abort":
                scheduler.abort()
                scheduler.drop_cancelled()
            self.paused, self.pause_mode = True, command.mode
            return None
        if command.kind == "resume":
            self.paused, self.pause_mode = False, None
            return None
        if command.kind == "flush":
            return not scheduler.has_work() and scheduler.flush()
        raise AssertionError(command.kind)

    def _drain(self, *, block: bool) -> list[Any]:
        commands = [self._wait()] if block else []
        while True:
            try:
                commands.append(self._inbox.get_nowait())
            except queue.Empty:
                return commands

    def _wait(self) -> Any:
        """The next command; the worker frees its OpenMP pool if none comes within IDLE_RELEASE_SECONDS."""
        started = time.perf_counter()
        try:
            return self._inbox.get(timeout=IDLE_RELEASE_SECONDS)
        except queue.Empty:
            release_omp_threads()
            return self._inbox.get()
        finally:
            self.idle_seconds += time.perf_counter() - started


def deliver_to(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> Callable[[Any], None]:
    """A thread-safe callback that settles `future` with a value or an exception."""

    def settle(outcome: Any) -> None:
        if future.done():
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def deliver(outcome: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:
            pass  # the caller's event loop is gone; nobody is waiting

    return deliver
