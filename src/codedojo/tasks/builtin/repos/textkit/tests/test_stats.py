import pytest

from textkit.stats import reading_time, render, top_words, word_counts, words


def test_words_lowercase_and_apostrophes():
    assert words("Don't STOP 'me' now") == ["don't", "stop", "me", "now"]


def test_word_counts():
    assert word_counts("a b a c a b") == {"a": 3, "b": 2, "c": 1}


def test_top_words_ties_alphabetical():
    assert top_words("b a c b a d", 3) == [("a", 2), ("b", 2), ("c", 1)]


def test_reading_time():
    assert reading_time("") == 0
    assert reading_time("word " * 10) == 1
    assert reading_time("word " * 401) == 3
    assert reading_time("word " * 400) == 2


def test_reading_time_custom_speed():
    assert reading_time("word " * 30, words_per_minute=10) == 3


def test_render_plain_and_filters():
    assert render("Hi {{ name }}!", {"name": "Ann"}) == "Hi Ann!"
    assert render("{{name|upper}}-{{ name | lower }}", {"name": "Ann"}) == "ANN-ann"


def test_render_non_string_value():
    assert render("{{ n }} items", {"n": 3}) == "3 items"


def test_render_missing_value():
    with pytest.raises(KeyError):
        render("{{ x }}", {})


def test_render_unknown_filter():
    with pytest.raises(ValueError):
        render("{{ x | reverse }}", {"x": "a"})
