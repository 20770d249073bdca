"""Evaluating parsed expressions."""

import math

from exprcalc.parser import parse

FUNCTIONS = {
    "abs": (1, abs),
    "min": (2, min),
    "max": (2, max),
    "sqrt": (1, math.sqrt),
    "round": (2, round),
}


class EvalError(ValueError):
    """The expression cannot be evaluated (unknown name, bad arguments, division by zero)."""


def _apply(op: str, left: float, right: float) -> float:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op in "/%" and right == 0:
        raise EvalError("division by zero")
    if op == "/":
        result = left / right
        return int(result) if result == int(result) else result
    if op == "%":
        return left % right
    if op == "^":
        return left**right
    raise EvalError(f"unknown operator {op!r}")


def evaluate_tree(node: tuple, variables: dict[str, float]) -> float:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        name = node[1]
        if name not in variables:
            raise EvalError(f"unknown variable {name!r}")
        return variables[name]
    if kind == "neg":
        return -evaluate_tree(node[1], variables)
    if kind == "bin":
        return _apply(node[1], evaluate_tree(node[2], variables), evaluate_tree(node[3], variables))
    name, args = node[1], node[2]
    if name not in FUNCTIONS:
        raise EvalError(f"unknown function {name!r}")
    arity, func = FUNCTIONS[name]
    if len(args) != arity:
        raise EvalError(f"{name} takes {arity} argument(s), got {len(args)}")
    return func(*(evaluate_tree(a, variables) for a in args))


def evaluate(text: str, variables: dict[str, float] | None = None) -> float:
    return evaluate_tree(parse(text), variables or {})


def free_variables(text: str) -> list[str]:
    """Variable names used in the expression, sorted, without duplicates."""
    found: set[str] = set()

    def walk(node: tuple) -> None:
        if node[0] == "var":
            found.add(node[1])
        elif node[0] == "neg":
            walk(node[1])
        elif node[0] == "bin":
            walk(node[2])
            walk(node[3])
        elif node[0] == "call":
            for arg in node[2]:
                walk(arg)

    walk(parse(text))
    return sorted(found)
