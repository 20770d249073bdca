"""Translating between JSON request bodies (SGLang's /generate, OpenAI's chat completions) and
`SamplingParams`, shared by the server (parsing) and the client (rendering).

Unknown keys are errors that name the key. Keys whose only effect we do not implement (penalties,
min_p, ...) are accepted at their neutral value and rejected otherwise, so a request never silently
samples differently from what it asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codedojo.inference.errors import InvalidRequestError
from codedojo.inference.protocol import SamplingParams

# SGLang sampling_params keys we accept only at these values.
NEUTRAL_SGLANG = {
    "min_new_tokens": 0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_p": 0.0,
    "n": 1,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    # SGLang's MoE routing replay: there are no experts to report in a dense model.
    "return_routed_experts": False,
}
# Keys that only shape the returned text, which we accept as they are.
TEXT_ONLY_SGLANG = ("skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim")


def _as_tuple(value: Any, *, key: str, kind: type) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, kind):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, kind) for v in value):
        return tuple(value)
    raise InvalidRequestError(f"{key} must be a {kind.__name__} or a list of them, got {value!r}")


def _number(body: Mapping[str, Any], key: str, default: float, *, where: str = "") -> float:
    """body[key] as a float (`default` when absent or null); an error naming the key otherwise."""
    value = body.get(key)
    if value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        message = f"{where}{key} must be a number, got {value!r}"
        raise InvalidRequestError(message, param=where.rstrip(".") or key) from None


def _check_neutral(body: Mapping[str, Any], neutral: Mapping[str, Any], *, where: str) -> None:
    for key, value in neutral.items():
        if key in body and body[key] != value and body[key] is not None:
            raise InvalidRequestError(f"{where}.{key}={body[key]!r} is not supported (only {value!r})")


def sglang_to_params(sampling: Mapping[str, Any]) -> SamplingParams:
    """SGLang /generate `sampling_params` -> SamplingParams."""
    if not isinstance(sampling, Mapping):
        raise InvalidRequestError(f"sampling_params must be an object, got {sampling!r}")
    known = {"temperature", "top_p", "top_k", "max_new_tokens", "stop", "stop_token_ids", "ignore_eos"}
    known |= {"seed", "sampling_seed", "custom_params", *NEUTRAL_SGLANG, *TEXT_ONLY_SGLANG}
    unknown = sorted(set(sampling) - known)
    if unknown:
        raise InvalidRequestError(f"unknown sampling_params keys: {unknown}")
    _check_neutral(sampling, NEUTRAL_SGLANG, where="sampling_params")
    # SGLang hands custom_params only to a request's custom logit processor; without one (codedojo has
    # none) they change nothing, so any object is accepted.
    if not isinstance(sampling.get("custom_params") or {}, Mapping):
        raise InvalidRequestError(f"sampling_params.custom_params must be an object, got {sampling['custom_params']!r}")
    top_k = sampling.get("top_k", 0)
    seed = sampling.get("sampling_seed", sampling.get("seed"))
    try:
        return SamplingParams(
            temperature=_number(sampling, "temperature", 1.0, where="sampling_params."),
            top_p=_number(sampling, "top_p", 1.0, where="sampling_params."),
            top_k=0 if top_k in (-1, None) else top_k,
            max_new_tokens=sampling.get("max_new_tokens", 128),
            stop=_as_tuple(sampling.get("stop"), key="stop", kind=str),
            stop_token_ids=_as_tuple(sampling.get("stop_token_ids"), key="stop_token_ids", kind=int),
            ignore_eos=bool(sampling.get("ignore_eos", False)),
            seed=seed,
        )
    except (TypeError, ValueError) as error:
        if isinstance(error, InvalidRequestError):
            raise
        raise InvalidRequestError(f"invalid sampling_params: {error}") from error


def params_to_sglang(params: SamplingParams) -> dict[str, Any]:
    """SamplingParams -> SGLang `sampling_params` (what a real SGLang server accepts)."""
    out: dict[str, Any] = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k else -1,
        "max_new_tokens": params.max_new_tokens,
        "ignore_eos": params.ignore_eos,
        "skip_special_tokens": False,
    }
    if params.stop:
        out["stop"] = list(params.stop)
    if params.stop_token_ids:
        out["stop_token_ids"] = list(params.stop_token_ids)
    if params.seed is not None:
        out["sampling_seed"] = params.seed
    return out


NEUTRAL_OPENAI = {
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "logit_bias": None,
}
# Keys the chat route reads itself (codedojo.inference.openai_chat): choices, streaming, tools.
OPENAI_CHAT_ROUTE_KEYS = {"n", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls"}
OPENAI_CHAT_KEYS = {
    "model",
    "messages",
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "seed",
    "logprobs",
    "user",
    "session_id",
    "chat_template_kwargs",
    "top_logprobs",
    "response_format",
    *NEUTRAL_OPENAI,
    *OPENAI_CHAT_ROUTE_KEYS,
}


def openai_chat_to_params(body: Mapping[str, Any]) -> SamplingParams:
    """OpenAI /v1/chat/completions body (plus top_k, stop_token_ids, ignore_eos) -> SamplingParams."""
    unknown = sorted(set(body) - OPENAI_CHAT_KEYS)
    if unknown:
        raise InvalidRequestError(f"unknown chat completion keys: {unknown}")
    _check_neutral(body, NEUTRAL_OPENAI, where="body")
    response_format = body.get("response_format")
    if response_format not in (None, {"type": "text"}):
        raise InvalidRequestError(
            f"response_format={response_format!r} is not supported (only text: the engine does not constrain "
            "decoding to JSON)"
        )
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        raise InvalidRequestError(f"{name} must be an integer of at least 1, got {max_tokens!r}", param=name)
    top_k = body.get("top_k", 0)
    try:
        return SamplingParams(
            temperature=_number(body, "temperature", 1.0),
            top_p=_number(body, "top_p", 1.0),
            top_k=0 if top_k in (-1, None) else top_k,
            max_new_tokens=256 if max_tokens is None else max_tokens,
            stop=_as_tuple(body.get("stop"), key="stop", kind=str),
            stop_token_ids=_as_tuple(body.get("stop_token_ids"), key="stop_token_ids", kind=int),
            ignore_eos=bool(body.get("ignore_eos", False)),
            seed=body.get("seed"),
            top_logprobs=body.get("top_logprobs") or 0,
        )
    except (TypeError, ValueError) as error:
        if isinstance(error, InvalidRequestError):
            raise
        raise InvalidRequestError(f"invalid chat completion parameters: {error}") from error
