"""ChainerX's default dtypes of eye and identity differ: eye float64,
identity float32 (ChainerX's linalg tests build float64 matrices with
``xp.eye`` and compare dtypes with NumPy's)."""

import numpy

import xgrad


def test_eye_defaults_to_float64_and_identity_to_float32():
    assert xgrad.eye(2).dtype == numpy.float64
    assert xgrad.eye(2, dtype=None).dtype == numpy.float32
    assert xgrad.eye(2, dtype='float16').dtype == numpy.float16
    assert xgrad.identity(2).dtype == numpy.float32
    numpy.testing.assert_array_equal(xgrad.eye(2, 3, 1).to_numpy(), numpy.eye(2, 3, 1))
