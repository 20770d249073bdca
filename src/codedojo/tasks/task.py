"""A Harbor task directory: load it, check it, write one.

Layout (Harbor 0.25):

    <task>/instruction.md      what the agent is asked to do
    <task>/task.toml           configuration (see codedojo.tasks.config)
    <task>/environment/        Dockerfile (or compose file) and the files it copies; optional when
                               [environment].docker_image names a prebuilt image
    <task>/tests/test.sh       the verifier, uploaded to /tests only after the agent has finished
    <task>/solution/solve.sh   the reference solution, run by the oracle agent

`validate_task_dir` reports every problem at once, so `codedojo tasks validate` can name them all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from codedojo.records import RecordError
from codedojo.tasks.config import TaskConfig, dump_task_config, load_task_config

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
_CANARY = re.compile(r"^\s*(<!--.*-->|#.*)\s*$")


class TaskError(ValueError):
    """A task directory is missing something or holds something invalid."""


def strip_canary(text: str) -> str:
    """Drop leading comment lines that carry a benchmark canary string, as Harbor does."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and _CANARY.match(lines[i]) and "canary" in lines[i].lower():
        i += 1
    if i:
        while i < len(lines) and not lines[i].strip():
            i += 1
    return "".join(lines[i:])


@dataclass(frozen=True)
class Task:
    """A loaded task directory. Files other than instruction.md and task.toml stay on disk."""

    path: Path
    config: TaskConfig
    instruction: str

    @property
    def name(self) -> str:
        info = self.config.task
        return info.name if info is not None and info.name else self.path.name

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def dockerfile(self) -> Path | None:
        p = self.environment_dir / "Dockerfile"
        return p if p.is_file() else None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Task:
        """Read a task; raises TaskError listing every problem when it is not valid."""
        path = Path(path)
        problems = validate_task_dir(path)
        if problems:
            raise TaskError("\n".join(problems))
        config = load_task_config(path / "task.toml")
        instruction = strip_canary((path / "instruction.md").read_text(encoding="utf-8"))
        return cls(path=path, config=config, instruction=instruction)


def _check_script(path: Path, label: str, problems: list[str]) -> None:
    if path.is_symlink():
        problems.append(f"{label} is a symlink; it must be a regular file inside the task")
    elif not path.is_file():
        problems.append(f"{label} is missing")
    else:
        with path.open("rb") as f:
            if f.read(2) != b"#!":
                problems.append(f"{label} has no shebang line (it is run directly, e.g. #!/bin/bash)")


def validate_task_dir(path: Path) -> list[str]:
    """Every problem with the task at `path`, each prefixed with the path; empty when valid."""
    path = Path(path)
    if not path.is_dir():
        return [f"{path}: not a directory"]
    problems: list[str] = []
    config: TaskConfig | None = None
    toml_path = path / "task.toml"
    if not toml_path.is_file():
        problems.append("task.toml is missing")
    else:
        try:
            config = load_task_config(toml_path)
        except RecordError as e:
            problems.append(str(e).removeprefix(f"{toml_path}: "))
        except UnicodeDecodeError:
            problems.append("task.toml is not UTF-8 text")

    instruction = path / "instruction.md"
    steps = config.steps if config is not None else ()
    if not steps:
        if not instruction.is_file():
            problems.append("instruction.md is missing")
        elif not strip_canary(instruction.read_text(encoding="utf-8", errors="replace")).strip():
            problems.append("instruction.md is empty")

    env_dir = path / "environment"
    has_image = config is not None and config.environment.docker_image
    has_build = (env_dir / "Dockerfile").is_file() or any((env_dir / f).is_file() for f in COMPOSE_FILES)
    if not has_image and not has_build:
        problems.append(
            "environment/ has no Dockerfile or compose file and [environment].docker_image is not set"
        )

    if steps:
        for step in steps:
            step_dir = path / "steps" / step.name
            if not (step_dir / "instruction.md").is_file():
                problems.append(f"steps/{step.name}/instruction.md is missing")
            _check_script(step_dir / "tests" / "test.sh", f"steps/{step.name}/tests/test.sh", problems)
    else:
        _check_script(path / "tests" / "test.sh", "tests/test.sh", problems)
        _check_script(path / "solution" / "solve.sh", "solution/solve.sh", problems)
    return [f"{path}: {p}" for p in problems]


def write_task(
    path: Path,
    *,
    instruction: str,
    config: TaskConfig,
    files: Mapping[str, str | bytes],
) -> Task:
    """Write a task directory; `files` maps relative paths (environment/..., tests/..., solution/...)
    to contents. Shell scripts are made executable. Refuses to write into a non-empty directory."""
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        raise TaskError(f"{path}: exists and is not empty; pick a new directory or remove it")
    path.mkdir(parents=True, exist_ok=True)
    (path / "instruction.md").write_text(instruction, encoding="utf-8")
    (path / "task.toml").write_text(dump_task_config(config), encoding="utf-8")
    for rel, content in sorted(files.items()):
        target = path / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise TaskError(f"{path}: file path {rel!r} must be relative and stay inside the task")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
        if rel.endswith(".sh"):
            target.chmod(0o755)
    return Task.load(path)


def examples_dir() -> Path:
    """The tiny example tasks that ship with codedojo (used by the README and the tests)."""
    return Path(__file__).with_name("examples")


def discover_tasks(paths: list[Path]) -> list[Path]:
    """Task directories named by `paths`: each path is a task or a folder searched for tasks, sorted."""
    found: list[Path] = []
    for path in paths:
        path = Path(path)
        if (path / "task.toml").is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(p.parent for p in path.rglob("task.toml")))
        else:
            raise TaskError(f"{path}: no such task or directory")
    return found
