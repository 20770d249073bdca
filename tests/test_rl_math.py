"""The RL math against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from codedojo.rl.advantages import group_advantages, is_uniform
from codedojo.rl.losses import clipped_policy_loss, kl_divergence, truncated_importance_weights
from codedojo.rl.packing import MicroBatch, pack


def test_grpo_advantages_by_hand() -> None:
    # mean 0.5, unbiased std sqrt(1/3) = 0.57735 -> +-0.5 / 0.57735 = +-0.86603
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == pytest.approx([0.86603, -0.86603, -0.86603, 0.86603], abs=1e-4)


def test_invalid_members_are_left_out_of_the_group_statistics() -> None:
    # valid [1, 0, 0]: mean 1/3, std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    adv = group_advantages([1.0, None, 0.0, 0.0])
    s = math.sqrt(1 / 3)
    assert adv == pytest.approx([(2 / 3) / s, 0.0, -(1 / 3) / s, -(1 / 3) / s], abs=1e-5)
    assert group_advantages([1.0, None, None]) == [0.0, 0.0, 0.0]
    assert group_advantages([None, None]) == [0.0, 0.0]


def test_dr_grpo_drops_the_std_division() -> None:
    assert group_advantages([1.0, None, 0.0, 0.0], normalize_std=False) == pytest.approx([2 / 3, 0.0, -1 / 3, -1 / 3])


def test_uniform_groups_give_zero_advantage() -> None:
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert is_uniform([0.0, 0.0, None]) and is_uniform([1.0]) and not is_uniform([0.0, 1.0, None])


def test_clipped_loss_at_both_bounds() -> None:
    # eps 0.2 low, 0.28 high.
    #   A=+1 r=1.5 -> max(-1.5, -1.28) = -1.28 (clipped high)
    #   A=-1 r=0.5 -> max(0.5, 0.8)    =  0.80 (clipped low)
    #   A=+1 r=0.9 -> max(-0.9, -0.9)  = -0.90 (inside)
    #   A=-1 r=1.5 -> max(1.5, 1.28)   =  1.50 (pessimistic, unclipped)
    ratios = torch.tensor([1.5, 0.5, 0.9, 1.5])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    old = torch.zeros(4)
    loss, metrics = clipped_policy_loss(torch.log(ratios), old, adv, torch.ones(4), num_tokens=4,
                                        eps_clip=0.2, eps_clip_high=0.28)
    assert float(loss) == pytest.approx((-1.28 + 0.8 - 0.9 + 1.5) / 4, abs=1e-6)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    # symmetric bounds (eps_clip_high None): the first token clips at 1.2 instead
    loss, _ = clipped_policy_loss(torch.log(ratios), old, adv, torch.ones(4), num_tokens=4, eps_clip=0.2)
    assert float(loss) == pytest.approx((-1.2 + 0.8 - 0.9 + 1.5) / 4, abs=1e-6)


def test_masked_tokens_do_not_count_and_the_normaliser_is_global() -> None:
    lp = torch.log(torch.tensor([1.5, 0.5]))
    loss, _ = clipped_policy_loss(lp, torch.zeros(2), torch.tensor([1.0, -1.0]), torch.tensor([1.0, 0.0]),
                                  num_tokens=10, eps_clip=0.2, eps_clip_high=0.28)
    assert float(loss) == pytest.approx(-1.28 / 10, abs=1e-6)


def test_gradient_accumulation_one_by_eight_equals_eight_by_one() -> None:
    torch.manual_seed(0)
    logits = torch.randn(8, requires_grad=True)
    old = torch.randn(8) * 0.1
    adv = torch.randn(8)
    mask = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1.0])
    n = int(mask.sum())
    loss, _ = clipped_policy_loss(logits, old, adv, mask, num_tokens=n, eps_clip_high=0.28)
    loss.backward()
    whole = logits.grad.clone()
    logits.grad = None
    total = torch.zeros(())
    for i in range(8):
        part, _ = clipped_policy_loss(logits[i:i + 1], old[i:i + 1], adv[i:i + 1], mask[i:i + 1], num_tokens=n,
                                      eps_clip_high=0.28)
        part.backward()
        total += part.detach()
    assert torch.allclose(logits.grad, whole, atol=1e-7)
    assert float(total) == pytest.approx(float(loss.detach()), abs=1e-6)


def test_kl_estimators_by_hand() -> None:
    lp, ref = torch.tensor([0.0, -1.0]), torch.tensor([-0.5, -1.0])  # log r = 0.5, 0
    assert kl_divergence(lp, ref, estimator="k1").tolist() == pytest.approx([0.5, 0.0])
    assert kl_divergence(lp, ref, estimator="k2").tolist() == pytest.approx([0.125, 0.0])
    assert kl_divergence(lp, ref, estimator="k3").tolist() == pytest.approx([math.exp(-0.5) - 0.5, 0.0])
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        kl_divergence(lp, ref, estimator="k4")  # type: ignore[arg-type]


def test_truncated_importance_weights_cap() -> None:
    old = torch.log(torch.tensor([0.5, 0.9, 0.9]))
    rollout = torch.log(torch.tensor([0.5, 0.3, 0.9 / 1.5]))
    assert truncated_importance_weights(old, rollout, cap=2.0).tolist() == pytest.approx([1.0, 2.0, 1.5])


def test_packing_by_hand() -> None:
    # first fit, longest first: 5 | 3 3 | 2, then 1 joins the 5
    assert pack([5, 3, 3, 2, 1], max_tokens=6) == [MicroBatch((0, 4), 6), MicroBatch((1, 2), 6), MicroBatch((3,), 2)]
    assert pack([9, 1], max_tokens=4) == [MicroBatch((0,), 9), MicroBatch((1,), 1)]
    with pytest.raises(ValueError):
        pack([0], max_tokens=4)


def test_group_packing_by_hand() -> None:
    from codedojo.rl.packing import common_prefix_length, pack_groups, shared_size

    p = list(range(10, 20))  # a 10-token opening shared by group "a"
    seqs = [[*p, 1, 2], [*p, 3], [*p, 4, 5, 6], [7] * 8, [8] * 5]
    assert common_prefix_length([seqs[0], seqs[1], seqs[2]]) == 10
    assert common_prefix_length([[1, 2], [1, 2, 3]]) == 2
    # the prefix counts once: 10 + 2 + 1 + 3
    assert shared_size(seqs[:3], min_shared=4) == 16
    assert shared_size(seqs[:3], min_shared=11) == 12 + 11 + 13  # too short to share: plain lengths
    # group a (16 laid-out tokens) fits a budget of 16 as one unit; b's two plain sequences fill the next bin
    mbs = pack_groups(seqs, ["a", "a", "a", "b", "b"], max_tokens=16, min_shared=4)
    assert mbs == [MicroBatch((0, 1, 2), 16), MicroBatch((3, 4), 13)]
    # a budget of 14 cuts group a into runs: [0, 1] (10 + 2 + 1 = 13) and [2] (13)
    mbs = pack_groups(seqs, ["a", "a", "a", "b", "b"], max_tokens=14, min_shared=4)
    assert sorted(mb.indices for mb in mbs) == [(0, 1), (2,), (3, 4)]
    assert all(mb.num_tokens <= 14 for mb in mbs)
