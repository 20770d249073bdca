"""One policy update from a batch of samples: old logprobs, then clipped-loss optimizer steps.

Order of work (slime's, less one pass):
1. the samples are shuffled and split into optimizer steps of `global_batch_size` samples;
2. old logprobs under the current weights, without gradients, in token-budget micro-batches, of the
   samples of the second and later optimizer steps only (and reference logprobs of every sample when a KL
   loss is on). The first optimizer step's samples need no such pass: until it steps, the weights are
   the ones the old logprobs would be computed with, so its own forward pass gives them (detached: the
   ratio is exactly 1 with the gradient of the logprob, as a separate pass would give up to float
   summation order). With one optimizer step per rollout, the usual case, that saves a forward pass over
   the whole batch. The old logprobs' gap to the sampler's is the train/inference mismatch, logged every
   step, and with TIS they weight the loss;
3. each optimizer step packs its samples into micro-batches of at most `max_tokens_per_gpu` tokens,
   accumulates the gradients of the clipped policy loss (plus KL and entropy terms) normalised by the
   step's trainable-token count, clips the gradient norm and steps AdamW and the schedule.

Everything the update reads is in `UpdateConfig`, built once from the recipe by the trainer
(train.plan.update_config_for); this module does not know the recipe.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from codedojo.rl.losses import clipped_policy_loss, kl_divergence, masked_token_sum, truncated_importance_weights
from codedojo.rl.packing import pack_groups
from codedojo.train.optim import OptimizerConfig
from codedojo.train.packed import MIN_SHARED_PREFIX
from codedojo.train.policy import Policy
from codedojo.train.samples import TrainSample


@dataclass(frozen=True, kw_only=True)
class UpdateConfig:
    """The settings of one policy update and of its optimizer."""

    optimizer: OptimizerConfig
    """AdamW and the schedule (train.optim)."""
    global_batch_size: int
    """Samples per optimizer step."""
    max_tokens_per_gpu: int
    """Token budget of a micro-batch."""
    log_probs_chunk_size: int
    """Positions per chunk of the vocabulary projection."""
    temperature: float
    """The sampling temperature, at which the trainer's logprobs are computed (to compare with the sampler's)."""
    eps_clip: float
    """Lower clip of the policy ratio."""
    eps_clip_high: float
    """Upper clip of the policy ratio (equal to eps_clip unless clip-higher)."""
    clip_grad: float
    """Gradient norm clip (0: off)."""
    use_kl: bool
    """A KL term against the frozen reference policy (needs kl_loss_coef != 0)."""
    kl_loss_coef: float
    """Weight of the KL term."""
    kl_loss_type: Literal["k1", "k2", "k3"]
    """KL estimator."""
    entropy_coef: float
    """Weight of the entropy bonus (0: off)."""
    use_tis: bool
    """Truncated importance sampling between sampler and trainer logprobs."""
    tis_clip: float
    """TIS weight cap."""


@dataclass(frozen=True)
class _Prepared:
    sample: TrainSample
    old: torch.Tensor | None
    """Old logprobs; None in the first optimizer step, whose own forward pass gives them."""
    ref: torch.Tensor | None


def _micro_batches(samples: Sequence[TrainSample], budget: int) -> list[list[int]]:
    """Token-budget micro-batches that keep a GRPO group's members together (their prefix is shared)."""
    return [list(mb.indices) for mb in pack_groups([s.token_ids for s in samples], [s.group for s in samples],
                                                   max_tokens=budget, min_shared=MIN_SHARED_PREFIX)]


@torch.no_grad()
def _score(policy: Policy, samples: Sequence[TrainSample], config: UpdateConfig, *, reference: bool
           ) -> list[torch.Tensor]:
    out: list[torch.Tensor | None] = [None] * len(samples)
    for indices in _micro_batches(samples, config.max_tokens_per_gpu):
        seqs = [samples[i].token_ids for i in indices]
        # only the trainable positions' logprobs are read (loss, TIS, mismatch); the others come back 0
        used = [samples[i].loss_mask for i in indices]
        groups = [samples[i].group for i in indices]
        if reference:
            lps = policy.reference_logprobs(seqs, temperature=config.temperature,
                                            chunk_size=config.log_probs_chunk_size, used=used, groups=groups)
        else:
            lps, _ = policy.logprobs(seqs, temperature=config.temperature,
                                     chunk_size=config.log_probs_chunk_size, used=used, groups=groups)
        for i, lp in zip(indices, lps, strict=True):
            out[i] = lp.detach()
    return [t for t in out if t is not None]


@dataclass
class _Plan:
    """What an update trains on and with which old logprobs, before its first optimizer step."""

    order: list[int]
    """Sample indices in the shuffled order the optimizer steps take them, `global_batch_size` at a time."""
    active: dict[int, _Prepared]
    """The samples run through the model (advantage != 0, or every one with a KL or entropy term)."""
    old: dict[int, torch.Tensor]
    """Old logprobs known so far (the samples trained after the weights have moved); the first optimizer
    step's own forward pass adds the rest."""
    mismatch: dict[int, TrainSample]
    """The samples whose old logprobs the train/sampler mismatch is measured on."""


def update(policy: Policy, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
           samples: Sequence[TrainSample], config: UpdateConfig, *, rng: random.Random) -> dict[str, float]:
    """Train on `samples`; returns the step's metrics."""
    started = time.monotonic()
    if not samples:
        return {"train/samples": 0.0}
    plan = _plan(policy, samples, config, rng=rng)
    totals, grad_norms, trained_tokens = _optimizer_steps(policy, optimizer, scheduler, samples, plan, config)
    metrics = _mismatch([(s, plan.old[i]) for i, s in plan.mismatch.items()])
    metrics["train/skipped_zero_advantage"] = float(len(samples) - len(plan.active))
    steps = max(1, len(grad_norms))
    seconds = time.monotonic() - started
    metrics.update({f"train/{k}": v / steps for k, v in totals.items()})
    metrics.setdefault("train/loss", 0.0)  # every advantage 0 and no KL/entropy term: the loss is exactly 0
    tokens = sum(len(p.sample.token_ids) for p in plan.active.values())
    metrics.update({
        "train/grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else 0.0,
        "train/lr": float(scheduler.get_last_lr()[0]),
        "train/optimizer_steps": float(len(grad_norms)), "train/samples": float(len(samples)),
        "train/trained_tokens": float(trained_tokens), "train/tokens": float(tokens),
        "perf/train_seconds": seconds, "perf/train_tokens_per_sec": tokens / max(seconds, 1e-9),
    })
    return metrics


def _plan(policy: Policy, samples: Sequence[TrainSample], config: UpdateConfig, *, rng: random.Random) -> _Plan:
    # A sample with advantage 0 adds nothing to the policy-gradient term, so unless a KL or entropy term
    # needs it, it is not run through the model at all (it still counts in the token normaliser, so the
    # loss is exactly the same as if it had been).
    needs_all = config.use_kl or config.entropy_coef != 0.0
    active = [i for i, s in enumerate(samples) if needs_all or s.advantage != 0.0]
    order = list(range(len(samples)))
    rng.shuffle(order)
    first_step = set(order[:config.global_batch_size])
    stale = [i for i in active if i not in first_step]  # trained after the weights have moved
    old = dict(zip(stale, _score(policy, [samples[i] for i in stale], config, reference=False), strict=True))
    ref: dict[int, torch.Tensor] = {}
    if config.use_kl:
        ref = dict(zip(active, _score(policy, [samples[i] for i in active], config, reference=True), strict=True))
    prepared = {i: _Prepared(samples[i], old.get(i), ref.get(i)) for i in active}
    if not active:  # nothing trains; score a couple of samples so the mismatch is still measured
        probe = list(samples[:2])
        return _Plan(order=order, active=prepared, old=dict(enumerate(_score(policy, probe, config, reference=False))),
                     mismatch=dict(enumerate(probe)))
    return _Plan(order=order, active=prepared, old=old, mismatch={i: samples[i] for i in active})


def _optimizer_steps(policy: Policy, optimizer: torch.optim.Optimizer,
                     scheduler: torch.optim.lr_scheduler.LRScheduler, samples: Sequence[TrainSample], plan: _Plan,
                     config: UpdateConfig) -> tuple[dict[str, float], list[float], int]:
    """One optimizer step per `global_batch_size` samples of `plan.order`: the summed loss terms, each step's
    gradient norm and the trainable tokens trained on. Fills `plan.old` with the first step's logprobs."""
    totals: dict[str, float] = {}
    grad_norms: list[float] = []
    trained_tokens = 0
    size = config.global_batch_size
    for start in range(0, len(plan.order), size):
        group = plan.order[start:start + size]
        num_tokens = sum(samples[i].num_trainable for i in group)
        step_indices = [i for i in group if i in plan.active]
        step_items = [plan.active[i] for i in step_indices]
        active_tokens = sum(p.sample.num_trainable for p in step_items)
        trained_tokens += active_tokens
        if not step_items:  # nothing to learn from in this optimizer step; keep the schedule in time
            with warnings.catch_warnings():  # stepping the schedule without an optimizer step is deliberate
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
                scheduler.step()
            continue
        for indices in _micro_batches([p.sample for p in step_items], config.max_tokens_per_gpu):
            micro = [step_items[i] for i in indices]
            parts, current = _micro_loss(policy, micro, config, num_tokens=num_tokens, active_tokens=active_tokens)
            for i, lp in zip(indices, current, strict=True):
                plan.old.setdefault(step_indices[i], lp)
            parts["loss"].backward()
            # loss terms are already normalised by the step's token count, so micro-batches simply add up;
            # the clip fraction is a per-token rate, weighted by the micro-batch's share of tokens
            share = sum(p.sample.num_trainable for p in micro) / max(num_tokens, 1)
            for key, value in parts.items():
                weight = share if key == "clip_frac" else 1.0
                totals[key] = totals.get(key, 0.0) + float(value.detach()) * weight
        params = policy.trainable_parameters()
        if config.clip_grad > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, config.clip_grad)
        else:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
        grad_norms.append(float(norm))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return totals, grad_norms, trained_tokens


def _micro_loss(policy: Policy, micro: list[_Prepared], config: UpdateConfig, *, num_tokens: int,
                active_tokens: int) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """The micro-batch's loss terms, and each sample's current logprobs (detached), which are the old
    logprobs of a sample without any (`_Prepared.old` None). `entropy` is always there: the mean entropy of
    the policy over the optimizer step's trained tokens (`active_tokens`), a term of the loss only with an
    entropy coefficient (it comes from the same pass through the head as the logprobs)."""
    device = policy.device
    want_entropy = config.entropy_coef != 0.0
    lps, ents = policy.logprobs([p.sample.token_ids for p in micro], temperature=config.temperature,
                                chunk_size=config.log_probs_chunk_size, with_entropy=True,
                                used=[p.sample.loss_mask for p in micro], groups=[p.sample.group for p in micro])
    logprobs_T = torch.cat(lps)
    current = [lp.detach() for lp in lps]
    old_T = torch.cat([c if p.old is None else p.old.to(device) for p, c in zip(micro, current, strict=True)])
    mask_T = torch.tensor([m for p in micro for m in p.sample.loss_mask], dtype=logprobs_T.dtype, device=device)
    adv_T = torch.cat([torch.full((len(p.sample.loss_mask),), p.sample.advantage, device=device) for p in micro])
    tis = None
    if config.use_tis:
        rollout_T = torch.tensor([x for p in micro for x in p.sample.rollout_logprobs], dtype=old_T.dtype,
                                 device=device)
        tis = truncated_importance_weights(old_T, rollout_T, cap=config.tis_clip)
    pg, pg_metrics = clipped_policy_loss(logprobs_T, old_T, adv_T, mask_T, num_tokens=num_tokens,
                                         eps_clip=config.eps_clip, eps_clip_high=config.eps_clip_high,
                                         tis_weights_T=tis)
    loss = pg
    parts = {"pg_loss": pg.detach(), "clip_frac": torch.tensor(pg_metrics["clip_frac"])}
    if config.use_kl:
        ref_T = torch.cat([p.ref for p in micro if p.ref is not None]).to(device)
        kl = masked_token_sum(kl_divergence(logprobs_T, ref_T, estimator=config.kl_loss_type), mask_T,
                              num_tokens=num_tokens)
        loss = loss + config.kl_loss_coef * kl
        parts["kl"] = kl.detach()
    assert ents is not None
    entropy_T = torch.cat(ents)
    if want_entropy:
        loss = loss - config.entropy_coef * masked_token_sum(entropy_T, mask_T, num_tokens=num_tokens)
    parts["entropy"] = masked_token_sum(entropy_T.detach(), mask_T, num_tokens=active_tokens)
    parts["loss"] = loss
    return parts, current


def _mismatch(scored: Sequence[tuple[TrainSample, torch.Tensor]]) -> dict[str, float]:
    """Trainer (old) vs sampler logprobs on trainable tokens: |difference| and a KL(sampler || trainer)
    estimate."""
    diffs, kls = [], []
    for sample, old_lp in scored:
        mask = torch.tensor(sample.loss_mask, dtype=torch.bool)
        if not mask.any():
            continue
        old = old_lp.cpu()[mask]
        rollout = torch.tensor(sample.rollout_logprobs)[mask]
        diffs.append((old - rollout).abs())
        kls.append(kl_divergence(rollout, old, estimator="k3"))
    if not diffs:
        return {}
    d, k = torch.cat(diffs), torch.cat(kls)
    return {"train/train_rollout_logprob_abs_diff": float(d.mean()),
            "train/train_rollout_logprob_abs_diff_max": float(d.max()),
            "train/train_rollout_kl": float(k.mean())}
