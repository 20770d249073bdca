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


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def _masked_loss(lps: list[torch.Tensor], masks: list[list[int]], weights: list[float]) -> torch.Tensor:
    return sum((lp * torch.tensor(m, dtype=lp.dtype) * w).sum() for lp, m, w in zip(lps, masks, weights,
                                                                                      strict=True))


@pytest.mark.parametrize("architecture", ["llama", "qwen3"])
def test_head_at_used_positions_equals_the_full_computation(architecture: str) -> None:
    model = TinyModel(architecture=architecture, seed=5).load().hf_model().train()
    gen = torch.Generator().manual_seed(1)
    sequences = [torch.randint(5, 200, (n,), generator=gen).tolist() for n in (9, 2, 30, 17)]
    masks = [[int(x) for x in (torch.rand(len(s) - 1, generator=gen) < 0.3)] for s in sequences]
    masks[1] = [0]  # a sequence with nothing to read
    full, full_ent = packed_token_logprobs(model, sequences, chunk_size=4, with_entropy=True)
    _masked_loss(full, masks, [1.0, -2.0, 0.5, 1.5]).backward()
    expected_grads = _grads(model)
    used, used_ent = packed_token_logprobs(model, sequences, chunk_size=4, with_entropy=True, used=masks)
    _masked_loss(used, masks, [1.0, -2.0, 0.5, 1.5]).backward()
    got_grads = _grads(model)
    assert used_ent is not None and full_ent is not None
    for f, u, fe, ue, m in zip(full, used, full_ent, used_ent, masks, strict=True):
        keep = torch.tensor(m, dtype=torch.bool)
        assert u.shape == f.shape
        assert torch.allclose(u[keep], f[keep].detach(), atol=1e-6)
        assert torch.allclose(ue[keep], fe[keep].detach(), atol=1e-6)
        assert bool((u[~keep] == 0).all()) and bool((ue[~keep] == 0).all())  # unread positions are 0
    assert got_grads.keys() == expected_grads.keys()
    for name, g in expected_grads.items():
        # fp32 summation order (the head over fewer rows) moves a gradient by ~1e-7 of its largest entry
        # (3e-6 on the embeddings, max 7.8, on an AVX-512 CPU): the tolerance scales with the tensor
        assert torch.allclose(got_grads[name], g, atol=1e-6 * max(1.0, float(g.abs().max())), rtol=1e-5), name


def _group_sequences(gen: torch.Generator) -> tuple[list[list[int]], list[int]]:
    """Two GRPO groups whose members share a 40- and a 25-token opening, plus a loner."""
    prefix_a = torch.randint(5, 200, (40,), generator=gen).tolist()
    prefix_b = torch.randint(5, 200, (25,), generator=gen).tolist()
    sequences = [prefix_a + torch.randint(5, 200, (n,), generator=gen).tolist() for n in (12, 1, 30)]
    sequences += [prefix_b + torch.randint(5, 200, (n,), generator=gen).tolist() for n in (7, 19)]
    sequences.append(torch.randint(5, 200, (21,), generator=gen).tolist())
    sequences[2][40] = sequences[0][40]  # two members whose first reply token agrees: a longer common prefix
    return sequences, [0, 0, 0, 1, 1, 2]


@pytest.mark.parametrize("architecture", ["llama", "qwen3"])
def test_a_shared_group_prefix_gives_the_unshared_loss_and_gradients(architecture: str) -> None:
    model = TinyModel(architecture=architecture, seed=7).load().hf_model().train()
    gen = torch.Generator().manual_seed(2)
    sequences, groups = _group_sequences(gen)
    # trainable positions inside the shared prefix too (a prefix can run into a first reply)
    masks = [[int(x) for x in (torch.rand(len(s) - 1, generator=gen) < 0.5)] for s in sequences]
    weights = [1.0, -0.5, 2.0, -1.0, 0.7, 0.3]
    plain, _ = packed_token_logprobs(model, sequences, chunk_size=8, used=masks)
    loss_plain = _masked_loss(plain, masks, weights)
    loss_plain.backward()
    expected = _grads(model)
    shared, _ = packed_token_logprobs(model, sequences, chunk_size=8, used=masks, groups=groups)
    loss_shared = _masked_loss(shared, masks, weights)
    loss_shared.backward()
    got = _grads(model)
    assert abs(float(loss_shared.detach()) - float(loss_plain.detach())) < 1e-5
    for a, b in zip(plain, shared, strict=True):
        assert torch.allclose(a.detach(), b.detach(), atol=1e-5)
    for name, g in expected.items():
        assert torch.allclose(got[name], g, atol=1e-5, rtol=1e-4), name


def test_the_layout_lays_each_shared_prefix_out_once() -> None:
    from codedojo.train.packed import layout

    gen = torch.Generator().manual_seed(2)
    sequences, groups = _group_sequences(gen)
    lay = layout(sequences, groups)
    # group 0 shares 40 tokens (41 common between two members, but the three share 40), group 1 shares 25
    assert [(b.prefix, b.suffixes) for b in lay.blocks] == [(40, (12, 1, 30)), (25, (7, 19)), (21, ())]
    assert lay.num_tokens == sum(len(s) for s in sequences) - 2 * 40 - 25
    for seq, rows in zip(sequences, lay.rows, strict=True):
        assert [lay.input_ids[r] for r in rows] == seq
        assert [lay.positions[r] for r in rows] == list(range(len(seq)))
    # too short a common prefix: no sharing
    plain = layout([[1, 2, 3, 4], [1, 2, 3, 5]], [0, 0])
    assert [(b.prefix, b.suffixes) for b in plain.blocks] == [(4, ()), (4, ())]


def test_bf16_logprobs_stay_within_the_stated_bound_of_fp32() -> None:
    """Autocast bf16 matmuls with the fp32 head: on the tiny model the gap stays under 0.02 (docs/training.md
    states what SmolLM2 measures); gradients still reach every parameter, in fp32."""
    from codedojo.precision import compute_precision

    model = TinyModel(seed=4).load().hf_model().train()
    gen = torch.Generator().manual_seed(3)
    sequences = [torch.randint(5, 200, (n,), generator=gen).tolist() for n in (50, 80)]
    with torch.no_grad():
        fp32, _ = packed_token_logprobs(model, sequences)
    with compute_precision("cpu", torch.bfloat16):
        bf16, _ = packed_token_logprobs(model, sequences)
    assert all(lp.dtype == torch.float32 for lp in bf16)
    gap = (torch.cat(fp32) - torch.cat(bf16).detach()).abs()
    assert 0 < float(gap.max()) < 0.02
    torch.cat(bf16).sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 and float(p.grad.abs().sum()) > 0
               for p in model.parameters())


def test_sft_loss_with_a_shared_prefix_equals_the_unshared_loss_and_gradients() -> None:
    """SFT lays a micro-batch's common opening (system prompt, worked examples) out once: exact in fp32."""
    from codedojo.train.policy import Policy
    from codedojo.train.sft import sft_loss

    policy = Policy(TinyModel(architecture="llama", seed=3).load().hf_model().train())
    gen = torch.Generator().manual_seed(5)
    opening = torch.randint(5, 200, (40,), generator=gen).tolist()
    sequences = [opening + torch.randint(5, 200, (n,), generator=gen).tolist() for n in (9, 25, 3)]
    masks = [[0] * 39 + [1] * (len(s) - 40) for s in sequences]  # the agent's tokens only, as in a demonstration
    num_tokens = sum(map(sum, masks))
    plain = sft_loss(policy, sequences, masks, num_tokens=num_tokens, chunk_size=8)
    plain.backward()
    expected = _grads(policy.model)
    shared = sft_loss(policy, sequences, masks, num_tokens=num_tokens, chunk_size=8, share_prefix=True)
    shared.backward()
    got = _grads(policy.model)
    assert abs(float(shared.detach()) - float(plain.detach())) < 1e-6
    assert float(plain.detach()) > 1.0  # a random model: the loss is far from 0, so equality means something
    for name, g in expected.items():
        assert torch.allclose(got[name], g, atol=1e-6, rtol=1e-4), name


@pytest.mark.parametrize("architecture", ["llama", "qwen3"])
def test_the_cpu_suffix_attention_equals_the_masked_one(architecture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU a group's suffixes attend through two unmasked flash calls merged by their log-sum-exp
    (`_SuffixAttention`); the explicit-mask path other devices take gives the same loss and gradients."""
    from codedojo.train import packed

    model = TinyModel(architecture=architecture, seed=9).load().hf_model().train()
    gen = torch.Generator().manual_seed(4)
    sequences, groups = _group_sequences(gen)
    masks = [[int(x) for x in (torch.rand(len(s) - 1, generator=gen) < 0.5)] for s in sequences]
    weights = [0.4, -1.5, 1.0, 2.0, -0.3, 0.8]

    def run() -> tuple[float, dict[str, torch.Tensor]]:
        lps, _ = packed_token_logprobs(model, sequences, chunk_size=8, used=masks, groups=groups)
        loss = _masked_loss(lps, masks, weights)
        loss.backward()
        return float(loss.detach()), _grads(model)

    assert packed._cpu_flash(torch.device("cpu"))
    merged_loss, merged = run()
    monkeypatch.setattr(packed, "_cpu_flash", lambda device: False)
    masked_loss, expected = run()
    assert abs(merged_loss - masked_loss) < 1e-5 and abs(masked_loss) > 0.1
    assert merged.keys() == expected.keys()
    for name, g in expected.items():
        assert torch.allclose(merged[name], g, atol=1e-5, rtol=1e-4), name


def test_block_attention_gives_the_same_values_and_gradients_merged_or_masked() -> None:
    """`block_attention` (bench/bf16_probe.py times its two paths): the CPU's merged suffix attention and the
    explicit-mask path give the same output and gradients on a shared group beside a plain sequence."""
    from codedojo.train.packed import block_attention, layout

    lay = layout([[1] * 20 + [7, 8, 9], [1] * 20 + [4] * 11, [3] * 9], [0, 0, 1])
    assert [(b.prefix, b.suffixes) for b in lay.blocks] == [(20, (3, 11)), (9, ())]
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(heads, lay.num_tokens, 8, generator=g) for heads in (4, 2, 2))

    def run(merged: bool) -> tuple[torch.Tensor, ...]:
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        out = block_attention(*inputs, lay, merged=merged)
        (out * torch.arange(out.numel()).view(out.shape).sin()).sum().backward()
        return (out.detach(), *(t.grad for t in inputs))

    for ours, theirs in zip(run(True), run(False), strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
