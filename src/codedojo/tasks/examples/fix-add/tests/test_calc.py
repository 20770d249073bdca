import calc


def test_add():
    assert calc.add(2, 3) == 5


def test_add_negative():
    assert calc.add(-4, 1) == -3


def test_sub():
    assert calc.sub(7, 2) == 5


def test_mul():
    assert calc.mul(3, 4) == 12
