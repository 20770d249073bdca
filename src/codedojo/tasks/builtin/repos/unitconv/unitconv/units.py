"""Unit tables: each unit belongs to a dimension and has a factor to the dimension's base unit."""

from dataclasses import dataclass


class UnitError(ValueError):
    """Unknown unit or incompatible dimensions."""


@dataclass(frozen=True)
class Unit:
    symbol: str
    dimension: str
    factor: float
    offset: float = 0.0  # only temperatures: base = value * factor + offset


UNITS = {
    u.symbol: u
    for u in [
        Unit("mm", "length", 0.001),
        Unit("cm", "length", 0.01),
        Unit("m", "length", 1.0),
        Unit("km", "length", 1000.0),
        Unit("in", "length", 0.0254),
        Unit("ft", "length", 0.3048),
        Unit("mi", "length", 1609.344),
        Unit("g", "mass", 0.001),
        Unit("kg", "mass", 1.0),
        Unit("lb", "mass", 0.45359237),
        Unit("s", "time", 1.0),
        Unit("min", "time", 60.0),
        Unit("h", "time", 3600.0),
        Unit("day", "time", 86400.0),
        Unit("B", "data", 1.0),
        Unit("KiB", "data", 1024.0),
        Unit("MiB", "data", 1024.0**2),
        Unit("GiB", "data", 1024.0**3),
        Unit("K", "temperature", 1.0),
        Unit("C", "temperature", 1.0, 273.15),
        Unit("F", "temperature", 5 / 9, 273.15 - 32 * 5 / 9),
    ]
}

ALIASES = {"meter": "m", "meters": "m", "kilometers": "km", "hours": "h", "hour": "h", "minutes": "min",
           "seconds": "s", "sec": "s", "pounds": "lb", "lbs": "lb", "feet": "ft", "foot": "ft", "inches": "in"}


def lookup(symbol: str) -> Unit:
    key = symbol.strip()
    key = ALIASES.get(key.lower(), key)
    if key not in UNITS:
        raise UnitError(f"unknown unit {symbol!r}")
    return UNITS[key]


def convert(value: float, source: str, target: str) -> float:
    src, dst = lookup(source), lookup(target)
    if src.dimension != dst.dimension:
        raise UnitError(f"cannot convert {src.dimension} ({src.symbol}) to {dst.dimension} ({dst.symbol})")
    base = value * src.factor + src.offset
    return (base - dst.offset) / dst.factor
