# cython: language_level=3
"""Reductions and their adjoint, broadcasting: sum, mean, sum_to, broadcast_to.

``sum_to`` (reduce a broadcast gradient back to an operand's shape) and
``broadcast_to`` are each other's gradient, which closes the double-backprop
loop for every binary op with broadcasting.
"""

import operator

import numpy

from xgrad._array cimport ndarray
from xgrad._function_node cimport apply1
from xgrad._ops._op cimport Op
from xgrad._dtypes cimport math_dtype
from xgrad._ops.elementwise cimport as_array, as_result, on_gpu, raw_module
from xgrad._backend.native_kernels cimport (sum_to as native_sum_to, broadcast_view, sum_all,
                                            sum_axes)
from xgrad._errors import DimensionError, DtypeError, describe
from xgrad._backend import cuda

cdef object _add_reduce(x, axes, bint keepdims):
    """add.reduce of the array module of ``x`` (CuPy's on a GPU)."""
    return raw_module(x).add.reduce(x, axis=axes, keepdims=keepdims)


def _gpu_sum_to(x, shape):
    """Our broadcast-reduction kernel."""
    return cuda.kernels().sum_to(cuda.cupy(), x, shape)


cdef list _ALL_AXES = [tuple(range(n)) for n in range(33)]


cdef tuple normalize_axes(object axis, Py_ssize_t ndim, str name='axis'):
    """``axis`` (None, int or sequence) as a sorted tuple of non-negative axes."""
    cdef list axes
    if axis is None:
        return _ALL_AXES[ndim] if ndim < 33 else tuple(range(ndim))
    items = (axis,) if isinstance(axis, (int, numpy.integer)) else axis
    try:
        items = tuple(items)
    except TypeError:
        raise TypeError('{} must be None, an int or a tuple of ints, not {}'.format(
            name, type(axis).__name__)) from None
    axes = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, numpy.integer)):
            raise TypeError('{} must hold ints, not {}'.format(name, type(a).__name__))
        if not -ndim <= a < ndim:
            raise DimensionError('{} {} is out of range for an array with {} '
                                 'dimensions'.format(name, a, ndim))
        a = int(a) % ndim if ndim else 0
        if a in axes:
            raise DimensionError('{} {} is repeated in {}'.format(name, a, axis))
        axes.append(a)
    return tuple(sorted(axes))


cdef object _keepdims_shape(tuple shape, tuple axes):
    return tuple([1 if i in axes else n for i, n in enumerate(shape)])


cdef object _native_sum(object x, tuple axes, bint keepdims, double divisor=1):
    """The native sum (float32 accumulated in double, threads on large
    arrays; divided by ``divisor``) when every axis of a float32/64 array
    goes (sum_all), or leading axes and trailing planes around kept ones
    (sum_axes: a global average pool); None otherwise."""
    if len(axes) != x.ndim:
        y = sum_axes(x, axes, divisor)
        if y is not None and keepdims:
            y = y.reshape(_keepdims_shape(x.shape, axes))
        return y
    y = sum_all(x, divisor)
    if y is not None and keepdims:
        y = y.reshape((1,) * x.ndim)
    return y


cdef class Sum(Op):
    op_name = 'sum'
    cdef tuple axes
    cdef bint keepdims
    cdef tuple in_shape

    cpdef forward(self, inputs):
        x = inputs[0]
        self.in_shape = x.shape
        if x.dtype.kind in 'fc':
            y = _native_sum(x, self.axes, self.keepdims)
            if y is not None:
                return (y,)
            # add.reduce is sum() without NumPy's Python-level wrapper; axis
            # None takes its contiguous fast path when every axis goes.
            axes = None if len(self.axes) == x.ndim else self.axes
            return (as_result(_add_reduce(x, axes, self.keepdims)),)
        # ChainerX sums bool and ints (uint8 too) into int64.
        return (as_result(x.sum(axis=self.axes, keepdims=self.keepdims,
                                dtype=numpy.int64 if x.dtype.kind in 'biu' else None)),)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        gy = gys[0]
        # A 0-d gradient (every axis summed) broadcasts as it is.
        if not self.keepdims and len(self.axes) != len(self.in_shape):
            gy = xp.reshape(gy, _keepdims_shape(self.in_shape, self.axes))
        return (xp.broadcast_to(gy, self.in_shape),)


cdef class Mean(Op):
    op_name = 'mean'
    cdef tuple axes
    cdef bint keepdims
    cdef tuple in_shape
    cdef Py_ssize_t count

    cpdef forward(self, inputs):
        x = inputs[0]
        self.in_shape = x.shape
        self.count = 1
        for a in self.axes:
            self.count *= x.shape[a]
        if self.count:
            y = _native_sum(x, self.axes, self.keepdims, self.count)
            if y is not None:
                return (y,)
        if self.count and (x.dtype == numpy.float32 or x.dtype == numpy.float64):
            y = as_result(_add_reduce(x, self.axes, self.keepdims))
            y /= self.count
            return (y,)
        return (as_result(x.mean(axis=self.axes, keepdims=self.keepdims)),)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        gy = gys[0] * (1.0 / self.count) if self.count else gys[0]
        # A 0-d gradient (every axis summed) broadcasts as it is.
        if not self.keepdims and len(self.axes) != len(self.in_shape):
            gy = xp.reshape(gy, _keepdims_shape(self.in_shape, self.axes))
        return (xp.broadcast_to(gy, self.in_shape),)


cdef class SumTo(Op):
    op_name = 'sum_to'
    cdef tuple shape
    cdef tuple in_shape

    cpdef forward(self, inputs):
        self.in_shape = inputs[0].shape
        x = inputs[0]
        if on_gpu(x):
            return (_gpu_sum_to(x, self.shape),)
        return (as_result(native_sum_to(x, self.shape)),)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (xp.broadcast_to(gys[0], self.in_shape),)


cdef class BroadcastTo(Op):
    op_name = 'broadcast_to'
    cdef tuple shape
    cdef tuple in_shape

    cpdef forward(self, inputs):
        self.in_shape = inputs[0].shape
        try:
            if on_gpu(inputs[0]):
                return (cuda.cupy().broadcast_to(inputs[0], self.shape),)
            return (broadcast_view(inputs[0], self.shape),)
        except ValueError:
            raise DimensionError('broadcast_to: shape {} cannot be broadcast to {}'
                                 .format(self.in_shape, self.shape)) from None

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (xp.sum_to(gys[0], self.in_shape),)


_INT64_MIN = int(numpy.iinfo(numpy.int64).min)
_INT64_MAX = int(numpy.iinfo(numpy.int64).max)


cdef tuple as_shape(object shape, str op, str name='shape'):
    """``shape``, an int or a sequence of ints (what ``operator.index``
    takes, as NumPy: not floats, which int() would have cut), as a tuple of
    Python ints; TypeError naming ``op``, the argument and what it got."""
    cdef list out = []
    try:
        if isinstance(shape, (bool, numpy.bool_)):
            raise TypeError(shape)
        if not isinstance(shape, (tuple, list)):
            try:
                out.append(operator.index(shape))  # (an int, or a 0-d integer array)
            except (TypeError, DimensionError):
                pass
        if not out:
            for n in shape:
                if isinstance(n, (bool, numpy.bool_)):
                    raise TypeError(n)
                out.append(operator.index(n))
    except (TypeError, DimensionError):
        raise TypeError('{}: {} must be an int or a sequence of ints, not {}'.format(
            op, name, describe(shape))) from None
    for n in out:
        if not _INT64_MIN <= n <= _INT64_MAX:
            raise DimensionError('{}: {} {} has a length out of the int64 range'.format(
                op, name, tuple(out)))
    return tuple(out)


cdef bint _reduces_to(tuple src, tuple dst):
    """Whether broadcasting ``dst`` gives ``src`` (so ``src`` sums down to it)."""
    cdef Py_ssize_t i, lead = len(src) - len(dst)
    if lead < 0:
        return False
    for i in range(len(dst)):
        if dst[i] != 1 and dst[i] != src[lead + i]:
            return False
    return True


def sum(a, axis=None, keepdims=False):
    """Sum over ``axis`` (None: all axes)."""
    cdef ndarray x = as_array(a, 'a')
    cdef Sum op = Sum.__new__(Sum)
    op.axes = normalize_axes(axis, x._data.ndim)
    op.keepdims = keepdims
    return apply1(op, x)


def mean(a, axis=None, keepdims=False):
    """Arithmetic mean over ``axis`` (None: all axes); bool and int arrays
    give float32 (ChainerX's rule for math functions)."""
    cdef ndarray x = as_array(a, 'a')
    d = math_dtype(x.dtype)
    if d is not x.dtype:
        x = x.astype(d)
    cdef Mean op = Mean.__new__(Mean)
    op.axes = normalize_axes(axis, x._data.ndim)
    op.keepdims = keepdims
    return apply1(op, x)


def sum_to(a, shape):
    """Sum ``a`` down to ``shape``, the reverse of broadcasting to ``a.shape``."""
    cdef ndarray x = as_array(a, 'a')
    cdef SumTo op
    shape = as_shape(shape, 'sum_to')
    if x._data.shape == shape:
        return x
    if not _reduces_to(x._data.shape, shape):
        raise DimensionError('sum_to: shape {} cannot be reduced to {}'.format(
            x._data.shape, shape))
    op = SumTo.__new__(SumTo)
    op.shape = shape
    return apply1(op, x)


def broadcast_to(array, shape):
    """A read-only broadcast view of ``array`` with ``shape``."""
    cdef ndarray x = as_array(array, 'array')
    cdef BroadcastTo op
    shape = as_shape(shape, 'broadcast_to')
    if x._data.shape == shape:
        return x.view()
    op = BroadcastTo.__new__(BroadcastTo)
    op.shape = shape
    return apply1(op, x)


def _normalize_axes(axis, ndim, name='axis'):
    """Python access to ``normalize_axes`` for the plain-Python op modules."""
    return normalize_axes(axis, ndim, name)


# ---------------------------------------------------------------------------
# Registry

from xgrad._ops.registry import register, OpInfo, Sample, INT_DTYPES, BOOL

_REDUCTION_SAMPLES = (
    Sample((2, 3)), Sample((2, 3), axis=0), Sample((2, 3), axis=-1, keepdims=True),
    Sample((2, 3, 2), axis=(0, 2)), Sample((2, 3, 2), axis=(-1, 0), keepdims=True),
    Sample(()), Sample((0, 3), axis=1))

register(OpInfo('sum', sum, ref=numpy.sum, samples=_REDUCTION_SAMPLES + (
    Sample((0, 3), axis=0),), int_dtypes=INT_DTYPES + (BOOL,), promotion='int64_sum'))
register(OpInfo('mean', mean, ref=numpy.mean, samples=_REDUCTION_SAMPLES,
                int_dtypes=INT_DTYPES + (BOOL,), promotion='float'))
register(OpInfo('broadcast_to', broadcast_to, ref=numpy.broadcast_to, samples=(
    Sample((3,), shape=(2, 3)), Sample((2, 1), shape=(2, 3)), Sample((), shape=(2, 3)),
    Sample((1, 3), shape=(2, 2, 3)), Sample((3,), shape=(0, 3))),
    int_dtypes=INT_DTYPES + (BOOL,)))
