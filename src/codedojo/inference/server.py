"""`codedojo serve`: a `LocalEngine` behind HTTP, speaking what agent loops, OpenAI clients and RL
frameworks speak.

Routes:
- POST /generate: SGLang's native API. input_ids or text, sampling_params, return_logprob,
  top_logprobs_num -> text (stop strings trimmed unless `no_stop_trim`), output_ids (every sampled token),
  meta_info (finish_reason, prompt/completion/cached tokens, weight_version as a string,
  output_token_logprobs as [logprob, token_id, null] triples, output_top_logprobs).
- POST /v1/chat/completions: OpenAI chat (`codedojo.inference.openai_chat`: tools, streaming, n,
  top_logprobs). GET /v1/models, GET /v1/models/{id}.
- SGLang's admin surface, with SGLang's response shapes: GET /health_generate, /get_model_info
  (/model_info), /get_server_info (/server_info), /get_weight_version, /v1/loads; POST /flush_cache,
  /abort_request, /pause_generation, /continue_generation, /update_weights_from_disk.
- codedojo's own: GET /health ({"status": "ok", "weight_version"}), GET /stats (engine counters, the
  sessions holding KV, HTTP status counts), POST /end_session (alias /close_session).

The session id travels in the `X-Session-ID` header (vLLM's router key), `X-SMG-Routing-Key` (SGLang's
router key with consistent hashing) or a `session_id` body field; without one, the engine's prefix cache
still reuses any KV it holds for the prompt's prefix.

Every error, unknown routes included, is OpenAI-shaped JSON: `{"error": {"message", "type", "param",
"code"}}`, `type` OpenAI's category ("invalid_request_error" for 4xx, "server_error" for 5xx), `code` the
`InferenceError` class name (`context_length_exceeded`, `model_not_found`, ...), which `HTTPEngine` maps
back to the same exception. A client that disconnects cancels its request.

Weight versions are strings, as in SGLang: the engine's counter ("0", "1", ...) unless an update named
its own (`update_weights_from_disk` with `weight_version`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

import codedojo
from codedojo.inference.engine import PAUSE_MODES, LocalEngine
from codedojo.inference.errors import (
    InferenceError,
    InvalidRequestError,
    ModelNotFoundError,
    RequestTooLargeError,
    RouteNotFoundError,
    ServerOverloadedError,
    error_body,
)
from codedojo.inference.openai_chat import ChatCompletions, TokenText, trim_stop
from codedojo.inference.protocol import Completion, SamplingParams
from codedojo.inference.wire import sglang_to_params

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
    "custom_params",
    "return_routed_experts",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_BYTES = 64 << 20
"""The largest request body read; a larger one is a 413 naming this limit (far above any prompt a context holds)."""


def error_response(error: InferenceError) -> web.Response:
    headers = {"Retry-After": str(error.retry_after)} if isinstance(error, ServerOverloadedError) else None
    return web.json_response(error_body(error), status=error.http_status, headers=headers)


GENERATION_ROUTES = frozenset({"/generate", "/v1/chat/completions"})
"""The routes that hold a generation request; the admission limit counts them."""


def _session_id(request: web.Request, body: dict[str, Any]) -> str | None:
    for header in SESSION_HEADERS:
        if request.headers.get(header):
            return request.headers[header]
    value = body.get("session_id")
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError(f"session_id must be a string, got {value!r}", param="session_id")
    return value


async def _json(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    try:
        if optional and not await request.read():
            return {}
        body = await request.json()
    except web.HTTPRequestEntityTooLarge:
        raise RequestTooLargeError(f"request body is over this server's limit of {MAX_BODY_BYTES >> 20} MiB; "
                                   "send a smaller one (a prompt must fit the model's context anyway)") from None
    except ValueError as error:
        raise InvalidRequestError(f"request body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    return body


class InferenceServer:
    """Routes for one engine. `model_name` is what /v1/models and responses report."""

    def __init__(self, engine: LocalEngine, *, model_name: str, max_waiting: int | None = None) -> None:
        """`max_waiting`: generation requests admitted beyond the engine's running batch (`max_running`); one
        more is answered 503 with Retry-After at once. None: no limit (every request waits its turn)."""
        self.engine = engine
        self.model_name = model_name
        self.admission_limit = None if max_waiting is None else engine.scheduler.max_running + max_waiting
        self.admitted = 0
        """Generation requests being served now (running or waiting in the engine's queue)."""
        self.refused = 0
        self.tokenizer = engine.tokenizer
        self.tokens = TokenText(engine.tokenizer)
        self.version_names: dict[int, str] = {}
        self.statuses: Counter[int] = Counter()
        self.started = time.time()
        self.chat_api = ChatCompletions(engine, model_name=model_name, version_label=self.version_label)

    def version_label(self, version: int) -> str:
        return self.version_names.get(version, str(version))

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors, self._admission], client_max_size=MAX_BODY_BYTES)
        app.add_routes(
            [
                web.get("/health", self.health),
                web.get("/health_generate", self.health_generate),
                web.get("/stats", self.stats),
                web.get("/v1/models", self.models),
                web.get("/v1/models/{model:.+}", self.model),
                web.get("/get_model_info", self.model_info),
                web.get("/model_info", self.model_info),
                web.get("/get_server_info", self.server_info),
                web.get("/server_info", self.server_info),
                web.get("/get_weight_version", self.weight_version),
                web.get("/v1/loads", self.loads),
                web.route("*", "/flush_cache", self.flush_cache),
                web.post("/abort_request", self.abort_request),
                web.post("/pause_generation", self.pause_generation),
                web.post("/continue_generation", self.continue_generation),
                web.post("/generate", self.generate),
                web.post("/v1/chat/completions", self.chat),
                web.post("/update_weights_from_disk", self.update_weights),
                web.post("/end_session", self.end_session),
                web.post("/close_session", self.end_session),
            ]
        )
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except InferenceError as error:
            response = error_response(error)
        except web.HTTPException as error:
            if error.status < 400:
                raise
            if error.status in (404, 405):
                missing = RouteNotFoundError(f"no route {request.method} {request.path} on this server "
                                             f"({error.reason})")
                response = web.json_response(error_body(missing), status=404)
            else:
                response = web.json_response(error_body(InvalidRequestError(error.reason)), status=error.status)
        except Exception as error:  # a bug: report it instead of a bare 500 page
            response = error_response(InferenceError(f"{type(error).__name__}: {error}"))
        self.statuses[response.status] += 1
        return response

    @web.middleware
    async def _admission(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """At most `admission_limit` generation requests at once (a stream counts until it ends)."""
        if request.path not in GENERATION_ROUTES or self.admission_limit is None:
            return await handler(request)
        if self.admitted >= self.admission_limit:
            self.refused += 1
            raise ServerOverloadedError(
                f"this server is serving {self.admitted} generation requests, its admission limit "
                f"(--max-running {self.engine.scheduler.max_running} + --max-waiting "
                f"{self.admission_limit - self.engine.scheduler.max_running}); retry after "
                f"{ServerOverloadedError.retry_after} s, or start it with a larger --max-waiting")
        self.admitted += 1
        try:
            return await handler(request)
        finally:
            self.admitted -= 1

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "weight_version": self.version_label(self.engine.weight_version)})

    async def health_generate(self, request: web.Request) -> web.Response:
        """SGLang's deep health check: generate one token; 200 with an empty body. While generation is
        paused no token comes: 503 at once (SGLang answers 503 when no output arrives within its
        health-check timeout, 20 s by default)."""
        if self.engine.paused:
            return web.Response(status=503, text="generation is paused (/continue_generation resumes it)\n")
        await self.engine.generate([0], SamplingParams(temperature=0.0, max_new_tokens=1))
        return web.Response(status=200)

    async def stats(self, request: web.Request) -> web.Response:
        stats = await self.engine.stats()
        stats["http_status_counts"] = {str(k): v for k, v in sorted(self.statuses.items())}
        stats["admission"] = {"limit": self.admission_limit, "admitted": self.admitted, "refused": self.refused}
        return web.json_response(stats)

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": int(self.started), "owned_by": "codedojo",
                "root": self.model_name, "max_model_len": self.engine.max_context}

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.model_name:
            raise ModelNotFoundError(f"The model {name!r} does not exist; this server serves {self.model_name!r}",
                                     param="model")
        return web.json_response(self._model_card())

    # ----- SGLang's admin routes --------------------------------------------------------------

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": self.model_name,
            "tokenizer_path": self.model_name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": self.version_label(self.engine.weight_version),
        })

    async def weight_version(self, request: web.Request) -> web.Response:
        return web.json_response({"weight_version": self.version_label(self.engine.weight_version)})

    async def server_info(self, request: web.Request) -> web.Response:
        """SGLang's server args (the ones with a meaning here), scheduler info and internal states."""
        stats = await self.engine.stats()
        return web.json_response({
            "model_path": self.model_name,
            "tokenizer_path": self.model_name,
            "served_model_name": self.model_name,
            "context_length": self.engine.max_context,
            "tp_size": 1,
            "pp_size": 1,
            "dp_size": 1,
            "ep_size": 1,
            "num_gpus": 1 if self.engine.model.device.type == "cuda" else 0,
            "device": self.engine.model.device.type,
            "dtype": str(self.engine.model.dtype).removeprefix("torch."),
            "disaggregation_mode": "null",
            "disable_radix_cache": not stats["prefix_cache"],
            "max_running_requests": self.engine.scheduler.max_running,
            "chunked_prefill_size": self.engine.scheduler.max_step_tokens,
            "max_total_num_tokens": self.engine.kv_budget_tokens,
            "weight_version": self.version_label(self.engine.weight_version),
            "internal_states": [self._internal_state(stats)],
            "version": f"codedojo {codedojo.__version__}",
        })

    def _internal_state(self, stats: dict[str, Any]) -> dict[str, Any]:
        return {
            "num_running_reqs": stats["running"],
            "num_waiting_reqs": stats["waiting"],
            "cache_hit_rate": stats["cached_tokens"] / stats["prompt_tokens"] if stats["prompt_tokens"] else 0.0,
            "paused": stats["paused"],
        }

    async def loads(self, request: web.Request) -> web.Response:
        """SGLang's /v1/loads: one dp rank's load, and the aggregate over ranks (here the same one)."""
        stats = await self.engine.stats()
        used = stats["kv_allocated_tokens"] + stats["parked_tokens"]
        total = stats["kv_budget_tokens"]
        load = {
            "dp_rank": 0,
            "num_running_reqs": stats["running"],
            "num_waiting_reqs": stats["waiting"],
            "num_used_tokens": used,
            "num_total_tokens": used,
            "max_total_num_tokens": total,
            "token_usage": round(used / total, 4) if total else 0.0,
            "gen_throughput": 0.0,
            "cache_hit_rate": round(self._internal_state(stats)["cache_hit_rate"], 4),
            "utilization": round(stats["running"] / self.engine.scheduler.max_running, 4),
            "max_running_requests": self.engine.scheduler.max_running,
        }
        load["num_total_reqs"] = load["num_running_reqs"] + load["num_waiting_reqs"]
        aggregate = {
            "total_running_reqs": load["num_running_reqs"],
            "total_waiting_reqs": load["num_waiting_reqs"],
            "total_reqs": load["num_total_reqs"],
            "total_used_tokens": used,
            "total_tokens": load["num_total_tokens"],
            "avg_token_usage": load["token_usage"],
            "avg_throughput": 0.0,
            "avg_utilization": load["utilization"],
        }
        return web.json_response({
            "timestamp": datetime.now(UTC).isoformat(),
            "version": "codedojo",
            "dp_rank_count": 1,
            "loads": [load],
            "aggregate": aggregate,
        })

    async def flush_cache(self, request: web.Request) -> web.Response:
        """SGLang's answer: plain text, 200, or 400 while requests run (nothing is flushed then)."""
        if await self.engine.flush_cache():
            return web.Response(text="Cache flushed.\n")
        return web.Response(status=400, text="Cache not flushed: requests are running or waiting.\n")

    async def abort_request(self, request: web.Request) -> web.Response:
        body = await _json(request, optional=True)
        rid = body.get("rid")
        if not body.get("abort_all") and not (isinstance(rid, str) and rid):
            raise InvalidRequestError("abort_request needs a rid (a string) or abort_all: true", param="rid")
        await self.engine.abort(rid=None if body.get("abort_all") else rid)
        return web.Response(status=200)

    async def pause_generation(self, request: web.Request) -> web.Response:
        body = await _json(request, optional=True)
        mode = body.get("mode", "abort")
        if mode not in PAUSE_MODES:
            raise InvalidRequestError(f"mode must be one of {list(PAUSE_MODES)}, got {mode!r}", param="mode")
        await self.engine.pause(mode=mode)
        return web.json_response({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(self, request: web.Request) -> web.Response:
        await self.engine.resume()
        return web.json_response({"message": "Generation continued successfully.", "status": "ok"})

    async def update_weights(self, request: web.Request) -> web.Response:
        body = await _json(request)
        path = body.get("model_path")
        if not isinstance(path, str):
            raise InvalidRequestError("update_weights_from_disk needs model_path (a folder of safetensors)",
                                      param="model_path")
        label = body.get("weight_version")
        if label is not None and not isinstance(label, str):
            raise InvalidRequestError(f"weight_version must be a string, got {label!r}", param="weight_version")
        abort = bool(body.get("abort_all_requests", False))
        version = await self.engine.load_weights_from_disk(path, abort_running=abort)
        if label is not None:
            self.version_names[version] = label
        return web.json_response({"success": True, "message": f"loaded {path}", "num_paused_requests": 0,
                                  "weight_version": self.version_label(version)})

    async def end_session(self, request: web.Request) -> web.Response:
        body = await _json(request)
        session_id = body.get("session_id")
        if not isinstance(session_id, str):
            raise InvalidRequestError("end_session needs session_id (a string)", param="session_id")
        await self.engine.end_session(session_id)
        return web.json_response({"success": True})

    # ----- SGLang /generate -----------------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.Response:
        body = await _json(request)
        unknown = sorted(set(body) - GENERATE_KEYS)
        if unknown:
            raise InvalidRequestError(f"unknown /generate keys: {unknown}")
        if body.get("stream"):
            raise InvalidRequestError("/generate does not stream (use /v1/chat/completions with stream: true)",
                                      param="stream")
        if body.get("logprob_start_len", -1) != -1:
            raise InvalidRequestError("only output-token logprobs are supported (logprob_start_len=-1)",
                                      param="logprob_start_len")
        if body.get("return_routed_experts"):
            raise InvalidRequestError("return_routed_experts: this dense model has no experts",
                                      param="return_routed_experts")
        if not isinstance(body.get("custom_params") or {}, dict):
            raise InvalidRequestError("custom_params must be an object", param="custom_params")
        sampling = body.get("sampling_params")
        sampling = {} if sampling is None else sampling
        params = sglang_to_params(sampling)
        top = body.get("top_logprobs_num") or 0
        if top:
            params = replace(params, top_logprobs=top)
        prompts, batched = self._prompts(body)
        session_id = _session_id(request, body)
        if batched and session_id is not None:
            raise InvalidRequestError("a batched /generate cannot carry one session id", param="session_id")
        started = time.perf_counter()
        rid = body.get("rid") or uuid.uuid4().hex
        rids = rid if isinstance(rid, list) else [rid if len(prompts) == 1 else f"{rid}-{i}" for i in
                                                  range(len(prompts))]
        if len(rids) != len(prompts) or not all(isinstance(r, str) for r in rids):
            raise InvalidRequestError("rid must be a string, or a list of strings, one per prompt", param="rid")
        results = await asyncio.gather(
            *[self.engine.generate(ids, params, session_id=session_id, rid=r) for ids, r in zip(prompts, rids,
                                                                                              strict=True)]
        )
        options: dict[str, Any] = {"logprobs": bool(body.get("return_logprob")), "top": bool(top),
                                   "skip_special": bool(sampling.get("skip_special_tokens", True)),
                                   "trim": not sampling.get("no_stop_trim", False), "started": started}
        outputs = [self._generate_output(res, params, rid=r, **options) for res, r in zip(results, rids, strict=True)]
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
            raise InvalidRequestError("input_ids must be a list of ints or a list of such lists", param="input_ids")
        text = body["text"]
        if isinstance(text, str):
            return [self.tokenizer.encode(text)], False
        if isinstance(text, list) and all(isinstance(t, str) for t in text):
            return [self.tokenizer.encode(t) for t in text], True
        raise InvalidRequestError("text must be a string or a list of strings", param="text")

    def _generate_output(
        self, result: Completion, params: SamplingParams, *, rid: str, logprobs: bool, top: bool,
        skip_special: bool, trim: bool, started: float,
    ) -> dict[str, Any]:
        text = self.tokenizer.decode(list(result.token_ids), skip_special_tokens=skip_special)
        finish = self._finish_reason(result, params)
        if trim and finish.get("type") == "stop" and isinstance(finish.get("matched"), str):
            text, _ = trim_stop(text, params.stop)
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": len(result.token_ids),
            "cached_tokens": result.cached_tokens,
            "weight_version": self.version_label(result.weight_version),
            "e2e_latency": time.perf_counter() - started,
        }
        if logprobs:
            meta["output_token_logprobs"] = [
                [lp, token, None] for lp, token in zip(result.logprobs, result.token_ids, strict=True)
            ]
            if top:
                meta["output_top_logprobs"] = [[[lp, t, None] for t, lp in row] for row in result.top_logprobs]
        return {"text": text, "output_ids": list(result.token_ids), "meta_info": meta}

    def _finish_reason(self, result: Completion, params: SamplingParams) -> dict[str, Any]:
        if result.finish_reason == "length":
            return {"type": "length", "length": len(result.token_ids)}
        if result.finish_reason == "abort":
            return {"type": "abort", "message": "aborted (cancelled, /abort_request, or a weight update)"}
        if params.stop:
            tail = self.tokenizer.decode(list(result.token_ids[-64:]), skip_special_tokens=False)
            for stop in params.stop:
                if stop in tail:
                    return {"type": "stop", "matched": stop}
        return {"type": "stop", "matched": result.token_ids[-1]}

    # ----- OpenAI /v1/chat/completions --------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await _json(request)
        chat = self.chat_api.parse(body, session_id=_session_id(request, body))
        return await self.chat_api.respond(request, chat)


async def serve(engine: LocalEngine, *, model_name: str, host: str, port: int,
                ready: Callable[[str], None] | None = None, max_waiting: int | None = None) -> None:
    """Run until cancelled; `ready(url)` is called once the socket listens (port 0 picks a free one)."""
    # handler_cancellation: a client that disconnects cancels its handler, and so its generation.
    server = InferenceServer(engine, model_name=model_name, max_waiting=max_waiting)
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    try:  # a port that cannot be bound (OSError) closes the engine too
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        if ready is not None:
            ready(f"http://{host}:{bound}")
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await engine.close()
