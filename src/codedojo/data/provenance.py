"""Provenance records: what a stage read (with content hashes), with which settings, what it wrote.

Every output `<name>.jsonl` gets `<name>.provenance.json` beside it, so a subset can be traced back to
its source, the seed that split it and the model that probed it, and a changed input is visible as a
changed hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from codedojo import __version__

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_sha256(path: Path) -> str:
    """One hash over every file under `path`: relative names and contents, in sorted order.

    Symlinks count by their target text (they are not followed), so a tree hashes the same wherever it is.
    """
    root = Path(path)
    digest = hashlib.sha256()
    for item in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = item.relative_to(root).as_posix()
        content = os.readlink(item).encode() if item.is_symlink() else bytes.fromhex(file_sha256(item))
        digest.update(f"{len(rel)}:{rel}".encode())
        digest.update(b"L" if item.is_symlink() else b"F")
        digest.update(content)
    return digest.hexdigest()


def tasks_sha256(paths: Iterable[Path]) -> str:
    """One hash over several task directories (their names and trees), in the given order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{Path(path).name}={tree_sha256(Path(path))}\n".encode())
    return digest.hexdigest()


def describe_input(path: Path | str) -> dict[str, Any]:
    """A file or folder with its content hash; anything else (a dataset name) as given."""
    p = Path(path)
    if p.is_file():
        return {"path": str(p), "sha256": file_sha256(p)}
    if p.is_dir():
        return {"path": str(p), "tree_sha256": tree_sha256(p)}
    return {"name": str(path)}


def provenance_path(output: Path) -> Path:
    """`<name>.provenance.json` beside `<name>.jsonl` (or `<name>.json`)."""
    output = Path(output)
    name = output.name.removesuffix(".jsonl").removesuffix(".json")
    return output.with_name(name + ".provenance.json")


def write_provenance(
    output: Path,
    *,
    stage: str,
    inputs: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
    counts: Mapping[str, Any],
    seed: int | None = None,
    model: str | None = None,
) -> Path:
    """Write the provenance record of `output` and return its path."""
    output = Path(output)
    record = {
        "stage": stage,
        "output": output.name,
        "output_sha256": file_sha256(output) if output.is_file() else None,
        "inputs": list(inputs),
        "seed": seed,
        "model": model,
        "settings": dict(settings),
        "counts": dict(counts),
        "codedojo_version": __version__,
        "python": platform.python_version(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = provenance_path(output)
    write_text_atomic(path, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    return path


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)
