"""Mutation operators: each turns one AST node into zero or more buggy replacements.

An operator is a pure function `(node, where) -> list[replacement]`. It never changes `node`; it returns
fresh nodes (or `None`, meaning "delete this statement"). `where` says where the node sits (its parent
and field) and which names are local to the enclosing function, which some operators need. The order of
the returned list is part of the output format: a site is addressed by (node index, kind, variant).

Each operator is one bug kind, named the way the metadata and docs/tasks.md name it.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass

Replacement = ast.AST | None


@dataclass(frozen=True)
class Where:
    """The context of a node: its parent, the parent's field holding it, and the function's locals."""

    parent: ast.AST | None
    field: str
    local_names: tuple[str, ...]
    """Parameters and assigned names of the enclosing function, in order of first appearance."""


_FLIPPED_COMPARISON: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}

# Swaps stay within one precedence level where possible so the edit reads like a typo, not a rewrite.
_WRONG_BINARY: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}

_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)

_SWAPPED_CHARACTER = {
    ",": ";", ";": ",", ".": ",", "-": "_", "_": "-", " ": "", ":": "=", "=": ":",
    "/": "\\", "\n": " ", "|": "/", "+": "-", "*": "+", "#": ";", "0": "1", "1": "0",
    "x": "X", "%": "$", "(": "[", ")": "]", "[": "(", "]": ")", "'": '"', '"': "'",
}

_UNWRAPPABLE_BUILTINS = frozenset(
    {"sorted", "reversed", "list", "abs", "round", "int", "float", "str", "tuple", "set", "frozenset"}
)
_UNWRAPPABLE_METHODS = frozenset(
    {"strip", "lstrip", "rstrip", "lower", "upper", "title", "casefold", "copy", "capitalize"}
)


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _with(node: ast.AST, **changes: object) -> ast.AST:
    new = copy.deepcopy(node)
    for name, value in changes.items():
        setattr(new, name, value)
    return new


def comparison_flip(node: ast.AST, where: Where) -> list[Replacement]:
    """`<` becomes `<=`, `==` becomes `!=`, `in` becomes `not in`, and back."""
    if not isinstance(node, ast.Compare):
        return []
    out: list[Replacement] = []
    for i, op in enumerate(node.ops):
        flipped = _FLIPPED_COMPARISON.get(type(op))
        if flipped is not None:
            ops = [*node.ops[:i], flipped(), *node.ops[i + 1 :]]
            out.append(_with(node, ops=ops))
    return out


def off_by_one(node: ast.AST, where: Where) -> list[Replacement]:
    """An integer used in arithmetic, an index, a slice, a comparison or range() moves by one."""
    parent = where.parent
    if _is_int(node):
        in_range = isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "range"
        if not isinstance(parent, ast.BinOp | ast.Subscript | ast.Slice | ast.Compare | ast.UnaryOp) and not in_range:
            return []
        value = node.value
        return [ast.Constant(value + 1)] + ([ast.Constant(value - 1)] if value > 0 else [])
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "range"
        and 1 <= len(node.args) <= 2
        and not node.keywords
    ):
        stop_index = 0 if len(node.args) == 1 else 1
        stop = node.args[stop_index]
        if _is_int(stop):
            return []  # the constant itself is a site of its own
        args = list(copy.deepcopy(node.args))
        args[stop_index] = ast.BinOp(left=copy.deepcopy(stop), op=ast.Sub(), right=ast.Constant(1))
        return [_with(node, args=args)]
    return []


def wrong_constant(node: ast.AST, where: Where) -> list[Replacement]:
    """A literal takes another value: numbers change, booleans invert, short strings change a character."""
    if not isinstance(node, ast.Constant):
        return []
    value = node.value
    if isinstance(value, bool):
        return [ast.Constant(not value)]
    if isinstance(value, int):
        if value in (0, 1):
            return [ast.Constant(1 - value)]
        return [ast.Constant(value * 2)]
    if isinstance(value, float):
        return [ast.Constant(value * 2 if value else 1.0)]
    if isinstance(value, str) and 1 <= len(value) <= 3:
        if len(value) == 1:
            swapped = _SWAPPED_CHARACTER.get(value)
            return [] if swapped is None else [ast.Constant(swapped)]
        reversed_value = value[::-1]
        return [] if reversed_value == value else [ast.Constant(reversed_value)]
    return []


def swapped_arguments(node: ast.AST, where: Where) -> list[Replacement]:
    """The first two positional arguments of a call trade places."""
    if not isinstance(node, ast.Call) or len(node.args) < 2:
        return []
    first, second = node.args[0], node.args[1]
    if any(isinstance(a, ast.Starred) for a in (first, second)) or ast.dump(first) == ast.dump(second):
        return []
    args = [copy.deepcopy(second), copy.deepcopy(first), *copy.deepcopy(node.args[2:])]
    return [_with(node, args=args)]


def swapped_operands(node: ast.AST, where: Where) -> list[Replacement]:
    """`a - b` becomes `b - a` (only for operators where order matters)."""
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, _NON_COMMUTATIVE):
        return []
    if ast.dump(node.left) == ast.dump(node.right):
        return []
    return [ast.BinOp(left=copy.deepcopy(node.right), op=type(node.op)(), right=copy.deepcopy(node.left))]


def wrong_operator(node: ast.AST, where: Where) -> list[Replacement]:
    """`+` becomes `-`, `*` becomes `//`, `and` becomes `or`, a unary minus disappears."""
    if isinstance(node, ast.BinOp | ast.AugAssign):
        wrong = _WRONG_BINARY.get(type(node.op))
        return [] if wrong is None else [_with(node, op=wrong())]
    if isinstance(node, ast.BoolOp):
        return [_with(node, op=ast.Or() if isinstance(node.op, ast.And) else ast.And())]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant):
        return [copy.deepcopy(node.operand)]
    return []


def negated_condition(node: ast.AST, where: Where) -> list[Replacement]:
    """The test of an `if`, `while`, conditional expression or comprehension filter is inverted."""
    parent = where.parent
    is_test = where.field == "test" and isinstance(parent, ast.If | ast.While | ast.IfExp)
    if not is_test and not (where.field == "ifs" and isinstance(parent, ast.comprehension)):
        return []
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return [copy.deepcopy(node.operand)]
    return [ast.UnaryOp(op=ast.Not(), operand=copy.deepcopy(node))]


def dropped_statement(node: ast.AST, where: Where) -> list[Replacement]:
    """A simple statement (assignment, call, raise, break, continue, guard clause) is deleted."""
    if where.field not in ("body", "orelse", "finalbody") or isinstance(where.parent, ast.Module | ast.ClassDef):
        return []
    if isinstance(node, ast.Expr):
        return [None] if isinstance(node.value, ast.Call) else []
    if isinstance(node, ast.Assign | ast.AugAssign | ast.Raise | ast.Continue | ast.Break):
        return [None]
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [None]
    if isinstance(node, ast.If) and not node.orelse and len(node.body) == 1:
        # A guard clause: `if bad: raise/return/continue`.
        return [None] if isinstance(node.body[0], ast.Raise | ast.Return | ast.Continue | ast.Break) else []
    return []


def wrong_return(node: ast.AST, where: Where) -> list[Replacement]:
    """A function returns the wrong thing: the opposite boolean, `None`, or one operand of a sum."""
    if not isinstance(node, ast.Return) or node.value is None:
        return []
    value = node.value
    if isinstance(value, ast.Constant):
        if isinstance(value.value, bool):
            return [ast.Return(value=ast.Constant(not value.value))]
        return [] if value.value is None else [ast.Return(value=ast.Constant(None))]
    if isinstance(value, ast.BinOp):
        return [ast.Return(value=copy.deepcopy(value.left))]
    if isinstance(value, ast.Compare | ast.BoolOp):
        return [ast.Return(value=ast.UnaryOp(op=ast.Not(), operand=copy.deepcopy(value)))]
    return [ast.Return(value=ast.Constant(None))]


def dropped_call(node: ast.AST, where: Where) -> list[Replacement]:
    """A normalising call is lost: `sorted(x)` becomes `x`, `s.strip()` becomes `s`."""
    if not isinstance(node, ast.Call) or node.keywords:
        return []
    func = node.func
    if isinstance(func, ast.Name) and func.id in _UNWRAPPABLE_BUILTINS and len(node.args) == 1:
        if isinstance(node.args[0], ast.Starred):
            return []
        return [copy.deepcopy(node.args[0])]
    if isinstance(func, ast.Attribute) and func.attr in _UNWRAPPABLE_METHODS and not node.args:
        return [copy.deepcopy(func.value)]
    return []


def wrong_variable(node: ast.AST, where: Where) -> list[Replacement]:
    """A local variable is read where the one defined just before (or after) it was meant."""
    if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
        return []
    names = [n for n in where.local_names if n not in ("self", "cls")]
    if node.id not in names or len(names) < 2 or (isinstance(where.parent, ast.Call) and where.field == "func"):
        return []
    i = names.index(node.id)
    other = names[i - 1] if i > 0 else names[i + 1]
    return [ast.Name(id=other, ctx=ast.Load())]


Operator = Callable[[ast.AST, Where], list[Replacement]]

OPERATORS: dict[str, Operator] = {
    "comparison_flip": comparison_flip,
    "off_by_one": off_by_one,
    "wrong_constant": wrong_constant,
    "swapped_arguments": swapped_arguments,
    "swapped_operands": swapped_operands,
    "wrong_operator": wrong_operator,
    "negated_condition": negated_condition,
    "dropped_statement": dropped_statement,
    "wrong_return": wrong_return,
    "dropped_call": dropped_call,
    "wrong_variable": wrong_variable,
}
"""Bug kind -> operator. The order is the order sites are listed in."""
