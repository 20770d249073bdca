"""ISO weeks and business days."""

from datecalc.calendar import Date


def iso_week(date: Date) -> tuple[int, int]:
    """(ISO year, ISO week number): week 1 is the week with the year's first Thursday."""
    thursday = date.add_days(3 - date.weekday())
    year = thursday.year
    week = (thursday.day_of_year() - 1) // 7 + 1
    return year, week


def is_business_day(date: Date, holidays: frozenset[Date] = frozenset()) -> bool:
    return date.weekday() < 5 and date not in holidays


def add_business_days(date: Date, n: int, holidays: frozenset[Date] = frozenset()) -> Date:
    """Move n business days forward (or back when n < 0), skipping weekends and holidays."""
    step = 1 if n >= 0 else -1
    remaining = abs(n)
    current = date
    while remaining > 0:
        current = current.add_days(step)
        if is_business_day(current, holidays):
            remaining -= 1
    return current


def business_days_between(start: Date, end: Date, holidays: frozenset[Date] = frozenset()) -> int:
    """Business days in [start, end)."""
    if end < start:
        return -business_days_between(end, start, holidays)
    count = 0
    current = start
    while current < end:
        if is_business_day(current, holidays):
            count += 1
        current = current.add_days(1)
    return count


def month_calendar(year: int, month: int) -> list[list[int]]:
    """Weeks of the month, Monday first, 0 for days outside the month."""
    first = Date(year, month, 1)
    from datecalc.calendar import days_in_month

    cells = [0] * first.weekday() + list(range(1, days_in_month(year, month) + 1))
    while len(cells) % 7:
        cells.append(0)
    return [cells[i : i + 7] for i in range(0, len(cells), 7)]
