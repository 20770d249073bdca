"""A Markdown table of a generated suite: tasks per repository, tier and bug kind (from task.toml)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from codedojo.tasks.config import load_task_config
from codedojo.tasks.factory.operators import OPERATORS
from codedojo.tasks.factory.statements import TIERS


def _rows(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def suite_table(dirs: Sequence[Path]) -> str:
    """Markdown tables for every task directory directly under `dirs`."""
    metas = []
    for d in dirs:
        for toml in sorted(Path(d).glob("*/task.toml")):
            metas.append(load_task_config(toml).metadata)
    repos = sorted({m["repository"] for m in metas})
    by_repo_tier = Counter((m["repository"], m["tier"]) for m in metas)
    by_repo_kind = Counter((m["repository"], m["bug_kind"]) for m in metas)
    kinds = [k for k in OPERATORS if any(m["bug_kind"] == k for m in metas)]
    out = [f"{len(metas)} tasks from {len(repos)} repositories.", "", "Per repository and tier:", ""]
    rows = [[r, *(by_repo_tier[r, t] for t in TIERS), sum(by_repo_tier[r, t] for t in TIERS)] for r in repos]
    rows.append(["**total**", *(sum(by_repo_tier[r, t] for r in repos) for t in TIERS), len(metas)])
    out += _rows(["repository", *TIERS, "total"], rows)
    out += ["", "Per repository and bug kind:", ""]
    rows = [[r, *(by_repo_kind[r, k] for k in kinds)] for r in repos]
    rows.append(["**total**", *(sum(by_repo_kind[r, k] for r in repos) for k in kinds)])
    out += _rows(["repository", *kinds], rows)
    return "\n".join(out) + "\n"
