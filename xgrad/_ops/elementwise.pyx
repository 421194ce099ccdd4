# cython: language_level=3
"""Elementwise ops: arithmetic (with broadcasting and Python scalars on either
side), unary math, and comparisons.

Each differentiable op is a small class: ``forward`` on raw arrays, and
``_grad`` with the derivative, written once for both array namespaces (see
``_op.pyx``). Broadcasting is undone in one place, ``_Binary._grads``.
"""

import math

import numpy

from xgrad._core cimport ndarray, ArrayNode, apply1, apply2, _wrap
from xgrad._ops._op cimport Op
from xgrad._backend cimport native_kernels as K
from xgrad._ops._xp import numpy_ns
from xgrad._errors import DeviceError, DimensionError, DtypeError
from xgrad._ops.creation import array
from xgrad._backend.cuda import (
    unary as _gpu_unary, binary as _gpu_binary, is_device_array as _is_device_array)

cdef object np_power = numpy.power
cdef object np_maximum = numpy.maximum
cdef object np_minimum = numpy.minimum
cdef object np_absolute = numpy.absolute
cdef object np_log = numpy.log
cdef object np_sqrt = numpy.sqrt
cdef object NP = numpy_ns
cdef type NPA = numpy.ndarray
cdef tuple _RETAIN_0 = (0,)
cdef tuple _RETAIN_01 = (0, 1)


cdef object as_result(object r):
    """A raw result as an array: NumPy gives NumPy scalars for 0-d results;
    NumPy and CuPy arrays pass (``numpy.asarray`` would refuse CuPy's)."""
    return numpy.asarray(r) if isinstance(r, numpy.generic) else r


cdef bint on_gpu(object v):
    """Whether raw data is on a GPU (a CuPy array); NumPy arrays answer at
    C speed."""
    return type(v) is not NPA and _is_device_array(v)


cdef inline bint _is_python_scalar(object v):
    return isinstance(v, (int, float, bool)) or isinstance(v, numpy.generic)


cdef ndarray as_array(object x, str name, object like=None):
    """An ndarray for op argument ``name``: xgrad arrays pass through, NumPy
    arrays and (nested) sequences become constants on ``like``'s device."""
    if isinstance(x, ndarray):
        return <ndarray>x
    try:
        return array(x, device=None if like is None else (<ndarray>like).device)
    except (TypeError, ValueError):
        raise TypeError('{} must be an xgrad.ndarray (or array-like), not {}'.format(
            name, type(x).__name__)) from None


# ---------------------------------------------------------------------------
# Unary ops
# ---------------------------------------------------------------------------

cdef class _Unary(Op):
    """y = f(x), defined in ``_forward1``; ``_grad`` maps gy (and retained
    x, y) to gx. On a GPU both directions are one kernel each (ours, by the
    op's name), reading the same retained arrays."""

    cdef object _forward1(self, x):
        return self._forward1(x)

    cdef object _grad(self, xp, gy, x, y):
        raise NotImplementedError

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        x = xs[0] if xs else None
        y = ys[0] if ys else None
        if xp is not NP and xp.raw and gys[0].dtype.kind == 'f':
            return (xp.unary_grad(self.op_name, gys[0], x, y),)
        return (self._grad(xp, gys[0], x, y),)


cdef class Negative(_Unary):
    op_name = 'negative'

    cdef object _forward1(self, x):
        return K.negative(x) if not on_gpu(x) else _gpu_unary('negative', x)

    cdef object _grad(self, xp, gy, x, y):
        return K.negative(gy) if xp is NP else -gy


cdef class Absolute(_Unary):
    op_name = 'absolute'

    cdef object _forward1(self, x):
        self._retain_in_idx = _RETAIN_0
        return np_absolute(x) if not on_gpu(x) else _gpu_unary('absolute', x)

    cdef object _grad(self, xp, gy, x, y):
        return gy * xp.sign(x)


cdef class Exp(_Unary):
    op_name = 'exp'

    cdef object _forward1(self, x):
        self._retain_out_idx = _RETAIN_0
        return K.exp_forward(x) if not on_gpu(x) else _gpu_unary('exp', x)

    cdef object _grad(self, xp, gy, x, y):
        return K.multiply_grad(gy, y) if xp is NP else gy * y


cdef class Log(_Unary):
    op_name = 'log'

    cdef object _forward1(self, x):
        self._retain_in_idx = _RETAIN_0
        return K.log_forward(x) if not on_gpu(x) else _gpu_unary('log', x)

    cdef object _grad(self, xp, gy, x, y):
        return K.divide(gy, x) if xp is NP else gy / x


cdef class Sqrt(_Unary):
    op_name = 'sqrt'

    cdef object _forward1(self, x):
        self._retain_out_idx = _RETAIN_0
        return np_sqrt(x) if not on_gpu(x) else _gpu_unary('sqrt', x)

    cdef object _grad(self, xp, gy, x, y):
        return K.sqrt_grad(gy, y) if xp is NP else gy / (y * 2)


cdef class Square(_Unary):
    op_name = 'square'

    cdef object _forward1(self, x):
        self._retain_in_idx = _RETAIN_0
        return K.multiply(x, x) if not on_gpu(x) else _gpu_unary('square', x)

    cdef object _grad(self, xp, gy, x, y):
        return K.square_grad(gy, x) if xp is NP else gy * (x * 2)


cdef class Tanh(_Unary):
    op_name = 'tanh'

    cdef object _forward1(self, x):
        self._retain_out_idx = _RETAIN_0
        return K.tanh_forward(x) if not on_gpu(x) else _gpu_unary('tanh', x)

    cdef object _grad(self, xp, gy, x, y):
        return K.tanh_grad(gy, y) if xp is NP else gy * (1 - y * y)


cdef class Sigmoid(_Unary):
    op_name = 'sigmoid'

    cdef object _forward1(self, x):
        self._retain_out_idx = _RETAIN_0
        return K.sigmoid_forward(x) if not on_gpu(x) else _gpu_unary('sigmoid', x)

    cdef object _grad(self, xp, gy, x, y):
        return K.sigmoid_grad(gy, y) if xp is NP else gy * (y * (1 - y))


cdef class Relu(_Unary):
    op_name = 'relu'

    cdef object _forward1(self, x):
        self._retain_out_idx = _RETAIN_0
        return K.relu_forward(x) if not on_gpu(x) else _gpu_unary('relu', x)

    cdef object _grad(self, xp, gy, x, y):
        return K.relu_grad(gy, y) if xp is NP else gy * (y > 0)


cdef inline ndarray _unary(_Unary op, object x):
    return apply1(op, as_array(x, 'x'))


def negative(x):
    """-x"""
    x = as_array(x, 'x')
    if (<ndarray>x).dtype == numpy.bool_:
        raise DtypeError('negative is not defined for bool arrays; use logical_not')
    return apply1(Negative.__new__(Negative), x)


def absolute(x):
    """|x| (gradient sign(x), 0 at 0)"""
    return _unary(Absolute.__new__(Absolute), x)


def exp(x):
    return _unary(Exp.__new__(Exp), x)


def log(x):
    return _unary(Log.__new__(Log), x)


def sqrt(x):
    return _unary(Sqrt.__new__(Sqrt), x)


def square(x):
    x = as_array(x, 'x')
    if (<ndarray>x).dtype == numpy.bool_:
        raise DtypeError('square is not defined for bool arrays (as in NumPy)')
    return apply1(Square.__new__(Square), x)


def tanh(x):
    return _unary(Tanh.__new__(Tanh), x)


def sigmoid(x):
    """1 / (1 + exp(-x)), computed as 0.5 * tanh(x / 2) + 0.5 (no overflow).
    Integer and bool arrays give the float dtype NumPy's exp would."""
    x = as_array(x, 'x')
    if (<ndarray>x).dtype.kind != 'f':
        x = x.astype(numpy.promote_types((<ndarray>x).dtype, numpy.float16))
    return apply1(Sigmoid.__new__(Sigmoid), x)


def relu(x):
    """max(x, 0) (gradient 0 at 0)"""
    return _unary(Relu.__new__(Relu), x)


# ---------------------------------------------------------------------------
# Binary ops
# ---------------------------------------------------------------------------

cdef class _Binary(Op):
    """y = f(a, b) with NumPy broadcasting; one side may be a Python scalar.

    ``_grad(xp, p, gy, a, b, y)`` gives the unreduced gradient for operand
    ``p`` (0 = a, 1 = b); ``_grads`` sums it back to the operand's shape and
    casts it to the operand's dtype (both read from the operand's node).
    """
    cdef object scalar
    cdef int scalar_pos       # -1: both operands are arrays; else the scalar's side
    cdef bint keep_inputs
    cdef bint keep_output
    cdef bint fused_grads     # a GPU kernel computes both gradients in one pass

    cdef object _fwd(self, a, b):
        raise NotImplementedError

    cdef object _grad(self, xp, int p, gy, a, b, y):
        raise NotImplementedError

    cdef object _gpu_fwd(self, a, b):
        return _gpu_binary(self.op_name, a, b)

    cpdef forward(self, inputs):
        if self.scalar_pos == -1:
            return (self._forward2(inputs[0], inputs[1]),)
        return (self._forward1(inputs[0]),)

    cdef object _forward2(self, a, b):
        if self.keep_inputs:
            self._retain_in_idx = _RETAIN_01
        return self._checked_fwd(a, b)

    cdef object _forward1(self, x):
        if self.keep_inputs:
            self._retain_in_idx = _RETAIN_0
        if self.scalar_pos == 1:
            return self._checked_fwd(x, self.scalar)
        return self._checked_fwd(self.scalar, x)

    cdef object _checked_fwd(self, a, b):
        if self.keep_output:
            self._retain_out_idx = _RETAIN_0
        try:
            if on_gpu(a) or on_gpu(b):
                return self._gpu_fwd(a, b)
            return self._fwd(a, b)
        except ValueError as e:
            if 'broadcast' in str(e):
                raise DimensionError('{}: operands with shapes {} and {} cannot be '
                                     'broadcast together'.format(
                                         self.name, numpy.shape(a), numpy.shape(b))) from None
            raise
        except TypeError as e:  # NumPy has no loop for these dtypes
            raise DtypeError('{}: {}'.format(self.name, e)) from None

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        cdef int p
        cdef Py_ssize_t t
        cdef ArrayNode node
        gy = gys[0]
        y = ys[0] if ys else None
        if self.scalar_pos == -1:
            a = xs[0] if xs else None
            b = xs[1] if xs else None
        elif self.scalar_pos == 1:
            a = xs[0] if xs else None
            b = self.scalar
        else:
            a = self.scalar
            b = xs[0] if xs else None
        if (self.fused_grads and xp is not NP and xp.raw and self.scalar_pos == -1
                and gy.dtype.kind == 'f' and a.dtype == gy.dtype and b.dtype == gy.dtype
                and a.shape == gy.shape and b.shape == gy.shape):
            g2 = xp.binary_grads(self.op_name, gy, a, b, 0 in targets, 1 in targets)
            return tuple([g2[t] for t in targets])
        out = []
        for t in targets:
            p = 1 if (self.scalar_pos == 0 or t == 1) else 0
            g = self._grad(xp, p, gy, a, b, y)
            node = self._any_input_node(t)
            if g.shape != node.shape:
                g = xp.sum_to(g, node.shape)
            if g.dtype != node.dtype:
                g = xp.cast(g, node.dtype)
            out.append(g)
        return tuple(out)


cdef class Add(_Binary):
    op_name = 'add'

    cdef object _fwd(self, a, b):
        return K.add(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        return gy


cdef class Subtract(_Binary):
    op_name = 'subtract'

    cdef object _fwd(self, a, b):
        return K.subtract(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        if p == 0:
            return gy
        return K.negative(gy) if xp is NP else -gy


cdef class Multiply(_Binary):
    op_name = 'multiply'

    def __cinit__(self):
        self.keep_inputs = True
        self.fused_grads = True

    cdef object _fwd(self, a, b):
        return K.multiply(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        if xp is NP:
            return K.multiply_grad(gy, b) if p == 0 else K.multiply_grad(gy, a)
        return gy * b if p == 0 else gy * a


cdef class Divide(_Binary):
    op_name = 'divide'

    def __cinit__(self):
        self.keep_inputs = True
        self.fused_grads = True

    cdef object _fwd(self, a, b):
        return K.divide(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        if p == 0:
            return gy / b
        return -(gy / b) * a / b


cdef class Power(_Binary):
    op_name = 'power'

    def __cinit__(self):
        self.keep_inputs = True
        self.keep_output = True

    cdef object _fwd(self, a, b):
        return np_power(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        if p == 0:
            return gy * b * (a ** (b - 1))
        if self.scalar_pos == 0:
            return gy * y * (math.log(a) if a > 0 else math.nan)
        return gy * y * xp.log(a)


cdef class Maximum(_Binary):
    op_name = 'maximum'

    def __cinit__(self):
        self.keep_inputs = True
        self.fused_grads = True

    cdef object _fwd(self, a, b):
        return np_maximum(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        # Ties send the gradient to the first operand.
        return gy * (a >= b) if p == 0 else gy * (a < b)


cdef class Minimum(_Binary):
    op_name = 'minimum'

    def __cinit__(self):
        self.keep_inputs = True
        self.fused_grads = True

    cdef object _fwd(self, a, b):
        return np_minimum(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        return gy * (a <= b) if p == 0 else gy * (a > b)


cdef object _binary(_Binary op, object a, object b):
    cdef bint a_is = isinstance(a, ndarray)
    cdef bint b_is = isinstance(b, ndarray)
    if a_is and b_is:
        op.scalar_pos = -1
        return apply2(op, <ndarray>a, <ndarray>b)
    if a_is and _is_python_scalar(b):
        op.scalar_pos = 1
        op.scalar = b.item() if isinstance(b, numpy.generic) else b
        return apply1(op, <ndarray>a)
    if b_is and _is_python_scalar(a):
        op.scalar_pos = 0
        op.scalar = a.item() if isinstance(a, numpy.generic) else a
        return apply1(op, <ndarray>b)
    if a_is:
        return _binary(op, a, as_array(b, 'x2', a))
    if b_is:
        return _binary(op, as_array(a, 'x1', b), b)
    return _binary(op, as_array(a, 'x1'), as_array(b, 'x2'))


def add(x1, x2):
    return _binary(Add.__new__(Add), x1, x2)


def subtract(x1, x2):
    return _binary(Subtract.__new__(Subtract), x1, x2)


def multiply(x1, x2):
    return _binary(Multiply.__new__(Multiply), x1, x2)


def divide(x1, x2):
    return _binary(Divide.__new__(Divide), x1, x2)


true_divide = divide


def power(x1, x2):
    return _binary(Power.__new__(Power), x1, x2)


def maximum(x1, x2):
    """Elementwise max; at ties the gradient goes to ``x1``."""
    return _binary(Maximum.__new__(Maximum), x1, x2)


def minimum(x1, x2):
    """Elementwise min; at ties the gradient goes to ``x1``."""
    return _binary(Minimum.__new__(Minimum), x1, x2)


# ---------------------------------------------------------------------------
# Comparisons (no gradient: the result is bool)
# ---------------------------------------------------------------------------

cdef object _compare(object ufunc, object a, object b):
    if not isinstance(a, ndarray) and not _is_python_scalar(a):
        a = as_array(a, 'x1', b if isinstance(b, ndarray) else None)
    if not isinstance(b, ndarray) and not _is_python_scalar(b):
        b = as_array(b, 'x2', a if isinstance(a, ndarray) else None)
    cdef ndarray ref = <ndarray>a if isinstance(a, ndarray) else (
        <ndarray>b if isinstance(b, ndarray) else None)
    raw_a = (<ndarray>a)._data if isinstance(a, ndarray) else a
    raw_b = (<ndarray>b)._data if isinstance(b, ndarray) else b
    if isinstance(a, ndarray) and isinstance(b, ndarray) and (
            (<ndarray>a)._device is not (<ndarray>b)._device):
        raise DeviceError('Operands are on different devices: {} and {}'.format(
            (<ndarray>a)._device.name, (<ndarray>b)._device.name))
    try:
        result = ufunc(raw_a, raw_b)
    except ValueError as e:
        raise DimensionError('{}: operands with shapes {} and {} cannot be '
                             'broadcast together'.format(
                                 ufunc.__name__, numpy.shape(raw_a),
                                 numpy.shape(raw_b))) from None
    if ref is None:
            return array(result)
    return _wrap(as_result(result), ref._device)


def equal(x1, x2):
    return _compare(numpy.equal, x1, x2)


def not_equal(x1, x2):
    return _compare(numpy.not_equal, x1, x2)


def greater(x1, x2):
    return _compare(numpy.greater, x1, x2)


def greater_equal(x1, x2):
    return _compare(numpy.greater_equal, x1, x2)


def less(x1, x2):
    return _compare(numpy.less, x1, x2)


def less_equal(x1, x2):
    return _compare(numpy.less_equal, x1, x2)


# ---------------------------------------------------------------------------
# Registry

from xgrad._ops.registry import (
    register, OpInfo, Sample, INT_DTYPES, BOOL, real, positive, nonzero, untied)

_UNARY_SAMPLES = (Sample((2, 3)), Sample(()), Sample((3, 0)))
_BINARY_SAMPLES = (Sample((2, 3), (2, 3)), Sample((2, 3), (3,)), Sample((2, 1), (1, 3)),
                   Sample((), ()), Sample((0, 3), (3,)))
_SIGNED = tuple(d for d in INT_DTYPES if d.kind == 'i')


def _np_sigmoid(x):
    x = numpy.asarray(x)
    dtype = numpy.promote_types(x.dtype, numpy.float16)
    return (1 / (1 + numpy.exp(-x.astype(numpy.float64)))).astype(dtype)


for _f, _ref, _domain, _ints in (
        (negative, numpy.negative, real, _SIGNED),
        (absolute, numpy.absolute, nonzero, INT_DTYPES + (BOOL,)),
        (exp, numpy.exp, real, INT_DTYPES + (BOOL,)),
        (log, numpy.log, positive, INT_DTYPES + (BOOL,)),
        (sqrt, numpy.sqrt, positive, INT_DTYPES + (BOOL,)),
        (square, numpy.square, real, INT_DTYPES),
        (tanh, numpy.tanh, real, INT_DTYPES + (BOOL,)),
        (sigmoid, _np_sigmoid, real, INT_DTYPES + (BOOL,)),
        (relu, lambda x: numpy.maximum(x, 0), nonzero, INT_DTYPES + (BOOL,))):
    register(OpInfo(_f.__name__, _f, ref=_ref, samples=_UNARY_SAMPLES, domain=_domain,
                    int_dtypes=_ints))

for _name, _f, _ref, _domain, _ints in (
        ('add', add, numpy.add, real, INT_DTYPES),
        ('subtract', subtract, numpy.subtract, real, INT_DTYPES),
        ('multiply', multiply, numpy.multiply, real, INT_DTYPES + (BOOL,)),
        ('divide', divide, numpy.divide, (real, nonzero), ()),
        ('true_divide', true_divide, numpy.true_divide, (real, nonzero), ()),
        ('power', power, numpy.power, (positive, real), ())):
    register(OpInfo(_name, _f, ref=_ref, samples=_BINARY_SAMPLES, broadcasting=True, domain=_domain,
                    int_dtypes=_ints))

for _f, _ref in ((maximum, numpy.maximum), (minimum, numpy.minimum)):
    register(OpInfo(_f.__name__, _f, ref=_ref, samples=_BINARY_SAMPLES, broadcasting=True, gen=untied,
                    int_dtypes=INT_DTYPES + (BOOL,)))

for _f in (equal, not_equal, greater, greater_equal, less, less_equal):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__),
                    samples=_BINARY_SAMPLES, broadcasting=True, gen=untied, differentiable=False,
                    int_dtypes=INT_DTYPES + (BOOL,)))
