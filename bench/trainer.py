"""Training-step throughput: each of codedojo's savings alone and together, against today's step and
against Hugging Face over padded pairs, all in one run.

    .venv/bin/python bench/trainer.py [--groups 2 --group-size 4] [--repeat 2] [--only a,b] [--isolate]
                                      [--flops-only]

Every configuration trains the same SmolLM2-135M-shaped model (random init, same seed, fp32 master weights)
on the same episode-like sequences with the same loss (mean negative logprob of trainable tokens,
normalised by their count), backward and AdamW step. The RL workload is GRPO groups: each group's members
share an opening (system prompt, task, first observation: 500-700 tokens) and then differ (600-1300 tokens
each, a fifth of them the agent's own, trainable); the SFT workload is demonstrations of 600-1800 tokens
that all open with the same 356 tokens (the system prompt and worked examples: the main job's 32
demonstrations share their first 356 tokens, 37% of their mean length of 973) and are 12% trainable
after it.

  today       codedojo's packed step as it was at d75edee (src/codedojo/train/packed.py of that commit, read
              with `git show` when the bench runs): fp32, vocabulary head at every position, HF's RMSNorm and
              RoPE modules, no sharing
  kernels     today's step on the current forward (torch's fused RMSNorm, a one-roll RoPE), nothing else
  head        kernels + the head and log-softmax only at trainable positions
  bf16        kernels + bf16 matmuls (autocast over fp32 weights; the head stays fp32)
  share       kernels + one shared prefix per GRPO group
  all         all of them, in the default precision (bf16 where the CPU or GPU computes it natively,
              fp32 elsewhere: codedojo.precision), as training runs
  hf_fp32     the HF model over right-padded micro-batches of 2 with an attention mask, full logits
  hf_bf16     the same under bf16 autocast
  sft_today / sft_new   the SFT step before (legacy forward, fp32, every position) and after
              (codedojo.train.sft.sft_loss: current forward, trainable positions only, default precision)
  sft_share   sft_new with the demonstrations' common opening laid out once per micro-batch
              (SFTConfig.share_prefix, on by default) in micro-batches of --sft-share-budget tokens

Where the CPU has no native bf16 (no AVX-512 BF16 or AMX), bf16 is emulated at a small fraction of the
fp32 rate (docs/results/bf16-probe-avx2.json, `matmul_gflops`), so `bf16` and `hf_bf16` are left out unless
named with --only; so are `today` and `sft_today` where git cannot show d75edee (a shallow clone, a copy
without .git). The JSON lists what was left out and why.

`step_tflop` (also alone with --flops-only) counts the arithmetic of the `all` and `sft_new` steps as they lay
their micro-batches out: a floor on their time at the machine's matmul rate.

Each configuration runs `--repeat` consecutive steps on a model of its own and keeps the fastest (one
model and its optimizer state live at a time); with `--isolate`, each in a fresh process of its own, one
after another. Run it alone on the machine. Prints JSON: tokens/s of
each, ratios named `<this>_vs_<that>`, the CPU's bf16 capability, threads and load averages.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import random
import resource
import subprocess
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from codedojo.precision import capability, compute_dtype, compute_precision, native_bf16
from codedojo.rl.packing import pack, pack_groups
from codedojo.train.packed import MIN_SHARED_PREFIX, layout
from codedojo.train.policy import Policy
from codedojo.train.sft import SFTConfig, sft_loss

SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100000.0)


@dataclass(frozen=True)
class Seq:
    ids: list[int]
    mask: list[int]
    """Per predicted position (len(ids) - 1): 1 where the token is trainable."""
    group: int


def build_model(seed: int, shape: dict | None = None, *, device: str = "cpu") -> torch.nn.Module:
    """A random-init model of `shape` (a Llama or, with "model_type": "qwen3", a Qwen3 config), fp32."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    torch.manual_seed(seed)
    shape = dict(shape or SMOLLM2_SHAPE)
    if shape.pop("model_type", "llama") == "qwen3":
        config = Qwen3Config(**shape, architectures=["Qwen3ForCausalLM"], attn_implementation="sdpa")
    else:
        config = LlamaConfig(**shape, architectures=["LlamaForCausalLM"], attn_implementation="sdpa")
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()


def rl_workload(*, groups: int, group_size: int, seed: int, scale: float = 1.0, vocab: int = 49000) -> list[Seq]:
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        opening = [rng.randrange(10, vocab) for _ in range(int(rng.randint(500, 700) * scale))]
        for _ in range(group_size):
            rest = [rng.randrange(10, vocab) for _ in range(int(rng.randint(600, 1300) * scale))]
            mask = [0] * (len(opening) - 1) + [1 if rng.random() < 0.2 else 0 for _ in range(len(rest))]
            out.append(Seq(opening + rest, mask, g))
    return out


SFT_OPENING = 356
"""Tokens every demonstration of the main job opens with (system prompt and worked examples), measured on
its 32 cached demonstrations (mean length 973)."""


def sft_workload(*, n: int, seed: int, scale: float = 1.0, vocab: int = 49000, opening: int = SFT_OPENING
                 ) -> list[Seq]:
    rng = random.Random(seed)
    common = [rng.randrange(10, vocab) for _ in range(int(opening * scale))]
    out = []
    for i in range(n):
        length = max(int(rng.randint(600, 1800) * scale), len(common) + 2)
        ids = common + [rng.randrange(10, vocab) for _ in range(length - len(common))]
        mask = [0] * (len(common) - 1) + [1 if rng.random() < 0.12 else 0 for _ in range(length - len(common))]
        out.append(Seq(ids, mask, i))
    return out


LEGACY_COMMIT = "d75edeec965d5c8829f0ca33858691114cb4bd05"
LEGACY_FILE = "src/codedojo/train/packed.py"
LEGACY = ("today", "sft_today")
"""Configurations on the trainer's packed forward as it was at LEGACY_COMMIT (2026-11-30)."""


class LegacyUnavailable(RuntimeError):
    """git cannot show LEGACY_FILE at LEGACY_COMMIT here."""


@functools.cache
def _legacy() -> Any:
    """LEGACY_FILE as it was at LEGACY_COMMIT, read with `git show` from this checkout and run as a module of its
    own (it imports nothing of codedojo's). Raises LegacyUnavailable where the commit is not in the history."""
    root = Path(__file__).resolve().parents[1]
    try:
        shown = subprocess.run(["git", "-C", str(root), "show", f"{LEGACY_COMMIT}:{LEGACY_FILE}"],
                               capture_output=True, text=True)
    except OSError as error:
        raise LegacyUnavailable(f"no git to read {LEGACY_FILE} at {LEGACY_COMMIT[:7]}: {error}") from error
    if shown.returncode != 0:
        raise LegacyUnavailable(f"git show {LEGACY_COMMIT[:7]}:{LEGACY_FILE} failed ({shown.stderr.strip()}); the "
                                "`today` baselines need that commit in this clone's history (git fetch --unshallow)")
    module = types.ModuleType("bench_legacy_packed")
    exec(compile(shown.stdout, f"{LEGACY_COMMIT[:7]}:{LEGACY_FILE}", "exec"), module.__dict__)
    return module


def legacy_step(model: torch.nn.Module, opt: torch.optim.Optimizer, data: list[Seq], *, budget: int) -> None:
    """Today's step: the d75edee forward, fp32, logprobs at every position, masked afterwards."""
    num_tokens = sum(sum(s.mask) for s in data)
    device = next(model.parameters()).device
    for mb in pack([len(s.ids) for s in data], max_tokens=budget):
        micro = [data[i] for i in mb.indices]
        lps, _ = _legacy().packed_token_logprobs(model, [s.ids for s in micro], chunk_size=256)
        mask_T = torch.tensor([x for s in micro for x in s.mask], dtype=torch.float32, device=device)
        (-(torch.cat(lps) * mask_T).sum() / max(num_tokens, 1)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def codedojo_step(policy: Policy, opt: torch.optim.Optimizer, data: list[Seq], *, budget: int, used: bool,
                  share: bool) -> None:
    num_tokens = sum(sum(s.mask) for s in data)
    if share:
        mbs = pack_groups([s.ids for s in data], [s.group for s in data], max_tokens=budget,
                          min_shared=MIN_SHARED_PREFIX)
    else:
        mbs = pack([len(s.ids) for s in data], max_tokens=budget)
    for mb in mbs:
        micro = [data[i] for i in mb.indices]
        masks = [s.mask for s in micro]
        lps, _ = policy.logprobs([s.ids for s in micro], temperature=1.0, chunk_size=256,
                                 used=masks if used else None, groups=[s.group for s in micro] if share else None)
        mask_T = torch.tensor([x for m in masks for x in m], dtype=torch.float32, device=policy.device)
        (-(torch.cat(lps) * mask_T).sum() / num_tokens).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def sft_step(policy: Policy, opt: torch.optim.Optimizer, data: list[Seq], *, budget: int, share: bool = False
             ) -> None:
    """One optimizer step over `data` as codedojo.train.sft.run_sft takes it (with `share`, every sequence
    in one group, so a micro-batch lays their common opening out once)."""
    num_tokens = sum(sum(s.mask) for s in data)
    keys = [0] * len(data) if share else list(range(len(data)))
    for mb in pack_groups([s.ids for s in data], keys, max_tokens=budget, min_shared=MIN_SHARED_PREFIX):
        micro = [data[i] for i in mb.indices]
        sft_loss(policy, [s.ids for s in micro], [s.mask for s in micro], num_tokens=num_tokens,
                 chunk_size=256, share_prefix=share).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def hf_padded_step(model: torch.nn.Module, opt: torch.optim.Optimizer, data: list[Seq], *, micro: int,
                   dtype: torch.dtype) -> int:
    num_tokens = sum(sum(s.mask) for s in data)
    device = next(model.parameters()).device
    padded_total = 0
    for start in range(0, len(data), micro):
        group = data[start:start + micro]
        width = max(len(s.ids) for s in group)
        padded_total += width * len(group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        attention = torch.zeros(len(group), width, dtype=torch.long)
        loss_mask = torch.zeros(len(group), width - 1)
        for row, s in enumerate(group):
            ids[row, : len(s.ids)] = torch.tensor(s.ids)
            attention[row, : len(s.ids)] = 1
            loss_mask[row, : len(s.mask)] = torch.tensor(s.mask, dtype=torch.float32)
        ids, attention, loss_mask = ids.to(device), attention.to(device), loss_mask.to(device)
        with compute_precision(device, dtype):
            logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        (-(logprobs * loss_mask).sum() / num_tokens).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return padded_total


def configurations(rl: list[Seq], demos: list[Seq], *, budget: int, shape: dict | None, device: str = "cpu",
                   sft_budget: int | None = None, sft_share_budget: int | None = None
                   ) -> dict[str, tuple[list[Seq], Callable[[], Callable[[], object]]]]:
    # Each entry builds its model and optimizer when called and returns the step: one model (with its
    # AdamW state) is alive at a time, so nine SmolLM2-sized configurations fit in memory.
    def ours(dtype: torch.dtype, *, used: bool, share: bool) -> Callable[[], Callable[[], object]]:
        def build() -> Callable[[], object]:
            policy = Policy(build_model(seed=1, shape=shape, device=device), compute_dtype=dtype)
            opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-6)
            return lambda: codedojo_step(policy, opt, rl, budget=budget, used=used, share=share)
        return build

    def supervised(dtype: torch.dtype, *, share: bool = False) -> Callable[[], Callable[[], object]]:
        step_budget = (sft_share_budget if share else None) or sft_budget or budget

        def build() -> Callable[[], object]:
            policy = Policy(build_model(seed=1, shape=shape, device=device), compute_dtype=dtype)
            opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-6)
            return lambda: sft_step(policy, opt, demos, budget=step_budget, share=share)
        return build

    def legacy(data: list[Seq], step_budget: int) -> Callable[[], Callable[[], object]]:
        def build() -> Callable[[], object]:
            model = build_model(seed=1, shape=shape, device=device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
            return lambda: legacy_step(model, opt, data, budget=step_budget)
        return build

    def hf(dtype: torch.dtype) -> Callable[[], Callable[[], object]]:
        def build() -> Callable[[], object]:
            model = build_model(seed=1, shape=shape, device=device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
            return lambda: hf_padded_step(model, opt, rl, micro=2, dtype=dtype)
        return build

    f32, b16 = torch.float32, torch.bfloat16
    default = compute_dtype(None, device)
    return {
        "today": (rl, legacy(rl, budget)),
        "kernels": (rl, ours(f32, used=False, share=False)),
        "head": (rl, ours(f32, used=True, share=False)),
        "bf16": (rl, ours(b16, used=False, share=False)),
        "share": (rl, ours(f32, used=False, share=True)),
        "all": (rl, ours(default, used=True, share=True)),
        "hf_fp32": (rl, hf(f32)),
        "hf_bf16": (rl, hf(b16)),
        "sft_today": (demos, legacy(demos, sft_budget or budget)),
        "sft_new": (demos, supervised(default)),
        "sft_share": (demos, supervised(default, share=True)),
    }


EMULATED_BF16 = ("bf16", "hf_bf16")
"""Configurations that multiply in bf16 whatever the CPU: left out by default where it is emulated."""


def time_steps(build: Callable[[], Callable[[], object]], *, repeat: int) -> float:
    """The fastest of `repeat` consecutive steps of a freshly built configuration (the first one pays for
    the optimizer state and lazy initialisation, so use repeat >= 2 for a measurement)."""
    step = build()
    best = float("inf")
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del step
    gc.collect()
    return best


def profile_step(build: Callable[[], Callable[[], object]], *, top: int = 15) -> dict[str, Any]:
    """Self CPU time per operator of one step (after a warm-up step), largest first."""
    from torch.profiler import ProfilerActivity, profile

    step = build()
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1
    return {"self_cpu_seconds": round(total / 1e6, 2), "load_average": [round(x, 2) for x in os.getloadavg()],
            "top": [{"op": e.key, "share": round(e.self_cpu_time_total / total, 3), "calls": e.count}
                    for e in events[:top]]}


def isolated_seconds(name: str, argv: list[str]) -> float:
    """`name`'s fastest step, timed by this script in a child process that builds and runs only it."""
    # this run's options, then the child's own: argparse keeps the last --only, and --seconds-only
    # takes precedence over --isolate
    out = subprocess.run([sys.executable, __file__, *argv, "--only", name, "--seconds-only"], check=True,
                         capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])[name])


def step_flops(data: list[Seq], *, budget: int, share: bool, shape: dict | None = None) -> dict[str, float]:
    """FLOPs of one training step over `data` as `all` (share=True) or `sft_new` lays it out: the
    layer matmuls (2 FLOPs per weight per laid-out token forward, 4 backward), attention forward and backward
    (QK^T and PV forward; the flash backward recomputes QK^T and forms four more products: 3.5x the forward),
    and the head at trainable positions (forward and backward). A lower bound on the step's work: norms,
    elementwise ops and the optimizer come on top."""
    c = dict(SMOLLM2_SHAPE, **(shape or {}))
    hidden, inter, heads, kv = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c[
        "num_key_value_heads"]
    head_dim = hidden // heads
    weights = c["num_hidden_layers"] * (hidden * (heads + 2 * kv) * head_dim + heads * head_dim * hidden
                                        + 3 * hidden * inter)
    keys = [s.group for s in data] if share else list(range(len(data)))
    tokens = attention = 0.0
    for mb in pack_groups([s.ids for s in data], keys, max_tokens=budget, min_shared=MIN_SHARED_PREFIX):
        lay = layout([data[i].ids for i in mb.indices], [keys[i] for i in mb.indices] if share else None)
        tokens += lay.num_tokens
        for b in lay.blocks:  # query-key pairs: the prefix causally, each suffix against the prefix and itself
            attention += b.prefix * (b.prefix + 1) / 2 + sum(x * b.prefix + x * (x + 1) / 2 for x in b.suffixes)
    attention *= 2 * 2 * head_dim * heads * c["num_hidden_layers"] * 3.5
    trainable = sum(sum(s.mask) for s in data)
    out = {"laid_out_tokens": tokens, "layer_matmuls": 6 * weights * tokens, "attention": attention,
           "head": 6 * c["vocab_size"] * hidden * trainable}
    out["total"] = out["layer_matmuls"] + out["attention"] + out["head"]
    return out


def in_tflop(flops: dict[str, float]) -> dict[str, float]:
    return {k: v if k == "laid_out_tokens" else round(v / 1e12, 3) for k, v in flops.items()}


def ratios(tps: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}

    def put(a: str, b: str, name: str | None = None) -> None:
        if a in tps and b in tps:
            out[name or f"{a}_vs_{b}"] = round(tps[a] / tps[b], 3)

    put("kernels", "today")
    for change in ("head", "bf16", "share"):  # each change alone, on the current forward
        put(change, "kernels")
    put("all", "today")
    put("today", "hf_fp32")
    put("hf_bf16", "hf_fp32")
    peers = [k for k in ("hf_fp32", "hf_bf16") if k in tps]  # hf_bf16 is left out where bf16 is emulated
    if peers and "all" in tps:
        fastest = max(peers, key=lambda k: tps[k])
        out[f"all_vs_hf_fastest({fastest})"] = round(tps["all"] / tps[fastest], 3)
    put("sft_new", "sft_today")
    put("sft_share", "sft_new")
    put("sft_share", "sft_today")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=2, help="GRPO groups in the RL batch")
    parser.add_argument("--group-size", type=int, default=4, help="samples per group")
    parser.add_argument("--sft-sequences", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2, help="timed steps per configuration (fastest kept)")
    parser.add_argument("--budget", type=int, default=4096, help="RL micro-batch token budget")
    parser.add_argument("--sft-budget", type=int, default=SFTConfig().max_tokens_per_gpu,
                        help="SFT micro-batch token budget (default: SFTConfig's)")
    parser.add_argument("--sft-share-budget", type=int, default=None,
                        help="micro-batch token budget of sft_share (default: --sft-budget, so the line "
                             "differs from sft_new only in the sharing)")
    parser.add_argument("--only", default="",
                        help="comma-separated configurations (default: all, less bf16 ones on a CPU that "
                             "emulates bf16)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model and short sequences (a smoke test)")
    parser.add_argument("--isolate", action="store_true",
                        help="time each configuration in a fresh process of its own (in turn, never two at once), "
                             "so none runs on the heap and caches the ones before it left")
    parser.add_argument("--seconds-only", action="store_true", help=argparse.SUPPRESS)  # --isolate's children
    parser.add_argument("--flops-only", action="store_true",
                        help="print the FLOPs of the `all` and `sft_new` steps (step_tflop, as in the full JSON) "
                             "and stop: arithmetic only, nothing is timed")
    parser.add_argument("--profile", default=None, metavar="CONFIG",
                        help="instead of timing: one warm step of CONFIG under torch.profiler; prints the share "
                             "of CPU time per operator as JSON")
    args = parser.parse_args()
    shape = None
    scale = 1.0
    if args.tiny:
        shape = dict(SMOLLM2_SHAPE, vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2)
        scale = 0.05
    vocab = 500 if args.tiny else 49000
    rl = rl_workload(groups=args.groups, group_size=args.group_size, seed=0, scale=scale, vocab=vocab)
    sft = sft_workload(n=args.sft_sequences, seed=1, scale=scale, vocab=vocab)
    configs = configurations(rl, sft, budget=args.budget, shape=shape, sft_budget=args.sft_budget,
                             sft_share_budget=args.sft_share_budget)
    left_out: dict[str, str] = {}
    if not args.only and not native_bf16("cpu"):
        left_out = {name: "this CPU emulates bf16 (no avx512_bf16 or amx_bf16 flag); name it with --only to "
                          "time it anyway" for name in EMULATED_BF16}
    if not args.only:
        try:
            _legacy()
        except LegacyUnavailable as error:
            left_out.update({name: str(error) for name in LEGACY})
    configs = {k: v for k, v in configs.items() if k not in left_out}
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - set(configs))
        if unknown:
            parser.error(f"unknown configuration(s) {unknown}; known: {', '.join(configs)}")
        configs = {k: v for k, v in configs.items() if k in wanted}
    step_tflop = {"all": in_tflop(step_flops(rl, budget=args.budget, share=True, shape=shape)),
                  "sft_new": in_tflop(step_flops(sft, budget=args.sft_budget, share=False, shape=shape))}
    if args.flops_only:
        print(json.dumps({"command": " ".join(["bench/trainer.py", *sys.argv[1:]]), "step_tflop": step_tflop},
                         indent=2))
        return
    if args.profile:
        print(json.dumps(profile_step(configs[args.profile][1]), indent=2))
        return
    if args.seconds_only:
        print(json.dumps({name: time_steps(build, repeat=args.repeat) for name, (_, build) in configs.items()}))
        return
    load_before = os.getloadavg()
    started = time.time()
    if args.isolate:
        best = {name: isolated_seconds(name, sys.argv[1:]) for name in configs}
    else:
        best = {name: time_steps(build, repeat=args.repeat) for name, (_, build) in configs.items()}
    tokens = {name: sum(len(s.ids) for s in data) for name, (data, _) in configs.items()}
    tps = {name: round(tokens[name] / best[name], 1) for name in configs}
    result = {
        "bench": "trainer", "command": " ".join(["bench/trainer.py", *sys.argv[1:]]),
        "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "torch": torch.__version__,
        "capability": capability("cpu"),
        "rl_workload": {"groups": args.groups, "group_size": args.group_size, "tokens": tokens.get("today", 0),
                        "trainable": sum(sum(s.mask) for s in rl),
                        "laid_out_with_sharing": sum(mb.num_tokens for mb in pack_groups(
                            [s.ids for s in rl], [s.group for s in rl], max_tokens=args.budget,
                            min_shared=MIN_SHARED_PREFIX))},
        "sft_workload": {"sequences": len(sft), "tokens": sum(len(s.ids) for s in sft),
                         "trainable": sum(sum(s.mask) for s in sft), "common_opening": int(SFT_OPENING * scale)},
        "step_tflop": step_tflop,
        "budget": args.budget, "sft_budget": args.sft_budget,
        "sft_share_budget": args.sft_share_budget or args.sft_budget,
        "repeat": args.repeat, "isolated": args.isolate,
        "all_dtype": str(compute_dtype(None, "cpu")).removeprefix("torch."), "left_out": left_out,
        "tokens_per_sec": tps, "seconds": {k: round(v, 2) for k, v in best.items()},
        "ratios": ratios(tps),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_seconds": round(time.time() - started, 1),
        "peak_rss_mib": round(max(resource.getrusage(who).ru_maxrss
                                  for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
