import pytest

from stockroom.costing import FifoLedger, margin_percent


def ledger():
    book = FifoLedger()
    book.receive(10, 100)
    book.receive(5, 130)
    return book


def test_quantity_and_value():
    book = ledger()
    assert book.quantity == 15
    assert book.value == 1650


def test_issue_from_first_batch():
    book = ledger()
    assert book.issue(4) == 400
    assert book.quantity == 11


def test_issue_across_batches():
    book = ledger()
    assert book.issue(12) == 1260
    assert book.value == 390
    assert len(book.batches) == 1


def test_issue_exact_batch_removes_it():
    book = ledger()
    book.issue(10)
    assert [b.unit_cost for b in book.batches] == [130]


def test_issue_everything_and_too_much():
    book = ledger()
    assert book.issue(15) == 1650
    assert book.quantity == 0
    with pytest.raises(ValueError):
        book.issue(1)


def test_receive_validation():
    book = FifoLedger()
    with pytest.raises(ValueError):
        book.receive(0, 10)
    with pytest.raises(ValueError):
        book.receive(1, -1)
    book.receive(1, 0)
    assert book.value == 0


def test_average_cost():
    assert ledger().average_cost() == 110.0
    assert FifoLedger().average_cost() == 0.0


def test_average_cost_rounds():
    book = FifoLedger()
    book.receive(3, 100)
    book.receive(0 + 1, 101)
    book.receive(2, 99)
    assert book.average_cost() == 99.83


def test_margin_percent():
    assert margin_percent(200, 150) == 25.0
    assert margin_percent(300, 100) == 66.7
    assert margin_percent(100, 120) == -20.0
    with pytest.raises(ValueError):
        margin_percent(0, 1)
