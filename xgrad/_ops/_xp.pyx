# cython: language_level=3
"""The two array namespaces that gradient formulas are written against.

``numpy_ns`` works on raw NumPy arrays (the engine's fast path, nothing is
recorded); ``xgrad_ns`` works on xgrad arrays (every call is a recorded op,
which is what makes double backprop work). Both offer the same functions.
"""

import functools
import sys

import numpy
cimport numpy as cnp

from xgrad import _device as _device_module

from xgrad._core import _array_of
from xgrad._backend import host_gemm, scatter_kernels
from xgrad._backend.native_kernels import (
    broadcast_view, cast_half as _cast_half, negative as _negative, select as _select,
    sum_to as _native_sum_to, sigmoid_forward as _sigmoid, relu_forward as _relu)


def _sum_to(a, shape):
    """Sum ``a`` down to ``shape`` (the reverse of broadcasting)."""
    return _native_sum_to(a, tuple(shape))


def _broadcast_to(a, shape):
    return broadcast_view(a, tuple(shape))


def _reshape(a, shape):
    return a.reshape(shape)


def _swapaxes(a, axis1, axis2):
    return a.swapaxes(axis1, axis2)


def _transpose(a, axes=None):
    return a.transpose(axes)


cnp.import_array()

cdef object _NDARRAY = numpy.ndarray
cdef object _np_matmul = numpy.matmul


# Products of at most this many multiply-adds stay on NumPy's BLAS, which
# runs them on the calling thread: their set-up is what counts there.
# Larger float32 ones ask host_gemm which GEMM runs them (with more than one
# thread: xgrad's, one worker pool).
cdef Py_ssize_t SMALL_PRODUCT = host_gemm.SMALL_PRODUCT


cdef Py_ssize_t _multiply_adds(cnp.ndarray a, cnp.ndarray b):
    """m * n * k times the batch of the product a @ b (0 when either
    operand has fewer than two axes: NumPy's vector cases)."""
    cdef int na = cnp.PyArray_NDIM(a), nb = cnp.PyArray_NDIM(b), i
    if na < 2 or nb < 2:
        return 0
    cdef Py_ssize_t count = a.shape[na - 2] * a.shape[na - 1] * b.shape[nb - 1]
    for i in range(na - 2):
        count *= a.shape[i]
    if na == 2:
        for i in range(nb - 2):
            count *= b.shape[i]
    return count


def matmul_raw(a, b):
    """``numpy.matmul`` of raw arrays; two 2-d float arrays of one dtype go
    through the ``ndarray.dot`` method instead: the same BLAS call and
    result, without the generalized ufunc's set-up (1.4 us where matmul
    takes 2.9 on a 16x32 @ 32x32 product). Large float32 products go
    through host_gemm (see SMALL_PRODUCT)."""
    cdef int t
    cdef cnp.npy_intp* da
    if type(a) is _NDARRAY and type(b) is _NDARRAY:
        # Read through NumPy's C API: as attribute reads, these checks cost
        # as much as the BLAS call on a 16x32 product.
        t = cnp.PyArray_TYPE(<cnp.ndarray>a)
        if (cnp.PyArray_NDIM(<cnp.ndarray>a) == 2 and cnp.PyArray_NDIM(<cnp.ndarray>b) == 2
                and cnp.PyArray_DESCR(<cnp.ndarray>a) is cnp.PyArray_DESCR(<cnp.ndarray>b)
                and (t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE or t == cnp.NPY_LONGDOUBLE)):
            da = cnp.PyArray_DIMS(<cnp.ndarray>a)
            if (t == cnp.NPY_FLOAT and da[0] * da[1] * cnp.PyArray_DIMS(<cnp.ndarray>b)[1]
                    > SMALL_PRODUCT):
                return host_gemm.matmul(a, b)
            return cnp.PyArray_MatrixProduct(a, b)  # what a.dot(b) calls
        if (t == cnp.NPY_FLOAT and cnp.PyArray_TYPE(<cnp.ndarray>b) == cnp.NPY_FLOAT
                and _multiply_adds(a, b) > SMALL_PRODUCT):
            return host_gemm.matmul(a, b)
    return _np_matmul(a, b)


def _split(a, indices_or_sections, axis=0):
    """``numpy.split`` at explicit indices by basic slicing: the same views
    (array_split's swapaxes round trip and Python-level set-up cost more than
    the copy-free split of a small gradient); sections go to NumPy."""
    if type(a) is not _NDARRAY or not isinstance(indices_or_sections, (list, tuple)):
        return numpy.split(a, indices_or_sections, axis)
    axis = axis % a.ndim if -a.ndim <= axis < a.ndim else axis
    if not 0 <= axis < a.ndim:
        return numpy.split(a, indices_or_sections, axis)
    lead = (slice(None),) * axis
    pieces = []
    start = 0
    for end in indices_or_sections:
        pieces.append(a[lead + (slice(start, end),)])
        start = end
    pieces.append(a[lead + (slice(start, None),)])
    return pieces


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    """``numpy.sum``; for an ndarray its method (the same add.reduce, without
    the Python-level wrapper)."""
    if type(a) is _NDARRAY:
        return a.sum(axis, dtype, out, keepdims, **kwargs)
    return numpy.sum(a, axis, dtype, out, keepdims=keepdims, **kwargs)


def cast(a, dtype):
    """``a`` as ``dtype`` (itself when it has that dtype already; float32
    and float16 on the host by F16C where the CPU path has it)."""
    if a.dtype == dtype:
        return a
    if type(a) is _NDARRAY:
        y = _cast_half(a, dtype)
        if y is not None:
            return y
    return a.astype(dtype)


def _where(condition, x, y):
    """numpy.where; on the pool (native_kernels.select) for a bool mask and
    float32/64 operands each of the result's shape, a row along its leading
    axes or one value (an attention mask over its scores, the gradients'
    selects)."""
    if type(condition) is _NDARRAY:
        out = _select(condition, x, y)
        if out is not None:
            return out
    return numpy.where(condition, x, y)


def _scatter(gy, key, shape):
    """Zeros of ``shape`` with ``gy`` added at ``key`` (repeats accumulate):
    one integer array indexing the first axis by scatter_kernels' row adds,
    any other key by ``add.at``."""
    rows = _first_axis_rows(key, shape)
    if rows is not None and gy.shape == rows.shape + tuple(shape[1:]):
        out = scatter_kernels.scatter_rows(gy, rows, 0, tuple(shape))
        if out is not None:
            return out
    out = numpy.zeros(shape, dtype=gy.dtype)
    numpy.add.at(out, key, gy)
    return out


cdef object _first_axis_rows(key, shape):
    """``key`` as non-negative intp row indices when it is one integer array
    (or a tuple of one) indexing the first axis of ``shape`` in bounds; else
    None."""
    if type(key) is tuple and len(<tuple>key) == 1:
        key = (<tuple>key)[0]
    if type(key) is not _NDARRAY or key.dtype.kind not in 'iu' or not shape:
        return None
    rows = key.astype(numpy.intp, copy=False)
    if rows.size and (rows.min() < -shape[0] or rows.max() >= shape[0]):
        return None  # (add.at raises the IndexError)
    return numpy.ascontiguousarray(numpy.where(rows < 0, rows + shape[0], rows))


@functools.lru_cache(maxsize=64)
def _small_tri_mask(n, m, k):
    mask = numpy.tri(n, m, k=k, dtype=bool)
    mask.flags.writeable = False
    return mask


def tri_mask(n, m=None, k=0):
    """``numpy.tri(n, m, k, dtype=bool)``; up to 4096 elements read-only and
    kept for the next call with that shape (tril/triu, forward and in
    gradient formulas, ask for the same few masks again and again)."""
    if n * (n if m is None else m) > 4096:
        return numpy.tri(n, m, k=k, dtype=bool)
    return _small_tri_mask(n, m, k)


def _triangle(a, k, lower):
    """``numpy.tril``/``numpy.triu`` (NumPy's own formula), with the mask of
    a small matrix kept for the next call: NumPy builds it each time, which
    costs more than the masking (cholesky's and qr's gradients call these
    on every backward)."""
    if type(a) is not _NDARRAY or a.ndim < 2 or a.shape[-1] * a.shape[-2] > 4096:
        return numpy.tril(a, k) if lower else numpy.triu(a, k)
    mask = tri_mask(a.shape[-2], a.shape[-1], k if lower else k - 1)
    zero = a.dtype.type(0)
    return numpy.where(mask, a, zero) if lower else numpy.where(mask, zero, a)


def _tril(a, k=0):
    return _triangle(a, k, True)


def _triu(a, k=0):
    return _triangle(a, k, False)


class _NumpyNamespace:
    """NumPy's functions under their own names, plus the few gradient
    helpers NumPy lacks (``sum_to``, ``scatter``, ``cast``, ``constant``)."""

    raw = True  # computes on raw arrays: nothing is recorded

    def __getattr__(self, name):
        # Kept on the instance: the next look-up does not come here (a
        # Python-level call per use of xp.where, xp.floor... in a formula).
        value = getattr(numpy, name)
        self.__dict__[name] = value
        return value

    sum_to = staticmethod(_sum_to)
    scatter = staticmethod(_scatter)
    exp = staticmethod(numpy.exp)
    log = staticmethod(numpy.log)
    sqrt = staticmethod(numpy.sqrt)
    matmul = staticmethod(matmul_raw)
    swapaxes = staticmethod(_swapaxes)
    transpose = staticmethod(_transpose)
    reshape = staticmethod(_reshape)
    split = staticmethod(_split)
    sum = staticmethod(_sum)
    broadcast_to = staticmethod(_broadcast_to)
    negative = staticmethod(_negative)
    multiply = staticmethod(numpy.multiply)
    power = staticmethod(numpy.power)
    sigmoid = staticmethod(_sigmoid)
    relu = staticmethod(_relu)
    tril = staticmethod(_tril)
    triu = staticmethod(_triu)
    where = staticmethod(_where)

    cast = staticmethod(cast)

    @staticmethod
    def sign(a):
        return numpy.sign(a)

    to_device = staticmethod(_device_module.transfer)

    @staticmethod
    def getitem(a, key):
        return a[key]

    @staticmethod
    def constant(raw, like):
        return raw


class _XgradNamespace:
    """xgrad's ops under their own names (recorded, so differentiable again);
    the hot ones are bound in xgrad/_ops/__init__.py once every op module is
    loaded, the rest are looked up there on first use."""

    raw = False  # every call is recorded

    def __getattr__(self, name):
        try:
            return getattr(sys.modules['xgrad._ops'], name)
        except AttributeError:
            raise AttributeError('xgrad has no op {!r} for gradient formulas'
                                 .format(name)) from None

    cast = staticmethod(cast)

    @staticmethod
    def constant(raw, like):
        return _array_of(raw, like.device)


numpy_ns = _NumpyNamespace()
_device_module.register_raw_namespace('native', numpy_ns)
xgrad_ns = _XgradNamespace()
