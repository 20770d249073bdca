"""`HTTPEngine`: the `Engine` protocol over HTTP, for `codedojo serve`, SGLang and vLLM servers.

flavor "sglang" (codedojo serve and SGLang) posts token ids to `/generate` with `return_logprob`;
flavor "vllm" posts them to `/v1/completions` with `logprobs: 0` and `return_tokens_as_token_ids`.
The session id goes in the `X-Session-ID` and `X-SMG-Routing-Key` headers, which codedojo serve reads
and which the vLLM and SGLang routers hash for session affinity; SGLang and vLLM themselves reuse the
prefix through their own prefix caches.

Logprobs from real servers: SGLang returns the temperature-scaled logprob (our convention) unless it
runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1. vLLM returns raw-logit logprobs unless started with
`--logprobs-mode processed_logprobs`, which (with top_k=0, top_p=1) matches our convention.

Failures never hang: every request has a total timeout (`EngineTimeoutError`), and a refused or
dropped connection (a dead server) raises `EngineUnavailableError` at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import aiohttp

from codedojo.inference.errors import (
    ERROR_TYPES,
    EngineClosedError,
    EngineTimeoutError,
    EngineUnavailableError,
    InferenceError,
    InvalidRequestError,
    RouteNotFoundError,
    ServerOverloadedError,
)
from codedojo.inference.protocol import Completion, FinishReason, SamplingParams
from codedojo.inference.wire import params_to_sglang

Flavor = Literal["sglang", "vllm"]


class HTTPEngine:
    """An `Engine` backed by one server. `tokenizer` must be the served model's (clients never fetch it)."""

    def __init__(
        self,
        base_url: str,
        *,
        tokenizer: Any,
        flavor: Flavor = "sglang",
        model: str | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        if flavor not in ("sglang", "vllm"):
            raise InvalidRequestError(f"flavor must be 'sglang' or 'vllm', got {flavor!r}")
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.flavor = flavor
        self.model = model
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"HTTPEngine({self.base_url!r}, flavor={self.flavor!r})"

    # ----- the Engine protocol --------------------------------------------------------------------

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None
    ) -> Completion:
        headers = {"X-Session-ID": session_id, "X-SMG-Routing-Key": session_id} if session_id else {}
        if self.flavor == "vllm":
            return await self._generate_vllm(list(prompt_ids), params, headers)
        body = {"input_ids": list(prompt_ids), "sampling_params": params_to_sglang(params), "return_logprob": True}
        reply = await self._post("/generate", body, headers=headers)
        meta = reply["meta_info"]
        pairs = meta.get("output_token_logprobs") or []
        token_ids = [int(p[1]) for p in pairs] if pairs else [int(t) for t in reply.get("output_ids", [])]
        return Completion(
            token_ids=tuple(token_ids),
            logprobs=tuple(float(p[0]) for p in pairs),
            finish_reason=_finish_reason((meta.get("finish_reason") or {}).get("type")),
            prompt_tokens=int(meta.get("prompt_tokens", len(prompt_ids))),
            cached_tokens=int(meta.get("cached_tokens") or 0),
            weight_version=_version(meta.get("weight_version")),
        )

    async def end_session(self, session_id: str) -> None:
        if self.flavor == "vllm":
            return  # vLLM's prefix cache frees blocks on its own
        try:
            await self._post("/end_session", {"session_id": session_id})
        except RouteNotFoundError:
            pass  # a real SGLang server has no such route; its radix cache evicts by itself

    async def update_weights(self, state: Mapping[str, Any]) -> int:
        raise NotImplementedError("an HTTP engine's server loads weights from disk: write them as an HF folder "
                                  "(train.checkpoint.save_hf_folder) and call update_weights_from_disk(folder)")

    async def flush_cache(self) -> bool:
        """POST /flush_cache (SGLang's route, and codedojo serve's): False while the server has requests in
        flight (it answers 400 then). vLLM frees its prefix cache's blocks by itself: False, nothing asked."""
        if self.flavor == "vllm":
            return False
        try:
            await self._request("POST", "/flush_cache", None, reply="text")
        except InvalidRequestError:
            return False
        return True

    async def close(self) -> None:
        self._closed = True
        if self._http is not None:
            await self._http.close()
            self._http = None

    # ----- beyond the protocol --------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        return await self._request("GET", "/health", None)

    async def stats(self) -> dict[str, Any]:
        return await self._request("GET", "/stats", None)

    async def update_weights_from_disk(self, model_path: str, *, abort_running: bool = False) -> int:
        """Ask the server to load a folder of safetensors; returns the new weight version."""
        body = {"model_path": model_path, "abort_all_requests": abort_running}
        reply = await self._post("/update_weights_from_disk", body)
        return _version(reply.get("weight_version"))

    # ----- vLLM -----------------------------------------------------------------------------------

    async def _generate_vllm(self, prompt: list[int], params: SamplingParams, headers: dict[str, str]) -> Completion:
        if self.model is None:
            models = await self._request("GET", "/v1/models", None)
            self.model = models["data"][0]["id"]
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k else -1,
            "ignore_eos": params.ignore_eos,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        if params.seed is not None:
            body["seed"] = params.seed
        reply = await self._post("/v1/completions", body, headers=headers)
        choice = reply["choices"][0]
        logprobs = choice.get("logprobs") or {}
        tokens = [int(str(t).removeprefix("token_id:")) for t in logprobs.get("tokens") or []]
        usage = reply.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return Completion(
            token_ids=tuple(tokens),
            logprobs=tuple(float(x) for x in logprobs.get("token_logprobs") or []),
            finish_reason=_finish_reason(choice.get("finish_reason")),
            prompt_tokens=int(usage.get("prompt_tokens", len(prompt))),
            cached_tokens=int(details.get("cached_tokens") or 0),
            weight_version=0,
        )

    # ----- transport ------------------------------------------------------------------------------

    async def _post(self, path: str, body: dict[str, Any], *, headers: dict[str, str] | None = None) -> Any:
        return await self._request("POST", path, body, headers=headers)

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None, *, headers: dict[str, str] | None = None,
        reply: Literal["json", "text"] = "json",
    ) -> Any:
        if self._closed:
            raise EngineClosedError(f"{self!r} is closed")
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self.timeout)
        url = self.base_url + path
        deadline = time.monotonic() + (self.timeout.total or 0.0)
        try:
            while True:
                async with self._http.request(method, url, json=body, headers=headers) as response:
                    if response.status >= 400:
                        error = await _http_error(response, url)
                        wait = _retry_after(response, error)
                        if wait is None or (self.timeout.total and time.monotonic() + wait > deadline):
                            raise error
                    else:
                        return await (response.text() if reply == "text" else response.json(content_type=None))
                await asyncio.sleep(wait)  # the server is at its admission limit: it said when to come back
        except TimeoutError as error:
            raise EngineTimeoutError(
                f"{url} did not answer within {self.timeout.total:.0f} s (server overloaded, hung or dead?)"
            ) from error
        except aiohttp.ClientConnectorError as error:
            raise EngineUnavailableError(f"cannot connect to {url}: {error}") from error
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as error:
            raise EngineUnavailableError(
                f"{url} closed the connection mid-request (did the server die?): {error}"
            ) from error
        except aiohttp.ClientError as error:
            raise EngineUnavailableError(f"request to {url} failed: {type(error).__name__}: {error}") from error


async def _http_error(response: aiohttp.ClientResponse, url: str) -> InferenceError:
    text = await response.text()
    try:
        error = (await response.json(content_type=None)).get("error") or {}
    except (ValueError, AttributeError, aiohttp.ContentTypeError):
        error = {}
    # codedojo serve names its error class in `code` (OpenAI's field; `type` is OpenAI's category).
    for key in ("code", "type"):
        if isinstance(error, dict) and error.get(key) in ERROR_TYPES:
            return ERROR_TYPES[error[key]](error.get("message", text), param=error.get("param"))
    if response.status == 404:
        return RouteNotFoundError(f"{url} answered HTTP 404: {text[:500]}")
    cls = InvalidRequestError if 400 <= response.status < 500 else InferenceError
    return cls(f"{url} answered HTTP {response.status}: {text[:500]}")


def _retry_after(response: aiohttp.ClientResponse, error: InferenceError) -> float | None:
    """Seconds to wait before sending the request again: only for a server at its admission limit."""
    if not isinstance(error, ServerOverloadedError):
        return None
    try:
        return max(0.0, float(response.headers.get("Retry-After", ServerOverloadedError.retry_after)))
    except ValueError:
        return float(ServerOverloadedError.retry_after)


def _finish_reason(kind: Any) -> FinishReason:
    if kind in ("stop", "length", "abort"):
        return kind
    return "abort"


def _version(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0  # SGLang reports "default" until a versioned update
