"""FIFO costing of stock received in batches at different unit costs (costs in cents)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass
class Batch:
    quantity: int
    unit_cost: int


class FifoLedger:
    def __init__(self) -> None:
        self.batches: deque[Batch] = deque()

    def receive(self, quantity: int, unit_cost: int) -> None:
        if quantity <= 0 or unit_cost < 0:
            raise ValueError("quantity must be positive and cost non-negative")
        self.batches.append(Batch(quantity, unit_cost))

    @property
    def quantity(self) -> int:
        return sum(b.quantity for b in self.batches)

    @property
    def value(self) -> int:
        return sum(b.quantity * b.unit_cost for b in self.batches)

    def issue(self, quantity: int) -> int:
        """Take `quantity` units, oldest batches first; returns their total cost."""
        if quantity > self.quantity:
            raise ValueError(f"only {self.quantity} units in stock, asked for {quantity}")
        cost = 0
        remaining = quantity
        while remaining > 0:
            batch = self.batches[0]
            used = min(batch.quantity, remaining)
            cost += used * batch.unit_cost
            batch.quantity -= used
            remaining -= used
            if batch.quantity == 0:
                self.batches.popleft()
        return cost

    def average_cost(self) -> float:
        """Weighted average unit cost of what is in stock, 0.0 when empty."""
        if not self.batches:
            return 0.0
        return round(self.value / self.quantity, 2)


def margin_percent(price: int, cost: int) -> float:
    """Gross margin as a percentage of the price, one decimal."""
    if price <= 0:
        raise ValueError("price must be positive")
    return round((price - cost) * 100 / price, 1)
