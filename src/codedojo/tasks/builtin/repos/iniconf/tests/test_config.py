import pytest

from iniconf.config import Config
from iniconf.parser import ConfigError

TEXT = """
root = /srv
debug = off

[paths]
data = ${root}/data
logs = ${data}/logs
cache = ${server:name}-cache

[server]
name = alpha
port = 0x1F90
ratio = 0.75
enabled = Yes
tags = a, b,, c
hosts =
    one
    two, three
"""


def cfg():
    return Config.from_text(TEXT)


def test_section_names():
    assert cfg().section_names() == ["paths", "server"]


def test_raw_and_default_fallback():
    c = cfg()
    assert c.raw("paths", "data") == "${root}/data"
    assert c.raw("server", "ROOT") == "/srv"


def test_missing_section_and_key():
    with pytest.raises(KeyError):
        cfg().raw("nope", "x")
    with pytest.raises(KeyError):
        cfg().raw("server", "nope")


def test_interpolation_chain():
    assert cfg().get("paths", "logs") == "/srv/data/logs"


def test_interpolation_other_section():
    assert cfg().get("paths", "cache") == "alpha-cache"


def test_interpolation_cycle():
    c = Config.from_text("[a]\nx = ${y}\ny = ${x}")
    with pytest.raises(ConfigError):
        c.get("a", "x")


def test_get_int_with_base_prefix():
    assert cfg().get_int("server", "port") == 8080
    with pytest.raises(ConfigError):
        cfg().get_int("server", "name")


def test_get_float():
    assert cfg().get_float("server", "ratio") == 0.75
    with pytest.raises(ConfigError):
        cfg().get_float("server", "name")


def test_get_bool():
    c = cfg()
    assert c.get_bool("server", "enabled") is True
    assert c.get_bool("server", "debug") is False
    with pytest.raises(ConfigError):
        c.get_bool("server", "name")


def test_get_list():
    c = cfg()
    assert c.get_list("server", "tags") == ["a", "b", "c"]
    assert c.get_list("server", "hosts") == ["one", "two", "three"]


def test_merged():
    base = Config.from_text("[a]\nx = 1\ny = 2\n[b]\nz = 3")
    top = Config.from_text("[a]\ny = 20\n[c]\nw = 4")
    merged = base.merged(top)
    assert merged.sections["a"] == {"x": "1", "y": "20"}
    assert merged.section_names() == ["a", "b", "c"]
    assert base.sections["a"]["y"] == "2"


def test_as_dict():
    c = Config.from_text("k = ${n}!\nn = 1\n[s]\nn = 2")
    assert c.as_dict() == {"s": {"k": "2!", "n": "2"}}
