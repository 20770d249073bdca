import pytest

from shiftplan.intervals import Interval, format_clock, merge, parse_clock, subtract, total_minutes


def test_interval_validation_and_length():
    assert Interval(10, 25).length == 15
    assert Interval(5, 5).length == 0
    with pytest.raises(ValueError):
        Interval(10, 5)


def test_overlaps_half_open():
    assert Interval(0, 10).overlaps(Interval(5, 15))
    assert not Interval(0, 10).overlaps(Interval(10, 20))
    assert Interval(0, 10).overlaps(Interval(2, 3))


def test_contains():
    iv = Interval(10, 20)
    assert iv.contains(10)
    assert iv.contains(19)
    assert not iv.contains(20)


def test_parse_clock():
    assert parse_clock("09:30") == 570
    assert parse_clock("0:05") == 5
    assert parse_clock("24:00") == 1440


def test_parse_clock_errors():
    for bad in ["9", "12:60", "25:00", "24:01", "ab:cd", "10:5"]:
        with pytest.raises(ValueError):
            parse_clock(bad)


def test_format_clock():
    assert format_clock(570) == "09:30"
    assert format_clock(0) == "00:00"
    assert format_clock(1439) == "23:59"


def test_merge_overlapping_and_touching():
    ivs = [Interval(50, 60), Interval(0, 10), Interval(5, 20), Interval(20, 30)]
    assert merge(ivs) == [Interval(0, 30), Interval(50, 60)]


def test_merge_nested():
    assert merge([Interval(0, 100), Interval(10, 20)]) == [Interval(0, 100)]


def test_merge_empty():
    assert merge([]) == []


def test_subtract():
    base = Interval(0, 100)
    busy = [Interval(10, 20), Interval(15, 30), Interval(50, 60)]
    assert subtract(base, busy) == [Interval(0, 10), Interval(30, 50), Interval(60, 100)]


def test_subtract_edges():
    base = Interval(10, 50)
    busy = [Interval(0, 20), Interval(40, 70), Interval(80, 90)]
    assert subtract(base, busy) == [Interval(20, 40)]


def test_subtract_fully_covered_and_free():
    assert subtract(Interval(10, 20), [Interval(0, 30)]) == []
    assert subtract(Interval(10, 20), []) == [Interval(10, 20)]


def test_total_minutes_counts_overlap_once():
    assert total_minutes([Interval(0, 30), Interval(20, 40), Interval(100, 110)]) == 50
