"""OpenAI `/v1/chat/completions` as the openai SDK, litellm and mini-swe-agent use it: tools and tool
calls, streaming (SSE), `n` choices, `logprobs` / `top_logprobs`, stop strings trimmed from the text.

What a response holds beyond OpenAI's fields: each choice's `token_ids` (every sampled token, the stop
token included: tokens are the truth in RL, the text is their decoding with stop strings cut off), the
response's `prompt_token_ids`, and `weight_version`.

Text is decoded from the whole output each time (never token by token), so multi-byte characters split
across tokens come out whole; a stream holds back a trailing partial character, any tail that could
still become a stop string, and everything from `<tool_call>` on (sent as tool-call deltas at the end).

Errors in a stream: the request is checked (`LocalEngine.validate_request`) before the 200 goes out, so a
context overflow is a plain 400 as without streaming; a failure after that is one `data: {"error": ...}`
event (OpenAI's error object, which the openai SDK raises as an APIError) followed by `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from aiohttp import web

from codedojo.inference.engine import LocalEngine, StreamedToken
from codedojo.inference.errors import InferenceError, InvalidRequestError, ModelNotFoundError, error_body
from codedojo.inference.protocol import Completion, SamplingParams
from codedojo.inference.tool_calls import (
    CALL_START,
    ToolCall,
    check_tools,
    parse_tool_calls,
    prepare_messages,
    tool_format,
)
from codedojo.inference.wire import openai_chat_to_params

MAX_CHOICES = 16


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    prompt: list[int]
    params: SamplingParams
    n: int
    tools: list[dict[str, Any]] | None
    logprobs: bool
    stream: bool
    include_usage: bool
    session_id: str | None


def flatten_content(content: Any, *, where: str) -> str | None:
    """A message's content as one string: text parts joined by newlines (as vLLM does)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise InvalidRequestError(
                    f"{where}: only text content parts are supported (got a {kind!r} part); this model reads text",
                    param="messages",
                )
            texts.append(part["text"])
        return "\n".join(texts)
    raise InvalidRequestError(f"{where}: content must be a string or a list of text parts", param="messages")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet (byte -> the printable character standing for it in token strings)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return mapping


_BYTE_OF_CHAR = {char: byte for byte, char in _bytes_to_unicode().items()}


class TokenText:
    """Each token's exact bytes, and the string OpenAI's logprob entries show for it."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
        self.byte_level = "ByteLevel" in repr(decoder)
        self.special = set(getattr(tokenizer, "all_special_ids", []))
        self.bytes_of = lru_cache(maxsize=65536)(self._bytes)

    def _bytes(self, token_id: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if token_id not in self.special and self.byte_level and all(c in _BYTE_OF_CHAR for c in piece):
            return bytes(_BYTE_OF_CHAR[c] for c in piece)
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # SentencePiece byte fallback
            return bytes([int(piece[3:5], 16)])
        if token_id in self.special:
            return piece.encode()
        return self.tokenizer.decode([token_id], skip_special_tokens=False).encode()

    def entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        raw = self.bytes_of(token_id)
        # A token holding part of a multi-byte character shows its bytes as \x escapes (as OpenAI does).
        return {"token": raw.decode("utf-8", errors="backslashreplace"), "logprob": logprob, "bytes": list(raw)}

    def entries(self, token_ids: Sequence[int], logprobs: Sequence[float],
                tops: Sequence[Sequence[tuple[int, float]]]) -> list[dict[str, Any]]:
        out = []
        for i, (token, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
            top = tops[i] if i < len(tops) else ()
            out.append({**self.entry(token, logprob), "top_logprobs": [self.entry(t, lp) for t, lp in top]})
        return out


def trim_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """text cut before the earliest stop string; whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def _held_back(text: str, markers: Sequence[str]) -> int:
    """Length of the longest tail of text that is a proper prefix of a marker (it may still become one)."""
    longest = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:n]):
                longest = n
                break
    return longest


class ChatCompletions:
    """Parses chat bodies, renders prompts, and answers with JSON or an SSE stream."""

    def __init__(self, engine: LocalEngine, *, model_name: str, version_label: Any) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.model_name = model_name
        self.version_label = version_label
        self.tokens = TokenText(engine.tokenizer)
        self.tool_format = tool_format(getattr(engine.tokenizer, "chat_template", None))

    # ----- request ------------------------------------------------------------------------------

    def parse(self, body: Mapping[str, Any], *, session_id: str | None) -> ChatRequest:
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise ModelNotFoundError(
                f"The model {model!r} does not exist on this server; it serves {self.model_name!r}", param="model"
            )
        params = openai_chat_to_params(body)
        n = body.get("n") or 1
        if not isinstance(n, int) or not 1 <= n <= MAX_CHOICES:
            raise InvalidRequestError(f"n must be an int in [1, {MAX_CHOICES}], got {n!r}", param="n")
        if n > 1 and session_id is not None:
            raise InvalidRequestError("n > 1 cannot carry one session id: send n requests instead", param="n")
        if params.top_logprobs and not body.get("logprobs"):
            raise InvalidRequestError("top_logprobs needs logprobs: true", param="top_logprobs")
        tools = self._tools(body)
        for flag in ("stream", "logprobs"):
            if body.get(flag) is not None and not isinstance(body[flag], bool):
                raise InvalidRequestError(f"{flag} must be true or false, got {body[flag]!r}", param=flag)
        stream = bool(body.get("stream"))
        options = body.get("stream_options") or {}
        if not isinstance(options, dict) or set(options) - {"include_usage", "continuous_usage_stats"}:
            raise InvalidRequestError(f"stream_options supports include_usage only, got {options!r}",
                                      param="stream_options")
        if options and not stream:
            raise InvalidRequestError("stream_options is only allowed with stream: true", param="stream_options")
        return ChatRequest(
            prompt=self._render(body, tools),
            params=params,
            n=n,
            tools=tools,
            logprobs=bool(body.get("logprobs")),
            stream=stream,
            include_usage=bool(options.get("include_usage")),
            session_id=session_id,
        )

    def _tools(self, body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        tools = body.get("tools")
        choice = body.get("tool_choice")
        if tools is None:
            if choice not in (None, "none"):
                raise InvalidRequestError("tool_choice needs tools", param="tool_choice")
            return None
        tools = check_tools(tools)
        if choice == "none":
            return None
        if choice not in (None, "auto"):
            # "required" and a named function need constrained decoding, which this engine does not do.
            raise InvalidRequestError(
                f"tool_choice={choice!r} is not supported (only \"auto\" and \"none\": the engine does not "
                "constrain decoding to a tool call)", param="tool_choice",
            )
        return tools

    def _render(self, body: Mapping[str, Any], tools: list[dict[str, Any]] | None) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequestError("messages must be a non-empty list", param="messages")
        flat = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise InvalidRequestError(f"messages[{i}] must be an object with a role", param="messages")
            content = flatten_content(message.get("content"), where=f"messages[{i}]")
            flat.append({**message, "content": content if content is not None else ""})
        template = getattr(self.tokenizer, "chat_template", None)
        rendered, native_tools = prepare_messages(flat, tools, chat_template=template)
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise InvalidRequestError(f"chat_template_kwargs must be an object, got {kwargs!r}",
                                      param="chat_template_kwargs")
        if native_tools:
            kwargs = {**kwargs, "tools": native_tools}
        try:
            text = self.tokenizer.apply_chat_template(rendered, tokenize=False, add_generation_prompt=True, **kwargs)
        except Exception as error:
            raise InvalidRequestError(f"cannot render messages with the chat template: {error}",
                                      param="messages") from error
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _choice_params(self, request: ChatRequest, index: int) -> SamplingParams:
        if request.params.seed is None or index == 0:
            return request.params
        return replace(request.params, seed=request.params.seed + index)  # n seeded choices must differ

    # ----- answering ----------------------------------------------------------------------------

    def _text(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def _finish(self, result: Completion, request: ChatRequest) -> tuple[str, str | None, list[ToolCall]]:
        """(finish_reason, content, tool calls) of a finished choice."""
        text, _ = trim_stop(self._text(result.token_ids), request.params.stop)
        content: str | None = text
        calls: list[ToolCall] = []
        if request.tools is not None:
            content, calls = parse_tool_calls(text, fmt=self.tool_format, tools=request.tools)
        reason: str = result.finish_reason
        if calls and reason == "stop":
            reason = "tool_calls"
        return reason, content, calls

    def _usage(self, request: ChatRequest, results: Sequence[Completion]) -> dict[str, Any]:
        completion = sum(len(r.token_ids) for r in results)
        # The n choices share one prompt: OpenAI counts it once; cached tokens are the first choice's.
        return {
            "prompt_tokens": len(request.prompt),
            "completion_tokens": completion,
            "total_tokens": len(request.prompt) + completion,
            "prompt_tokens_details": {"cached_tokens": results[0].cached_tokens},
        }

    async def respond(self, http: web.Request, request: ChatRequest) -> web.StreamResponse:
        if request.stream:
            return await self._stream(http, request)
        results = await asyncio.gather(*[
            self.engine.generate(request.prompt, self._choice_params(request, i), session_id=request.session_id)
            for i in range(request.n)
        ])
        choices = []
        for index, result in enumerate(results):
            reason, content, calls = self._finish(result, request)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = [call.as_openai() for call in calls]
            choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": reason,
                                      "token_ids": list(result.token_ids), "logprobs": None}
            if request.logprobs:
                choice["logprobs"] = {"content": self.tokens.entries(result.token_ids, result.logprobs,
                                                                      result.top_logprobs)}
            choices.append(choice)
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "prompt_token_ids": request.prompt,
            "usage": self._usage(request, results),
            "weight_version": self.version_label(results[0].weight_version),
        })

    async def _stream(self, http: web.Request, request: ChatRequest) -> web.StreamResponse:
        # The status line goes out with the first byte: whatever makes a 400 (a prompt that fills the
        # context, ...) must be found before it; a failure after it can only be an error event.
        self.engine.validate_request(request.prompt, request.params, session_id=request.session_id)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(http)
        chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": created,
                     "model": self.model_name, "choices": choices, **extra}
            await response.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())

        events: asyncio.Queue[tuple[int, StreamedToken | Completion | BaseException]] = asyncio.Queue()

        async def pump(index: int) -> None:
            try:
                params = self._choice_params(request, index)
                async for item in self.engine.stream(request.prompt, params, session_id=request.session_id):
                    await events.put((index, item))
            except Exception as error:
                await events.put((index, error))

        for index in range(request.n):
            await send([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None}])
        pumps = [asyncio.ensure_future(pump(i)) for i in range(request.n)]
        outputs: list[list[int]] = [[] for _ in range(request.n)]
        sent = [0] * request.n  # characters of content already sent, per choice
        results: list[Completion | None] = [None] * request.n
        markers = [*request.params.stop, *([CALL_START] if request.tools is not None else [])]
        try:
            try:
                while any(r is None for r in results):
                    index, item = await events.get()
                    if isinstance(item, BaseException):
                        raise item
                    if isinstance(item, Completion):
                        results[index] = item
                        await self._send_end(send, request, index, item, sent[index])
                        continue
                    outputs[index].append(item.token_id)
                    text = self._visible(outputs[index], markers)
                    choice: dict[str, Any] = {"index": index, "delta": {"content": text[sent[index]:]},
                                              "logprobs": None, "finish_reason": None}
                    sent[index] = max(sent[index], len(text))
                    if request.logprobs:
                        choice["logprobs"] = {"content": self.tokens.entries([item.token_id], [item.logprob],
                                                                              [item.top_logprobs])}
                    await send([choice])
                if request.include_usage:
                    await send([], usage=self._usage(request, [r for r in results if r is not None]))
            except (ConnectionError, asyncio.CancelledError):
                raise  # the client is gone: nobody to tell
            except Exception as error:
                # The 200 is sent: the failure travels as an event, the shape the openai SDK raises from.
                failure = error if isinstance(error, InferenceError) else InferenceError(
                    f"{type(error).__name__}: {error}")
                await response.write(f"data: {json.dumps(error_body(failure), ensure_ascii=False)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
        finally:
            for task in pumps:
                task.cancel()  # a client that went away cancels its generation
        return response

    def _visible(self, output: list[int], markers: Sequence[str]) -> str:
        """The content that can be sent so far: no partial character, no possible stop or call start."""
        text = self._text(output).rstrip("\ufffd")
        for marker in markers:
            if marker in text:
                text = text[: text.find(marker)]
        text = text[: len(text) - _held_back(text, markers)]
        # Whitespace before a tool call is not content (`parse_tool_calls` strips it): wait and see.
        return text.rstrip() if CALL_START in markers else text

    async def _send_end(self, send: Any, request: ChatRequest, index: int, result: Completion, sent: int) -> None:
        reason, content, calls = self._finish(result, request)
        delta: dict[str, Any] = {}
        rest = (content or "")[sent:]
        if rest:
            delta["content"] = rest
        if calls:
            delta["tool_calls"] = [call.as_openai(index=i) for i, call in enumerate(calls)]
        if delta:
            await send([{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}])
        await send([{"index": index, "delta": {}, "logprobs": None, "finish_reason": reason}])
