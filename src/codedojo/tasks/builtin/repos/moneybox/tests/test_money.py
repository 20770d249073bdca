import pytest
from moneybox import Money, MoneyError, get_currency
from moneybox.money import round_half_even


def test_round_half_even_ties():
    assert round_half_even(5, 2) == 2
    assert round_half_even(7, 2) == 4
    assert round_half_even(-5, 2) == -2


def test_round_half_even_non_ties():
    assert round_half_even(7, 3) == 2
    assert round_half_even(8, 3) == 3
    assert round_half_even(10, -4) == -2


def test_get_currency_normalises_code():
    assert get_currency(" usd ").symbol == "$"
    assert get_currency("JPY").factor == 1
    assert get_currency("KWD").factor == 1000


def test_get_currency_unknown():
    with pytest.raises(KeyError):
        get_currency("XXX")


def test_parse_simple():
    assert Money.parse("12.34") == Money(1234)


def test_parse_grouped_and_short_fraction():
    assert Money.parse("1,234.5") == Money(123450)


def test_parse_negative():
    assert Money.parse("-0.07", "EUR") == Money(-7, "EUR")


def test_parse_whole_yen():
    assert Money.parse("1200", "JPY") == Money(1200, "JPY")


def test_parse_rejects_extra_decimals():
    with pytest.raises(MoneyError):
        Money.parse("1.234", "USD")


def test_parse_rejects_garbage():
    with pytest.raises(MoneyError):
        Money.parse("12a")


def test_amount_must_be_int():
    with pytest.raises(MoneyError):
        Money(1.5)


def test_add_and_subtract():
    assert Money(150) + Money(275) == Money(425)
    assert Money(150) - Money(275) == Money(-125)
    assert -Money(3) == Money(-3)


def test_currency_mismatch():
    with pytest.raises(MoneyError):
        Money(1, "USD") + Money(1, "EUR")


def test_multiply_by_int_and_float():
    assert Money(250) * 3 == Money(750)
    assert Money(100) * 0.125 == Money(12)
    assert Money(100) * 0.135 == Money(14)


def test_ordering():
    assert Money(5) < Money(6)
    assert not Money(6) < Money(6)
    assert Money(6) <= Money(6)
    assert not Money(7) <= Money(6)


def test_equality_and_hash():
    assert Money(5, "USD") != Money(5, "EUR")
    assert len({Money(5), Money(5), Money(6)}) == 2
    assert Money(0).is_zero() and not Money(1).is_zero()


def test_allocate_remainder_to_first_parts():
    parts = Money(100).allocate([1, 1, 1])
    assert [p.minor for p in parts] == [34, 33, 33]


def test_allocate_uneven_ratios():
    parts = Money(1000).allocate([70, 20, 10])
    assert [p.minor for p in parts] == [700, 200, 100]


def test_allocate_keeps_total():
    parts = Money(1001).allocate([3, 7])
    assert sum(p.minor for p in parts) == 1001
    assert [p.minor for p in parts] == [301, 700]


def test_allocate_rejects_bad_ratios():
    with pytest.raises(MoneyError):
        Money(10).allocate([0, 0])
    with pytest.raises(MoneyError):
        Money(10).allocate([2, -1])


def test_split():
    assert [p.minor for p in Money(10).split(4)] == [3, 3, 2, 2]
    with pytest.raises(MoneyError):
        Money(10).split(0)


def test_format_grouping():
    assert Money(123450).format() == "$1,234.50"
    assert Money(123450).format(grouping=False) == "$1234.50"


def test_format_negative_and_small():
    assert Money(-7, "EUR").format() == "-€0.07"


def test_format_zero_exponent_and_three_decimals():
    assert Money(1200, "JPY").format() == "¥1,200"
    assert Money(1005, "KWD").format(symbol=False) == "1.005"


def test_str_and_repr():
    assert str(Money(5)) == "$0.05"
    assert repr(Money(5, "EUR")) == "Money(5, 'EUR')"
