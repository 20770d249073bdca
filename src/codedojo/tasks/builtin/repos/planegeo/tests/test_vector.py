import math

import pytest

from planegeo.vector import Vec, angle_between, distance, orientation


def test_add_sub_scale():
    assert Vec(1, 2) + Vec(3, 4) == Vec(4, 6)
    assert Vec(1, 2) - Vec(3, 5) == Vec(-2, -3)
    assert Vec(1, -2).scale(3) == Vec(3, -6)


def test_dot_and_cross():
    assert Vec(1, 2).dot(Vec(3, 4)) == 11
    assert Vec(1, 0).cross(Vec(0, 1)) == 1
    assert Vec(0, 1).cross(Vec(1, 0)) == -1


def test_length_and_distance():
    assert Vec(3, 4).length() == 5
    assert distance(Vec(1, 1), Vec(4, 5)) == 5


def test_normalized():
    assert Vec(0, 5).normalized() == Vec(0, 1)
    with pytest.raises(ValueError):
        Vec(0, 0).normalized()


def test_rotated():
    assert Vec(1, 0).rotated(90).close_to(Vec(0, 1))
    assert Vec(1, 1).rotated(180).close_to(Vec(-1, -1))


def test_close_to_tolerance():
    assert Vec(1, 1).close_to(Vec(1.0000001, 1))
    assert not Vec(1, 1).close_to(Vec(1.1, 1))
    assert not Vec(1, 1).close_to(Vec(1, 1.1))


def test_angle_between():
    assert angle_between(Vec(1, 0), Vec(0, 2)) == pytest.approx(90)
    assert angle_between(Vec(1, 0), Vec(-1, 0)) == pytest.approx(180)
    assert angle_between(Vec(1, 1), Vec(1, 0)) == pytest.approx(45)


def test_orientation():
    assert orientation(Vec(0, 0), Vec(1, 0), Vec(1, 1)) == 1
    assert orientation(Vec(0, 0), Vec(1, 0), Vec(1, -1)) == -1
    assert orientation(Vec(0, 0), Vec(1, 1), Vec(2, 2)) == 0


def test_rotation_preserves_length():
    v = Vec(3, 4).rotated(33)
    assert math.isclose(v.length(), 5)
