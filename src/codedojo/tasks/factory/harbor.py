"""Write one generated bug as a Harbor task directory.

    instruction.md             the problem statement
    task.toml                  metadata (repository, tier, bug_kind, FAIL_TO_PASS, PASS_TO_PASS, seed,
                               source, ...) and resources
    environment/Dockerfile     python:3.11-slim + git + pytest, WORKDIR /app, the workspace, one commit
    environment/repo/          the workspace: the repository with the bug, tests included
    tests/test.sh              runs grade.py: restore tests, run them, write /logs/verifier/reward.json
    tests/grade.py, tests/run_tests.py, tests/spec.json, tests/original/
    solution/solve.sh          writes the original file back

Everything is a function of its inputs (sorted file order, no timestamps), so the same seed gives the
same bytes.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from codedojo.tasks.config import AgentPhaseConfig, EnvironmentConfig, TaskConfig, VerifierConfig
from codedojo.tasks.factory.testrun import SCRIPTS_DIR
from codedojo.tasks.task import Task, write_task

PYTEST_VERSION = "7.2.1"
"""The pytest of the host's Debian python3-pytest, which the local sandbox uses; containers match it."""
WORKDIR = "/app"
PER_TEST_TIMEOUT_S = 20
GRADE_TIMEOUT_S = 240
_EOF = "CODEDOJO_ORIGINAL_FILE"

DOCKERFILE = f"""\
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir pytest=={PYTEST_VERSION}
WORKDIR {WORKDIR}
COPY repo/ {WORKDIR}/
RUN git init -q && git add -A && git -c user.name=codedojo -c user.email=codedojo@localhost commit -q -m "Initial state"
"""

TEST_SH = """\
#!/bin/bash
# Verifier: restores the original tests and pytest configuration, runs the FAIL_TO_PASS and
# PASS_TO_PASS tests, writes /logs/verifier/reward.json (reward, fail_to_pass, pass_to_pass).
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p /logs/verifier
exec python3 -I "$here/grade.py" --spec "$here/spec.json" --reward /logs/verifier/reward.json
"""


@dataclass(frozen=True)
class TaskSpec:
    """Everything that makes one task."""

    name: str
    repository: str
    tier: str
    bug_kind: str
    seed: int
    source: str
    instruction: str
    path: str
    """The file with the bug."""
    line: int
    function: str | None
    buggy_source: str
    original_source: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]


def solve_script(path: str, *, original: str, buggy: str) -> str:
    """solve.sh: the original file, written back from a quoted here-document, run from the workdir."""
    if any(line == _EOF for line in original.splitlines()):
        raise ValueError(f"{path} contains the line {_EOF!r}; it cannot be embedded in solve.sh")
    diff = difflib.unified_diff(
        buggy.splitlines(), original.splitlines(), f"a/{path}", f"b/{path}", lineterm="", n=1
    )
    comment = "".join(f"# {line}".rstrip() + "\n" for line in diff)
    body = original if original.endswith("\n") else original + "\n"
    return (
        "#!/bin/bash\n"
        f"# Reference fix: restores {path} as it was before the bug was put in.\n"
        f"{comment}"
        "set -euo pipefail\n"
        f"mkdir -p {shlex.quote(str(Path(path).parent))}\n"
        f"cat > {shlex.quote(path)} <<'{_EOF}'\n{body}{_EOF}\n"
    )


def task_config(spec: TaskSpec) -> TaskConfig:
    metadata = {
        "instance_id": spec.name,
        "repository": spec.repository,
        "tier": spec.tier,
        "bug_kind": spec.bug_kind,
        "seed": spec.seed,
        "source": spec.source,
        "file": spec.path,
        "line": spec.line,
        "function": spec.function or "",
        "FAIL_TO_PASS": list(spec.fail_to_pass),
        "PASS_TO_PASS": list(spec.pass_to_pass),
    }
    return TaskConfig(
        source=spec.source,
        metadata=metadata,
        verifier=VerifierConfig(timeout_sec=float(GRADE_TIMEOUT_S + 60)),
        agent=AgentPhaseConfig(timeout_sec=1800.0),
        environment=EnvironmentConfig(
            cpus=1, memory_mb=1024, storage_mb=1024, network_mode="no-network", build_timeout_sec=600.0
        ),
    )


def task_files(spec: TaskSpec, *, repo_files: Mapping[str, bytes], restore: tuple[str, ...]) -> dict[str, bytes | str]:
    """Relative path -> content for every file of the task except instruction.md and task.toml."""
    files: dict[str, bytes | str] = {"environment/Dockerfile": DOCKERFILE}
    for rel, content in repo_files.items():
        files[f"environment/repo/{rel}"] = spec.buggy_source if rel == spec.path else content
    for rel in restore:
        files[f"tests/original/{rel}"] = repo_files[rel]
    grading = {
        "fail_to_pass": list(spec.fail_to_pass),
        "pass_to_pass": list(spec.pass_to_pass),
        "per_test_timeout_s": PER_TEST_TIMEOUT_S,
        "timeout_s": GRADE_TIMEOUT_S,
    }
    files["tests/spec.json"] = json.dumps(grading, indent=1) + "\n"
    files["tests/test.sh"] = TEST_SH
    files["tests/grade.py"] = (SCRIPTS_DIR / "grade.py").read_bytes()
    files["tests/run_tests.py"] = (SCRIPTS_DIR / "run_tests.py").read_bytes()
    files["solution/solve.sh"] = solve_script(spec.path, original=spec.original_source, buggy=spec.buggy_source)
    return files


def write_harbor_task(
    spec: TaskSpec, *, out: Path, repo_files: Mapping[str, bytes], restore: tuple[str, ...]
) -> Task:
    """Write the task to out/<spec.name>; refuses a non-empty target."""
    return write_task(
        out / spec.name,
        instruction=spec.instruction,
        config=task_config(spec),
        files=task_files(spec, repo_files=repo_files, restore=restore),
    )
