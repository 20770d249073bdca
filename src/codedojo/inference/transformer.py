"""Our own forward pass for Llama- and Qwen3-architecture models, reading Hugging Face weights.

Why not call the HF model: its cache grows by concatenation (25-37% of a CPU decode step), ragged
batches need left padding, and it cannot mix decode tokens and prefill chunks of different sequences in
one call. Here the linear layers run once over every token of a step packed into one matrix, attention
runs per contiguous run of rows against a preallocated KV cache (`kv_cache.KVCache`), and only the
positions that will be sampled go through the vocabulary projection. On the CPU in fp32, decode tokens
attend through a compiled kernel of ours instead of SDPA (`codedojo.inference.native`,
`EngineOptions.native_attention`). Every kernel choice is a field of `EngineOptions` (`Transformer.options`).

Weights are HF's, by HF's names; q|k|v and gate|up are fused into one matrix each so a layer costs four
matmuls. The math follows HF's modules op for op (fp32 RMSNorm, rotate-half RoPE, SDPA with the default
1/sqrt(head_dim) scale); `tests/test_inference_transformer.py` checks parity against the HF forward.

Precision: `dtype` is the compute dtype of the layers (their matrices, q/k/v, attention and the KV cache).
fp32 is the exactness reference. In bf16 (or fp16) the engine computes what the trainer computes under
bf16 autocast over fp32 weights (`codedojo.train.packed`): the residual stream, every RMSNorm, the
embeddings and the vocabulary head stay fp32, the layers' matmuls, RoPE and attention run in bf16, so
logits, logprobs and sampling are fp32 whatever the dtype. One exception, for speed: a bf16 engine's
one-token CPU steps (batch-1 decode) read the head from an fp16 copy (`EngineOptions.half_head`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from codedojo.inference import native
from codedojo.inference.errors import UnknownModelError
from codedojo.inference.kv_cache import KVCache, KVShape
from codedojo.inference.options import EngineOptions
from codedojo.inference.step_batch import StepBatch

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen3ForCausalLM")
# RoPE variants whose frequencies do not depend on the sequence length (dynamic ones would need
# recomputing per step; none of the supported checkpoints use them).
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_positions: int
    """Context length: positions beyond it are rejected."""
    qk_norm: bool
    """Qwen3 RMS-normalises each head of q and k before RoPE."""
    attention_bias: bool
    mlp_bias: bool
    tie_word_embeddings: bool

    @property
    def num_query_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @classmethod
    def from_hf(cls, hf_config: Any) -> TransformerConfig:
        archs = tuple(getattr(hf_config, "architectures", None) or ())
        if not any(a in SUPPORTED_ARCHITECTURES for a in archs):
            raise UnknownModelError(
                f"architecture {archs or hf_config.model_type!r} is not supported by the local engine "
                f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)}); serve it with SGLang or vLLM and use "
                "HTTPEngine"
            )
        if getattr(hf_config, "use_sliding_window", False):
            raise UnknownModelError("sliding-window attention is not supported by the local engine")
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=hf_config.num_attention_heads,
            num_kv_heads=hf_config.num_key_value_heads,
            head_dim=head_dim,
            rms_norm_eps=hf_config.rms_norm_eps,
            max_positions=hf_config.max_position_embeddings,
            qk_norm="Qwen3ForCausalLM" in archs,
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        )


def rope_frequencies(hf_config: Any) -> tuple[torch.Tensor, float]:
    """(inv_freq [head_dim / 2], attention_scaling), computed exactly as HF's rotary module does."""
    params = getattr(hf_config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        raise UnknownModelError(f"RoPE type {rope_type!r} is not supported (supported: {STATIC_ROPE_TYPES})")
    if rope_type == "default":
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim
        return 1.0 / (params["rope_theta"] ** exponents), 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](hf_config, None)
    return inv_freq.float(), float(scaling)


@dataclass(kw_only=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor
    """[(num_heads + 2 * num_kv_heads) * head_dim, hidden]: q, k, v stacked."""
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    """[2 * intermediate, hidden]: gate then up."""
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def pick_linear(device: torch.device, dtype: torch.dtype) -> Linear:
    """oneDNN's linear on CPU fp32 (what torch.compile's CPU backend calls), which beat F.linear (MKL) from
    batch-8 decode steps to prefill chunks when it was chosen (a one-off timing, not kept). F.linear
    everywhere else."""
    if _onednn_available(device, dtype):
        return _onednn_linear
    return F.linear


def _onednn_available(device: torch.device, dtype: torch.dtype) -> bool:
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


# The batch size oneDNN's weight packing is tuned for: decode steps of a handful of rows are where the
# blocked layout pays (a 1,024-token prefill step gains nothing either way: docs/results/engine-steps.json).
PACK_FOR_ROWS = 16

# The few-row kernels (`EngineOptions.native_rows_max_tokens`) multiply the head only for up to this many sampled
# rows: the head is one wide matrix (49,152 x 576 on SmolLM2), and past 16 rows oneDNN's packed copy was as fast
# or faster on it (`bench/engine_steps.py --only few_rows` on AVX2, 2 threads: docs/results/engine-rows-avx2.json).
ROWS_HEAD_MAX = 16

# On a CPU that emulates bf16 (no AVX-512 BF16 or AMX: `codedojo.precision.native_bf16`), a bf16 engine
# multiplies in bf16 only in steps of at most this many tokens, where reading half the bytes wins; wider
# steps (prefill, bigger decode batches) multiply fp32 copies of the same bf16-rounded matrices on oneDNN
# (`EngineOptions.wide_steps_fp32`; a one-off timing of SmolLM2 steps on AVX2 set the limit, not kept).
EMULATED_BF16_MAX_TOKENS = 4

# The fp16 head copy of one-token reduced-precision steps (`EngineOptions.half_head`) rounds the logits to
# fp16 (an 11-bit mantissa) and widens them; a bf16 copy would move the logprobs seven times as much
# (docs/results/head-precision.json). A head whose values fp16 cannot hold keeps the fp32 head, and so do
# steps whose fp16 logits overflow (a hidden state beyond fp16's range among them).
HALF_HEAD_LIMIT = 60_000.0


@contextlib.contextmanager
def onednn_off() -> Iterator[None]:
    """oneDNN disabled for the block (torch then takes its own kernels, the same values to rounding). torch's
    switch is process-wide: a matmul another thread runs meanwhile (none does while the engine steps: training
    and rollouts alternate) takes torch's kernels too."""
    before = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(before)


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight in oneDNN's blocked layout for `_onednn_linear` on CPU fp32 (an opaque tensor, usable
    only as a linear's weight), else the weight itself. The same sums up to fp32 rounding (the parity
    tests run through it); `EngineOptions.packed_weights` switches it."""
    if _onednn_available(weight.device, weight.dtype) and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_FOR_ROWS)
    return weight


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 in, fp32 out (weight is fp32 whatever the compute dtype), as HF's LlamaRMSNorm computes an fp32
    residual and as the trainer's bf16 path does. torch's fused kernel does the same math in one pass
    (bit-identical here, and faster at decode sizes)."""
    return F.rms_norm(x.float(), weight.shape, weight, eps)


def _rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
    """`native.linear_rows` on the engine's own tensors; with residual, the result is added into it in place."""
    return native.linear_rows(x.contiguous(), weight, bias, residual, out=residual, checked=False)


def _rows_swiglu(x: torch.Tensor, gate_up: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return native.swiglu_rows(x.contiguous(), gate_up, bias, checked=False)


def _row_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`rms_norm` of one row [1, hidden] (fp32) in fewer kernels: the mean square as one dot product, read
    out as a Python float, then HF's order of multiplications (the scale, then the weight)."""
    row = x[0]
    scale = 1.0 / math.sqrt(float(torch.dot(row, row)) / row.shape[0] + eps)
    return torch.mul(x, scale).mul_(weight)


def _onednn_linear_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor | None) -> torch.Tensor:
    """`residual + _onednn_linear(x, weight, bias)` as one oneDNN call (its "add" post-op), in a new tensor."""
    return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, bias, "add")


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """HF's `x * cos + rotate_half(x) * sin` with rotate_half's negation folded into the sine table, and
    the half swap as one roll. x [tokens, heads, head_dim]; cos, signed_sin [tokens, 1, head_dim]."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), signed_sin)


@dataclass(frozen=True, kw_only=True)
class _PackedLayer:
    """A layer's matrices as the linear kernel wants them (see `pack_weight`), with biases in their dtype."""

    qkv: torch.Tensor
    o: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    qkv_bias: torch.Tensor | None = None
    o_bias: torch.Tensor | None = None
    gate_up_bias: torch.Tensor | None = None
    down_bias: torch.Tensor | None = None


class Transformer:
    """Weights plus the forward pass. Not an nn.Module: it is never trained, only loaded and run."""

    def __init__(
        self,
        config: TransformerConfig,
        *,
        inv_freq: torch.Tensor,
        attention_scaling: float,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        options: EngineOptions | None = None,
    ) -> None:
        """options: the kernel switches (`EngineOptions`; default: the engine's defaults)."""
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        """The layers' compute dtype (matrices, attention, KV cache); norms, embeddings and head are fp32."""
        c = config

        def empty(*size: int) -> torch.Tensor:
            return torch.zeros(size, dtype=dtype, device=self.device)

        def fp32(*size: int) -> torch.Tensor:
            return torch.zeros(size, dtype=torch.float32, device=self.device)

        qkv_rows = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
        self.embed = fp32(c.vocab_size, c.hidden_size)
        self.layers = [
            _Layer(
                input_norm=fp32(c.hidden_size),
                qkv=empty(qkv_rows, c.hidden_size),
                qkv_bias=empty(qkv_rows) if c.attention_bias else None,
                q_norm=fp32(c.head_dim) if c.qk_norm else None,
                k_norm=fp32(c.head_dim) if c.qk_norm else None,
                o=empty(c.hidden_size, c.num_heads * c.head_dim),
                o_bias=empty(c.hidden_size) if c.attention_bias else None,
                post_norm=fp32(c.hidden_size),
                gate_up=empty(2 * c.intermediate_size, c.hidden_size),
                gate_up_bias=empty(2 * c.intermediate_size) if c.mlp_bias else None,
                down=empty(c.hidden_size, c.intermediate_size),
                down_bias=empty(c.hidden_size) if c.mlp_bias else None,
            )
            for _ in range(c.num_layers)
        ]
        self.norm = fp32(c.hidden_size)
        self.lm_head = self.embed if c.tie_word_embeddings else fp32(c.vocab_size, c.hidden_size)
        # cos/sin tables [max_positions, head_dim], computed like HF's rotary module (fp32, then cast).
        freqs = torch.arange(c.max_positions, dtype=torch.float)[:, None] * inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        self.cos = (angles.cos() * attention_scaling).to(device=self.device, dtype=dtype)
        sin = (angles.sin() * attention_scaling).to(device=self.device, dtype=dtype)
        half = c.head_dim // 2
        self.signed_sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        self._targets = self._name_targets()
        self._head_linear = pick_linear(self.device, torch.float32)
        # Kernel-layout copies of the matrices, rebuilt from the HF-layout ones (the source of truth,
        # which weight updates write into) at the first forward after each load.
        self._packed: list[_PackedLayer] | None = None
        self._packed_head = self.lm_head
        self._half_head: torch.Tensor | None = None
        """fp16 copy of the head for one-token reduced-precision steps (see HALF_HEAD_LIMIT); built lazily."""
        self._wide_dtype = dtype
        """The dtype the packed copies (and so every step past the narrow ones) multiply in."""
        self.options = options or EngineOptions()

    @property
    def options(self) -> EngineOptions:
        """The switches this model's forward runs with (`EngineOptions`; its scheduling fields are the
        engine's business). Setting it resolves what also depends on the device, the dtype and the native
        kernels (`wide_steps_fp32`, `native_attention`, `native_rows`), and drops the packed copies when their
        layout or dtype changes (rebuilt at the next step). Not while an engine's worker steps this model."""
        return self._options

    @options.setter
    def options(self, options: EngineOptions) -> None:
        c, cpu = self.config, self.device.type == "cpu"
        wide = options.wide_steps_fp32
        if wide is None:
            from codedojo.precision import native_bf16

            wide = self.dtype != torch.float32 and cpu and not native_bf16(self.device)
        wide_dtype = torch.float32 if wide else self.dtype
        previous = getattr(self, "_options", None)
        if previous is None or previous.packed_weights != options.packed_weights or wide_dtype != self._wide_dtype:
            self._packed = None
        self._options = options
        self.wide_steps_fp32 = wide
        """Resolved `EngineOptions.wide_steps_fp32`."""
        self._wide_dtype = wide_dtype
        self._linear = pick_linear(self.device, wide_dtype)
        self.native_attention = (options.native_attention and cpu and self.dtype == torch.float32
                                 and native.supports(c.num_kv_heads, c.num_heads, c.head_dim))
        """Whether decode tokens attend through `native.decode_attention` (turned off at the first step where
        the library cannot load)."""
        self.native_rows = options.native_rows and cpu and self.dtype in (torch.float32, torch.bfloat16)
        """Whether one-token steps multiply through `native.linear_row` and `swiglu_row` (fp32 or bf16 matrices,
        fp32 rows and sums; turned off at the first step where the library cannot load)."""
        self.native_rows_max_tokens = options.native_rows_max_tokens if cpu and self.dtype == torch.float32 else 0
        """Steps of up to this many tokens multiply through `native.linear_rows` and `swiglu_rows` (0: none; set to
        0 at the first step where the library cannot load)."""

    @contextlib.contextmanager
    def wrapped_calls(self, wrap: Callable[[str, Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]
                      ) -> Iterator[None]:
        """For benchmarks (bench/engine_bounds.py): within the block, every call of one kind goes through
        `wrap(kind, call)`'s result, for the kinds "layer_matmuls", "head", "attention" (the general layers'
        per-layer attention) and "rms_norm" (`rms_norm`, process-wide). The one-token path and one-thread small
        steps (`EngineOptions.one_token_path`, `small_step_tokens`) call their own kernels and are not wrapped.
        Set `options` before the block: setting them inside picks the plain layer matmul again."""
        global rms_norm
        saved = self._linear, self._head_linear, rms_norm
        self._linear, self._head_linear = wrap("layer_matmuls", saved[0]), wrap("head", saved[1])
        self._rows_linear = wrap("layer_matmuls", _rows_linear)  # type: ignore[method-assign]
        self._rows_swiglu = wrap("layer_matmuls", _rows_swiglu)  # type: ignore[method-assign]
        self._rows_head = wrap("head", _rows_linear)  # type: ignore[method-assign]
        self._attention = wrap("attention", self._attention)  # type: ignore[method-assign]
        rms_norm = wrap("rms_norm", saved[2])
        try:
            yield
        finally:
            self._linear, self._head_linear = saved[0], saved[1]
            del self._attention, self._rows_linear, self._rows_swiglu, self._rows_head  # the plain calls again
            rms_norm = saved[2]

    _rows_linear = staticmethod(_rows_linear)
    _rows_swiglu = staticmethod(_rows_swiglu)
    _rows_head = staticmethod(_rows_linear)

    def _pack(self) -> None:
        wide = self._wide_dtype

        def bias(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(wide)

        def pack(weight: torch.Tensor) -> torch.Tensor:  # the HF layout where packed_weights is off
            return pack_weight(weight) if self._options.packed_weights else weight

        self._packed_head = pack(self.lm_head)
        self._packed = [
            _PackedLayer(
                qkv=pack(layer.qkv.to(wide)),
                o=pack(layer.o.to(wide)),
                gate_up=pack(layer.gate_up.to(wide)),
                down=pack(layer.down.to(wide)),
                qkv_bias=bias(layer.qkv_bias),
                o_bias=bias(layer.o_bias),
                gate_up_bias=bias(layer.gate_up_bias),
                down_bias=bias(layer.down_bias),
            )
            for layer in self.layers
        ]

    @property
    def kv_shape(self) -> KVShape:
        c = self.config
        return KVShape(
            num_layers=c.num_layers,
            num_kv_heads=c.num_kv_heads,
            head_dim=c.head_dim,
            dtype=self.dtype,
            device=self.device,
        )

    def _name_targets(self) -> dict[str, torch.Tensor]:
        """HF parameter name -> the (view of the) tensor it is copied into."""
        c = self.config
        q_rows, kv_rows = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        out = {"model.embed_tokens.weight": self.embed, "model.norm.weight": self.norm}
        out["lm_head.weight"] = self.lm_head
        split = {"q": slice(0, q_rows), "k": slice(q_rows, q_rows + kv_rows), "v": slice(q_rows + kv_rows, None)}
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            out[p + "input_layernorm.weight"] = layer.input_norm
            out[p + "post_attention_layernorm.weight"] = layer.post_norm
            for name, rows in split.items():
                out[p + f"self_attn.{name}_proj.weight"] = layer.qkv[rows]
                if layer.qkv_bias is not None:
                    out[p + f"self_attn.{name}_proj.bias"] = layer.qkv_bias[rows]
            out[p + "self_attn.o_proj.weight"] = layer.o
            if layer.o_bias is not None:
                out[p + "self_attn.o_proj.bias"] = layer.o_bias
            if layer.q_norm is not None and layer.k_norm is not None:
                out[p + "self_attn.q_norm.weight"] = layer.q_norm
                out[p + "self_attn.k_norm.weight"] = layer.k_norm
            inter = c.intermediate_size
            out[p + "mlp.gate_proj.weight"] = layer.gate_up[:inter]
            out[p + "mlp.up_proj.weight"] = layer.gate_up[inter:]
            out[p + "mlp.down_proj.weight"] = layer.down
            if layer.gate_up_bias is not None and layer.down_bias is not None:
                out[p + "mlp.gate_proj.bias"] = layer.gate_up_bias[:inter]
                out[p + "mlp.up_proj.bias"] = layer.gate_up_bias[inter:]
                out[p + "mlp.down_proj.bias"] = layer.down_bias
        return out

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, torch.Tensor], *, strict: bool = True) -> None:
        """Copy HF-named tensors in. strict: every weight must be present (a partial update otherwise)."""
        unknown = [name for name in state if name not in self._targets and "rotary_emb" not in name]
        if unknown:
            raise UnknownModelError(f"unexpected weight names: {unknown[:5]}{' ...' if len(unknown) > 5 else ''}")
        tied = {"lm_head.weight"} if self.config.tie_word_embeddings else set()
        missing = [n for n in self._targets if n not in state and n not in tied]
        if strict and missing:
            raise UnknownModelError(f"missing weights: {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        for name, tensor in state.items():
            if name not in self._targets:
                continue
            target = self._targets[name]
            if tuple(target.shape) != tuple(tensor.shape):
                raise UnknownModelError(f"{name}: shape {tuple(tensor.shape)}, expected {tuple(target.shape)}")
            target.copy_(tensor.detach())
        self._packed = None
        self._half_head = None

    @torch.no_grad()
    def forward(self, step: StepBatch, cache: KVCache) -> torch.Tensor:
        """Logits [num_samples, vocab] (fp32) at step.sample_tokens; writes every token's K/V to cache."""
        c = self.config
        n = step.token_ids.shape[0]
        if ((self.native_attention or self.native_rows or self.native_rows_max_tokens)
                and (step.num_decode or n <= self.native_rows_max_tokens) and not native.available()):
            # no compiler or library here (said once on stderr)
            self.native_attention = self.native_rows = False
            self.native_rows_max_tokens = 0
        x = self.embed[step.token_ids]  # [n, hidden] fp32: the residual stream
        opts = self._options
        one_thread_small = n <= opts.small_step_tokens and torch.get_num_threads() <= opts.small_step_max_threads
        one_token = (opts.one_token_path and n == 1 and not step.prefills and self.device.type == "cpu"
                     and step.sample_tokens.numel() == 1)
        few_rows = not (one_thread_small or one_token) and n <= self.native_rows_max_tokens
        matrices: Sequence[_Layer | _PackedLayer]  # the layers' own matrices or the packed copies, named alike
        linear: Callable[..., torch.Tensor]
        head_linear: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]
        gemv = n <= opts.reduced_gemv_tokens and self.dtype != torch.float32 and self.device.type == "cpu"
        if one_thread_small or gemv or (self.wide_steps_fp32 and n <= EMULATED_BF16_MAX_TOKENS):
            matrices, linear, mm_dtype = self.layers, F.linear, self.dtype  # the plain matrices (EngineOptions)
        elif few_rows:  # the plain fp32 matrices through our few-row kernels
            matrices, linear, mm_dtype = self.layers, self._rows_linear, torch.float32
        else:
            if self._packed is None:
                self._pack()
            assert self._packed is not None
            matrices, linear, mm_dtype = self._packed, self._linear, self._wide_dtype
        if one_thread_small:
            head, head_linear = self.lm_head, F.linear
        elif few_rows and step.sample_tokens.numel() <= ROWS_HEAD_MAX:
            head, head_linear = self.lm_head, self._rows_head
        else:
            if self._packed is None:
                self._pack()
            head, head_linear = self._packed_head, self._head_linear
        with onednn_off() if gemv else contextlib.nullcontext():
            if one_token:
                x = self._one_token_layers(x, step, cache, matrices, linear, mm_dtype)
                h = _row_rms_norm(x, self.norm, c.rms_norm_eps)
                if self.native_rows and self.dtype == torch.float32:  # reduced precision: the fp16 head below
                    return native.linear_row(h, self.lm_head, checked=False)
            else:
                cos = self.cos[step.positions][:, None, :]  # [n, 1, head_dim]
                sin = self.signed_sin[step.positions][:, None, :]
                x = self._layers(x, step, cache, matrices, linear, mm_dtype, cos, sin,
                                 swiglu=self._rows_swiglu if few_rows else None)
                h = rms_norm(x if step.samples_every_token else x[step.sample_tokens], self.norm, c.rms_norm_eps)
            if gemv and opts.half_head:
                logits = self._half_logits(h)
                if logits is not None:
                    return logits
        return head_linear(h, head, None)

    def _half_logits(self, h: torch.Tensor) -> torch.Tensor | None:
        """fp32 logits from the fp16 head copy (see HALF_HEAD_LIMIT), or None where fp16 cannot hold the
        head (checked once per copy) or the logits (a hidden state beyond fp16's range rounds to inf, so its
        logits are not finite either); the caller then uses the fp32 head."""
        if self._half_head is None:
            fits = bool(self.lm_head.abs().max() < HALF_HEAD_LIMIT)
            self._half_head = self.lm_head.to(torch.float16) if fits else torch.empty(0)
        if self._half_head.numel() == 0:
            return None
        logits = F.linear(h.to(torch.float16), self._half_head).float()
        return logits if bool(torch.isfinite(logits).all()) else None

    def _layers(self, x: torch.Tensor, step: StepBatch, cache: KVCache, matrices: Sequence[Any],
                linear: Callable[..., torch.Tensor], mm_dtype: torch.dtype, cos: torch.Tensor, sin: torch.Tensor,
                *, swiglu: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
        """Every layer over the step's tokens; x is the fp32 residual stream, updated in place.
        swiglu: the few-row kernels' SwiGLU (`_rows_swiglu`), with `linear` then `_rows_linear`, whose fourth
        argument is the residual it adds into in place; None: plain linears, the adds and SwiGLU in torch."""
        c = self.config
        n = x.shape[0]
        q_size, kv_size = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        packed: Any
        for index, (layer, packed) in enumerate(zip(self.layers, matrices, strict=True)):
            h = rms_norm(x, layer.input_norm, c.rms_norm_eps).to(mm_dtype)
            # [n, q_size + 2 * kv_size], in the compute dtype whatever the matmul's (RoPE, KV, attention)
            qkv = linear(h, packed.qkv, packed.qkv_bias).to(self.dtype)
            v = qkv[:, q_size + kv_size :].view(n, c.num_kv_heads, c.head_dim)
            if layer.q_norm is not None and layer.k_norm is not None:
                q = rms_norm(qkv[:, :q_size].view(n, c.num_heads, c.head_dim), layer.q_norm, c.rms_norm_eps)
                k = rms_norm(qkv[:, q_size : q_size + kv_size].view(n, c.num_kv_heads, c.head_dim),
                              layer.k_norm, c.rms_norm_eps)
                q, k = _rotate(q.to(self.dtype), cos, sin), _rotate(k.to(self.dtype), cos, sin)
            else:  # q and k rotate in one pass: their heads sit side by side in qkv
                qk = _rotate(qkv[:, : q_size + kv_size].view(n, c.num_heads + c.num_kv_heads, c.head_dim), cos, sin)
                q, k = qk[:, : c.num_heads], qk[:, c.num_heads :]
            attn = self._attention(q, k, v, step, cache.keys[index], cache.values[index])
            if swiglu is not None:  # the adds into x happen inside the kernels
                linear(attn.reshape(n, q_size), packed.o, packed.o_bias, x)
                h = rms_norm(x, layer.post_norm, c.rms_norm_eps)
                linear(swiglu(h, packed.gate_up, packed.gate_up_bias), packed.down, packed.down_bias, x)
                continue
            x.add_(linear(attn.reshape(n, q_size).to(mm_dtype), packed.o, packed.o_bias))
            h = rms_norm(x, layer.post_norm, c.rms_norm_eps).to(mm_dtype)
            gate, up = linear(h, packed.gate_up, packed.gate_up_bias).chunk(2, dim=-1)
            x.add_(linear(F.silu(gate, inplace=True) * up, packed.down, packed.down_bias))
        return x

    def _one_token_layers(self, x: torch.Tensor, step: StepBatch, cache: KVCache, matrices: Sequence[Any],
                          linear: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor],
                          mm_dtype: torch.dtype) -> torch.Tensor:
        """`_layers` for a step of one decode token on the CPU, in fewer kernels (`EngineOptions.one_token_path`);
        returns the residual stream [1, hidden] fp32 (a new tensor where the adds are fused into the matmuls).

        Such a step reads every weight once, and that stream evicts what the few hundred small kernels between
        its matmuls need from the caches, so each costs several times what it costs alone
        (docs/results/engine-bounds-avx2.json). Here there are fewer of them: RMSNorm as one dot product and two
        multiplies (the row's scale as a Python float), in fp32 RoPE as one small matmul by the position's
        rotation matrix, K/V written by plain indexing, and on oneDNN the residual add fused into the o and down
        projections. The same math to fp32 rounding (the parity tests hold it to the general path's bounds)."""
        c = self.config
        (run,) = step.decode_runs
        row, kv_len = run.row_start, run.kv_len
        position = kv_len - 1  # a lone row's KV ends at its token
        # RoPE as a matmul in fp32 only: where bf16 is emulated that small bf16 matmul is slower than `_rotate`,
        # which bf16 keeps (docs/results/engine-steps-one-token-avx2.json, `one_token_path/bf16_*`).
        rotation = self._rotation(position) if self.dtype == torch.float32 else None

        def rope(x: torch.Tensor) -> torch.Tensor:  # x [heads, head_dim]
            if rotation is not None:
                return torch.mm(x, rotation)
            return _rotate(x, self.cos[position : position + 1], self.signed_sin[position : position + 1])

        fused_add = linear is _onednn_linear
        rows = self.native_rows  # the plain fp32 matrices through our one-row kernels (the engine's own tensors)
        rotated = c.num_heads + c.num_kv_heads  # q's and k's heads, side by side in qkv
        q_size = c.num_heads * c.head_dim
        def fp32(bias: torch.Tensor | None) -> torch.Tensor | None:
            return None if bias is None else bias.float()

        for index, (layer, packed) in enumerate(zip(self.layers, matrices, strict=True)):
            h = _row_rms_norm(x, layer.input_norm, c.rms_norm_eps)
            if rows:  # the norm's fp32 row and fp32 sums whatever the matrices' dtype
                heads = native.linear_row(h, layer.qkv, fp32(layer.qkv_bias), checked=False).to(self.dtype)
            else:
                heads = linear(h.to(mm_dtype), packed.qkv, packed.qkv_bias).to(self.dtype)
            heads = heads.view(rotated + c.num_kv_heads, c.head_dim)
            if layer.q_norm is not None and layer.k_norm is not None:
                q = rope(rms_norm(heads[: c.num_heads], layer.q_norm, c.rms_norm_eps).to(self.dtype))
                k = rope(rms_norm(heads[c.num_heads : rotated], layer.k_norm, c.rms_norm_eps).to(self.dtype))
            else:
                qk = rope(heads[:rotated])
                q, k = qk[: c.num_heads], qk[c.num_heads :]
            key_cache, value_cache = cache.keys[index], cache.values[index]
            key_cache[row, :, position] = k
            value_cache[row, :, position] = heads[rotated:]
            grouped = q.view(1, c.num_kv_heads, c.num_query_groups, c.head_dim)
            if self.native_attention:
                o = torch.empty_like(grouped)
                native.decode_attention(grouped, key_cache, value_cache, step.decode_meta, o)
            else:
                o = F.scaled_dot_product_attention(
                    grouped, key_cache[row : row + 1, :, :kv_len], value_cache[row : row + 1, :, :kv_len])
            attn = o.reshape(1, q_size).to(mm_dtype)
            if rows:
                x = native.linear_row(attn.float().contiguous(), layer.o, fp32(layer.o_bias), x, checked=False)
                h = _row_rms_norm(x, layer.post_norm, c.rms_norm_eps)
                act = native.swiglu_row(h, layer.gate_up, fp32(layer.gate_up_bias), checked=False)
                x = native.linear_row(act, layer.down, fp32(layer.down_bias), x, checked=False)
                continue
            if fused_add:
                x = _onednn_linear_add(attn, x, packed.o, packed.o_bias)
            else:
                x.add_(linear(attn, packed.o, packed.o_bias))
            h = _row_rms_norm(x, layer.post_norm, c.rms_norm_eps).to(mm_dtype)
            gate, up = linear(h, packed.gate_up, packed.gate_up_bias).chunk(2, dim=-1)
            act = F.silu(gate, inplace=True).mul_(up)
            if fused_add:
                x = _onednn_linear_add(act, x, packed.down, packed.down_bias)
            else:
                x.add_(linear(act, packed.down, packed.down_bias))
        return x

    def _rotation(self, position: int) -> torch.Tensor:
        """RoPE at `position` as a [head_dim, head_dim] matrix R (compute dtype): `heads @ R` equals
        `_rotate(heads, cos, signed_sin)` (each output sums the same two products; every other term is 0)."""
        d = self.config.head_dim
        rotation = torch.diag(self.cos[position])
        columns = torch.arange(d, device=self.device)
        rotation[(columns - d // 2) % d, columns] = self.signed_sin[position]
        return rotation

    def _attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        step: StepBatch,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
    ) -> torch.Tensor:
        """q [n, heads, head_dim], k/v [n, kv_heads, head_dim] -> [n, heads, head_dim]."""
        c = self.config
        key_cache[step.rows, :, step.positions] = k  # every token of the step, decode and prefill
        value_cache[step.rows, :, step.positions] = v
        if self.native_attention and step.num_decode:
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
            decode = step.num_decode
            grouped = q[:decode].contiguous().view(decode, c.num_kv_heads, c.num_query_groups, c.head_dim)
            native.decode_attention(grouped, key_cache, value_cache, step.decode_meta,
                                    out[:decode].view(decode, c.num_kv_heads, c.num_query_groups, c.head_dim))
            return self._prefill_attention(q, step, key_cache, value_cache, out)
        if len(step.decode_runs) == 1 and not step.prefills:  # the output is the one call's, as it is
            run = step.decode_runs[0]
            rows = run.row_stop - run.row_start
            grouped = q.view(rows, c.num_kv_heads, c.num_query_groups, c.head_dim)
            keys = key_cache[run.row_start : run.row_stop, :, : run.kv_len]
            values = value_cache[run.row_start : run.row_stop, :, : run.kv_len]
            o = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=run.mask)
            return o.reshape(rows, c.num_heads, c.head_dim)
        out = torch.empty_like(q)
        for run in step.decode_runs:
            rows = run.row_stop - run.row_start
            tokens = slice(run.token_start, run.token_start + rows)
            # The query heads sharing a KV head become that head's "query positions": one SDPA call
            # reads each cached K/V once instead of once per query head. [rows, kv_heads, groups, dim]
            grouped = q[tokens].view(rows, c.num_kv_heads, c.num_query_groups, c.head_dim)
            keys = key_cache[run.row_start : run.row_stop, :, : run.kv_len]
            values = value_cache[run.row_start : run.row_stop, :, : run.kv_len]
            o = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=run.mask)
            out[tokens] = o.reshape(rows, c.num_heads, c.head_dim)
        return self._prefill_attention(q, step, key_cache, value_cache, out)

    def _prefill_attention(self, q: torch.Tensor, step: StepBatch, key_cache: torch.Tensor,
                           value_cache: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Each prefill chunk's attention into its tokens' rows of `out` [n, heads, head_dim]; returns out."""
        for chunk in step.prefills:
            span = slice(chunk.token_start, chunk.token_start + chunk.num_tokens)
            end = chunk.past + chunk.num_tokens
            query = q[span].transpose(0, 1)[None]  # [1, heads, tokens, dim]
            keys = key_cache[chunk.row : chunk.row + 1, :, :end]
            values = value_cache[chunk.row : chunk.row + 1, :, :end]
            if chunk.past == 0 and self._options.causal_first_chunks:  # the kernel skips the masked blocks
                o = F.scaled_dot_product_attention(query, keys, values, is_causal=True, enable_gqa=True)
            else:
                o = F.scaled_dot_product_attention(query, keys, values, attn_mask=chunk.mask, enable_gqa=True)
            out[span] = o[0].transpose(0, 1)
        return out
