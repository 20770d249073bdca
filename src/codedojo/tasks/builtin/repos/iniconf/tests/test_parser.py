import pytest

from iniconf.parser import ConfigError, dump, parse

TEXT = """
# leading comment
owner = ann

[server]
Host = example.org
port: 8080
; another comment
motd = hello
    world

[empty]
"""


def test_sections_and_default():
    s = parse(TEXT)
    assert list(s) == ["DEFAULT", "server", "empty"]
    assert s["DEFAULT"] == {"owner": "ann"}


def test_keys_lowercased_and_colon_separator():
    s = parse(TEXT)
    assert s["server"]["host"] == "example.org"
    assert s["server"]["port"] == "8080"


def test_continuation_lines():
    assert parse(TEXT)["server"]["motd"] == "hello\nworld"


def test_value_with_equals_sign():
    assert parse("[a]\nurl = x=1")["a"]["url"] == "x=1"


def test_repeated_key_replaces():
    assert parse("[a]\nk = 1\nk = 2")["a"] == {"k": "2"}


def test_empty_value():
    assert parse("[a]\nk =")["a"] == {"k": ""}


def test_bad_header():
    with pytest.raises(ConfigError, match="line 2"):
        parse("\n[broken\n")
    with pytest.raises(ConfigError):
        parse("[]")


def test_missing_separator():
    with pytest.raises(ConfigError, match="line 1"):
        parse("just words")


def test_empty_key():
    with pytest.raises(ConfigError):
        parse("[a]\n = 3")


def test_dump_round_trip():
    s = parse(TEXT)
    assert parse(dump(s)) == s


def test_dump_format():
    text = dump({"DEFAULT": {}, "a": {"k": "v", "multi": "x\ny"}, "b": {}})
    assert text == "[a]\nk = v\nmulti = x\n    y\n\n[b]\n"


def test_dump_empty():
    assert dump({"DEFAULT": {}}) == ""
