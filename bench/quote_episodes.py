"""Real episodes to quote beside a before/after figure: held-out tasks the later model solved and the earlier one
never did, and tasks both failed, read from two evaluations' trajectory folders:

    .venv/bin/python bench/quote_episodes.py BEFORE_DIR AFTER_DIR [--solved 1] [--failed 1] [--seed 0]

BEFORE_DIR and AFTER_DIR are `evaluate(..., trajectory_dir=)` folders (one `<task>-s<seed>.json` trajectory per
episode, as bench/learning.py keeps them beside each eval_<arm>_<tier>.json, or unpacked from its
trajectories/<eval>.tar.gz). A task counts as solved by a model when any of its episodes has reward 1. The picks
are drawn at random (--seed) among the tasks that qualify, and the counts of each kind are printed first, so a
quote is one of a stated number, not a chosen best. Each episode is printed as Markdown: the task statement and
every turn after it (the prompt's fixed opening and worked example are left out), with its status and reward.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def episodes_by_task(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every trajectory in `folder`, grouped by task, each task's episodes in file-name order."""
    if not folder.is_dir():
        raise SystemExit(f"{folder}: not a folder (an evaluation's trajectory folder)")
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if data.get("format", "").startswith("codedojo-trajectory") and "task_name" in data:
            out.setdefault(data["task_name"], []).append(data)
    if not out:
        raise SystemExit(f"{folder}: no trajectory files in it (<task>-s<seed>.json)")
    return out


def solved(episodes: list[dict[str, Any]]) -> bool:
    return any((e.get("reward") or 0.0) >= 1.0 for e in episodes)


def task_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages from the task statement on: after the system prompt and, where the prompt opens with a worked
    example that ends in a submission, after that example."""
    start = 1 if messages and messages[0].get("role") == "system" else 0
    for i, m in enumerate(messages[:-1]):
        if m.get("role") == "assistant" and SUBMIT in (m.get("content") or ""):
            return messages[i + 1:]
    return messages[start:]


def markdown(label: str, episode: dict[str, Any]) -> str:
    lines = [f"#### {label}: {episode['task_name']} ({episode['episode_id']}), status {episode.get('status')}, "
             f"reward {episode.get('reward')}", ""]
    for m in task_turns(episode.get("messages") or []):
        who = "agent" if m.get("role") == "assistant" else "environment"
        body = (m.get("content") or "").rstrip()
        lines += [f"**{who}**:", "", "```", body.replace("```", "'''"), "```", ""]
    return "\n".join(lines)


def kinds_of(before: dict[str, list[dict[str, Any]]], after: dict[str, list[dict[str, Any]]]
             ) -> dict[str, list[str]]:
    """The tasks of both evaluations by what happened to them: solved only after, only before, by neither, by
    both (sorted names)."""
    common = sorted(before.keys() & after.keys())
    return {"gained": [t for t in common if solved(after[t]) and not solved(before[t])],
            "lost": [t for t in common if solved(before[t]) and not solved(after[t])],
            "both_failed": [t for t in common if not solved(before[t]) and not solved(after[t])],
            "both_solved": [t for t in common if solved(before[t]) and solved(after[t])]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--solved", type=int, default=1, help="how many tasks to quote that only AFTER solved")
    parser.add_argument("--failed", type=int, default=1, help="how many tasks to quote that both failed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    before, after = episodes_by_task(args.before), episodes_by_task(args.after)
    kinds = kinds_of(before, after)
    rng = random.Random(args.seed)
    print(f"{len(before.keys() & after.keys())} tasks in both: " + ", ".join(
        f"{len(names)} {kind.replace('_', ' ')}" for kind, names in kinds.items()) + "\n")
    for kind, count in (("gained", args.solved), ("both_failed", args.failed)):
        for task in rng.sample(kinds[kind], min(count, len(kinds[kind]))):
            episode = next((e for e in after[task] if (e.get("reward") or 0.0) >= 1.0), after[task][0])
            print(markdown(f"{kind.replace('_', ' ')}, after", episode))
            print(markdown(f"{kind.replace('_', ' ')}, before", before[task][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
