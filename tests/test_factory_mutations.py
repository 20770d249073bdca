"""Mutation operators and the source splice: hand-written inputs, hand-checked outputs."""

from __future__ import annotations

import ast

import pytest

from codedojo.tasks.factory.mutations import Mutant, apply_site, find_sites
from codedojo.tasks.factory.operators import OPERATORS, Where


def mutants(source: str, kind: str) -> list[Mutant]:
    out = []
    for site in find_sites(source, path="m.py"):
        if site.kind == kind:
            mutant = apply_site(source, site=site)
            assert mutant is not None, site
            out.append(mutant)
    return out


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    pairs = zip(before.splitlines(), after.splitlines(), strict=False)
    return [(a, b) for a, b in pairs if a != b]


def test_comparison_flip():
    src = "def f(a, b):\n    return a < b\n"
    assert [m.source for m in mutants(src, "comparison_flip")] == ["def f(a, b):\n    return a <= b\n"]


def test_comparison_flip_each_operator_of_a_chain():
    src = "def f(a, b, c):\n    return a < b == c\n"
    texts = [m.replacement_text for m in mutants(src, "comparison_flip")]
    assert texts == ["a <= b == c", "a < b != c"]


def test_off_by_one_in_index_and_range():
    src = "def f(xs, n):\n    for i in range(n):\n        xs[i + 1] = 0\n"
    texts = sorted(m.replacement_text for m in mutants(src, "off_by_one"))
    assert texts == ["0", "2", "range(n - 1)"]


def test_wrong_constant_numbers_booleans_strings():
    src = 'def f():\n    return (0, 7, 2.5, True, ",", "ab")\n'
    texts = [m.replacement_text for m in mutants(src, "wrong_constant")]
    assert texts == ["1", "14", "5.0", "False", '";"', '"ba"']


def test_swapped_arguments_and_operands():
    src = "def f(a, b):\n    return g(a, b) - h(b)\n"
    assert [m.replacement_text for m in mutants(src, "swapped_arguments")] == ["g(b, a)"]
    assert [m.replacement_text for m in mutants(src, "swapped_operands")] == ["h(b) - g(a, b)"]


def test_wrong_operator_keeps_meaning_with_parentheses():
    src = "def f(x):\n    return 2 * x ** 3\n"
    by_text = {m.replacement_text: m for m in mutants(src, "wrong_operator")}
    assert set(by_text) == {"2 // x ** 3", "(x * 3)"}
    assert "return 2 * (x * 3)" in by_text["(x * 3)"].source


def test_wrong_operator_bool_and_unary():
    src = "def f(a, b):\n    return -a if a and b else a\n"
    texts = sorted(m.replacement_text for m in mutants(src, "wrong_operator"))
    assert texts == ["a", "a or b"]


def test_negated_condition():
    src = (
        "def f(x):\n    if x > 1:\n        return 1\n    while not x:\n        x += 1\n"
        "    return [y for y in x if y]\n"
    )
    texts = [m.replacement_text for m in mutants(src, "negated_condition")]
    assert sorted(texts) == ["not x > 1", "not y", "x"]


def test_dropped_statement_removes_whole_line():
    src = "def f(xs):\n    xs.sort()\n    total = sum(xs)\n    return total\n"
    sources = [m.source for m in mutants(src, "dropped_statement")]
    assert sources == [
        "def f(xs):\n    total = sum(xs)\n    return total\n",
        "def f(xs):\n    xs.sort()\n    return total\n",
    ]


def test_dropped_statement_alone_in_body_becomes_pass():
    src = "def f(x):\n    if x:\n        raise ValueError(x)\n    return x\n"
    sources = sorted(m.source for m in mutants(src, "dropped_statement"))
    assert sources == [
        "def f(x):\n    if x:\n        pass\n    return x\n",
        "def f(x):\n    return x\n",
    ]


def test_wrong_return():
    src = "def f(a, b):\n    if a:\n        return True\n    if b:\n        return a + b\n    return a == b\n"
    texts = sorted(m.replacement_text for m in mutants(src, "wrong_return"))
    assert texts == ["return False", "return a", "return not a == b"]


def test_dropped_call():
    src = "def f(s, xs):\n    return s.strip(), sorted(xs), len(xs)\n"
    assert [m.replacement_text for m in mutants(src, "dropped_call")] == ["s", "xs"]


def test_wrong_variable_uses_neighbouring_local():
    src = "def f(width, height):\n    area = width * height\n    return area\n"
    sources = {m.replacement_text for m in mutants(src, "wrong_variable")}
    assert sources == {"height", "width"}


def test_skips_docstrings_annotations_imports_and_main_guard():
    src = (
        '"""Doc."""\nimport os\n\n__all__ = ["x"]\n\n\ndef f(x: int = 1) -> bool:\n    """Doc."""\n'
        "    return x\n\n\nif __name__ == \"__main__\":\n    print(f(2))\n"
    )
    for site in find_sites(src, path="m.py"):
        mutant = apply_site(src, site=site)
        assert mutant is not None
        assert mutant.function == "f" or "x: int = 1" not in mutant.source
        assert '"""Doc."""' in mutant.source and "import os" in mutant.source
        assert 'if __name__ == "__main__":\n    print(f(2))' in mutant.source


def test_splice_changes_only_the_site_and_parses():
    src = "class A:\n    def m(self, n):\n        # keep   this   comment\n        return n  +  1\n"
    for site in find_sites(src, path="m.py"):
        mutant = apply_site(src, site=site)
        assert mutant is not None
        ast.parse(mutant.source)
        assert "# keep   this   comment" in mutant.source
        assert mutant.function == "A.m"
        assert len(changed_lines(src, mutant.source)) <= 1


def test_sites_are_deterministic_and_cover_every_kind():
    src = (
        "def f(xs, n):\n    if n <= 0 and xs:\n        raise ValueError('n')\n    total = 0\n"
        "    for i in range(n):\n        total += abs(xs[i] - 1)\n    return max(total, n) == 3\n"
    )
    first = find_sites(src, path="m.py")
    assert first == find_sites(src, path="m.py")
    assert {s.kind for s in first} == set(OPERATORS)


@pytest.mark.parametrize("kind", sorted(OPERATORS))
def test_operators_never_modify_their_input(kind):
    src = "def f(a, b):\n    if a < b:\n        a = g(a, b) - 1\n    return sorted([a, b]) and not a\n"
    tree = ast.parse(src)
    before = ast.dump(tree)
    where = Where(parent=None, field="", local_names=("a", "b"))
    for node in ast.walk(tree):
        OPERATORS[kind](node, where)
    assert ast.dump(tree) == before
