from datecalc.calendar import Date
from datecalc.weeks import add_business_days, business_days_between, is_business_day, iso_week, month_calendar


def test_iso_week_regular():
    assert iso_week(Date(2024, 3, 14)) == (2024, 11)


def test_iso_week_belongs_to_previous_year():
    assert iso_week(Date(2021, 1, 1)) == (2020, 53)


def test_iso_week_belongs_to_next_year():
    assert iso_week(Date(2024, 12, 30)) == (2025, 1)


def test_iso_week_first_week():
    assert iso_week(Date(2024, 1, 1)) == (2024, 1)
    assert iso_week(Date(2024, 1, 7)) == (2024, 1)
    assert iso_week(Date(2024, 1, 8)) == (2024, 2)


def test_is_business_day():
    assert is_business_day(Date(2024, 3, 15))
    assert not is_business_day(Date(2024, 3, 16))
    assert not is_business_day(Date(2024, 3, 15), frozenset({Date(2024, 3, 15)}))


def test_add_business_days_over_weekend():
    assert add_business_days(Date(2024, 3, 15), 1) == Date(2024, 3, 18)
    assert add_business_days(Date(2024, 3, 15), 5) == Date(2024, 3, 22)


def test_add_business_days_backwards():
    assert add_business_days(Date(2024, 3, 18), -1) == Date(2024, 3, 15)


def test_add_business_days_zero_and_holiday():
    assert add_business_days(Date(2024, 3, 16), 0) == Date(2024, 3, 16)
    holidays = frozenset({Date(2024, 3, 18)})
    assert add_business_days(Date(2024, 3, 15), 1, holidays) == Date(2024, 3, 19)


def test_business_days_between():
    assert business_days_between(Date(2024, 3, 11), Date(2024, 3, 18)) == 5
    assert business_days_between(Date(2024, 3, 11), Date(2024, 3, 11)) == 0
    assert business_days_between(Date(2024, 3, 18), Date(2024, 3, 11)) == -5


def test_month_calendar():
    weeks = month_calendar(2024, 2)
    assert weeks[0] == [0, 0, 0, 1, 2, 3, 4]
    assert weeks[-1] == [26, 27, 28, 29, 0, 0, 0]
    assert len(weeks) == 5
