import pytest

from cachebox.ttl import ManualClock, TTLCache


def test_clock():
    clock = ManualClock(5)
    clock.advance(2.5)
    assert clock() == 7.5
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_ttl_validation():
    with pytest.raises(ValueError):
        TTLCache(0, clock=ManualClock())


def test_expiry_boundary():
    clock = ManualClock()
    c = TTLCache(10, clock=clock)
    c.put("k", "v")
    clock.advance(9.9)
    assert c.get("k") == "v"
    clock.advance(0.1)
    assert c.get("k") is None
    assert len(c) == 0


def test_per_entry_ttl():
    clock = ManualClock()
    c = TTLCache(10, clock=clock)
    c.put("short", 1, ttl=2)
    c.put("long", 2)
    clock.advance(3)
    assert c.get("short", "gone") == "gone"
    assert c.get("long") == 2


def test_ttl_left():
    clock = ManualClock()
    c = TTLCache(10, clock=clock)
    c.put("k", 1)
    clock.advance(4)
    assert c.ttl_left("k") == 6
    assert c.ttl_left("missing") == 0.0
    clock.advance(20)
    assert c.ttl_left("k") == 0.0


def test_purge():
    clock = ManualClock()
    c = TTLCache(5, clock=clock)
    c.put("a", 1)
    c.put("b", 2, ttl=50)
    clock.advance(5)
    assert c.purge() == 1
    assert len(c) == 1


def test_max_entries_drops_soonest_expiring():
    clock = ManualClock()
    c = TTLCache(100, clock=clock, max_entries=2)
    c.put("a", 1, ttl=30)
    c.put("b", 2, ttl=10)
    c.put("c", 3, ttl=20)
    assert sorted(c.entries) == ["a", "c"]


def test_max_entries_prefers_purging_expired():
    clock = ManualClock()
    c = TTLCache(100, clock=clock, max_entries=2)
    c.put("old", 1, ttl=1)
    c.put("b", 2)
    clock.advance(2)
    c.put("c", 3)
    assert sorted(c.entries) == ["b", "c"]
