"""Errors raised by engines, servers and clients. Each message says what was wrong and what to do.

The HTTP server maps each class to a status code and an `error.type` string, and the client maps them
back, so a caller sees the same exception whether the engine is local or remote.
"""

from __future__ import annotations

from typing import Any


class InferenceError(Exception):
    """Base class of everything codedojo.inference raises on purpose.

    `param` names the request field at fault, when one is (OpenAI's `error.param`)."""

    type_name = "inference_error"
    http_status = 500

    def __init__(self, message: str = "", *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def error_body(error: InferenceError) -> dict[str, Any]:
    """OpenAI's error object for `error` (what the server answers, and what a stream sends as an event)."""
    kind = "invalid_request_error" if error.http_status < 500 else "server_error"
    return {"error": {"message": str(error), "type": kind, "param": error.param, "code": error.type_name}}


class InvalidRequestError(InferenceError, ValueError):
    """The request itself is wrong (bad sampling parameters, empty prompt, bad token id)."""

    type_name = "invalid_request"
    http_status = 400


class ContextLengthError(InvalidRequestError):
    """The prompt does not leave room for a single new token within the model's context."""

    type_name = "context_length_exceeded"
    http_status = 400


class RequestTooLargeError(InvalidRequestError):
    """The request body is over the server's size limit."""

    type_name = "request_too_large"
    http_status = 413


class UnknownSessionError(InferenceError, LookupError):
    """`end_session` named a session this engine never saw (or already ended)."""

    type_name = "unknown_session"
    http_status = 404


class SessionBusyError(InvalidRequestError):
    """A session sent a second request while its first one is still running."""

    type_name = "session_busy"
    http_status = 409


class UnknownModelError(InferenceError, ValueError):
    """A model name or folder that codedojo cannot load (or can serve only remotely)."""

    type_name = "unknown_model"
    http_status = 400


class ModelNotFoundError(InvalidRequestError):
    """A request named a model this server does not serve (OpenAI's `model_not_found`)."""

    type_name = "model_not_found"
    http_status = 404


class RouteNotFoundError(InvalidRequestError):
    """No such HTTP route (or method) on this server."""

    type_name = "not_found"
    http_status = 404


class EngineClosedError(InferenceError):
    """The engine was closed before or while the request ran."""

    type_name = "engine_closed"
    http_status = 503


class EngineUnavailableError(InferenceError, ConnectionError):
    """A remote engine could not be reached or dropped the connection mid-request."""

    type_name = "engine_unavailable"
    http_status = 503


class ServerOverloadedError(InferenceError):
    """The server holds as many generation requests as its admission limit allows (`codedojo serve
    --max-running` plus `--max-waiting`): it answers 503 with a Retry-After header at once instead of queueing
    without bound. `retry_after` is the seconds the server suggests waiting."""

    type_name = "server_overloaded"
    http_status = 503
    retry_after = 1


class EngineTimeoutError(InferenceError, TimeoutError):
    """A remote engine did not answer within the client's timeout."""

    type_name = "engine_timeout"
    http_status = 504


ERROR_TYPES: dict[str, type[InferenceError]] = {
    cls.type_name: cls
    for cls in (
        InferenceError,
        InvalidRequestError,
        ContextLengthError,
        RequestTooLargeError,
        UnknownSessionError,
        SessionBusyError,
        UnknownModelError,
        ModelNotFoundError,
        RouteNotFoundError,
        EngineClosedError,
        EngineUnavailableError,
        ServerOverloadedError,
        EngineTimeoutError,
    )
}
