import pytest

from exprcalc import evaluate
from exprcalc.evaluator import EvalError, free_variables


def test_arithmetic():
    assert evaluate("1 + 2 * 3") == 7
    assert evaluate("(1 + 2) * 3") == 9
    assert evaluate("10 - 4 - 3") == 3


def test_division_keeps_integers_when_exact():
    assert evaluate("8 / 4") == 2
    assert isinstance(evaluate("8 / 4"), int)
    assert evaluate("7 / 2") == 3.5


def test_modulo_and_power():
    assert evaluate("17 % 5") == 2
    assert evaluate("2 ^ 3 ^ 2") == 512
    assert evaluate("-2 ^ 2") == -4


def test_division_by_zero():
    with pytest.raises(EvalError):
        evaluate("1 / 0")
    with pytest.raises(EvalError):
        evaluate("1 % 0")


def test_variables():
    assert evaluate("x * y + 1", {"x": 3, "y": 4}) == 13
    with pytest.raises(EvalError):
        evaluate("x + 1")


def test_functions():
    assert evaluate("max(3, 7) - min(3, 7)") == 4
    assert evaluate("sqrt(16) + abs(-2)") == 6
    assert evaluate("round(2.567, 2)") == 2.57


def test_function_errors():
    with pytest.raises(EvalError):
        evaluate("nope(1)")
    with pytest.raises(EvalError):
        evaluate("max(1)")


def test_negation():
    assert evaluate("--3") == 3
    assert evaluate("-(2 + 3) * 2") == -10


def test_free_variables():
    assert free_variables("a + max(b, -c) * a") == ["a", "b", "c"]
    assert free_variables("1 + 2") == []
