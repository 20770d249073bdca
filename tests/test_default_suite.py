"""The embedded default's bundled suite: generated once in-process into the cache, then reused as is."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from codedojo.tasks.task import Task, discover_tasks
from codedojo.train import default


def test_the_suite_is_generated_once_and_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEDOJO_CACHE_DIR", str(tmp_path / "cache"))
    console = Console(file=io.StringIO())
    folder = default.builtin_suite(console=console, tier="guided", per_repo=3)
    assert folder.parent == tmp_path / "cache" / "builtin" and (folder / ".complete").is_file()
    tasks = [Task.load(p) for p in discover_tasks([folder])]
    assert tasks and {t.config.metadata["tier"] for t in tasks} == {"guided"}

    def must_not_run(argv: list[str]) -> int:
        raise AssertionError(f"generated again: {argv}")

    monkeypatch.setattr("codedojo.cli.main", must_not_run)
    assert default.builtin_suite(console=console, tier="guided", per_repo=3) == folder
