"""The trainer's packed forward equals the Hugging Face forward, sequence by sequence."""

from __future__ import annotations

import pytest
import torch

from codedojo.inference.specs import TinyModel
from codedojo.train.packed import packed_token_logprobs


@pytest.mark.parametrize("architecture", ["llama", "qwen3"])
def test_packed_logprobs_match_the_hf_forward(architecture: str) -> None:
    loaded = TinyModel(architecture=architecture, seed=3).load()
    model = loaded.hf_model()
    torch.manual_seed(0)
    sequences = [torch.randint(5, 200, (n,)).tolist() for n in (7, 1, 33, 12)]
    for temperature in (1.0, 0.7):
        with torch.no_grad():
            packed, entropy = packed_token_logprobs(model, sequences, temperature=temperature, chunk_size=5,
                                                    with_entropy=True)
            for seq, lp, ent in zip(sequences, packed, entropy, strict=True):
                logits = model(torch.tensor([seq])).logits[0, :-1].float() / temperature
                ref = torch.log_softmax(logits, dim=-1)
                expected = ref.gather(-1, torch.tensor(seq[1:])[:, None])[:, 0]
                assert lp.shape == (len(seq) - 1,)
                assert torch.allclose(lp, expected, atol=1e-5)
                assert torch.allclose(ent, -(ref.exp() * ref).sum(-1), atol=1e-5)


def test_gradients_flow_through_the_chunked_logprobs() -> None:
    model = TinyModel(seed=1).load().hf_model().train()
    packed, _ = packed_token_logprobs(model, [[5, 6, 7, 8], [9, 10, 11]], chunk_size=2)
    torch.cat(packed).sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
