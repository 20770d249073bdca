"""`codedojo serve`: a `LocalEngine` behind HTTP, speaking what agent loops and RL frameworks speak.

Routes:
- POST /generate: SGLang's native API. input_ids or text, sampling_params, return_logprob -> text,
  output_ids, meta_info (finish_reason, prompt/completion/cached tokens, weight_version, and
  output_token_logprobs as [logprob, token_id, null] triples).
- POST /v1/chat/completions: OpenAI chat. Each choice also carries `token_ids`, the response carries
  `prompt_token_ids`, and `logprobs.content` is filled when `logprobs: true`.
- GET /v1/models, GET /health ({"status": "ok", "weight_version": n}), GET /stats (engine counters and
  the ids of the sessions holding KV).
- POST /update_weights_from_disk {"model_path": folder}: load safetensors (SGLang's route name), bump
  weight_version.
- POST /end_session (alias /close_session) {"session_id": id}: free a session's KV.

The session id travels in the `X-Session-ID` header (vLLM's router key), `X-SMG-Routing-Key` (SGLang's
router key with consistent hashing) or a `session_id` body field. Errors are
`{"error": {"type", "message"}}` with the status code of the `InferenceError` class.

Stop strings are not trimmed from the text: tokens are the truth in RL, and the text is their decoding.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from codedojo.inference.engine import LocalEngine
from codedojo.inference.errors import InferenceError, InvalidRequestError
from codedojo.inference.protocol import Completion, SamplingParams
from codedojo.inference.wire import openai_chat_to_params, sglang_to_params

SESSION_HEADERS = ("X-Session-ID", "X-SMG-Routing-Key")
GENERATE_KEYS = {
    "text",
    "input_ids",
    "sampling_params",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "rid",
    "stream",
    "session_id",
    "return_text_in_logprobs",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(error: InferenceError) -> web.Response:
    body = {"error": {"type": error.type_name, "message": str(error)}}
    return web.json_response(body, status=error.http_status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except InferenceError as error:
        return error_response(error)
    except web.HTTPException:
        raise
    except Exception as error:  # a bug: report it instead of a bare 500 page
        return error_response(InferenceError(f"{type(error).__name__}: {error}"))


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as error:
        raise InvalidRequestError(f"request body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    return body


def _session_id(request: web.Request, body: dict[str, Any]) -> str | None:
    for header in SESSION_HEADERS:
        if request.headers.get(header):
            return request.headers[header]
    value = body.get("session_id")
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError(f"session_id must be a string, got {value!r}")
    return value


class InferenceServer:
    """Routes for one engine. `model_name` is what /v1/models and responses report."""

    def __init__(self, engine: LocalEngine, *, model_name: str) -> None:
        self.engine = engine
        self.model_name = model_name
        self.tokenizer = engine.tokenizer

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_errors], client_max_size=64 << 20)
        app.add_routes(
            [
                web.get("/health", self.health),
                web.get("/stats", self.stats),
                web.get("/v1/models", self.models),
                web.post("/generate", self.generate),
                web.post("/v1/chat/completions", self.chat),
                web.post("/update_weights_from_disk", self.update_weights),
                web.post("/end_session", self.end_session),
                web.post("/close_session", self.end_session),
            ]
        )
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "weight_version": self.engine.weight_version})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(await self.engine.stats())

    async def models(self, request: web.Request) -> web.Response:
        entry = {"id": self.model_name, "object": "model", "owned_by": "codedojo"}
        entry["max_model_len"] = self.engine.max_context
        return web.json_response({"object": "list", "data": [entry]})

    async def update_weights(self, request: web.Request) -> web.Response:
        body = await _json(request)
        path = body.get("model_path")
        if not isinstance(path, str):
            raise InvalidRequestError("update_weights_from_disk needs model_path (a folder of safetensors)")
        abort = bool(body.get("abort_all_requests", False))
        version = await self.engine.load_weights_from_disk(path, abort_running=abort)
        return web.json_response({"success": True, "message": f"loaded {path}", "weight_version": version})

    async def end_session(self, request: web.Request) -> web.Response:
        body = await _json(request)
        session_id = body.get("session_id")
        if not isinstance(session_id, str):
            raise InvalidRequestError("end_session needs session_id (a string)")
        await self.engine.end_session(session_id)
        return web.json_response({"success": True})

    # ----- SGLang /generate -----------------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.Response:
        body = await _json(request)
        unknown = sorted(set(body) - GENERATE_KEYS)
        if unknown:
            raise InvalidRequestError(f"unknown /generate keys: {unknown}")
        if body.get("stream"):
            raise InvalidRequestError("streaming is not supported")
        if body.get("logprob_start_len", -1) != -1 or body.get("top_logprobs_num", 0):
            raise InvalidRequestError("only output-token logprobs are supported (logprob_start_len=-1, top 0)")
        sampling = body.get("sampling_params") or {}
        params = sglang_to_params(sampling)
        prompts, batched = self._prompts(body)
        session_id = _session_id(request, body)
        if batched and session_id is not None:
            raise InvalidRequestError("a batched /generate cannot carry one session id")
        started = time.perf_counter()
        results = await asyncio.gather(
            *[self.engine.generate(ids, params, session_id=session_id) for ids in prompts]
        )
        skip_special = bool(sampling.get("skip_special_tokens", True))
        rid = body.get("rid") or uuid.uuid4().hex
        outputs = [
            self._generate_output(r, params, rid=rid, logprobs=bool(body.get("return_logprob")),
                                  skip_special=skip_special, started=started)
            for r in results
        ]
        return web.json_response(outputs if batched else outputs[0])

    def _prompts(self, body: dict[str, Any]) -> tuple[list[list[int]], bool]:
        if ("text" in body) == ("input_ids" in body):
            raise InvalidRequestError("give exactly one of text or input_ids")
        if "input_ids" in body:
            ids = body["input_ids"]
            if isinstance(ids, list) and ids and all(isinstance(x, list) for x in ids):
                return ids, True
            if isinstance(ids, list) and all(isinstance(x, int) for x in ids):
                return [ids], False
            raise InvalidRequestError("input_ids must be a list of ints or a list of such lists")
        text = body["text"]
        if isinstance(text, str):
            return [self.tokenizer.encode(text)], False
        if isinstance(text, list) and all(isinstance(t, str) for t in text):
            return [self.tokenizer.encode(t) for t in text], True
        raise InvalidRequestError("text must be a string or a list of strings")

    def _generate_output(
        self, result: Completion, params: SamplingParams, *, rid: str, logprobs: bool, skip_special: bool,
        started: float,
    ) -> dict[str, Any]:
        text = self.tokenizer.decode(list(result.token_ids), skip_special_tokens=skip_special)
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": self._finish_reason(result, params),
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": len(result.token_ids),
            "cached_tokens": result.cached_tokens,
            "weight_version": result.weight_version,
            "e2e_latency": time.perf_counter() - started,
        }
        if logprobs:
            meta["output_token_logprobs"] = [
                [lp, token, None] for lp, token in zip(result.logprobs, result.token_ids, strict=True)
            ]
        return {"text": text, "output_ids": list(result.token_ids), "meta_info": meta}

    def _finish_reason(self, result: Completion, params: SamplingParams) -> dict[str, Any]:
        if result.finish_reason == "length":
            return {"type": "length", "length": len(result.token_ids)}
        if result.finish_reason == "abort":
            return {"type": "abort", "message": "aborted (cancelled or interrupted by a weight update)"}
        if params.stop:
            tail = self.tokenizer.decode(list(result.token_ids[-64:]), skip_special_tokens=False)
            for stop in params.stop:
                if stop in tail:
                    return {"type": "stop", "matched": stop}
        return {"type": "stop", "matched": result.token_ids[-1]}

    # ----- OpenAI /v1/chat/completions --------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.Response:
        body = await _json(request)
        params = openai_chat_to_params(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequestError("messages must be a non-empty list")
        kwargs = body.get("chat_template_kwargs") or {}
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **kwargs
            )
        except Exception as error:
            raise InvalidRequestError(f"cannot render messages with the chat template: {error}") from error
        prompt = self.tokenizer.encode(text, add_special_tokens=False)
        result = await self.engine.generate(prompt, params, session_id=_session_id(request, body))
        content = self.tokenizer.decode(list(result.token_ids), skip_special_tokens=True)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": result.finish_reason,
            "token_ids": list(result.token_ids),
            "logprobs": None,
        }
        if body.get("logprobs"):
            pieces = [self.tokenizer.decode([t], skip_special_tokens=False) for t in result.token_ids]
            choice["logprobs"] = {
                "content": [
                    {"token": piece, "logprob": lp, "bytes": list(piece.encode()), "top_logprobs": []}
                    for piece, lp in zip(pieces, result.logprobs, strict=True)
                ]
            }
        usage = {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": len(result.token_ids),
            "total_tokens": result.prompt_tokens + len(result.token_ids),
            "prompt_tokens_details": {"cached_tokens": result.cached_tokens},
        }
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model_name,
                "choices": [choice],
                "prompt_token_ids": prompt,
                "usage": usage,
                "weight_version": result.weight_version,
            }
        )


async def serve(engine: LocalEngine, *, model_name: str, host: str, port: int,
                ready: Callable[[str], None] | None = None) -> None:
    """Run until cancelled; `ready(url)` is called once the socket listens (port 0 picks a free one)."""
    runner = web.AppRunner(InferenceServer(engine, model_name=model_name).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    if ready is not None:
        ready(f"http://{host}:{bound}")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await engine.close()
