"""Ingest: the bundled suite (resumable per repository), a folder of Harbor tasks, SWE-rebench V2 rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codedojo.data.ingest import ingest_builtin, ingest_folder, ingest_swerebench
from codedojo.data.rows import load_rows
from codedojo.tasks.factory import pipeline
from codedojo.tasks.swerebench import convert
from data_support import make_answer_task

FIXTURE = Path(__file__).parent / "fixtures" / "swerebench" / "swe_rebench_v2_sample.json"


def test_an_interrupted_bundled_suite_resumes_with_the_unfinished_repositories(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "builtin"
    real = pipeline.find_candidates
    generated: list[str] = []

    def interrupted(repo: Any, **kwargs: Any) -> Any:
        if generated:
            raise KeyboardInterrupt  # stopped while the second repository was being generated
        generated.append(repo.name)
        return real(repo, **kwargs)

    monkeypatch.setattr(pipeline, "find_candidates", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ingest_builtin(root=root, limit=2, repositories=("textkit", "unitconv"))

    def counted(repo: Any, **kwargs: Any) -> Any:
        generated.append(repo.name)
        return real(repo, **kwargs)

    monkeypatch.setattr(pipeline, "find_candidates", counted)
    out = ingest_builtin(root=root, limit=2, repositories=("textkit", "unitconv"))
    assert generated == ["textkit", "unitconv"]  # textkit was not generated again
    rows = load_rows(out)
    assert [r["metadata"]["repository"] for r in rows] == ["textkit", "unitconv"]
    meta = rows[0]["metadata"]
    assert meta["language"] == "python" and meta["difficulty"] == meta["tier"]
    assert (root / meta["task_path"] / "task.toml").is_file() and not Path(meta["task_path"]).is_absolute()
    assert sorted(p.name for p in (root / "tasks").iterdir()) == sorted(r["label"] for r in rows)
    provenance = json.loads((root / "all.provenance.json").read_text())
    assert provenance["inputs"][0]["bundled_repositories_tree_sha256"] and provenance["counts"]["tasks"] == 2


def test_a_folder_of_tasks_is_listed_in_place_and_invalid_ones_left_out(tmp_path: Path) -> None:
    folder = tmp_path / "harbor"
    make_answer_task(folder, "one", repository="r1")
    make_answer_task(folder, "two", repository="r2")
    (folder / "two" / "tests" / "test.sh").unlink()  # solve.sh is optional (only the oracle needs it)
    out = ingest_folder(folder, root=tmp_path / "data")
    rows = load_rows(out)
    assert [r["label"] for r in rows] == ["one"]
    assert Path(rows[0]["metadata"]["task_path"]) == (folder / "one").resolve()
    provenance = json.loads((tmp_path / "data" / "all.provenance.json").read_text())
    assert provenance["counts"] == {"tasks": 1, "invalid": 1} and provenance["inputs"][0]["tree_sha256"]


def test_swe_rebench_rows_are_converted_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "swe"
    out = ingest_swerebench(FIXTURE, root=root)
    rows = load_rows(out)
    assert len(rows) == 1
    meta = rows[0]["metadata"]
    assert (meta["instance_id"], meta["repository"], meta["language"], meta["quality"]) == (
        "unidata__netcdf-c-1925", "Unidata/netcdf-c", "c", "A")
    calls: list[Any] = []
    monkeypatch.setattr(convert, "convert_row", lambda *a, **k: calls.append(a))
    assert load_rows(ingest_swerebench(FIXTURE, root=root)) == rows and calls == []


def test_a_curriculum_tier_is_ingested_as_the_factory_cli_writes_it(tmp_path: Path) -> None:
    from codedojo.cli import main

    out = ingest_builtin(root=tmp_path / "data", tier="guided", per_repo=6, seed=3, repositories=("moneybox",),
                         workers=1)
    assert main(["tasks", "builtin", "--repo", "moneybox", "--per-repo", "6", "--seed", "3", "--workers", "1",
                 "--tier", "guided", "--out", str(tmp_path / "cli")]) == 0
    rows = load_rows(out)
    names = sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert sorted(r["label"] for r in rows) == names and names  # the warm-up bugs, restated; nothing else
    assert {r["metadata"]["tier"] for r in rows} == {"guided"}
    for name in names:
        ingested, written = tmp_path / "data" / "tasks" / name, tmp_path / "cli" / name
        assert (ingested / "instruction.md").read_bytes() == (written / "instruction.md").read_bytes()
