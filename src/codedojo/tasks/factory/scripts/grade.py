"""Grade a workspace: restore the original tests, run the graded tests, write reward.json.

    python3 -I grade.py --spec spec.json --reward /logs/verifier/reward.json [--workdir DIR]

Standalone (stdlib only; pytest is needed by run_tests.py beside it). The task's tests/ directory holds
this script, run_tests.py, spec.json and original/: every test file, conftest.py and pytest
configuration file of the repository as it was before the agent ran. Restoring means: delete every
conftest.py and pytest configuration file in the workspace, then copy original/ back, so an agent can
neither edit a test nor add a conftest.py or pytest.ini that changes how tests run. Compiled bytecode
(__pycache__ folders, *.pyc, *.pyo; the bundled repositories hold none) is deleted too: Python would import
a cached module whose recorded source size and mtime match, or a sourceless module.pyc, instead of the source.

reward.json holds `reward` (1.0 only when every FAIL_TO_PASS and PASS_TO_PASS test passes, else 0.0),
`fail_to_pass` and `pass_to_pass` (the fraction of each group that passed; 1.0 for an empty group).
A run that crashes or times out counts as no test passing; the file is written whenever grading ran.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG_NAMES = ("conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml")
SKIPPED_DIRS = (".git", "__pycache__", ".venv", "venv", "node_modules")


def restore(workdir, original):
    for root, dirs, files in os.walk(workdir):
        for name in dirs:
            if name == "__pycache__":
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        for name in files:
            if name in CONFIG_NAMES or name.endswith((".pyc", ".pyo")):
                os.remove(os.path.join(root, name))
    for root, _dirs, files in os.walk(original):
        for name in files:
            source = os.path.join(root, name)
            target = os.path.join(workdir, os.path.relpath(source, original))
            if os.path.isdir(target) or os.path.islink(target):
                shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)


def run(workdir, test_ids, *, per_test_timeout, timeout):
    with tempfile.TemporaryDirectory(prefix="codedojo-grade-") as scratch:
        results = os.path.join(scratch, "results.json")
        command = [
            sys.executable, "-I", os.path.join(HERE, "run_tests.py"), "--results", results,
            "--per-test-timeout", str(per_test_timeout), "--workdir", workdir, "--", *test_ids,
        ]  # fmt: skip
        try:
            subprocess.run(command, cwd=workdir, timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            print(f"grade: the test run passed its {timeout} s limit; no test counts as passed")
            return {}
        if not os.path.exists(results):
            print("grade: the test run wrote no results; no test counts as passed")
            return {}
        with open(results, encoding="utf-8") as f:
            return {test: record["outcome"] for test, record in json.load(f)["tests"].items()}


def fraction(tests, outcomes):
    if not tests:
        return 1.0
    return sum(outcomes.get(t) == "passed" for t in tests) / len(tests)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", required=True, help="spec.json with the graded test ids")
    parser.add_argument("--reward", required=True, help="where to write reward.json")
    parser.add_argument("--workdir", default=".", help="repository root (default: current directory)")
    args = parser.parse_args()
    with open(args.spec, encoding="utf-8") as f:
        spec = json.load(f)
    workdir = os.path.abspath(args.workdir)
    restore(workdir, os.path.join(HERE, "original"))
    fail_to_pass, pass_to_pass = spec["fail_to_pass"], spec["pass_to_pass"]
    outcomes = run(
        workdir, [*fail_to_pass, *pass_to_pass],
        per_test_timeout=spec["per_test_timeout_s"], timeout=spec["timeout_s"],
    )  # fmt: skip
    scores = {"fail_to_pass": fraction(fail_to_pass, outcomes), "pass_to_pass": fraction(pass_to_pass, outcomes)}
    reward = 1.0 if scores["fail_to_pass"] == 1.0 and scores["pass_to_pass"] == 1.0 else 0.0
    os.makedirs(os.path.dirname(os.path.abspath(args.reward)), exist_ok=True)
    with open(args.reward, "w", encoding="utf-8") as f:
        json.dump({"reward": reward, **scores}, f)
    for test in [*fail_to_pass, *pass_to_pass]:
        print(f"{outcomes.get(test, 'missing'):>8}  {test}")
    print(f"grade: reward {reward:g}, fail_to_pass {scores['fail_to_pass']:.3f}, "
          f"pass_to_pass {scores['pass_to_pass']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
