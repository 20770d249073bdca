"""The sampler: inverse-CDF draws that follow the softmax, respect top-k / top-p, and never pick a
zero-probability token."""

from __future__ import annotations

import torch

from codedojo.inference.sampler import BLOCK, RowSampling, inverse_cdf, sample


def rows(n: int, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> list[RowSampling]:
    return [
        RowSampling(temperature=temperature, top_k=top_k, top_p=top_p, generator=torch.Generator().manual_seed(i))
        for i in range(n)
    ]


def reference_inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One float64 cumulative sum over the whole vocabulary."""
    cdf = probs.double().cumsum(dim=-1)
    return torch.searchsorted(cdf, (uniforms.double() * cdf[:, -1])[:, None], right=True)[:, 0]


def test_two_level_search_picks_the_same_token_as_a_full_cumulative_sum() -> None:
    g = torch.Generator().manual_seed(0)
    for vocab in (7, BLOCK, 3 * BLOCK + 5, 49152):
        probs = torch.softmax(torch.randn(64, vocab, generator=g) * 4, dim=-1)
        uniforms = torch.rand(64, generator=g, dtype=torch.float64)
        assert torch.equal(inverse_cdf(probs, uniforms), reference_inverse_cdf(probs, uniforms)), vocab


def test_zero_probability_tokens_never_win_even_at_the_edges() -> None:
    vocab = 2 * BLOCK + 10
    probs = torch.zeros(4, vocab)
    probs[:, [3, BLOCK + 1, 2 * BLOCK + 4]] = torch.tensor([0.2, 0.5, 0.3])
    uniforms = torch.tensor([0.0, 0.2, 0.6999999, 1.0 - 1e-16], dtype=torch.float64)
    assert inverse_cdf(probs, uniforms).tolist() == [3, BLOCK + 1, BLOCK + 1, 2 * BLOCK + 4]
    # u = 1 (past what torch.rand returns; stands for u * total rounding up to the total) with the mass
    # ending before the last block: the last token that has mass, not the vocabulary's last.
    probs = torch.zeros(2, 3 * BLOCK)
    probs[:, [5, BLOCK + 7]] = 0.5
    ones = torch.ones(2, dtype=torch.float64)
    assert inverse_cdf(probs, ones).tolist() == [BLOCK + 7, BLOCK + 7]


def test_draws_follow_the_softmax() -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, 300) * 2
    expected = torch.softmax(logits[0], dim=-1)
    n = 20_000
    tokens, logprobs = sample(logits.expand(n, -1).contiguous(), rows(n))
    counts = torch.bincount(torch.tensor(tokens), minlength=300).double()
    # Every count within 5 binomial standard deviations of its expectation.
    sd = (n * expected * (1 - expected)).sqrt()
    assert torch.all((counts - n * expected).abs() <= 5 * sd + 1)
    torch.testing.assert_close(torch.tensor(logprobs), torch.log(expected)[tokens], atol=1e-5, rtol=0)


def test_top_k_and_top_p_restrict_the_draws() -> None:
    torch.manual_seed(1)
    logits = torch.randn(1, 500) * 3
    order = logits[0].argsort(descending=True)
    tokens, _ = sample(logits.expand(400, -1).contiguous(), rows(400, top_k=5))
    assert set(tokens) <= set(order[:5].tolist())
    probs = torch.softmax(logits[0], dim=-1)[order]
    nucleus = int((probs.cumsum(0) - probs < 0.5).sum())
    tokens, _ = sample(logits.expand(400, -1).contiguous(), rows(400, top_p=0.5))
    assert set(tokens) <= set(order[:nucleus].tolist())
    assert len(set(tokens)) > 1


def test_temperature_scales_the_reported_logprob_and_greedy_takes_the_argmax() -> None:
    logits = torch.randn(3, 100, generator=torch.Generator().manual_seed(2))
    batch = [*rows(1, temperature=0.5), RowSampling(temperature=0.0, top_k=0, top_p=1.0, generator=None), *rows(1)]
    tokens, logprobs = sample(logits, batch)
    assert tokens[1] == int(logits[1].argmax())
    torch.testing.assert_close(logprobs[0], float(torch.log_softmax(logits[0] / 0.5, -1)[tokens[0]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(logprobs[2], float(torch.log_softmax(logits[2], -1)[tokens[2]]), atol=1e-6, rtol=0)
