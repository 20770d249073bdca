"""The policy update's old logprobs: the first optimizer step takes them from its own forward pass (no
separate scoring pass), later steps from a pass before any step; either way the loss and gradients are
those of the textbook order (score everything, then train), which these tests compute by hand."""

from __future__ import annotations

import random

import pytest
import torch

from codedojo.config.recipe import Recipe
from codedojo.inference import TinyModel
from codedojo.rl.losses import clipped_policy_loss
from codedojo.train.plan import update_config_for
from codedojo.train.policy import Policy
from codedojo.train.samples import TrainSample
from codedojo.train.step import update


def _samples(num: int = 6, *, seed: int = 0) -> list[TrainSample]:
    rng = random.Random(seed)
    out = []
    for i in range(num):
        prompt = [rng.randrange(5, 250) for _ in range(rng.randint(20, 40))]
        reply = [rng.randrange(5, 250) for _ in range(rng.randint(5, 15))]
        ids = prompt + reply
        mask = [0] * (len(prompt) - 1) + [1] * len(reply)
        out.append(TrainSample(token_ids=ids, loss_mask=mask,
                               rollout_logprobs=[-rng.random() * m for m in mask],
                               advantage=(-1.0, 0.5, 1.0)[i % 3], group=i))
    return out


class _CountingPolicy(Policy):
    """A Policy that records which sequences each forward pass saw and whether it had gradients."""

    calls: list[tuple[bool, list[tuple[int, ...]]]]

    def logprobs(self, sequences, **kwargs):  # type: ignore[no-untyped-def,override]
        self.calls.append((torch.is_grad_enabled(), [tuple(s) for s in sequences]))
        return super().logprobs(sequences, **kwargs)


def _policy() -> _CountingPolicy:
    torch.manual_seed(0)
    policy = _CountingPolicy(TinyModel(seed=3).load().hf_model(), compute_dtype=torch.float32)
    policy.calls = []
    return policy


def _run(policy: Policy, samples: list[TrainSample], *, global_batch_size: int) -> dict[str, float]:
    config = update_config_for(Recipe(lr=1.0, global_batch_size=global_batch_size, max_tokens_per_gpu=4096,
                                      log_probs_chunk_size=32, num_rollout=1, clip_grad=0.0, use_tis=True))
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return update(policy, optimizer, scheduler, samples, config, rng=random.Random(0))


def test_one_optimizer_step_runs_no_scoring_pass_and_trains_as_the_textbook_order_would() -> None:
    samples = _samples()
    policy = _policy()
    reference = _policy()
    metrics = _run(policy, samples, global_batch_size=len(samples))
    assert all(grad for grad, _ in policy.calls), "a no-gradient scoring pass ran"
    # by hand: old logprobs from a separate pass, then the clipped loss, one SGD step of lr 1
    seqs = [s.token_ids for s in samples]
    used = [s.loss_mask for s in samples]
    with torch.no_grad():
        old, _ = reference.logprobs(seqs, temperature=1.0, chunk_size=32, used=used, groups=[s.group for s in samples])
    new, _ = reference.logprobs(seqs, temperature=1.0, chunk_size=32, used=used, groups=[s.group for s in samples])
    mask = torch.tensor([m for s in samples for m in s.loss_mask], dtype=torch.float32)
    adv = torch.cat([torch.full((len(s.loss_mask),), s.advantage) for s in samples])
    rollout = torch.tensor([x for s in samples for x in s.rollout_logprobs])
    tis = torch.clamp(torch.exp(torch.cat(old) - rollout), max=2.0)
    loss, _ = clipped_policy_loss(torch.cat(new), torch.cat(old), adv, mask, num_tokens=int(mask.sum()),
                                  eps_clip=0.2, eps_clip_high=0.2, tis_weights_T=tis)
    loss.backward()
    assert metrics["train/pg_loss"] == pytest.approx(float(loss.detach()), rel=1e-5, abs=1e-7)
    diffs = (old[i][mask_i.bool()] - torch.tensor(s.rollout_logprobs)[mask_i.bool()]
             for i, (s, mask_i) in enumerate((s, torch.tensor(s.loss_mask)) for s in samples))
    expected_mismatch = torch.cat(list(diffs)).abs().mean()
    assert metrics["train/train_rollout_logprob_abs_diff"] == pytest.approx(float(expected_mismatch), rel=1e-5)
    for (name, p), q in zip(policy.model.named_parameters(), reference.model.parameters(), strict=True):
        expected = q.detach() - (q.grad if q.grad is not None else 0.0)
        assert torch.allclose(p.detach(), expected, rtol=1e-5, atol=1e-6), name


def test_later_optimizer_steps_are_scored_before_the_first_step_moves_the_weights() -> None:
    samples = _samples()
    policy = _policy()
    _run(policy, samples, global_batch_size=3)
    scoring = [seqs for grad, seqs in policy.calls if not grad]
    training = [seqs for grad, seqs in policy.calls if grad]
    assert len(scoring) >= 1 and policy.calls[0][0] is False, "the scoring pass must come before any step"
    scored = {s for seqs in scoring for s in seqs}
    trained_first = set(training[0])
    everything = {tuple(s.token_ids) for s in samples}
    assert scored == everything - trained_first
    assert len(scored) == 3


def test_the_entropy_over_trained_tokens_is_reported_without_an_entropy_term_and_leaves_the_loss_alone() -> None:
    samples = _samples()
    samples[1] = TrainSample(token_ids=samples[1].token_ids, loss_mask=samples[1].loss_mask,
                             rollout_logprobs=samples[1].rollout_logprobs, advantage=0.0, group=1)
    policy, reference = _policy(), _policy()
    metrics = _run(policy, samples, global_batch_size=len(samples))
    trained = [s for s in samples if s.advantage != 0.0]
    with torch.no_grad():
        logits = [reference.model(torch.tensor([s.token_ids])).logits[0, :-1] for s in trained]
    entropies = [-(torch.log_softmax(lg, -1).exp() * torch.log_softmax(lg, -1)).sum(-1) for lg in logits]
    mask = torch.cat([torch.tensor(s.loss_mask, dtype=torch.bool) for s in trained])
    expected = torch.cat(entropies)[mask].mean()  # over the trained tokens only, not the skipped sample's
    assert metrics["train/entropy"] == pytest.approx(float(expected), rel=1e-4)
    assert metrics["train/loss"] == pytest.approx(metrics["train/pg_loss"], rel=1e-6)  # not a term of the loss
