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


def test_rows_sharing_a_prefix_read_it_once_and_match_hf(models) -> None:
    """A decode run whose rows start with the same 70 tokens attends to that prefix through the first
    row's KV only; the logits equal HF's for every row (and the run is really a sharing one)."""
    ours, hf = models
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(5, 261, (70,), generator=g).tolist()
    seqs = [prefix + torch.randint(5, 261, (n,), generator=g).tolist() for n in (3, 20, 9)]
    cache = KVCache(ours.kv_shape, rows=4, capacity=128)
    lengths = [len(s) for s in seqs]
    step = build_step([], prefills=[(row, 0, s) for row, s in enumerate(seqs)],
                      sample_tokens=[sum(lengths[: i + 1]) - 1 for i in range(3)], device="cpu")
    ours.forward(step, cache)
    # Poison row 1's and row 2's copies of the prefix: a sharing run must not read them.
    for layer in range(ours.config.num_layers):
        cache.keys[layer][1:3, :, :70] = float("nan")
        cache.values[layer][1:3, :, :70] = float("nan")
    new = [11, 12, 13]
    step = build_step([(row, lengths[row], new[row]) for row in range(3)], prefills=[], sample_tokens=[0, 1, 2],
                      device="cpu", shared=[0, 70, 70], min_shared=64)
    assert [(r.row_start, r.row_stop, r.shared_prefix) for r in step.decode_runs] == [(0, 3, 70)]
    logits = ours.forward(step, cache)
    for row in range(3):
        torch.testing.assert_close(logits[row], reference_logits(hf, [*seqs[row], new[row]])[-1], atol=1e-4, rtol=0)


def test_run_bounds_group_sharing_rows_and_keep_the_rest_plain() -> None:
    from codedojo.inference.step_batch import _run_bounds

    def bounds(rows: list[int], shared: list[int]) -> list[tuple[int, int, int]]:
        return _run_bounds([(r, 0, 0) for r in rows], shared, min_shared=64)

    assert bounds([0, 1, 2, 3], [0, 0, 0, 0]) == [(0, 4, 0)]
    assert bounds([0, 1, 2, 3], [0, 100, 100, 0]) == [(0, 3, 100), (3, 4, 0)]
    assert bounds([0, 1, 2, 3, 4, 5], [0, 0, 100, 80, 0, 0]) == [(0, 1, 0), (1, 4, 80), (4, 6, 0)]
    assert bounds([0, 1, 3, 4], [0, 100, 100, 100]) == [(0, 2, 100), (2, 4, 100)]  # rows 1 and 3 not adjacent
    assert bounds([0, 1, 2, 3], [0, 100, 10, 100]) == [(0, 2, 100), (2, 4, 100)]
