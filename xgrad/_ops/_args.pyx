# cython: language_level=3
"""Argument handling shared by the plain-Python op modules: turning inputs
into xgrad arrays, checking axes and dtypes, applying an op. Each check
raises the xgrad error class ChainerX raises, naming the argument at fault
(and the op, when ``op`` is given: ``'var: axis 5 is out of range ...'``).

Cython, not Python: every op of those modules goes through these helpers on
every call, so their own cost is most of a small op's overhead. The common
case (NumPy data, xgrad arrays, Python scalars) is answered by type identity
before the general checks (abstract-class ``isinstance``, CuPy probes); what
they return and raise is the same."""

import numbers
import os

import numpy

from xgrad._array cimport ndarray as Array, _wrap
from xgrad._function_node cimport FunctionNode, apply as _apply
from xgrad._ops.reduction cimport normalize_axes as _normalize_axes

from xgrad import _core, _dtypes
from xgrad._backend import cuda
from xgrad._backend.cuda import is_device_array, module_of as _cuda_module_of
from xgrad._errors import DeviceError, DimensionError, DtypeError, IndexError  # NOQA
from xgrad._ops.creation import array

ndarray = _core.ndarray

cdef type NPA = numpy.ndarray
cdef object NUMPY = numpy
cdef tuple _SCALAR_TYPES = (numbers.Number, numpy.generic)
cdef object _array_of = _core._array_of


def raw(Array a not None):
    """The backend array an xgrad array wraps (``_core._raw_data``)."""
    return a._data


cdef inline bint _is_host_value(object r):
    """NumPy data or a Python number: never GPU data (no CuPy probe)."""
    cdef type t = type(r)
    return t is NPA or t is float or t is int or t is bool


cdef object _module_of(tuple raws):
    """``cuda.module_of(*raws)``, answered by type for NumPy data."""
    for r in raws:
        if not _is_host_value(r):
            return _cuda_module_of(*raws)
    return NUMPY


def module_of(*raw):
    """NumPy or CuPy: the array module of raw data (``cuda.module_of``, the
    op library's import point for it), answered by type for NumPy data."""
    return _module_of(raw)


def array_result(r):
    """A raw result as an array of its own backend: NumPy scalars (what NumPy
    gives for 0-d operations) and Python values become NumPy arrays, device
    (CuPy) arrays pass as they are (``numpy.asarray`` would refuse them)."""
    if type(r) is NPA or isinstance(r, NPA) or is_device_array(r):
        return r
    return numpy.asarray(r)


def on_device_of(ref, a):
    """Host data ``a`` (index arrays, masks; tuples of them) moved to where
    raw ``ref`` lives: the GPU for CuPy data, nowhere for NumPy data."""
    return cuda.device_key(a) if cuda.on_gpu(ref) else a


def _named(name, op):
    return name if op is None else '{}: {}'.format(op, name)


def as_array(x, name, like=None, op=None):
    """An xgrad array for argument ``name``: xgrad arrays pass through, NumPy
    arrays, Python scalars and (nested) sequences become constants on
    ``like``'s device."""
    if isinstance(x, Array):
        return x
    name = _named(name, op)
    if x is None or isinstance(x, (str, bytes, dict, set)):
        raise TypeError('{} must be an xgrad.ndarray (or array-like), not {}'.format(
            name, type(x).__name__))
    try:
        return array(x, device=None if like is None else like.device)
    except (TypeError, ValueError):
        raise TypeError('{} must be an xgrad.ndarray (or array-like), not {}'.format(
            name, type(x).__name__)) from None


def is_scalar(v):
    """A Python or NumPy scalar (kept as a scalar so NumPy's weak-scalar
    promotion applies: ``float16_array * 2.0`` stays float16)."""
    cdef type t = type(v)
    if t is float or t is int or t is bool:
        return True
    if t is NPA or isinstance(v, Array):
        return False
    return isinstance(v, _SCALAR_TYPES)


def is_int(v):
    """A Python or NumPy integer, not a bool."""
    if type(v) is int:
        return True
    return isinstance(v, (numbers.Integral, numpy.integer)) and not isinstance(
        v, (bool, numpy.bool_))


INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def int_arg(v, name, op=None):
    """``v`` as a Python int; TypeError naming the argument otherwise, and
    DimensionError when it does not fit in int64 (what NumPy computes in)."""
    if not is_int(v):
        raise TypeError('{} must be an int, not {}'.format(_named(name, op),
                                                            type(v).__name__))
    return fits_int64(int(v), name, op)


def fits_int64(v, name, op=None):
    """Python int ``v``, unless it is beyond int64: a DimensionError naming
    the argument instead of NumPy's OverflowError."""
    if not INT64_MIN <= v <= INT64_MAX:
        raise DimensionError('{} {} is out of the int64 range'.format(
            _named(name, op), v))
    return v


def _memory_bytes():
    try:
        return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    except (AttributeError, ValueError, OSError):
        return numpy.iinfo(numpy.intp).max


_SURELY_AVAILABLE = 1 << 26  # bytes


def check_result_size(shape, dtype, op, what='the result'):
    """DimensionError when an array of ``shape`` and ``dtype`` could not be
    made (more bytes than this machine has), checked before allocating."""
    n = 1
    for d in shape:
        n *= int(d)
    nbytes = n * numpy.dtype(dtype).itemsize
    # (the machine is only asked about sizes that could exceed it: a
    # sysconf call costs as much as a small op)
    if nbytes > _SURELY_AVAILABLE and nbytes > _memory_bytes():
        raise DimensionError('{}: {} would have shape {} ({} bytes), more than this '
                             "machine's memory".format(op, what, tuple(shape), nbytes))


def normalize_axes(axis, ndim, name='axis', op=None):
    """``axis`` (None, int or sequence) as a sorted tuple of axes in [0, ndim)."""
    if axis is None:  # (no name to build: nothing can be wrong)
        return _normalize_axes(axis, ndim)
    return _normalize_axes(axis, ndim, name if op is None else _named(name, op))


def normalize_axis(axis, ndim, name='axis', op=None):
    """One axis in [0, ndim); DimensionError names it when out of range."""
    if type(axis) is int and -ndim <= axis < ndim:
        return axis % ndim
    name = _named(name, op)
    if isinstance(axis, numpy.ndarray) and axis.ndim == 0 and axis.dtype.kind in 'iu':
        axis = int(axis)  # a 0-d integer array is an index, as in NumPy
    if isinstance(axis, bool) or not isinstance(axis, (int, numpy.integer)):
        raise TypeError('{} must be an int, not {}'.format(name, type(axis).__name__))
    if not -ndim <= axis < ndim:
        raise DimensionError('{} {} is out of range for an array with {} '
                             'dimensions'.format(name, axis, ndim))
    return int(axis) % ndim


cdef object _FLOAT32 = numpy.dtype(numpy.float32), _FLOAT64 = numpy.dtype(numpy.float64)


def compute_dtype(*dtypes):
    """The float dtype to compute in: the common float type of ``dtypes``,
    at least float32 (float16 sums, logs and BLAS products lose digits or do
    not exist); results are cast back."""
    if len(dtypes) == 1 and (dtypes[0] is _FLOAT32 or dtypes[0] is _FLOAT64):
        return dtypes[0]  # (result_type's answer, without its 0.8 us)
    return numpy.result_type(numpy.float32, *dtypes)


def result_dtype(*values):
    """The dtype of an op's result on ``values`` (xgrad arrays and Python
    scalars, as ``operands`` returns them): ChainerX's promotion, decided in
    xgrad/_dtypes.pyx (docs/dtype_promotion.md)."""
    return _dtypes.result_type(*values)


def promoted_float(dtype):
    """The dtype of a math function of ``dtype`` (ChainerX's rule: floats
    stay, bool and ints give float32; see xgrad/_dtypes.pyx)."""
    return _dtypes.float_result_type(dtype)


cdef bint _is_bool_value(object v):
    """``isinstance(v, (bool, numpy.bool_)) or v.dtype == numpy.bool_``, with
    NumPy dtypes asked their kind (a dtype compared with a type converts it)."""
    cdef type t = type(v)
    if t is bool or isinstance(v, numpy.bool_):
        return True
    if t is float or t is int:
        return False
    d = (<Array>v)._data.dtype if isinstance(v, Array) else getattr(v, 'dtype', None)
    if isinstance(d, numpy.dtype):
        return d.kind == 'b'
    return d == numpy.bool_


def promoted(op, values, float_result=False, takes_bool=True):
    """``values`` (as ``operands`` returns them) promoted by ChainerX's rule
    (xgrad/_dtypes.pyx): arrays cast to the result dtype, scalars made to
    keep it; the result dtype is float for ``float_result`` ops. DtypeError
    for a bool operand unless the op ``takes_bool``."""
    if not takes_bool and any(_is_bool_value(v) for v in values):
        raise DtypeError('{}: bool operands are not allowed in arithmetic (ChainerX)'
                         .format(op))
    dtype = (_dtypes.float_result_type if float_result else _dtypes.result_type)(*values)
    return [(v if v.dtype == dtype else v.astype(dtype)) if isinstance(v, Array)
            else promoted_scalar(op, v, dtype) for v in values]


def promoted_scalar(op, scalar, dtype):
    """``scalar`` made to keep ``dtype`` (``_dtypes.scalar_of``); DtypeError
    for a Python int beyond every integer dtype, as the Cython binary ops
    (xgrad/_ops/elementwise.pyx ``_with_scalar``)."""
    try:
        return _dtypes.scalar_of(scalar, dtype)
    except OverflowError:
        raise DtypeError('{}: a Python int operand does not fit the operand dtypes {} '
                         'and int: {}'.format(op, numpy.dtype(dtype).name, scalar)) from None


def require_float(x, op, name='x'):
    """DtypeError unless ``x`` has a float dtype (ops only defined on reals)."""
    if x.dtype.kind != 'f':
        raise DtypeError('{}: {} must have a float dtype, not {}'.format(
            op, name, x.dtype))


def require_dtype_kind(x, kinds, op, name='x'):
    if x.dtype.kind not in kinds:
        raise DtypeError('{}: {} has dtype {}, which {} does not take'.format(
            op, name, x.dtype, op))


def same_device(arrays, op):
    cdef object first = None
    for a in arrays:
        if a is None:
            continue
        if first is None:
            first = a
        elif isinstance(a, Array) and isinstance(first, Array):
            if (<Array>a)._device is not (<Array>first)._device:
                break
        elif a.device is not first.device:
            break
    else:
        return
    arrays = [a for a in arrays if a is not None]
    for a in arrays[1:]:
        if a.device is not arrays[0].device:
            raise DeviceError('{}: operands are on different devices: {} and {}'.format(
                op, arrays[0].device.name, a.device.name))


def apply(op, *inputs):
    """Apply ``op`` (a PyOp instance) to xgrad arrays; one output is returned
    bare, several as a tuple."""
    cdef tuple outs = _apply(op, inputs)
    return outs[0] if len(outs) == 1 else outs


def wrap(raw, like):
    """A constant xgrad array holding ``raw`` on ``like``'s device."""
    raw = array_result(raw)
    device = like.device
    if type(raw) is NPA and device.is_native:
        return _wrap(raw, device)
    return _array_of(raw, device)


def scope(like):
    """A context manager making ``like``'s GPU CuPy's current device (a
    no-op for native devices), for raw work outside an op's forward."""
    return like.device.scope()


_NUMPY_MODULES = frozenset(['numpy', 'numpy.linalg'])


def in_module(compute, xp):
    """``compute`` for raw data of array module ``xp``: for CuPy, a NumPy
    ufunc or function becomes CuPy's of the same name, called directly (the
    op library does not lean on NumPy's dispatch to reach CuPy)."""
    if xp is numpy or not (isinstance(compute, numpy.ufunc)
                           or getattr(compute, '__module__', None) in _NUMPY_MODULES):
        return compute
    if compute.__module__ == 'numpy.linalg':
        xp = xp.linalg
    return getattr(xp, compute.__name__, compute)


def constant(like, compute, *args, **kwargs):
    """``compute(*args, **kwargs)`` on raw data of ``like``'s device, as a
    constant there: an op without a gradient. On a GPU it runs with that GPU
    current (CuPy launches kernels and allocates on the current device), and
    a NumPy function is CuPy's (see in_module)."""
    device = like.device
    if device.is_native:
        r = compute(*args, **kwargs)
        if type(r) is NPA:
            return _wrap(r, device)
        return _array_of(array_result(r), device)
    compute = in_module(compute, device.xp)
    with device.scope():
        return wrap(compute(*args, **kwargs), like)


def operands(op, *values, names=None):
    """The array operands among ``values`` as xgrad arrays, and ``values``
    with scalars kept as Python scalars (NumPy's weak-scalar promotion) and
    array-likes converted. At least one operand becomes an array. ``names``:
    the arguments' names for errors (default x1, x2, ...)."""
    like = None
    for v in values:
        if isinstance(v, Array):
            like = v
            break
    out = []
    for i, v in enumerate(values):
        if is_scalar(v) and not (like is None and i == 0):
            out.append(v.item() if isinstance(v, numpy.generic) else v)
        else:
            v = as_array(v, names[i] if names else 'x{}'.format(i + 1), like)
            like = v if like is None else like
            out.append(v)
    arrays = [v for v in out if isinstance(v, Array)]
    same_device(arrays, op)
    return arrays, out


def broadcastable(shapes):
    """Whether ``shapes`` (tuples of ints) broadcast together, NumPy's rule:
    ``numpy.broadcast_shapes`` without its Python set-up and empty arrays."""
    cdef Py_ssize_t ndim = 0, i, k, n
    cdef tuple s
    for shape in shapes:
        if len(shape) > ndim:
            ndim = len(shape)
    for i in range(1, ndim + 1):
        n = 1
        for shape in shapes:
            s = <tuple>shape if type(shape) is tuple else tuple(shape)
            if len(s) < i:
                continue
            k = s[len(s) - i]
            if k == 1 or k == n:
                continue
            if n != 1:
                return False
            n = k
    return True


def check_broadcast(op, *values):
    """DimensionError naming the shapes when ``values`` do not broadcast."""
    shapes = [(<Array>v)._data.shape if isinstance(v, Array) else
              () if _is_host_value(v) and type(v) is not NPA else
              v.shape if hasattr(v, 'shape') else numpy.shape(v) for v in values]
    if not broadcastable(shapes):
        raise DimensionError('{}: operands with shapes {} cannot be broadcast '
                             'together'.format(op, ' and '.join(map(str, shapes))))


def same_dtype_ufunc(ufunc, x1, x2, str kinds):
    """``ufunc(x1, x2)`` as a constant, answered at once in the common case
    of an op without a gradient: two xgrad arrays with NumPy data on one
    device and one dtype, of a kind in ``kinds``, which NumPy computes in that
    dtype as ChainerX's promotion would. None in every other case (or when
    NumPy refuses the operands): the caller then takes its general path,
    which decides the dtype and raises the right errors."""
    if not (isinstance(x1, Array) and isinstance(x2, Array)):
        return None
    cdef Array a = <Array>x1
    cdef Array b = <Array>x2
    if a._device is not b._device or type(a._data) is not NPA or type(b._data) is not NPA:
        return None
    dtype = a._data.dtype
    if dtype is not b._data.dtype or dtype.kind not in kinds:
        return None
    try:
        r = ufunc(a._data, b._data)
    except (ValueError, TypeError):
        return None
    if type(r) is not NPA:  # a NumPy scalar, from 0-d operands
        r = numpy.asarray(r)
    return _wrap(r, a._device)


def constant_result(op, ufunc, values):
    """``ufunc`` on ``values`` (as ``operands`` returns them) as a constant on
    the first array's device: the forward of an op without a gradient."""
    like = None
    raws = []
    for v in values:
        if isinstance(v, Array):
            like = v if like is None else like
            raws.append((<Array>v)._data)
        else:
            raws.append(v)
    return constant(like, checked_ufunc, op, ufunc, *raws)


def checked_ufunc(op, ufunc, *raw):
    """``ufunc(*raw)``, with NumPy's dtype and shape failures as xgrad errors
    (operands that do not broadcast: the DimensionError of check_broadcast,
    whatever else NumPy finds wrong; checked after a failure only)."""
    xp = _module_of(raw)
    if xp is not NUMPY:
        ufunc = in_module(ufunc, xp)
    try:
        return ufunc(*raw)
    except ValueError:
        check_broadcast(op, *raw)
        raise
    except TypeError as e:
        check_broadcast(op, *raw)
        raise DtypeError('{}: {}'.format(op, e)) from None
    except OverflowError as e:  # a Python int beyond the operands' dtype
        check_broadcast(op, *raw)
        raise DtypeError('{}: a Python int operand does not fit the operand dtype: '
                         '{}'.format(op, e)) from None
