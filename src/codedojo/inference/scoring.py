"""The trainer's side of the logprob contract: one full forward pass over a whole sequence.

`sequence_logprobs` is the reference the engine's sampled logprobs are tested against: position t holds
`log_softmax(logits[t - 1] / temperature)[token[t]]` (temperature 0 is treated as 1, like greedy rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


@torch.no_grad()
def sequence_logprobs(model: Any, token_ids: Sequence[int], *, temperature: float = 1.0) -> torch.Tensor:
    """[len(token_ids) - 1] fp32 logprobs of tokens 1.. under a causal LM (an HF model, or any callable
    returning an object with `.logits` [1, seq, vocab])."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], dtype=torch.int64, device=device)
    logits = model(input_ids=ids).logits[0, :-1].float()  # [seq - 1, vocab]
    scale = temperature if temperature > 0 else 1.0
    logprobs = torch.log_softmax(logits / scale, dim=-1)
    return logprobs.gather(1, ids[0, 1:, None])[:, 0].cpu()
