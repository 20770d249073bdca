"""`HTTPEngine` against fake SGLang and vLLM servers that answer in those servers' documented shapes,
and the JSON <-> SamplingParams translation both directions share."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from codedojo.inference import HTTPEngine, InvalidRequestError, SamplingParams
from codedojo.inference.wire import openai_chat_to_params, params_to_sglang, sglang_to_params


def test_sglang_sampling_params_round_trip_and_strictness() -> None:
    params = SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=77, stop=("```",),
                            stop_token_ids=(7,), ignore_eos=True, seed=3)
    assert sglang_to_params(params_to_sglang(params)) == params
    loose = sglang_to_params({"top_k": -1, "stop": "END", "repetition_penalty": 1.0, "no_stop_trim": True})
    assert loose.top_k == 0 and loose.stop == ("END",)
    with pytest.raises(InvalidRequestError, match="frequency_penalty"):
        sglang_to_params({"frequency_penalty": 0.5})
    with pytest.raises(InvalidRequestError, match="temprature"):
        sglang_to_params({"temprature": 0.5})
    with pytest.raises(InvalidRequestError, match="stop_token_ids"):
        sglang_to_params({"stop_token_ids": ["x"]})


def test_openai_chat_params() -> None:
    params = openai_chat_to_params({"messages": [], "max_tokens": 9, "temperature": 0, "stop": ["a", "b"], "seed": 1})
    assert params == SamplingParams(temperature=0.0, max_new_tokens=9, stop=("a", "b"), seed=1)
    with pytest.raises(InvalidRequestError, match=r"frequency_penalty=0\.5"):
        openai_chat_to_params({"messages": [], "frequency_penalty": 0.5})
    with pytest.raises(InvalidRequestError, match="response_format"):
        openai_chat_to_params({"messages": [], "response_format": {"type": "json_object"}})
    assert openai_chat_to_params({"messages": [], "top_logprobs": 3, "n": 2}).top_logprobs == 3
    with pytest.raises(InvalidRequestError, match="max_tokenz"):
        openai_chat_to_params({"messages": [], "max_tokenz": 2})


async def fake_server(handlers: dict[str, Any]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    for path, handler in handlers.items():
        app.router.add_post(path, handler) if path != "/v1/models" else app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def test_vllm_flavor_sends_token_ids_and_reads_token_id_logprobs() -> None:
    seen: dict[str, Any] = {}

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "served-model", "object": "model"}]})

    async def completions(request: web.Request) -> web.Response:
        seen["body"] = await request.json()
        seen["session"] = request.headers.get("X-Session-ID")
        return web.json_response({
            "id": "cmpl-1", "object": "text_completion", "model": "served-model",
            "choices": [{"index": 0, "text": "ab", "finish_reason": "stop",
                         "logprobs": {"tokens": ["token_id:11", "token_id:2"], "token_logprobs": [-0.5, -1.25],
                                      "top_logprobs": None, "text_offset": [0, 1]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                      "prompt_tokens_details": {"cached_tokens": 2}},
        })

    async def run():
        runner, url = await fake_server({"/v1/models": models, "/v1/completions": completions})
        client = HTTPEngine(url, tokenizer=None, flavor="vllm")
        out = await client.generate([5, 6, 7], SamplingParams(temperature=0.7, max_new_tokens=4, seed=9),
                                    session_id="ep-1")
        await client.end_session("ep-1")  # vLLM frees its prefix cache itself: a no-op
        await client.close()
        await runner.cleanup()
        return out

    out = asyncio.run(run())
    assert out.token_ids == (11, 2) and out.logprobs == (-0.5, -1.25)
    assert (out.finish_reason, out.prompt_tokens, out.cached_tokens) == ("stop", 3, 2)
    body = seen["body"]
    assert body["model"] == "served-model" and body["prompt"] == [5, 6, 7]
    assert body["return_tokens_as_token_ids"] is True and body["logprobs"] == 0 and body["top_k"] == -1
    assert seen["session"] == "ep-1"


def test_sglang_flavor_reads_meta_info_and_tolerates_a_missing_session_route() -> None:
    seen: dict[str, Any] = {}

    async def generate(request: web.Request) -> web.Response:
        seen["body"] = await request.json()
        seen["routing"] = request.headers.get("X-SMG-Routing-Key")
        return web.json_response({
            "text": "x", "output_ids": [4, 2],
            "meta_info": {"id": "r", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 2,
                          "completion_tokens": 2, "cached_tokens": 1, "weight_version": "default",
                          "output_token_logprobs": [[-0.1, 4, None], [-0.2, 2, None]]},
        })

    async def run():
        runner, url = await fake_server({"/generate": generate})
        client = HTTPEngine(url, tokenizer=None)
        out = await client.generate([1, 3], SamplingParams(max_new_tokens=5), session_id="ep-2")
        await client.end_session("ep-2")  # real SGLang has no /end_session: ignored
        await client.close()
        await runner.cleanup()
        return out

    out = asyncio.run(run())
    assert out.token_ids == (4, 2) and out.logprobs == (-0.1, -0.2) and out.cached_tokens == 1
    assert out.weight_version == 0 and out.finish_reason == "stop"
    assert seen["body"]["return_logprob"] is True and seen["body"]["input_ids"] == [1, 3]
    assert seen["routing"] == "ep-2"


def test_flush_cache_reads_sglangs_plain_text_answers_and_skips_vllm() -> None:
    answers = iter([web.Response(text="Cache flushed.\n"),
                    web.Response(status=400, text="Cache not flushed: requests are running or waiting.\n")])
    calls: list[str] = []

    async def flush(request: web.Request) -> web.Response:
        calls.append(request.method)
        return next(answers)

    async def run() -> tuple[bool, bool, bool]:
        runner, url = await fake_server({"/flush_cache": flush})
        sglang, vllm = HTTPEngine(url, tokenizer=None), HTTPEngine(url, tokenizer=None, flavor="vllm")
        outcome = (await sglang.flush_cache(), await sglang.flush_cache(), await vllm.flush_cache())
        await sglang.close()
        await vllm.close()
        await runner.cleanup()
        return outcome

    assert asyncio.run(run()) == (True, False, False)
    assert calls == ["POST", "POST"]  # vLLM was never asked
