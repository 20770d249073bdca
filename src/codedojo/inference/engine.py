"""`LocalEngine`: the in-process engine. Many asyncio tasks call `generate`; one worker thread batches
them (continuous batching: requests join and leave the running batch between forward steps).

Threading: the event loop thread only validates requests and posts commands to the worker's queue; the
worker owns the scheduler, the model and the KV cache, and hands results back with
`loop.call_soon_threadsafe`. torch releases the GIL inside its kernels, so an aiohttp server on the
same event loop stays responsive while the worker computes.

Weight updates wait until the running requests finish (new requests queue meanwhile, as slime does
before a sync), or abort them with `abort_running=True`; then every cached KV is dropped and
`weight_version` goes up by one.
"""

from __future__ import annotations

import asyncio
import queue
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from codedojo.inference.errors import (
    ContextLengthError,
    EngineClosedError,
    InferenceError,
    InvalidRequestError,
)
from codedojo.inference.protocol import Completion, SamplingParams, eos_token_ids
from codedojo.inference.sampler import RowSampling
from codedojo.inference.scheduler import Request, Scheduler
from codedojo.inference.stopping import StopStrings
from codedojo.inference.transformer import Transformer

# Without an explicit budget: this share of the device's memory (CPU: RAM) holds KV, at most 8 GiB.
DEFAULT_KV_MEMORY_FRACTION = 0.25
DEFAULT_KV_MEMORY_CAP = 8 << 30


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


class _Close:
    pass


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
        kv_budget_tokens: int | None = None,
        max_running: int = 64,
        max_step_tokens: int = 1024,
        seed: int | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.kv_budget_tokens = kv_budget_tokens or default_kv_budget_tokens(model)
        self.scheduler = Scheduler(
            model, kv_budget_tokens=self.kv_budget_tokens, max_running=max_running, max_step_tokens=max_step_tokens
        )
        self._eos = frozenset(eos_token_ids(tokenizer))
        self._seeds = torch.Generator().manual_seed(secrets.randbits(62) if seed is None else seed)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._post_lock = threading.Lock()  # nothing is posted after _Close, so nothing waits forever
        self._worker = threading.Thread(target=self._run, name="codedojo-engine", daemon=True)
        self._worker.start()

    @classmethod
    def from_spec(
        cls,
        spec: Any,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        **engine_options: Any,
    ) -> LocalEngine:
        """Load a model spec (or a name `resolve_model` knows) and wrap it in an engine."""
        from codedojo.inference.specs import resolve_model

        loaded = resolve_model(spec).load(device=device, dtype=dtype)
        return cls(loaded.engine_model(), loaded.tokenizer, **engine_options)

    # ----- the Engine protocol --------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self.scheduler.weight_version

    @property
    def max_context(self) -> int:
        return self.model.config.max_positions

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None
    ) -> Completion:
        self._check_open()
        prompt = self._validate(prompt_ids, params, session_id)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Completion] = loop.create_future()
        request = self._request(prompt, params, session_id, _deliver_to(loop, future))
        self._post(request)
        try:
            return await future
        except asyncio.CancelledError:
            request.cancelled = True  # the worker drops the row at its next step
            raise

    async def end_session(self, session_id: str) -> None:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._post(_EndSession(session_id, _deliver_to(loop, future)))
        await future

    async def update_weights(
        self, state: Mapping[str, torch.Tensor], *, strict: bool = True, abort_running: bool = False
    ) -> int:
        """Load HF-named weights (e.g. a trainer's `model.state_dict()`); returns the new weight_version.

        strict=False allows a partial update. Running requests finish first unless abort_running, which
        ends them with finish_reason "abort".
        """
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        self._post(_UpdateWeights(state, strict, abort_running, _deliver_to(loop, future)))
        return await future

    async def load_weights_from_disk(self, path: str | Path, *, abort_running: bool = False) -> int:
        """Load the safetensors files of an HF folder (what a trainer's save_pretrained writes)."""
        from codedojo.inference.checkpoints import read_safetensors

        state = await asyncio.to_thread(read_safetensors, Path(path))
        return await self.update_weights(state, abort_running=abort_running)

    async def call(self, fn: Callable[[Scheduler], Any]) -> Any:
        """Run fn(scheduler) on the worker thread between steps and return its result."""
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._post(_Call(fn, _deliver_to(loop, future)))
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

    def _validate(self, prompt_ids: Sequence[int], params: SamplingParams, session_id: str | None) -> list[int]:
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
            raise ContextLengthError(
                f"prompt of {len(prompt)} tokens leaves no room to generate within the model's context "
                f"of {self.max_context} tokens"
            )
        return prompt

    def _request(self, prompt: list[int], params: SamplingParams, session_id: str | None, deliver: Any) -> Request:
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
        )

    # ----- the worker thread ----------------------------------------------------------------------

    def _run(self) -> None:
        scheduler = self.scheduler
        update: _UpdateWeights | None = None
        while True:
            idle = not scheduler.has_work() and update is None
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
            if update is not None and not scheduler.rows:
                try:
                    update.done(scheduler.load_weights(update.state, strict=update.strict))
                except Exception as error:
                    update.done(error)
                update = None
            if scheduler.has_work():
                try:
                    scheduler.step(admit=update is None)
                except Exception as error:  # a bug or out of memory: fail the batch, keep serving
                    failure = InferenceError(f"engine step failed: {type(error).__name__}: {error}")
                    failure.__cause__ = error
                    scheduler.abort_all(failure)

    def _drain(self, *, block: bool) -> list[Any]:
        commands = [self._inbox.get()] if block else []
        while True:
            try:
                commands.append(self._inbox.get_nowait())
            except queue.Empty:
                return commands


def _deliver_to(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> Callable[[Any], None]:
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
