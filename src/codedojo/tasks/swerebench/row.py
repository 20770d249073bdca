"""One SWE-rebench V2 row, decoded from whatever shape the dataset arrived in.

The same row can come as parquet structs (dicts and lists), as JSON, with struct columns re-serialised to
JSON strings (as some loaders do to get a stable Arrow schema), or as Python-literal strings (single
quotes). `parse_row` accepts all of them and raises `RowError` naming the column when a row cannot become
a task.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_REPO = re.compile(r"^[^/\s]+/[^/\s]+$")


class RowError(ValueError):
    """A row that cannot become a task; the message is the reason reported for skipping it."""


@dataclass(frozen=True, kw_only=True)
class SweRebenchRow:
    """The fields of a row that a task needs."""

    instance_id: str
    """"owner__repo-<PR>"."""
    repo: str
    """"Owner/Name"."""
    base_commit: str
    """Commit the image's repository is checked out at."""
    patch: str
    """The upstream fix (non-test files), applied by the oracle."""
    test_patch: str
    """The tests that decide the reward, applied by the verifier."""
    problem_statement: str
    """The issue text the agent is given."""
    interface: str
    """Signatures of new code the tests call (LLM-extracted; may be empty)."""
    fail_to_pass: tuple[str, ...]
    """Tests that fail before the fix and pass after it."""
    pass_to_pass: tuple[str, ...]
    """Tests that pass before and after."""
    image_name: str
    """Prebuilt image with the repository at `workdir`."""
    test_commands: tuple[str, ...]
    """`install_config.test_cmd`, run one after another in one shell."""
    log_parser: str
    """`install_config.log_parser`: the name of the parser that reads the test output."""
    language: str
    """Short language code (c, python, ts, ...)."""
    created_at: str | None
    """When the pull request was created, ISO 8601 in UTC."""
    difficulty: str | None
    """`meta.llm_metadata.difficulty` (easy, medium, hard)."""
    quality: str | None
    """`meta.llm_metadata.code`: "A" for a clean task, "B..." for known issues."""
    quality_flags: tuple[str, ...]
    """The `meta.llm_metadata.detected_issues` that are set (B1..B6)."""
    license: str | None
    """The source repository's license, when the row has it."""

    @property
    def workdir(self) -> str:
        """Where the image holds the repository: "/" + the name part of `repo`."""
        return "/" + self.repo.split("/", 1)[1]


def parse_row(raw: Mapping[str, Any]) -> SweRebenchRow:
    """Decode one dataset row; raises RowError with the reason it cannot become a task."""
    instance_id = _text(raw, "instance_id")
    if not instance_id:
        raise RowError("no instance_id")
    repo = _text(raw, "repo")
    if not _REPO.match(repo):
        raise RowError(f"repo {repo!r} is not of the form owner/name")
    install = _structured(raw.get("install_config"), "install_config")
    if install is None:
        install = {}
    if not isinstance(install, Mapping):
        raise RowError(f"install_config is a {type(install).__name__}, not a table")
    llm = _llm_metadata(raw.get("meta"))

    row = SweRebenchRow(
        instance_id=instance_id,
        repo=repo,
        base_commit=_text(raw, "base_commit"),
        patch=_text(raw, "patch"),
        test_patch=_text(raw, "test_patch"),
        problem_statement=_text(raw, "problem_statement"),
        interface=_text(raw, "interface"),
        fail_to_pass=_ids(raw.get("FAIL_TO_PASS"), "FAIL_TO_PASS"),
        pass_to_pass=_ids(raw.get("PASS_TO_PASS"), "PASS_TO_PASS"),
        image_name=_text(raw, "image_name"),
        test_commands=_commands(install.get("test_cmd")),
        log_parser=str(install.get("log_parser") or "").strip(),
        language=_text(raw, "language"),
        created_at=_timestamp(raw.get("created_at")),
        difficulty=_optional_text(llm.get("difficulty")),
        quality=_optional_text(llm.get("code")),
        quality_flags=_flags(llm.get("detected_issues")),
        license=_optional_text(raw.get("license")),
    )
    _check(row)
    return row


def _check(row: SweRebenchRow) -> None:
    if not row.image_name:
        raise RowError("no image_name (the prebuilt image the task runs in)")
    if not row.base_commit:
        raise RowError("no base_commit")
    if not row.test_patch.strip():
        raise RowError("no test_patch")
    if not row.patch.strip():
        raise RowError("no gold patch (column patch), so no reference solution")
    if not row.test_commands:
        raise RowError("no test command (install_config.test_cmd)")
    if not row.log_parser:
        raise RowError("no log parser (install_config.log_parser)")
    if not row.fail_to_pass and not row.pass_to_pass:
        raise RowError("no tests: FAIL_TO_PASS and PASS_TO_PASS are both empty")
    if not row.problem_statement.strip():
        raise RowError("empty problem_statement")
    for test_id in (*row.fail_to_pass, *row.pass_to_pass):
        if "\n" in test_id or "\r" in test_id:
            raise RowError(f"test id {test_id[:60]!r} contains a line break")


def _structured(value: Any, column: str) -> Any:
    """A struct or list column: as given, or decoded from a JSON or Python-literal string."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()  # numpy arrays from some loaders
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise RowError(f"column {column} is a string that is neither JSON nor a Python literal") from None


def _text(raw: Mapping[str, Any], column: str) -> str:
    value = raw.get(column)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RowError(f"column {column} is a {type(value).__name__}, not text")
    return (
        value.strip() if column in ("instance_id", "repo", "base_commit", "image_name", "language") else value
    )


def _optional_text(value: Any) -> str | None:
    if value is None:
        return None
    return str(value).strip() or None


def _ids(value: Any, column: str) -> tuple[str, ...]:
    value = _structured(value, column)
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise RowError(f"{column} is a {type(value).__name__}, not a list of test ids")
    if not all(isinstance(v, str) for v in value):
        raise RowError(f"{column} holds something other than test id strings")
    return tuple(value)


def _commands(value: Any) -> tuple[str, ...]:
    # One command as a plain string, or a list (possibly serialised as a JSON or Python list).
    if isinstance(value, str) and not value.lstrip().startswith("["):
        value = [value]
    value = _structured(value, "install_config.test_cmd")
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise RowError(f"install_config.test_cmd is a {type(value).__name__}, not a command list")
    return tuple(c for c in value if isinstance(c, str) and c.strip())


def _llm_metadata(meta: Any) -> Mapping[str, Any]:
    """`meta.llm_metadata` is a one-element list in the published rows and a dict in some exports."""
    meta = _structured(meta, "meta")
    if not isinstance(meta, Mapping):
        return {}
    llm = _structured(meta.get("llm_metadata"), "meta.llm_metadata")
    if isinstance(llm, list | tuple):
        llm = llm[0] if llm else None
    return llm if isinstance(llm, Mapping) else {}


def _flags(value: Any) -> tuple[str, ...]:
    value = _structured(value, "meta.llm_metadata.detected_issues")
    if isinstance(value, Mapping):
        return tuple(sorted(str(k) for k, v in value.items() if v))
    if isinstance(value, list | tuple):
        return tuple(sorted(str(v) for v in value))
    return ()


def _timestamp(value: Any) -> str | None:
    """Epoch milliseconds (as published), epoch seconds, a datetime, or text, as ISO 8601 UTC."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if abs(value) > 1e11 else value
        return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    text = str(value).strip()
    if text.isdigit():
        return _timestamp(int(text))
    return text or None
