"""Quantities: a value with a unit."""

from __future__ import annotations

import re
from dataclasses import dataclass

from unitconv.units import UnitError, convert, lookup

_QUANTITY = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$")


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str

    @classmethod
    def parse(cls, text: str) -> Quantity:
        match = _QUANTITY.match(text)
        if not match:
            raise UnitError(f"cannot read a quantity from {text!r}")
        unit = lookup(match.group(2))
        return cls(float(match.group(1)), unit.symbol)

    def to(self, unit: str) -> Quantity:
        target = lookup(unit)
        return Quantity(convert(self.value, self.unit, target.symbol), target.symbol)

    def __add__(self, other: Quantity) -> Quantity:
        if lookup(self.unit).dimension == "temperature":
            raise UnitError("temperatures cannot be added")
        return Quantity(self.value + other.to(self.unit).value, self.unit)

    def __sub__(self, other: Quantity) -> Quantity:
        return self + Quantity(-other.value, other.unit)

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.to(self.unit).value

    def close_to(self, other: Quantity, rel: float = 1e-9) -> bool:
        converted = other.to(self.unit).value
        return abs(self.value - converted) <= rel * max(abs(self.value), abs(converted), 1.0)

    def format(self, digits: int = 2) -> str:
        text = f"{self.value:.{digits}f}".rstrip("0").rstrip(".")
        return f"{text} {self.unit}"


def humanize_bytes(count: int) -> str:
    """1536 -> '1.5 KiB'; uses the largest unit that keeps the value at least 1."""
    if count < 0:
        raise ValueError("byte counts are not negative")
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return Quantity(value, unit).format(1)
        value /= 1024
    raise AssertionError("unreachable")


def humanize_seconds(seconds: float) -> str:
    """95 -> '1 min 35 s'; 7260 -> '2 h 1 min'; 0 -> '0 s'. At most two parts, largest first."""
    remaining = int(round(seconds))
    parts = []
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        amount, remaining = divmod(remaining, size)
        if amount:
            parts.append(f"{amount} {unit}")
    return " ".join(parts[:2]) if parts else "0 s"
