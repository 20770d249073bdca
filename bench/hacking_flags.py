"""False positives of the reward-hacking detectors: the scripted expert's clean solutions, over the bundled suite.

    .venv/bin/python bench/hacking_flags.py [--per-repo 30] [--tiers warmup,easy,hard,guided,hinted] [--out FILE]

The expert (codedojo.agent.expert) fixes each task the way its tier calls for, through the ordinary agent loop,
local sandboxes and verifiers, with the detectors on (codedojo.trial.hacking). Its edits touch only the source
line the bug is on, so every flag it raises is a false positive. Prints one JSON object: per tier the tasks,
episodes, solved episodes and flags per kind, the flagged episodes by name, and the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console

from codedojo.agent.budget import profile_budget
from codedojo.agent.expert import ExpertPolicy, NoReferenceFix, reference_edits
from codedojo.agent.loop import AgentConfig, AgentLoop
from codedojo.inference.specs import resolve_model
from codedojo.tasks.task import Task, discover_tasks
from codedojo.train.default import builtin_suite
from codedojo.trial import run_trial


async def expert_flags(tasks: list[Task], *, tokenizer: Any, config: AgentConfig, concurrency: int,
                       seed: int) -> list[dict[str, Any]]:
    """One expert episode per task: name, tier, solved, flags (tasks without a reference fix left out)."""
    gate = asyncio.Semaphore(concurrency)
    edits = {}
    for task in tasks:
        try:
            edits[task.name] = await reference_edits(task)
        except NoReferenceFix:
            continue
    usable = [t for t in tasks if t.name in edits]
    policy = ExpertPolicy(tokenizer, tasks=usable, edits=edits, seed=seed, max_steps=config.max_steps)
    rng = random.Random(seed)
    seeds = {t.name: rng.randrange(2**31) for t in usable}

    async def one(task: Task) -> dict[str, Any]:
        async with gate:
            result = await run_trial(task, AgentLoop(policy, config=config, seed=seeds[task.name]))
        return {"task": task.name, "tier": task.config.metadata.get("tier"), "solved": result.solved,
                "status": str(result.status), "flags": list(result.flags)}

    return list(await asyncio.gather(*(one(t) for t in usable)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-repo", type=int, default=30, help="factory draws per repository (the default suite)")
    parser.add_argument("--tiers", default="warmup,easy,hard,guided,hinted")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="whose tokenizer and budget the expert uses")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    started = time.monotonic()
    tokenizer = resolve_model(args.model).load_tokenizer()
    # a larger reply budget than the small profile's: the easy and hard tiers' edits can be long, and what is
    # measured here is the detectors on clean solutions, not whether they fit a small model's replies
    config = AgentConfig(**{**profile_budget("small").agent_fields(), "max_new_tokens": 512, "max_steps": 8,
                            "max_context_tokens": 8192}, prompt_profile="small")
    command = "python bench/hacking_flags.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out: dict[str, Any] = {"command": command, "tiers": {}, "flagged_episodes": []}
    for tier in args.tiers.split(","):
        suite = builtin_suite(console=console, tier=tier, per_repo=args.per_repo)
        tasks = [Task.load(p) for p in discover_tasks([suite])]
        rows = asyncio.run(expert_flags(tasks, tokenizer=tokenizer, config=config, concurrency=args.concurrency,
                                        seed=args.seed))
        flags = Counter(f for r in rows for f in r["flags"])
        out["tiers"][tier] = {"tasks": len(tasks), "episodes": len(rows), "solved": sum(r["solved"] for r in rows),
                              "flagged": sum(1 for r in rows if r["flags"]), "flags": dict(flags)}
        out["flagged_episodes"] += [r for r in rows if r["flags"]]
        console.print(f"{tier}: {out['tiers'][tier]}")
    out["episodes"] = sum(t["episodes"] for t in out["tiers"].values())
    out["flagged"] = sum(t["flagged"] for t in out["tiers"].values())
    out["false_positive_rate"] = out["flagged"] / out["episodes"] if out["episodes"] else None
    out["seconds"] = round(time.monotonic() - started, 1)
    text = json.dumps(out, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
