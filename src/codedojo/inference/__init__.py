"""codedojo.inference: model specs and loading, the local engine, the HTTP server, client and router.

Importing this package loads neither torch nor transformers; the engine, specs, client and router are
imported on first use of their names.

    from codedojo.inference import LocalEngine, SamplingParams, TinyModel
    engine = LocalEngine.from_spec(TinyModel())          # or "smollm2-135m-instruct", or HFFolder(...)
    ids = engine.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    out = await engine.generate(engine.tokenizer.encode(ids, add_special_tokens=False),
                                SamplingParams(temperature=0.7, max_new_tokens=64), session_id="episode-1")
"""

from __future__ import annotations

import importlib
from typing import Any

from codedojo.inference.errors import (
    ContextLengthError,
    EngineClosedError,
    EngineTimeoutError,
    EngineUnavailableError,
    InferenceError,
    InvalidRequestError,
    ServerOverloadedError,
    SessionBusyError,
    UnknownModelError,
    UnknownSessionError,
)
from codedojo.inference.options import EngineOptions
from codedojo.inference.protocol import Completion, Engine, FinishReason, SamplingParams

_LAZY = {
    "LocalEngine": "codedojo.inference.engine",
    "HTTPEngine": "codedojo.inference.client",
    "SessionRouter": "codedojo.inference.router",
    "HFFolder": "codedojo.inference.specs",
    "SmolLM2Instruct": "codedojo.inference.specs",
    "TinyModel": "codedojo.inference.specs",
    "RemoteModel": "codedojo.inference.specs",
    "QWEN3_6_27B": "codedojo.inference.specs",
    "LoadedModel": "codedojo.inference.specs",
    "ModelSpec": "codedojo.inference.specs",
    "resolve_model": "codedojo.inference.specs",
    "sequence_logprobs": "codedojo.inference.scoring",
}

__all__ = [
    "Completion",
    "ContextLengthError",
    "Engine",
    "EngineClosedError",
    "EngineOptions",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "FinishReason",
    "InferenceError",
    "InvalidRequestError",
    "SamplingParams",
    "ServerOverloadedError",
    "SessionBusyError",
    "UnknownModelError",
    "UnknownSessionError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
