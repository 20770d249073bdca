"""A GRPO run's training steps per curriculum tier, as a Markdown table read from its metrics.jsonl:

    .venv/bin/python bench/grpo_table.py docs/results/learning4/grpo_cur-metrics.jsonl [--json out.json]

One row per step: the episodes, pass rate and share of groups with mixed rewards of each tier that step
(the groups GRPO learns from), the curriculum's share of each tier, and the update's figures: the fraction of
trained tokens whose ratio the clip bound (how far the optimizer steps after the first moved the policy), the
mismatch KL (the engine's log-probabilities of the sampled tokens against the trainer's for the same weights:
precision, not learning), the policy's mean entropy over the trained tokens (runs from before it was logged
show "-") and the gradient norm. A tier with no episodes that step shows "-".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def train_rows(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "train"]


def tiers_of(rows: list[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for row in rows:
        for key in row:
            if key.startswith("tier/") and key.endswith("/episodes") and key.split("/")[1] not in seen:
                seen.append(key.split("/")[1])
    return seen


def per_step(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        entry: dict[str, Any] = {"step": row["step"] + 1, "episodes": row.get("rollout/episodes"),
                                 "reward": row.get("rollout/reward_mean"),
                                 "mixed": row.get("rollout/mixed_group_frac"),
                                 "clip_frac": row.get("train/clip_frac"), "kl": row.get("train/train_rollout_kl"),
                                 "entropy": row.get("train/entropy"), "grad_norm": row.get("train/grad_norm"),
                                 "tiers": {}}
        for tier in tiers_of(rows):
            entry["tiers"][tier] = {"episodes": row.get(f"tier/{tier}/episodes"),
                                    "pass_rate": row.get(f"tier/{tier}/pass_rate"),
                                    "mixed": row.get(f"tier/{tier}/mixed_group_frac"),
                                    "share": row.get(f"curriculum/{tier}/share")}
        out.append(entry)
    return out


def cell(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.{digits}f}"
    return str(int(value)) if isinstance(value, float) else str(value)


def markdown(steps: list[dict[str, Any]]) -> str:
    tiers = list(steps[0]["tiers"]) if steps else []
    head = ["step", "reward", "mixed"]
    for tier in tiers:
        head += [f"{tier} share", f"{tier} episodes", f"{tier} pass", f"{tier} mixed"]
    head += ["clip frac", "mismatch KL", "entropy", "grad norm"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in steps:
        cells = [str(s["step"]), cell(s["reward"]), cell(s["mixed"])]
        for tier in tiers:
            t = s["tiers"][tier]
            shown = t["episodes"] is not None and t["episodes"] > 0
            cells += [cell(t["share"]), cell(t["episodes"]) if shown else "0",
                      cell(t["pass_rate"]) if shown else "-", cell(t["mixed"]) if shown else "-"]
        cells += [cell(s["clip_frac"], 4), f"{s['kl']:.1e}" if s["kl"] is not None else "-", cell(s["entropy"], 3),
                  cell(s["grad_norm"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, help="a run's metrics.jsonl")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if not args.metrics.is_file():
        raise SystemExit(f"{args.metrics}: no such file (a run directory's metrics.jsonl)")
    steps = per_step(train_rows(args.metrics))
    if not steps:
        raise SystemExit(f"{args.metrics}: no training steps in it (rows of kind 'train')")
    if args.json:
        args.json.write_text(json.dumps({"metrics": str(args.metrics), "steps": steps}, indent=2) + "\n")
    print(markdown(steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
