"""Rollout throughput of codedojo's local engine against Hugging Face `generate` and, optionally,
llama.cpp: one process, the same model and the same sampled workloads, measured in the same run.

    .venv/bin/python bench/engine.py [--model smollm2-135m-instruct] [--device cpu] [--dtype float32]
                                     [--workloads abcd] [--scale 1.0] [--repeat 1] [--threads N]
                                     [--peer llamacpp] [--peer-dtypes f32,bf16]

Workloads (every turn samples exactly its token count: ignore_eos, temperature 1):
  a  32 independent prompts of 100-500 tokens, 64 new tokens each. Ours: 32 concurrent requests.
     HF: one batched, left-padded `generate` call.
  b  a GRPO group: one 400-token task prompt, 8 samples, 4 turns; every turn appends 200 observation
     tokens (different per sample) and generates 48. Ours: 8 concurrent sessions. HF: one batched
     `generate` per turn over the whole history (what a tool loop around HF does).
  c  agentic arrivals: 16 episodes (distinct 300-500-token prompts), 4 turns of 48 new tokens; after
     each reply the episode sleeps 0-200 ms (the sandbox) and appends 50-400 observation tokens. Ours:
     16 concurrent sessions. HF: one `generate` call per request, one at a time, as an agent loop calling
     a plain HF model does.
  d  batch 1: one 400-token prompt, then 128 new tokens; prefill tok/s from a 1-token turn, decode tok/s
     from the difference (127 tokens). Fresh KV each time (the prefix cache is flushed).

`--peer llamacpp` adds llama.cpp (bench/engine_llamacpp.py; needs llama-cpp-python, SmolLM2 only) on F32
and BF16 GGUF files of the same weights (`--peer-dtypes`): every workload through llama.cpp's batched
API, one sequence per request or session with its KV kept between turns, in lockstep continuous batching
like ours (a, b, c) or alone (d).

`--dtype` is the engine's compute dtype (`float32`, `bfloat16`, `float16`, `auto`); the HF side runs in
the same dtype (`auto`: what it resolves to).

Prints one JSON object: per workload, every side's generated tokens/s, seconds, prompt tokens computed,
the ratio (ours / HF, and ours / each peer) and the peak RSS during each side; plus the environment,
including the load average (the machine is shared: other processes slow every side, which is why the
sides alternate). `--no-hf` leaves Hugging Face out (to compare our dtypes, or ours with the peer, quickly).
`--scale` shrinks every count (episodes, turns, tokens) for a quick smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import torch

from codedojo.inference import LocalEngine, SamplingParams, resolve_model
from codedojo.inference.engine import engine_dtype
from codedojo.threads import release_omp_threads, to_thread


class PeakRSS:
    """Samples this process's resident memory every 20 ms while active."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        process = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, process.memory_info().rss)
            self._stop.wait(0.02)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mib(self) -> int:
        return self.peak >> 20


class HFBaseline:
    """Plain `model.generate`, serialised by a lock (one model, one call at a time)."""

    def __init__(self, model: Any, *, pad_id: int) -> None:
        self.model = model
        self.pad_id = pad_id
        self.lock = asyncio.Lock()
        self.prompt_tokens = 0
        self.generated = 0

    def _generate(self, histories: list[list[int]], new_tokens: int, seed: int) -> list[list[int]]:
        width = max(len(h) for h in histories)
        ids = torch.full((len(histories), width), self.pad_id, dtype=torch.int64)
        mask = torch.zeros_like(ids)
        for row, history in enumerate(histories):  # left padding, as HF batching requires
            ids[row, width - len(history) :] = torch.tensor(history)
            mask[row, width - len(history) :] = 1
        torch.manual_seed(seed)
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(self.model.device),
                attention_mask=mask.to(self.model.device),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=self.pad_id,
            )
        self.prompt_tokens += ids.numel()
        self.generated += len(histories) * new_tokens
        return [row[width:].tolist() for row in out.cpu()]

    async def generate(self, histories: list[list[int]], new_tokens: int, seed: int) -> list[list[int]]:
        async with self.lock:
            # codedojo.threads.to_thread: the executor thread frees its OpenMP pool after the call, so no
            # side runs beside another's idle pool (docs/inference.md, "Threads")
            return await to_thread(self._generate, histories, new_tokens, seed)


class Peer:
    """A llama.cpp model file opened as a fresh context per workload (`bench/engine_llamacpp.py`)."""

    def __init__(self, name: str, model: Any, *, kv_type: str) -> None:
        self.name = name
        self.model = model
        self.kv_type = kv_type

    def open(self, *, num_sequences: int, sequence_tokens: int) -> Any:
        peer = llamacpp_module().LlamaCppPeer(self.model, num_sequences=num_sequences,
                                              sequence_tokens=sequence_tokens + 16, kv_type=self.kv_type)
        release_omp_threads()  # if creating the context ran OpenMP here, only the peer's worker keeps a pool
        return peer


def llamacpp_module() -> ModuleType:
    """bench/engine_llamacpp.py (the bench folder is scripts, not a package)."""
    if "bench_engine_llamacpp" not in sys.modules:
        path = Path(__file__).resolve().parent / "engine_llamacpp.py"
        spec = importlib.util.spec_from_file_location("bench_engine_llamacpp", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_engine_llamacpp"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["bench_engine_llamacpp"]


PeerRun = Callable[[Any], Awaitable[int]]
"""Runs a workload's turns through an opened peer (`LlamaCppPeer`); returns the tokens generated."""


def random_tokens(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(3, vocab) for _ in range(n)]


def scaled(n: int, scale: float, minimum: int = 1) -> int:
    return max(minimum, round(n * scale))


async def workload_a(
    ours: LocalEngine, hf: HFBaseline | None, vocab: int, scale: float, repeat: int, *, peers: tuple[Peer, ...] = ()
) -> dict[str, Any]:
    rng = random.Random(1)
    prompts = [random_tokens(rng, rng.randint(100, 500), vocab) for _ in range(scaled(32, scale, 2))]
    new = scaled(64, scale, 4)
    params = SamplingParams(max_new_tokens=new, ignore_eos=True, seed=0)

    async def run_ours() -> int:
        outs = await asyncio.gather(*[ours.generate(p, params) for p in prompts])
        return sum(len(o.token_ids) for o in outs)

    async def run_hf() -> int:
        assert hf is not None
        outs = await hf.generate(prompts, new, seed=0)
        return sum(len(o) for o in outs)

    async def run_peer(peer: Any) -> int:
        outs = await asyncio.gather(*[peer.generate(p, new, session=f"a-{i}") for i, p in enumerate(prompts)])
        return sum(len(o) for o in outs)

    shape = {"prompts": len(prompts), "new_tokens": new}
    sequences = (len(prompts), max(len(p) for p in prompts) + new)
    return await compare(ours, hf, run_ours, run_hf, shape=shape, repeat=repeat,
                         peers={p: (run_peer, sequences) for p in peers})


async def workload_b(
    ours: LocalEngine, hf: HFBaseline | None, vocab: int, scale: float, repeat: int, *, peers: tuple[Peer, ...] = ()
) -> dict[str, Any]:
    rng = random.Random(2)
    samples, turns, new = scaled(8, scale, 2), scaled(4, scale, 2), scaled(48, scale, 4)
    prompt = random_tokens(rng, scaled(400, scale, 16), vocab)
    observations = [[random_tokens(rng, scaled(200, scale, 4), vocab) for _ in range(turns)] for _ in range(samples)]
    params = SamplingParams(max_new_tokens=new, ignore_eos=True)

    async def run_ours() -> int:
        async def episode(i: int) -> int:
            history = list(prompt)
            for turn in range(turns):
                history += observations[i][turn]
                out = await ours.generate(history, params, session_id=f"b-{i}")
                history += out.token_ids
            await ours.end_session(f"b-{i}")
            return turns * new

        return sum(await asyncio.gather(*[episode(i) for i in range(samples)]))

    async def run_hf() -> int:
        histories = [list(prompt) for _ in range(samples)]
        for turn in range(turns):
            for i in range(samples):
                histories[i] += observations[i][turn]
            assert hf is not None
            outs = await hf.generate(histories, new, seed=turn)
            for i in range(samples):
                histories[i] += outs[i]
        return samples * turns * new

    async def run_peer(peer: Any) -> int:
        async def episode(i: int) -> int:
            history = list(prompt)
            for turn in range(turns):
                history += observations[i][turn]
                history += await peer.generate(history, new, session=f"b-{i}")
            await peer.end_session(f"b-{i}")
            return turns * new

        return sum(await asyncio.gather(*[episode(i) for i in range(samples)]))

    shape = {"samples": samples, "turns": turns, "prompt": len(prompt), "new_tokens": new}
    longest = len(prompt) + max(sum(len(o) for o in obs) for obs in observations) + turns * new
    return await compare(ours, hf, run_ours, run_hf, shape=shape, repeat=repeat,
                         peers={p: (run_peer, (samples, longest)) for p in peers})


async def workload_c(
    ours: LocalEngine, hf: HFBaseline | None, vocab: int, scale: float, repeat: int, *, peers: tuple[Peer, ...] = ()
) -> dict[str, Any]:
    rng = random.Random(3)
    episodes, turns, new = scaled(16, scale, 2), scaled(4, scale, 2), scaled(48, scale, 4)
    prompts = [random_tokens(rng, scaled(rng.randint(300, 500), scale, 16), vocab) for _ in range(episodes)]
    observations = [
        [random_tokens(rng, scaled(rng.randint(50, 400), scale, 4), vocab) for _ in range(turns)]
        for _ in range(episodes)
    ]
    delays = [[rng.uniform(0.0, 0.2) for _ in range(turns)] for _ in range(episodes)]
    params = SamplingParams(max_new_tokens=new, ignore_eos=True)

    async def run(generate: Callable[[int, list[int]], Awaitable[list[int]]]) -> int:
        async def episode(i: int) -> int:
            history = list(prompts[i])
            for turn in range(turns):
                if turn:
                    await asyncio.sleep(delays[i][turn])
                    history += observations[i][turn]
                history += await generate(i, history)
            return turns * new

        return sum(await asyncio.gather(*[episode(i) for i in range(episodes)]))

    async def ours_turn(i: int, history: list[int]) -> list[int]:
        return list((await ours.generate(history, params, session_id=f"c-{i}")).token_ids)

    async def hf_turn(i: int, history: list[int]) -> list[int]:
        assert hf is not None
        return (await hf.generate([history], new, seed=len(history)))[0]

    async def run_ours() -> int:
        total = await run(ours_turn)
        for i in range(episodes):
            await ours.end_session(f"c-{i}")
        return total

    async def run_peer(peer: Any) -> int:
        total = await run(lambda i, history: peer.generate(history, new, session=f"c-{i}"))
        for i in range(episodes):
            await peer.end_session(f"c-{i}")
        return total

    shape = {"episodes": episodes, "turns": turns, "new_tokens": new}
    longest = max(len(p) + sum(len(o) for o in obs[1:]) for p, obs in zip(prompts, observations, strict=True))
    return await compare(ours, hf, run_ours, lambda: run(hf_turn), shape=shape, repeat=repeat,
                         peers={p: (run_peer, (episodes, longest + turns * new)) for p in peers})


async def workload_d(
    ours: LocalEngine, hf: HFBaseline | None, vocab: int, scale: float, repeat: int, *, peers: tuple[Peer, ...] = ()
) -> dict[str, Any]:
    """Batch 1: prefill and decode rates of one sequence; each side's fastest of `repeat` (alternating)."""
    rng = random.Random(4)
    prompt = random_tokens(rng, scaled(400, scale, 16), vocab)
    new = scaled(128, scale, 4)

    async def ours_turn(tokens: int) -> None:
        await ours.flush_cache()  # no KV from the previous call: each call prefills the whole prompt
        await ours.generate(prompt, SamplingParams(max_new_tokens=tokens, ignore_eos=True, seed=0))

    async def hf_turn(tokens: int) -> None:
        assert hf is not None
        await hf.generate([prompt], tokens, seed=0)

    opened = {p.name: p.open(num_sequences=1, sequence_tokens=len(prompt) + new) for p in peers}

    def peer_turn(peer: Any) -> Callable[[int], Awaitable[None]]:
        async def turn(tokens: int) -> None:
            await peer.generate(prompt, tokens, session="d")
            await peer.end_session("d", drop=True)  # no KV left for the next call to reuse

        return turn

    sides: dict[str, Callable[[int], Awaitable[None]]] = {"ours": ours_turn}
    if hf is not None:
        sides["hf"] = hf_turn
    sides.update({name: peer_turn(peer) for name, peer in opened.items()})
    best: dict[str, dict[str, float]] = {name: {"prefill_s": float("inf"), "total_s": float("inf")} for name in sides}
    for _ in range(repeat):
        for name, turn in sides.items():
            for key, tokens in (("prefill_s", 1), ("total_s", new)):
                start = time.perf_counter()
                await turn(tokens)
                best[name][key] = min(best[name][key], time.perf_counter() - start)
    for peer in opened.values():
        peer.close()
    out: dict[str, Any] = {"shape": {"prompt": len(prompt), "new_tokens": new}}
    for name, times in best.items():
        decode_s = max(times["total_s"] - times["prefill_s"], 1e-9)
        out[name] = {"prefill_tok_s": round(len(prompt) / times["prefill_s"], 1),
                     "decode_tok_s": round((new - 1) / decode_s, 1),
                     "prefill_s": round(times["prefill_s"], 3), "total_s": round(times["total_s"], 3)}
    if hf is not None:
        out["ratio"] = round(out["ours"]["decode_tok_s"] / out["hf"]["decode_tok_s"], 2)
    out["decode_ratio_vs"] = {name: round(out["ours"]["decode_tok_s"] / out[name]["decode_tok_s"], 2)
                              for name in opened}
    out["prefill_ratio_vs"] = {name: round(out["ours"]["prefill_tok_s"] / out[name]["prefill_tok_s"], 2)
                               for name in (*(["hf"] if hf is not None else []), *opened)}
    return out


async def compare(
    ours: LocalEngine,
    hf: HFBaseline | None,
    run_ours: Callable[[], Awaitable[int]],
    run_hf: Callable[[], Awaitable[int]],
    *,
    shape: dict[str, Any],
    repeat: int,
    peers: dict[Peer, tuple[PeerRun, tuple[int, int]]] | None = None,
) -> dict[str, Any]:
    """Run every side `repeat` times, alternating, and keep each side's fastest run: on a shared
    machine the minimum is the measurement least disturbed by other processes. peers: for each peer,
    how to run the workload through it and its (sequences, tokens per sequence) for the context."""
    best: dict[str, dict[str, Any]] = {}
    for _ in range(repeat):
        await ours.call(reset_kv_peak)
        before = await ours.stats()
        result = await timed(run_ours)
        after = await ours.stats()
        result["prompt_tokens_computed"] = after["prefill_tokens"] - before["prefill_tokens"]
        result["prompt_tokens_reused"] = after["cached_tokens"] - before["cached_tokens"]
        result["kv_peak_mib"] = after["kv_peak_tokens"] * after["kv_bytes_per_token"] >> 20
        keep_faster(best, "ours", result)
        if hf is not None:
            hf.prompt_tokens = 0
            result = await timed(run_hf)
            result["prompt_tokens_computed"] = hf.prompt_tokens
            keep_faster(best, "hf", result)
        for peer, (run_peer, (sequences, tokens)) in (peers or {}).items():
            opened = peer.open(num_sequences=sequences, sequence_tokens=tokens)
            try:
                result = await timed(lambda opened=opened, run_peer=run_peer: run_peer(opened))
            finally:
                opened.close()
            result["prompt_tokens_computed"] = opened.prompt_tokens_computed
            result["prompt_tokens_reused"] = opened.prompt_tokens_reused
            keep_faster(best, peer.name, result)
    out: dict[str, Any] = {"shape": shape, "ours": best["ours"]}
    if hf is not None:
        out.update(hf=best["hf"], ratio=round(best["ours"]["tok_s"] / best["hf"]["tok_s"], 2))
    if peers:
        out.update({peer.name: best[peer.name] for peer in peers})
        out["ratio_vs"] = {peer.name: round(best["ours"]["tok_s"] / best[peer.name]["tok_s"], 2) for peer in peers}
    return out


def reset_kv_peak(scheduler: Any) -> None:
    scheduler.kv_peak_tokens = 0


async def timed(run: Callable[[], Awaitable[int]]) -> dict[str, Any]:
    with PeakRSS() as rss:
        start = time.perf_counter()
        generated = await run()
        seconds = time.perf_counter() - start
    return {"generated": generated, "seconds": round(seconds, 2), "tok_s": round(generated / seconds, 1),
            "peak_rss_mib": rss.mib}


def keep_faster(best: dict[str, dict[str, Any]], side: str, result: dict[str, Any]) -> None:
    if side not in best or result["seconds"] < best[side]["seconds"]:
        runs = [*best.get(side, {}).get("runs_seconds", []), result["seconds"]]
        best[side] = {**result, "runs_seconds": runs}
    else:
        best[side]["runs_seconds"].append(result["seconds"])


def open_peers(args: argparse.Namespace, model: str) -> tuple[tuple[Peer, ...], dict[str, Any]]:
    """The llama.cpp peers `--peer` asks for, and what to record about them."""
    if not getattr(args, "peer", None):
        return (), {}
    if args.peer != "llamacpp":
        raise SystemExit(f"unknown --peer {args.peer!r} (known: llamacpp)")
    engine_llamacpp = llamacpp_module()
    if not engine_llamacpp.available():
        raise SystemExit("--peer llamacpp needs llama-cpp-python (docs/inference.md: installing the peer)")
    if resolve_model(model).name != "smollm2-135m-instruct":
        raise SystemExit("--peer llamacpp runs SmolLM2 only: it is the model with a GGUF file")
    import llama_cpp

    from codedojo.inference.checkpoints import cache_dir, smollm2_gguf
    from codedojo.inference.gguf_convert import peer_files

    files = peer_files(smollm2_gguf(), cache_dir() / "models" / "llamacpp-peer")
    threads = torch.get_num_threads()
    peers = tuple(Peer(f"llamacpp_{dtype}", engine_llamacpp.LlamaCppModel(files[dtype], n_threads=threads),
                       kv_type=dtype) for dtype in args.peer_dtypes.split(","))
    info = {"llama_cpp_python": getattr(llama_cpp, "__version__", "?"), "threads": threads,
            "files": {p.name: str(p.model.path) for p in peers}}
    return peers, info


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = engine_dtype(args.dtype, args.device)
    start = time.perf_counter()
    loaded = resolve_model(args.model).load(device=args.device, dtype=torch.float32)
    hf_model = None if args.no_hf else loaded.hf_model().to(dtype)
    engine = LocalEngine(loaded.engine_model(dtype=dtype), loaded.tokenizer, seed=0)
    name, tokenizer, vocab = loaded.name, loaded.tokenizer, loaded.hf_config.vocab_size
    del loaded  # the loaded state dict is a third copy of the weights
    peers, peer_info = open_peers(args, args.model)
    release_omp_threads()  # the loads ran here; the sides run on their own threads
    load_s = time.perf_counter() - start
    hf = None if hf_model is None else HFBaseline(
        hf_model, pad_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    # Warm both paths (first-call allocations, lazy initialisation) outside the timings.
    await engine.generate(list(range(3, 40)), SamplingParams(max_new_tokens=4, ignore_eos=True))
    if hf is not None:
        await hf.generate([list(range(3, 40))], 4, seed=0)
    results: dict[str, Any] = {
        "model": name,
        "device": args.device,
        "dtype": str(dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "scale": args.scale,
        "repeat": args.repeat,
        "load_seconds": round(load_s, 1),
        "kv_budget_tokens": engine.kv_budget_tokens,
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
    }
    if peers:
        results["peers"] = peer_info
    workloads = {"a": workload_a, "b": workload_b, "c": workload_c, "d": workload_d}
    for name in args.workloads:
        results[name] = await workloads[name](engine, hf, vocab, args.scale, args.repeat, peers=peers)
        results[name]["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
        print(json.dumps({name: results[name]}), file=sys.stderr, flush=True)  # progress; stdout is one JSON
    results["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    stats = await engine.stats()
    results["engine_counters"] = {k: v for k, v in stats.items() if k != "parked_sessions"}
    await engine.close()
    for peer in peers:
        peer.model.close()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16, float16 or auto (default: float32)")
    parser.add_argument("--workloads", default="abcd")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=1, help="runs per side; the fastest counts (default: 1)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--peer", default=None, help="llamacpp: also run llama.cpp (needs llama-cpp-python)")
    parser.add_argument("--no-hf", action="store_true", help="skip the Hugging Face side (no HF ratios)")
    parser.add_argument("--peer-dtypes", default="f32,bf16", help="GGUF files the peer runs (default: f32,bf16)")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
