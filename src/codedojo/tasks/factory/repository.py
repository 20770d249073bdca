"""A Python repository as the factory sees it: which files are code to break, which are tests.

Test files are `test_*.py` and `*_test.py`; support files are everything that changes how pytest runs
(conftest.py, pytest.ini, tox.ini, setup.cfg, pyproject.toml). Both are shipped with each task and put
back before grading. Source files are the other .py files outside test, docs and example directories.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

IGNORED_DIRS = frozenset(
    {".git", ".hg", "__pycache__", ".venv", "venv", "env", ".tox", ".nox", ".pytest_cache",
     ".mypy_cache", ".ruff_cache", "node_modules", "build", "dist", ".eggs", ".idea", ".vscode"}
)  # fmt: skip
SUPPORT_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
NON_SOURCE_DIRS = frozenset({"tests", "test", "testing", "docs", "doc", "examples", "example", "benchmarks"})
NON_SOURCE_FILES = frozenset({"setup.py", "conftest.py", "noxfile.py", "manage.py"})


class RepositoryError(ValueError):
    """The directory is not usable as a task source."""


@dataclass(frozen=True)
class Repository:
    root: Path
    name: str
    """Short name used in task names and metadata."""
    files: tuple[str, ...]
    """Every file copied into the workspace (posix paths relative to root, sorted)."""
    source_files: tuple[str, ...]
    """Python files the factory may mutate."""
    test_files: tuple[str, ...]
    """Test modules."""
    support_files: tuple[str, ...]
    """conftest.py and pytest configuration files."""

    def read(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()


def _is_test_file(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return fnmatch.fnmatch(name, "test_*.py") or fnmatch.fnmatch(name, "*_test.py")


def scan_repository(root: Path, *, name: str | None = None) -> Repository:
    """Classify the files under `root`; raises RepositoryError when there is nothing to work with."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise RepositoryError(f"{root}: not a directory; pass the root of a Python repository")
    files: list[str] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in IGNORED_DIRS or part.endswith(".egg-info") for part in rel.parts):
            continue
        if path.is_file() and not path.is_symlink() and path.suffix not in (".pyc", ".pyo"):
            files.append(rel.as_posix())
    tests = [f for f in files if f.endswith(".py") and _is_test_file(f)]
    support = [f for f in files if f.rsplit("/", 1)[-1] in SUPPORT_NAMES]
    source = [
        f
        for f in files
        if f.endswith(".py")
        and f not in tests
        and f.rsplit("/", 1)[-1] not in NON_SOURCE_FILES
        and not any(part in NON_SOURCE_DIRS for part in f.split("/")[:-1])
    ]
    if not tests:
        raise RepositoryError(f"{root}: no test files (test_*.py or *_test.py); the factory needs a pytest suite")
    if not source:
        raise RepositoryError(f"{root}: no Python source files outside the tests to mutate")
    return Repository(
        root=root,
        name=name or root.name,
        files=tuple(files),
        source_files=tuple(source),
        test_files=tuple(tests),
        support_files=tuple(support),
    )
