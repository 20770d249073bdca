"""Run a repository's pytest suite in a throw-away copy and read back per-test outcomes.

The run goes through scripts/run_tests.py (the same script every generated task ships), in a fresh
interpreter with a clean environment, with a per-test alarm and a wall-clock limit for the whole run, because
mutated code may loop forever.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SCRIPTS_DIR = Path(__file__).parent / "scripts"
RUN_TESTS_SCRIPT = SCRIPTS_DIR / "run_tests.py"


def default_python() -> str:
    """The interpreter tasks run with inside the local sandbox (the host's system Python)."""
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else (shutil.which("python3") or "python3")


@dataclass(frozen=True)
class Failure:
    """How one test failed, as observed by run_tests.py."""

    when: str
    """'setup', 'call' or 'teardown'."""
    exc_type: str
    """Exception class name, e.g. 'AssertionError' or 'Failed' (pytest.raises saw nothing)."""
    message: str
    """str() of the exception, truncated."""
    function: str
    """Test function name (without parameters)."""
    compare: Mapping[str, str] | None = None
    """For a failed `assert a OP b`: op, and the reprs of left and right."""
    params: Mapping[str, str] = field(default_factory=dict)
    """Parametrize arguments, as reprs."""
    test_path: str | None = None
    """Test file relative to the repository root."""
    test_lineno: int | None = None
    """1-based line of the test file where it failed."""
    timeout: bool = False
    """The test ran past the per-test limit."""


@dataclass(frozen=True)
class TestRun:
    """Outcome of one suite run."""

    outcomes: Mapping[str, str]
    """Test id -> 'passed' | 'failed' | 'error' | 'skipped'."""
    failures: Mapping[str, Failure]
    """Test id -> how it failed, for failed and errored tests."""
    exit_code: int
    """pytest's exit code, or -1 when the run was killed or wrote no results."""
    output: str
    """The tail of pytest's console output, for error messages."""

    @property
    def passed(self) -> frozenset[str]:
        return frozenset(t for t, o in self.outcomes.items() if o == "passed")

    @property
    def timed_out(self) -> bool:
        return self.exit_code == -1 or any(f.timeout for f in self.failures.values())


def _environment(home: str) -> dict[str, str]:
    # Not `python -I`, which would ignore PYTHONHASHSEED: a fixed hash seed makes the reprs of sets in
    # failure messages, and so the problem statements, the same on every run. The environment is
    # built from scratch, so no PYTHONPATH or user site comes in.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
    }


def _read_results(results: Path, output: str) -> TestRun:
    if not results.exists():
        return TestRun(outcomes={}, failures={}, exit_code=-1, output=output[-4000:])
    data = json.loads(results.read_text(encoding="utf-8"))
    outcomes = {test: record["outcome"] for test, record in sorted(data["tests"].items())}
    failures = {
        test: Failure(**record["failure"])
        for test, record in sorted(data["tests"].items())
        if "failure" in record
    }
    return TestRun(outcomes=outcomes, failures=failures, exit_code=data["exit_code"], output=output[-4000:])


class TestServer:
    """A long-lived `run_tests.py --serve` process: pytest is imported once and each run is a fork.

    One server runs one suite at a time; use one per worker thread. Close it when done.
    """

    def __init__(self, *, python: str | None = None) -> None:
        self._scratch = tempfile.TemporaryDirectory(prefix="codedojo-serve-")
        self._process = subprocess.Popen(
            [python or default_python(), str(RUN_TESTS_SCRIPT), "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=_environment(self._scratch.name), start_new_session=True,
        )  # fmt: skip
        self._count = 0

    def run(
        self, workdir: Path, *, test_ids: Sequence[str] = (), timeout_s: float = 120.0,
        per_test_timeout_s: float = 10.0,
    ) -> TestRun:  # fmt: skip
        """Like `run_tests`, in a fork of the server."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._count += 1
        results = Path(self._scratch.name) / f"results-{self._count}.json"
        request = {
            "workdir": str(workdir), "results": str(results), "per_test_timeout": per_test_timeout_s,
            "timeout": timeout_s, "args": list(test_ids),
        }  # fmt: skip
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        reply = self._process.stdout.readline()
        if not reply:
            raise RuntimeError(f"the test server ({RUN_TESTS_SCRIPT}) exited; run one suite with run_tests to see why")
        log = Path(f"{results}.log")
        output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        if json.loads(reply)["status"] == "timeout":
            return TestRun(outcomes={}, failures={}, exit_code=-1, output=f"killed after {timeout_s:g} s\n{output}")
        run = _read_results(results, output)
        results.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
        return run

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._scratch.cleanup()


def run_tests(
    workdir: Path,
    *,
    python: str | None = None,
    test_ids: Sequence[str] = (),
    timeout_s: float = 120.0,
    per_test_timeout_s: float = 10.0,
) -> TestRun:
    """Run pytest in `workdir` (which it may litter) and return per-test outcomes."""
    with tempfile.TemporaryDirectory(prefix="codedojo-run-") as scratch:
        results = Path(scratch) / "results.json"
        command = [
            python or default_python(), str(RUN_TESTS_SCRIPT),
            "--results", str(results), "--per-test-timeout", str(per_test_timeout_s),
            "--workdir", str(workdir), "--", *test_ids,
        ]  # fmt: skip
        env = _environment(scratch)
        try:
            proc = subprocess.run(
                command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout_s,
                start_new_session=True,
            )  # fmt: skip
            output = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            output = f"killed after {timeout_s:g} s\n{_text(e.stdout)}{_text(e.stderr)}"
            return TestRun(outcomes={}, failures={}, exit_code=-1, output=output[-4000:])
        return _read_results(results, output)


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
