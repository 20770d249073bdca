"""The model being trained: a Hugging Face module (optionally with LoRA adapters), its logprobs, and the
weights it hands to the inference engine.

LoRA wraps the attention and MLP projections: y = W x + (alpha / r) B A x with A (r, in) random and
B (out, r) zero, so training starts exactly at the base model. The engine receives merged weights
(W + (alpha / r) B A) under the base HF names, so it never needs to know about adapters.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from codedojo.precision import compute_precision
from codedojo.train.packed import packed_token_logprobs

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update."""

    def __init__(self, base: nn.Linear, *, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        if self.base.bias is not None:
            self.base.bias.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, device=base.weight.device,
                                               dtype=base.weight.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=base.weight.device,
                                               dtype=base.weight.dtype))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.enabled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        if self.enabled:
            out = out + (x @ self.lora_A.T @ self.lora_B.T) * self.scale
        return out

    def merged_weight(self) -> torch.Tensor:
        return self.base.weight + (self.lora_B @ self.lora_A) * self.scale


class Policy:
    """Trainable model with the operations the trainer needs."""

    def __init__(self, model: nn.Module, *, lora_rank: int = 0, lora_alpha: float = 16.0,
                 keep_reference: bool = False, compute_dtype: torch.dtype = torch.float32) -> None:
        self.model = model
        self.compute_dtype = compute_dtype
        """Matmul dtype of every forward (bf16: autocast over fp32 weights; logprobs stay fp32)."""
        self.lora_rank = lora_rank
        self._reference: nn.Module | None = None
        if lora_rank > 0:
            for p in model.parameters():
                p.requires_grad_(False)
            for module in list(model.modules()):
                for child_name, child in list(module.named_children()):
                    if child_name in LORA_TARGETS and isinstance(child, nn.Linear):
                        setattr(module, child_name, LoRALinear(child, rank=lora_rank, alpha=lora_alpha))
        elif keep_reference:
            # The frozen initial policy for the KL loss (with LoRA, the base model is the reference).
            self._reference = copy.deepcopy(model).eval()
            for p in self._reference.parameters():
                p.requires_grad_(False)
        self.model.train()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def named_trainable_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        return ((n, p) for n, p in self.model.named_parameters() if p.requires_grad)

    def logprobs(self, sequences: Sequence[Sequence[int]], *, temperature: float, chunk_size: int,
                 with_entropy: bool = False, used: Sequence[Sequence[int]] | None = None,
                 groups: Sequence[object] | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Per-sequence logprobs (see `packed_token_logprobs`: `used` positions only, `groups` share prefixes)."""
        with compute_precision(self.device, self.compute_dtype):
            return packed_token_logprobs(self.model, sequences, temperature=temperature, chunk_size=chunk_size,
                                         with_entropy=with_entropy, used=used, groups=groups)

    @torch.no_grad()
    def reference_logprobs(self, sequences: Sequence[Sequence[int]], *, temperature: float, chunk_size: int,
                           used: Sequence[Sequence[int]] | None = None,
                           groups: Sequence[object] | None = None) -> list[torch.Tensor]:
        """Logprobs under the initial policy (frozen copy, or the base model with adapters off)."""
        model = self._reference if self._reference is not None else self.model
        adapters = contextlib.nullcontext() if self._reference is not None else self._adapters_off()
        with adapters, compute_precision(self.device, self.compute_dtype):
            out, _ = packed_token_logprobs(model, sequences, temperature=temperature, chunk_size=chunk_size,
                                           used=used, groups=groups)
        return out

    @contextlib.contextmanager
    def _adapters_off(self) -> Iterator[None]:
        adapters = [m for m in self.model.modules() if isinstance(m, LoRALinear)]
        for m in adapters:
            m.enabled = False
        try:
            yield
        finally:
            for m in adapters:
                m.enabled = True

    @torch.no_grad()
    def engine_state(self) -> dict[str, torch.Tensor]:
        """HF-named weights with any LoRA update merged in: what the inference engine loads."""
        state: dict[str, torch.Tensor] = {}
        lora_modules = {name: m for name, m in self.model.named_modules() if isinstance(m, LoRALinear)}
        for name, tensor in self.model.state_dict().items():
            if ".lora_A" in name or ".lora_B" in name:
                continue
            if ".base." in name:
                owner, _, leaf = name.rpartition(".base.")
                if leaf == "weight" and owner in lora_modules:
                    tensor = lora_modules[owner].merged_weight()
                name = f"{owner}.{leaf}"
            state[name] = tensor.detach()
        return state

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """What a checkpoint must hold to restore training (all weights, or only the adapters)."""
        if self.lora_rank > 0:
            return {n: p.detach().clone() for n, p in self.named_trainable_parameters()}
        return {n: t.detach().clone() for n, t in self.model.state_dict().items()}

    def load_trainable_state(self, state: dict[str, Any]) -> None:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected:
            raise ValueError(f"checkpoint has weights this model lacks: {unexpected[:5]}")
        if self.lora_rank == 0 and [m for m in missing if not m.endswith("lm_head.weight")]:
            raise ValueError(f"checkpoint lacks weights of this model: {missing[:5]}")
