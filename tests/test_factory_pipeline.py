"""End to end on small inputs: synth on a repository the factory has never seen, grading (nop, oracle,
tampering), determinism of the bundled suite, and the suite table."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from codedojo.cli import main
from codedojo.tasks.factory.pipeline import BUILTIN_REPOS
from codedojo.tasks.factory.report import suite_table
from codedojo.tasks.factory.repository import RepositoryError, scan_repository
from codedojo.tasks.factory.testrun import default_python
from codedojo.tasks.task import Task

TINY_REPO = {
    "tally/__init__.py": "",
    "tally/core.py": '''\
        def clamp(x, lo, hi):
            """x limited to [lo, hi]."""
            if x < lo:
                return lo
            if x > hi:
                return hi
            return x


        def mean(xs):
            if not xs:
                raise ValueError("mean of nothing")
            return sum(xs) / len(xs)


        def tally(words):
            counts = {}
            for word in words:
                key = word.strip().lower()
                counts[key] = counts.get(key, 0) + 1
            return counts
        ''',
    "tests/test_core.py": '''\
        import pytest

        from tally.core import clamp, mean, tally


        def test_clamp_inside():
            assert clamp(5, 0, 10) == 5


        def test_clamp_low():
            assert clamp(-3, 0, 10) == 0


        def test_clamp_high():
            assert clamp(12, 0, 10) == 10


        def test_clamp_edges():
            assert clamp(0, 0, 10) == 0
            assert clamp(10, 0, 10) == 10


        def test_mean():
            assert mean([1, 2, 3, 6]) == 3


        def test_mean_empty():
            with pytest.raises(ValueError):
                mean([])


        def test_tally():
            assert tally(["A", "b ", "a"]) == {"a": 2, "b": 1}
        ''',
    "README.md": "tally: a tiny library\n",
}


def make_repo(root: Path) -> Path:
    for rel, text in TINY_REPO.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def grade(task: Task, workspace: Path, tmp: Path) -> dict[str, float]:
    reward = tmp / "reward.json"
    subprocess.run(
        [default_python(), "-I", str(task.tests_dir / "grade.py"), "--spec", str(task.tests_dir / "spec.json"),
         "--reward", str(reward), "--workdir", str(workspace)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return json.loads(reward.read_text())


@pytest.fixture(scope="module")
def synth_tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    tmp = tmp_path_factory.mktemp("synth")
    repo = make_repo(tmp / "tally-repo")
    out = tmp / "tasks"
    assert main(["tasks", "synth", "--repo", str(repo), "--out", str(out), "--limit", "3", "--name", "tally"]) == 0
    return [Task.load(p) for p in sorted(out.iterdir())]


def test_synth_makes_valid_tasks_with_metadata(synth_tasks: list[Task]):
    assert [t.name for t in synth_tasks] == sorted(t.name for t in synth_tasks)
    assert len(synth_tasks) == 3
    for task in synth_tasks:
        meta = task.config.metadata
        assert meta["repository"] == "tally" and meta["source"] == "codedojo-synth"
        assert meta["tier"] in ("warmup", "easy", "hard") and meta["tier"] in task.name
        assert meta["FAIL_TO_PASS"] and meta["PASS_TO_PASS"]
        assert not set(meta["FAIL_TO_PASS"]) & set(meta["PASS_TO_PASS"])
        assert meta["file"] == "tally/core.py"
        assert task.config.environment.network_mode == "no-network"
        buggy = (task.environment_dir / "repo" / "tally/core.py").read_text()
        assert buggy != textwrap.dedent(TINY_REPO["tally/core.py"])
        assert (task.environment_dir / "repo/tests/test_core.py").exists()  # the agent sees the tests
        assert "FROM python:3.11-slim" in task.dockerfile.read_text()
        assert "Do not change the tests" in task.instruction or "not the tests" in task.instruction


def test_grading_nop_oracle_and_tampering(synth_tasks: list[Task], tmp_path: Path):
    for i, task in enumerate(synth_tasks):
        nop = tmp_path / f"nop{i}"
        shutil.copytree(task.environment_dir / "repo", nop)
        scores = grade(task, nop, tmp_path)
        assert scores["reward"] == 0.0 and scores["fail_to_pass"] < 1.0

        oracle = tmp_path / f"oracle{i}"
        shutil.copytree(task.environment_dir / "repo", oracle)
        subprocess.run(["bash", str(task.solution_dir / "solve.sh")], cwd=oracle, check=True)
        assert grade(task, oracle, tmp_path) == {"reward": 1.0, "fail_to_pass": 1.0, "pass_to_pass": 1.0}

        cheat = tmp_path / f"cheat{i}"
        shutil.copytree(task.environment_dir / "repo", cheat)
        (cheat / "tests/test_core.py").write_text("def test_clamp_inside():\n    pass\n")
        (cheat / "conftest.py").write_text(
            "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
        )
        (cheat / "pytest.ini").write_text("[pytest]\naddopts = -p no:python\n")
        assert grade(task, cheat, tmp_path)["reward"] == 0.0


def test_synth_refuses_a_directory_without_tests(tmp_path: Path):
    (tmp_path / "lib.py").write_text("x = 1\n")
    with pytest.raises(RepositoryError, match="no test files"):
        scan_repository(tmp_path)
    assert main(["tasks", "synth", "--repo", str(tmp_path), "--out", str(tmp_path / "out")]) == 2


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_builtin_is_deterministic_and_a_limit_is_a_prefix(tmp_path: Path):
    args = ["tasks", "builtin", "--repo", "cachebox", "--repo", "textkit", "--limit", "2", "--seed", "7", "--no-cache"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b"), "--workers", "1"]) == 0
    first, second = tree_bytes(tmp_path / "a"), tree_bytes(tmp_path / "b")
    assert first == second
    names = sorted({k.split("/")[0] for k in first})
    assert len(names) == 2 and {n.split("-")[0] for n in names} == {"cachebox", "textkit"}
    assert main(["tasks", "builtin", "--repo", "cachebox", "--limit", "1", "--seed", "7", "--no-cache",
                 "--out", str(tmp_path / "c")]) == 0  # fmt: skip
    assert tree_bytes(tmp_path / "c") == {k: v for k, v in first.items() if k.startswith("cachebox-")}


def test_table_counts_tiers_and_kinds(synth_tasks: list[Task]):
    text = suite_table([synth_tasks[0].path.parent])
    assert text.startswith("3 tasks from 1 repositories.")
    assert "| tally |" in text and "| **total** |" in text


def test_bundled_repositories_are_complete():
    names = sorted(p.name for p in BUILTIN_REPOS.iterdir() if p.is_dir())
    assert len(names) >= 12
    for name in names:
        repo = scan_repository(BUILTIN_REPOS / name)
        assert repo.test_files and repo.source_files
        assert not any("__pycache__" in f for f in repo.files)


def test_tasks_check_oracle_one_nop_zero_in_the_sandbox(synth_tasks: list[Task]):
    import asyncio

    from codedojo.trial.check import check_tasks

    reports, _ = asyncio.run(check_tasks([t.path for t in synth_tasks], workers=2))
    assert [(r.oracle_reward, r.nop_reward, r.problem) for r in reports] == [(1.0, 0.0, None)] * len(synth_tasks)


def test_curriculum_tiers_restate_the_warmup_bugs_deterministically(tmp_path: Path):
    from codedojo.tasks.task import Task as LoadedTask

    base = ["tasks", "builtin", "--repo", "moneybox", "--per-repo", "6", "--seed", "3", "--workers", "1"]
    assert main([*base, "--tier", "warmup", "--out", str(tmp_path / "warmup")]) == 0
    assert main([*base, "--tier", "guided", "--out", str(tmp_path / "guided")]) == 0
    assert main([*base, "--tier", "guided", "--out", str(tmp_path / "again"), "--no-cache"]) == 0
    assert main([*base, "--tier", "hinted", "--out", str(tmp_path / "hinted")]) == 0
    assert tree_bytes(tmp_path / "guided") == tree_bytes(tmp_path / "again")
    warmup = sorted(p.name for p in (tmp_path / "warmup").iterdir())
    for tier in ("guided", "hinted"):
        names = sorted(p.name for p in (tmp_path / tier).iterdir())
        assert names == [n.replace("-warmup", f"-{tier}") for n in warmup] and names
        for name in names:
            restated = LoadedTask.load(tmp_path / tier / name)
            original = LoadedTask.load(tmp_path / "warmup" / name.replace(f"-{tier}", "-warmup"))
            assert restated.config.metadata["tier"] == tier
            # same bug, same tests: only the statement differs
            for rel in ("tests/test.sh", "solution/solve.sh"):
                assert (restated.path / rel).read_bytes() == (original.path / rel).read_bytes()
            assert restated.instruction != original.instruction


def test_curriculum_tiers_pass_oracle_one_nop_zero(tmp_path: Path):
    import asyncio

    from codedojo.trial.check import check_tasks

    for tier in ("guided", "hinted"):
        assert main(["tasks", "builtin", "--repo", "textkit", "--per-repo", "6", "--tier", tier, "--workers", "1",
                     "--out", str(tmp_path / tier)]) == 0
    paths = sorted(p for tier in ("guided", "hinted") for p in (tmp_path / tier).iterdir())
    reports, _ = asyncio.run(check_tasks(paths, workers=2))
    assert paths and [(r.oracle_reward, r.nop_reward, r.problem) for r in reports] == [(1.0, 0.0, None)] * len(paths)


def test_a_repositorys_candidates_are_searched_once_and_any_quota_they_cover_is_served_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The curriculum tiers restate the same bugs: the second tier (and a smaller quota) reuses the first's
    search, with the same tasks as a fresh search; a corrupt cache file is searched again."""
    from codedojo.tasks.factory import pipeline

    searches: list[int] = []
    real = pipeline.find_candidates

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        searches.append(kwargs["quota"])
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "find_candidates", counted)
    monkeypatch.setenv("CODEDOJO_CACHE_DIR", str(tmp_path / "cache"))  # not the session's, which other tests fill
    base = ["tasks", "builtin", "--repo", "moneybox", "--per-repo", "6", "--seed", "3", "--workers", "1"]
    assert main([*base, "--tier", "warmup", "--out", str(tmp_path / "warmup")]) == 0
    assert main([*base, "--tier", "hinted", "--out", str(tmp_path / "hinted")]) == 0
    assert main([*base[:5], "4", *base[6:], "--tier", "hinted", "--out", str(tmp_path / "fewer")]) == 0
    assert searches == [6]  # one search; the hinted tier and the smaller quota came from the cache
    assert main([*base, "--tier", "hinted", "--out", str(tmp_path / "fresh"), "--no-cache"]) == 0
    assert searches == [6, 6]
    assert tree_bytes(tmp_path / "hinted") == tree_bytes(tmp_path / "fresh")
    fewer = tree_bytes(tmp_path / "fewer")
    assert fewer and fewer == {k: v for k, v in tree_bytes(tmp_path / "fresh").items() if k.split("/")[0] in
                               {name.split("/")[0] for name in fewer}}
    (cached,) = (tmp_path / "cache" / "factory-candidates").glob("moneybox-*.pickle")
    cached.write_bytes(b"not a pickle")
    assert main([*base, "--tier", "guided", "--out", str(tmp_path / "guided")]) == 0
    assert searches == [6, 6, 6]  # searched again, and the file replaced
    assert main([*base, "--tier", "guided", "--out", str(tmp_path / "guided2")]) == 0
    assert searches == [6, 6, 6]
