from shiftplan.intervals import Interval
from shiftplan.planner import Staff, assign_shifts, coverage_gaps, first_slot, free_slots, rest_violations

DAY = Interval(540, 1020)  # 09:00-17:00
ANN = [Interval(540, 600), Interval(720, 780)]
BOB = [Interval(570, 660), Interval(900, 960)]


def test_free_slots():
    assert free_slots(DAY, [ANN, BOB], min_length=30) == [
        Interval(660, 720), Interval(780, 900), Interval(960, 1020)
    ]


def test_free_slots_min_length_filters():
    assert free_slots(DAY, [ANN, BOB], min_length=61) == [Interval(780, 900)]


def test_free_slots_exact_length_kept():
    assert free_slots(DAY, [ANN, BOB], min_length=60) == [
        Interval(660, 720), Interval(780, 900), Interval(960, 1020)
    ]


def test_first_slot():
    assert first_slot(DAY, [ANN, BOB], length=90) == Interval(780, 870)
    assert first_slot(DAY, [ANN, BOB], length=200) is None


def test_can_take_limits():
    s = Staff("ann", max_minutes=480, unavailable=[Interval(0, 60)])
    assert s.can_take(Interval(60, 540))
    assert not s.can_take(Interval(30, 90))
    assert not s.can_take(Interval(60, 541))


def test_assign_balances_minutes():
    staff = [Staff("bob", 600), Staff("ann", 600)]
    shifts = [Interval(0, 240), Interval(240, 480), Interval(480, 600)]
    result = assign_shifts(shifts, staff)
    assert result == {Interval(0, 240): "ann", Interval(240, 480): "bob", Interval(480, 600): "ann"}


def test_assign_respects_unavailability():
    staff = [Staff("ann", 600, unavailable=[Interval(0, 100)]), Staff("bob", 600)]
    result = assign_shifts([Interval(50, 150)], staff)
    assert result == {Interval(50, 150): "bob"}


def test_assign_unfillable():
    staff = [Staff("ann", 60)]
    result = assign_shifts([Interval(0, 60), Interval(100, 160)], staff)
    assert result == {Interval(0, 60): "ann", Interval(100, 160): None}
    assert staff[0].worked == 60


def test_rest_violations():
    shifts = [Interval(0, 480), Interval(600, 900), Interval(1500, 1800)]
    assert rest_violations(shifts, min_rest=600) == [(Interval(0, 480), Interval(600, 900))]


def test_rest_violations_exact_rest_ok():
    shifts = [Interval(0, 100), Interval(200, 300)]
    assert rest_violations(shifts, min_rest=100) == []
    assert rest_violations(shifts, min_rest=101) == [(Interval(0, 100), Interval(200, 300))]


def test_rest_touching_shifts_merge():
    assert rest_violations([Interval(0, 100), Interval(100, 200)], min_rest=50) == []


def test_coverage_gaps():
    assert coverage_gaps(DAY, [Interval(540, 700), Interval(800, 1020)]) == [Interval(700, 800)]
