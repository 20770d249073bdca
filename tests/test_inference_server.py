"""`codedojo serve` processes driven through `HTTPEngine` and `SessionRouter`: session affinity with KV
reuse, both protocols, weight updates, clear errors, and servers that die or hang mid-request."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import torch

from codedojo.inference import (
    ContextLengthError,
    EngineTimeoutError,
    EngineUnavailableError,
    HTTPEngine,
    InvalidRequestError,
    SamplingParams,
    SessionRouter,
    TinyModel,
    UnknownSessionError,
    sequence_logprobs,
)


class Server:
    """One `codedojo serve --model tiny-llama --port 0` process."""

    def __init__(self, *options: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "codedojo.cli", "serve", "--model", "tiny-llama", "--port", "0", "--seed", "0",
             *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.url = ""

    def wait_ready(self) -> Server:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # "serving tiny-llama on http://127.0.0.1:PORT"
        if "serving" not in line:
            self.process.kill()
            raise RuntimeError(f"codedojo serve did not start: {line}{self.process.stdout.read()}")
        self.url = line.split()[-1]
        return self

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


async def stats_until(client: HTTPEngine, holds: Callable[[dict[str, Any]], bool], what: str, *,
                      limit_s: float = 30) -> None:
    """A bounded poll of the server's /stats until `holds(stats)`, failing with `what` after `limit_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not holds(await client.stats()):
        assert loop.time() < deadline, f"{what} within {limit_s:.0f} s"
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def servers() -> Iterator[list[Server]]:
    started = [Server(), Server()]  # start both at once: each spends seconds importing torch
    try:
        yield [server.wait_ready() for server in started]
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="module")
def tiny():
    loaded = TinyModel().load()
    return loaded.tokenizer, loaded.hf_model()


def test_router_keeps_sessions_on_one_server_and_reuses_their_cache(servers, tiny) -> None:
    tokenizer, _ = tiny
    sessions = [f"episode-{i}" for i in range(8)]
    params = SamplingParams(temperature=1.0, max_new_tokens=6, ignore_eos=True)

    async def run():
        clients = [HTTPEngine(s.url, tokenizer=tokenizer) for s in servers]
        router = SessionRouter(clients)

        async def episode(i: int, sid: str):
            history = tokenizer.encode(f"task {i}: fix the bug in module {i * 7}")
            turns = []
            for turn in range(3):
                out = await router.generate(history, params, session_id=sid)
                turns.append((len(history), out))
                history = history + list(out.token_ids) + tokenizer.encode(f"\nobservation {turn}\n")
                for _ in range(i % 3):  # interleave the sessions' turns: stagger them by a few loop turns
                    await asyncio.sleep(0)
            return turns

        results = await asyncio.gather(*[episode(i, sid) for i, sid in enumerate(sessions)])
        stats = [await c.stats() for c in clients]
        owners = {sid: router.engine_index(sid) for sid in sessions}
        await router.close()
        return results, stats, owners

    results, stats, owners = asyncio.run(run())
    held = [set(s["parked_sessions"]) for s in stats]
    for turns in results:
        for (prev_len, prev), (_, out) in itertools.pairwise(turns):
            assert out.cached_tokens == prev_len + len(prev.token_ids) - 1  # its server kept its KV
    assert held[0].isdisjoint(held[1])
    # (Seen failing once, in a full-suite run on a loaded machine, not reproduced in 5 runs since.)
    assert held[0] | held[1] == set(sessions), f"without parked KV: {set(sessions) - held[0] - held[1]}; {stats}"
    for sid, index in owners.items():
        assert sid in held[index]
    assert set(owners.values()) == {0, 1}


def test_generate_and_chat_completions_over_http(servers, tiny) -> None:
    tokenizer, hf = tiny
    url = servers[0].url
    messages = [{"role": "user", "content": "list the files"}]

    async def run():
        client = HTTPEngine(url, tokenizer=tokenizer)
        prompt = tokenizer.encode("hello world")
        seeded = SamplingParams(temperature=0.7, max_new_tokens=12, seed=5, ignore_eos=True)
        out = await client.generate(prompt, seeded)
        again = await client.generate(prompt, seeded)
        async with aiohttp.ClientSession() as http:
            body = {"text": "hello world", "sampling_params": {"max_new_tokens": 3, "temperature": 0}}
            async with http.post(url + "/generate", json=body) as response:
                native = await response.json()
            body = {"messages": messages, "max_tokens": 5, "temperature": 0, "logprobs": True}
            async with http.post(url + "/v1/chat/completions", json=body) as response:
                chat = await response.json()
        await client.close()
        return prompt, out, again, native, chat

    prompt, out, again, native, chat = asyncio.run(run())
    assert out.token_ids == again.token_ids  # seeded
    reference = sequence_logprobs(hf, prompt + list(out.token_ids), temperature=0.7)[len(prompt) - 1 :]
    assert (reference - torch.tensor(out.logprobs)).abs().max().item() <= 1e-4
    assert native["meta_info"]["finish_reason"]["type"] == "length" and len(native["output_ids"]) == 3
    assert native["meta_info"]["prompt_tokens"] == len(tokenizer.encode("hello world"))
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat["prompt_token_ids"] == tokenizer.encode(rendered, add_special_tokens=False)
    choice = chat["choices"][0]
    assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) == chat["usage"]["completion_tokens"]
    assert choice["message"]["content"] == tokenizer.decode(choice["token_ids"], skip_special_tokens=True)


def test_bad_requests_over_http_raise_the_same_errors(servers, tiny) -> None:
    tokenizer, _ = tiny

    async def run():
        client = HTTPEngine(servers[1].url, tokenizer=tokenizer)
        with pytest.raises(ContextLengthError, match="2048"):
            await client.generate([5] * 2048, SamplingParams())
        with pytest.raises(UnknownSessionError):
            await client.end_session("never-seen")
        with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
            await client.generate([5, 999999], SamplingParams())
        async with aiohttp.ClientSession() as http:
            body = {"input_ids": [5, 6], "sampling_params": {"temperature": -1}}
            async with http.post(servers[1].url + "/generate", json=body) as response:
                negative = (response.status, await response.json())
            body = {"input_ids": [5, 6], "sampling_params": {"max_new_token": 3}}
            async with http.post(servers[1].url + "/generate", json=body) as response:
                typo = (response.status, await response.json())
        await client.close()
        return negative, typo

    negative, typo = asyncio.run(run())
    assert negative[0] == 400 and "temperature" in negative[1]["error"]["message"]
    assert typo[0] == 400 and "max_new_token" in typo[1]["error"]["message"]


def test_weight_update_endpoint_bumps_version_and_drops_the_cache(servers, tiny, tmp_path: Path) -> None:
    tokenizer, hf = tiny
    hf.save_pretrained(tmp_path)  # the same weights: outputs stay, the version and cache must not
    params = SamplingParams(temperature=0.0, max_new_tokens=4, ignore_eos=True)

    async def run():
        client = HTTPEngine(servers[1].url, tokenizer=tokenizer)
        first = await client.generate(tokenizer.encode("abc"), params, session_id="w")
        history = tokenizer.encode("abc") + list(first.token_ids)
        version = await client.update_weights_from_disk(str(tmp_path))
        after = await client.generate(history, params, session_id="w")
        health = await client.health()
        await client.close()
        return first, version, after, health

    first, version, after, health = asyncio.run(run())
    assert version == first.weight_version + 1 == after.weight_version == int(health["weight_version"])
    assert health["weight_version"] == str(version)  # a string, as SGLang reports it
    assert after.cached_tokens == 0


def test_dead_and_hung_servers_fail_fast_with_a_clear_error(tiny) -> None:
    tokenizer, _ = tiny
    server = Server().wait_ready()
    long = SamplingParams(max_new_tokens=1900, ignore_eos=True)

    async def run():
        hung = HTTPEngine(server.url, tokenizer=tokenizer, timeout_s=1.5)
        os.kill(server.process.pid, signal.SIGSTOP)
        with pytest.raises(EngineTimeoutError, match="did not answer within 2 s"):
            await hung.generate([5, 6, 7], SamplingParams(max_new_tokens=2))
        os.kill(server.process.pid, signal.SIGCONT)
        await hung.close()
        client = HTTPEngine(server.url, tokenizer=tokenizer, timeout_s=60)
        # Paused, the server holds the request without generating it: it is in flight when the server dies,
        # however fast this machine samples 1,900 tokens (a request raced against a sleep had finished).
        async with aiohttp.ClientSession() as http:
            async with http.post(server.url + "/pause_generation", json={"mode": "in_place"}) as response:
                assert response.status == 200
        request = asyncio.ensure_future(client.generate([5, 6, 7], long))
        await stats_until(client, lambda stats: stats["waiting"] > 0, "the request did not reach the paused server")
        loop = asyncio.get_running_loop()
        server.process.kill()
        start = loop.time()
        with pytest.raises(EngineUnavailableError, match="closed the connection mid-request"):
            await request
        elapsed = loop.time() - start
        # Once the process is gone its port refuses connections (before that, a connect can still reach the
        # dying process's listening socket and be reset instead of refused).
        await asyncio.to_thread(server.process.wait, 10)
        with pytest.raises(EngineUnavailableError, match="cannot connect"):
            await client.generate([5], SamplingParams())
        await client.close()
        return elapsed

    try:
        # Far below the client's 60 s timeout: the dead connection ended the request, not the timeout.
        assert asyncio.run(run()) < 30
    finally:
        server.stop()


def test_a_server_at_its_admission_limit_answers_503_with_retry_after_and_the_client_waits(tiny) -> None:
    """--max-running 1 --max-waiting 0: a second generation request while one is held is refused at once (503,
    Retry-After, OpenAI-shaped `server_overloaded`), never queued without bound; HTTPEngine waits as told and
    gets its answer once the first request is done."""
    tokenizer, _ = tiny
    server = Server("--max-running", "1", "--max-waiting", "0").wait_ready()
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)

    async def run():
        client = HTTPEngine(server.url, tokenizer=tokenizer, timeout_s=60)
        async with aiohttp.ClientSession() as http:
            async with http.post(server.url + "/pause_generation", json={"mode": "in_place"}) as response:
                assert response.status == 200
            held = asyncio.ensure_future(client.generate([5, 6, 7], params))
            await stats_until(client, lambda stats: stats["admission"]["admitted"] > 0,
                              "the request did not reach the paused server")
            body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}}
            async with http.post(server.url + "/generate", json=body) as response:
                refused = (response.status, response.headers.get("Retry-After"), await response.json())
            waiting = asyncio.ensure_future(client.generate([8, 9], params))  # refused, then retried by the client
            await stats_until(client, lambda stats: stats["admission"]["refused"] >= 2,
                              "the client's request was not refused")
            async with http.post(server.url + "/continue_generation") as response:
                assert response.status == 200
        first, second = await held, await waiting
        stats = await client.stats()
        await client.close()
        return refused, first, second, stats

    try:
        (status, retry_after, body), first, second, stats = asyncio.run(run())
    finally:
        server.stop()
    assert status == 503 and retry_after == "1"
    assert body["error"]["code"] == "server_overloaded" and "--max-waiting" in body["error"]["message"]
    assert len(first.token_ids) == len(second.token_ids) == 4
    assert stats["admission"]["limit"] == 1 and stats["admission"]["admitted"] == 0
    assert stats["admission"]["refused"] >= 2 and stats["http_status_counts"]["503"] >= 2
