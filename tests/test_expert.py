"""The scripted expert: reference edits from git diff, edit commands that really apply them, solved demos."""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import subprocess
from pathlib import Path

import pytest

from codedojo.agent.expert import (
    LineEdit,
    demonstrations,
    edit_command,
    guided_replies,
    line_variants,
    parse_diff,
    reference_edits,
)
from codedojo.agent.loop import AgentConfig
from codedojo.inference.byte_tokenizer import byte_level_tokenizer
from codedojo.inference.chat_templates import CHATML
from codedojo.tasks.task import Task, examples_dir

DIFF = """diff --git a/pkg/mod.py b/pkg/mod.py
index 1..2 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -3 +3 @@ def f():
-    return a - b
+    return a + b
@@ -9,0 +10 @@ def g():
+    total = 0
@@ -20,2 +20,0 @@ def h():
-    x = 1
-    y = 2
"""


def test_parse_diff() -> None:
    assert parse_diff(DIFF) == [
        LineEdit("pkg/mod.py", 3, ("    return a - b",), ("    return a + b",)),
        LineEdit("pkg/mod.py", 10, (), ("    total = 0",)),
        LineEdit("pkg/mod.py", 20, ("    x = 1", "    y = 2"), ()),
    ]


@pytest.mark.parametrize("whole_lines", [False, True])
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(
    ("before", "edit", "after"),
    [
        ("a\n    if x < 1:\nc\n", LineEdit("f.py", 2, ("    if x < 1:",), ("    if x <= 1:",)),
         "a\n    if x <= 1:\nc\n"),
        ("s = 'a/b' & 1\n", LineEdit("f.py", 1, ("s = 'a/b' & 1",), ("s = 'a/b' | 1",)), "s = 'a/b' | 1\n"),
        ("p = a.b[1] * 2\n", LineEdit("f.py", 1, ("p = a.b[1] * 2",), ("p = a.b[0] * 2",)), "p = a.b[0] * 2\n"),
        ("one\ntwo\n", LineEdit("f.py", 2, (), ("    inserted = 1",)), "one\n    inserted = 1\ntwo\n"),
        ("one\ndrop\ntwo\n", LineEdit("f.py", 2, ("drop",), ()), "one\ntwo\n"),
        ("x = y\nx = y\n", LineEdit("f.py", 2, ("x = y",), ("x = z",)), "x = y\nx = z\n"),
        # whole-line changes keep indentation, backslashes, quotes and sed's own special characters
        ("a\n    s = 'x'\n", LineEdit("f.py", 2, ("    s = 'x'",), ("    s = \"a\\nb\" + 'q' & r'\\d/'",)),
         "a\n    s = \"a\\nb\" + 'q' & r'\\d/'\n"),
        ("a\nb\nc\nd\n", LineEdit("f.py", 2, ("b", "c"), ("    x = 1", "", "    y = 2")),
         "a\n    x = 1\n\n    y = 2\nd\n"),
        ("first\n", LineEdit("f.py", 1, (), ("import os",)), "import os\nfirst\n"),
        ("a\nb\n", LineEdit("f.py", 2, ("b",), ("",)), "a\n\n"),
        ("a\nb\nc\n", LineEdit("f.py", 1, ("a", "b"), ()), "c\n"),
    ],
)
def test_edit_commands_apply_the_edit(tmp_path: Path, seed: int, before: str, edit: LineEdit, after: str,
                                     whole_lines: bool) -> None:
    (tmp_path / "f.py").write_text(before)
    command = edit_command(edit, rng=random.Random(seed), whole_lines=whole_lines)
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True)
    assert (tmp_path / "f.py").read_text() == after, command
    if whole_lines:
        assert re.match(r"sed -i '\d+(,\d+)?[cid]", command), command  # whole lines, insertions before a line


def test_guided_replies_copy_the_statement_line_in_one_steady_routine() -> None:
    edit = LineEdit("pkg/mod.py", 12, ("    return a - b",), ("    return a + b",))
    scripts = set()
    for seed in range(8):
        replies = guided_replies([edit], rng=random.Random(seed))
        commands = [r.split("```bash\n")[1].split("\n```")[0] for r in replies]
        assert commands == ["cat -n pkg/mod.py | sed -n '10,14p'", "sed -i '12c\\    return a + b' pkg/mod.py",
                            "python3 -m pytest -q 2>&1 | tail -n 3", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
        scripts.add(tuple(replies))
    assert len(scripts) > 1  # the thoughts vary, the commands do not
    insert = guided_replies([LineEdit("m.py", 1, (), ("import os",))], rng=random.Random(0))
    assert "sed -i '1i\\import os' m.py" in insert[1]
    assert "sed -n '1,3p'" in insert[0]


def test_reference_edits_come_from_the_solution() -> None:
    task = Task.load(examples_dir() / "fix-greeting")
    edits = asyncio.run(reference_edits(task))
    expected = LineEdit("greeting.py", 5, ('    return "Hello " + name',), ('    return "Hello, " + name + "!"',))
    assert edits == [expected]


def test_expert_demonstrations_are_solved_and_varied(tmp_path: Path) -> None:
    task = Task.load(examples_dir() / "fix-greeting")
    tokenizer = byte_level_tokenizer(chat_template=CHATML)
    kept, counts = asyncio.run(demonstrations([task], tokenizer=tokenizer, per_task=4, seed=1,
                                              agent_config=AgentConfig(max_steps=8), out_dir=tmp_path))
    assert counts == {"tasks": 1, "no_reference_fix": 0, "episodes": 4, "solved": 4}
    assert len(list(tmp_path.glob("*.json"))) == 4
    scripts = {tuple(m["content"] for m in t.messages if m["role"] == "assistant") for t in kept}
    assert len(scripts) > 1  # seeded variety, not one template
    for t in kept:
        t.validate()
        assert t.status == "submitted"


def test_a_demonstration_over_the_reply_budget_is_refused_naming_the_task() -> None:
    from codedojo.agent.expert import DemonstrationOverBudget

    task = Task.load(examples_dir() / "fix-greeting")
    tokenizer = byte_level_tokenizer(chat_template=CHATML)  # one token per byte: the replies are ~60+ tokens
    with pytest.raises(DemonstrationOverBudget) as caught:
        asyncio.run(demonstrations([task], tokenizer=tokenizer, per_task=1, seed=1,
                                   agent_config=AgentConfig(max_steps=8, max_new_tokens=24)))
    message = str(caught.value)
    assert "fix-greeting" in message and "24" in message
    assert caught.value.tasks == ["fix-greeting"]
    # or left out and listed, the other tasks' demonstrations kept
    kept, counts = asyncio.run(demonstrations([task], tokenizer=tokenizer, per_task=1, seed=1,
                                              agent_config=AgentConfig(max_steps=8, max_new_tokens=24),
                                              leave_out_over_budget=True))
    assert kept == [] and counts["solved"] == 0 and list(counts["left_out"]) == ["fix-greeting"]
    assert "max_new_tokens 24" in counts["left_out"]["fix-greeting"]



def test_tests_passed_reads_only_the_last_output() -> None:
    from codedojo.agent.expert import _tests_passed

    assert _tests_passed("...\nexit code 1\n/app/t.py:3: assert 1 == 2\n1 failed in 0.1s\n"
                         "exit code 0\n12 passed in 0.2s")
    assert not _tests_passed("exit code 0\n12 passed in 0.2s\n...\nexit code 0\n1 failed, 11 passed in 0.2s")
    assert not _tests_passed("exit code 0\nE   SyntaxError: bad\n1 error in 0.1s")
    assert not _tests_passed("exit code 0\n    12\tpassed = 3\n")


@pytest.fixture(scope="module")
def search_tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    from codedojo.cli import main

    out = tmp_path_factory.mktemp("search")
    for tier in ("hinted", "warmup"):
        assert main(["tasks", "builtin", "--repo", "moneybox", "--per-repo", "9", "--tier", tier, "--workers", "1",
                     "--out", str(out / tier)]) == 0
    return [Task.load(p) for tier in ("hinted", "warmup") for p in sorted((out / tier).iterdir())]


def test_search_demonstrations_try_wrong_edits_of_the_line_then_the_fix(search_tasks: list[Task]) -> None:
    from codedojo.agent.expert import TEST_COMMAND

    tokenizer = byte_level_tokenizer(chat_template=CHATML)
    config = AgentConfig(max_steps=6, max_new_tokens=400, max_context_tokens=32000)
    kept, counts = asyncio.run(demonstrations(search_tasks, tokenizer=tokenizer, per_task=4, seed=0,
                                              agent_config=config))
    assert counts["solved"] == counts["episodes"] == 4 * len(search_tasks) and len(search_tasks) == 6
    tasks = {t.name: t for t in search_tasks}
    wrong_attempts = 0
    for trajectory in kept:
        task = tasks[trajectory.episode_id.rsplit("-s", 1)[0]]
        messages = trajectory.messages
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        outputs = [b["content"] for a, b in itertools.pairwise(messages) if a["role"] == "assistant"]
        assert len(replies) <= 6 and replies[0].count("cat -n") == 1 and TEST_COMMAND in replies[0]
        attempts = replies[1:-1]
        assert attempts and all(TEST_COMMAND in a for a in attempts) and "COMPLETE_TASK" in replies[-1]
        # every attempt but the last failed, and the last passed: the demonstration submits on the first pass
        assert all("failed" in o or "error" in o for o in outputs[1:len(attempts)])
        assert " passed in " in outputs[len(attempts)] and "failed" not in outputs[len(attempts)]
        wrong_attempts += len(attempts) - 1
        metadata = task.config.metadata
        if metadata["tier"] == "hinted" and len(attempts) > 1:  # wrong edits of the hinted kind only
            source = (task.environment_dir / "repo" / metadata["file"]).read_text()
            allowed = line_variants(source, path=metadata["file"], line=metadata["line"], kinds=(metadata["bug_kind"],))
            for attempt in attempts[:-1]:
                written = re.search(r"c\\(.*)' ", attempt)
                assert written and written.group(1) in allowed, attempt
    assert wrong_attempts >= len(kept) // 2  # WRONG_ATTEMPTS' mean is 1.15 a demonstration


def test_line_variants_are_the_one_mutation_rewrites_of_that_line() -> None:
    source = "def f(a, b):\n    if a < b:\n        return a - 1\n    return b\n"
    assert line_variants(source, path="m.py", line=2) == [
        "    if a <= b:", "    if not a < b:", "    if b < b:", "    if a < a:"]
    assert line_variants(source, path="m.py", line=2, kinds=("comparison_flip",)) == ["    if a <= b:"]
    assert line_variants(source, path="m.py", line=3, kinds=("off_by_one", "wrong_operator")) == [
        "        return a + 1", "        return a - 2", "        return a - 0"]
    # nodes spanning other lines (the if statement) and a line outside the file give nothing
    assert line_variants(source, path="m.py", line=9) == []
    assert line_variants("x = (\n  1 + 2)\n", path="m.py", line=1) == []
