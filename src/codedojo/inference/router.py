"""`SessionRouter`: one `Engine` over N engines, a session's turns always on the same one.

Sessions are placed by consistent hashing on the session id (each engine owns many points on a hash
ring), so every turn of an episode reaches the engine that holds its KV cache, and adding or removing
an engine moves only about 1/N of the sessions. Requests without a session go round-robin. This is the
in-process counterpart of SGLang's router with `--policy consistent_hashing` (keyed on the
X-SMG-Routing-Key header, which `HTTPEngine` also sends).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from codedojo.inference.errors import InvalidRequestError
from codedojo.inference.protocol import Completion, Engine, SamplingParams


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class SessionRouter:
    def __init__(self, engines: Sequence[Engine], *, names: Sequence[str] | None = None, points: int = 64) -> None:
        """names identify engines on the ring (default: repr of each engine, e.g. its URL)."""
        if not engines:
            raise InvalidRequestError("SessionRouter needs at least one engine")
        self.engines = list(engines)
        keys = list(names) if names is not None else [repr(e) for e in self.engines]
        if len(set(keys)) != len(keys):
            raise InvalidRequestError(f"engine names must be distinct, got {keys}")
        ring = sorted((_hash(f"{key}#{i}"), index) for index, key in enumerate(keys) for i in range(points))
        self._ring_hashes = [h for h, _ in ring]
        self._ring_engines = [index for _, index in ring]
        self._round_robin = itertools.cycle(range(len(self.engines)))
        self.tokenizer: Any = self.engines[0].tokenizer

    def engine_index(self, session_id: str) -> int:
        """The engine that owns session_id: the first ring point clockwise of its hash."""
        at = bisect.bisect_right(self._ring_hashes, _hash(session_id)) % len(self._ring_hashes)
        return self._ring_engines[at]

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None
    ) -> Completion:
        index = next(self._round_robin) if session_id is None else self.engine_index(session_id)
        return await self.engines[index].generate(prompt_ids, params, session_id=session_id)

    async def end_session(self, session_id: str) -> None:
        await self.engines[self.engine_index(session_id)].end_session(session_id)

    async def update_weights(self, state: Mapping[str, Any]) -> int:
        """Every engine gets the weights; returns the lowest of their new versions."""
        return min([await engine.update_weights(state) for engine in self.engines])

    async def flush_cache(self) -> bool:
        """Every engine drops its cache; True only if all of them did."""
        return all([await engine.flush_cache() for engine in self.engines])

    async def close(self) -> None:
        for engine in self.engines:
            await engine.close()
