"""Array assertions that take xgrad arrays: ``assert_allclose`` and
``assert_array_equal``.

NumPy's ``numpy.testing`` functions with ChainerX's signatures, on xgrad
arrays, NumPy arrays and scalars alike. As in NumPy and ChainerX, shapes
must be equal, except that a scalar (0-d) is compared with every element
(Chainer's tests rely on it); ``check_dtype=True`` also requires equal
dtypes. Failures raise AssertionError with NumPy's report.
"""

import numpy
import numpy.testing

from xgrad import _core


def _as_numpy(a):
    return a.to_numpy() if isinstance(a, _core.ndarray) else numpy.asarray(a)


def _same_kind(actual, desired, err_msg, check_dtype):
    """The operands as NumPy arrays; AssertionError (NumPy's style) if
    their shapes, or with ``check_dtype`` their dtypes, differ."""
    actual, desired = _as_numpy(actual), _as_numpy(desired)
    # A scalar (0-d) on either side is compared with every element, as NumPy
    # and ChainerX do; other shapes must be equal.
    if actual.shape != desired.shape and actual.ndim and desired.ndim:
        raise AssertionError(numpy.testing.build_err_msg(
            [actual, desired], err_msg + '\n(shapes {}, {} mismatch)'.format(
                actual.shape, desired.shape), names=('actual', 'desired')))
    if check_dtype and actual.dtype != desired.dtype:
        raise AssertionError(numpy.testing.build_err_msg(
            [actual, desired], err_msg + '\n(dtypes {}, {} mismatch)'.format(
                actual.dtype, desired.dtype), names=('actual', 'desired')))
    return actual, desired


def assert_allclose(actual, desired, rtol=1e-7, atol=0, equal_nan=True, err_msg='',
                    verbose=True, *, check_dtype=False):
    """``|actual - desired| <= atol + rtol * |desired|`` everywhere, with equal
    shapes (NaNs equal when ``equal_nan``)."""
    actual, desired = _same_kind(actual, desired, err_msg, check_dtype)
    numpy.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol,
                                  equal_nan=equal_nan, err_msg=err_msg, verbose=verbose)


def assert_array_equal(actual, desired, err_msg='', verbose=True, *, check_dtype=False):
    """Equal shapes and equal elements (NaNs in the same places are equal)."""
    actual, desired = _same_kind(actual, desired, err_msg, check_dtype)
    numpy.testing.assert_array_equal(actual, desired, err_msg=err_msg, verbose=verbose)
