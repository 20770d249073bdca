"""Append-only JSONL sidecars of finished work: how stages resume after an interruption.

A stage writes one line per finished unit (a task checked, an episode run) the moment it finishes, and
a rerun skips every key already there. The first line is a header holding the settings the work was
done with: resuming with other settings is an error, because mixing results of two settings would
silently corrupt the output. A line cut short by a crash is dropped when the journal is reopened.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HEADER = "_journal"


class JournalError(ValueError):
    """A journal cannot be resumed (other settings, or it is not a journal)."""


def open_journal(path: Path, *, settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The records of the journal at `path` (creating it with a header if missing).

    Raises JournalError when the journal was written with different `settings`.
    """
    path = Path(path)
    wanted = json.loads(json.dumps(settings, sort_keys=True, default=str))
    if not path.exists() or path.stat().st_size == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({HEADER: 1, "settings": wanted}, sort_keys=True) + "\n", encoding="utf-8")
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if not text.endswith("\n"):
        # The last line was being written when the process stopped: cut it off so appends stay whole.
        text = text[: len(text) - len(lines[-1])]
        path.write_text(text, encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not records or records[0].get(HEADER) != 1:
        raise JournalError(f"{path}: not a codedojo journal (no header line); move it away or pick another output")
    found = records[0].get("settings", {})
    if found != wanted:
        changed = sorted(k for k in set(found) | set(wanted) if found.get(k) != wanted.get(k))
        raise JournalError(
            f"{path} was written with other settings ({', '.join(changed)} differ); rerun with the same settings "
            "to resume, or delete the file (or choose another output) to start over"
        )
    return records[1:]


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append one finished unit; flushed at once, so an interruption loses at most the unit in flight."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        f.flush()
