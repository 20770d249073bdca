import pytest

from datecalc.calendar import Date, DateError, days_in_month, days_in_year, is_leap


def test_leap_years():
    assert is_leap(2024)
    assert not is_leap(2023)
    assert not is_leap(1900)
    assert is_leap(2000)


def test_days_in_month():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2024, 4) == 30
    assert days_in_month(2024, 12) == 31


def test_days_in_month_bad_month():
    with pytest.raises(DateError):
        days_in_month(2024, 13)
    with pytest.raises(DateError):
        days_in_month(2024, 0)


def test_days_in_year():
    assert days_in_year(2024) == 366
    assert days_in_year(2100) == 365


def test_invalid_dates():
    with pytest.raises(DateError):
        Date(2023, 2, 29)
    with pytest.raises(DateError):
        Date(2023, 4, 0)
    with pytest.raises(DateError):
        Date(0, 1, 1)


def test_ordinal_roundtrip():
    for date in [Date(1, 1, 1), Date(2000, 2, 29), Date(2023, 12, 31), Date(2024, 3, 1)]:
        assert Date.from_ordinal(date.ordinal()) == date


def test_ordinal_values():
    assert Date(1, 1, 1).ordinal() == 1
    assert Date(1, 12, 31).ordinal() == 365
    assert Date(2000, 1, 1).ordinal() == 730120


def test_from_ordinal_rejects_zero():
    with pytest.raises(DateError):
        Date.from_ordinal(0)


def test_day_of_year():
    assert Date(2024, 3, 1).day_of_year() == 61
    assert Date(2023, 3, 1).day_of_year() == 60
    assert Date(2023, 1, 1).day_of_year() == 1


def test_weekday():
    assert Date(2024, 1, 1).weekday_name() == "Monday"
    assert Date(2000, 1, 1).weekday_name() == "Saturday"
    assert Date(2023, 12, 31).weekday() == 6


def test_add_days_across_year():
    assert Date(2023, 12, 30).add_days(3) == Date(2024, 1, 2)
    assert Date(2024, 3, 1).add_days(-1) == Date(2024, 2, 29)


def test_add_months_clamps():
    assert Date(2024, 1, 31).add_months(1) == Date(2024, 2, 29)
    assert Date(2023, 1, 31).add_months(1) == Date(2023, 2, 28)


def test_add_months_across_years():
    assert Date(2023, 11, 15).add_months(3) == Date(2024, 2, 15)
    assert Date(2024, 1, 15).add_months(-1) == Date(2023, 12, 15)
    assert Date(2024, 5, 10).add_months(12) == Date(2025, 5, 10)


def test_difference_and_order():
    assert Date(2024, 3, 1) - Date(2024, 2, 1) == 29
    assert Date(2024, 1, 2) > Date(2023, 12, 31)


def test_isoformat():
    assert Date(987, 6, 5).isoformat() == "0987-06-05"
