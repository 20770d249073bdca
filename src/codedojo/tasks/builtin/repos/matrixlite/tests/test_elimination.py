from fractions import Fraction

import pytest

from matrixlite.elimination import SingularError, determinant, inverse, rank, solve
from matrixlite.matrix import Matrix, ShapeError


def test_determinant_2x2():
    assert determinant(Matrix([[1, 2], [3, 4]])) == -2


def test_determinant_needs_row_swap():
    assert determinant(Matrix([[0, 1], [1, 0]])) == -1
    assert determinant(Matrix([[0, 2, 1], [1, 1, 1], [2, 0, 3]])) == -4


def test_determinant_singular_and_shape():
    assert determinant(Matrix([[1, 2], [2, 4]])) == 0
    with pytest.raises(ShapeError):
        determinant(Matrix([[1, 2]]))


def test_determinant_3x3():
    assert determinant(Matrix([[2, 0, 1], [1, 3, 2], [1, 1, 2]])) == 6


def test_rank():
    assert rank(Matrix([[1, 2], [2, 4]])) == 1
    assert rank(Matrix([[1, 2, 3], [4, 5, 6], [7, 8, 10]])) == 3
    assert rank(Matrix([[0, 0], [0, 0]])) == 0
    assert rank(Matrix([[0, 1, 2], [0, 2, 4], [1, 0, 0]])) == 2


def test_inverse():
    inv = inverse(Matrix([[4, 7], [2, 6]]))
    assert inv == Matrix([[Fraction(3, 5), Fraction(-7, 10)], [Fraction(-1, 5), Fraction(2, 5)]])


def test_inverse_times_matrix_is_identity():
    m = Matrix([[0, 2, 1], [1, 1, 1], [2, 0, 3]])
    assert inverse(m) @ m == Matrix.identity(3)


def test_inverse_singular():
    with pytest.raises(SingularError):
        inverse(Matrix([[1, 2], [2, 4]]))


def test_solve():
    assert solve(Matrix([[2, 1], [1, 3]]), [3, 5]) == [Fraction(4, 5), Fraction(7, 5)]


def test_solve_three_unknowns():
    m = Matrix([[1, 1, 1], [0, 2, 5], [2, 5, -1]])
    assert solve(m, [6, -4, 27]) == [5, 3, -2]


def test_solve_bad_rhs():
    with pytest.raises(ShapeError):
        solve(Matrix([[1, 0], [0, 1]]), [1, 2, 3])
