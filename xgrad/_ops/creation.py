"""Array creation: array, asarray, full, zeros, ones, empty, the ``*_like``
forms, arange, linspace, eye, and the NumPy bridges.

As in ChainerX: ``array`` of Python values takes NumPy's dtype (floats
float64, ints int64); ``full``/``arange`` of Python scalars and the creation
functions without a dtype use ChainerX's defaults (float32, int32 for an
int fill value or range, bool).
"""

import math
from typing import List, Union

import numpy

from xgrad import _core
from xgrad import _dtypes
from xgrad._backend import cuda
from xgrad import _errors
from xgrad._errors import DtypeError

DEFAULT_FLOAT = numpy.dtype('float32')
# ChainerX's default dtype for an integer fill value (full(shape, 3) is int32).
DEFAULT_INT = numpy.dtype('int32')


def default_dtype(dtype):
    """``dtype`` as a NumPy dtype (None: the default float dtype)."""
    if dtype is None:
        return DEFAULT_FLOAT
    return _dtypes.dtype_arg(dtype)


def _device(device):
    return _core.get_default_device() if device is None else \
        _core.get_default_context().get_device(device)


def array(object, dtype=None, copy=True, device=None):
    """A new array from an xgrad array (a recorded copy), a NumPy or CuPy
    array or nested Python sequences. Same signature as ``chainerx.array``."""
    obj = object
    if isinstance(obj, _core.ndarray):
        out = obj.copy() if copy else obj
        if dtype is not None and _dtypes.dtype_arg(dtype) != out.dtype:
            out = out.astype(dtype, copy=False)
        if device is not None and _device(device) is not out.device:
            out = out.to_device(_device(device))
        return out
    if dtype is not None:
        dtype = default_dtype(dtype)
    if cuda.is_device_array(obj):  # CuPy data: on its own GPU unless told otherwise
        data = obj.astype(obj.dtype if dtype is None else dtype, copy=copy)
        return _core._array_of(data, _device(device) if device is not None else
                               _core.get_default_context().get_device('cuda', obj.device.id))
    if isinstance(obj, numpy.ndarray):
        # (copy=None is NumPy 2 only; asarray copies only when it must on both)
        data = numpy.array(obj, dtype=dtype, copy=True) if copy else numpy.asarray(obj, dtype)
    else:
        # NumPy's dtype for Python values, as ChainerX (which converts with
        # numpy.array): floats are float64, ints int64.
        data = numpy.array(obj, dtype=dtype)
    if data.dtype.kind in 'OUSVM':
        raise TypeError('cannot make an xgrad array from {} (dtype {})'.format(
            type(obj).__name__, data.dtype))
    return _core._array_of(data, _device(device))


def asarray(a, dtype=None, device=None):
    """Like ``array`` but without copying when ``a`` already fits."""
    return array(a, dtype=dtype, copy=False, device=device)


def asanyarray(a, dtype=None, device=None):
    """``asarray`` (xgrad has no array subclasses to keep)."""
    return array(a, dtype=dtype, copy=False, device=device)


def ascontiguousarray(a, dtype=None):
    """``a`` as a C-contiguous array of at least one dimension (as NumPy 1.x
    and ChainerX), itself when it already is one of ``dtype``."""
    x = a if isinstance(a, _core.ndarray) else array(a, dtype=dtype)
    if dtype is not None and default_dtype(dtype) != x.dtype:
        x = x.astype(default_dtype(dtype))
    if x.ndim == 0:
        return x.reshape((1,))
    return x if x.is_contiguous else x.copy()


def frombuffer(buffer, dtype='float32', count=-1, offset=0, device=None):
    """A 1-d array over the bytes of ``buffer`` (NumPy's ``frombuffer``),
    sharing that memory as ChainerX does: writes through ``buffer`` show in
    the array (a read-only buffer gives a read-only array). Host memory
    cannot back a GPU array: DeviceError for a GPU ``device``."""
    target = _device(device)
    if not target.is_native:
        raise _errors.DeviceError('frombuffer: a Python buffer is host memory and cannot '
                                  'back an array on {}'.format(target.name))
    data = numpy.frombuffer(buffer, dtype=default_dtype(dtype), count=count,
                            offset=offset)
    if not data.flags.aligned:  # an odd offset: the kernels need aligned elements
        data = data.copy()
    return _core._array_of(data, target)


def tri(N, M=None, k=0, dtype='float32', device=None):
    """An N x M array with ones at and below the k-th diagonal."""
    return _core._array_of(numpy.tri(N, M, k, dtype=default_dtype(dtype)),
                           _device(device))


# NumPy's readers (files, strings, iterables, functions of the index), as
# ChainerX has them: NumPy reads, the result is copied onto ``device``.

def _read(data, device):
    return _core._array_of(numpy.array(data, copy=True), _device(device))


def fromfile(file, dtype=float, count=-1, sep='', device=None):
    """A 1-d array read from a file (binary, or text when ``sep`` is
    given), as NumPy's ``fromfile``, copied onto ``device``."""
    return _read(numpy.fromfile(file, dtype=dtype, count=count, sep=sep), device)


def fromstring(string, dtype=float, count=-1, sep='', device=None):
    """A 1-d array parsed from the text ``string`` (numbers separated by
    ``sep``), as NumPy's ``fromstring``, copied onto ``device``."""
    return _read(numpy.fromstring(string, dtype=dtype, count=count, sep=sep), device)


def fromiter(iterable, dtype, count=-1, device=None):
    """A 1-d array of the first ``count`` (-1: all) items of ``iterable``,
    as NumPy's ``fromiter``, copied onto ``device``."""
    return _read(numpy.fromiter(iterable, dtype=dtype, count=count), device)


def fromfunction(function, shape, *, dtype=float, device=None, **kwargs):
    """``function`` of the index arrays of ``shape`` (NumPy's fromfunction:
    keywords other than ``dtype`` and ``device`` go to ``function``)."""
    return _read(numpy.fromfunction(function, shape, dtype=dtype, **kwargs), device)


def loadtxt(fname, dtype=float, comments='#', delimiter=None, converters=None,
            skiprows=0, usecols=None, unpack=False, ndmin=0, encoding='bytes',
            device=None) -> Union[_core.ndarray, List[_core.ndarray]]:
    """An array read from a text file of rows of numbers, as NumPy's
    ``loadtxt`` (``unpack``: a list of its columns), copied onto ``device``."""
    data = numpy.loadtxt(fname, dtype=dtype, comments=comments, delimiter=delimiter,
                         converters=converters, skiprows=skiprows, usecols=usecols,
                         unpack=unpack, ndmin=ndmin, encoding=encoding)
    if unpack:
        return [_read(d, device) for d in data]
    return _read(data, device)


_CASTINGS = ('no', 'equiv', 'safe', 'same_kind', 'unsafe')


def copyto(dst, src, casting='same_kind', where=True) -> None:
    """Copy ``src`` into ``dst`` (broadcast), where ``where`` is true;
    ``casting`` as in NumPy. ``dst`` must be outside every graph."""
    if not isinstance(dst, _core.ndarray):
        raise TypeError('copyto: dst must be an xgrad.ndarray, not {}'.format(
            type(dst).__name__))
    if casting not in _CASTINGS:
        raise ValueError('copyto: casting must be one of {}, not {!r}'.format(
            _CASTINGS, casting))
    if dst.is_backprop_required(_core.anygraph):
        raise _errors.XgradError('copyto: dst requires grad; in-place assignment '
                                 'to it is not allowed')
    raws = [_core._raw_data(v) if isinstance(v, _core.ndarray) else v
            for v in (dst, src, where)]
    xp = cuda.cupy() if cuda.is_device_array(raws[0]) else numpy
    try:
        xp.copyto(raws[0], raws[1], casting=casting, where=raws[2])
    except TypeError as e:
        raise DtypeError('copyto: {}'.format(e)) from None
    except ValueError as e:
        raise _errors.DimensionError('copyto: {}'.format(e)) from None


def from_numpy(a, device=None):
    """Wrap a NumPy array without copying."""
    if not isinstance(a, numpy.ndarray):
        raise TypeError('from_numpy needs a numpy.ndarray, not {}'.format(
            type(a).__name__))
    return _core._array_of(a, _device(device))


def to_numpy(a, copy=True) -> numpy.ndarray:
    """The data of ``a`` as a NumPy array."""
    if not isinstance(a, _core.ndarray):
        raise TypeError('to_numpy needs an xgrad.ndarray, not {}'.format(
            type(a).__name__))
    return a.to_numpy(copy=copy)


def _fill_dtype(fill_value, dtype):
    if dtype is not None:
        return default_dtype(dtype)
    if isinstance(fill_value, (bool, numpy.bool_)):
        return numpy.dtype(bool)
    if isinstance(fill_value, (int, numpy.integer)):
        return DEFAULT_INT
    if isinstance(fill_value, numpy.generic):
        return fill_value.dtype
    return DEFAULT_FLOAT


def _made(device, name, *args, **kwargs):
    """An array made by the creation function ``name`` of ``device``'s array
    module: NumPy on the host, CuPy in the GPU's scope (allocated and filled
    there, nothing uploaded)."""
    if device.is_native:
        return _core._array_of(getattr(numpy, name)(*args, **kwargs), device)
    with device.scope():
        return _core._array_of(getattr(device.xp, name)(*args, **kwargs), device)


def full(shape, fill_value, dtype=None, device=None):
    """A new array of ``shape`` filled with ``fill_value`` (dtype: float32 for
    a Python float, as ChainerX, unless ``dtype`` is given)."""
    return _made(_device(device), 'full', shape, fill_value,
                 dtype=_fill_dtype(fill_value, dtype))


def zeros(shape, dtype=None, device=None):
    """A new array of zeros (float32 unless ``dtype`` is given)."""
    return _made(_device(device), 'zeros', shape, default_dtype(dtype))


def ones(shape, dtype=None, device=None):
    """A new array of ones (float32 unless ``dtype`` is given)."""
    return _made(_device(device), 'ones', shape, default_dtype(dtype))


def empty(shape, dtype=None, device=None):
    """A new array with uninitialised data (float32 unless ``dtype`` is given)."""
    return _made(_device(device), 'empty', shape, default_dtype(dtype))


def _like(a, dtype, device):
    if not isinstance(a, _core.ndarray):
        a = array(a)
    return (a.shape, a.dtype if dtype is None else dtype,
            a.device if device is None else device)


# ChainerX's ``*_like(a, device)``: the second positional argument is the
# device; xgrad's ``dtype`` is keyword-only.

def zeros_like(a, device=None, *, dtype=None):
    """Zeros of ``a``'s shape, dtype and device (unless given); not on a graph."""
    return zeros(*_like(a, dtype, device))


def ones_like(a, device=None, *, dtype=None):
    """Ones of ``a``'s shape, dtype and device (unless given); not on a graph."""
    return ones(*_like(a, dtype, device))


def empty_like(a, device=None, *, dtype=None):
    """An uninitialised array of ``a``'s shape, dtype and device (unless given)."""
    return empty(*_like(a, dtype, device))


def full_like(a, fill_value, device=None, *, dtype=None):
    """``fill_value`` in ``a``'s shape, dtype and device (unless given)."""
    shape, dtype, device = _like(a, dtype, device)
    return full(shape, fill_value, dtype, device)


def arange(start, stop=None, step=None, dtype=None, device=None):
    """Evenly spaced values in [start, stop), as ``numpy.arange``. Without
    ``dtype``, ChainerX's default dtype of the arguments' kind: int32 for
    ints, float32 if any is a float."""
    if step is not None and step == 0:
        raise _errors.XgradError('arange: step must not be zero')
    if dtype is None:
        dtype = _dtypes.result_type(*[v for v in (start, stop, step) if v is not None])
    dtype = default_dtype(dtype)
    if dtype == numpy.bool_:  # only [False, True] can be spelled in bools
        first, last = (0, start) if stop is None else (start, stop)
        length = max(0, math.ceil((last - first) / (1 if step is None else step)))
        if length > 2:
            raise DtypeError('arange: a bool range holds at most 2 values (False, True), '
                             'not {}'.format(length))
    data = numpy.arange(start, stop, step, dtype=dtype)
    return _core._array_of(data, _device(device))


def linspace(start, stop, num=50, endpoint=True, dtype=None, device=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (float32 unless
    ``dtype`` is given), as ``numpy.linspace``."""
    data = numpy.linspace(start, stop, num, endpoint=endpoint,
                          dtype=default_dtype(dtype))
    return _core._array_of(data, _device(device))


def eye(N, M=None, k=0, dtype='float64', device=None):
    """An N x M array with ones on the ``k``-th diagonal. float64 unless
    ``dtype`` is given, as ChainerX's eye (identity and the rest default to
    float32); an explicit None is the default float dtype."""
    return _core._array_of(numpy.eye(N, M, k, dtype=default_dtype(dtype)),
                           _device(device))


def identity(n, dtype=None, device=None):
    """The n x n identity matrix (float32 unless ``dtype`` is given)."""
    return eye(n, dtype=dtype, device=device)
