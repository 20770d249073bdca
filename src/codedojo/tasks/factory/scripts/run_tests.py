"""Run pytest in a workspace and write one JSON record per test. Standalone: stdlib and pytest only.

    python3 -I run_tests.py --results OUT.json [--per-test-timeout S] [--workdir DIR] [-- PYTEST_ARGS...]
    python3 -I run_tests.py --serve      (one JSON request per stdin line, one JSON reply per line)

Shipped inside every generated task (tests/run_tests.py, used by tests/grade.py) and used by the task
factory to observe how a mutant fails. pytest is imported before the workspace joins sys.path, so a
file named pytest.py in the workspace cannot stand in for it (run with -I so the current directory is
not on the path at start). Each test gets a wall-clock alarm, so a mutant that loops forever fails one
test instead of hanging the run. For a failed test the record keeps what a bug report needs: the
exception, the compared values of a failing `assert a == b`, and the line of the test that failed.

`--serve` exists for the factory, which runs hundreds of suites: it imports pytest once and forks a
child per request, which saves most of each run's start-up. A request is {"workdir", "results",
"per_test_timeout", "timeout", "args"}; the reply is {"status": "done" | "timeout"}.
"""

import argparse
import json
import os
import signal
import sys
import time

import pytest

_REPR_LIMIT = 300


class TestTimeout(BaseException):
    """Raised in a test that ran past its time (BaseException, so `except Exception` cannot hide it)."""


def _short(text):
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _safe_repr(value):
    try:
        return _short(repr(value))
    except Exception as e:  # a broken __repr__ in mutated code must not crash the run
        return f"<repr failed: {type(e).__name__}>"


class Recorder:
    def __init__(self, per_test_timeout, workdir):
        self.per_test_timeout = per_test_timeout
        self.workdir = workdir
        self.tests = {}
        self.compare = None

    def _alarm(self, signum, frame):
        raise TestTimeout(f"test did not finish within {self.per_test_timeout:g} s")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        self.compare = None
        previous = signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, self.per_test_timeout)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def pytest_assertrepr_compare(self, config, op, left, right):
        self.compare = {"op": op, "left": _safe_repr(left), "right": _safe_repr(right)}
        return None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        record = self.tests.setdefault(item.nodeid, {"outcome": "passed"})
        if report.skipped and call.when != "teardown":
            record["outcome"] = "skipped"
        elif report.failed:
            if record["outcome"] in ("passed", "skipped"):
                record["outcome"] = "failed" if call.when == "call" else "error"
                record["failure"] = self._describe(item, call)

    def _describe(self, item, call):
        excinfo = call.excinfo
        failure = {
            "when": call.when,
            "exc_type": excinfo.typename if excinfo else "",
            "message": _short(str(excinfo.value)) if excinfo else "",
            "compare": self.compare if call.when == "call" else None,
            "function": getattr(item, "originalname", item.name),
            "params": {},
            "test_path": None,
            "test_lineno": None,
            "timeout": bool(excinfo and excinfo.errisinstance(TestTimeout)),
        }
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            failure["params"] = {k: _safe_repr(v) for k, v in sorted(callspec.params.items())}
        if excinfo is not None:
            test_file = str(item.path)
            for entry in excinfo.traceback:
                if str(entry.path) == test_file:
                    failure["test_path"] = os.path.relpath(test_file, self.workdir)
                    failure["test_lineno"] = entry.lineno + 1
        return failure


def run(workdir, results, per_test_timeout, pytest_args):
    workdir = os.path.abspath(workdir)
    os.chdir(workdir)
    sys.path.insert(0, workdir)
    sys.dont_write_bytecode = True  # leave no __pycache__ behind in the workspace
    recorder = Recorder(per_test_timeout, workdir)
    base = ["-q", "-p", "no:cacheprovider", "--rootdir", workdir]
    exit_code = pytest.main([*base, *pytest_args], plugins=[recorder])
    with open(results, "w", encoding="utf-8") as f:
        json.dump({"exit_code": int(exit_code), "tests": recorder.tests}, f, indent=1, sort_keys=True)


def serve():
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.setsid()  # its own process group, so a timeout kills whatever it started
                log = os.open(request["results"] + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the request pipe is not the tests' stdin
                run(request["workdir"], request["results"], request["per_test_timeout"], request["args"])
                status = 0
            finally:
                os._exit(status)
        deadline = time.monotonic() + request["timeout"]
        status = "done"
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                status = "timeout"
                break
            time.sleep(0.005)
        sys.stdout.write(json.dumps({"status": status}) + "\n")
        sys.stdout.flush()
    return 0


def main():
    if sys.argv[1:] == ["--serve"]:
        return serve()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", required=True, help="where to write the JSON results")
    parser.add_argument("--per-test-timeout", type=float, default=10.0, help="seconds per test")
    parser.add_argument("--workdir", default=".", help="repository root (default: current directory)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, e.g. test ids")
    args = parser.parse_args()
    run(args.workdir, args.results, args.per_test_timeout, args.pytest_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
