"""A converted task's solve.sh and test.sh, run for real with bash on a small git repository.

The test builds the repository the way a SWE-rebench V2 image holds one (checked out at the base commit,
where `add` has a bug), describes it in a V2 row whose gold patch fixes the bug and whose test patch adds
the tests, converts the row, and runs the scripts outside a container (CODEDOJO_WORKDIR and
CODEDOJO_LOGS_DIR point them at temporary directories)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codedojo.tasks.swerebench.convert import convert_row
from codedojo.tasks.task import Task

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None,
                                reason="needs git and bash")

# A shell project whose test scripts print automake-style "PASS: name" lines (graded by parse_log_jq).
SHELL_PROJECT = {
    "buggy": {"calc.sh": "add() { echo $(($1 - $2)); }\nmul() { echo $(($1 * $2)); }\n"},
    "old_tests": {"tests/check.sh": 'status=0\ncheck() {\n    if [ "$2" = "$3" ]; then echo "PASS: $1"; '
                  'else echo "FAIL: $1"; status=1; fi\n}\n',
                  "tests/run_calc.sh": ". ./calc.sh\n. tests/check.sh\ncheck mul \"$(mul 2 3)\" 6\nexit $status\n"},
    "new_tests": {"tests/run_calc.sh": ". ./calc.sh\n. tests/check.sh\ncheck mul \"$(mul 2 3)\" 6\n"
                  'check add "$(add 2 2)" 4\nexit $status\n',
                  "tests/run_extra.sh": ". ./calc.sh\n. tests/check.sh\ncheck negative \"$(add -1 -1)\" -2\n"
                  "exit $status\n"},
    "parser": "parse_log_jq",
    # Two commands: the first one failing must not keep the second from running.
    "commands": ["sh tests/run_calc.sh", "sh tests/run_extra.sh"],
    "fail_to_pass": ["add", "negative"],
    "pass_to_pass": ["mul"],
}

# The same bug in Python, graded from pytest's -rA summary (parse_log_pytest).
PYTHON_PROJECT = {
    "buggy": {"calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"},
    "old_tests": {"tests/test_calc.py": "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"},
    "new_tests": {"tests/test_calc.py": "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
                  "\n\ndef test_add():\n    assert add(2, 2) == 4\n"},
    "parser": "parse_log_pytest",
    "commands": [f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {shlex.quote(sys.executable)} -m pytest -rA -p no:cacheprovider "
                 "tests"],
    "fail_to_pass": ["tests/test_calc.py::test_add"],
    "pass_to_pass": ["tests/test_calc.py::test_mul"],
}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD").strip()


def _origin(root: Path, project: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The repository at its base commit (where add has a bug), and the V2 row describing bug, fix and tests."""
    repo = root / "calc"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _commit(repo, {**project["old_tests"], **{k: v.replace("add", "unused") for k, v in project["buggy"].items()}},
            "mul and its test")
    base = _commit(repo, project["buggy"], "add, with a bug")
    fix = _commit(repo, {k: v.replace("$1 - $2", "$1 + $2").replace("a - b", "a + b")
                         for k, v in project["buggy"].items()}, "fix add")
    tests = _commit(repo, project["new_tests"], "test add")
    row = {
        "instance_id": "acme__calc-7",
        "repo": "acme/calc",
        "base_commit": base,
        "patch": _git(repo, "diff", base, fix),
        "test_patch": _git(repo, "diff", fix, tests),
        "problem_statement": "add(2, 2) returns 0 instead of 4.\r\n",
        "FAIL_TO_PASS": project["fail_to_pass"],
        "PASS_TO_PASS": project["pass_to_pass"],
        "image_name": "localhost/acme-calc:7",
        "install_config": {"log_parser": project["parser"], "test_cmd": project["commands"]},
        "meta": {"llm_metadata": [{"code": "A", "difficulty": "easy", "detected_issues": {}}]},
        "language": "python" if "calc.py" in project["buggy"] else "shell",
        "created_at": 1700000000000,
    }
    _git(repo, "checkout", "-q", base)
    return repo, row


@pytest.fixture(scope="module")
def shell_origin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return _origin(tmp_path_factory.mktemp("shell"), SHELL_PROJECT)


@pytest.fixture
def setup(shell_origin: tuple[Path, dict[str, Any]], tmp_path: Path) -> tuple[Task, Path]:
    return _checkout(shell_origin, tmp_path)


def _checkout(origin: tuple[Path, dict[str, Any]], tmp_path: Path) -> tuple[Task, Path]:
    """The converted task, and a fresh copy of the repository standing in for the image."""
    repo, row = origin
    task = convert_row(row, out_dir=tmp_path / "tasks")
    work = tmp_path / "calc"
    shutil.copytree(repo, work)
    return task, work


def _run(script: Path, work: Path, logs: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CODEDOJO_WORKDIR": str(work), "CODEDOJO_LOGS_DIR": str(logs), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False, timeout=120)


def _verify(task: Task, work: Path, logs: Path) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    proc = _run(task.tests_dir / "test.sh", work, logs)
    reward = json.loads((logs / "reward.json").read_text()) if (logs / "reward.json").exists() else None
    report = json.loads((logs / "report.json").read_text())
    assert reward is not None or "error" in report, proc.stdout + proc.stderr
    return reward, report


def test_gold_patch_scores_one(setup: tuple[Task, Path], tmp_path: Path) -> None:
    task, work = setup
    solve = _run(task.solution_dir / "solve.sh", work, tmp_path / "agent")
    assert solve.returncode == 0, solve.stderr
    reward, _ = _verify(task, work, tmp_path / "logs")
    assert reward == {"reward": 1, "fail_to_pass": 1, "pass_to_pass": 1}


def test_unchanged_repository_scores_zero_and_every_command_runs(setup: tuple[Task, Path], tmp_path: Path) -> None:
    task, work = setup
    reward, report = _verify(task, work, tmp_path / "logs")
    assert reward == {"reward": 0, "fail_to_pass": 0, "pass_to_pass": 1}
    # "negative" comes from the second command, which ran although the first one failed.
    assert report["fail_to_pass"]["tests"] == {"add": "FAILED", "negative": "FAILED"}
    log = (tmp_path / "logs" / "test-output.log").read_text()
    assert "test command 1 exited with status 1" in log and "test command 2 exited with status 1" in log


def test_edits_to_the_tests_do_not_count(setup: tuple[Task, Path], tmp_path: Path) -> None:
    task, work = setup
    # An agent that leaves the bug, rewrites the existing test and plants the one the test patch adds.
    (work / "tests" / "run_calc.sh").write_text('echo "PASS: add"; echo "PASS: mul"\n')
    (work / "tests" / "run_extra.sh").write_text('echo "PASS: negative"\n')
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "tests that always pass")
    reward, _ = _verify(task, work, tmp_path / "logs")
    assert reward is not None and reward["reward"] == 0
    assert "check negative" in (work / "tests" / "run_extra.sh").read_text()


def test_an_edit_that_silences_every_test_scores_zero(setup: tuple[Task, Path], tmp_path: Path) -> None:
    task, work = setup
    (work / "calc.sh").write_text("exit 0\n")  # sourcing it ends every test script before it reports
    reward, report = _verify(task, work, tmp_path / "logs")
    assert reward is not None and reward["reward"] == 0
    assert report["tests_found"] == 0 and "found no test results" in report["warning"]


def test_pytest_project_scores_one_with_the_fix_and_zero_without(tmp_path: Path) -> None:
    origin = _origin(tmp_path / "origin", PYTHON_PROJECT)
    task, work = _checkout(origin, tmp_path / "nop")
    assert _verify(task, work, tmp_path / "nop-logs")[0] == {"reward": 0, "fail_to_pass": 0, "pass_to_pass": 1}
    task, work = _checkout(origin, tmp_path / "oracle")
    assert _run(task.solution_dir / "solve.sh", work, tmp_path / "agent").returncode == 0
    assert _verify(task, work, tmp_path / "oracle-logs")[0] == {"reward": 1, "fail_to_pass": 1, "pass_to_pass": 1}
