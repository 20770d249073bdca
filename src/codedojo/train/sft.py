"""Supervised fine-tuning on trajectories: the warm start before RL.

Same token layout, loss mask and packing as the RL trainer: each trajectory's kept token sequence is a
training sequence, and only the tokens the agent produced (loss mask 1) are learned. The loss of an
optimizer step is the mean negative logprob over that step's trainable tokens. The trajectories of a step
share their opening (system prompt and worked examples: a third of a small-profile demonstration), which
the packed forward can lay out once per micro-batch (`share_prefix`, exact like GRPO groups). The result is a Hugging
Face folder (`<out>/final`) that the RL trainer, `codedojo eval` and `codedojo serve` load, plus
metrics.jsonl / TensorBoard and the report page like a training run.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from rich.console import Console

from codedojo.precision import compute_dtype
from codedojo.progress import stage_progress
from codedojo.rl.packing import pack_groups
from codedojo.train.checkpoint import save_hf_folder
from codedojo.train.observability import MetricsLog
from codedojo.train.optim import OptimizerConfig, build_optimizer, build_scheduler
from codedojo.train.packed import MIN_SHARED_PREFIX
from codedojo.train.policy import Policy
from codedojo.trial.trajectory import Trajectory

if TYPE_CHECKING:
    from codedojo.inference.specs import ModelLike


@dataclass(frozen=True, kw_only=True)
class SFTConfig:
    epochs: int = 1
    """Passes over the trajectories."""
    lr: float = 5e-5
    """Peak learning rate."""
    lr_warmup_iters: int = 2
    """Optimizer steps of warm-up."""
    lr_decay_style: Literal["constant", "linear", "cosine"] = "cosine"
    """Schedule after warm-up: constant, linear or cosine."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    batch_sequences: int = 8
    """Trajectories per optimizer step."""
    max_tokens_per_gpu: int = 2048
    """Token budget of a micro-batch (activations of SmolLM2 take ~1.4 GB per 1000 tokens in fp32)."""
    log_probs_chunk_size: int = 256
    """Positions per chunk of the vocabulary projection."""
    clip_grad: float = 1.0
    """Gradient norm clip."""
    lora_rank: int = 0
    """LoRA rank (0: full fine-tuning)."""
    lora_alpha: float = 16.0
    """LoRA scale numerator."""
    seed: int = 0
    """Shuffling seed."""
    bf16: bool | None = None
    """Matmuls in bf16 over fp32 master weights; None: where the device computes bf16 natively."""
    share_prefix: bool = True
    """Lay out the token prefix a micro-batch's trajectories share once (the same loss and gradients up to
    float summation order). Demonstrations share their opening (system prompt and worked examples: 356 of
    the main job's mean 973 tokens); on a 2-core AVX2 CPU in fp32 that made SFT 1.11x faster at the
    default 2,048-token micro-batches (`bench/trainer.py` sft_share vs sft_new, docs/training.md)."""

    def optimizer(self, *, total_steps: int) -> OptimizerConfig:
        """AdamW and the schedule (the RL trainer's implementation): decay to 0 over the whole run."""
        return OptimizerConfig(lr=self.lr, min_lr=0.0, lr_decay_style=self.lr_decay_style,
                               lr_warmup_iters=self.lr_warmup_iters, lr_decay_iters=None, total_steps=total_steps,
                               weight_decay=self.weight_decay, adam_beta1=0.9, adam_beta2=0.98, adam_eps=1e-8)


def sft_loss(policy: Policy, sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], *,
             num_tokens: int, chunk_size: int, share_prefix: bool = False) -> torch.Tensor:
    """Sum of -logprob over trainable positions, divided by the step's trainable-token count; with
    `share_prefix` the sequences' common prefix is computed once (same value and gradients)."""
    groups = [0] * len(sequences) if share_prefix else None
    logprobs, _ = policy.logprobs(sequences, temperature=1.0, chunk_size=chunk_size, used=masks, groups=groups)
    lp_T = torch.cat(logprobs)
    mask_T = torch.tensor([m for mask in masks for m in mask], dtype=lp_T.dtype, device=lp_T.device)
    return -(lp_T * mask_T).sum() / max(num_tokens, 1)


def load_trajectories(paths: Sequence[Path], *, min_reward: float | None = None) -> list[Trajectory]:
    """Trajectory files from files or folders (*.json); with `min_reward`, only episodes whose training reward
    (the file's `reward`, written by the rollout) reached it."""
    found: list[Trajectory] = []
    for path in paths:
        files = sorted(Path(path).rglob("*.json")) if Path(path).is_dir() else [Path(path)]
        for f in files:
            try:
                data = json.loads(f.read_text())
                trajectory = Trajectory.from_dict(data)
            except (ValueError, KeyError, json.JSONDecodeError):
                continue
            reward = data.get("reward")
            if min_reward is not None and (reward is None or reward < min_reward):
                continue
            found.append(trajectory)
    return found


def run_sft(*, model: ModelLike, trajectories: Sequence[Trajectory], config: SFTConfig, out_dir: Path, device: str,
            console: Console | None = None) -> dict[str, Any]:
    """Fine-tune `model` on `trajectories`; writes out_dir/final and metrics; returns a summary."""
    from codedojo.inference.specs import resolve_model

    console = console or Console(stderr=True)
    usable = [t for t in trajectories if sum(t.loss_mask) > 0]
    if not usable:
        raise ValueError("no trajectory has any trainable token")
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    loaded = resolve_model(model).load(device=device, dtype=torch.float32)
    policy = Policy(loaded.hf_model(), lora_rank=config.lora_rank, lora_alpha=config.lora_alpha,
                    compute_dtype=compute_dtype(config.bf16, device))
    steps_per_epoch = -(-len(usable) // config.batch_sequences)
    total = steps_per_epoch * config.epochs
    optimizer_config = config.optimizer(total_steps=total)
    optimizer = build_optimizer(policy.trainable_parameters(), optimizer_config)
    scheduler = build_scheduler(optimizer, optimizer_config)
    metrics = MetricsLog(out_dir)
    rng = random.Random(config.seed)
    step = 0
    started = time.monotonic()
    tokens_seen = 0
    try:
        with stage_progress("sft", console=console, transient=True) as progress:
            bar = progress.add_task("sft", total=total, note="loss -")
            for _ in range(config.epochs):
                order = list(range(len(usable)))
                rng.shuffle(order)
                for start in range(0, len(order), config.batch_sequences):
                    batch = [usable[i] for i in order[start:start + config.batch_sequences]]
                    num_tokens = sum(sum(t.loss_mask[1:]) for t in batch)
                    t0 = time.monotonic()
                    loss_value = 0.0
                    keys = [0] * len(batch) if config.share_prefix else list(range(len(batch)))
                    for mb in pack_groups([t.token_ids for t in batch], keys, max_tokens=config.max_tokens_per_gpu,
                                          min_shared=MIN_SHARED_PREFIX):
                        micro = [batch[i] for i in mb.indices]
                        loss = sft_loss(policy, [t.token_ids for t in micro], [t.loss_mask[1:] for t in micro],
                                        num_tokens=num_tokens, chunk_size=config.log_probs_chunk_size,
                                        share_prefix=config.share_prefix)
                        loss.backward()
                        loss_value += float(loss.detach())
                    norm = torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), config.clip_grad)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                    seconds = time.monotonic() - t0
                    batch_tokens = sum(len(t.token_ids) for t in batch)
                    tokens_seen += batch_tokens
                    metrics.write(step, "train", {"sft/loss": loss_value, "sft/grad_norm": float(norm),
                                                  "sft/lr": scheduler.get_last_lr()[0],
                                                  "sft/trained_tokens": float(num_tokens),
                                                  "perf/train_tokens_per_sec": batch_tokens / max(seconds, 1e-9)})
                    step += 1
                    progress.update(bar, advance=1, note=f"loss {loss_value:.3f}")
        final = save_hf_folder(out_dir / "final", policy=policy, hf_config=loaded.hf_config,
                               tokenizer=loaded.tokenizer)
    finally:
        metrics.close()
    summary = {"final_model": str(final), "steps": step, "trajectories": len(usable),
               "tokens": tokens_seen, "seconds": round(time.monotonic() - started, 1)}
    (out_dir / "sft.json").write_text(json.dumps(summary, indent=2))
    return summary
