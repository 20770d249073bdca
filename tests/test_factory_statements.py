"""Observations (what a failing test shows) and the tiered problem statements built from them."""

from __future__ import annotations

import pytest

from codedojo.tasks.factory.observations import Observation, clean, observe
from codedojo.tasks.factory.statements import Location, pick_observations, write_statement
from codedojo.tasks.factory.testrun import Failure

TEST_SOURCE = '''\
import pytest

from shop import price, parse


def test_price():
    """Doc."""
    base = 10
    assert price(base, 2) == 20


def test_truthy():
    assert parse("x").ok


def test_raises():
    with pytest.raises(ValueError):
        parse("")


def test_crash():
    value = parse("boom")
    assert value == 1


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert price(n, 1) == n
'''


def failure(function: str, line: int, **kwargs) -> Failure:
    fields = {"when": "call", "exc_type": "AssertionError", "message": "", "function": function,
              "test_path": "tests/test_shop.py", "test_lineno": line}
    fields.update(kwargs)
    return Failure(**fields)


def test_compare_failure_names_call_actual_and_expected():
    fail = failure("test_price", 9, compare={"op": "==", "left": "19", "right": "20"})
    obs = observe(fail, test_id="t::test_price", test_source=TEST_SOURCE)
    assert obs.snippet == "base = 10\nassert price(base, 2) == 20"
    assert obs.summary == "`price(base, 2)` gives `19`, but `20` is expected."
    assert obs.has_values


def test_plain_assert_uses_pytest_where_line():
    message = "assert False\n +  where False = <Result at 0x7f00ab>.ok"
    fail = failure("test_truthy", 13, message=message)
    obs = observe(fail, test_id="t::test_truthy", test_source=TEST_SOURCE)
    assert obs.summary == "The check `parse(\"x\").ok` does not hold: `<Result>.ok` gives `False`."


def test_not_raised():
    fail = failure("test_raises", 17, exc_type="Failed", message="DID NOT RAISE <class 'ValueError'>")
    obs = observe(fail, test_id="t::test_raises", test_source=TEST_SOURCE)
    assert obs.summary == "`parse(\"\")` should raise `ValueError`, but it returns without an error."


def test_exception_in_code():
    fail = failure("test_crash", 22, exc_type="KeyError", message="'boom'")
    obs = observe(fail, test_id="t::test_crash", test_source=TEST_SOURCE)
    assert obs.summary == "`value = parse(\"boom\")` raises `KeyError: 'boom'`."
    assert not obs.has_values


def test_parameters_are_bound_in_the_snippet():
    fail = failure("test_param", 28, params={"n": "2"}, compare={"op": "==", "left": "3", "right": "2"})
    obs = observe(fail, test_id="t::test_param[2]", test_source=TEST_SOURCE)
    assert obs.snippet == "n = 2\nassert price(n, 1) == n"
    assert obs.summary == "`price(n, 1)` gives `3`, but `2` is expected."


def test_clean_removes_addresses():
    assert clean("<object at 0xDEADbeef> ") == "<object>"


def test_pick_prefers_values_and_one_per_function():
    obs = [
        Observation("t::b", "", "x", False),
        Observation("t::a[1]", "", "y", True),
        Observation("t::a[2]", "", "z", True),
        Observation("t::c", "", "w", True),
    ]
    assert [o.test_id for o in pick_observations(obs)] == ["t::a[1]", "t::c"]


LOCATION = Location(path="shop/core.py", line=12, line_text="return a - b", function="Cart.total", missing=False)
OBS = [Observation("tests/test_shop.py::test_price", "assert price(1) == 2", "`price(1)` gives `0`.", True)]


def test_tiers_reveal_what_they_should():
    warmup = write_statement(tier="warmup", repo="shop", observations=OBS, location=LOCATION, seed="s")
    easy = write_statement(tier="easy", repo="shop", observations=OBS, location=LOCATION, seed="s")
    hard = write_statement(tier="hard", repo="shop", observations=OBS, location=LOCATION, seed="s")
    assert "line 12" in warmup and "shop/core.py" in warmup and "return a - b" in warmup
    assert "Cart.total" in easy and "line 12" not in easy
    for text in (warmup, easy, hard):
        assert "`price(1)` gives `0`." in text and "assert price(1) == 2" in text
    for secret in ("shop/core.py", "Cart.total", "line 12", "test_price"):
        assert secret not in hard


def test_statement_is_deterministic_and_varies_with_seed():
    texts = {write_statement(tier="hard", repo="shop", observations=OBS, location=LOCATION, seed=str(i))
             for i in range(12)}
    again = write_statement(tier="hard", repo="shop", observations=OBS, location=LOCATION, seed="3")
    assert again == write_statement(tier="hard", repo="shop", observations=OBS, location=LOCATION, seed="3")
    assert len(texts) > 3


def test_missing_statement_wording():
    gap = Location(path="a.py", line=5, line_text="return x", function=None, missing=True)
    text = write_statement(tier="warmup", repo="r", observations=OBS, location=gap, seed="1")
    assert "before line 5" in text


def test_statement_errors():
    with pytest.raises(ValueError, match="unknown tier"):
        write_statement(tier="expert", repo="r", observations=OBS, location=LOCATION, seed="1")
    with pytest.raises(ValueError, match="at least one"):
        write_statement(tier="hard", repo="r", observations=[], location=LOCATION, seed="1")


def test_curriculum_tiers_say_what_they_should() -> None:
    from codedojo.tasks.factory.statements import Fix, fix_between

    fix = fix_between("a\n    return a - b\nc\n", "a\n    return a + b\nc\n")
    assert fix == Fix(line=2, old=("    return a - b",), new=("    return a + b",))
    assert fix_between("a\nc\n", "a\n    b = 1\nc\n") == Fix(line=2, old=(), new=("    b = 1",))
    where = Location(path="shop/core.py", line=12, line_text="return a - b", function="Cart.total", missing=False,
                     bug_kind="wrong_operator", fix=Fix(line=12, old=("    return a - b",), new=("    return a + b",)))
    guided = write_statement(tier="guided", repo="shop", observations=OBS, location=where, seed="s")
    hinted = write_statement(tier="hinted", repo="shop", observations=OBS, location=where, seed="s")
    warmup = write_statement(tier="warmup", repo="shop", observations=OBS, location=where, seed="s")
    # guided: the faulty line and what it must become, indentation kept
    assert "line 12" in guided and "```python\n    return a - b\n```" in guided
    assert "```python\n    return a + b\n```" in guided
    # hinted: the warm-up statement plus the kind of bug, never the fix
    assert hinted.startswith(warmup.split("\n\n")[0]) and "wrong operator" in hinted
    assert "a + b" not in hinted and "a + b" not in warmup
    gap = Location(path="a.py", line=5, line_text="return x", function=None, missing=True,
                   bug_kind="dropped_statement", fix=Fix(line=5, old=(), new=("    x += 1",)))
    text = write_statement(tier="guided", repo="r", observations=OBS, location=gap, seed="1")
    assert "before line 5" in text and "```python\n    x += 1\n```" in text
    with pytest.raises(ValueError, match="reference fix"):
        write_statement(tier="guided", repo="r", observations=OBS, location=LOCATION, seed="1")
