import pytest

from textkit.layout import center, columns, truncate, wrap


def test_wrap_greedy():
    assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


def test_wrap_exact_width():
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]


def test_wrap_long_word():
    assert wrap("a verylongword b", 4) == ["a", "verylongword", "b"]


def test_wrap_empty_and_bad_width():
    assert wrap("   ", 5) == []
    with pytest.raises(ValueError):
        wrap("x", 0)


def test_truncate_short_text_untouched():
    assert truncate("hello", 5) == "hello"


def test_truncate_cuts_and_strips():
    assert truncate("hello world", 9) == "hello..."


def test_truncate_tiny_limit():
    assert truncate("hello", 2) == ".."


def test_truncate_custom_ellipsis():
    assert truncate("abcdefgh", 5, ellipsis="~") == "abcd~"


def test_center_odd_gap():
    assert center("ab", 5, "*") == "*ab**"


def test_center_too_wide():
    assert center("abcdef", 3) == "abcdef"


def test_columns():
    rows = [["name", "qty"], ["apple", "3"], ["kiwi", "12"]]
    assert columns(rows) == ["name   qty", "apple  3", "kiwi   12"]


def test_columns_ragged_and_gap():
    assert columns([["a"], ["bb", "c"]], gap=1) == ["a", "bb c"]
    assert columns([]) == []
