"""`codedojo serve` against the clients people use: the openai SDK (sync, async, streaming, tools,
errors), litellm's exception mapping, mini-swe-agent's default `mini` configuration, and SGLang's admin
routes with SGLang's response shapes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from codedojo.inference import Completion, LocalEngine, SamplingParams, TinyModel
from codedojo.inference.engine import StreamedToken
from codedojo.inference.errors import EngineClosedError
from codedojo.inference.scheduler import Scheduler
from codedojo.inference.server import InferenceServer, serve
from codedojo.inference.tool_calls import parse_tool_calls, prepare_messages
from engine_gate import StepGate
from test_inference_server import Server

openai = pytest.importorskip("openai", reason="the openai SDK is in the dev extra: pip install -e '.[dev]'")

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server()
    try:
        yield started.wait_ready()
    finally:
        started.stop()


@pytest.fixture(scope="module")
def tokenizer():
    return TinyModel().load_tokenizer()


def client(server: Server) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def stats(server: Server) -> dict[str, Any]:
    async def get() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(server.url + "/stats") as response:
            return await response.json()

    return asyncio.run(get())


# ----- the openai SDK --------------------------------------------------------------------------------


def test_sdk_chat_logprobs_stops_parts_and_n(server: Server, tokenizer) -> None:
    api = client(server)
    messages = [{"role": "user", "content": [{"type": "text", "text": "list"}, {"type": "text", "text": "files"}]}]
    out = api.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=12, temperature=1.0,
                                      seed=3, logprobs=True, top_logprobs=3, n=2)
    assert [c.index for c in out.choices] == [0, 1]
    prompt = out.model_extra["prompt_token_ids"]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "list\nfiles"}], tokenize=False,
                                             add_generation_prompt=True)
    assert prompt == tokenizer.encode(rendered, add_special_tokens=False)  # parts flattened with newlines
    assert out.usage.prompt_tokens == len(prompt)
    assert out.usage.completion_tokens == sum(len(c.model_extra["token_ids"]) for c in out.choices)
    assert out.choices[0].model_extra["token_ids"] != out.choices[1].model_extra["token_ids"]  # seeds 3 and 4
    for choice in out.choices:
        ids = choice.model_extra["token_ids"]
        entries = choice.logprobs.content
        assert len(entries) == len(ids)
        # Each entry's bytes are its token's exact bytes (random bytes here, rarely valid UTF-8 on their own):
        # decoded together they give the output's text, U+FFFD where the tokenizer's decoding has it too.
        joined = b"".join(bytes(e.bytes) for e in entries)
        assert joined.decode("utf-8", errors="replace") == tokenizer.decode(ids, skip_special_tokens=False)
        assert all("\ufffd" not in e.token for e in entries)  # partial characters show as \x escapes instead
        for entry in entries:
            assert len(entry.top_logprobs) == 3
            tops = [t.logprob for t in entry.top_logprobs]
            assert tops == sorted(tops, reverse=True) and entry.logprob <= tops[0] + 1e-6
    # A stop string is cut from the text; the tokens stay whole.
    first = out.choices[0]
    text = first.message.content
    stop = text[3:5] if len(text) >= 5 and text[3:5].strip() else None
    if stop:
        again = api.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=12, temperature=1.0,
                                            seed=3, stop=[stop])
        assert again.choices[0].finish_reason == "stop"
        assert stop not in again.choices[0].message.content
        assert text.startswith(again.choices[0].message.content)


def test_sdk_errors_are_openai_shaped(server: Server) -> None:
    api = client(server)
    with pytest.raises(openai.NotFoundError) as missing:
        api.chat.completions.create(model="gpt-7", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    with pytest.raises(openai.BadRequestError) as overflow:
        api.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "x" * 2100}])
    assert overflow.value.code == "context_length_exceeded"
    assert "maximum context length is 2048 tokens" in overflow.value.message
    with pytest.raises(openai.BadRequestError) as streamed:  # a 400 before the stream, not a broken stream
        api.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "x" * 2100}],
                                    stream=True)
    assert streamed.value.code == "context_length_exceeded" and streamed.value.status_code == 400
    with pytest.raises(openai.BadRequestError) as bad:
        api.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "hi"}], temperature=-1)
    assert bad.value.type == "invalid_request_error" and "temperature" in bad.value.message
    with pytest.raises(openai.BadRequestError) as bad_tool:  # a tool that is not an object: 400, not 500
        api.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "hi"}],
                                    tools=["bash"])  # type: ignore[list-item]
    assert bad_tool.value.param == "tools" and "'bash'" in bad_tool.value.message
    with pytest.raises(openai.NotFoundError):
        api.models.retrieve("gpt-7")
    card = api.models.retrieve("tiny-llama")
    assert card.id == "tiny-llama" and card.created > 0

    async def unknown_route() -> tuple[int, dict[str, Any]]:
        async with aiohttp.ClientSession() as http, http.get(server.url + "/v2/nothing") as response:
            return response.status, await response.json()

    status, body = asyncio.run(unknown_route())
    assert status == 404 and set(body["error"]) == {"message", "type", "param", "code"}


def test_async_streaming_matches_the_plain_answer_and_ends_with_usage(server: Server) -> None:
    messages = [{"role": "user", "content": "héllo wörld ✓"}]
    settings = {"model": "tiny-llama", "messages": messages, "max_tokens": 40, "temperature": 1.0, "seed": 11}

    async def run() -> tuple[Any, list[Any]]:
        api = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
        plain = await api.chat.completions.create(**settings)
        chunks = [c async for c in await api.chat.completions.create(
            **settings, stream=True, stream_options={"include_usage": True}, logprobs=True)]
        await api.close()
        return plain, chunks

    plain, chunks = asyncio.run(run())
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == plain.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(entries) == plain.usage.completion_tokens


def test_tools_are_rendered_and_tool_turns_round_trip(server: Server, tokenizer) -> None:
    api = client(server)
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
    ]
    out = api.chat.completions.create(model="tiny-llama", messages=messages, tools=[BASH], max_tokens=8)
    prompt = tokenizer.decode(out.model_extra["prompt_token_ids"])
    assert '"name": "bash"' in prompt and "<tools>" in prompt  # ChatML has no tools: the server describes them
    assert '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>' in prompt
    assert "<tool_response>\na.txt\n</tool_response>" in prompt
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        api.chat.completions.create(model="tiny-llama", messages=messages, tools=[BASH], tool_choice="required")


def test_tool_call_parsers() -> None:
    hermes = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
    content, calls = parse_tool_calls(hermes, fmt="hermes")
    assert content == "Let me look." and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("bash", {"command": "ls -la"})]
    two = hermes + '\n<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}</tool_call>'
    assert [json.loads(c.arguments)["command"] for c in parse_tool_calls(two, fmt="hermes")[1]] == ["ls -la", "pwd"]
    assert parse_tool_calls('<tool_call>{"name": "bash", "argu', fmt="hermes") == (
        '<tool_call>{"name": "bash", "argu', [])  # half a call stays text
    # A reply cut off at max_tokens after a whole JSON object but before </tool_call> is not a call either,
    # nor is a complete call followed by an open one.
    unclosed = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n'
    assert parse_tool_calls(unclosed, fmt="hermes") == (unclosed, [])
    assert parse_tool_calls(hermes + "\n" + unclosed, fmt="hermes") == (hermes + "\n" + unclosed, [])
    for cut in ("<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n",
                "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</tool_call>"):
        assert parse_tool_calls(cut, fmt="qwen3_coder", tools=[BASH]) == (cut, [])  # no </function>
    xml = ("<tool_call>\n<function=edit>\n<parameter=path>\na.py\n</parameter>\n<parameter=line>\n3\n</parameter>\n"
           "</function>\n</tool_call>")
    tool = {"type": "function", "function": {"name": "edit", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"}}}}}
    content, calls = parse_tool_calls(xml, fmt="qwen3_coder", tools=[tool])
    assert content is None and json.loads(calls[0].arguments) == {"path": "a.py", "line": 3}
    # A template that renders tools itself gets them, and past calls' arguments as objects.
    native, tools = prepare_messages(
        [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}],
        [BASH], chat_template="{% for t in tools %}{% endfor %}")
    assert tools == [BASH] and native[0]["tool_calls"][0]["function"]["arguments"] == {"command": "ls"}



@pytest.mark.parametrize("fmt, text", [
    ("hermes", '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'),
    ("hermes", '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n'),
    ("qwen3_coder", "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>"),
    ("qwen3_coder", "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</tool_call>"),
    ("qwen3_coder", "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n"),
], ids=["hermes", "hermes-unclosed", "xml", "xml-no-function-end", "xml-unclosed"])
def test_the_server_and_the_agent_read_the_same_calls(fmt: str, text: str) -> None:
    from codedojo.agent.actions import Action, parse_action

    served = parse_tool_calls(text, fmt=fmt, tools=[BASH])[1]  # type: ignore[arg-type]
    acted = parse_action(text, fmt=fmt)  # type: ignore[arg-type]
    assert bool(served) == isinstance(acted, Action)
    if served:
        assert isinstance(acted, Action) and json.loads(served[0].arguments) == {"command": acted.command}

class ScriptedEngine:
    """Just enough of LocalEngine for the chat route: answers with a fixed text, streamed token by token
    (or fails with `fail` after `fail_after` tokens)."""

    def __init__(self, tokenizer: Any, text: str, *, fail: Exception | None = None, fail_after: int = 0) -> None:
        self.tokenizer = tokenizer
        self.ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        self.fail, self.fail_after = fail, fail_after

    def validate_request(self, prompt: Sequence[int], params: SamplingParams, **_: Any) -> list[int]:
        return list(prompt)

    def _completion(self, prompt: Sequence[int]) -> Completion:
        return Completion(token_ids=tuple(self.ids), logprobs=(-1.0,) * len(self.ids), finish_reason="stop",
                          prompt_tokens=len(prompt), cached_tokens=0, weight_version=0)

    async def generate(self, prompt: Sequence[int], params: SamplingParams, **_: Any) -> Completion:
        return self._completion(prompt)

    async def stream(self, prompt: Sequence[int], params: SamplingParams, **_: Any
                     ) -> AsyncIterator[StreamedToken | Completion]:
        for i, token in enumerate(self.ids):
            if self.fail is not None and i == self.fail_after:
                raise self.fail
            yield StreamedToken(token, -1.0, ())
        yield self._completion(prompt)


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """Run app on a free port; (runner to clean up, OpenAI base url)."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"


def test_tool_calls_come_back_parsed_plain_and_streamed(tokenizer) -> None:
    reply = 'Checking.\n<tool_call>\n{"name": "bash", "arguments": {"command": "cat \\u00e9.txt"}}\n</tool_call>'
    app = InferenceServer(ScriptedEngine(tokenizer, reply), model_name="tiny-llama").app()  # type: ignore[arg-type]

    async def run() -> tuple[Any, list[Any]]:
        runner, url = await serve_app(app)
        api = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
        request = {"model": "tiny-llama", "messages": [{"role": "user", "content": "go"}], "tools": [BASH]}
        plain = await api.chat.completions.create(**request)
        chunks = [c async for c in await api.chat.completions.create(**request, stream=True)]
        await api.close()
        await runner.cleanup()
        return plain, chunks

    plain, chunks = asyncio.run(run())
    choice = plain.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    assert choice.message.tool_calls[0].function.name == "bash"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"command": "cat é.txt"}
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    deltas = [t for c in chunks for t in (c.choices[0].delta.tool_calls or [])]
    assert content == "Checking."  # nothing of the call leaks into the streamed text
    assert [(d.index, d.function.name, json.loads(d.function.arguments)) for d in deltas] == [
        (0, "bash", {"command": "cat é.txt"})]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_failure_after_the_stream_started_is_an_error_event(tokenizer) -> None:
    failure = EngineClosedError("the engine was closed while the request ran")
    engine = ScriptedEngine(tokenizer, "some words", fail=failure, fail_after=2)
    app = InferenceServer(engine, model_name="tiny-llama").app()  # type: ignore[arg-type]

    async def run() -> tuple[list[Any], BaseException]:
        runner, url = await serve_app(app)
        api = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
        chunks: list[Any] = []
        try:
            stream = await api.chat.completions.create(model="tiny-llama", stream=True,
                                                       messages=[{"role": "user", "content": "go"}])
            with pytest.raises(openai.APIError) as raised:
                async for chunk in stream:
                    chunks.append(chunk)
        finally:
            await api.close()
            await runner.cleanup()
        return chunks, raised.value

    chunks, error = asyncio.run(run())
    assert chunks  # the stream had started (role and first tokens)
    assert not isinstance(error, openai.APIConnectionError)  # an error event, not a dropped connection
    assert error.code == "engine_closed" and "closed while the request ran" in error.message
    assert error.type == "server_error"


def test_a_client_that_disconnects_cancels_its_generation(server: Server) -> None:
    body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "go"}], "max_tokens": 1900,
            "ignore_eos": True, "stream": True}

    async def run() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http:
            async with http.post(server.url + "/v1/chat/completions", json=body) as response:
                await response.content.readline()  # the stream started; now hang up
            deadline = time.monotonic() + 30
            while True:
                async with http.get(server.url + "/stats") as response:
                    current = await response.json()
                if current["running"] == 0 or time.monotonic() > deadline:
                    return current
                await asyncio.sleep(0.1)

    before = stats(server)["decode_tokens"]
    after = asyncio.run(run())
    assert after["running"] == 0
    assert after["decode_tokens"] - before < 1800  # stopped long before its 1,900 tokens


# ----- litellm and mini-swe-agent ----------------------------------------------------------------------


def test_litellm_maps_our_errors_to_its_exceptions(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    settings = {"model": "openai/tiny-llama", "api_base": server.url + "/v1", "api_key": "none", "num_retries": 0}
    ok = litellm.completion(messages=[{"role": "user", "content": "hi"}], max_tokens=4, tools=[BASH], **settings)
    assert ok.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(messages=[{"role": "user", "content": "y" * 2100}], **settings)
    with pytest.raises(litellm.ContextWindowExceededError):
        list(litellm.completion(messages=[{"role": "user", "content": "y" * 2100}], stream=True, **settings))
    with pytest.raises(litellm.NotFoundError):
        litellm.completion(messages=[{"role": "user", "content": "hi"}], **{**settings, "model": "openai/gpt-7"})
    with pytest.raises(litellm.BadRequestError):
        litellm.completion(messages=[{"role": "user", "content": "hi"}], temperature=-1, **settings)


def test_mini_swe_agent_default_mini_runs_three_steps(tmp_path: Path) -> None:
    pytest.importorskip("minisweagent", reason="mini-swe-agent is in the dev extra")
    # mini's prompt is ~3,400 byte-level tokens: more than tiny-llama's default 2,048 positions.
    server = Server("--context-length", "8192").wait_ready()
    try:
        run_mini(server, tmp_path)
    finally:
        server.stop()


def run_mini(server: Server, tmp_path: Path) -> None:
    before = stats(server)["http_status_counts"]
    trajectory = tmp_path / "traj.json"
    env = {**os.environ, "HOME": str(tmp_path), "MSWEA_CONFIGURED": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1", "MSWEA_COST_TRACKING": "ignore_errors"}
    command = [
        sys.executable, "-m", "minisweagent.run.mini", "-m", "openai/tiny-llama", "-t", "Create hello.txt",
        "--yolo", "--exit-immediately", "-o", str(trajectory), "-c", "mini.yaml", "-c", "agent.step_limit=3",
        "-c", "agent.max_consecutive_format_errors=0", "-c", f"model.model_kwargs.api_base={server.url}/v1",
        "-c", "model.model_kwargs.api_key=none", "-c", "model.model_kwargs.max_tokens=24",
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=240)
    assert trajectory.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(trajectory.read_text())
    assert record["info"]["model_stats"]["api_calls"] == 3, done.stdout[-3000:]
    assert record["info"]["exit_status"] == "LimitsExceeded"
    after = stats(server)["http_status_counts"]
    new = {status: after.get(status, 0) - before.get(status, 0) for status in after}
    assert {s: n for s, n in new.items() if n} == {"200": 3 + 1}  # 3 chat calls (+ our stats read before)


# ----- SGLang's surface ----------------------------------------------------------------------------------


def test_sglang_admin_routes_answer_with_sglang_shapes(server: Server) -> None:
    async def run() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with aiohttp.ClientSession() as http:
            for route in ("/get_model_info", "/model_info", "/get_server_info", "/server_info",
                          "/get_weight_version", "/v1/loads"):
                async with http.get(server.url + route) as response:
                    seen[route] = (response.status, await response.json())
            async with http.get(server.url + "/health_generate") as response:
                seen["/health_generate"] = response.status
            async with http.post(server.url + "/flush_cache") as response:
                seen["/flush_cache"] = (response.status, await response.text())
            async with http.get(server.url + "/stats") as response:
                seen["stats"] = await response.json()
        return seen

    seen = asyncio.run(run())
    status, info = seen["/get_model_info"]
    assert status == 200 and seen["/model_info"][1] == info
    assert set(info) == {"model_path", "tokenizer_path", "is_generation", "preferred_sampling_params",
                         "weight_version"} and isinstance(info["weight_version"], str)
    server_info = seen["/server_info"][1]
    assert seen["/get_server_info"][1]["tp_size"] == server_info["tp_size"] == 1
    assert server_info["disaggregation_mode"] == "null" and isinstance(server_info["internal_states"], list)
    assert seen["/get_weight_version"][1] == {"weight_version": info["weight_version"]}
    loads = seen["/v1/loads"][1]
    assert loads["dp_rank_count"] == 1 and {"num_running_reqs", "num_waiting_reqs", "token_usage"} <= set(
        loads["loads"][0]) and "total_running_reqs" in loads["aggregate"]
    assert seen["/health_generate"] == 200
    assert seen["/flush_cache"][0] == 200 and seen["stats"]["prefix_cache_entries"] == 0


# The abort and pause routes act on a request that is still running. A request raced against a sleep had
# finished first on a fast CPU, so these run `serve` in this process on an engine behind a StepGate: the
# request takes a step only when the test allows one or a command arrives (tests/engine_gate.py).

LONG = {"max_new_tokens": 1900, "ignore_eos": True}
HANG_GUARD_S = 30.0
"""Only keeps a regression from hanging the suite: every answer awaited under it comes at once."""


@contextlib.asynccontextmanager
async def gated_serve(*, hold_limit_s: float) -> AsyncIterator[tuple[str, StepGate]]:
    """`serve` (the app and handler settings of `codedojo serve`) on tiny-llama, behind a closed gate."""
    engine = LocalEngine.from_spec("tiny-llama", seed=0)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.ensure_future(serve(engine, model_name="tiny-llama", host="127.0.0.1", port=0,
                                          ready=ready.set_result))
    try:
        with StepGate(engine, hold_limit_s=hold_limit_s) as gate:
            yield await asyncio.wait_for(ready, HANG_GUARD_S), gate
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        await engine.close()


async def abort_then_pause_and_continue(*, hold_limit_s: float = 60.0,
                                        hang_guard_s: float = HANG_GUARD_S) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    timeout = aiohttp.ClientTimeout(total=hang_guard_s)
    async with gated_serve(hold_limit_s=hold_limit_s) as (url, gate), aiohttp.ClientSession(timeout=timeout) as http:
        long = {"input_ids": [5, 6, 7], "rid": "slow-1", "sampling_params": {**LONG, "custom_params": {"k": 1}}}
        task = asyncio.ensure_future(http.post(url + "/generate", json=long))
        gate.allow(2)
        await gate.taken(2)  # prefilled and one token decoded: running, and held
        async with http.post(url + "/abort_request", json={"rid": "slow-1"}) as response:
            seen["/abort_request"] = response.status
        async with await task as response:
            seen["aborted"] = await response.json()
        gate.open()  # from here only the pause holds the engine
        async with http.post(url + "/pause_generation", json={"mode": "in_place"}) as response:
            seen["/pause_generation"] = await response.json()
        paused = asyncio.ensure_future(http.post(url + "/generate", json={
            "input_ids": [5], "sampling_params": {"max_new_tokens": 2}, "return_logprob": True,
            "top_logprobs_num": 2}))
        stats: dict[str, Any] = {"waiting": 0, "running": 0}
        deadline = time.monotonic() + hang_guard_s
        while stats["waiting"] + stats["running"] == 0 and time.monotonic() < deadline:
            async with http.get(url + "/stats") as response:  # until the engine holds the request
                stats = await response.json()
        steps = gate.steps
        # The worker reads its commands, then steps if it may: an engine that steps while paused has
        # stepped by the time it answers this second command.
        async with http.get(url + "/stats") as response:
            seen["held"] = await response.json()
        seen["steps_while_paused"] = gate.steps - steps
        seen["done_while_paused"] = paused.done()
        async with http.post(url + "/continue_generation") as response:
            seen["/continue_generation"] = await response.json()
        async with await paused as response:
            seen["after_continue"] = await response.json()
    return seen


def check_abort_pause_and_continue(seen: dict[str, Any]) -> None:
    assert seen["/abort_request"] == 200
    aborted = seen["aborted"].get("meta_info", {})
    assert aborted.get("finish_reason", {}).get("type") == "abort", f"the abort did not end it: {seen['aborted']}"
    assert aborted["id"] == "slow-1"
    assert 2 <= aborted["completion_tokens"] <= 3  # its two allowed steps, and the one the abort let through
    assert seen["/pause_generation"] == {"message": "Generation paused successfully.", "status": "ok"}
    assert seen["held"]["waiting"] == 1, f"the request was not held waiting while paused: {seen['held']}"
    assert seen["steps_while_paused"] == 0, "the engine stepped while paused"
    assert seen["done_while_paused"] is False, "a request finished while paused"
    assert seen["/continue_generation"]["status"] == "ok"
    meta = seen["after_continue"]["meta_info"]
    assert len(meta["output_top_logprobs"]) == 2 and all(len(row) == 2 for row in meta["output_top_logprobs"])


def test_sglang_abort_pause_and_continue_act_on_running_requests() -> None:
    check_abort_pause_and_continue(asyncio.run(abort_then_pause_and_continue()))


async def refuse_an_update_while_paused_in_place(model_dir: Path, *, hold_limit_s: float = 60.0,
                                                 hang_guard_s: float = HANG_GUARD_S) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    timeout = aiohttp.ClientTimeout(total=hang_guard_s)
    async with gated_serve(hold_limit_s=hold_limit_s) as (url, gate), aiohttp.ClientSession(timeout=timeout) as http:
        async with http.get(url + "/stats") as response:
            entries = (await response.json())["prefix_cache_entries"]
        gate.open()  # a health check generates a token: it needs its steps
        async with http.get(url + "/health_generate") as response:
            seen["health"] = response.status
        gate.close()
        async with http.get(url + "/stats") as response:
            seen["new_entries"] = (await response.json())["prefix_cache_entries"] - entries
        long = {"input_ids": [5, 6, 7], "rid": "kept-1", "sampling_params": LONG}
        task = asyncio.ensure_future(http.post(url + "/generate", json=long))
        steps = gate.steps + 2
        gate.allow(2)
        await gate.taken(steps)  # running, and held
        async with http.post(url + "/pause_generation", json={"mode": "in_place"}) as response:
            assert response.status == 200
        try:
            async with http.get(url + "/health_generate") as response:
                seen["paused_health"] = response.status
            async with http.post(url + "/update_weights_from_disk", json={"model_path": str(model_dir)}) as response:
                seen["update"] = (response.status, await response.json())
        finally:
            async with http.post(url + "/continue_generation") as response:
                assert response.status == 200
            async with http.post(url + "/abort_request", json={"rid": "kept-1"}) as response:
                assert response.status == 200
            async with await task as response:
                seen["kept"] = await response.json()
    return seen


def check_refused_update(seen: dict[str, Any]) -> None:
    assert seen["health"] == 200 and seen["new_entries"] == 0  # a health check leaves no cache entry behind
    assert seen["paused_health"] == 503
    status, body = seen["update"]
    assert status == 400 and "mode 'in_place'" in body["error"]["message"]
    kept = seen["kept"]["meta_info"]
    assert kept["finish_reason"]["type"] == "abort" and kept["completion_tokens"] < 1900


def test_while_paused_in_place_health_is_503_and_a_weight_update_is_refused(tmp_path: Path) -> None:
    TinyModel().load().hf_model().save_pretrained(tmp_path)
    check_refused_update(asyncio.run(refuse_an_update_while_paused_in_place(tmp_path)))


# The two tests above must go red when what they guard is broken, on any CPU: these break it and run them
# (with short guards: a broken abort or pause leaves a request held, or an update waiting, until they fire).
BROKEN = {"hold_limit_s": 2.0, "hang_guard_s": 5.0}


def test_the_abort_test_fails_when_abort_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Scheduler, "abort", lambda self, *, rid=None: 0)
    with pytest.raises(AssertionError, match="abort"):
        check_abort_pause_and_continue(asyncio.run(abort_then_pause_and_continue(**BROKEN)))


def test_the_pause_tests_fail_when_pause_does_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    apply = LocalEngine._apply

    def ignore_pauses(self: LocalEngine, command: Any) -> Any:
        return None if command.kind == "pause" else apply(self, command)

    monkeypatch.setattr(LocalEngine, "_apply", ignore_pauses)
    with pytest.raises(AssertionError, match="while paused"):
        check_abort_pause_and_continue(asyncio.run(abort_then_pause_and_continue(**BROKEN)))
    TinyModel().load().hf_model().save_pretrained(tmp_path)
    with pytest.raises((AssertionError, TimeoutError)):
        check_refused_update(asyncio.run(refuse_an_update_while_paused_in_place(tmp_path, **BROKEN)))


def test_top_p_replay_ids_are_refused_by_name(server: Server) -> None:
    async def run() -> list[tuple[int, str]]:
        answers = []
        async with aiohttp.ClientSession() as http:
            for body in ({"input_ids": [5, 6], "return_top_p_token_ids": True},
                         {"input_ids": [5, 6], "sampling_params": {"return_top_p_token_ids": True}}):
                async with http.post(server.url + "/generate", json=body) as response:
                    answers.append((response.status, (await response.json())["error"]["message"]))
        return answers

    for status, message in asyncio.run(run()):
        assert status == 400 and "return_top_p_token_ids" in message


def test_weight_versions_are_strings_and_can_be_named(server: Server, tmp_path: Path) -> None:
    TinyModel().load().hf_model().save_pretrained(tmp_path)

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with aiohttp.ClientSession() as http:
            update = {"model_path": str(tmp_path), "weight_version": "step-7"}
            async with http.post(server.url + "/update_weights_from_disk", json=update) as response:
                updated = await response.json()
            body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
            async with http.post(server.url + "/generate", json=body) as response:
                return updated, await response.json()

    updated, out = asyncio.run(run())
    assert updated["success"] and updated["weight_version"] == "step-7"
    assert out["meta_info"]["weight_version"] == "step-7"
