"""A Harbor task directory: load it, check it, write one.

Layout (Harbor 0.25):

    <task>/instruction.md      what the agent is asked to do
    <task>/task.toml           configuration (see codedojo.tasks.config)
    <task>/environment/        Dockerfile (or compose file) and the files it copies; optional when
                               [environment].docker_image names a prebuilt image
    <task>/tests/test.sh       the verifier, uploaded to /tests only after the agent has finished
    <task>/solution/solve.sh   the reference solution, run by the oracle agent (optional otherwise)
    <task>/steps/<name>/       multi-step tasks: instruction.md, tests/ (merged over tests/), solution/,
                               workdir/ (uploaded into the workdir before the step, setup.sh run there)

`validate_task_dir` reports every problem at once, so `codedojo tasks validate` can name them all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from codedojo.records import RecordError
from codedojo.tasks.config import StepConfig, TaskConfig, dump_task_config, load_task_config
from codedojo.tasks.lint import lint_config, step_name_problem

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
    """A loaded task directory. Files other than instruction.md and task.toml stay on disk.

    A multi-step task loads as the whole task (`step` None, `instruction` empty); `for_step(name)` gives the
    view of one step: its instruction, its solution, its tests on top of the shared ones."""

    path: Path
    config: TaskConfig
    instruction: str
    step: str | None = None
    """The step this view is of (multi-step tasks), else None."""
    warnings: tuple[str, ...] = ()
    """What `load` tolerated but Harbor's lint would flag (unknown keys), each prefixed with the path."""

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
        """Where the oracle's solve.sh lives: the step's solution/ when it has one, else the task's."""
        if self.step is not None and (self.path / "steps" / self.step / "solution").is_dir():
            return self.path / "steps" / self.step / "solution"
        return self.path / "solution"

    @property
    def test_sources(self) -> list[Path]:
        """Directories uploaded to /tests, in order: the shared tests/, then the step's tests/ (Harbor's merge)."""
        sources = [self.tests_dir] if self.tests_dir.is_dir() else []
        if self.step is not None and (self.path / "steps" / self.step / "tests").is_dir():
            sources.append(self.path / "steps" / self.step / "tests")
        return sources

    @property
    def steps(self) -> tuple[StepConfig, ...]:
        return self.config.steps

    @property
    def dockerfile(self) -> Path | None:
        p = self.environment_dir / "Dockerfile"
        return p if p.is_file() else None

    def for_step(self, name: str) -> Task:
        """The view of step `name`: its instruction.md (canary lines stripped), solution and tests."""
        if not any(step.name == name for step in self.config.steps):
            raise TaskError(f"{self.path}: no step named {name!r} in [[steps]]")
        text = (self.path / "steps" / name / "instruction.md").read_text(encoding="utf-8")
        return replace(self, instruction=strip_canary(text), step=name)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, strict: bool = False) -> Task:
        """Read a task; raises TaskError listing every problem when it is not valid. Unknown keys in
        task.toml are warnings (Harbor's loader ignores them), or problems with `strict`."""
        path = Path(path)
        warnings: list[str] = []
        problems = validate_task_dir(path, warnings=warnings)
        if strict:
            problems, warnings = problems + warnings, []
        if problems:
            raise TaskError("\n".join(problems))
        config = load_task_config(path / "task.toml", warnings=[])
        instruction = ""
        if not config.steps:
            instruction = strip_canary((path / "instruction.md").read_text(encoding="utf-8"))
        return cls(path=path, config=config, instruction=instruction, warnings=tuple(warnings))


def _check_script(path: Path, label: str, problems: list[str]) -> None:
    if path.is_symlink():
        problems.append(f"{label} is a symlink; it must be a regular file inside the task")
    elif path.exists() and not path.is_file():
        problems.append(f"{label} is not a regular file (a directory?); it must be the script itself")
    elif not path.is_file():
        problems.append(f"{label} is missing")
    else:
        with path.open("rb") as f:
            if f.read(2) != b"#!":
                problems.append(f"{label} has no shebang line (it is run directly, e.g. #!/bin/bash)")


def validate_task_dir(path: Path, *, warnings: list[str] | None = None) -> list[str]:
    """Every problem with the task at `path`, each prefixed with the path; empty when valid.

    Unknown task.toml keys go to `warnings` when a list is given (Harbor's loader ignores them and its
    lint flags them), else they are problems."""
    path = Path(path)
    if not path.is_dir():
        return [f"{path}: not a directory"]
    problems: list[str] = []
    unknown: list[str] = []
    config: TaskConfig | None = None
    toml_path = path / "task.toml"
    if not toml_path.is_file():
        problems.append("task.toml is missing")
    else:
        try:
            config = load_task_config(toml_path, warnings=unknown)
        except RecordError as e:
            problems.append(str(e).removeprefix(f"{toml_path}: "))
        except UnicodeDecodeError:
            problems.append("task.toml is not UTF-8 text")
    unknown = [w.removeprefix(f"{toml_path}: ") for w in unknown]
    if warnings is None:
        problems.extend(unknown)
    else:
        warnings.extend(f"{path}: {w}" for w in unknown)

    steps = config.steps if config is not None else ()
    if not steps:
        _check_instruction(path / "instruction.md", "instruction.md", problems)

    env_dir = path / "environment"
    has_image = config is not None and config.environment.docker_image
    has_build = (env_dir / "Dockerfile").is_file() or any((env_dir / f).is_file() for f in COMPOSE_FILES)
    if not has_image and not has_build:
        problems.append(
            "environment/ has no Dockerfile or compose file and [environment].docker_image is not set"
        )

    if config is not None:
        problems.extend(lint_config(config))
    shared_test = path / "tests" / "test.sh"
    if not steps:
        _check_script(shared_test, "tests/test.sh", problems)
    for step in steps:
        step_dir = path / "steps" / step.name
        if step_name_problem(step.name) is not None or not _inside(step_dir, path):
            continue  # reported by lint_config / below; its files cannot be looked up safely
        _check_instruction(step_dir / "instruction.md", f"steps/{step.name}/instruction.md", problems)
        own = step_dir / "tests" / "test.sh"
        if own.exists() or own.is_symlink() or not shared_test.exists():
            _check_script(own, f"steps/{step.name}/tests/test.sh (or a shared tests/test.sh)", problems)
        else:
            _check_script(shared_test, "tests/test.sh", problems)
    # solve.sh is optional (Harbor needs it only for the oracle agent); when present it must be runnable.
    for solve in [path / "solution" / "solve.sh", *(path / "steps" / s.name / "solution" / "solve.sh" for s in steps
                                                    if step_name_problem(s.name) is None)]:
        if solve.exists() or solve.is_symlink():
            _check_script(solve, str(solve.relative_to(path)), problems)
    for step in steps:
        if step_name_problem(step.name) is None and not _inside(path / "steps" / step.name, path):
            problems.append(f"steps/{step.name} leaves the task directory (a symlink?); step inputs must stay "
                            "inside the task")
    return [f"{path}: {p}" for p in dict.fromkeys(problems)]


def _inside(candidate: Path, root: Path) -> bool:
    return candidate.resolve().is_relative_to(root.resolve())


def _check_instruction(path: Path, label: str, problems: list[str]) -> None:
    if not path.is_file():
        problems.append(f"{label} is missing")
        return
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(f"{label} is not UTF-8 text (byte {e.start}); save it as UTF-8")
        return
    if not strip_canary(text).strip():
        problems.append(f"{label} is empty")


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
