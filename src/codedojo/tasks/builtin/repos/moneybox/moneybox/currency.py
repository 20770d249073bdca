"""Currencies known to moneybox."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Currency:
    code: str
    symbol: str
    exponent: int

    @property
    def factor(self) -> int:
        """Minor units per major unit (100 for cents)."""
        return 10**self.exponent


CURRENCIES = {
    "USD": Currency("USD", "$", 2),
    "EUR": Currency("EUR", "€", 2),
    "JPY": Currency("JPY", "¥", 0),
    "KWD": Currency("KWD", "KD", 3),
}


def get_currency(code: str) -> Currency:
    key = code.strip().upper()
    if key not in CURRENCIES:
        raise KeyError(f"unknown currency {code!r}")
    return CURRENCIES[key]
