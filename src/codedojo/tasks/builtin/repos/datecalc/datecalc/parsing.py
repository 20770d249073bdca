"""Reading dates and durations from text."""

import re

from datecalc.calendar import Date, DateError

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DURATION = re.compile(r"(\d+)\s*([wdhms])")
_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_date(text: str) -> Date:
    """'2024-03-05', '05/03/2024' (day first) or '5 Mar 2024'."""
    text = text.strip()
    m = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", text)
    if m:
        return Date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})", text)
    if m:
        return Date(int(m.group(3)), int(m.group(2)), int(m.group(1)))
    m = re.fullmatch(r"(\d{1,2})\s+([A-Za-z]+)\s+(\d{4})", text)
    if m:
        name = m.group(2)[:3].lower()
        if name not in _MONTHS:
            raise DateError(f"unknown month {m.group(2)!r}")
        return Date(int(m.group(3)), _MONTHS.index(name) + 1, int(m.group(1)))
    raise DateError(f"cannot read a date from {text!r}")


def parse_duration(text: str) -> int:
    """'1h30m' -> 5400 seconds; '2w 1d' -> 1296000."""
    compact = text.replace(" ", "").lower()
    if not compact:
        raise ValueError("empty duration")
    total = 0
    position = 0
    for match in _DURATION.finditer(compact):
        if match.start() != position:
            raise ValueError(f"cannot read a duration from {text!r}")
        total += int(match.group(1)) * _SECONDS[match.group(2)]
        position = match.end()
    if position != len(compact):
        raise ValueError(f"cannot read a duration from {text!r}")
    return total


def format_duration(seconds: int) -> str:
    """5400 -> '1h 30m'; 0 -> '0s'."""
    if seconds < 0:
        raise ValueError("duration must not be negative")
    if seconds == 0:
        return "0s"
    parts = []
    for unit in "wdhms":
        amount, seconds = divmod(seconds, _SECONDS[unit])
        if amount:
            parts.append(f"{amount}{unit}")
    return " ".join(parts)
