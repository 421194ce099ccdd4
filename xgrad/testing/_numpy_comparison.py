"""ChainerX's NumPy-comparison test helpers: ``assert_allclose_ex``,
``assert_array_equal_ex`` and the ``numpy_chainerx_*`` decorators.

A decorated test runs twice, once with ``xp=xgrad`` and once with
``xp=numpy``; the two runs must both raise, or return the same structure
of arrays (same shape, dtype and strides, on the default device) and
Python values. These follow ChainerX's ``chainerx.testing`` (NumPy's
broadcasting comparison, then the dtype and strides checks), so tests
written for ChainerX run unchanged against xgrad.
"""

import functools
import traceback
import warnings

import numpy
import numpy.testing

from xgrad import _core

_TOLERANCE_KEYS = tuple('{}_{}'.format(dtype, kind) for dtype in ('float16', 'float32', 'float64')
                        for kind in ('rtol', 'atol'))


def _host(a):
    return a.to_numpy() if isinstance(a, _core.ndarray) else a


def _check_dtype_and_strides(x, y, dtype_check, strides_check):
    if dtype_check is False and strides_check:
        raise ValueError('strides_check=True needs dtype_check=True')
    dtype_check = True if dtype_check is None else dtype_check
    strides_check = dtype_check if strides_check is None else strides_check
    arrays = (numpy.ndarray, _core.ndarray)
    if not (isinstance(x, arrays) and isinstance(y, arrays)):
        return
    if strides_check:
        assert x.strides == y.strides, 'Strides mismatch: x: {}, y: {}'.format(x.strides, y.strides)
    if dtype_check:
        assert x.dtype.name == y.dtype.name, 'Dtype mismatch: x: {}, y: {}'.format(x.dtype, y.dtype)


def assert_allclose_ex(x, y, rtol=1e-7, atol=0, equal_nan=True, err_msg='', verbose=True,
                       **kwargs):
    """``numpy.testing.assert_allclose`` on xgrad or NumPy arrays, then equal
    dtypes and strides (keywords ``dtype_check``, ``strides_check``; the
    tolerances may be given per dtype of ``x``, e.g. ``float16_rtol``)."""
    dtype_check = kwargs.pop('dtype_check', None)
    strides_check = kwargs.pop('strides_check', None)
    dtype_name = x.dtype.name if hasattr(x, 'dtype') else None
    rtol = kwargs.pop('{}_rtol'.format(dtype_name), rtol)
    atol = kwargs.pop('{}_atol'.format(dtype_name), atol)
    unknown = set(kwargs) - set(_TOLERANCE_KEYS)
    if unknown:
        raise TypeError('assert_allclose_ex() got unexpected keywords {}'.format(sorted(unknown)))
    numpy.testing.assert_allclose(_host(x), _host(y), rtol=rtol, atol=atol, equal_nan=equal_nan,
                                  err_msg=err_msg, verbose=verbose)
    _check_dtype_and_strides(x, y, dtype_check, strides_check)


def assert_array_equal_ex(x, y, *args, **kwargs):
    """``numpy.testing.assert_array_equal`` on xgrad or NumPy arrays, then
    equal dtypes and strides (keywords ``dtype_check``, ``strides_check``)."""
    dtype_check = kwargs.pop('dtype_check', None)
    strides_check = kwargs.pop('strides_check', None)
    numpy.testing.assert_array_equal(_host(x), _host(y), *args, **kwargs)
    _check_dtype_and_strides(x, y, dtype_check, strides_check)


_IGNORED = object()


def ignore():
    """What a decorated test returns, for both modules, to have its result
    not compared."""
    return _IGNORED


def _run(test, args, kwargs):
    try:
        return test(*args, **kwargs), None, None
    except Exception as e:
        return None, e, traceback.format_exc()


def _compare(check, xgrad_result, numpy_result, path):
    """Raise AssertionError naming ``path`` (the indices into nested results)
    where the two results differ."""
    where = ''.join('[{}]'.format(i) for i in path) or 'result'
    if xgrad_result is _IGNORED and numpy_result is _IGNORED:
        return
    if isinstance(xgrad_result, (list, tuple)):
        assert type(xgrad_result) is type(numpy_result), \
            '{}: result types differ: xgrad {}, numpy {}'.format(
                where, type(xgrad_result).__name__, type(numpy_result).__name__)
        assert len(xgrad_result) == len(numpy_result), \
            '{}: result lengths differ: xgrad {}, numpy {}'.format(
                where, len(xgrad_result), len(numpy_result))
        for i, (xr, nr) in enumerate(zip(xgrad_result, numpy_result)):
            _compare(check, xr, nr, path + (i,))
    elif isinstance(xgrad_result, _core.ndarray):
        assert isinstance(numpy_result, (numpy.ndarray, numpy.generic)), \
            '{}: xgrad returned an array, numpy a {} (return ignore() to skip a case)'.format(
                where, type(numpy_result).__name__)
        assert xgrad_result.shape == numpy.shape(numpy_result), \
            '{}: shapes differ: xgrad {}, numpy {}'.format(
                where, xgrad_result.shape, numpy.shape(numpy_result))
        default = _core.get_default_device()
        assert xgrad_result.device is default, \
            '{}: xgrad result on {}, not on the default device {}'.format(
                where, xgrad_result.device, default)
        try:
            check(xgrad_result, numpy_result)
        except AssertionError as e:
            raise AssertionError('{}: {}'.format(where, e)) from None
    else:
        assert not isinstance(xgrad_result, (numpy.ndarray, numpy.generic)), \
            '{}: xgrad returned a NumPy {}'.format(where, type(xgrad_result).__name__)
        assert type(xgrad_result) is type(numpy_result), \
            '{}: types differ: xgrad {}, numpy {}'.format(
                where, type(xgrad_result).__name__, type(numpy_result).__name__)
        assert xgrad_result == numpy_result, \
            '{}: values differ: xgrad {!r}, numpy {!r}'.format(where, xgrad_result, numpy_result)


def _numpy_comparison(check, name, accept_error):
    import pytest
    import xgrad

    def decorator(test):
        @functools.wraps(test)
        def compared(*args, **kwargs):
            kwargs[name] = xgrad
            xgrad_result, xgrad_error, xgrad_tb = _run(test, args, kwargs)
            kwargs[name] = numpy
            with warnings.catch_warnings():
                warnings.simplefilter('ignore', RuntimeWarning)
                numpy_result, numpy_error, numpy_tb = _run(test, args, kwargs)
            if xgrad_error is not None or numpy_error is not None:
                if xgrad_error is None:
                    pytest.fail('Only numpy raised an error:\n\n' + numpy_tb)
                if numpy_error is None:
                    pytest.fail('Only xgrad raised an error:\n\n' + xgrad_tb)
                if not (isinstance(xgrad_error, accept_error)
                        and isinstance(numpy_error, accept_error)):
                    pytest.fail('Both raised, not an accepted error:\n\nxgrad:\n{}\nnumpy:\n{}'
                                .format(xgrad_tb, numpy_tb))
                return
            assert xgrad_result is not None and numpy_result is not None, \
                'The test returned None (xgrad: {!r}, numpy: {!r})'.format(
                    xgrad_result, numpy_result)
            _compare(check, xgrad_result, numpy_result, ())
        # pytest must see the module argument as given, or it asks for a fixture.
        return pytest.mark.parametrize(name, [None])(compared)
    return decorator


def numpy_chainerx_allclose(*, rtol=1e-7, atol=0, equal_nan=True, err_msg='', verbose=True,
                            name='xp', dtype_check=None, strides_check=None, accept_error=(),
                            **tolerances):
    """Decorator: the test returns equal results, within tolerance, with
    ``xp=xgrad`` and ``xp=numpy`` (or both raise one of ``accept_error``)."""
    unknown = set(tolerances) - set(_TOLERANCE_KEYS)
    if unknown:
        raise TypeError('numpy_chainerx_allclose() got unexpected keywords {}'.format(
            sorted(unknown)))

    def check(x, y):
        assert_allclose_ex(x, y, rtol, atol, equal_nan, err_msg, verbose,
                           dtype_check=dtype_check, strides_check=strides_check, **tolerances)
    return _numpy_comparison(check, name, accept_error)


def numpy_chainerx_array_equal(*, err_msg='', verbose=True, name='xp', dtype_check=None,
                               strides_check=None, accept_error=(), **tolerances):
    """Decorator: the test returns equal results with ``xp=xgrad`` and
    ``xp=numpy`` (or both raise one of ``accept_error``). Per-dtype
    tolerances (``float16_rtol``...) are accepted and, as in ChainerX,
    unused: the results must be equal."""
    unknown = set(tolerances) - set(_TOLERANCE_KEYS)
    if unknown:
        raise TypeError('numpy_chainerx_array_equal() got unexpected keywords {}'.format(
            sorted(unknown)))
    def check(x, y):
        assert_array_equal_ex(x, y, err_msg, verbose, dtype_check=dtype_check,
                              strides_check=strides_check)
    return _numpy_comparison(check, name, accept_error)


def _fromnumpy(a, keepstrides=False, device=None):
    """An xgrad copy of NumPy array ``a`` on ``device``; with ``keepstrides``
    the copy has ``a``'s strides (ChainerX's tests use this to make
    non-contiguous and padded arrays)."""
    a = numpy.asarray(a)
    if not keepstrides:
        return _core._array_of(a.copy(), device)
    low = sum(s * (n - 1) for s, n in zip(a.strides, a.shape) if s < 0) if a.size else 0
    high = sum(s * (n - 1) for s, n in zip(a.strides, a.shape) if s > 0) if a.size else 0
    buffer = numpy.zeros(high - low + a.itemsize, dtype=numpy.uint8)
    # (an empty array keeps its strides too: a one-element base it never reads)
    base = buffer[-low:].view(a.dtype) if a.size else numpy.empty(1, a.dtype)
    copy = numpy.lib.stride_tricks.as_strided(base, a.shape, a.strides)
    copy[...] = a
    return _core._array_of(copy, device)


class _DeviceBuffer(numpy.ndarray):
    """ChainerX's ``testing._DeviceBuffer(values, shape, dtype, device=None)``:
    memory on a device that ``frombuffer`` reads without copying. On xgrad's
    native devices that memory is host memory, so the buffer is a NumPy array
    (it has the buffer protocol); GPU memory has no Python buffer and is
    refused with DeviceError."""

    def __new__(cls, values, shape, dtype, device=None):
        from xgrad._core import get_device
        from xgrad._errors import DeviceError
        device = get_device(device)
        if not device.is_native:
            raise DeviceError('_DeviceBuffer: {} memory has no Python buffer; only '
                              'native devices are supported'.format(device.name))
        return numpy.array(values, dtype).reshape(shape).view(cls)
