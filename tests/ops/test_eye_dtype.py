"""ChainerX's default dtypes of eye and identity differ: eye float64,
identity float32 (ChainerX's linalg tests build float64 matrices with
``xp.eye`` and compare dtypes with NumPy's)."""

import numpy

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# eye: zeros and ones.


def test_eye_defaults_to_float64_and_identity_to_float32():
    assert xgrad.eye(2).dtype == numpy.float64
    assert xgrad.eye(2, dtype=None).dtype == numpy.float32
    assert xgrad.eye(2, dtype='float16').dtype == numpy.float16
    assert xgrad.identity(2).dtype == numpy.float32
    numpy.testing.assert_array_equal(xgrad.eye(2, 3, 1).to_numpy(), numpy.eye(2, 3, 1))
