"""Bad input at every entry point: an error naming the input (file, row, key, argument, request field) and what
to do, never a traceback from deep inside, never a half-written output. docs/reliability.md lists each entry
point with the test that guards it; the rows other files already guard are named there, not repeated here."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codedojo.tasks.task import Task, TaskError, examples_dir
from codedojo.trial.verifier import VerifierError, parse_reward_json, parse_reward_txt

EXAMPLE = examples_dir() / "hello-file"

# ----- task directories: task.toml, instruction.md, tests/ ------------------------------------------------


def _not_utf8(name: str) -> Callable[[Path], None]:
    return lambda task: (task / name).write_bytes(b"\xff\xfe not UTF-8\n")


def _test_sh_a_folder(task: Path) -> None:
    (task / "tests" / "test.sh").unlink()
    (task / "tests" / "test.sh").mkdir()


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (_not_utf8("instruction.md"), "instruction.md is not UTF-8 text (byte 0); save it as UTF-8"),
        (_not_utf8("task.toml"), "task.toml is not UTF-8 text"),
        (lambda task: shutil.rmtree(task / "tests"), "tests/test.sh is missing"),
        (_test_sh_a_folder, "tests/test.sh is not a regular file"),
    ],
    ids=["instruction-not-utf8", "task-toml-not-utf8", "no-tests-folder", "test-sh-a-folder"],
)
def test_a_broken_task_directory_is_named_with_its_problem(tmp_path: Path, breakage: Callable[[Path], None],
                                                           message: str) -> None:
    task = tmp_path / "task"
    shutil.copytree(EXAMPLE, task)
    breakage(task)
    with pytest.raises(TaskError) as raised:
        Task.load(task)
    assert f"{task}: {message}" in str(raised.value)


# ----- the verifier's reward file ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "data"),
    [(parse_reward_txt, b"1" * 1_000_000), (parse_reward_txt, b"x" * 1_000_000),
     (parse_reward_json, b'{"reward": "' + b"y" * 1_000_000 + b'"}')],
    ids=["txt-huge-number", "txt-huge-text", "json-huge-value"],
)
def test_a_huge_reward_file_is_refused_in_one_short_line(parse: Callable[[bytes], Any], data: bytes) -> None:
    with pytest.raises(VerifierError) as raised:
        parse(data)
    assert len(str(raised.value)) < 200 and "characters)" in str(raised.value)
