"""Days, months and years of the proleptic Gregorian calendar."""

from dataclasses import dataclass

MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class DateError(ValueError):
    """An impossible date."""


def is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise DateError(f"month must be 1..12, got {month}")
    if month == 2 and is_leap(year):
        return 29
    return MONTH_DAYS[month - 1]


def days_in_year(year: int) -> int:
    return 366 if is_leap(year) else 365


@dataclass(frozen=True, order=True)
class Date:
    year: int
    month: int
    day: int

    def __post_init__(self) -> None:
        if self.year < 1:
            raise DateError(f"year must be positive, got {self.year}")
        if not 1 <= self.day <= days_in_month(self.year, self.month):
            raise DateError(f"{self.year}-{self.month:02d} has no day {self.day}")

    def ordinal(self) -> int:
        """Days since 0001-01-01, which is day 1."""
        y = self.year - 1
        days = y * 365 + y // 4 - y // 100 + y // 400
        for m in range(1, self.month):
            days += days_in_month(self.year, m)
        return days + self.day

    @classmethod
    def from_ordinal(cls, n: int) -> "Date":
        if n < 1:
            raise DateError(f"ordinal must be at least 1, got {n}")
        year = 1
        while n > days_in_year(year):
            n -= days_in_year(year)
            year += 1
        month = 1
        while n > days_in_month(year, month):
            n -= days_in_month(year, month)
            month += 1
        return cls(year, month, n)

    def day_of_year(self) -> int:
        return self.ordinal() - Date(self.year, 1, 1).ordinal() + 1

    def weekday(self) -> int:
        """0 = Monday ... 6 = Sunday."""
        return (self.ordinal() - 1) % 7

    def weekday_name(self) -> str:
        return WEEKDAYS[self.weekday()]

    def add_days(self, n: int) -> "Date":
        return Date.from_ordinal(self.ordinal() + n)

    def add_months(self, n: int) -> "Date":
        """Same day n months later, clamped to the month's last day (Jan 31 + 1 month = Feb 28/29)."""
        index = self.year * 12 + (self.month - 1) + n
        year, month = divmod(index, 12)
        month += 1
        day = min(self.day, days_in_month(year, month))
        return Date(year, month, day)

    def __sub__(self, other: "Date") -> int:
        return self.ordinal() - other.ordinal()

    def isoformat(self) -> str:
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"
