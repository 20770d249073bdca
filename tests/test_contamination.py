"""History that holds the fix: each kind planted is found by the probe and removed by the scrub; `codedojo tasks
check` refuses a contaminated task, and a trial's agent finds the history gone."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from codedojo.trial.contamination import PROBE, SCRUB
from conftest import DEBIAN, MakeTask

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def run(script: str, repo: Path, home: Path, *paths: str, path_dirs: tuple[Path, ...] = ()) -> list[str]:
    # In a sandbox /root is the environment's; here it is this machine's, whose pip cache is not the test's.
    script = script.replace("/root/.cache/pip", str(home / "root" / ".cache" / "pip"))
    env = {**os.environ, "HOME": str(home), "PATH": os.pathsep.join([*map(str, path_dirs), os.environ["PATH"]])}
    out = subprocess.run(["sh", "-c", script, "probe", str(repo), *paths], env=env, check=True, capture_output=True,
                         text=True).stdout
    return [line.split(":")[0] for line in out.splitlines() if ": " in line]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with the bug committed as its only commit, and a fix one edit away."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the bug")
    return repo


def commit_the_fix(repo: Path) -> None:
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "commit", "-qam", "the fix")


def plant(kind: str, repo: Path, home: Path) -> None:
    if kind == "future_commits":  # a branch that has the fix
        git(repo, "checkout", "-qb", "upstream")
        commit_the_fix(repo)
        git(repo, "checkout", "-q", "main")
    elif kind == "tag":  # a release tag after the base
        commit_the_fix(repo)
        git(repo, "tag", "v2")
        git(repo, "reset", "-q", "--hard", "HEAD~1")
        git(repo, "reflog", "expire", "--expire=now", "--all")
    elif kind == "reflog":  # the fix committed, then reset away
        commit_the_fix(repo)
        git(repo, "reset", "-q", "--hard", "HEAD~1")
    elif kind == "stash":
        (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        git(repo, "stash", "-q")
    elif kind == "remotes":
        git(repo, "remote", "add", "origin", "https://example.com/calc.git")
        git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    elif kind == "unreachable_objects":  # reset away and the reflog expired, but no gc: the objects stay
        commit_the_fix(repo)
        git(repo, "reset", "-q", "--hard", "HEAD~1")
        git(repo, "reflog", "expire", "--expire=now", "--all")
    elif kind == "pip_cache":
        (home / ".cache" / "pip" / "wheels").mkdir(parents=True)
        (home / ".cache" / "pip" / "wheels" / "calc-2.0-py3-none-any.whl").write_text("the fixed release")


KINDS = {"future_commits": {"future_commits", "reflog"}, "tag": {"future_commits"},
         "reflog": {"reflog", "unreachable_objects"}, "stash": {"stash", "future_commits", "reflog"},
         "remotes": {"remotes"}, "unreachable_objects": {"unreachable_objects"}, "pip_cache": {"pip_cache"}}
"""What the probe must name for each planted kind: every finding it makes is true (a new branch has a reflog of
its commits; a commit reset away is in the reflog and reached by no ref; a stash is a ref with a reflog)."""


def test_a_clean_repository_has_nothing_to_find_and_its_scrub_runs_no_gc(repo: Path, tmp_path: Path) -> None:
    assert run(PROBE, repo, tmp_path / "home", "calc.py") == []
    run(SCRUB, repo, tmp_path / "home")
    assert not list((repo / ".git" / "objects" / "pack").glob("*.pack"))  # no gc ran: nothing was there
    assert git(repo, "log", "--oneline").count("\n") == 1


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_planted_kind_is_found_and_scrubbed(kind: str, repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    plant(kind, repo, home)
    assert set(run(PROBE, repo, home, "calc.py")) == KINDS[kind]
    run(SCRUB, repo, home)
    assert run(PROBE, repo, home, "calc.py") == []
    assert "the fix" not in git(repo, "log", "--all", "--oneline")
    assert (repo / "calc.py").read_text().endswith("a - b\n")  # the workdir itself is untouched


def test_an_installed_copy_that_differs_from_the_workdir_is_found(repo: Path, tmp_path: Path) -> None:
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    site.mkdir()
    bin_dir.mkdir()
    python = bin_dir / "python3"  # a python3 whose site-packages is `site`
    python.write_text(f"#!/bin/sh\necho {site}\n")
    python.chmod(0o755)
    (site / "calc.py").write_text((repo / "calc.py").read_text())  # the same file: nothing to learn from
    assert run(PROBE, repo, tmp_path, "calc.py", path_dirs=(bin_dir,)) == []
    (site / "calc.py").write_text("def add(a, b):\n    return a + b\n")  # the fixed release, installed
    assert run(PROBE, repo, tmp_path, "calc.py", path_dirs=(bin_dir,)) == ["site_packages"]


PLANTED = DEBIAN + """WORKDIR /app
COPY calc.py /app/calc.py
RUN git init -q && git -c user.name=t -c user.email=t@t add -A && git -c user.name=t -c user.email=t@t commit -qm bug \\
 && sed -i 's/a - b/a + b/' calc.py && git -c user.name=t -c user.email=t@t commit -qam fix && git branch upstream \\
 && git reset -q --hard HEAD~1
"""


def test_tasks_check_refuses_a_contaminated_task_and_a_trial_scrubs_it(make_task: MakeTask) -> None:
    """Strict, the check refuses the history as built; by default it refuses what the scrub leaves (nothing
    here) and names what it removed."""
    from codedojo.agent.loop import AgentConfig, AgentLoop
    from codedojo.agent.scripted import ScriptedPolicy
    from codedojo.inference.byte_tokenizer import byte_level_tokenizer
    from codedojo.inference.chat_templates import CHATML
    from codedojo.trial import run_trial
    from codedojo.trial.check import check_tasks

    task = make_task(dockerfile=PLANTED, files={"environment/calc.py": "def add(a, b):\n    return a - b\n"},
                     test_sh="#!/bin/bash\ngrep -q 'a + b' /app/calc.py && echo 1 > /logs/verifier/reward.txt "
                             "|| echo 0 > /logs/verifier/reward.txt\n",
                     solve_sh="#!/bin/bash\nsed -i 's/a - b/a + b/' /app/calc.py\n")
    (strict,), _ = asyncio.run(check_tasks([task.path], workers=1, strict_history=True))
    assert strict.oracle_reward == 1.0 and strict.nop_reward == 0.0  # it behaves, but as built it gives the fix away
    assert strict.problem is not None and "contaminated: future_commits" in strict.problem
    assert "contaminated: reflog" in strict.problem
    # by default the check asks what an agent would see: the scrub removes it all, and says so
    (report,), _ = asyncio.run(check_tasks([task.path], workers=1))
    assert report.ok, report.problem
    assert {finding.split(":")[0] for finding in report.scrubbed} == {"future_commits", "reflog"}

    # what an agent sees in a trial: one commit, no branch with the fix
    look = "```bash\ngit log --all --oneline | wc -l; git reflog | wc -l; git branch -a\n```"
    policy = ScriptedPolicy(byte_level_tokenizer(chat_template=CHATML), [look, "```bash\necho done\n```"])
    result = asyncio.run(run_trial(task, AgentLoop(policy, config=AgentConfig(max_steps=1))))
    assert result.trajectory is not None
    seen = result.trajectory.messages[-1]["content"]
    assert "upstream" not in seen and "\n1\n" in seen, seen


def test_tasks_check_refuses_history_the_scrub_leaves(make_task: MakeTask, monkeypatch: pytest.MonkeyPatch) -> None:
    import codedojo.trial.check as check

    async def scrub_that_removes_nothing(sandbox: object, **_: object) -> None:
        return None

    monkeypatch.setattr(check, "scrub", scrub_that_removes_nothing)
    task = make_task(dockerfile=PLANTED, files={"environment/calc.py": "def add(a, b):\n    return a - b\n"},
                     test_sh="#!/bin/bash\ngrep -q 'a + b' /app/calc.py && echo 1 > /logs/verifier/reward.txt "
                             "|| echo 0 > /logs/verifier/reward.txt\n",
                     solve_sh="#!/bin/bash\nsed -i 's/a - b/a + b/' /app/calc.py\n")
    (report,), _ = asyncio.run(check.check_tasks([task.path], workers=1))
    assert report.problem is not None and "contaminated: future_commits" in report.problem
    assert report.scrubbed == ()
