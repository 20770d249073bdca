"""Megatron architecture flags (slime's MODEL_ARGS) derived from a checkpoint's own Hugging Face config.json.

slime's `scripts/models/*.sh` each define MODEL_ARGS by hand for one model; a launcher that sources a
script by name fails at once for a model slime has no script for (Qwen3.6-27B). codedojo reads the
checkpoint's `config.json` instead and renders the same flags inline. Five families are mapped, each
with the flags and spellings slime's own scripts use for it (at THUDM/slime 624b824a):

| model_type | slime scripts it matches | family-specific flags |
|---|---|---|
| `llama` | llama3.1-8B-Instruct, llama3.2-3B-Instruct | `--max-position-embeddings`, Llama 3 RoPE scaling |
| `qwen2` | qwen2.5-* | `--add-qkv-bias`; no `--kv-channels` (Megatron's default hidden / heads) |
| `qwen3` | qwen3-0.6B ... qwen3-32B | `--kv-channels`, `--qk-layernorm` |
| `qwen3_moe` | qwen3-30B-A3B, qwen3-235B-A22B | experts, router, `--moe-layer-freq` |
| `qwen3_5`, `qwen3_5_text` | qwen3.5-0.8B ... qwen3.5-27B | `--spec` (Qwen3.5 plugin), gated attention, partial RoPE |

Invariants: every value comes from the config (or is a constant slime's scripts set for the whole family,
such as the MoE dispatcher); a config value the family's Megatron layers cannot express (a bias, an
activation, a RoPE scaling, a sliding window) is refused naming the field, never dropped; an unknown
model_type is refused with the fields no mapping could place. Qwen3.5's linear-attention layers
(`layer_types`, `linear_*`) are built by slime's spec plugin from the same config.json (it reads
`--hf-checkpoint`), so they need no flag. `--use-gated-attention` is added to Megatron by slime's image
(docker/patch/latest/megatron.patch), not by Megatron-LM itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

QWEN3_5_SPEC = ("slime_plugins.models.qwen3_5", "get_qwen3_5_spec")
# Flags slime's MoE scripts set for every Qwen3-MoE model: runtime choices, not architecture. The aux loss is 0
# in RL (slime's scripts), whatever router_aux_loss_coef the pretraining config records.
_QWEN_MOE_RUNTIME = ("--moe-router-score-function", "softmax", "--moe-token-dispatcher-type", "alltoall")
_QWEN_MOE_KERNELS = ("--moe-grouped-gemm", "--moe-token-drop-policy", "probs", "--moe-router-dtype", "fp32",
                     "--moe-permute-fusion", "--moe-aux-loss-coeff", "0")
# Fields that do not change the network Megatron builds (ids, dtype, caching, bookkeeping, the vision tower
# of a text-only run, pretraining-only settings).
_INERT = frozenset({
    "architectures", "model_type", "torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id",
    "transformers_version", "initializer_range", "use_cache", "attention_dropout", "max_window_layers",
    "pretraining_tp", "output_router_logits", "router_aux_loss_coef", "image_token_id", "video_token_id",
    "vision_start_token_id", "vision_end_token_id", "vision_config", "quantization_config", "text_config",
})
_DENSE = frozenset({"num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                    "num_key_value_heads", "vocab_size", "rms_norm_eps", "head_dim", "hidden_act", "attention_bias",
                    "mlp_bias", "tie_word_embeddings", "max_position_embeddings", "rope_theta", "rope_scaling",
                    "rope_parameters", "sliding_window", "use_sliding_window", "use_mrope", "layer_types"})
_MOE = frozenset({"moe_intermediate_size", "num_experts", "num_experts_per_tok", "decoder_sparse_step",
                  "mlp_only_layers", "norm_topk_prob"})
_QWEN3_5 = frozenset({"attn_output_gate", "full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim",
                      "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "mamba_ssm_dtype",
                      "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "partial_rotary_factor"})
PLACED = _INERT | _DENSE | _MOE | _QWEN3_5
"""Every config field some family mapping reads or knows to be irrelevant."""


class ModelArgsError(ValueError):
    """The checkpoint's config.json cannot be expressed as Megatron flags; the message names the fields."""


@dataclass(frozen=True, kw_only=True)
class ModelArgs:
    """MODEL_ARGS of one checkpoint."""

    family: str
    """The model_type that chose the mapping."""
    flags: tuple[str, ...]
    """Megatron flags and values, in the order slime's script for the family lists them."""
    num_layers: int
    """Decoder layers (pipeline splits and the conversion's world size are checked against it)."""


def load_hf_config(checkpoint: str, *, cache_dir: str | None = None) -> dict[str, Any]:
    """config.json of an HF folder, else of a hub repo id: the local HF cache first, then a download of that one
    file (slime downloads the weights itself). Raises ModelArgsError naming the checkpoint."""
    folder = Path(checkpoint).expanduser()
    if folder.is_dir():
        path = folder / "config.json"
        if not path.is_file():
            raise ModelArgsError(f"{checkpoint} has no config.json: it is not a Hugging Face checkpoint folder")
        return dict(json.loads(path.read_text(encoding="utf-8")))
    try:
        import huggingface_hub
    except ImportError as e:  # pragma: no cover - transformers depends on it
        raise ModelArgsError(f"reading {checkpoint}'s config.json needs huggingface_hub: {e}") from None
    cached = huggingface_hub.try_to_load_from_cache(checkpoint, "config.json", cache_dir=cache_dir)
    try:
        path_str = cached if isinstance(cached, str) else huggingface_hub.hf_hub_download(
            checkpoint, "config.json", cache_dir=cache_dir)
    except Exception as e:
        raise ModelArgsError(f"cannot read config.json of {checkpoint!r} ({type(e).__name__}: {e}); use a local HF "
                             "folder, or fetch it once with `huggingface-cli download <repo> config.json`") from None
    return dict(json.loads(Path(path_str).read_text(encoding="utf-8")))


def model_args(config: Mapping[str, Any]) -> ModelArgs:
    """The Megatron flags for `config` (an HF config.json); raises ModelArgsError naming what cannot be placed."""
    model_type = str(config.get("model_type", ""))
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else None
    if model_type in ("qwen3_5", "qwen3_5_text"):
        return _qwen3_5({**config, **(text or {})})  # a VLM's text_config wins over its top level
    mapper = _FAMILIES.get(model_type)
    if mapper is None:
        unplaced = sorted(set(config) - PLACED) + sorted(f"text_config.{k}" for k in set(text or {}) - PLACED)
        raise ModelArgsError(f"model_type {model_type!r} has no Megatron mapping in codedojo (it maps "
                             f"{', '.join(FAMILIES)}); fields no mapping could place: {', '.join(unplaced) or 'none'}. "
                             "Add the family to codedojo.integrations.slime_model.")
    return mapper(config)


class _Reader:
    """Reads one config, collecting every problem so the error lists them all at once."""

    def __init__(self, config: Mapping[str, Any], family: str) -> None:
        self.config, self.family = config, family
        self.problems: list[str] = []

    def need(self, name: str) -> Any:
        if self.config.get(name) is None:
            self.problems.append(f"{name} is missing")
            return 0
        return self.config[name]

    def expect(self, name: str, allowed: tuple[Any, ...], why: str) -> None:
        value = self.config.get(name, allowed[0])
        if value not in allowed:
            self.problems.append(f"{name}={value!r} ({why})")

    def rope(self) -> tuple[float, Mapping[str, Any]]:
        """(rope_theta, scaling fields): transformers 5 nests both in rope_parameters; older configs keep
        rope_theta and rope_scaling at the top."""
        params = self.config.get("rope_parameters")
        params = params if isinstance(params, Mapping) else {}
        theta = params.get("rope_theta", self.config.get("rope_theta"))
        if theta is None:
            self.problems.append("rope_theta (or rope_parameters.rope_theta) is missing")
            theta = 0.0
        scaling = self.config.get("rope_scaling") or {}
        if not scaling and params.get("rope_type", "default") != "default":
            scaling = params
        return float(theta), scaling

    def done(self, flags: list[str]) -> ModelArgs:
        if self.problems:
            raise ModelArgsError(f"{self.family} config.json cannot be expressed as Megatron flags: "
                                 + "; ".join(self.problems))
        return ModelArgs(family=self.family, flags=tuple(flags), num_layers=int(self.config["num_hidden_layers"]))


def number(value: float | int) -> str:
    """A config number as a flag value: integers without a fraction (1000000.0 -> 1000000), others by repr."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number here")
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _attention(r: _Reader, *, gqa_always: bool) -> list[str]:
    heads = r.need("num_attention_heads")
    groups = r.config.get("num_key_value_heads") or heads
    if not gqa_always and groups == heads:
        return ["--num-attention-heads", number(heads)]
    return ["--num-attention-heads", number(heads), "--group-query-attention", "--num-query-groups", number(groups)]


def _head_dim(r: _Reader) -> int:
    hidden, heads = int(r.need("hidden_size")), int(r.need("num_attention_heads")) or 1
    return int(r.config.get("head_dim") or hidden // heads)


def _untie(r: _Reader) -> list[str]:
    # transformers' default for these families is untied when the field is absent.
    return [] if r.config.get("tie_word_embeddings", False) else ["--untie-embeddings-and-output-weights"]


def _dense_common(r: _Reader) -> None:
    r.expect("hidden_act", ("silu",), "Megatron's --swiglu is SiLU-gated")
    r.expect("mlp_bias", (False,), "the MLP has no bias under --disable-bias-linear")
    r.expect("use_sliding_window", (False,), "Megatron's layers here attend over the whole sequence")


def _llama(config: Mapping[str, Any]) -> ModelArgs:
    r = _Reader(config, "llama")
    _dense_common(r)
    r.expect("attention_bias", (False,), "--disable-bias-linear drops the attention biases")
    theta, scaling = r.rope()
    flags = ["--swiglu", "--num-layers", number(r.need("num_hidden_layers")), "--hidden-size",
             number(r.need("hidden_size")), "--ffn-hidden-size", number(r.need("intermediate_size")),
             *_attention(r, gqa_always=False), "--max-position-embeddings", number(r.need("max_position_embeddings")),
             "--use-rotary-position-embeddings", "--disable-bias-linear", "--normalization", "RMSNorm",
             "--norm-epsilon", number(r.need("rms_norm_eps")), "--rotary-base", number(theta),
             "--vocab-size", number(r.need("vocab_size")), "--kv-channels", number(_head_dim(r))]
    if scaling:
        flags += _llama3_scaling(r, scaling)
    return r.done(flags + _untie(r))


def _llama3_scaling(r: _Reader, scaling: Mapping[str, Any]) -> list[str]:
    # Megatron's --use-rope-scaling is Llama 3's rule with its fixed constants; any other scaling is refused.
    expected = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
    kind = scaling.get("rope_type", scaling.get("type"))
    wrong = [f"rope_scaling.{k}={scaling.get(k, kind if k == 'rope_type' else None)!r}"
             for k, v in expected.items() if (kind if k == "rope_type" else scaling.get(k)) != v]
    if wrong or "factor" not in scaling:
        r.problems.append(", ".join(wrong or ["rope_scaling.factor is missing"]) + " (Megatron's --use-rope-scaling "
                          "is Llama 3's scaling with low/high frequency factors 1 and 4 over an original 8192)")
        return []
    return ["--use-rope-scaling", "--rotary-scaling-factor", number(float(scaling["factor"]))]


def _no_scaling(r: _Reader, scaling: Mapping[str, Any]) -> None:
    if scaling:
        r.problems.append(f"rope_scaling={dict(scaling)!r} (this family's Megatron flags have no RoPE scaling)")


def _qwen2(config: Mapping[str, Any]) -> ModelArgs:
    r = _Reader(config, "qwen2")
    _dense_common(r)
    theta, scaling = r.rope()
    _no_scaling(r, scaling)
    if _head_dim(r) * int(r.need("num_attention_heads") or 1) != int(r.need("hidden_size")):
        r.problems.append("head_dim differs from hidden_size / num_attention_heads (Qwen2 has no --kv-channels)")
    flags = ["--swiglu", "--num-layers", number(r.need("num_hidden_layers")), "--hidden-size",
             number(r.need("hidden_size")), "--ffn-hidden-size", number(r.need("intermediate_size")),
             *_attention(r, gqa_always=False), "--use-rotary-position-embeddings", "--disable-bias-linear",
             "--add-qkv-bias", "--normalization", "RMSNorm", "--norm-epsilon", number(r.need("rms_norm_eps")),
             "--rotary-base", number(theta), "--vocab-size", number(r.need("vocab_size"))]
    return r.done(flags + _untie(r))


def _qwen3(config: Mapping[str, Any]) -> ModelArgs:
    r = _Reader(config, "qwen3")
    _dense_common(r)
    r.expect("attention_bias", (False,), "--disable-bias-linear drops the attention biases")
    theta, scaling = r.rope()
    _no_scaling(r, scaling)
    flags = ["--swiglu", "--num-layers", number(r.need("num_hidden_layers")), "--hidden-size",
             number(r.need("hidden_size")), "--ffn-hidden-size", number(r.need("intermediate_size")),
             *_attention(r, gqa_always=False), "--use-rotary-position-embeddings", "--disable-bias-linear",
             "--normalization", "RMSNorm", "--norm-epsilon", number(r.need("rms_norm_eps")), "--rotary-base",
             number(theta), "--vocab-size", number(r.need("vocab_size")), "--kv-channels", number(_head_dim(r)),
             "--qk-layernorm"]
    return r.done(flags + _untie(r))


def _qwen3_moe(config: Mapping[str, Any]) -> ModelArgs:
    r = _Reader(config, "qwen3_moe")
    _dense_common(r)
    r.expect("attention_bias", (False,), "--disable-bias-linear drops the attention biases")
    # Megatron's softmax router without --moe-router-pre-softmax renormalises over the chosen experts.
    r.expect("norm_topk_prob", (True,), "Megatron's top-k softmax router renormalises the chosen experts")
    theta, scaling = r.rope()
    _no_scaling(r, scaling)
    layers = int(r.need("num_hidden_layers"))
    step = int(config.get("decoder_sparse_step") or 1)
    dense = {int(i) for i in config.get("mlp_only_layers") or []}
    moe_layers = [0 if i in dense or (i + 1) % step else 1 for i in range(layers)]
    flags = ["--disable-bias-linear", "--qk-layernorm", "--group-query-attention", "--num-attention-heads",
             number(r.need("num_attention_heads")), "--num-query-groups", number(r.need("num_key_value_heads")),
             "--kv-channels", number(_head_dim(r)), "--num-layers", number(layers), "--hidden-size",
             number(r.need("hidden_size")), "--ffn-hidden-size", number(r.need("intermediate_size")),
             "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--norm-epsilon",
             number(r.need("rms_norm_eps")), "--rotary-percent", "1.0", "--swiglu", *_untie(r),
             "--vocab-size", number(r.need("vocab_size")), "--rotary-base", number(theta),
             "--moe-ffn-hidden-size", number(r.need("moe_intermediate_size")), *_QWEN_MOE_RUNTIME,
             "--moe-router-topk", number(r.need("num_experts_per_tok")),
             "--moe-layer-freq", "[" + ",".join(map(str, moe_layers)) + "]", "--num-experts",
             number(r.need("num_experts")), *_QWEN_MOE_KERNELS]
    return r.done(flags)


def _qwen3_5(config: Mapping[str, Any]) -> ModelArgs:
    r = _Reader(config, "qwen3_5")
    r.expect("hidden_act", ("silu",), "Megatron's --swiglu is SiLU-gated")
    r.expect("attention_bias", (False,), "--disable-bias-linear drops the attention biases")
    r.expect("attn_output_gate", (True,), "slime's Qwen3.5 spec always gates the attention output")
    if config.get("num_experts"):
        r.problems.append(f"num_experts={config['num_experts']!r} (Qwen3.5 MoE is not mapped yet; dense only)")
    theta, scaling = r.rope()
    stored = config.get("rope_parameters")
    params = stored if isinstance(stored, Mapping) else {}
    rotary = params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    if scaling:  # text-only positions are equal in every mRoPE section, so mRoPE itself is plain RoPE here
        r.problems.append(f"rope scaling {dict(scaling)!r} (slime's Qwen3.5 spec applies plain partial RoPE)")
    flags = ["--spec", *QWEN3_5_SPEC, "--disable-bias-linear", "--qk-layernorm", "--group-query-attention",
             "--num-attention-heads", number(r.need("num_attention_heads")), "--num-query-groups",
             number(r.need("num_key_value_heads")), "--kv-channels", number(_head_dim(r)), "--num-layers",
             number(r.need("num_hidden_layers")), "--hidden-size", number(r.need("hidden_size")),
             "--ffn-hidden-size", number(r.need("intermediate_size")), "--use-gated-attention",
             "--normalization", "RMSNorm", "--apply-layernorm-1p", "--position-embedding-type", "rope",
             "--norm-epsilon", number(r.need("rms_norm_eps")), "--rotary-percent", number(float(rotary)),
             "--swiglu", *_untie(r), "--vocab-size", number(r.need("vocab_size")), "--rotary-base",
             number(theta), "--attention-output-gate"]
    return r.done(flags)


_FAMILIES: dict[str, Callable[[Mapping[str, Any]], ModelArgs]] = {
    "llama": _llama, "qwen2": _qwen2, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe,
}
FAMILIES = (*_FAMILIES, "qwen3_5")
