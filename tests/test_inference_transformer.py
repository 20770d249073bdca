"""Our packed, KV-cached forward against the Hugging Face forward of the same weights."""

from __future__ import annotations

import pytest
import torch

from codedojo.inference.kv_cache import KVCache
from codedojo.inference.specs import TinyModel
from codedojo.inference.step_batch import build_step


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def models(request: pytest.FixtureRequest):
    loaded = TinyModel(architecture=request.param, num_layers=3, max_positions=512).load()
    return loaded.engine_model(), loaded.hf_model()


def reference_logits(hf, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(input_ids=torch.tensor([tokens])).logits[0]  # [seq, vocab]


def test_ragged_prefill_chunks_and_decode_runs_match_hf(models) -> None:
    ours, hf = models
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(5, 261, (n,), generator=g).tolist() for n in (17, 60, 33, 9)]
    cache = KVCache(ours.kv_shape, rows=4, capacity=128)
    # Step 1: rows 0, 2, 3 prefill whole prompts; row 1 only its first 25 tokens (a chunk).
    step = build_step(
        [],
        prefills=[(0, 0, seqs[0]), (1, 0, seqs[1][:25]), (2, 0, seqs[2]), (3, 0, seqs[3])],
        sample_tokens=[16, 17 + 25 + 32, 17 + 25 + 33 + 8],
        device="cpu",
    )
    first = ours.forward(step, cache)
    # Step 2: rows 0, 2, 3 decode (two runs: row 0, rows 2-3) while row 1 prefills the rest.
    new = [7, 8, 9]
    step = build_step(
        [(0, 17, new[0]), (2, 33, new[1]), (3, 9, new[2])],
        prefills=[(1, 25, seqs[1][25:])],
        sample_tokens=[0, 1, 2, 3 + 35 - 1],
        device="cpu",
    )
    assert len(step.decode_runs) == 2
    second = ours.forward(step, cache)
    for out, row in zip(first, (0, 2, 3), strict=True):
        torch.testing.assert_close(out, reference_logits(hf, seqs[row])[-1], atol=1e-4, rtol=0)
    for out, (row, token) in zip(second[:3], zip((0, 2, 3), new, strict=True), strict=True):
        torch.testing.assert_close(out, reference_logits(hf, [*seqs[row], token])[-1], atol=1e-4, rtol=0)
    torch.testing.assert_close(second[3], reference_logits(hf, seqs[1])[-1], atol=1e-4, rtol=0)


def test_partial_weight_update_changes_only_named_weights(models) -> None:
    ours, hf = models
    name = "model.layers.0.self_attn.k_proj.weight"
    before = ours.layers[1].qkv.clone()
    replacement = torch.zeros_like(hf.state_dict()[name])
    ours.load_state_dict({name: replacement}, strict=False)
    q_rows = ours.config.num_heads * ours.config.head_dim
    kv_rows = ours.config.num_kv_heads * ours.config.head_dim
    assert torch.all(ours.layers[0].qkv[q_rows : q_rows + kv_rows] == 0)
    assert torch.equal(ours.layers[1].qkv, before)
    ours.load_state_dict(hf.state_dict())  # restore for the other tests
