import pytest

from datecalc.calendar import Date, DateError
from datecalc.parsing import format_duration, parse_date, parse_duration


def test_parse_iso():
    assert parse_date("2024-03-05") == Date(2024, 3, 5)


def test_parse_day_first():
    assert parse_date(" 05/03/2024 ") == Date(2024, 3, 5)


def test_parse_month_name():
    assert parse_date("5 March 2024") == Date(2024, 3, 5)
    assert parse_date("31 dec 1999") == Date(1999, 12, 31)


def test_parse_errors():
    with pytest.raises(DateError):
        parse_date("5 Foo 2024")
    with pytest.raises(DateError):
        parse_date("yesterday")
    with pytest.raises(DateError):
        parse_date("2023-02-30")


def test_parse_duration():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2w 1d") == 1296000
    assert parse_duration("45s") == 45


def test_parse_duration_errors():
    with pytest.raises(ValueError):
        parse_duration("")
    with pytest.raises(ValueError):
        parse_duration("1h x")
    with pytest.raises(ValueError):
        parse_duration("h1")


def test_format_duration():
    assert format_duration(5400) == "1h 30m"
    assert format_duration(0) == "0s"
    assert format_duration(694861) == "1w 1d 1h 1m 1s"


def test_format_duration_negative():
    with pytest.raises(ValueError):
        format_duration(-1)
