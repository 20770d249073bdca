"""The generate hook's side of SGLang: one shared HTTP client per event loop, the served tokenizer loaded
once, and each episode's view of the client, which routes by the sample's session id and stops the
episode as soon as slime aborts the rollout.

slime's abort (`sglang_rollout.abort`, when a step has enough groups or engines pause for a weight
update) posts abort_request to every engine and then waits for every pending generate call, so an
episode must end promptly: a reply that comes back with finish_reason "abort", or slime's own abort
flag (checked before every request when slime is importable), raises `EpisodeAborted`.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from codedojo.inference.client import HTTPEngine
from codedojo.inference.errors import InferenceError
from codedojo.inference.protocol import Completion, SamplingParams

# One HTTP client per (event loop, router, tokenizer): aiohttp sessions belong to the loop that made them.
_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int, float], HTTPEngine]] = (
    weakref.WeakKeyDictionary())


class EpisodeAborted(InferenceError):
    """slime aborted the rollout while this episode was running."""


class SessionEngine:
    """One episode's view of the shared client: every request carries the sample's routing key.

    The agent loop names its own session ids; slime routes by `sample.session_id` (X-SMG-Routing-Key),
    so the key is replaced here rather than threaded through the loop."""

    def __init__(self, engine: HTTPEngine, *, routing_key: str,
                 slime_aborted: Callable[[], bool] = lambda: False) -> None:
        self.engine = engine
        self.routing_key = routing_key
        self.tokenizer = engine.tokenizer
        self.slime_aborted = slime_aborted
        self.aborted = False

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session_id: str | None = None) -> Completion:
        if self.aborted or self.slime_aborted():
            self.aborted = True
            raise EpisodeAborted("slime aborted the rollout")
        completion = await self.engine.generate(prompt_ids, params, session_id=self.routing_key)
        if completion.finish_reason == "abort":
            self.aborted = True
            raise EpisodeAborted("the engine aborted the request (slime's abort or a weight update)")
        return completion

    async def end_session(self, session_id: str) -> None:
        await self.engine.end_session(self.routing_key)

    async def update_weights(self, state: Mapping[str, Any]) -> int:
        raise NotImplementedError("slime pushes the weights to its SGLang engines itself")

    async def flush_cache(self) -> bool:
        """The SGLang servers' caches are slime's to manage (it flushes them around weight updates)."""
        return False

    async def close(self) -> None:
        """The client is shared by every episode of this event loop; `close_clients` closes it."""


def shared_client(url: str, *, tokenizer: Any, timeout_sec: float) -> HTTPEngine:
    """This event loop's client for `url`."""
    per_loop = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    key = (url, id(tokenizer), timeout_sec)
    if key not in per_loop:
        per_loop[key] = HTTPEngine(url, tokenizer=tokenizer, flavor="sglang", timeout_s=timeout_sec)
    return per_loop[key]


async def close_clients() -> None:
    """Close this event loop's HTTP clients (slime's process simply exits; tests call this)."""
    for client in _CLIENTS.pop(asyncio.get_running_loop(), {}).values():
        await client.close()


async def load_tokenizer(name: str) -> Any:
    """The served model's tokenizer, loaded once per process and off the event loop (loading one per
    sample blocked the loop in a slime fork's multi-agent example)."""
    if name not in _TOKENIZERS:
        await asyncio.to_thread(_load_tokenizer, name)
    return _TOKENIZERS[name]


_TOKENIZERS: dict[str, Any] = {}
# One load at a time: concurrent first imports of transformers from several threads race in its lazy
# module machinery, and a second load of the same tokenizer is wasted work.
_TOKENIZER_LOCK = threading.Lock()


def _load_tokenizer(name: str) -> None:
    from codedojo.inference.errors import UnknownModelError
    from codedojo.inference.specs import resolve_model

    with _TOKENIZER_LOCK:
        if name in _TOKENIZERS:
            return
        try:
            _TOKENIZERS[name] = resolve_model(name).load_tokenizer()
        except UnknownModelError:  # a hub id slime downloads itself: load it the way slime does
            from transformers import AutoTokenizer

            _TOKENIZERS[name] = AutoTokenizer.from_pretrained(name, trust_remote_code=True)


def slime_abort_flag(args: Any) -> Callable[[], bool]:
    """slime's rollout-wide abort flag (GenerateState(args).aborted), or never-aborted outside slime."""
    try:
        from slime.rollout.sglang_rollout import GenerateState
    except ImportError:
        return lambda: False
    state = GenerateState(args)
    return lambda: bool(getattr(state, "aborted", False))
