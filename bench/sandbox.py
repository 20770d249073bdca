"""Local sandbox latency against plain subprocess, measured in the same run.

    .venv/bin/python bench/sandbox.py [--n 200] [--episodes 50] [--concurrent 32]

Prints one JSON object:
  exec_ms            p50/p99 of `bash -c true` through the sandbox and through asyncio subprocess
  exec_overhead_ms   sandbox p50 minus subprocess p50 (the issue's bound: within 10 ms)
  episode_ms         p50/p99 of start + close of a sandbox for a cached task (bound: under 50 ms)
  concurrent         N sandboxes open at once: start wall time, one command in each, close, leftovers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from codedojo.sandbox.host import state_root
from codedojo.sandbox.local import LocalSandbox
from codedojo.tasks.config import EnvironmentConfig, TaskConfig
from codedojo.tasks.task import Task, write_task


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values_sec: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_sec]
    return {"p50": round(statistics.median(ms), 2), "p99": round(percentile(ms, 0.99), 2),
            "mean": round(statistics.fmean(ms), 2), "n": len(ms)}


def bench_task(root: Path) -> Task:
    files = {f"environment/repo/f{i:03d}.py": f"X = {i}\n" for i in range(200)}
    files.update({"environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\nCOPY repo/ /app/\n",
                  "tests/test.sh": "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
                  "solution/solve.sh": "#!/bin/bash\ntrue\n"})
    config = TaskConfig(environment=EnvironmentConfig(memory_mb=512, storage_mb=256, network_mode="no-network"))
    return write_task(root / "bench-task", instruction="bench", config=config, files=files)


async def subprocess_exec() -> float:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec("/bin/bash", "-c", "true", stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    await proc.communicate()
    return time.perf_counter() - t0


async def main(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CODEDOJO_CACHE_DIR", str(Path(tmp) / "cache"))
        task = bench_task(Path(tmp))
        warm = await LocalSandbox.start(task)  # builds and caches the workspace once
        await warm.close()

        sandbox_times, plain_times = [], []
        async with await LocalSandbox.start(task) as sb:
            for _ in range(10):  # warm-up
                await sb.exec("true")
                await subprocess_exec()
            for _ in range(args.n):  # interleaved so both see the same machine load
                t0 = time.perf_counter()
                await sb.exec("true")
                sandbox_times.append(time.perf_counter() - t0)
                plain_times.append(await subprocess_exec())

        episode_times = []
        for _ in range(args.episodes):
            t0 = time.perf_counter()
            sb = await LocalSandbox.start(task)
            await sb.close()
            episode_times.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        boxes = await asyncio.gather(*(LocalSandbox.start(task) for _ in range(args.concurrent)))
        started = time.perf_counter() - t0
        t0 = time.perf_counter()
        results = await asyncio.gather(*(b.exec("python3 -c 'print(sum(range(10**5)))'") for b in boxes))
        ran = time.perf_counter() - t0
        ok = sum(r.return_code == 0 and r.stdout.strip() == str(sum(range(10**5))) for r in results)
        t0 = time.perf_counter()
        await asyncio.gather(*(b.close() for b in boxes))
        closed = time.perf_counter() - t0
        leftovers = [b.sandbox_id for b in boxes if (state_root() / b.sandbox_id).exists()]

    exec_sb, exec_plain = summary(sandbox_times), summary(plain_times)
    return {
        "bench": "sandbox",
        "cpus": os.cpu_count(),
        "exec_ms": {"local_sandbox": exec_sb, "subprocess": exec_plain},
        "exec_overhead_ms": round(exec_sb["p50"] - exec_plain["p50"], 2),
        "episode_ms": summary(episode_times),
        "concurrent": {"sandboxes": args.concurrent, "start_all_s": round(started, 3),
                       "one_command_each_s": round(ran, 3), "commands_ok": ok, "close_all_s": round(closed, 3),
                       "leftover_sandbox_dirs": len(leftovers)},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="commands timed per side")
    parser.add_argument("--episodes", type=int, default=50, help="start+close cycles timed")
    parser.add_argument("--concurrent", type=int, default=32, help="sandboxes open at once")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
