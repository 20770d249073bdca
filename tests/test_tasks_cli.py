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
    proc = codedojo("tasks", "validate", "--strict", str(examples_dir()))  # codedojo's own tasks: strictly
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 problem(s), 0 warning(s)" in proc.stderr


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
    for problem in ("instruction.md is empty", "environment/ has no Dockerfile", "tests/test.sh has no shebang"):
        assert problem in out, problem
    assert all(line.startswith(str(broken)) for line in out.splitlines())
    # An unknown key is a warning, as in Harbor (its loader ignores it, its lint flags it); --strict makes it a
    # problem. solution/solve.sh is optional: only the oracle agent needs it.
    unknown = "unknown key 'enviroment' in the top level; did you mean 'environment'?"
    assert unknown not in out and f"warning: {broken}: {unknown}" in proc.stderr
    assert "solve.sh" not in out
    strict = codedojo("tasks", "validate", "--strict", str(broken))
    assert unknown in strict.stdout and "0 warning(s)" in strict.stderr


def test_validate_applies_harbors_loader_checks(tmp_path: Path) -> None:
    task = tmp_path / "lint"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (task / "steps" / "one" / "tests").mkdir(parents=True)
    (task / "steps" / "one" / "instruction.md").write_text("do one\n")
    (task / "steps" / "one" / "tests" / "test.sh").write_text("#!/bin/bash\n")
    (task / "task.toml").write_text(
        'artifacts = ["/app/../etc/passwd", { source = "/app/out", destination = "../up" }]\n'
        '[task]\nname = "no-slash"\n'
        '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org", "https://x.org/path", "*.ok.io"]\n'
        '[agent]\nallowed_hosts = ["pypi.org"]\n'
        '[[steps]]\nname = "one"\n[[steps]]\nname = "../escape"\n[[steps]]\nname = "ONE"\n')
    proc = codedojo("tasks", "validate", str(task))
    assert proc.returncode == 1
    for problem in ("[task].name = 'no-slash' is not 'org/name'",
                    "steps[1]: step name '../escape' is not a portable directory name inside steps/",
                    "steps[2]: step name 'ONE' repeats 'one'",
                    "artifacts[0]: artifact source '/app/../etc/passwd' must not contain '..'",
                    "artifacts[1]: artifact destination '../up' must be a relative path",
                    "environment.allowed_hosts: 'https://x.org/path' is not a hostname",
                    "agent.allowed_hosts is set but agent.network_mode is None"):
        assert problem in proc.stdout, problem
    assert "pypi.org'" not in proc.stdout.replace("agent.allowed_hosts", "")
    assert "*.ok.io" not in proc.stdout


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
