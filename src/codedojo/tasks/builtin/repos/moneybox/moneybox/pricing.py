"""Line totals, discounts and taxes."""

from __future__ import annotations

from moneybox.money import Money, MoneyError, round_half_even


def line_total(unit_price: Money, quantity: int) -> Money:
    if quantity < 0:
        raise MoneyError(f"quantity must not be negative, got {quantity}")
    return unit_price * quantity


def apply_discount(price: Money, percent: int) -> Money:
    """Price after a whole-percent discount, rounded half to even."""
    if not 0 <= percent <= 100:
        raise MoneyError(f"discount must be between 0 and 100 percent, got {percent}")
    kept = round_half_even(price.minor * (100 - percent), 100)
    return Money(kept, price.currency)


def tax_for(net: Money, rate_basis_points: int, *, inclusive: bool = False) -> Money:
    """Tax on `net` at a rate given in basis points (2000 = 20%).

    With `inclusive`, `net` already contains the tax and the contained tax is returned.
    """
    if rate_basis_points < 0:
        raise MoneyError("tax rate must not be negative")
    if inclusive:
        gross = net.minor
        base = round_half_even(gross * 10_000, 10_000 + rate_basis_points)
        return Money(gross - base, net.currency)
    return Money(round_half_even(net.minor * rate_basis_points, 10_000), net.currency)


def invoice_total(lines: list[tuple[Money, int]], *, rate_basis_points: int = 0) -> Money:
    """Sum of line totals plus tax on the sum."""
    if not lines:
        raise MoneyError("an invoice needs at least one line")
    subtotal = line_total(*lines[0])
    for price, qty in lines[1:]:
        subtotal = subtotal + line_total(price, qty)
    return subtotal + tax_for(subtotal, rate_basis_points)
