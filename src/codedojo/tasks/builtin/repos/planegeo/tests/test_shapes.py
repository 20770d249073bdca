import pytest

from planegeo.shapes import (
    Box,
    area,
    bounding_box,
    centroid,
    contains,
    convex_hull,
    on_segment,
    perimeter,
    segments_intersect,
    signed_area,
)
from planegeo.vector import Vec

SQUARE = [Vec(0, 0), Vec(4, 0), Vec(4, 4), Vec(0, 4)]
L_SHAPE = [Vec(0, 0), Vec(4, 0), Vec(4, 1), Vec(1, 1), Vec(1, 3), Vec(0, 3)]


def test_signed_area_orientation():
    assert signed_area(SQUARE) == 16
    assert signed_area(list(reversed(SQUARE))) == -16


def test_area_of_l_shape():
    assert area(L_SHAPE) == 6


def test_perimeter():
    assert perimeter(SQUARE) == 16
    assert perimeter([Vec(0, 0), Vec(3, 0), Vec(3, 4)]) == 12


def test_centroid_square():
    assert centroid(SQUARE).close_to(Vec(2, 2))


def test_centroid_triangle():
    assert centroid([Vec(0, 0), Vec(6, 0), Vec(0, 3)]).close_to(Vec(2, 1))


def test_centroid_degenerate():
    with pytest.raises(ValueError):
        centroid([Vec(0, 0), Vec(1, 1), Vec(2, 2)])


def test_contains_inside_outside():
    assert contains(SQUARE, Vec(1, 2))
    assert not contains(SQUARE, Vec(5, 2))
    assert not contains(L_SHAPE, Vec(2, 2))
    assert contains(L_SHAPE, Vec(0.5, 2))


def test_contains_boundary():
    assert contains(SQUARE, Vec(4, 2))
    assert contains(SQUARE, Vec(0, 0))


def test_on_segment():
    assert on_segment(Vec(1, 1), Vec(0, 0), Vec(2, 2))
    assert not on_segment(Vec(3, 3), Vec(0, 0), Vec(2, 2))
    assert not on_segment(Vec(1, 0), Vec(0, 0), Vec(2, 2))


def test_segments_intersect_crossing():
    assert segments_intersect(Vec(0, 0), Vec(2, 2), Vec(0, 2), Vec(2, 0))


def test_segments_intersect_disjoint_and_touching():
    assert not segments_intersect(Vec(0, 0), Vec(1, 1), Vec(2, 2), Vec(3, 0))
    assert segments_intersect(Vec(0, 0), Vec(2, 0), Vec(2, 0), Vec(3, 5))


def test_segments_collinear_overlap():
    assert segments_intersect(Vec(0, 0), Vec(2, 0), Vec(1, 0), Vec(3, 0))
    assert not segments_intersect(Vec(0, 0), Vec(1, 0), Vec(2, 0), Vec(3, 0))


def test_bounding_box():
    box = bounding_box([Vec(1, 5), Vec(-2, 3), Vec(4, -1)])
    assert box == Box(Vec(-2, -1), Vec(4, 5))
    assert (box.width, box.height) == (6, 6)
    with pytest.raises(ValueError):
        bounding_box([])


def test_box_contains_and_intersects():
    box = Box(Vec(0, 0), Vec(2, 2))
    assert box.contains(Vec(2, 1))
    assert not box.contains(Vec(3, 1))
    assert box.intersects(Box(Vec(2, 2), Vec(3, 3)))
    assert not box.intersects(Box(Vec(2.5, 0), Vec(3, 1)))
    assert not box.intersects(Box(Vec(0, 3), Vec(1, 4)))


def test_convex_hull():
    points = [Vec(0, 0), Vec(2, 0), Vec(1, 1), Vec(2, 2), Vec(0, 2), Vec(1, 0)]
    assert convex_hull(points) == [Vec(0, 0), Vec(2, 0), Vec(2, 2), Vec(0, 2)]


def test_convex_hull_small_inputs():
    assert convex_hull([Vec(1, 1), Vec(1, 1)]) == [Vec(1, 1)]
    assert convex_hull([Vec(2, 0), Vec(0, 0)]) == [Vec(0, 0), Vec(2, 0)]
