import pytest
from moneybox import Money, MoneyError, apply_discount, line_total, tax_for
from moneybox.pricing import invoice_total


def test_line_total():
    assert line_total(Money(199), 3) == Money(597)


def test_line_total_zero_quantity():
    assert line_total(Money(199), 0) == Money(0)


def test_line_total_negative_quantity():
    with pytest.raises(MoneyError):
        line_total(Money(199), -1)


def test_discount_rounds_half_even():
    assert apply_discount(Money(250), 10) == Money(225)
    assert apply_discount(Money(5), 50) == Money(2)
    assert apply_discount(Money(15), 50) == Money(8)


def test_discount_bounds():
    assert apply_discount(Money(999), 0) == Money(999)
    assert apply_discount(Money(999), 100) == Money(0)
    with pytest.raises(MoneyError):
        apply_discount(Money(999), 101)
    with pytest.raises(MoneyError):
        apply_discount(Money(999), -1)


def test_tax_exclusive():
    assert tax_for(Money(1000), 2000) == Money(200)
    assert tax_for(Money(1234), 825) == Money(102)


def test_tax_inclusive():
    assert tax_for(Money(1200), 2000, inclusive=True) == Money(200)


def test_tax_negative_rate():
    with pytest.raises(MoneyError):
        tax_for(Money(1), -5)


def test_invoice_total_with_tax():
    lines = [(Money(1000), 2), (Money(250), 4)]
    assert invoice_total(lines, rate_basis_points=1000) == Money(3300)


def test_invoice_total_single_line():
    assert invoice_total([(Money(333), 1)]) == Money(333)


def test_invoice_total_empty():
    with pytest.raises(MoneyError):
        invoice_total([])
