"""Task rows: the JSONL lines every stage reads and writes, and the facets the stages group them by.

A row is `{prompt, label, metadata: {task_path, instance_id, repository, language, difficulty, ...}}`, as
`codedojo.config.AgentTaskDataset` reads it. `task_path` is relative to the JSONL file's folder when
the task lies under it, so a dataset folder can be moved or copied to a volume as a whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from codedojo.config.dataset import AgentTaskDataset
from codedojo.data.provenance import write_text_atomic

Row = dict[str, Any]
Stratum = tuple[str, str]
"""(language, difficulty): what the split and the samples balance."""

UNKNOWN = "unknown"


def load_rows(path: Path) -> list[Row]:
    """Every row of a dataset JSONL; errors name the file and line."""
    rows = list(AgentTaskDataset(path).rows())
    for number, row in enumerate(rows, start=1):
        if not isinstance(row.get("metadata"), dict) or not row["metadata"].get("task_path"):
            raise ValueError(f"{path}: row {number} has no metadata.task_path; write rows with `codedojo dataset`")
    keys = [row_key(r) for r in rows]
    if len(set(keys)) != len(keys):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"{path}: task {duplicate!r} appears more than once; every task must be listed once")
    return rows


def save_rows(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write rows as JSONL, atomically."""
    write_text_atomic(Path(path), "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in rows))
    return Path(path)


def metadata(row: Mapping[str, Any]) -> Mapping[str, Any]:
    value = row.get("metadata")
    return value if isinstance(value, Mapping) else {}


def row_key(row: Mapping[str, Any]) -> str:
    """The task's identity: metadata.instance_id, else the label (the task directory's name)."""
    return str(metadata(row).get("instance_id") or row.get("label") or "")


def repository(row: Mapping[str, Any]) -> str:
    """The repository the task comes from; the split never puts one repository on both sides."""
    repo = metadata(row).get("repository")
    if not repo:
        raise ValueError(f"task {row_key(row)!r} has no metadata.repository; a repository-disjoint split needs it "
                         "(ingest tasks whose task.toml [metadata] names their repository)")
    return str(repo)


def language(row: Mapping[str, Any]) -> str:
    return str(metadata(row).get("language") or UNKNOWN).lower()


def difficulty(row: Mapping[str, Any]) -> str:
    """metadata.difficulty (SWE-rebench: easy/medium/hard), else the bundled suite's tier."""
    meta = metadata(row)
    return str(meta.get("difficulty") or meta.get("tier") or UNKNOWN).lower()


def stratum(row: Mapping[str, Any]) -> Stratum:
    return (language(row), difficulty(row))


def task_dir(row: Mapping[str, Any], *, base: Path) -> Path:
    """The task directory a row names (relative paths are taken from `base`, the JSONL file's folder)."""
    path = Path(str(metadata(row).get("task_path") or ""))
    return path if path.is_absolute() else Path(base) / path
