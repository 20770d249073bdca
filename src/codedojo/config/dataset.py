"""Datasets of agent tasks: JSONL rows `{prompt, label, metadata: {task_path, ...}}`, as in the tutorial.

`DatasetConfig` is the tutorial's base class (input_key, label_key, apply_chat_template, rows);
`AgentTaskDataset` reads the JSONL files that `codedojo dataset` writes. Each row points at a Harbor task
directory through `metadata.task_path` (relative paths are taken from the JSONL file's folder).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class DatasetConfig(ABC):
    """A source of rows; subclass it and implement `rows` (the tutorial's contract)."""

    def input_key(self) -> str:
        return "prompt"

    def label_key(self) -> str:
        return "label"

    def apply_chat_template(self) -> bool:
        """False for agent tasks: the agent loop formats the conversation itself."""
        return False

    @abstractmethod
    def rows(self) -> Iterator[dict[str, Any]]:
        """The rows, each a dict with at least input_key() and metadata.task_path."""

    def task_paths(self) -> list[Path]:
        """Task directories of the rows, in order; errors name the row that lacks one."""
        base = getattr(self, "path", None)
        root = Path(base).parent if base is not None else Path.cwd()
        paths = []
        for i, row in enumerate(self.rows()):
            metadata = row.get("metadata") or {}
            task_path = metadata.get("task_path") if isinstance(metadata, dict) else None
            if not task_path:
                raise ValueError(f"{base or type(self).__name__}: row {i + 1} has no metadata.task_path (the task "
                                 "directory; rows are {prompt, label, metadata: {task_path}})")
            if not isinstance(task_path, str):
                raise ValueError(f"{base or type(self).__name__}: row {i + 1}: metadata.task_path is {task_path!r}, "
                                 "not a string (the task directory's path)")
            path = Path(task_path)
            paths.append(path if path.is_absolute() else root / path)
        return paths


class AgentTaskDataset(DatasetConfig):
    """Rows of a JSONL file, one task per line."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def rows(self) -> Iterator[dict[str, Any]]:
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such dataset file (write one with `codedojo dataset`)")
        with self.path.open("rb") as source:
            for number, raw in enumerate(source, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"{self.path}:{number}: not UTF-8 text (JSONL is UTF-8)") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{self.path}:{number}: not JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{self.path}:{number}: a row must be a JSON object")
                yield row

    def __repr__(self) -> str:
        return f"AgentTaskDataset({str(self.path)!r})"


def task_row(task_path: Path, *, instruction: str, metadata: dict[str, Any] | None = None,
             relative_to: Path | None = None) -> dict[str, Any]:
    """The JSONL row for one task: prompt (its instruction), label (its name), metadata.task_path."""
    path = Path(task_path)
    shown = str(path.relative_to(relative_to)) if relative_to is not None and path.is_relative_to(relative_to) \
        else str(path)
    return {"prompt": instruction, "label": path.name, "metadata": {**(metadata or {}), "task_path": shown}}
