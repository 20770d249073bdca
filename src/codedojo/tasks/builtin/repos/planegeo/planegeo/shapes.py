"""Segments, polygons, boxes and hulls."""

from __future__ import annotations

from dataclasses import dataclass

from planegeo.vector import EPSILON, Vec, distance, orientation


@dataclass(frozen=True)
class Box:
    low: Vec
    high: Vec

    @property
    def width(self) -> float:
        return self.high.x - self.low.x

    @property
    def height(self) -> float:
        return self.high.y - self.low.y

    def contains(self, p: Vec) -> bool:
        return self.low.x <= p.x <= self.high.x and self.low.y <= p.y <= self.high.y

    def intersects(self, other: Box) -> bool:
        return not (
            other.low.x > self.high.x
            or other.high.x < self.low.x
            or other.low.y > self.high.y
            or other.high.y < self.low.y
        )


def bounding_box(points: list[Vec]) -> Box:
    if not points:
        raise ValueError("no points")
    xs = [p.x for p in points]
    ys = [p.y for p in points]
    return Box(Vec(min(xs), min(ys)), Vec(max(xs), max(ys)))


def on_segment(p: Vec, a: Vec, b: Vec) -> bool:
    if orientation(a, b, p) != 0:
        return False
    return min(a.x, b.x) - EPSILON <= p.x <= max(a.x, b.x) + EPSILON and min(a.y, b.y) - EPSILON <= p.y <= max(
        a.y, b.y
    ) + EPSILON


def segments_intersect(a: Vec, b: Vec, c: Vec, d: Vec) -> bool:
    o1, o2 = orientation(a, b, c), orientation(a, b, d)
    o3, o4 = orientation(c, d, a), orientation(c, d, b)
    if o1 != o2 and o3 != o4:
        return True
    return on_segment(c, a, b) or on_segment(d, a, b) or on_segment(a, c, d) or on_segment(b, c, d)


def signed_area(polygon: list[Vec]) -> float:
    """Shoelace formula; positive for counter-clockwise vertex order."""
    total = 0.0
    n = len(polygon)
    for i in range(n):
        total += polygon[i].cross(polygon[(i + 1) % n])
    return total / 2


def area(polygon: list[Vec]) -> float:
    return abs(signed_area(polygon))


def perimeter(polygon: list[Vec]) -> float:
    n = len(polygon)
    return sum(distance(polygon[i], polygon[(i + 1) % n]) for i in range(n))


def centroid(polygon: list[Vec]) -> Vec:
    a = signed_area(polygon)
    if abs(a) < EPSILON:
        raise ValueError("degenerate polygon has no centroid")
    cx = cy = 0.0
    n = len(polygon)
    for i in range(n):
        p, q = polygon[i], polygon[(i + 1) % n]
        f = p.cross(q)
        cx += (p.x + q.x) * f
        cy += (p.y + q.y) * f
    return Vec(cx / (6 * a), cy / (6 * a))


def contains(polygon: list[Vec], p: Vec) -> bool:
    """Ray casting; points on the boundary count as inside."""
    n = len(polygon)
    for i in range(n):
        if on_segment(p, polygon[i], polygon[(i + 1) % n]):
            return True
    inside = False
    for i in range(n):
        a, b = polygon[i], polygon[(i + 1) % n]
        if (a.y > p.y) != (b.y > p.y):
            x_cross = a.x + (p.y - a.y) * (b.x - a.x) / (b.y - a.y)
            if p.x < x_cross:
                inside = not inside
    return inside


def convex_hull(points: list[Vec]) -> list[Vec]:
    """Andrew's monotone chain; counter-clockwise, starting from the lowest-leftmost point."""
    pts = sorted(set(points), key=lambda v: (v.x, v.y))
    if len(pts) <= 2:
        return pts

    def half(seq: list[Vec]) -> list[Vec]:
        chain: list[Vec] = []
        for p in seq:
            while len(chain) >= 2 and orientation(chain[-2], chain[-1], p) <= 0:
                chain.pop()
            chain.append(p)
        return chain

    lower = half(pts)
    upper = half(list(reversed(pts)))
    return lower[:-1] + upper[:-1]
