import pytest

from exprcalc.parser import parse, to_text
from exprcalc.tokens import ExprSyntaxError


def shape(text):
    return to_text(parse(text))


def test_precedence():
    assert shape("1 + 2 * 3") == "(1 + (2 * 3))"


def test_left_associative():
    assert shape("8 - 3 - 2") == "((8 - 3) - 2)"
    assert shape("8 / 4 / 2") == "((8 / 4) / 2)"


def test_power_right_associative():
    assert shape("2 ^ 3 ^ 2") == "(2 ^ (3 ^ 2))"


def test_unary_minus_and_power():
    assert shape("-2 ^ 2") == "(-(2 ^ 2))"
    assert shape("2 ^ -1") == "(2 ^ (-1))"


def test_parentheses():
    assert shape("(1 + 2) * 3") == "((1 + 2) * 3)"


def test_calls():
    assert shape("max(1, 2 + x)") == "max(1, (2 + x))"
    assert shape("f()") == "f()"


def test_float_and_int_literals():
    assert parse("2") == ("num", 2)
    assert parse("2.5") == ("num", 2.5)


def test_errors():
    with pytest.raises(ExprSyntaxError):
        parse("1 +")
    with pytest.raises(ExprSyntaxError):
        parse("(1 + 2")
    with pytest.raises(ExprSyntaxError):
        parse("1 2")
    with pytest.raises(ExprSyntaxError):
        parse("max(1,)")
