from cachebox.memo import make_key, memoize


def test_make_key_ignores_keyword_order():
    assert make_key((1,), {"b": 2, "a": 1}) == make_key((1,), {"a": 1, "b": 2})
    assert make_key((1, 2), {}) != make_key((2, 1), {})


def test_memoize_calls_once():
    calls = []

    @memoize()
    def square(x):
        calls.append(x)
        return x * x

    assert square(4) == 16
    assert square(4) == 16
    assert calls == [4]


def test_memoize_caches_none_results():
    calls = []

    @memoize()
    def nothing(x):
        calls.append(x)

    nothing(1)
    nothing(1)
    assert calls == [1]


def test_memoize_capacity():
    calls = []

    @memoize(capacity=1)
    def ident(x):
        calls.append(x)
        return x

    ident(1)
    ident(2)
    ident(1)
    assert calls == [1, 2, 1]
    assert ident.cache.stats.misses == 3


def test_memoize_keeps_name():
    @memoize()
    def named():
        return 1

    assert named.__name__ == "named"
