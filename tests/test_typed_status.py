"""No episode status compared with a string: code reads `EpisodeStatus` (trial/status.py says why), so a
renamed or new status cannot silently fall through a string comparison somewhere downstream."""

from __future__ import annotations

import ast
from pathlib import Path

import codedojo
from codedojo.trial.status import EpisodeStatus

SRC = Path(codedojo.__file__).parent
NAMES = {status.value for status in EpisodeStatus}


def _is_status(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "status"
    if isinstance(node, ast.Name):
        return node.id == "status"
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value == "status"
    return False


def _strings(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for element in node.elts for s in _strings(element)]
    return []


def string_comparisons(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_is_status(side) for side in sides):
            named = [s for side in sides for s in _strings(side) if s in NAMES]
            if named:
                found.append(f"{where}:{node.lineno}: status compared with the string(s) {named}")
    return found


def test_no_status_is_compared_with_a_string() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "trial" / "status.py":
            continue
        found += string_comparisons(path.read_text(encoding="utf-8"), str(path.relative_to(SRC)))
    assert not found, "\n".join(found) + "\ncompare with EpisodeStatus members or ask its properties instead"


def test_the_check_sees_each_form() -> None:
    code = ("if episode.status == 'submitted': pass\n"
            "if row['status'] in ('step_limit', 'other'): pass\n"
            "if 'format_error' != status: pass\n"
            "if episode.status == EpisodeStatus.SUBMITTED: pass\n"   # typed: fine
            "if reply['status'] == 'timeout': pass\n")               # not an episode status: fine
    assert [line.split(":")[1] for line in string_comparisons(code, "x")] == ["1", "2", "3"]
