"""xgrad.testing's assert_allclose and assert_array_equal: xgrad arrays,
NumPy arrays and scalars; equal shapes (a scalar matches every element); optional dtype check; NumPy's
failure report."""

import numpy
import pytest

import xgrad
from xgrad.testing._assertions import assert_allclose, assert_array_equal

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# the assertion helpers themselves, on literal values.


def _x(values, dtype='float64'):
    return xgrad.array(numpy.asarray(values, dtype=dtype))


@pytest.mark.parametrize('assertion', [assert_allclose, assert_array_equal])
def test_passes_for_equal_values_of_any_kind(assertion):
    assertion(_x([1.0, 2.0]), _x([1.0, 2.0]))
    assertion(_x([1.0, 2.0]), numpy.array([1.0, 2.0]))
    assertion(numpy.array([1.0, 2.0]), _x([1.0, 2.0], 'float32'))
    assertion(_x(3.0), 3.0)
    assertion(2, _x(2, 'int64'))
    assertion(_x([1.0, numpy.nan]), [1.0, numpy.nan])  # NaNs in the same places


def test_allclose_tolerances():
    assert_allclose(_x([1.0, 2.0]), [1.0, 2.0 + 1e-8], rtol=1e-7)
    assert_allclose(_x([0.0]), [1e-3], atol=1e-3)
    with pytest.raises(AssertionError, match='Not equal to tolerance rtol=1e-07, atol=0'):
        assert_allclose(_x([1.0, 2.0]), [1.0, 2.1])
    with pytest.raises(AssertionError):
        assert_allclose(_x([numpy.nan]), [numpy.nan], equal_nan=False)


def test_failure_report_is_numpys_with_err_msg():
    with pytest.raises(AssertionError) as info:
        assert_allclose(_x([1.0, 2.0, 3.0]), [1.0, 2.5, 3.0], err_msg='input 1')
    message = str(info.value)
    assert 'input 1' in message and 'Mismatched elements: 1 / 3' in message
    with pytest.raises(AssertionError) as info:
        assert_array_equal(_x([1, 2], 'int64'), [1, 3], err_msg='labels')
    assert 'labels' in str(info.value) and 'Arrays are not equal' in str(info.value)


@pytest.mark.parametrize('assertion', [assert_allclose, assert_array_equal])
@pytest.mark.parametrize('actual, desired', [
    (_x([[1.0, 2.0]]), numpy.array([1.0, 2.0])),
    (_x(numpy.zeros((0, 2))), numpy.zeros((2, 0))),
])
def test_shapes_are_strict(assertion, actual, desired):
    with pytest.raises(AssertionError, match=r'\(shapes .* mismatch\)'):
        assertion(actual, desired)


@pytest.mark.parametrize('assertion', [assert_allclose, assert_array_equal])
def test_a_scalar_is_compared_with_every_element(assertion):
    # NumPy's and ChainerX's rule, which Chainer's tests use
    assertion(_x([1.0, 1.0]), 1.0)
    assertion(numpy.float32('nan'), _x([[numpy.nan], [numpy.nan]]))
    with pytest.raises(AssertionError):
        assertion(_x([1.0, 2.0]), 1.0)


@pytest.mark.parametrize('assertion', [assert_allclose, assert_array_equal])
def test_check_dtype(assertion):
    assertion(_x([1.0], 'float32'), numpy.array([1.0]))
    assertion(_x([1.0], 'float32'), numpy.array([1.0], 'float32'), check_dtype=True)
    with pytest.raises(AssertionError, match=r'\(dtypes float32, float64 mismatch\)'):
        assertion(_x([1.0], 'float32'), numpy.array([1.0]), check_dtype=True)
