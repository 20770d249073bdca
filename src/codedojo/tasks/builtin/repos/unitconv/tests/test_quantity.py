import pytest

from unitconv.quantity import Quantity, humanize_bytes, humanize_seconds
from unitconv.units import UnitError


def test_parse():
    assert Quantity.parse("3.5 km") == Quantity(3.5, "km")
    assert Quantity.parse("-2hours") == Quantity(-2.0, "h")


def test_parse_errors():
    with pytest.raises(UnitError):
        Quantity.parse("km 3")
    with pytest.raises(UnitError):
        Quantity.parse("3 furlongs")


def test_to():
    assert Quantity(1500, "m").to("km") == Quantity(1.5, "km")


def test_add_mixed_units():
    total = Quantity(1, "km") + Quantity(500, "m")
    assert total == Quantity(1.5, "km")


def test_subtract():
    assert (Quantity(2, "h") - Quantity(30, "min")).close_to(Quantity(1.5, "h"))


def test_add_temperatures_refused():
    with pytest.raises(UnitError):
        Quantity(1, "C") + Quantity(1, "C")


def test_add_incompatible():
    with pytest.raises(UnitError):
        Quantity(1, "kg") + Quantity(1, "m")


def test_compare():
    assert Quantity(1, "ft") < Quantity(1, "m")
    assert not Quantity(1, "km") < Quantity(1000, "m")


def test_close_to():
    assert Quantity(1, "in").close_to(Quantity(2.54, "cm"))
    assert not Quantity(1, "in").close_to(Quantity(2.6, "cm"))


def test_format():
    assert Quantity(1.5, "km").format() == "1.5 km"
    assert Quantity(2.0, "h").format() == "2 h"
    assert Quantity(1.23456, "kg").format(3) == "1.235 kg"


def test_humanize_bytes():
    assert humanize_bytes(0) == "0 B"
    assert humanize_bytes(1023) == "1023 B"
    assert humanize_bytes(1536) == "1.5 KiB"
    assert humanize_bytes(3 * 1024**3) == "3 GiB"
    assert humanize_bytes(5 * 1024**4) == "5120 GiB"


def test_humanize_bytes_negative():
    with pytest.raises(ValueError):
        humanize_bytes(-1)


def test_humanize_seconds():
    assert humanize_seconds(0) == "0 s"
    assert humanize_seconds(95) == "1 min 35 s"
    assert humanize_seconds(7260) == "2 h 1 min"
    assert humanize_seconds(90061) == "1 day 1 h"
    assert humanize_seconds(59.6) == "1 min"
