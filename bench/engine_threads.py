"""Does the thread that calls the engine's forward change its speed? One bf16 batch-1 step (400 positions)
timed on the main thread, then on a worker thread (as `LocalEngine` runs it) while the main thread's
OpenMP pool lingers, then on the main thread again; then the same two after each thread freed its pool
when done (`codedojo.threads.release_omp_threads`, what the engine does now); and each with one torch
thread:

    .venv/bin/python bench/engine_threads.py [--model smollm2-135m-instruct] [--calls 30]

Prints JSON: per side the fastest and the median milliseconds of --calls steps. A probe for issue 19's
batch-1 decode; the sides run one after another, so run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_steps import one_row

from codedojo.inference import resolve_model
from codedojo.threads import release_omp_threads


def measure(loaded: Any, calls: int) -> dict[str, object]:
    """Every side's fastest and median ms over `calls` steps of `loaded`'s bf16 engine."""
    step = one_row(loaded.engine_model(dtype=torch.bfloat16))
    threads = torch.get_num_threads()

    def side(num_threads: int | None = None, *, release: bool = False) -> list[float]:
        if num_threads:
            torch.set_num_threads(num_threads)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            step()
            times.append((time.perf_counter() - start) * 1e3)
        if release:
            release_omp_threads()
        return [round(min(times), 1), round(statistics.median(times), 1)]

    pool = ThreadPoolExecutor(max_workers=1)
    out: dict[str, object] = {"torch_threads": threads, "load_average_at_start": os.getloadavg()}
    out["main_ms"] = side()
    out["worker_ms"] = pool.submit(side).result()
    out["main_after_worker_ms"] = side(release=True)
    out["worker_after_release_ms"] = pool.submit(side, release=True).result()
    out["main_after_release_ms"] = side(release=True)
    out["main_1_thread_ms"] = side(1)
    out["worker_1_thread_ms"] = pool.submit(side, 1).result()
    torch.set_num_threads(threads)
    out["load_average_at_end"] = os.getloadavg()
    out["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    return out


def main(args: argparse.Namespace) -> dict[str, object]:
    return measure(resolve_model(args.model).load(device="cpu", dtype=torch.float32), args.calls)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--calls", type=int, default=30)
    print(json.dumps(main(parser.parse_args()), indent=2))
