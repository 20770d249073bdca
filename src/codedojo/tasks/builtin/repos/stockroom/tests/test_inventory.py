import pytest

from stockroom.inventory import Inventory, StockError


def make():
    inv = Inventory()
    inv.add_item("ab-1", "Bolt", reorder_point=5, reorder_quantity=20)
    inv.add_item("CD-2", "Nut")
    return inv


def test_add_item_normalises_sku():
    inv = make()
    assert inv.get(" ab-1 ").name == "Bolt"
    assert sorted(inv.items) == ["AB-1", "CD-2"]


def test_add_item_rejects_duplicates_and_empty():
    inv = make()
    with pytest.raises(StockError):
        inv.add_item("AB-1", "Other")
    with pytest.raises(StockError):
        inv.add_item("  ", "Blank")


def test_unknown_sku():
    with pytest.raises(KeyError):
        make().get("zz")


def test_receive():
    inv = make()
    assert inv.receive("ab-1", 10) == 10
    assert inv.receive("ab-1", 5) == 15


def test_receive_rejects_non_positive():
    with pytest.raises(StockError):
        make().receive("ab-1", 0)


def test_reserve_reduces_available():
    inv = make()
    inv.receive("ab-1", 10)
    assert inv.reserve("ab-1", 4) == 6
    assert inv.get("ab-1").on_hand == 10


def test_reserve_everything_available():
    inv = make()
    inv.receive("ab-1", 3)
    assert inv.reserve("ab-1", 3) == 0


def test_reserve_too_much():
    inv = make()
    inv.receive("ab-1", 3)
    with pytest.raises(StockError):
        inv.reserve("ab-1", 4)


def test_reserve_non_positive():
    inv = make()
    inv.receive("ab-1", 3)
    with pytest.raises(StockError):
        inv.reserve("ab-1", 0)


def test_release():
    inv = make()
    inv.receive("ab-1", 10)
    inv.reserve("ab-1", 4)
    assert inv.release("ab-1", 4) == 10
    with pytest.raises(StockError):
        inv.release("ab-1", 1)


def test_ship():
    inv = make()
    inv.receive("ab-1", 10)
    inv.reserve("ab-1", 4)
    assert inv.ship("ab-1", 3) == 7
    item = inv.get("ab-1")
    assert (item.on_hand, item.reserved, item.available) == (7, 1, 6)


def test_ship_requires_reservation():
    inv = make()
    inv.receive("ab-1", 10)
    with pytest.raises(StockError):
        inv.ship("ab-1", 1)


def test_needs_reorder_at_point():
    inv = make()
    inv.receive("ab-1", 5)
    inv.receive("cd-2", 1)
    assert inv.needs_reorder() == ["AB-1"]


def test_needs_reorder_above_point():
    inv = make()
    inv.receive("ab-1", 6)
    assert inv.needs_reorder() == []


def test_reorder_plan():
    inv = make()
    inv.receive("ab-1", 2)
    assert inv.reorder_plan() == {"AB-1": 20}


def test_reorder_plan_large_shortfall():
    inv = Inventory()
    inv.add_item("x", "X", reorder_point=50, reorder_quantity=10)
    inv.receive("x", 5)
    assert inv.reorder_plan() == {"X": 46}


def test_total_units_and_movements():
    inv = make()
    inv.receive("ab-1", 10)
    inv.receive("cd-2", 7)
    inv.reserve("ab-1", 2)
    inv.ship("ab-1", 2)
    assert inv.total_units() == 15
    assert inv.movements("ab-1") == [("receive", 10), ("reserve", 2), ("ship", 2)]
