"""The Matrix type: immutable rows of Fractions."""

from __future__ import annotations

from fractions import Fraction


class ShapeError(ValueError):
    """Operands have incompatible shapes."""


class Matrix:
    def __init__(self, rows: list[list[int | Fraction]]) -> None:
        if not rows or not rows[0]:
            raise ShapeError("a matrix needs at least one row and one column")
        width = len(rows[0])
        if any(len(r) != width for r in rows):
            raise ShapeError("all rows must have the same length")
        self.rows = tuple(tuple(Fraction(x) for x in r) for r in rows)

    @classmethod
    def identity(cls, n: int) -> Matrix:
        return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

    @classmethod
    def zeros(cls, n_rows: int, n_cols: int) -> Matrix:
        return cls([[0] * n_cols for _ in range(n_rows)])

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rows), len(self.rows[0])

    def __getitem__(self, index: tuple[int, int]) -> Fraction:
        i, j = index
        return self.rows[i][j]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Matrix) and self.rows == other.rows

    def __repr__(self) -> str:
        body = "; ".join(" ".join(str(x) for x in row) for row in self.rows)
        return f"Matrix[{body}]"

    def __add__(self, other: Matrix) -> Matrix:
        if self.shape != other.shape:
            raise ShapeError(f"cannot add {self.shape} and {other.shape}")
        return Matrix([[a + b for a, b in zip(r, s)] for r, s in zip(self.rows, other.rows)])

    def __sub__(self, other: Matrix) -> Matrix:
        return self + other.scale(-1)

    def scale(self, factor: int | Fraction) -> Matrix:
        return Matrix([[x * factor for x in row] for row in self.rows])

    def __matmul__(self, other: Matrix) -> Matrix:
        n, m = self.shape
        m2, p = other.shape
        if m != m2:
            raise ShapeError(f"cannot multiply {self.shape} by {other.shape}")
        return Matrix(
            [[sum((self.rows[i][k] * other.rows[k][j] for k in range(m)), Fraction(0)) for j in range(p)] for i in range(n)]
        )

    def transpose(self) -> Matrix:
        n, m = self.shape
        return Matrix([[self.rows[i][j] for i in range(n)] for j in range(m)])

    def trace(self) -> Fraction:
        n, m = self.shape
        if n != m:
            raise ShapeError("trace needs a square matrix")
        return sum((self.rows[i][i] for i in range(n)), Fraction(0))

    def power(self, k: int) -> Matrix:
        """self ** k for k >= 0 by repeated squaring."""
        n, m = self.shape
        if n != m:
            raise ShapeError("powers need a square matrix")
        if k < 0:
            raise ValueError("negative powers are not supported; use inverse()")
        result = Matrix.identity(n)
        base = self
        while k > 0:
            if k % 2 == 1:
                result = result @ base
            base = base @ base
            k //= 2
        return result
