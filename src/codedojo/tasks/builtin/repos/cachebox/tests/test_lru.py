import pytest

from cachebox.lru import LRUCache, Stats


def test_capacity_validation():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_get_put():
    c = LRUCache(2)
    c.put("a", 1)
    assert c.get("a") == 1
    assert c.get("b") is None
    assert c.get("b", "dflt") == "dflt"


def test_evicts_least_recent():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    c.put("c", 3)
    assert c.keys() == ["a", "c"]
    assert "b" not in c


def test_put_existing_refreshes():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    c.put("c", 3)
    assert c.keys() == ["a", "c"]
    assert c.peek("a") == 10


def test_fill_to_capacity_keeps_all():
    c = LRUCache(3)
    for k in "xyz":
        c.put(k, k)
    assert len(c) == 3
    assert c.stats.evictions == 0


def test_stats():
    c = LRUCache(1)
    c.put("a", 1)
    c.get("a")
    c.get("a")
    c.get("zz")
    c.put("b", 2)
    assert (c.stats.hits, c.stats.misses, c.stats.evictions) == (2, 1, 1)
    assert c.stats.hit_rate == 0.667


def test_hit_rate_empty():
    assert Stats().hit_rate == 0.0


def test_peek_does_not_touch():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.peek("a") == 1
    c.put("c", 3)
    assert c.keys() == ["b", "c"]
    assert c.stats.hits == 0
    with pytest.raises(KeyError):
        c.peek("a")


def test_pop():
    c = LRUCache(2)
    c.put("a", 1)
    assert c.pop("a") == 1
    assert len(c) == 0


def test_resize():
    c = LRUCache(4)
    for k in "abcd":
        c.put(k, k)
    assert c.resize(2) == ["a", "b"]
    assert c.keys() == ["c", "d"]
    assert c.stats.evictions == 2
    with pytest.raises(ValueError):
        c.resize(0)


def test_resize_grow():
    c = LRUCache(1)
    c.put("a", 1)
    assert c.resize(3) == []
    c.put("b", 2)
    assert len(c) == 2
