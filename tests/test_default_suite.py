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


def test_the_eval_size_spreads_its_tasks_over_the_held_out_repositories(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--eval-size TASKSxN: a count the main job's suite holds is spread over its held-out share; a larger one is
    drawn from a suite of the held-out repositories alone, with enough bugs per repository."""
    from data_support import make_answer_task

    asked: list[tuple[str, int, tuple[str, ...]]] = []

    def suite(*, console: Console, tier: str, per_repo: int, repos: tuple[str, ...] = ()) -> Path:
        asked.append((tier, per_repo, repos))
        folder = tmp_path / f"{tier}-{per_repo}-{'+'.join(repos)}"
        if not folder.is_dir():
            for repo in repos or (*default.HELD_OUT_REPOSITORIES, "cachebox"):
                for i in range(per_repo // 3):  # a third of the draws are a tier's
                    make_answer_task(folder, f"{repo}-{i:03d}-{tier}", repository=repo, tier=tier)
        return folder

    monkeypatch.setattr(default, "builtin_suite", suite)
    console = Console(stderr=True)
    _, held, _ = default.default_tasks("guided", console=console, quick=False)
    assert len(held) == 8 and asked == [("guided", 12, ())]  # the default: every other one of the 16
    _, six, _ = default.default_tasks("guided", console=console, quick=False, eval_tasks=6)
    assert len(six) == 6 and {t.config.metadata["repository"] for t in six} == set(default.HELD_OUT_REPOSITORIES)
    asked.clear()
    _, big, _ = default.default_tasks("guided", console=console, quick=False, eval_tasks=48)
    assert asked == [("guided", 12, ()), ("guided", 36, default.HELD_OUT_REPOSITORIES)]
    assert len(big) == len({t.name for t in big}) == 48
    assert {t.config.metadata["repository"] for t in big} == set(default.HELD_OUT_REPOSITORIES)
    _, some, _ = default.default_tasks("guided", console=console, quick=False, eval_tasks=41)
    assert len(some) == 41  # 33 draws a repository hold 44: 41 of them, spread


def test_the_eval_size_is_tasks_x_n_and_a_bad_one_names_the_form() -> None:
    assert default.parse_eval_size("48x2") == (48, 2) and default.parse_eval_size("8X1") == (8, 1)
    for bad in ("48", "0x2", "4x0", "ax2", "4x-1"):
        with pytest.raises(ValueError, match="expected TASKSxN"):
            default.parse_eval_size(bad)


def test_the_main_job_evaluates_its_base_model_and_names_the_three_stages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_default's TrainConfig: the warm start as the model, the base model as the baseline, the summary's
    names base / after SFT / after GRPO, and --eval-size's n on the eval set."""
    from codedojo.config import TrainConfig
    from data_support import make_answer_task

    folder = tmp_path / "suite"
    for repo in ("moneybox", "cachebox"):
        for i in range(2):
            make_answer_task(folder, f"{repo}-{i:03d}-guided", repository=repo, tier="guided")
    tasks = [Task.load(p) for p in discover_tasks([folder])]
    train = [t for t in tasks if t.config.metadata["repository"] == "cachebox"]
    held = [t for t in tasks if t.config.metadata["repository"] == "moneybox"]
    monkeypatch.setattr(default, "default_tasks", lambda tier, **kw: (train, held[:kw["eval_tasks"] or 1], None))
    monkeypatch.setattr(default, "warm_start", lambda **kw: tmp_path / "sft" / "final")
    launched: list[TrainConfig] = []
    monkeypatch.setattr(TrainConfig, "launch", lambda self, **kw: launched.append(self))
    default.run_default(run_dir=tmp_path / "run", overrides={}, device="cpu", quick=False, model=None,
                        eval_size=(2, 3))
    config = launched[0]
    assert config.baseline == default.DEFAULT_MODEL and config.stage_names == ("base", "after SFT", "after GRPO")
    assert config.recipe.eval_config is not None
    assert config.recipe.eval_config.defaults.n_samples_per_eval_prompt == 3
    assert (tmp_path / "run" / "data" / "eval.jsonl").read_text().count("\n") == 2


def test_eval_size_is_refused_with_a_dataset_and_when_malformed(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from codedojo.cli import main

    assert main(["train", "--dataset", str(tmp_path / "train.jsonl"), "--eval-size", "8x1"]) == 2
    assert "--eval-size applies to the embedded default" in capsys.readouterr().err
    assert main(["train", "--eval-size", "8"]) == 2
    assert "expected TASKSxN" in capsys.readouterr().err
