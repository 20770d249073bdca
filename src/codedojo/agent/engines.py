"""Opening the engine an agent talks to, and the prompt profile that suits a model."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from codedojo.inference.protocol import Engine

if TYPE_CHECKING:
    from codedojo.inference.specs import ModelLike

# Models below this many parameters get the `small` prompt profile (worked examples in the prompt).
SMALL_MODEL_PARAMETERS = 3_000_000_000


def profile_for(model: ModelLike) -> str:
    """The prompt profile a model spec asks for, else by size: `small` under 3B parameters."""
    from codedojo.inference.specs import resolve_model

    spec = resolve_model(model)
    chosen = getattr(spec, "prompt_profile", None)
    if chosen:
        return str(chosen)
    parameters = getattr(spec, "num_parameters", None)
    if isinstance(parameters, int) and parameters < SMALL_MODEL_PARAMETERS:
        return "small"
    return "standard"


async def open_engine(model: ModelLike, *, device: str | None = None, dtype: Any = "float32",
                      **engine_options: Any) -> Engine:
    """A local engine for a model spec or name; loading runs off the event loop.

    dtype: the engine's compute dtype, a torch dtype or "float32" (the exactness reference, the default),
    "bfloat16", "float16" or "auto" (bf16 where the device has it natively; `inference.engine.engine_dtype`)."""
    from codedojo.inference.engine import LocalEngine
    from codedojo.precision import check_device

    engine: Engine = await asyncio.to_thread(LocalEngine.from_spec, model, device=check_device(device),
                                             dtype=dtype, **engine_options)
    return engine
