from fractions import Fraction

import pytest

from matrixlite.matrix import Matrix, ShapeError

A = Matrix([[1, 2], [3, 4]])
B = Matrix([[0, 1], [1, 0]])


def test_shape_and_index():
    m = Matrix([[1, 2, 3], [4, 5, 6]])
    assert m.shape == (2, 3)
    assert m[1, 2] == 6


def test_invalid_shapes():
    with pytest.raises(ShapeError):
        Matrix([])
    with pytest.raises(ShapeError):
        Matrix([[1, 2], [3]])


def test_identity_and_zeros():
    assert Matrix.identity(2) == Matrix([[1, 0], [0, 1]])
    assert Matrix.zeros(2, 3) == Matrix([[0, 0, 0], [0, 0, 0]])


def test_add_and_sub():
    assert A + B == Matrix([[1, 3], [4, 4]])
    assert A - B == Matrix([[1, 1], [2, 4]])
    with pytest.raises(ShapeError):
        A + Matrix([[1, 2, 3], [4, 5, 6]])


def test_scale():
    assert A.scale(Fraction(1, 2)) == Matrix([[Fraction(1, 2), 1], [Fraction(3, 2), 2]])


def test_matmul():
    assert A @ B == Matrix([[2, 1], [4, 3]])
    assert B @ A == Matrix([[3, 4], [1, 2]])


def test_matmul_rectangular():
    m = Matrix([[1, 2, 3]])
    n = Matrix([[1], [0], [2]])
    assert m @ n == Matrix([[7]])
    assert (n @ m).shape == (3, 3)
    with pytest.raises(ShapeError):
        m @ m


def test_transpose():
    assert Matrix([[1, 2, 3], [4, 5, 6]]).transpose() == Matrix([[1, 4], [2, 5], [3, 6]])


def test_trace():
    assert A.trace() == 5
    with pytest.raises(ShapeError):
        Matrix([[1, 2]]).trace()


def test_power():
    assert A.power(0) == Matrix.identity(2)
    assert A.power(1) == A
    assert A.power(3) == Matrix([[37, 54], [81, 118]])
    assert Matrix([[1, 1], [1, 0]]).power(10)[0, 1] == 55


def test_power_errors():
    with pytest.raises(ValueError):
        A.power(-1)
    with pytest.raises(ShapeError):
        Matrix([[1, 2]]).power(2)


def test_repr():
    assert repr(Matrix([[1, Fraction(1, 2)]])) == "Matrix[1 1/2]"
