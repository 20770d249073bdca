"""Prefilter: keep the rows whose metadata matches, before anything is run.

Criteria come from the rows themselves (ingest copies them from task.toml [metadata]): language,
difficulty (or the bundled suite's tier), SWE-rebench's quality grade and flags, and the repository.
A task without a quality grade does not pass `min_grade`: asking for graded tasks means graded tasks.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codedojo.data.provenance import describe_input, write_provenance
from codedojo.data.rows import difficulty, language, load_rows, metadata, save_rows


@dataclass(frozen=True, kw_only=True)
class Criteria:
    """What a row must satisfy; an empty tuple (or None) places no condition."""

    languages: tuple[str, ...] = ()
    """Allowed languages (python, c, ts, ...)."""
    difficulties: tuple[str, ...] = ()
    """Allowed difficulties (easy, medium, hard) or tiers (warmup, easy, hard)."""
    min_grade: str | None = None
    """SWE-rebench quality grade this good or better: "A" keeps A, "B" keeps A and B."""
    exclude_flags: tuple[str, ...] = ()
    """Quality flags (B1..B6) that drop a task."""
    repositories: tuple[str, ...] = ()
    """Allowed repositories."""
    exclude_repositories: tuple[str, ...] = ()
    """Dropped repositories."""

    def reason_to_drop(self, row: Mapping[str, Any]) -> str | None:
        """Why `row` fails the criteria (the first failed condition), or None when it passes."""
        meta = metadata(row)
        if self.languages and language(row) not in {x.lower() for x in self.languages}:
            return "language"
        if self.difficulties and difficulty(row) not in {x.lower() for x in self.difficulties}:
            return "difficulty"
        if self.min_grade is not None:
            grade = str(meta.get("quality") or "")[:1].upper()
            if not grade:
                return "no quality grade"
            if grade > self.min_grade[:1].upper():
                return "quality grade"
        if self.exclude_flags and set(meta.get("quality_flags") or ()) & set(self.exclude_flags):
            return "quality flag"
        repo = str(meta.get("repository") or "")
        if self.repositories and repo not in self.repositories:
            return "repository"
        if repo in self.exclude_repositories:
            return "excluded repository"
        return None


def prefilter(source: Path, *, output: Path, criteria: Criteria) -> tuple[Path, dict[str, int]]:
    """Write the rows of `source` that pass `criteria` to `output`; returns it and the drop counts by reason."""
    rows = load_rows(source)
    kept, dropped = [], Counter[str]()
    for row in rows:
        reason = criteria.reason_to_drop(row)
        if reason is None:
            kept.append(row)
        else:
            dropped[reason] += 1
    if not kept:
        raise ValueError(f"no task of {source} passes the prefilter (dropped: {dict(dropped)}); loosen the criteria")
    save_rows(output, kept)
    write_provenance(output, stage="prefilter", inputs=[describe_input(source)],
                     settings=dataclasses.asdict(criteria),
                     counts={"input": len(rows), "kept": len(kept), "dropped": dict(dropped)})
    return Path(output), dict(dropped)
