"""Automatic prefix caching through the OpenAI API: a multi-turn agent that never sends a session id.

Starts `codedojo serve` twice in turn (prefix cache on, then `--no-prefix-cache`) and runs the same
workload against each: `--episodes` concurrent episodes of `--turns` turns through the openai SDK. Each
episode starts from mini-swe-agent's `mini` prompts (system + instance template, when mini-swe-agent is
installed; a stand-in of the same size otherwise), and each turn appends the reply (re-rendered from its
text, as every OpenAI client does) and a shell-output observation of about `--observation-chars`
characters. Reported per mode: wall time, prompt and cached tokens, and per turn (smallest across
episodes) the share of the prompt that came from cache (turn 1 has little to reuse), the share of
what a cache could hold, the previous turn's prompt and reply, that was reused, and the share a perfect
cache would give (that context over the turn's prompt). The first share is
bounded by the size of each turn's new messages: with 600-character observations a later turn's new
tokens are ~15-20% of its prompt, so even a perfect cache stays under 90% there. Prints one JSON object.

    .venv/bin/python bench/prefix_cache.py                      # smollm2-135m-instruct, 8 x 6 turns
    .venv/bin/python bench/prefix_cache.py --model tiny-llama --episodes 2 --turns 3   # smoke run

Timing: run it alone on the machine (the two modes run one after the other, not interleaved).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def mini_prompts() -> tuple[str, str]:
    # mini-swe-agent prints a banner to stdout on import unless told not to: it would corrupt the JSON output
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    try:
        import yaml
        from minisweagent.config import builtin_config_dir

        agent = yaml.safe_load((Path(builtin_config_dir) / "mini.yaml").read_text())["agent"]
        return agent["system_template"], agent["instance_template"]
    except ImportError:
        rules = "Run one bash command per reply, read its output, then decide the next command.\n" * 40
        return "You are a helpful assistant that can interact with a computer.", "Please solve: {{task}}\n" + rules


def observation(episode: int, turn: int, chars: int) -> str:
    line = f"-rw-r--r-- 1 agent agent {1000 + 37 * turn} Dec  1 10:{turn:02d} src/module_{episode}_{turn}.py\n"
    return json.dumps({"returncode": 0, "output": (line * (chars // len(line) + 1))[:chars]})


def start_server(model: str, *, cache: bool) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "codedojo.cli", "serve", "--model", model, "--port", "0", "--seed", "0"]
    if model.startswith("tiny-"):
        command += ["--context-length", "8192"]  # mini's prompt alone is ~3,400 byte-level tokens
    if not cache:
        command.append("--no-prefix-cache")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if "serving" not in line:
        process.kill()
        raise RuntimeError(f"codedojo serve did not start: {line}{process.stdout.read()}")
    return process, line.split()[-1]


async def episode(api: Any, model: str, index: int, args: argparse.Namespace) -> list[tuple[int, int]]:
    from jinja2 import Template

    system, instance = mini_prompts()
    task = Template(instance).render(task=f"fix the failing test in module {index}", system="Linux",
                                     release="6.1", version="#1 SMP", machine="x86_64")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    usage = []
    for turn in range(args.turns):
        reply = await api.chat.completions.create(model=model, messages=messages, max_tokens=args.max_tokens,
                                                  temperature=args.temperature, seed=1000 * index + turn)
        details = reply.usage.prompt_tokens_details
        usage.append((reply.usage.prompt_tokens, details.cached_tokens if details else 0,
                      reply.usage.completion_tokens))
        messages += [{"role": "assistant", "content": reply.choices[0].message.content or ""},
                     {"role": "user", "content": observation(index, turn, args.observation_chars)}]
    return usage


async def workload(url: str, args: argparse.Namespace) -> dict[str, Any]:
    import openai

    api = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=3600)
    started = time.perf_counter()
    runs = await asyncio.gather(*[episode(api, args.model, i, args) for i in range(args.episodes)])
    seconds = time.perf_counter() - started
    await api.close()
    shares = [min(run[t][1] / run[t][0] for run in runs) for t in range(args.turns)]
    # What any prefix cache could reuse at turn t: the previous turn's prompt and reply (the new messages
    # cannot come from cache). This share says how much of that was reused.
    reused = [min(run[t][1] / (run[t - 1][0] + run[t - 1][2]) for run in runs) for t in range(1, args.turns)]
    # The most a perfect cache could give at turn t: that context as a share of the turn's prompt.
    bound = [min(min(1.0, (run[t - 1][0] + run[t - 1][2]) / run[t][0]) for run in runs) for t in range(1, args.turns)]
    return {
        "seconds": round(seconds, 2),
        "prompt_tokens": sum(u[0] for run in runs for u in run),
        "cached_tokens": sum(u[1] for run in runs for u in run),
        "min_cached_share_per_turn": [round(s, 4) for s in shares],
        "min_cached_share_after_turn_1": round(min(shares[1:]), 4) if len(shares) > 1 else None,
        "min_share_of_previous_context_reused_per_turn": [round(r, 4) for r in reused],
        "perfect_cache_share_per_turn": [round(b, 4) for b in bound],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--observation-chars", type=int, default=600)
    args = parser.parse_args()
    result: dict[str, Any] = {"config": vars(args)}
    for mode, cache in (("prefix_cache", True), ("no_prefix_cache", False)):
        process, url = start_server(args.model, cache=cache)
        try:
            result[mode] = asyncio.run(workload(url, args))
        finally:
            process.terminate()
            process.wait(30)
    result["speedup"] = round(result["no_prefix_cache"]["seconds"] / result["prefix_cache"]["seconds"], 3)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
