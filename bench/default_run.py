"""The figures of one `./dev run` (the main job), read back from its run directory, as JSON.

    .venv/bin/python bench/default_run.py RUN_DIR [--cache CODEDOJO_CACHE_DIR] [--time-log FILE]

Per GRPO step: training reward, share of mixed-reward groups, turns, rollout and update seconds, sampled
tokens per second of the rollout, resident memory; the held-out evaluations and the training-reward trend
(learning.json); the warm start's SFT tokens and seconds when `--cache` names the cache the run used; and
wall clock and peak RSS when `--time-log` names the output of `/usr/bin/time -v ./dev run ...`. Plus the
CPU's bf16 capability and the precision training chose. docs/results/default-run*.json are its output,
with what ran beside the run added by hand.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from codedojo.precision import capability, compute_dtype


def steps(metrics: Path) -> list[dict[str, Any]]:
    out = []
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") != "train":
            continue
        out.append({
            "step": row["step"] + 1,
            "reward_mean": row.get("rollout/reward_mean"),
            "mixed_group_frac": row.get("rollout/mixed_group_frac"),
            "turns_mean": row.get("rollout/turns_mean"),
            "rollout_s": round(row.get("perf/rollout_seconds", 0.0), 1),
            "train_s": round(row.get("perf/train_seconds", 0.0), 1),
            "rollout_sampled_tok_s": round(row.get("perf/rollout_sampled_tokens_per_sec", 0.0), 1),
            "rss_gib": round(row.get("perf/rss_gib", 0.0), 2),
            "peak_rss_gib": round(row.get("perf/peak_rss_gib", 0.0), 2),
            **engine_time(row),
        })
    return out


def engine_time(row: dict[str, Any]) -> dict[str, Any]:
    """Where the step's rollout went in the local engine (rows written before the engine kept time have none)."""
    if "perf/engine_step_seconds" not in row:
        return {}
    return {"engine_prefill_step_s": round(row["perf/engine_prefill_step_seconds"], 1),
            "engine_decode_step_s": round(row["perf/engine_decode_step_seconds"], 1),
            "engine_idle_s": round(row["perf/engine_idle_seconds"], 1),
            "engine_prefill_tokens": int(row["rollout/engine_prefill_tokens"]),
            "engine_decode_tokens": int(row["rollout/engine_decode_tokens"]),
            "engine_decode_rows_mean": round(row["perf/engine_decode_rows_mean"], 1)}


def sft(cache: Path) -> dict[str, Any] | None:
    found = sorted((cache / "sft").glob("*/sft.json"))
    if len(found) != 1:
        return None
    summary = json.loads(found[0].read_text())
    return {"tokens": summary["tokens"], "seconds": summary["seconds"],
            "tokens_per_sec": round(summary["tokens"] / summary["seconds"], 1)}


def time_log(path: Path) -> dict[str, Any]:
    text = path.read_text(errors="replace")
    out: dict[str, Any] = {}
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if wall:
        out["wall_clock"] = wall.group(1)
    if rss:
        out["peak_rss_gib"] = round(int(rss.group(1)) / 2**20, 2)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--cache", type=Path, help="the CODEDOJO_CACHE_DIR the run used (for the SFT figures)")
    parser.add_argument("--time-log", type=Path, help="stderr of `/usr/bin/time -v ./dev run ...`")
    args = parser.parse_args(argv)
    config = json.loads((args.run_dir / "config.json").read_text())
    result: dict[str, Any] = {
        "capability": capability("cpu"),
        "training_precision": str(compute_dtype(config["recipe"].get("bf16"), config["device"])).removeprefix("torch."),
        "grpo_steps": steps(args.run_dir / "metrics.jsonl"),
        "learning": json.loads((args.run_dir / "learning.json").read_text()),
    }
    if args.cache:
        result["sft"] = sft(args.cache)
    if args.time_log:
        result.update(time_log(args.time_log))
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
