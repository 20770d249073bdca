import pytest

from exprcalc.tokens import ExprSyntaxError, tokenize


def kinds(text):
    return [(t.kind, t.text) for t in tokenize(text)]


def test_numbers_and_ops():
    assert kinds("12+3.5") == [("num", "12"), ("op", "+"), ("num", "3.5"), ("end", "")]


def test_leading_dot_number():
    assert kinds(".5") == [("num", ".5"), ("end", "")]


def test_second_dot_ends_number():
    assert [t.text for t in tokenize("1.2.3")][:2] == ["1.2", ".3"]


def test_names_and_punctuation():
    assert kinds("max(a_1, b)") == [
        ("name", "max"), ("lparen", "("), ("name", "a_1"), ("comma", ","),
        ("name", "b"), ("rparen", ")"), ("end", ""),
    ]


def test_positions():
    assert [t.pos for t in tokenize(" x * 10")] == [1, 3, 5, 7]


def test_bad_character():
    with pytest.raises(ExprSyntaxError, match="position 2"):
        tokenize("1 $ 2")
