"""What a failing test shows a user: the code that was run, what came back, what was expected.

Built only from the test run (the exception, the compared values) and the test's own source, never from
the mutation, so a problem statement written from an observation describes behaviour, as a bug report
would. Memory addresses are removed from every repr so the text is the same on every run.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import textwrap
from dataclasses import dataclass

from codedojo.tasks.factory.testrun import Failure

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_WHERE = re.compile(r"^\s*\+\s+where (.+?) = (.+)$", re.MULTILINE)
_NOT_RAISED = re.compile(r"DID NOT RAISE <class '(?:[\w.]*\.)?(\w+)'>")
_MAX_SNIPPET_LINES = 20


def clean(text: str) -> str:
    """A repr or message without memory addresses, on one line when short."""
    return _ADDRESS.sub("", text).strip()


@dataclass(frozen=True)
class Observation:
    """One failing test, told as behaviour."""

    test_id: str
    snippet: str
    """Python code that shows the behaviour (the test body, parameters bound)."""
    summary: str
    """One or two sentences: what was run, what came back, what was expected."""
    has_values: bool
    """True when the summary quotes an actual and an expected value."""


def _find_function(tree: ast.Module, name: str, lineno: int | None) -> ast.FunctionDef | None:
    best: ast.FunctionDef | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            contains = lineno is not None and node.lineno <= lineno <= (node.end_lineno or node.lineno)
            if best is None or contains:
                best = node
    return best


def _statement_at(func: ast.FunctionDef, lineno: int | None) -> ast.stmt | None:
    """The innermost statement of `func` covering `lineno`."""
    if lineno is None:
        return None
    found: ast.stmt | None = None
    for node in ast.walk(func):
        if isinstance(node, ast.stmt) and node is not func:
            if node.lineno <= lineno <= (node.end_lineno or node.lineno):
                if found is None or node.lineno >= found.lineno:
                    found = node
    return found


def _enclosing_with(func: ast.FunctionDef, lineno: int | None) -> ast.With | None:
    if lineno is None:
        return None
    for node in ast.walk(func):
        if isinstance(node, ast.With) and node.lineno <= lineno <= (node.end_lineno or node.lineno):
            return node
    return None


def _snippet(source: str, func: ast.FunctionDef, params: dict[str, str]) -> str:
    lines = source.splitlines()
    body = func.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
        and len(body) > 1
    ):
        body = body[1:]
    start, end = body[0].lineno, body[-1].end_lineno or body[-1].lineno
    text = textwrap.dedent("\n".join(lines[start - 1 : end]))
    bound = "".join(f"{name} = {clean(value)}\n" for name, value in params.items())
    return bound + text


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _source(node: ast.AST, source: str) -> str:
    """The node's text as the test's author wrote it (on one line), else unparsed."""
    segment = ast.get_source_segment(source, node)
    if segment is None:
        return ast.unparse(node)
    return " ".join(part.strip() for part in segment.splitlines())


def _summary_for_compare(stmt: ast.stmt, compare: dict[str, str], source: str) -> tuple[str, bool]:
    op, left, right = compare["op"], clean(compare["left"]), clean(compare["right"])
    test = stmt.test if isinstance(stmt, ast.Assert) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left_src, right_src = _source(test.left, source), _source(test.comparators[0], source)
        if _is_literal(test.left) and not _is_literal(test.comparators[0]):
            left_src, right_src, left, right = right_src, left_src, right, left
        expected = right_src if _is_literal(ast.parse(right_src, mode="eval").body) else right
        if op == "==":
            return f"`{left_src}` gives `{left}`, but `{expected}` is expected.", True
        if op == "!=":
            return f"`{left_src}` gives `{left}`, which it should not.", True
    where = _source(test if test is not None else stmt, source)
    return f"The check `{where}` does not hold: the left side is `{left}`, the right side is `{right}`.", True


def _summary_for_assertion(stmt: ast.stmt, message: str, source: str) -> tuple[str, bool]:
    where = _source(stmt.test if isinstance(stmt, ast.Assert) else stmt, source)
    match = _WHERE.search(message)
    if match:
        value, expression = clean(match.group(1)), clean(match.group(2))
        return f"The check `{where}` does not hold: `{expression}` gives `{value}`.", True
    return f"The check `{where}` does not hold.", False


def observe(failure: Failure, *, test_id: str, test_source: str) -> Observation:
    """Describe `failure` of `test_id`, reading the test's code from `test_source`."""
    tree = ast.parse(test_source)
    func = _find_function(tree, failure.function, failure.test_lineno)
    params = dict(failure.params)
    if func is None:
        return Observation(test_id, "", f"It fails with `{failure.exc_type}: {clean(failure.message)}`.", False)
    snippet = _snippet(test_source, func, params)
    stmt = _statement_at(func, failure.test_lineno)
    if snippet.count("\n") >= _MAX_SNIPPET_LINES and stmt is not None:
        snippet = textwrap.dedent(ast.get_source_segment(test_source, stmt, padded=True) or ast.unparse(stmt))
    if failure.exc_type == "RecursionError":
        # Its message depends on where the stack ran out, which depends on how deep the runner was.
        failure = dataclasses.replace(failure, message="maximum recursion depth exceeded")
    not_raised = _NOT_RAISED.search(failure.message)
    if failure.exc_type == "Failed" and not_raised:
        block = _enclosing_with(func, failure.test_lineno)
        code = "; ".join(_source(s, test_source) for s in block.body) if block else "the code above"
        summary = f"`{code}` should raise `{not_raised.group(1)}`, but it returns without an error."
        return Observation(test_id, snippet, summary, True)
    if stmt is None:
        message = clean(failure.message).splitlines()[0] if failure.message else ""
        return Observation(test_id, snippet, f"It fails with `{failure.exc_type}: {message}`.", False)
    if failure.exc_type == "AssertionError" and failure.compare:
        summary, has_values = _summary_for_compare(stmt, dict(failure.compare), test_source)
    elif failure.exc_type == "AssertionError":
        summary, has_values = _summary_for_assertion(stmt, failure.message, test_source)
    else:
        message = clean(failure.message).splitlines()[0] if failure.message.strip() else ""
        error = f"{failure.exc_type}: {message}" if message else failure.exc_type
        if isinstance(stmt, ast.Assert):
            summary = f"Evaluating `{_source(stmt.test, test_source)}` raises `{error}`."
        else:
            summary = f"`{_source(stmt, test_source).splitlines()[0]}` raises `{error}`."
        has_values = False
    return Observation(test_id, snippet, summary, has_values)
