"""Exact money arithmetic in integer minor units."""

from moneybox.currency import CURRENCIES, Currency, get_currency
from moneybox.money import Money, MoneyError
from moneybox.pricing import apply_discount, line_total, tax_for

__all__ = [
    "CURRENCIES",
    "Currency",
    "Money",
    "MoneyError",
    "apply_discount",
    "get_currency",
    "line_total",
    "tax_for",
]
