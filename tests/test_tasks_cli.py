"""`codedojo tasks validate` and `codedojo tasks check` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from codedojo.tasks.task import examples_dir
from conftest import MakeTask


def codedojo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "codedojo.cli", *args], capture_output=True, text=True)


def test_validate_passes_the_examples() -> None:
    proc = codedojo("tasks", "validate", str(examples_dir()))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 problem(s)" in proc.stderr


def test_validate_names_every_problem(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "tests").mkdir(parents=True)
    (broken / "task.toml").write_text('[verifier]\ntimeout_sec = 1\n[enviroment]\ncpus = 1\n')
    (broken / "instruction.md").write_text("<!-- canary GUID 1234 -->\n\n")
    (broken / "tests" / "test.sh").write_text("echo no shebang\n")
    proc = codedojo("tasks", "validate", str(broken), str(tmp_path / "missing"))
    assert proc.returncode == 1
    proc = codedojo("tasks", "validate", str(broken))
    out = proc.stdout
    assert proc.returncode == 1
    for problem in ("unknown key 'enviroment' in the top level; did you mean 'environment'?",
                    "instruction.md is empty", "environment/ has no Dockerfile", "tests/test.sh has no shebang",
                    "solution/solve.sh is missing"):
        assert problem in out, problem
    assert all(line.startswith(str(broken)) for line in out.splitlines())


def test_check_reports_misbehaving_tasks(make_task: MakeTask) -> None:
    good = make_task(name="good", solve_sh="#!/bin/bash\ntouch done\n",
                     test_sh="#!/bin/bash\n[ -f done ] && echo 1 > /logs/verifier/reward.txt "
                             "|| echo 0 > /logs/verifier/reward.txt\n")
    always_passes = make_task(name="always", test_sh="#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    proc = codedojo("tasks", "check", str(good.path), str(always_passes.path), "--json")
    assert proc.returncode == 1
    reports = {r["task"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert reports["good"]["ok"] and reports["good"]["oracle_reward"] == 1.0 and reports["good"]["nop_reward"] == 0.0
    assert not reports["always"]["ok"] and reports["always"]["problem"] == "nop scores 1, not 0"
