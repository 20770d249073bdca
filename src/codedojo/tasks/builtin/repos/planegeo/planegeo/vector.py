"""Points and vectors (the same type: a pair of floats)."""

from __future__ import annotations

import math
from dataclasses import dataclass

EPSILON = 1e-9


@dataclass(frozen=True)
class Vec:
    x: float
    y: float

    def __add__(self, other: Vec) -> Vec:
        return Vec(self.x + other.x, self.y + other.y)

    def __sub__(self, other: Vec) -> Vec:
        return Vec(self.x - other.x, self.y - other.y)

    def scale(self, factor: float) -> Vec:
        return Vec(self.x * factor, self.y * factor)

    def dot(self, other: Vec) -> float:
        return self.x * other.x + self.y * other.y

    def cross(self, other: Vec) -> float:
        """z component of the 3-D cross product; positive when `other` is counter-clockwise."""
        return self.x * other.y - self.y * other.x

    def length(self) -> float:
        return math.hypot(self.x, self.y)

    def normalized(self) -> Vec:
        n = self.length()
        if n < EPSILON:
            raise ValueError("cannot normalise a zero vector")
        return Vec(self.x / n, self.y / n)

    def rotated(self, degrees: float) -> Vec:
        a = math.radians(degrees)
        c, s = math.cos(a), math.sin(a)
        return Vec(self.x * c - self.y * s, self.x * s + self.y * c)

    def close_to(self, other: Vec, tolerance: float = 1e-6) -> bool:
        return abs(self.x - other.x) <= tolerance and abs(self.y - other.y) <= tolerance


def distance(a: Vec, b: Vec) -> float:
    return (b - a).length()


def angle_between(a: Vec, b: Vec) -> float:
    """Unsigned angle in degrees, 0..180."""
    cosine = a.dot(b) / (a.length() * b.length())
    return math.degrees(math.acos(max(-1.0, min(1.0, cosine))))


def orientation(a: Vec, b: Vec, c: Vec) -> int:
    """1 if a->b->c turns left, -1 if right, 0 if collinear."""
    turn = (b - a).cross(c - a)
    if turn > EPSILON:
        return 1
    if turn < -EPSILON:
        return -1
    return 0
