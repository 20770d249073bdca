"""Consistent hashing in `SessionRouter`, with in-process fake engines."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest

from codedojo.inference import Completion, InvalidRequestError, SamplingParams, SessionRouter


class Recorder:
    """A fake engine that records which sessions reached it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tokenizer = None
        self.seen: list[str | None] = []
        self.ended: list[str] = []
        self.version = 0
        self.loaded: list[object] = []
        self.flushed = 0

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None):
        self.seen.append(session_id)
        return Completion(token_ids=(1,), logprobs=(0.0,), finish_reason="stop", prompt_tokens=len(prompt_ids),
                          cached_tokens=0, weight_version=0)

    async def end_session(self, session_id: str) -> None:
        self.ended.append(session_id)

    async def update_weights(self, state: object) -> int:
        self.loaded.append(state)
        self.version += 1
        return self.version

    async def flush_cache(self) -> bool:
        self.flushed += 1
        return True

    async def close(self) -> None:
        pass


def test_a_session_always_reaches_the_same_engine_and_load_spreads() -> None:
    engines = [Recorder(f"e{i}") for i in range(4)]
    router = SessionRouter(engines, names=[e.name for e in engines])
    sessions = [f"s{i}" for i in range(2000)]

    async def run():
        for _ in range(2):
            for sid in sessions:
                await router.generate([1, 2], SamplingParams(), session_id=sid)
            await router.end_session(sessions[0])

    asyncio.run(run())
    for engine in engines:
        for sid in set(engine.seen):
            assert router.engine_index(sid) == engines.index(engine)
    load = Counter(router.engine_index(s) for s in sessions)
    assert min(load.values()) > 0.15 * len(sessions)  # 64 points per engine keep the spread even
    owner = engines[router.engine_index(sessions[0])]
    assert owner.ended == [sessions[0], sessions[0]]


def test_adding_an_engine_moves_only_its_share_of_sessions() -> None:
    names = [f"http://10.0.0.{i}:30000" for i in range(4)]
    before = SessionRouter([Recorder(n) for n in names], names=names)
    after = SessionRouter([Recorder(n) for n in [*names, "http://10.0.0.9:30000"]],
                          names=[*names, "http://10.0.0.9:30000"])
    sessions = [f"episode-{i}" for i in range(5000)]
    moved = [s for s in sessions if before.engine_index(s) != after.engine_index(s)]
    assert all(after.engine_index(s) == 4 for s in moved)  # only onto the new engine
    assert 0.1 < len(moved) / len(sessions) < 0.3


def test_sessionless_requests_go_round_robin_and_bad_setups_fail() -> None:
    engines = [Recorder("a"), Recorder("b")]
    router = SessionRouter(engines, names=["a", "b"])

    async def run():
        for _ in range(4):
            await router.generate([1], SamplingParams())

    asyncio.run(run())
    assert [len(e.seen) for e in engines] == [2, 2]
    with pytest.raises(InvalidRequestError):
        SessionRouter([])
    with pytest.raises(InvalidRequestError, match="distinct"):
        SessionRouter(engines, names=["x", "x"])


def test_weights_reach_every_engine_and_the_scripted_policy_ignores_them() -> None:
    from codedojo.agent.scripted import ScriptedPolicy
    from codedojo.inference.client import HTTPEngine

    engines = [Recorder(f"e{i}") for i in range(3)]
    engines[1].version = 4  # an engine that has seen more updates
    router = SessionRouter(engines, names=[e.name for e in engines])
    state = {"w": 1.0}
    assert asyncio.run(router.update_weights(state)) == 1  # the lowest new version
    assert [e.loaded for e in engines] == [[state]] * 3 and [e.version for e in engines] == [1, 5, 1]
    assert asyncio.run(ScriptedPolicy(None, ["hi"]).update_weights(state)) == 0
    with pytest.raises(NotImplementedError, match="update_weights_from_disk"):
        asyncio.run(HTTPEngine("http://127.0.0.1:9", tokenizer=None).update_weights(state))


def test_a_flush_reaches_every_engine() -> None:
    engines = [Recorder(f"e{i}") for i in range(3)]
    assert asyncio.run(SessionRouter(engines, names=[e.name for e in engines]).flush_cache()) is True
    assert [e.flushed for e in engines] == [1, 1, 1]
