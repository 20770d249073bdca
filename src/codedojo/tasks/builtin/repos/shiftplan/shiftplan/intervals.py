"""Half-open intervals [start, end) of minutes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Interval:
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"interval ends before it starts: {self.start}..{self.end}")

    @property
    def length(self) -> int:
        return self.end - self.start

    def overlaps(self, other: Interval) -> bool:
        return self.start < other.end and other.start < self.end

    def contains(self, minute: int) -> bool:
        return self.start <= minute < self.end


def parse_clock(text: str) -> int:
    """'09:30' -> 570 minutes after midnight; '24:00' is allowed as the end of a day."""
    hours, _, minutes = text.strip().partition(":")
    if not hours.isdigit() or not minutes.isdigit() or len(minutes) != 2:
        raise ValueError(f"expected HH:MM, got {text!r}")
    h, m = int(hours), int(minutes)
    if m >= 60 or h > 24 or (h == 24 and m > 0):
        raise ValueError(f"no such time of day: {text!r}")
    return h * 60 + m


def format_clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def merge(intervals: list[Interval]) -> list[Interval]:
    """Sorted, with overlapping and touching intervals joined."""
    out: list[Interval] = []
    for iv in sorted(intervals):
        if out and iv.start <= out[-1].end:
            last = out.pop()
            out.append(Interval(last.start, max(last.end, iv.end)))
        else:
            out.append(iv)
    return out


def subtract(base: Interval, busy: list[Interval]) -> list[Interval]:
    """Parts of `base` not covered by `busy`, sorted, empty pieces dropped."""
    free = []
    cursor = base.start
    for iv in merge(busy):
        if iv.end <= cursor or iv.start >= base.end:
            continue
        if iv.start > cursor:
            free.append(Interval(cursor, iv.start))
        cursor = max(cursor, iv.end)
    if cursor < base.end:
        free.append(Interval(cursor, base.end))
    return free


def total_minutes(intervals: list[Interval]) -> int:
    return sum(iv.length for iv in merge(intervals))
