"""Where SWE-rebench V2 rows come from: a local parquet, JSON or JSONL file, or a Hugging Face dataset.

pyarrow and datasets are imported only when a parquet file or a dataset name is given, so converting a
JSON file needs neither.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATASET = "nebius/SWE-rebench-V2"
"""The published dataset."""

_DATASET_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class SourceError(ValueError):
    """The input cannot be read as rows; the message names it and what would work."""


def read_rows(source: str | os.PathLike[str], *, split: str = "train") -> Iterator[dict[str, Any]]:
    """Rows of a .parquet, .json (a list of rows) or .jsonl file, or of a Hugging Face dataset `split`."""
    path = Path(source)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            return _parquet_rows(path)
        if suffix in (".jsonl", ".ndjson"):
            return _jsonl_rows(path)
        if suffix == ".json":
            return iter(_json_rows(path))
        raise SourceError(f"{path}: unknown file type {suffix!r}; give a .parquet, .json or .jsonl file")
    if path.exists():
        raise SourceError(f"{path} is not a file; give a .parquet, .json or .jsonl file or a dataset name")
    if _DATASET_NAME.match(str(source)) and not str(source).startswith((".", "/")):
        return _hub_rows(str(source), split=split)
    raise SourceError(f"{source}: no such file, and not a Hugging Face dataset name like {DATASET}")


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError(
            f"{path}: reading parquet needs pyarrow; install it with pip install 'codedojo[swe-rebench]'"
        ) from None
    for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
        yield from batch.to_pylist()


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SourceError(f"{path}:{number}: not a JSON object: {e}") from None
            if not isinstance(row, dict):
                raise SourceError(f"{path}:{number}: a row must be a JSON object, got {type(row).__name__}")
            yield row


def _json_rows(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SourceError(f"{path}: not valid JSON: {e}") from None
    if isinstance(data, dict):
        # The datasets-server "rows" response wraps each row as {"row": {...}}.
        data = [r.get("row", r) for r in data["rows"]] if isinstance(data.get("rows"), list) else [data]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise SourceError(f"{path}: expected a JSON list of row objects")
    return data


def _hub_rows(name: str, *, split: str) -> Iterator[dict[str, Any]]:
    try:
        import datasets
    except ImportError:
        raise SourceError(
            f"{name}: loading a Hugging Face dataset needs the datasets package (pip install datasets), "
            "or download the parquet file and pass its path"
        ) from None
    # Streaming reads rows as they arrive, so a --limit run does not download all 32k rows first.
    yield from datasets.load_dataset(name, split=split, streaming=True)
