import pytest

from unitconv.units import UnitError, convert, lookup


def test_lookup_symbol_and_alias():
    assert lookup("km").factor == 1000
    assert lookup("Meters").symbol == "m"
    assert lookup(" lbs ").symbol == "lb"


def test_lookup_unknown():
    with pytest.raises(UnitError):
        lookup("parsec")


def test_length_conversions():
    assert convert(1, "km", "m") == 1000
    assert convert(1, "mi", "km") == pytest.approx(1.609344)
    assert convert(12, "in", "ft") == pytest.approx(1)


def test_mass_conversions():
    assert convert(1, "kg", "g") == 1000
    assert convert(10, "lb", "kg") == pytest.approx(4.5359237)


def test_time_conversions():
    assert convert(90, "min", "h") == 1.5
    assert convert(2, "day", "h") == 48


def test_data_conversions():
    assert convert(1, "GiB", "MiB") == 1024
    assert convert(2048, "B", "KiB") == 2


def test_temperature_conversions():
    assert convert(100, "C", "F") == pytest.approx(212)
    assert convert(32, "F", "C") == pytest.approx(0)
    assert convert(0, "C", "K") == pytest.approx(273.15)
    assert convert(-40, "F", "C") == pytest.approx(-40)


def test_incompatible_dimensions():
    with pytest.raises(UnitError):
        convert(1, "kg", "m")
