"""Training against a served engine (`codedojo train --engine-url URL`): the local trainer samples over HTTP
from a `codedojo serve` (or SGLang) server on the same machine and hands it each step's weights through disk.

The server is another process: it may die and be restarted (a crash, its supervisor) while the trainer runs,
and a restarted server holds its initial weights, not the trainer's. `ServedEngine` keeps three promises:

* a request refused or cut off by a dead server waits for the server's /health (up to `reconnect_timeout_s`)
  and runs again: a generation is a function of the weights, the prompt and its seed, so the repeat gives
  what the first would have, and the episode goes on instead of failing;
* every completion names the weight version it was sampled with; one the trainer did not load (a restarted
  server's own) makes it load the trainer's latest weights again and repeat the request, so no episode is
  sampled by weights other than the trainer's;
* completions carry the trainer's version of the weights (its loads so far), not the server's counter, which
  a reload after a restart moves without changing the weights (`async/versions_in_batch` stays 1);
* the weights go through one file (`<weights_dir>/model.safetensors`, written aside and renamed), so the
  latest complete weights are always there to load again.

The server must read the trainer's disk (`update_weights_from_disk` takes a path), as SGLang's does.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from codedojo.inference.client import HTTPEngine
from codedojo.inference.errors import EngineUnavailableError
from codedojo.inference.protocol import Completion, Engine, SamplingParams
from codedojo.inference.specs import LoadedModel
from codedojo.threads import to_thread

RECONNECT_TIMEOUT_S = 300.0
"""How long a request waits for a dead server to come back before the episode fails (ENGINE_ERROR)."""


MAX_STALE_REPLIES = 3
"""Replies sampled with other weights than the trainer's that one request sets right (by loading the trainer's
again) before it fails; a dead server's refusals do not count, only its deadline does."""


class ServedEngine:
    """An `Engine` over an HTTP server whose weights the trainer sets (see the module docstring)."""

    def __init__(self, client: HTTPEngine, *, weights_dir: Path, tied_head: bool = False,
                 reconnect_timeout_s: float = RECONNECT_TIMEOUT_S) -> None:
        self.client = client
        self.tokenizer = client.tokenizer
        self.weights_dir = Path(weights_dir).resolve()
        self.tied_head = tied_head
        self.reconnect_timeout_s = reconnect_timeout_s
        self.version: int | None = None
        """The server's weight version after the trainer's latest load; None before the first."""
        self.loads = 0
        """Weights the trainer has handed over: the version its completions report."""
        self.reloads = 0
        """Loads of the same weights again, after the server came back without them."""
        self._lock = asyncio.Lock()

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session_id: str | None = None) -> Completion:
        deadline = time.monotonic() + self.reconnect_timeout_s
        stale = 0
        while True:
            expected = self.version
            try:
                completion = await self.client.generate(prompt_ids, params, session_id=session_id)
            except EngineUnavailableError:
                await self._restore(expected, deadline=deadline)
                continue
            if expected is None or completion.weight_version == expected:
                return replace(completion, weight_version=self.loads)
            stale += 1
            if stale > MAX_STALE_REPLIES:
                break
            await self._restore(expected, deadline=deadline)  # sampled by a restarted server's own weights
        raise EngineUnavailableError(
            f"{self.client.base_url} kept sampling with weight version {completion.weight_version}, not the "
            f"trainer's {self.version}, after loading the trainer's weights again (another process loading weights "
            "into the same server?)")

    async def end_session(self, session_id: str) -> None:
        try:
            await self.client.end_session(session_id)
        except EngineUnavailableError:
            pass  # a restarted server holds no session

    async def update_weights(self, state: Mapping[str, Any]) -> int:
        """Write `state` (HF names) to the weights file and have the server load it; waits for a dead server."""
        await to_thread(self._write, state)
        async with self._lock:
            self.version = await self._load(deadline=time.monotonic() + self.reconnect_timeout_s)
            self.loads += 1
        return self.loads

    async def flush_cache(self) -> bool:
        try:
            return await self.client.flush_cache()
        except EngineUnavailableError:
            return False  # nothing to drop on a server that is gone

    async def close(self) -> None:
        await self.client.close()

    # ----- the server's comings and goings -----------------------------------------------------------

    async def _restore(self, expected: int | None, *, deadline: float) -> None:
        """After a failed or stale request: wait for the server, and load the trainer's weights again unless
        the server still holds them (or another request has loaded them since `expected` was read)."""
        async with self._lock:
            serving = await self._serving_version(deadline)
            if self.version is None or self.version != expected or serving == self.version:
                return
            self.version = await self._load(deadline=deadline)
            self.reloads += 1

    async def _serving_version(self, deadline: float) -> int:
        """The weight version of the server once /health answers; EngineUnavailableError past `deadline`."""
        delay = 0.05
        while True:
            try:
                health = await self.client.health()
            except EngineUnavailableError as error:
                if time.monotonic() + delay > deadline:
                    raise EngineUnavailableError(
                        f"{self.client.base_url} did not come back within {self.reconnect_timeout_s:g} s: {error}"
                    ) from error
            else:
                version = str(health.get("weight_version")) if isinstance(health, dict) else ""
                return int(version) if version.isdigit() else -1  # -1: a label, not codedojo serve's counter
            await asyncio.sleep(delay)  # the server is restarting: poll its /health until the deadline
            delay = min(delay * 2, 2.0)

    async def _load(self, *, deadline: float) -> int:
        while True:
            await self._serving_version(deadline)
            try:
                return await self.client.update_weights_from_disk(str(self.weights_dir))
            except EngineUnavailableError:
                continue  # it died again while loading: wait for it once more

    def _write(self, state: Mapping[str, Any]) -> None:
        from safetensors.torch import save_file

        tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()
                   if not (self.tied_head and k == "lm_head.weight")}
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        part = self.weights_dir / "model.safetensors.part"  # not *.safetensors: the server never reads it
        save_file(tensors, str(part))
        os.replace(part, self.weights_dir / "model.safetensors")


def served_engine_factory(url: str, *, weights_dir: Path,
                          reconnect_timeout_s: float = RECONNECT_TIMEOUT_S) -> Any:
    """The trainer's `EngineFactory` for a server at `url`: it loads the model's initial weights first, since
    the server may hold another run's (or a killed run's later) weights."""

    async def open_engine(loaded: LoadedModel) -> Engine:
        engine = ServedEngine(HTTPEngine(url, tokenizer=loaded.tokenizer), weights_dir=weights_dir,
                              tied_head=bool(getattr(loaded.hf_config, "tie_word_embeddings", False)),
                              reconnect_timeout_s=reconnect_timeout_s)
        with torch.no_grad():
            await engine.update_weights(loaded.state_dict)
        return engine

    return open_engine
