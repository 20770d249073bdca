"""grade.awk's log parsers on hand-written logs, under every installed awk.

Each `<case>.log` under tests/fixtures/swerebench/logs/ has a `<case>.json` mapping upstream parser names
to the exact {test id: status} the parser must produce from it, derived by hand from the upstream rules
(which status wins when a test repeats, what the id keeps or drops)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codedojo.tasks.swerebench.grading import grade_log, supported_parsers
from swerebench_support import awk_params

LOGS = Path(__file__).parent / "fixtures" / "swerebench" / "logs"


def _cases() -> list[tuple[Path, str, dict[str, str]]]:
    cases = []
    for expected_file in sorted(LOGS.rglob("*.json")):
        for parser, expected in json.loads(expected_file.read_text(encoding="utf-8")).items():
            cases.append((expected_file.with_suffix(".log"), parser, expected))
    return cases


CASES = _cases()


@awk_params
@pytest.mark.parametrize(
    ("log", "parser", "expected"), CASES, ids=[f"{c[0].parent.name}/{c[0].stem}:{c[1]}" for c in CASES]
)
def test_parser_reads_fixture(log: Path, parser: str, expected: dict[str, str], awk: tuple[str, ...]) -> None:
    grade = grade_log(log.read_bytes(), parser=parser, fail_to_pass=["placeholder"], pass_to_pass=[], awk=awk)
    assert grade.error is None
    assert grade.report["parsed"] == expected


def test_every_supported_parser_has_a_fixture() -> None:
    covered = {parser for _, parser, _ in CASES}
    assert supported_parsers() - covered == set()


@awk_params
def test_awks_agree_on_the_parser_list(awk: tuple[str, ...]) -> None:
    assert supported_parsers(awk=awk) == supported_parsers()
