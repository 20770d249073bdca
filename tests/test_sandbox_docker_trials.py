"""Whole episodes on the docker backend with real containers: the bundled example tasks whose Dockerfiles it
builds, and a SWE-rebench V2 row converted and run on a locally built image (issue 9, part 4).

The examples here are the ones FROM debian:bookworm-slim, which the podman fixture stands in with the
locally built base image (no registry is reachable). fix-add and fix-greeting build FROM python:3.11-slim
and `pip install` from PyPI at build time, so they need a registry and network; they run on the local
backend in test_trial.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import podman_support
from codedojo.tasks.swerebench.convert import convert_row
from codedojo.tasks.task import Task, examples_dir
from codedojo.trial import NopAgent, OracleAgent, TrialOptions, run_trial
from conftest import DockerEngine

docker = podman_support.docker_sdk()  # skipped without the SDK, failed under CI

from codedojo.sandbox import docker_host  # noqa: E402 (needs the SDK)

SAMPLE_ROW = Path(__file__).parent / "fixtures" / "swerebench" / "swe_rebench_v2_sample.json"


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@pytest.mark.parametrize("name", ["hello-file", "sum-numbers"])
def test_examples_score_one_with_oracle_and_zero_with_nop(docker_engine: DockerEngine, name: str,
                                                          tmp_path: Path) -> None:
    task = Task.load(examples_dir() / name)
    options = TrialOptions(backend="docker", trials_dir=tmp_path)
    oracle = run(run_trial(task, OracleAgent(), options=options))
    assert oracle.reward == 1.0, oracle.error
    nop = run(run_trial(task, NopAgent(), options=options))
    assert nop.reward == 0.0, nop.error
    assert oracle.trial_dir is not None and (Path(oracle.trial_dir) / "verifier" / "test-stdout.txt").is_file()


# A shell project whose test scripts print automake-style "PASS: name" lines, graded by parse_log_jq (the
# parser of the real sample row, a C project tested with `make check`).
CHECK = ('status=0\ncheck() {\n    if [ "$2" = "$3" ]; then echo "PASS: $1"; else echo "FAIL: $1"; status=1; fi\n}\n')
BUGGY = "add() { echo $(($1 - $2)); }\nmul() { echo $(($1 * $2)); }\n"
OLD_TESTS = ". ./calc.sh\n. tests/check.sh\ncheck mul \"$(mul 2 3)\" 6\nexit $status\n"
NEW_TESTS = ". ./calc.sh\n. tests/check.sh\ncheck mul \"$(mul 2 3)\" 6\ncheck add \"$(add 2 2)\" 4\nexit $status\n"


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


def _repository_and_row(repo: Path) -> dict[str, Any]:
    """Make the repository (mul and its test; add with a bug; the fix; add's test), leave it at the buggy
    base commit as a V2 image holds it, and describe it in a row of the V2 schema."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _commit(repo, {"calc.sh": "mul() { echo $(($1 * $2)); }\n", "tests/check.sh": CHECK,
                   "tests/run_calc.sh": OLD_TESTS}, "mul and its test")
    base = _commit(repo, {"calc.sh": BUGGY}, "add, with a bug")
    fix = _commit(repo, {"calc.sh": BUGGY.replace("$1 - $2", "$1 + $2")}, "fix add")
    tests = _commit(repo, {"tests/run_calc.sh": NEW_TESTS}, "test add")
    _git(repo, "checkout", "-q", base)
    # The real row is the model: every column it has, with the values of this repository.
    row: dict[str, Any] = copy.deepcopy(json.loads(SAMPLE_ROW.read_text())[0])
    row.update(
        instance_id="acme__calc-7", repo="acme/calc", base_commit=base, language="shell",
        patch=_git(repo, "diff", base, fix), test_patch=_git(repo, "diff", fix, tests),
        problem_statement="add(2, 2) prints 0 instead of 4.\r\n", interface="",
        pr_description="Fix add\r\n", FAIL_TO_PASS=["add"], PASS_TO_PASS=["mul"],
        image_name=f"docker.io/swerebenchv2/acme-calc:7-{base[:7]}", created_at=1700000000000,
    )
    row["install_config"].update(log_parser="parse_log_jq", test_cmd=["sh tests/run_calc.sh"], install=[])
    return row


@contextlib.contextmanager
def _row_on_local_image(docker_engine: DockerEngine, tmp_path: Path) -> Iterator[tuple[dict[str, Any], Task]]:
    """The row of `_repository_and_row`, its image built locally under the row's image name, and the task
    converted from it; the image is removed afterwards (its tag holds this run's commit hash)."""
    context = tmp_path / "image"
    row = _repository_and_row(context / "calc")
    (context / "Dockerfile").write_text(f"FROM {docker_engine.base_image}\nCOPY calc /calc\nWORKDIR /calc\n")
    client = docker.DockerClient(base_url=docker_engine.host, version=docker_host.API_VERSION)
    client.images.build(path=str(context), tag=row["image_name"], rm=True, pull=False)
    try:
        yield row, convert_row(row, out_dir=tmp_path / "tasks")
    finally:
        client.images.remove(row["image_name"])
        client.close()


def test_a_swe_rebench_row_on_a_local_image_scores_one_with_oracle_and_zero_with_nop(
        docker_engine: DockerEngine, tmp_path: Path) -> None:
    with _row_on_local_image(docker_engine, tmp_path) as (row, task):
        assert task.config.environment.docker_image == row["image_name"]
        assert task.config.environment.workdir == "/calc"
        options = TrialOptions(backend="docker", trials_dir=tmp_path / "trials")
        oracle = run(run_trial(task, OracleAgent(), options=options))
        nop = run(run_trial(task, NopAgent(), options=options))
    assert oracle.rewards == {"reward": 1.0, "fail_to_pass": 1.0, "pass_to_pass": 1.0}, oracle.error
    assert nop.rewards == {"reward": 0.0, "fail_to_pass": 0.0, "pass_to_pass": 1.0}, nop.error
    assert nop.trial_dir is not None
    report = json.loads((Path(nop.trial_dir) / "verifier" / "report.json").read_text())
    assert report["fail_to_pass"]["tests"] == {"add": "FAILED"}


def test_tasks_check_passes_a_swe_rebench_row_once_the_scrub_removes_its_later_commits(
        docker_engine: DockerEngine, tmp_path: Path) -> None:
    """A V2 image holds the repository at the base commit with the branch still at the fix and its tests (as the
    real images can): `tasks check` passes it, naming the later commits the trials' scrub removes, and refuses
    it with --strict-history."""
    from codedojo.trial.check import check_tasks

    with _row_on_local_image(docker_engine, tmp_path) as (_, task):
        (report,), _ = run(check_tasks([task.path], workers=1, backend="docker"))
        (strict,), _ = run(check_tasks([task.path], workers=1, backend="docker", strict_history=True))
    assert report.ok, report.problem
    assert {finding.split(":")[0] for finding in report.scrubbed} == {"future_commits", "reflog"}  # the checkout
    assert strict.problem is not None and "contaminated: future_commits" in strict.problem
