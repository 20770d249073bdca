"""Gaussian elimination: determinant, rank, inverse, solving."""

from __future__ import annotations

from fractions import Fraction

from matrixlite.matrix import Matrix, ShapeError


class SingularError(ValueError):
    """The matrix has no inverse / the system has no unique solution."""


def row_echelon(rows: list[list[Fraction]]) -> tuple[list[list[Fraction]], int, int]:
    """Reduce in place to row echelon form; returns (rows, rank, number of row swaps)."""
    n_rows, n_cols = len(rows), len(rows[0])
    rank = 0
    swaps = 0
    for col in range(n_cols):
        pivot = None
        for r in range(rank, n_rows):
            if rows[r][col] != 0:
                pivot = r
                break
        if pivot is None:
            continue
        if pivot != rank:
            rows[rank], rows[pivot] = rows[pivot], rows[rank]
            swaps += 1
        for r in range(rank + 1, n_rows):
            factor = rows[r][col] / rows[rank][col]
            rows[r] = [a - factor * b for a, b in zip(rows[r], rows[rank])]
        rank += 1
        if rank == n_rows:
            break
    return rows, rank, swaps


def determinant(m: Matrix) -> Fraction:
    n, k = m.shape
    if n != k:
        raise ShapeError("determinant needs a square matrix")
    rows, rank, swaps = row_echelon([list(r) for r in m.rows])
    if rank < n:
        return Fraction(0)
    det = Fraction(-1 if swaps % 2 else 1)
    for i in range(n):
        det *= rows[i][i]
    return det


def rank(m: Matrix) -> int:
    return row_echelon([list(r) for r in m.rows])[1]


def inverse(m: Matrix) -> Matrix:
    """Gauss-Jordan on [m | I]."""
    n, k = m.shape
    if n != k:
        raise ShapeError("only square matrices have inverses")
    aug = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(m.rows)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if aug[r][col] != 0), None)
        if pivot is None:
            raise SingularError("matrix is singular")
        aug[col], aug[pivot] = aug[pivot], aug[col]
        lead = aug[col][col]
        aug[col] = [x / lead for x in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                factor = aug[r][col]
                aug[r] = [a - factor * b for a, b in zip(aug[r], aug[col])]
    return Matrix([row[n:] for row in aug])


def solve(m: Matrix, b: list[int | Fraction]) -> list[Fraction]:
    """The x with m @ x = b, for square invertible m."""
    n, _ = m.shape
    if len(b) != n:
        raise ShapeError(f"right-hand side has {len(b)} entries, expected {n}")
    inv = inverse(m)
    return [sum((inv[i, j] * Fraction(b[j]) for j in range(n)), Fraction(0)) for i in range(n)]
