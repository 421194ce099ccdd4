# cython: language_level=3
"""Shape and layout ops (reshape, transpose, squeeze, expand_dims, indexing)
and the array-conversion ops (view, copy, astype, to_device).

All are linear, so each gradient is the adjoint shape change; indexing
scatters the gradient back, accumulating repeated indices.
"""

import numpy
cimport numpy as cnp

from xgrad import _device as _device_module
from xgrad._context import get_default_context
from xgrad._backend import cuda
from xgrad._backend.cuda import device_key as _device_key
from xgrad._backend.native_kernels import copy_into as _copy_into, splits as _splits

from xgrad._array cimport ndarray, _wrap
from xgrad._function_node cimport apply1, apply_to_device
from xgrad._grad_table cimport IndexedGradient
from xgrad._ops._op cimport Op
from xgrad._ops.elementwise cimport as_array, as_result, on_gpu, raw_module
from xgrad._ops.reduction cimport as_shape, normalize_axes
from xgrad._ops._xp import cast as _cast
from xgrad._dtypes import dtype_arg
from xgrad._errors import DimensionError, DtypeError, IndexError as XgradIndexError, describe


# NumPy 2.1+ says whether a reshape needs a copy (copy=False raises)
cdef bint _RESHAPE_TELLS_COPY = numpy.lib.NumpyVersion(numpy.__version__) >= '2.1.0'


cdef bint _gathers_on_the_pool(object x):
    """Whether a C-order copy of ``x`` may run on the pool: a host array,
    not C-contiguous, large enough to split (native_kernels.splits)."""
    return (type(x) is numpy.ndarray
            and not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x)  # (C: on every reshape)
            and _splits(cnp.PyArray_SIZE(<cnp.ndarray>x)))


cdef object _gathered(object x):
    """A C-contiguous copy of the host array ``x``: on the pool
    (native_kernels.copy_into), else NumPy's."""
    out = numpy.empty(x.shape, x.dtype)
    if not _copy_into(out, x):
        numpy.copyto(out, x)
    return out


cdef object _reshape_by_pool(object x, tuple shape):
    """x.reshape(shape) for a large host array that is not C-contiguous: a
    view where one exists, else a copy gathered on the pool (the heads of
    attention, (4, 128, 12, 64) to (48, 128, 64): 38 -> 20 us on two
    threads)."""
    try:
        return numpy.reshape(x, shape, copy=False)
    except ValueError:
        return _gathered(x).reshape(shape)


cdef class Reshape(Op):
    op_name = 'reshape'
    cdef tuple shape
    cdef tuple in_shape

    cpdef forward(self, inputs):
        x = inputs[0]
        self.in_shape = x.shape
        try:
            if _RESHAPE_TELLS_COPY and _gathers_on_the_pool(x):
                return (_reshape_by_pool(x, self.shape),)
            return (x.reshape(self.shape),)
        except ValueError:
            raise DimensionError('reshape: cannot reshape an array of shape {} '
                                 '(size {}) into shape {}'.format(
                                     x.shape, x.size, self.shape)) from None

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (xp.reshape(gys[0], self.in_shape),)


cdef object view_key(object key):
    """``key``, with an Ellipsis appended where it has an int for every axis:
    NumPy then returns a scalar (a copy), ChainerX a 0-d view of the same
    element; ``x[1, ...]`` is NumPy's 0-d view (writes through, as in
    Chainer's ``initializer(xp.squeeze(ws[i:i+1], axis=0))``)."""
    items = key if type(key) is tuple else (key,)
    for k in items:
        if isinstance(k, bool) or not isinstance(k, (int, numpy.integer)):
            return key
    return items + (Ellipsis,)


cdef class SizeOneAxes(Op):
    """Insert or drop axes of length one by basic indexing (``None`` inserts,
    ``0`` drops), so that the result is a view with NumPy's strides: kept axes
    keep theirs, as in numpy.squeeze; inserted axes get stride 0, as in
    numpy.atleast_2d. The gradient is a reshape back."""
    op_name = 'reshape'
    cdef tuple key
    cdef tuple in_shape

    cpdef forward(self, inputs):
        x = inputs[0]
        self.in_shape = x.shape
        return (x[view_key(self.key)],)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (xp.reshape(gys[0], self.in_shape),)


cdef object size_one_axes(ndarray x, tuple key):
    cdef SizeOneAxes op = SizeOneAxes.__new__(SizeOneAxes)
    op.key = key
    return apply1(op, x)


def _insert_axes(a, tuple key):
    """``a[key]`` for a key of ``None`` (new axis) and ``slice(None)``
    entries, recorded as a view op (atleast_2d/3d use it)."""
    return size_one_axes(as_array(a, 'a'), key)


cdef class Transpose(Op):
    op_name = 'transpose'
    cdef tuple axes

    cpdef forward(self, inputs):
        return (inputs[0].transpose(self.axes),)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        cdef list inverse = [0] * len(self.axes)
        for i, a in enumerate(self.axes):
            inverse[a] = i
        return (xp.transpose(gys[0], tuple(inverse)),)


cdef class GetItem(Op):
    op_name = 'getitem'
    cdef object key
    cdef tuple in_shape
    cdef bint basic   # key is a basic index: the raw backward is an IndexedGradient

    cpdef forward(self, inputs):
        x = inputs[0]
        self.in_shape = x.shape
        if on_gpu(x):
            self.key = _device_key(self.key)
        try:
            return (as_result(x[view_key(self.key)]),)
        except IndexError as e:  # NumPy's: out of bounds, too many indices
            raise XgradIndexError('index {!r} does not fit an array of shape {}: {}'.format(
                self.key, x.shape, e)) from None

    cdef object _backward_raw(self, tuple targets, tuple grad_outputs,
                              tuple xs, tuple ys):
        # A basic index on host data: the engine adds gy in at the key
        # (IndexedGradient), without a full array of zeros per slice.
        gy = grad_outputs[0]
        if self.basic and type(gy) is numpy.ndarray:
            return (IndexedGradient(self.key, gy),)
        return Op._backward_raw(self, targets, grad_outputs, xs, ys)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (xp.scatter(gys[0], self.key, self.in_shape),)


cdef bint _is_basic_index(key):
    """Whether ``key`` is NumPy basic indexing (ints, slices, None, ...):
    each element of the array is selected at most once."""
    items = key if type(key) is tuple else (key,)
    for k in items:
        if not (k is None or k is Ellipsis or type(k) is slice or type(k) is int):
            return False
    return True


cdef class Scatter(Op):
    """Zeros of ``shape`` plus ``gy`` at ``key``: the gradient of indexing."""
    op_name = 'scatter'
    cdef object key
    cdef tuple shape

    cpdef forward(self, inputs):
        gy = inputs[0]
        xp = raw_module(gy)
        if xp is not numpy:
            self.key = _device_key(self.key)
        if not _is_basic(self.key):  # repeats accumulate: the namespace's add.at
            return (_device_module.raw_namespace_of(xp).scatter(gy, self.key, self.shape),)
        out = xp.zeros(self.shape, dtype=gy.dtype)
        out[self.key] = gy
        return (out,)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (xp.getitem(gys[0], self.key),)


cdef class View(Op):
    op_name = 'view'

    cpdef forward(self, inputs):
        return (inputs[0].view(),)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (gys[0],)


cdef class Copy(Op):
    op_name = 'copy'

    cpdef forward(self, inputs):
        x = inputs[0]
        return (_gathered(x) if _gathers_on_the_pool(x) else x.copy(order='C'),)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (gys[0],)


cdef class AsType(Op):
    op_name = 'astype'
    cdef object dtype
    cdef object in_dtype

    cpdef forward(self, inputs):
        self.in_dtype = inputs[0].dtype
        return (_cast(inputs[0], self.dtype),)  # (float32 <-> float16 by F16C)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (xp.cast(gys[0], self.in_dtype),)


cdef class ToDevice(Op):
    op_name = 'transfer'
    cdef object source
    cdef object target
    cdef bint same_device

    cpdef forward(self, inputs):
        return (inputs[0].view() if self.same_device
                else _device_module.transfer(inputs[0], self.target),)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return (xp.to_device(gys[0], self.source),)


cdef bint _is_basic(object key):
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if not (k is None or k is Ellipsis or isinstance(k, slice)
                or (isinstance(k, (int, numpy.integer)) and not isinstance(k, bool))):
            return False
    return True


def raw_index(key):
    """``key`` with xgrad arrays replaced by their raw data (for NumPy)."""
    if isinstance(key, ndarray):
        return (<ndarray>key)._data
    if isinstance(key, tuple):
        return tuple([(<ndarray>k)._data if isinstance(k, ndarray) else k
                      for k in key])
    if isinstance(key, list):
        return numpy.asarray([raw_index(k) for k in key])
    return key


def getitem(a, key):
    """``a[key]`` with NumPy's basic and advanced indexing."""
    cdef ndarray x = as_array(a, 'a')
    cdef GetItem op = GetItem.__new__(GetItem)
    key = raw_index(key)
    if isinstance(key, numpy.ndarray) and key.dtype.kind == 'f':
        raise XgradIndexError('arrays used as indices must be of integer or boolean type')
    op.key = key
    op.basic = _is_basic_index(key)
    return apply1(op, x)


def scatter(gy, key, shape):
    cdef Scatter op = Scatter.__new__(Scatter)
    op.key = key
    op.shape = tuple(shape)
    return apply1(op, gy)


def reshape(a, newshape):
    """The same data with shape ``newshape`` (one entry may be -1)."""
    cdef ndarray x = as_array(a, 'a')
    cdef Reshape op = Reshape.__new__(Reshape)
    op.shape = as_shape(newshape, 'reshape', 'newshape')
    return apply1(op, x)


def transpose(a, axes=None):
    """Permute the axes (default: reverse them)."""
    cdef ndarray x = as_array(a, 'a')
    cdef Py_ssize_t ndim = x._data.ndim
    cdef Transpose op = Transpose.__new__(Transpose)
    if axes is None:
        op.axes = tuple(range(ndim - 1, -1, -1))
    else:
        if isinstance(axes, (int, numpy.integer)) and not isinstance(axes, bool):
            axes = (axes,)
        try:
            items = tuple(axes)
        except TypeError:
            raise TypeError('transpose: axes must be None or a sequence of ints, '
                            'not {}'.format(type(axes).__name__)) from None
        for i in items:
            if isinstance(i, (bool, numpy.bool_)) or not isinstance(
                    i, (int, numpy.integer)):
                raise TypeError('transpose: axes must be ints, not {}'.format(describe(i)))
        if len(items) != ndim:
            raise DimensionError('transpose: axes {} do not match an array with {} '
                                 'dimensions'.format(axes, ndim))
        op.axes = tuple([int(i) % ndim if -ndim <= i < ndim else -1 for i in items])
        if sorted(op.axes) != list(range(ndim)):
            raise DimensionError('transpose: axes {} are not a permutation of the '
                                 '{} dimensions'.format(axes, ndim))
    return apply1(op, x)


def swapaxes(a, axis1, axis2):
    cdef ndarray x = as_array(a, 'a')
    cdef Py_ssize_t ndim = x._data.ndim
    axes = list(range(ndim))
    i, = normalize_axes(axis1, ndim, 'axis1')
    j, = normalize_axes(axis2, ndim, 'axis2')
    axes[i], axes[j] = axes[j], axes[i]
    return transpose(x, axes)


def squeeze(a, axis=None):
    """Drop axes of length one (all of them, or those in ``axis``)."""
    cdef ndarray x = as_array(a, 'a')
    shape = x._data.shape
    if axis is None:
        axes = tuple([i for i, n in enumerate(shape) if n == 1])
    else:
        axes = normalize_axes(axis, x._data.ndim)
        for i in axes:
            if shape[i] != 1:
                raise DimensionError('squeeze: axis {} has length {}, not 1 (shape {})'
                                     .format(i, shape[i], shape))
    if not axes:
        return view(x)
    # A view that keeps the other axes' strides (a reshape would copy a
    # non-contiguous array).
    return size_one_axes(x, tuple([0 if i in axes else slice(None)
                                   for i in range(len(shape))]))


def expand_dims(a, axis):
    """Insert an axis of length one at position ``axis``."""
    cdef ndarray x = as_array(a, 'a')
    cdef Py_ssize_t ndim = x._data.ndim + 1
    if isinstance(axis, bool) or not isinstance(axis, (int, numpy.integer)):
        raise TypeError('expand_dims: axis must be an int')
    if not -ndim <= axis < ndim:
        raise DimensionError('expand_dims: axis {} is out of range for the result '
                             'with {} dimensions'.format(axis, ndim))
    axis = axis % ndim
    shape = x._data.shape
    return reshape(x, shape[:axis] + (1,) + shape[axis:])


def view(a):
    return apply1(View.__new__(View), as_array(a, 'a'))


def copy(a):
    """A C-contiguous copy (recorded: the gradient passes through)."""
    return apply1(Copy.__new__(Copy), as_array(a, 'a'))


def astype(a, dtype, copy=True):
    """Cast to ``dtype``; ``astype(a.dtype, copy=False)`` returns ``a`` itself."""
    cdef ndarray x = as_array(a, 'a')
    cdef AsType op
    dtype = dtype_arg(dtype, 'astype')
    if dtype == x._data.dtype:
        return x if not copy else apply1(Copy.__new__(Copy), x)
    op = AsType.__new__(AsType)
    op.dtype = dtype
    return apply1(op, x)


def to_device(a, device, index=None):
    """The array on ``device``, connected to ``a``: the gradient flows back."""
    cdef ndarray x = as_array(a, 'a')
    cdef ToDevice op = ToDevice.__new__(ToDevice)
    target = get_default_context().get_device(device, index)
    op.source = x._device
    op.target = target
    op.same_device = target is x._device
    return apply_to_device(op, x, target)


# ---------------------------------------------------------------------------
# Registry

from xgrad._ops.registry import register, OpInfo, Sample, FLOAT_DTYPES, INT_DTYPES, BOOL

_ALL_INTS = INT_DTYPES + (BOOL,)

register(OpInfo('reshape', reshape, ref=lambda a, newshape: numpy.reshape(a, newshape),
                samples=(Sample((2, 3), newshape=(3, 2)), Sample((2, 3), newshape=(-1,)),
                         Sample((2, 3), newshape=(1, -1, 3)), Sample((), newshape=(1, 1)),
                         Sample((1,), newshape=()), Sample((0, 3), newshape=(3, 0))),
                int_dtypes=_ALL_INTS))
register(OpInfo('transpose', transpose, ref=numpy.transpose,
                samples=(Sample((2, 3)), Sample((2, 3, 2), axes=(1, 0, 2)),
                         Sample((2, 3, 2), axes=(-1, 0, 1)), Sample(()),
                         Sample((0, 3))),
                int_dtypes=_ALL_INTS))
register(OpInfo('swapaxes', swapaxes, ref=numpy.swapaxes,
                samples=(Sample((2, 3), axis1=0, axis2=1),
                         Sample((2, 3, 2), axis1=-1, axis2=0),
                         Sample((0, 3), axis1=1, axis2=0)),
                int_dtypes=_ALL_INTS))
register(OpInfo('squeeze', squeeze, ref=numpy.squeeze,
                samples=(Sample((1, 3, 1)), Sample((1, 3, 1), axis=0),
                         Sample((1, 3, 1), axis=(0, -1)), Sample((1, 1)),
                         Sample((1, 0, 1)), Sample(())),
                int_dtypes=_ALL_INTS))
register(OpInfo('expand_dims', expand_dims, ref=numpy.expand_dims,
                samples=(Sample((2, 3), axis=0), Sample((2, 3), axis=-1),
                         Sample((2, 3), axis=1), Sample((), axis=0),
                         Sample((0, 3), axis=-3)),
                int_dtypes=_ALL_INTS))
register(OpInfo('copy', copy, ref=numpy.copy,
                samples=(Sample((2, 3)), Sample(()), Sample((0, 2))),
                int_dtypes=_ALL_INTS))


def _other_float(dtype):
    return {'float16': 'float32', 'float32': 'float64'}.get(numpy.dtype(dtype).name,
                                                            'float32')


register(OpInfo('astype', astype, ref=lambda a, dtype, copy=True: a.astype(dtype),
                samples=tuple(Sample((2, 3), dtype=d) for d in FLOAT_DTYPES) + (
                    Sample((), dtype='float64'), Sample((0, 3), dtype='float32')),
                # Differences of float16 results need a wide step (astype is linear).
                eps={numpy.dtype('float16'): 0.25}, int_dtypes=(numpy.int64, BOOL)))
