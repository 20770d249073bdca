"""The local engine on tiny random models: logprob exactness, seeds, KV reuse across turns, group prefix
sharing, eviction, stops, weight updates, cancellation and clear errors.

Tests that act on a running request (a busy session, a cancellation, a weight update, a pause, a close) hold
the engine's worker behind a StepGate (tests/engine_gate.py): the request has taken exactly the steps the
test allowed when the command arrives, on any CPU, instead of however many fit in a sleep."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest
import torch

from codedojo.inference import (
    ContextLengthError,
    EngineClosedError,
    InvalidRequestError,
    LocalEngine,
    SamplingParams,
    SessionBusyError,
    TinyModel,
    UnknownSessionError,
    sequence_logprobs,
)
from codedojo.inference.specs import LoadedModel
from engine_gate import StepGate


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def loaded(request: pytest.FixtureRequest) -> LoadedModel:
    return TinyModel(architecture=request.param, max_positions=512).load()


@pytest.fixture(scope="module")
def hf(loaded: LoadedModel):
    return loaded.hf_model()


@pytest.fixture
def engine(loaded: LoadedModel) -> Iterator[LocalEngine]:
    engine = LocalEngine(loaded.engine_model(), loaded.tokenizer, kv_budget_tokens=1 << 16, seed=0)
    yield engine
    asyncio.run(engine.close())


def prompt_of(n: int, *, seed: int) -> list[int]:
    return torch.randint(5, 261, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def assert_logprobs_exact(hf, prompt: list[int], out, temperature: float) -> None:
    reference = sequence_logprobs(hf, prompt + list(out.token_ids), temperature=temperature)[len(prompt) - 1 :]
    assert len(out.logprobs) == len(out.token_ids) == len(reference)
    assert (reference - torch.tensor(out.logprobs)).abs().max().item() <= 1e-4


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, max_new_tokens=24, ignore_eos=True),
        SamplingParams(temperature=0.7, top_k=20, top_p=0.8, max_new_tokens=24, ignore_eos=True),
        SamplingParams(temperature=0.0, max_new_tokens=24, ignore_eos=True),
    ],
    ids=["t1", "t0.7-topk-topp", "greedy"],
)
def test_logprobs_match_a_full_forward_in_a_ragged_batch(engine: LocalEngine, hf, params: SamplingParams) -> None:
    prompts = [prompt_of(n, seed=n) for n in (5, 40, 90, 23)]

    async def run():
        return await asyncio.gather(*[engine.generate(p, params) for p in prompts])

    for prompt, out in zip(prompts, asyncio.run(run()), strict=True):
        assert out.finish_reason == "length" and len(out.token_ids) == 24
        assert_logprobs_exact(hf, prompt, out, params.temperature)


def test_same_seed_same_tokens_whatever_shares_the_batch(engine: LocalEngine) -> None:
    prompt = prompt_of(30, seed=1)
    params = SamplingParams(temperature=1.0, max_new_tokens=20, seed=1234, ignore_eos=True)

    async def run():
        alone = await engine.generate(prompt, params)
        crowd = await asyncio.gather(
            engine.generate(prompt, params),
            *[engine.generate(prompt_of(n, seed=n), SamplingParams(max_new_tokens=20)) for n in (7, 50)],
        )
        other_seed = await engine.generate(prompt, SamplingParams(max_new_tokens=20, seed=99, ignore_eos=True))
        return alone, crowd[0], other_seed

    alone, crowded, other = asyncio.run(run())
    assert alone.token_ids == crowded.token_ids
    assert alone.logprobs == pytest.approx(crowded.logprobs, abs=1e-5)
    assert other.token_ids != alone.token_ids


def test_session_turns_reuse_kv_and_stay_exact(engine: LocalEngine, hf) -> None:
    params = SamplingParams(temperature=0.8, max_new_tokens=16, ignore_eos=True)

    async def run():
        history = prompt_of(50, seed=2)
        turns = []
        for turn in range(3):
            out = await engine.generate(history, params, session_id="ep")
            turns.append((list(history), out))
            history = history + list(out.token_ids) + prompt_of(20, seed=10 + turn)
        return turns

    turns = asyncio.run(run())
    assert turns[0][1].cached_tokens == 0
    for (prev_prompt, prev), (prompt, out) in itertools.pairwise(turns):
        # Everything but the newest sampled token (not yet fed back) was kept.
        assert out.cached_tokens == len(prev_prompt) + len(prev.token_ids) - 1
        assert out.prompt_tokens == len(prompt)
    for prompt, out in turns:
        assert_logprobs_exact(hf, prompt, out, 0.8)


def test_diverging_history_recomputes_from_the_common_prefix(engine: LocalEngine, hf) -> None:
    params = SamplingParams(temperature=0.0, max_new_tokens=8, ignore_eos=True)

    async def run():
        first = prompt_of(40, seed=3)
        await engine.generate(first, params, session_id="s")
        edited = first[:25] + prompt_of(10, seed=4)  # the agent loop rewrote history after token 25
        return edited, await engine.generate(edited, params, session_id="s")

    edited, out = asyncio.run(run())
    assert out.cached_tokens == 25
    assert_logprobs_exact(hf, edited, out, 0.0)


def test_group_prefills_a_shared_prompt_once(engine: LocalEngine) -> None:
    prompt = prompt_of(120, seed=5)
    params = SamplingParams(temperature=1.0, max_new_tokens=4, ignore_eos=True)

    async def run():
        outs = await asyncio.gather(*[engine.generate(prompt, params, session_id=f"g{i}") for i in range(8)])
        return outs, await engine.stats()

    outs, stats = asyncio.run(run())
    assert sorted(o.cached_tokens for o in outs) == [0] + [119] * 7
    assert stats["prefill_tokens"] == 120 + 7


def test_stats_say_where_the_engine_time_went(loaded: LoadedModel) -> None:
    engine = LocalEngine(loaded.engine_model(), loaded.tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=6, ignore_eos=True)

    async def run():
        await engine.generate(prompt_of(40, seed=8), params)
        first = await engine.stats()
        second = await engine.stats()  # between the two the worker waited with nothing to step
        await engine.close()
        return first, second

    first, second = asyncio.run(run())
    assert first["steps"] == 6 and first["prefill_tokens"] == 40 and first["decode_tokens"] == 5
    assert first["decode_steps"] == 5
    # one prefill step, then five decode-only steps: both kinds took time, and the split adds up
    assert 0 < first["prefill_step_seconds"] < first["step_seconds"]
    assert second["step_seconds"] == first["step_seconds"]
    assert second["idle_seconds"] > first["idle_seconds"] >= 0


def test_evicted_sessions_are_recomputed_transparently(loaded: LoadedModel, hf) -> None:
    # A budget of 4 rows x 256 positions leaves no room to park anything while a row is allocated.
    engine = LocalEngine(loaded.engine_model(), loaded.tokenizer, kv_budget_tokens=1100)
    params = SamplingParams(temperature=0.0, max_new_tokens=6, ignore_eos=True)

    async def run():
        a, b = prompt_of(60, seed=6), prompt_of(60, seed=7)
        first_a = await engine.generate(a, params, session_id="a")
        await engine.generate(b, params, session_id="b")
        again = a + list(first_a.token_ids) + [9, 10, 11]
        out = await engine.generate(again, params, session_id="a")
        stats = await engine.stats()
        await engine.end_session("a")  # an evicted session is still known
        await engine.close()
        return again, out, stats

    again, out, stats = asyncio.run(run())
    assert stats["evictions"] >= 1
    assert stats["parked_tokens"] + stats["kv_allocated_tokens"] <= 1100
    assert out.cached_tokens == 0
    assert_logprobs_exact(hf, again, out, 0.0)


def test_stop_token_ids_stop_strings_and_eos(engine: LocalEngine) -> None:
    tokenizer = engine.tokenizer
    prompt = prompt_of(20, seed=8)

    async def run():
        free = await engine.generate(prompt, SamplingParams(temperature=0.0, max_new_tokens=40, ignore_eos=True))
        target = free.token_ids[5]
        by_id = await engine.generate(
            prompt, SamplingParams(temperature=0.0, max_new_tokens=40, stop_token_ids=(target,), ignore_eos=True)
        )
        text = tokenizer.decode(list(free.token_ids[:8]))
        by_string = await engine.generate(
            prompt, SamplingParams(temperature=0.0, max_new_tokens=40, stop=(text[-2:],), ignore_eos=True)
        )
        return free, target, by_id, by_string

    free, target, by_id, by_string = asyncio.run(run())
    first = free.token_ids.index(target)
    assert by_id.finish_reason == "stop" and by_id.token_ids == free.token_ids[: first + 1]
    assert by_string.finish_reason == "stop" and len(by_string.token_ids) <= 8
    assert free.token_ids[: len(by_string.token_ids)] == by_string.token_ids


def test_eos_ends_the_turn_unless_ignored(loaded: LoadedModel) -> None:
    prompt = prompt_of(10, seed=9)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)

    async def first_greedy_tokens(tokenizer) -> tuple[int, ...]:
        engine = LocalEngine(loaded.engine_model(), tokenizer, kv_budget_tokens=1 << 16)
        out = await engine.generate(prompt, SamplingParams(temperature=0.0, max_new_tokens=10, ignore_eos=True))
        await engine.close()
        return out.token_ids

    async def run():
        tokens = await first_greedy_tokens(loaded.tokenizer)
        # A tokenizer whose eos is the 4th greedy token: the turn must end right there.
        tokenizer = TinyModel().load_tokenizer()
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(tokens[3])
        engine = LocalEngine(loaded.engine_model(), tokenizer, kv_budget_tokens=1 << 16)
        stopped = await engine.generate(prompt, greedy)
        ignored = await engine.generate(prompt, SamplingParams(temperature=0.0, max_new_tokens=10, ignore_eos=True))
        await engine.close()
        return tokens, stopped, ignored

    tokens, stopped, ignored = asyncio.run(run())
    first = tokens.index(tokens[3])
    assert stopped.finish_reason == "stop" and stopped.token_ids == tokens[: first + 1]
    assert ignored.finish_reason == "length" and ignored.token_ids == tokens


def test_context_limit_ends_with_length_and_too_long_prompts_are_refused(engine: LocalEngine) -> None:
    async def run():
        near = await engine.generate(prompt_of(508, seed=10), SamplingParams(max_new_tokens=50, ignore_eos=True))
        with pytest.raises(ContextLengthError, match="512"):
            await engine.generate(prompt_of(512, seed=11), SamplingParams())
        return near

    near = asyncio.run(run())
    assert near.finish_reason == "length" and len(near.token_ids) == 4


def test_bad_requests_get_clear_errors(engine: LocalEngine) -> None:
    for bad in (
        dict(temperature=-1.0),
        dict(top_p=0.0),
        dict(top_k=-2),
        dict(max_new_tokens=0),
        dict(stop="abc"),
        dict(stop_token_ids=(-1,)),
    ):
        with pytest.raises(InvalidRequestError, match="invalid sampling parameters"):
            SamplingParams(**bad)

    async def run():
        with pytest.raises(InvalidRequestError, match="empty"):
            await engine.generate([], SamplingParams())
        with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
            await engine.generate([1, 100000], SamplingParams())
        with pytest.raises(UnknownSessionError, match="nope"):
            await engine.end_session("nope")
        with StepGate(engine) as gate:
            slow = asyncio.ensure_future(engine.generate(
                prompt_of(10, seed=12), SamplingParams(max_new_tokens=200, ignore_eos=True), session_id="x"))
            gate.allow(1)
            await gate.taken(1)  # submitted and prefilled: session x has a request running, held
            with pytest.raises(SessionBusyError):
                await engine.generate(prompt_of(10, seed=12), SamplingParams(), session_id="x")
            gate.open()
            await slow

    asyncio.run(run())


def test_cancelled_requests_free_their_row(engine: LocalEngine) -> None:
    async def run():
        with StepGate(engine) as gate:
            task = asyncio.ensure_future(engine.generate(
                prompt_of(10, seed=13), SamplingParams(max_new_tokens=400, ignore_eos=True), session_id="c"))
            gate.allow(2)
            await gate.taken(2)  # two of its 400 tokens sampled, and held: the cancellation finds it running
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The session is usable again at once, and the engine serves others. The new request reaches the
            # worker after at most one more step of the cancelled one (generate posts before it first waits).
            again = asyncio.ensure_future(
                engine.generate(prompt_of(10, seed=13), SamplingParams(max_new_tokens=3), session_id="c"))
            await asyncio.sleep(0)  # a yield: `again` has posted its request
            gate.open()
            out = await again
        return out, await engine.stats()

    out, stats = asyncio.run(run())
    assert len(out.token_ids) <= 3
    assert stats["running"] == 0


def test_weight_update_bumps_version_and_drops_cached_kv(loaded: LoadedModel, hf) -> None:
    engine = LocalEngine(loaded.engine_model(), loaded.tokenizer, kv_budget_tokens=1 << 16)
    params = SamplingParams(temperature=0.0, max_new_tokens=8, ignore_eos=True)
    prompt = prompt_of(30, seed=14)
    new_state = {k: v * 1.5 if v.ndim == 2 else v for k, v in hf.state_dict().items()}

    async def run():
        before = await engine.generate(prompt, params, session_id="w")
        history = prompt + list(before.token_ids)
        version = await engine.update_weights(new_state)
        after = await engine.generate(history, params, session_id="w")
        await engine.close()
        return before, version, history, after

    before, version, history, after = asyncio.run(run())
    assert (before.weight_version, version, after.weight_version) == (0, 1, 1)
    assert after.cached_tokens == 0  # the old KV was computed with the old weights
    hf_new = TinyModel(architecture=loaded.name.split("-")[1], max_positions=512).load().hf_model()
    hf_new.load_state_dict(new_state)
    assert_logprobs_exact(hf_new, history, after, 0.0)


async def update_while_running(engine: LocalEngine, state: dict[str, torch.Tensor]):
    """An update that waits for a running request, then one that aborts it: each arrives when its request has
    sampled 3 of its 300 tokens (two allowed steps, and the one the update's arrival lets through)."""
    long = SamplingParams(max_new_tokens=300, ignore_eos=True)
    with StepGate(engine) as gate:
        waited = asyncio.ensure_future(engine.generate(prompt_of(10, seed=15), long))
        gate.allow(2)
        await gate.taken(2)
        update = asyncio.ensure_future(engine.update_weights(state))
        await gate.taken(3)  # no step was allowed: the update's arrival let this one through, so the worker has it
        gate.open()
        await update
        finished = waited.done()
        gate.close()
        steps = gate.steps
        aborted = asyncio.ensure_future(engine.generate(prompt_of(10, seed=16), long))
        gate.allow(2)
        await gate.taken(steps + 2)
        await engine.update_weights(state, abort_running=True)
    return finished, await waited, await aborted


def check_update_while_running(finished: bool, waited, aborted) -> None:
    assert finished and waited.finish_reason == "length", f"the update did not wait for the request: {waited}"
    assert waited.weight_version == 0
    assert aborted.finish_reason == "abort" and len(aborted.token_ids) == 3


def test_weight_update_waits_for_running_requests_or_aborts_them(engine: LocalEngine, hf) -> None:
    check_update_while_running(*asyncio.run(update_while_running(engine, hf.state_dict())))


def test_the_update_test_fails_when_an_update_does_not_wait(engine: LocalEngine, hf,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # A request raced against a sleep had finished before the update on a fast CPU: an update that never
    # waited passed too. Behind the gate the request is running when the update comes, so this is red.
    update = LocalEngine.update_weights

    async def always_abort(self: LocalEngine, state, *, strict: bool = True, abort_running: bool = False) -> int:
        return await update(self, state, strict=strict, abort_running=True)

    monkeypatch.setattr(LocalEngine, "update_weights", always_abort)
    with pytest.raises(AssertionError, match="did not wait"):
        check_update_while_running(*asyncio.run(update_while_running(engine, hf.state_dict())))


def test_weight_update_while_paused_in_place_fails_fast_or_aborts(engine: LocalEngine, hf) -> None:
    long = SamplingParams(max_new_tokens=490, ignore_eos=True)

    async def run():
        # (wait_for only keeps a regression from hanging the suite: the answers come at once)
        with StepGate(engine) as gate:
            first = asyncio.ensure_future(engine.generate(prompt_of(10, seed=18), long))
            gate.allow(2)
            await gate.taken(2)  # running, and held: the pause keeps a running request in place
            await engine.pause(mode="in_place")
            with pytest.raises(InvalidRequestError, match="paused \\(mode 'in_place'\\)") as refused:
                await asyncio.wait_for(engine.update_weights(hf.state_dict()), 30)
            await engine.resume()
            # An update already waiting for running rows is refused when a pause keeps them in place.
            steps = gate.steps
            waiting = asyncio.ensure_future(engine.update_weights(hf.state_dict()))
            await gate.taken(steps + 1)  # nothing allowed it: the update's arrival did, so the worker has it
            await engine.pause(mode="retract")
            with pytest.raises(InvalidRequestError, match="retract"):
                await asyncio.wait_for(waiting, 30)
            version = await asyncio.wait_for(engine.update_weights(hf.state_dict(), abort_running=True), 30)
            aborted = await asyncio.wait_for(first, 30)
            await engine.resume()
        after = await engine.generate(prompt_of(10, seed=19), SamplingParams(max_new_tokens=2))
        return refused.value, version, aborted, after

    refused, version, aborted, after = asyncio.run(run())
    assert "continue generation first" in str(refused)
    assert version == 1 and aborted.finish_reason == "abort" and aborted.weight_version == 0
    assert after.weight_version == 1


def test_many_concurrent_sessions(engine: LocalEngine, hf) -> None:
    params = SamplingParams(temperature=1.0, max_new_tokens=6, ignore_eos=True)

    async def episode(i: int):
        history = prompt_of(10 + i, seed=100 + i)
        for turn in range(3):
            out = await engine.generate(history, params, session_id=f"m{i}")
            history = history + list(out.token_ids) + [5 + turn]
            for _ in range(i % 3):  # stagger the sessions' next turns by a few loop turns
                await asyncio.sleep(0)
        return history, out

    async def run():
        return await asyncio.gather(*[episode(i) for i in range(20)])

    for history, out in asyncio.run(run())[:3]:
        prompt = history[: -len(out.token_ids) - 1]
        assert_logprobs_exact(hf, prompt, out, 1.0)


def test_close_fails_running_requests_and_refuses_new_ones(loaded: LoadedModel) -> None:
    engine = LocalEngine(loaded.engine_model(), loaded.tokenizer, kv_budget_tokens=1 << 16)

    async def run():
        with StepGate(engine) as gate:
            running = asyncio.ensure_future(
                engine.generate(prompt_of(10, seed=17), SamplingParams(max_new_tokens=450, ignore_eos=True)))
            gate.allow(2)
            await gate.taken(2)  # running, and held: the close finds it mid-generation
            await engine.close()
        with pytest.raises(EngineClosedError, match="closed while the request ran"):
            await running
        with pytest.raises(EngineClosedError):
            await engine.generate([5, 6], SamplingParams())
        await engine.close()  # idempotent

    asyncio.run(run())


def test_prefix_cache_reuses_kv_without_session_ids_and_stays_exact(loaded: LoadedModel, hf) -> None:
    params = SamplingParams(temperature=1.0, max_new_tokens=10, ignore_eos=True, seed=4)

    async def episode(engine: LocalEngine):
        history, turns = prompt_of(90, seed=21), []
        for turn in range(3):
            out = await engine.generate(history, params)  # no session id: what OpenAI clients send
            turns.append((history, out))
            history = history + list(out.token_ids) + prompt_of(12, seed=30 + turn)
        stats = await engine.stats()
        await engine.close()
        return turns, stats

    cached, stats = asyncio.run(episode(LocalEngine(loaded.engine_model(), loaded.tokenizer, seed=0)))
    uncached, _ = asyncio.run(episode(LocalEngine(loaded.engine_model(), loaded.tokenizer, seed=0,
                                                  prefix_cache=False)))
    for (prev, prev_out), (_, out) in itertools.pairwise(cached):
        assert out.cached_tokens == len(prev) + len(prev_out.token_ids) - 1  # everything but the newest token
    for prompt, out in cached:
        assert_logprobs_exact(hf, prompt, out, 1.0)
    assert [out.cached_tokens for _, out in uncached] == [0, 0, 0]
    assert [o.token_ids for _, o in cached] == [o.token_ids for _, o in uncached]  # same seed, same tokens
    # Each turn's entry extends the previous one, which is dropped: one entry holds the whole episode.
    assert stats["prefix_cache_entries"] == 1
    assert stats["prefix_cache_tokens"] == len(cached[-1][0]) + len(cached[-1][1].token_ids) - 1


def test_prefix_cache_entries_are_evicted_before_sessions(loaded: LoadedModel) -> None:
    # Room for the 4x256 running rows plus about 500 parked positions.
    engine = LocalEngine(loaded.engine_model(), loaded.tokenizer, kv_budget_tokens=1024 + 500, seed=0)
    params = SamplingParams(temperature=0.0, max_new_tokens=4, ignore_eos=True)

    async def run():
        await engine.generate(prompt_of(150, seed=40), params, session_id="kept")
        for i in range(4):  # 4 anonymous entries of ~153 positions: they cannot all stay
            await engine.generate(prompt_of(150, seed=50 + i), params)
        stats = await engine.stats()
        await engine.close()
        return stats

    stats = asyncio.run(run())
    assert stats["evictions"] >= 2
    assert stats["parked_sessions"] == ["kept"]
    assert stats["parked_tokens"] + stats["kv_allocated_tokens"] <= 1024 + 500


def test_sequences_shorter_than_a_block_are_not_cached(engine: LocalEngine) -> None:
    from codedojo.inference.prefix_index import BLOCK_TOKENS

    params = SamplingParams(temperature=0.0, max_new_tokens=2, ignore_eos=True)

    async def run() -> tuple[int, int]:
        for _ in range(3):  # what /health_generate sends: [0], one token
            await engine.generate([0], SamplingParams(temperature=0.0, max_new_tokens=1))
        await engine.generate(prompt_of(BLOCK_TOKENS - 2, seed=60), params)  # KV for BLOCK_TOKENS - 1 positions
        short = (await engine.stats())["prefix_cache_entries"]
        await engine.generate(prompt_of(BLOCK_TOKENS, seed=61), params)
        return short, (await engine.stats())["prefix_cache_entries"]

    short, long = asyncio.run(run())
    assert short == 0  # the index could never find them: parking them would only take memory
    assert long == 1


def test_within_budget_no_parked_entry_is_visited_and_a_finished_sequence_is_hashed_once(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collections import OrderedDict

    from codedojo.inference import prefix_index, scheduler

    class Watched(OrderedDict):
        walks = 0

        def values(self):  # what eviction walks
            Watched.walks += 1
            return super().values()

    hashed: list[int] = []
    real = prefix_index.block_hashes

    def counting(tokens):
        hashed.append(len(tokens))
        return real(tokens)

    monkeypatch.setattr(prefix_index, "block_hashes", counting)
    monkeypatch.setattr(scheduler, "block_hashes", counting)
    params = SamplingParams(temperature=0.0, max_new_tokens=5, ignore_eos=True)

    async def run() -> None:
        def watch(s) -> None:
            s.sessions = Watched(s.sessions)

        await engine.call(watch)
        await engine.generate(prompt_of(40, seed=70), params, session_id="watched")  # far within 65k tokens
        await engine.generate(prompt_of(40, seed=71), params)

    asyncio.run(run())
    assert Watched.walks == 0
    assert hashed.count(40 + 5 - 1) == 2  # the session's parked KV, then the anonymous entry: once each


def test_prefix_index_finds_the_deepest_shared_block() -> None:
    import numpy as np

    from codedojo.inference.prefix_index import BLOCK_TOKENS, PrefixIndex

    index: PrefixIndex[str] = PrefixIndex()
    base = np.arange(100, 100 + 4 * BLOCK_TOKENS, dtype=np.int64)
    index.add("short", base[: 2 * BLOCK_TOKENS])
    index.add("long", base)
    index.add("other", base[::-1].copy())
    assert index.candidates(base[: 3 * BLOCK_TOKENS + 5]) == ["long"]
    assert set(index.candidates(np.concatenate([base[: 2 * BLOCK_TOKENS], [1, 2, 3]]))) == {"short", "long"}
    assert index.candidates(base[: BLOCK_TOKENS - 1]) == []  # less than a block is not indexed
    index.remove("long")
    assert index.candidates(base) == ["short"] and len(index) == 2
