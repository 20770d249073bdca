"""Arithmetic expressions: tokenize, parse, evaluate."""

from exprcalc.evaluator import evaluate
from exprcalc.parser import parse
from exprcalc.tokens import tokenize

__all__ = ["evaluate", "parse", "tokenize"]
