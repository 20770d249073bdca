"""The Money value type."""

from __future__ import annotations

from moneybox.currency import Currency, get_currency


class MoneyError(ValueError):
    """Invalid money operation."""


def round_half_even(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded to the nearest integer, ties to even."""
    if denominator < 0:
        numerator, denominator = -numerator, -denominator
    quotient, remainder = divmod(numerator, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2 == 1):
        quotient += 1
    return quotient


class Money:
    __slots__ = ("currency", "minor")

    def __init__(self, minor: int, currency: str | Currency = "USD") -> None:
        if not isinstance(minor, int):
            raise MoneyError(f"amount must be an integer number of minor units, got {minor!r}")
        self.minor = minor
        self.currency = currency if isinstance(currency, Currency) else get_currency(currency)

    @classmethod
    def parse(cls, text: str, currency: str = "USD") -> Money:
        """Parse '12.34', '-0.5' or '1,234.00' in the given currency."""
        cur = get_currency(currency)
        raw = text.strip().replace(",", "")
        negative = raw.startswith("-")
        if negative:
            raw = raw[1:]
        whole, _, frac = raw.partition(".")
        if not whole.isdigit() or (frac and not frac.isdigit()):
            raise MoneyError(f"cannot parse amount {text!r}")
        if len(frac) > cur.exponent:
            raise MoneyError(f"{text!r} has more decimals than {cur.code} allows")
        frac = frac.ljust(cur.exponent, "0")
        minor = int(whole) * cur.factor + (int(frac) if frac else 0)
        return cls(-minor if negative else minor, cur)

    def _check(self, other: Money) -> None:
        if not isinstance(other, Money):
            raise MoneyError(f"expected Money, got {type(other).__name__}")
        if other.currency.code != self.currency.code:
            raise MoneyError(f"currency mismatch: {self.currency.code} vs {other.currency.code}")

    def __add__(self, other: Money) -> Money:
        self._check(other)
        return Money(self.minor + other.minor, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._check(other)
        return Money(self.minor - other.minor, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.minor, self.currency)

    def __mul__(self, factor: int | float) -> Money:
        if isinstance(factor, int):
            return Money(self.minor * factor, self.currency)
        scaled = round_half_even(round(self.minor * factor * 1_000_000), 1_000_000)
        return Money(scaled, self.currency)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        return self.minor == other.minor and self.currency.code == other.currency.code

    def __lt__(self, other: Money) -> bool:
        self._check(other)
        return self.minor < other.minor

    def __le__(self, other: Money) -> bool:
        self._check(other)
        return self.minor <= other.minor

    def __hash__(self) -> int:
        return hash((self.minor, self.currency.code))

    def is_zero(self) -> bool:
        return self.minor == 0

    def allocate(self, ratios: list[int]) -> list[Money]:
        """Split into parts proportional to `ratios`; leftover minor units go to the first parts."""
        if not ratios or any(r < 0 for r in ratios) or sum(ratios) == 0:
            raise MoneyError(f"ratios must be non-negative and not all zero, got {ratios!r}")
        total = sum(ratios)
        parts = [self.minor * r // total for r in ratios]
        leftover = self.minor - sum(parts)
        for i in range(leftover):
            parts[i % len(parts)] += 1
        return [Money(p, self.currency) for p in parts]

    def split(self, count: int) -> list[Money]:
        """Split evenly into `count` parts."""
        if count < 1:
            raise MoneyError(f"count must be at least 1, got {count}")
        return self.allocate([1] * count)

    def format(self, *, symbol: bool = True, grouping: bool = True) -> str:
        """'$1,234.50', '-€0.07', '¥1,200'."""
        cur = self.currency
        whole, frac = divmod(abs(self.minor), cur.factor)
        digits = f"{whole:,}" if grouping else str(whole)
        text = digits if cur.exponent == 0 else f"{digits}.{frac:0{cur.exponent}d}"
        if symbol:
            text = cur.symbol + text
        return "-" + text if self.minor < 0 else text

    def __repr__(self) -> str:
        return f"Money({self.minor}, {self.currency.code!r})"

    def __str__(self) -> str:
        return self.format()
