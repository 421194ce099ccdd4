"""Argument handling shared by the plain-Python op modules: turning inputs
into xgrad arrays, checking axes and dtypes, applying an op. Each check
raises the xgrad error class ChainerX raises, naming the argument at fault
(and the op, when ``op`` is given: ``'var: axis 5 is out of range ...'``)."""

import numbers

import numpy

from xgrad import _core
from xgrad._backend import cuda
from xgrad._backend.cuda import is_device_array
from xgrad._errors import DeviceError, DimensionError, DtypeError, IndexError  # NOQA
from xgrad._ops.creation import array
from xgrad._ops.reduction import _normalize_axes

ndarray = _core.ndarray


raw = _core._raw_data


def array_result(r):
    """A raw result as an array of its own backend: NumPy scalars (what NumPy
    gives for 0-d operations) and Python values become NumPy arrays, device
    (CuPy) arrays pass as they are (``numpy.asarray`` would refuse them)."""
    if isinstance(r, numpy.ndarray) or is_device_array(r):
        return r
    return numpy.asarray(r)


def on_device_of(ref, a):
    """Host data ``a`` (index arrays, masks; tuples of them) moved to where
    raw ``ref`` lives: the GPU for CuPy data, nowhere for NumPy data."""
    return cuda.device_key(a) if cuda.on_gpu(ref) else a


def module_of(r):
    """NumPy or CuPy: the array module of raw data ``r``."""
    return cuda.cupy() if cuda.on_gpu(r) else numpy


def _named(name, op):
    return name if op is None else '{}: {}'.format(op, name)


def as_array(x, name, like=None, op=None):
    """An xgrad array for argument ``name``: xgrad arrays pass through, NumPy
    arrays, Python scalars and (nested) sequences become constants on
    ``like``'s device."""
    if isinstance(x, ndarray):
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
    return isinstance(v, (numbers.Number, numpy.generic)) and not isinstance(v, ndarray)


def is_int(v):
    """A Python or NumPy integer, not a bool."""
    return isinstance(v, (numbers.Integral, numpy.integer)) and not isinstance(
        v, (bool, numpy.bool_))


def int_arg(v, name, op=None):
    """``v`` as a Python int; TypeError naming the argument otherwise."""
    if not is_int(v):
        raise TypeError('{} must be an int, not {}'.format(_named(name, op),
                                                            type(v).__name__))
    return int(v)


def normalize_axes(axis, ndim, name='axis', op=None):
    """``axis`` (None, int or sequence) as a sorted tuple of axes in [0, ndim)."""
    return _normalize_axes(axis, ndim, _named(name, op))


def normalize_axis(axis, ndim, name='axis', op=None):
    """One axis in [0, ndim); DimensionError names it when out of range."""
    name = _named(name, op)
    if isinstance(axis, numpy.ndarray) and axis.ndim == 0 and axis.dtype.kind in 'iu':
        axis = int(axis)  # a 0-d integer array is an index, as in NumPy
    if isinstance(axis, bool) or not isinstance(axis, (int, numpy.integer)):
        raise TypeError('{} must be an int, not {}'.format(name, type(axis).__name__))
    if not -ndim <= axis < ndim:
        raise DimensionError('{} {} is out of range for an array with {} '
                             'dimensions'.format(name, axis, ndim))
    return int(axis) % ndim


def compute_dtype(*dtypes):
    """The float dtype to compute in: the common float type of ``dtypes``,
    at least float32 (float16 sums, logs and BLAS products lose digits or do
    not exist); results are cast back."""
    return numpy.result_type(numpy.float32, *dtypes)


def result_dtype(*values):
    """The dtype of an op's result on ``values`` (xgrad arrays and Python
    scalars, as ``operands`` returns them). The one place new ops ask; it
    follows NumPy's ``result_type`` for now."""
    return numpy.result_type(*[v.dtype if isinstance(v, ndarray) else v for v in values])


def promoted_float(dtype):
    """The float dtype NumPy's math ufuncs give ``dtype`` (int8 -> float16,
    int64 -> float64, floats unchanged)."""
    return numpy.promote_types(dtype, numpy.float16)


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
    arrays = [a for a in arrays if a is not None]
    for a in arrays[1:]:
        if a.device is not arrays[0].device:
            raise DeviceError('{}: operands are on different devices: {} and {}'.format(
                op, arrays[0].device.name, a.device.name))


def apply(op, *inputs):
    """Apply ``op`` (a PyOp instance) to xgrad arrays; one output is returned
    bare, several as a tuple."""
    outs = _core.apply(op, inputs)
    return outs[0] if len(outs) == 1 else outs


def wrap(raw, like):
    """A constant xgrad array holding ``raw`` on ``like``'s device."""
    return _core._array_of(array_result(raw), like.device)


def operands(op, *values, names=None):
    """The array operands among ``values`` as xgrad arrays, and ``values``
    with scalars kept as Python scalars (NumPy's weak-scalar promotion) and
    array-likes converted. At least one operand becomes an array. ``names``:
    the arguments' names for errors (default x1, x2, ...)."""
    like = next((v for v in values if isinstance(v, ndarray)), None)
    out = []
    for i, v in enumerate(values):
        if is_scalar(v) and not (like is None and i == 0):
            out.append(v.item() if isinstance(v, numpy.generic) else v)
        else:
            v = as_array(v, names[i] if names else 'x{}'.format(i + 1), like)
            like = v if like is None else like
            out.append(v)
    arrays = [v for v in out if isinstance(v, ndarray)]
    same_device(arrays, op)
    return arrays, out


def check_broadcast(op, *values):
    """DimensionError naming the shapes when ``values`` do not broadcast."""
    shapes = [numpy.shape(v) if not isinstance(v, ndarray) else v.shape for v in values]
    try:
        numpy.broadcast_shapes(*shapes)
    except ValueError:
        raise DimensionError('{}: operands with shapes {} cannot be broadcast '
                             'together'.format(op, ' and '.join(map(str, shapes)))) from None


def constant_result(op, ufunc, values):
    """``ufunc`` on ``values`` (as ``operands`` returns them) as a constant on
    the first array's device: the forward of an op without a gradient."""
    arrays = [v for v in values if isinstance(v, ndarray)]
    result = checked_ufunc(op, ufunc, *[raw(v) if isinstance(v, ndarray) else v
                                        for v in values])
    return wrap(result, arrays[0])


def checked_ufunc(op, ufunc, *raw):
    """``ufunc(*raw)``, with NumPy's dtype and shape failures as xgrad errors."""
    check_broadcast(op, *raw)
    try:
        return ufunc(*raw)
    except TypeError as e:
        raise DtypeError('{}: {}'.format(op, e)) from None
