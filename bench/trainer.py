"""Training-step throughput: codedojo's packed step vs a padded Hugging Face batch, in the same run.

    .venv/bin/python bench/trainer.py [--sequences 8] [--repeat 2]

Both sides train the same SmolLM2-135M-shaped model (random init; fp32; same seed) on the same episode
sequences (lengths drawn from the spread of real agent episodes: 700-1900 tokens, ~15% of tokens
trainable) with the same loss (mean negative logprob of trainable tokens), backward and AdamW step:

  packed    codedojo.train.packed: token-budget micro-batches, attention within each sequence only,
            logprobs in chunks;
  padded    the HF model over right-padded micro-batches of 2 sequences with an attention mask, full
            logits, the usual way to train on ragged episodes with transformers.

Prints JSON with useful (non-padding) tokens per second of each, the ratio, and the padding share.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import torch

from codedojo.rl.packing import pack
from codedojo.train.packed import packed_token_logprobs

SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100000.0)


def build_model(seed: int) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    config = LlamaConfig(**SMOLLM2_SHAPE, architectures=["LlamaForCausalLM"], attn_implementation="sdpa")
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()


def workload(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(700, 1900)
        ids = [rng.randrange(10, 49000) for _ in range(length)]
        mask = [1 if rng.random() < 0.15 else 0 for _ in range(length - 1)]
        out.append((ids, mask))
    return out


def packed_step(model: torch.nn.Module, opt: torch.optim.Optimizer, data: list[tuple[list[int], list[int]]],
                budget: int) -> None:
    num_tokens = sum(sum(m) for _, m in data)
    for mb in pack([len(ids) for ids, _ in data], max_tokens=budget):
        seqs = [data[i][0] for i in mb.indices]
        masks = [data[i][1] for i in mb.indices]
        lps, _ = packed_token_logprobs(model, seqs, chunk_size=256)
        mask = torch.tensor([x for m in masks for x in m], dtype=torch.float32)
        (-(torch.cat(lps) * mask).sum() / num_tokens).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def padded_step(model: torch.nn.Module, opt: torch.optim.Optimizer, data: list[tuple[list[int], list[int]]],
                micro: int) -> int:
    num_tokens = sum(sum(m) for _, m in data)
    padded_total = 0
    for start in range(0, len(data), micro):
        group = data[start:start + micro]
        width = max(len(ids) for ids, _ in group)
        padded_total += width * len(group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        attention = torch.zeros(len(group), width, dtype=torch.long)
        loss_mask = torch.zeros(len(group), width - 1)
        for row, (seq, mask) in enumerate(group):
            ids[row, : len(seq)] = torch.tensor(seq)
            attention[row, : len(seq)] = 1
            loss_mask[row, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        (-(logprobs * loss_mask).sum() / num_tokens).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return padded_total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2, help="timed steps per side, alternating (fastest kept)")
    parser.add_argument("--budget", type=int, default=4096, help="packed micro-batch token budget")
    args = parser.parse_args()
    data = workload(args.sequences, seed=0)
    useful = sum(len(ids) for ids, _ in data)
    models = {name: build_model(seed=1) for name in ("packed", "padded")}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-6) for name, m in models.items()}
    best = {"packed": float("inf"), "padded": float("inf")}
    padded_tokens = 0
    for _ in range(args.repeat):
        for name in ("packed", "padded"):
            t0 = time.perf_counter()
            if name == "packed":
                packed_step(models[name], opts[name], data, args.budget)
            else:
                padded_tokens = padded_step(models[name], opts[name], data, micro=2)
            best[name] = min(best[name], time.perf_counter() - t0)
    result = {
        "bench": "trainer", "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "sequences": len(data), "useful_tokens": useful,
        "packed_tokens_per_sec": round(useful / best["packed"], 1),
        "padded_hf_tokens_per_sec": round(useful / best["padded"], 1),
        "ratio": round(best["padded"] / best["packed"], 3),
        "padding_share_of_padded_batch": round(1 - useful / max(padded_tokens, 1), 3),
        "seconds": {k: round(v, 2) for k, v in best.items()},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
