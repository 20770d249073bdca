"""How much of what torch frees glibc keeps resident, and what codedojo.memory.return_freed_memory() gives back.

    .venv/bin/python bench/malloc_retention.py [--mib 3000]

A worker thread allocates --mib of 1-3 MiB tensors (activation-sized), touches and frees them, twice (the first
round's frees raise malloc's mmap threshold, so the second round is served from its heap). Prints one JSON
object: the resident size before, after the frees, and after return_freed_memory(). A memory figure, not a
timing: other load on the machine does not change it.
"""

from __future__ import annotations

import argparse
import json
import threading

import torch

from codedojo import memory


def churn(total_mib: int) -> None:
    held = [torch.ones((1 + i % 3) * 2**18) for i in range(total_mib // 2)]
    assert sum(int(t[-1]) for t in held) == len(held)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=3000)
    args = parser.parse_args()
    before = memory.rss_gib() * 1024
    worker = threading.Thread(target=lambda: (churn(args.mib), churn(args.mib)))
    worker.start()
    worker.join()
    freed = memory.rss_gib() * 1024
    trimmed = memory.return_freed_memory()
    after = memory.rss_gib() * 1024
    print(json.dumps({"allocated_mib_per_round": args.mib, "rss_mib_before": round(before),
                      "rss_mib_after_free": round(freed), "kept_after_free_mib": round(freed - before),
                      "malloc_trim": trimmed, "rss_mib_after_return_freed_memory": round(after)}, indent=2))


if __name__ == "__main__":
    main()
