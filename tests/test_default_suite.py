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


def test_a_suite_of_some_repositories_holds_only_theirs_in_a_folder_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEDOJO_CACHE_DIR", str(tmp_path / "cache"))
    console = Console(file=io.StringIO())
    folder = default.builtin_suite(console=console, tier="guided", per_repo=3, repos=("unitconv", "moneybox"))
    assert "-moneybox+unitconv-" in folder.name  # not the all-repositories suite's folder
    tasks = [Task.load(p) for p in discover_tasks([folder])]
    assert tasks and {t.config.metadata["repository"] for t in tasks} == {"moneybox", "unitconv"}


def test_the_curriculum_main_job_trains_on_three_tiers_and_evaluates_on_warm_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codedojo.config import CurriculumConfig
    from data_support import make_answer_task

    def suite(*, console: Console, tier: str, per_repo: int) -> Path:  # 2 tasks per repository and tier
        folder = tmp_path / tier
        if not folder.is_dir():
            for repo in ("moneybox", "cachebox", "datecalc"):
                for i in range(2):
                    make_answer_task(folder, f"{repo}-{i:03d}-{tier}", repository=repo, tier=tier)
        return folder

    monkeypatch.setattr(default, "builtin_suite", suite)
    console = Console(stderr=True)
    train, held, curriculum = default.default_tasks("curriculum", console=console, quick=False)
    assert sorted({t.config.metadata["tier"] for t in train}) == ["guided", "hinted", "warmup"] and len(train) == 12
    assert {t.config.metadata["repository"] for t in train} == {"cachebox", "datecalc"}
    assert [t.name for t in held] == ["moneybox-000-warmup"]  # every other held-out task, of the warm-up tier
    assert curriculum == CurriculumConfig(tiers=("guided", "hinted", "warmup"), start=default.CURRICULUM_START)
    train, held, curriculum = default.default_tasks("hinted", console=console, quick=False)
    assert {t.config.metadata["tier"] for t in train} == {"hinted"} and curriculum is None
    assert [t.name for t in held] == ["moneybox-000-hinted"]
