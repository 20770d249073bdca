"""Free slots, shift assignment and rest rules."""

from __future__ import annotations

from dataclasses import dataclass, field

from shiftplan.intervals import Interval, merge, subtract


def free_slots(day: Interval, calendars: list[list[Interval]], *, min_length: int) -> list[Interval]:
    """Times within `day` when everyone is free, each at least `min_length` minutes long."""
    busy = [iv for calendar in calendars for iv in calendar]
    return [slot for slot in subtract(day, busy) if slot.length >= min_length]


def first_slot(day: Interval, calendars: list[list[Interval]], *, length: int) -> Interval | None:
    """The earliest meeting of exactly `length` minutes that fits, or None."""
    for slot in free_slots(day, calendars, min_length=length):
        return Interval(slot.start, slot.start + length)
    return None


@dataclass
class Staff:
    name: str
    max_minutes: int
    unavailable: list[Interval] = field(default_factory=list)
    assigned: list[Interval] = field(default_factory=list)

    @property
    def worked(self) -> int:
        return sum(iv.length for iv in self.assigned)

    def can_take(self, shift: Interval) -> bool:
        if self.worked + shift.length > self.max_minutes:
            return False
        return not any(shift.overlaps(iv) for iv in self.unavailable + self.assigned)


def assign_shifts(shifts: list[Interval], staff: list[Staff]) -> dict[Interval, str | None]:
    """Each shift, in time order, goes to the eligible person with the fewest minutes so far (ties by
    name); None when nobody can take it."""
    result: dict[Interval, str | None] = {}
    for shift in sorted(shifts):
        eligible = [s for s in staff if s.can_take(shift)]
        if not eligible:
            result[shift] = None
            continue
        chosen = min(eligible, key=lambda s: (s.worked, s.name))
        chosen.assigned.append(shift)
        result[shift] = chosen.name
    return result


def rest_violations(shifts: list[Interval], *, min_rest: int) -> list[tuple[Interval, Interval]]:
    """Pairs of consecutive shifts (after merging touching ones) with less than `min_rest` between."""
    blocks = merge(shifts)
    return [(a, b) for a, b in zip(blocks, blocks[1:]) if b.start - a.end < min_rest]


def coverage_gaps(day: Interval, shifts: list[Interval]) -> list[Interval]:
    """Parts of the day nobody is scheduled for."""
    return subtract(day, shifts)
