"""How far a reduced-precision copy of the vocabulary head moves the logprobs, on a real model's hidden states:

    .venv/bin/python bench/head_precision.py [--model smollm2-135m-instruct]

The engine's one-token bf16 steps multiply an fp16 copy of the head (`EngineOptions.half_head`). This
runs the Hugging Face model over a short code prompt, takes its final hidden states, and compares the
log-softmax of the fp32 head with that of an fp16 and a bf16 copy (inputs rounded to the copy's dtype,
torch's matrix-vector kernel with oneDNN off, as the engine runs it). Per position: the gap at the fp32
argmax, and the expected gap under the fp32 distribution (sum over the vocabulary of p * |gap|). Prints JSON.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from codedojo.inference import resolve_model, transformer

PROMPT = ("def add(a, b):\n    return a + b\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n"
          "# the test fails: add returns a - b. Run pytest, then fix the line with sed.\n")


def main(args: argparse.Namespace) -> dict[str, object]:
    loaded = resolve_model(args.model).load(device="cpu", dtype=torch.float32)
    hf = loaded.hf_model()
    ids = loaded.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        hidden = hf.model(ids).last_hidden_state[0]
        weight = hf.lm_head.weight.detach()
        reference = torch.log_softmax(hidden @ weight.t(), dim=-1)
        out: dict[str, object] = {"model": args.model, "positions": int(ids.shape[1]),
                                  "hidden_absmax": round(float(hidden.abs().max()), 2),
                                  "logit_absmax": round(float((hidden @ weight.t()).abs().max()), 2)}
        p = reference.exp()
        top = reference.argmax(dim=-1, keepdim=True)
        for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            with transformer.onednn_off():
                logprobs = torch.log_softmax(F.linear(hidden.to(dtype), weight.to(dtype)).float(), dim=-1)
            gap = (logprobs - reference).abs()
            expected = (gap * p).sum(dim=-1)
            out[name] = {"argmax_gap_max": round(float(gap.gather(1, top).max()), 5),
                         "expected_gap_mean": round(float(expected.mean()), 5),
                         "expected_gap_max": round(float(expected.max()), 5),
                         "argmax_unchanged": round(float((logprobs.argmax(-1) == top[:, 0]).float().mean()), 3)}
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    print(json.dumps(main(parser.parse_args()), indent=2))
