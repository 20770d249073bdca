"""Mutation sites in a Python file, and applying one to get a mutant.

A site is (node index in `ast.walk` order, bug kind, variant). Applying it replaces exactly the source
span of that node with the unparsed replacement and leaves every other byte of the file alone, so the
mutant reads like a hand-made edit and the reference fix is the original file. Each mutant is checked
by re-parsing: its AST must equal the original AST with that one node replaced; if splicing the text
changed the meaning (operator precedence), the replacement is retried in parentheses, then dropped.

Nodes nobody would mutate are skipped: docstrings, annotations, decorators, imports, f-string
internals, `__all__`, and `if __name__ == "__main__":` blocks.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

from codedojo.tasks.factory.operators import OPERATORS, Replacement, Where


@dataclass(frozen=True)
class Site:
    """One possible edit of one file."""

    path: str
    """File, relative to the repository root (posix)."""
    node_index: int
    """Position of the node in `ast.walk` order."""
    kind: str
    """Bug kind (a key of OPERATORS)."""
    variant: int
    """Which of the operator's replacements."""


@dataclass(frozen=True)
class Mutant:
    """A file with one bug in it."""

    site: Site
    source: str
    """The whole mutated file."""
    lineno: int
    """First line of the edit (in both files: nothing before it moves)."""
    function: str | None
    """Qualified name of the innermost enclosing function, e.g. 'Money.allocate'."""
    original_text: str
    """The source span that was replaced."""
    replacement_text: str
    """What replaced it ('' for a deleted statement)."""


@dataclass(frozen=True)
class _Node:
    node: ast.AST
    where: Where
    function: str | None
    skipped: bool


def _is_docstring(stmt: ast.AST, parent: ast.AST, field: str) -> bool:
    body = getattr(parent, "body", None)
    return (
        field == "body"
        and isinstance(body, list)
        and bool(body)
        and body[0] is stmt
        and isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _is_main_guard(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def _is_dunder_all(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
    )


_SKIPPED_FIELDS = {"annotation", "returns", "decorator_list", "type_comment"}
_SKIPPED_NODES = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.JoinedStr)


def _local_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    names: list[str] = []
    args = func.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        names.append(a.arg)
    for sub in ast.walk(func):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.id not in names:
            names.append(sub.id)
    return tuple(names)


def _annotate(tree: ast.Module) -> list[_Node]:
    """Every node in `ast.walk` order with its context. Indices into this list address sites."""
    info: dict[int, _Node] = {id(tree): _Node(tree, Where(None, "", ()), None, False)}
    order: list[ast.AST] = []
    for node in ast.walk(tree):  # breadth-first: a parent is annotated before its children
        order.append(node)
        here = info[id(node)]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            prefix = f"{here.function}." if here.function else ""
            function, local_names = prefix + node.name, _local_names(node)
        elif isinstance(node, ast.ClassDef):
            function = f"{here.function}.{node.name}" if here.function else node.name
            local_names = ()
        else:
            function, local_names = here.function, here.where.local_names
        for field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for child in children:
                if not isinstance(child, ast.AST):
                    continue
                skipped = (
                    here.skipped
                    or field in _SKIPPED_FIELDS
                    or isinstance(child, _SKIPPED_NODES)
                    or (isinstance(child, ast.stmt) and _is_docstring(child, node, field))
                    or _is_main_guard(child)
                    or _is_dunder_all(child)
                )
                info[id(child)] = _Node(child, Where(node, field, local_names), function, skipped)
    return [info[id(n)] for n in order]


def find_sites(source: str, *, path: str) -> list[Site]:
    """Every site in `source`, in a fixed order (node index, then kind, then variant)."""
    tree = ast.parse(source)
    sites: list[Site] = []
    for index, entry in enumerate(_annotate(tree)):
        if entry.skipped:
            continue
        for kind, operator in OPERATORS.items():
            for variant, _ in enumerate(operator(entry.node, entry.where)):
                sites.append(Site(path=path, node_index=index, kind=kind, variant=variant))
    return sites


def _line_starts(data: bytes) -> list[int]:
    starts = [0]
    for i, byte in enumerate(data):
        if byte == 0x0A:
            starts.append(i + 1)
    return starts


def _span(node: ast.AST, starts: list[int]) -> tuple[int, int]:
    # ast offsets are UTF-8 byte columns, so the splice works on bytes.
    start = starts[node.lineno - 1] + node.col_offset
    end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
    return start, end


def _replace_in_tree(where: Where, old: ast.AST, new: Replacement) -> None:
    value = getattr(where.parent, where.field)
    if isinstance(value, list):
        i = next(k for k, v in enumerate(value) if v is old)
        if new is None:
            del value[i]
            if not value:
                value.append(ast.Pass())
        else:
            value[i] = new
    else:
        setattr(where.parent, where.field, new)


def _deletion(data: bytes, start: int, end: int, *, only_statement: bool) -> tuple[int, int, bytes]:
    """Span and text that delete a statement: its whole lines when it has them to itself, else `pass`."""
    line_start = data.rfind(b"\n", 0, start) + 1
    line_end = data.find(b"\n", end)
    line_end = len(data) if line_end < 0 else line_end + 1
    alone = not data[line_start:start].strip() and not data[end:line_end].strip()
    if only_statement or not alone:
        return start, end, b"pass"
    return line_start, line_end, b""


def _unparse_like(new: ast.AST, original_text: str) -> str:
    """`ast.unparse`, but a string literal keeps the original's double quotes (a smaller diff)."""
    if isinstance(new, ast.Constant) and isinstance(new.value, str) and original_text.startswith('"'):
        return json.dumps(new.value, ensure_ascii=False)
    return ast.unparse(new)


def apply_site(source: str, *, site: Site) -> Mutant | None:
    """The mutant for `site`, or None when the edit cannot be written as a faithful text splice."""
    tree = ast.parse(source)
    entries = _annotate(tree)
    entry = entries[site.node_index]
    replacements = OPERATORS[site.kind](entry.node, entry.where)
    if site.variant >= len(replacements):
        return None
    new = replacements[site.variant]
    data = source.encode("utf-8")
    starts = _line_starts(data)
    start, end = _span(entry.node, starts)
    original_text = data[start:end].decode("utf-8")
    siblings = getattr(entry.where.parent, entry.where.field)
    _replace_in_tree(entry.where, entry.node, new)
    expected = ast.dump(tree)
    if new is None:
        only = isinstance(siblings, list) and len(siblings) == 1 and isinstance(siblings[0], ast.Pass)
        start, end, text = _deletion(data, start, end, only_statement=only)
        candidates = [text]
    else:
        text = _unparse_like(new, original_text).encode("utf-8")
        candidates = [text, b"(" + text + b")"]
    for text in candidates:
        mutated = (data[:start] + text + data[end:]).decode("utf-8")
        try:
            if ast.dump(ast.parse(mutated)) != expected:
                continue
        except SyntaxError:
            continue
        return Mutant(
            site=site,
            source=mutated,
            lineno=entry.node.lineno,
            function=entry.function,
            original_text=original_text,
            replacement_text=text.decode("utf-8"),
        )
    return None
