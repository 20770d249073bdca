"""Shared by the tests that hold docs/reliability.md's tables to the suite: each row names a test that exists."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent
RELIABILITY = TESTS.parent / "docs" / "reliability.md"


def section(title: str) -> str:
    """The text of docs/reliability.md's `## title` section."""
    return RELIABILITY.read_text().split(f"## {title}", 1)[1].split("\n## ")[0]


def assert_rows_name_existing_tests(rows: list[str]) -> None:
    """Each table row's last cell names `file.py::test_name`, and that test is defined in tests/."""
    for row in rows:
        named = re.findall(r"(test_\w+\.py)::(test_\w+)", row.rstrip(" |").rsplit(" | ", 1)[-1])
        assert named, f"no test in: {row}"
        for file, name in named:
            assert re.search(rf"^def {name}\(", (TESTS / file).read_text(), re.M), f"{file}::{name} is gone"
