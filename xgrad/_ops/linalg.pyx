# cython: language_level=3
"""The matrix product: matmul (NumPy's rules, batched and broadcast); dot,
which needs tensordot beyond 2-d, is in contraction."""

import numpy
cimport numpy as cnp

from xgrad._array cimport ndarray
from xgrad._function_node cimport apply2
from xgrad._ops._op cimport Op
from xgrad._dtypes cimport promote_dtypes
from xgrad._ops.elementwise cimport as_array, as_result
from xgrad._errors import DimensionError, DtypeError
from xgrad._backend import cuda
from xgrad._ops._xp import matmul_raw

cnp.import_array()

cdef tuple _RETAIN_01 = (0, 1)
cdef object _NUMPY_NDARRAY = numpy.ndarray


cdef class Matmul(Op):
    """a @ b with NumPy's rules. Gradients of 2-d products set ``ta``/``tb``
    (2-d operands only): the op computes a.T @ b, a @ b.T or a.T @ b.T, so
    that double backprop records one op per product and no transposes."""
    op_name = 'matmul'
    cdef int nda, ndb
    cdef tuple shape_a, shape_b, shape_y  # only when an operand is not 2-d
    cdef object dtype_a, dtype_b
    cdef bint ta, tb

    cpdef forward(self, inputs):
        a, b = inputs
        if type(a) is _NUMPY_NDARRAY and type(b) is _NUMPY_NDARRAY:
            # Read through NumPy's C API, not as attributes (a type look-up
            # and a call each).
            self.nda = cnp.PyArray_NDIM(<cnp.ndarray>a)
            self.ndb = cnp.PyArray_NDIM(<cnp.ndarray>b)
            self.dtype_a = <object>cnp.PyArray_DESCR(<cnp.ndarray>a)
            self.dtype_b = <object>cnp.PyArray_DESCR(<cnp.ndarray>b)
        else:
            self.nda = a.ndim
            self.ndb = b.ndim
            self.dtype_a = a.dtype
            self.dtype_b = b.dtype
        if self.nda != 2 or self.ndb != 2:
            self.shape_a = a.shape
            self.shape_b = b.shape
        self._retain_in_idx = _RETAIN_01
        if self.ta:
            a = a.T
        if self.tb:
            b = b.T
        try:
            y = matmul_raw(a, b) if not cuda.on_gpu(a) else cuda.cupy().matmul(a, b)
        except ValueError:
            raise DimensionError('matmul: shapes {} and {} are not aligned'.format(
                a.shape, b.shape)) from None
        y = as_result(y)
        if self.nda != 2 or self.ndb != 2:
            self.shape_y = y.shape
        return (y,)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        a, b = xs
        gy = gys[0]
        cdef Py_ssize_t nda = self.nda, ndb = self.ndb
        out = []
        if nda == 1 and ndb == 1:
            for t in targets:
                out.append(xp.cast(gy * (b if t == 0 else a),
                                   self.dtype_a if t == 0 else self.dtype_b))
            return tuple(out)
        if nda == 2 and ndb == 2:  # no broadcasting to undo
            # y = A @ B with A = a (a.T if ta), B likewise: dA = gy @ B.T and
            # dB = A.T @ gy, transposed back where the operand was.
            for t in targets:
                if t == 0 and not self.ta:
                    g = _product(xp, gy, False, b, not self.tb)
                elif t == 0:
                    g = _product(xp, b, self.tb, gy, True)
                elif not self.tb:
                    g = _product(xp, a, not self.ta, gy, False)
                else:
                    g = _product(xp, gy, True, a, self.ta)
                out.append(xp.cast(g, self.dtype_a if t == 0 else self.dtype_b))
            return tuple(out)
        # Give 1-d operands their matrix shape back: (k,) @ (..., k, m) is
        # (1, k) @ ..., and (..., n, k) @ (k,) is ... @ (k, 1).
        if nda == 1:
            a = xp.reshape(a, (1,) + self.shape_a)
            gy = xp.reshape(gy, self.shape_y[:-1] + (1,) + self.shape_y[-1:])
        if ndb == 1:
            b = xp.reshape(b, self.shape_b + (1,))
            gy = xp.reshape(gy, self.shape_y + (1,))
        for t in targets:
            if t == 0:
                g = xp.matmul(gy, xp.swapaxes(b, -1, -2))
                g = xp.reshape(xp.sum_to(g, a.shape), self.shape_a)
                out.append(xp.cast(g, self.dtype_a))
            else:
                g = xp.matmul(xp.swapaxes(a, -1, -2), gy)
                g = xp.reshape(xp.sum_to(g, b.shape), self.shape_b)
                out.append(xp.cast(g, self.dtype_b))
        return tuple(out)


cdef object _product(xp, x, bint tx, y, bint ty):
    """op(x) @ op(y) of 2-d operands, op transposing where asked: raw on
    raw arrays, one recorded Matmul on xgrad arrays."""
    cdef Matmul op
    if xp.raw:
        return xp.matmul(x.T if tx else x, y.T if ty else y)
    op = Matmul.__new__(Matmul)
    op.ta = tx
    op.tb = ty
    return apply2(op, <ndarray>x, <ndarray>y)


cdef ndarray _check_matrix_operand(object x, str name, object like):
    cdef ndarray a = as_array(x, name, like)
    if a._data.ndim == 0:
        raise DimensionError('matmul: {} must have at least one dimension, got a '
                             '0-d array'.format(name))
    return a


def matmul(a, b):
    """Matrix product with NumPy's ``matmul`` rules (batched, broadcast)."""
    cdef ndarray x1 = _check_matrix_operand(a, 'a', b if isinstance(b, ndarray) else None)
    cdef ndarray x2 = _check_matrix_operand(b, 'b', x1)
    # ChainerX's result dtype (xgrad/_dtypes.pyx), any two of its dtypes.
    d1 = x1._data.dtype
    d2 = x2._data.dtype
    if d1 is not d2:
        d = promote_dtypes(d1, d2)
        if d1 is not d:
            x1 = x1.astype(d)
        if d2 is not d:
            x2 = x2.astype(d)
    return apply2(Matmul.__new__(Matmul), x1, x2)


# ---------------------------------------------------------------------------
# Registry

from xgrad._ops.registry import register, OpInfo, Sample, INT_DTYPES, BOOL

# The samples of matmul and of dot (xgrad._ops.contraction).

PRODUCT_SAMPLES = (Sample((3,), (3,)), Sample((2, 3), (3,)), Sample((3,), (3, 2)),
                    Sample((2, 3), (3, 2)), Sample((2, 0), (0, 2)))
register(OpInfo('matmul', matmul, ref=numpy.matmul,
                samples=PRODUCT_SAMPLES + (
                    Sample((2, 2, 3), (3, 2)), Sample((2, 1, 2, 3), (3, 3, 2)),
                    Sample((3,), (2, 3, 2)), Sample((0, 2, 3), (3, 2))),
                int_dtypes=INT_DTYPES + (BOOL,), promotion='result_type'))
