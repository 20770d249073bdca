"""Stock levels, reservations and reorder suggestions."""

from __future__ import annotations

from dataclasses import dataclass, field


class StockError(ValueError):
    """An impossible stock movement."""


@dataclass
class Item:
    sku: str
    name: str
    on_hand: int = 0
    reserved: int = 0
    reorder_point: int = 0
    reorder_quantity: int = 0

    @property
    def available(self) -> int:
        return self.on_hand - self.reserved


@dataclass
class Inventory:
    items: dict[str, Item] = field(default_factory=dict)
    history: list[tuple[str, str, int]] = field(default_factory=list)

    def add_item(self, sku: str, name: str, *, reorder_point: int = 0, reorder_quantity: int = 0) -> Item:
        key = sku.strip().upper()
        if not key:
            raise StockError("sku must not be empty")
        if key in self.items:
            raise StockError(f"duplicate sku {key}")
        item = Item(key, name, reorder_point=reorder_point, reorder_quantity=reorder_quantity)
        self.items[key] = item
        return item

    def get(self, sku: str) -> Item:
        key = sku.strip().upper()
        if key not in self.items:
            raise KeyError(f"unknown sku {sku!r}")
        return self.items[key]

    def receive(self, sku: str, quantity: int) -> int:
        if quantity <= 0:
            raise StockError(f"received quantity must be positive, got {quantity}")
        item = self.get(sku)
        item.on_hand += quantity
        self.history.append(("receive", item.sku, quantity))
        return item.on_hand

    def reserve(self, sku: str, quantity: int) -> int:
        item = self.get(sku)
        if quantity <= 0:
            raise StockError(f"reserved quantity must be positive, got {quantity}")
        if quantity > item.available:
            raise StockError(f"only {item.available} of {item.sku} available, asked for {quantity}")
        item.reserved += quantity
        self.history.append(("reserve", item.sku, quantity))
        return item.available

    def release(self, sku: str, quantity: int) -> int:
        item = self.get(sku)
        if not 0 < quantity <= item.reserved:
            raise StockError(f"cannot release {quantity} of {item.reserved} reserved")
        item.reserved -= quantity
        self.history.append(("release", item.sku, quantity))
        return item.available

    def ship(self, sku: str, quantity: int) -> int:
        """Ship reserved stock: it leaves both on-hand and reserved counts."""
        item = self.get(sku)
        if not 0 < quantity <= item.reserved:
            raise StockError(f"can only ship reserved stock ({item.reserved} reserved, asked {quantity})")
        item.reserved -= quantity
        item.on_hand -= quantity
        self.history.append(("ship", item.sku, quantity))
        return item.on_hand

    def needs_reorder(self) -> list[str]:
        """SKUs whose available stock is at or below their reorder point (those with a point set)."""
        return sorted(
            sku for sku, item in self.items.items() if item.reorder_point > 0 and item.available <= item.reorder_point
        )

    def reorder_plan(self) -> dict[str, int]:
        """How much to order per SKU: the reorder quantity, or enough to get back above the point."""
        plan = {}
        for sku in self.needs_reorder():
            item = self.items[sku]
            shortfall = item.reorder_point - item.available + 1
            plan[sku] = max(item.reorder_quantity, shortfall)
        return plan

    def total_units(self) -> int:
        return sum(item.on_hand for item in self.items.values())

    def movements(self, sku: str) -> list[tuple[str, int]]:
        key = self.get(sku).sku
        return [(kind, qty) for kind, s, qty in self.history if s == key]
