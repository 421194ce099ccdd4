# cython: language_level=3
"""Elementwise ops: arithmetic (with broadcasting and Python scalars on either
side), unary math, and comparisons.

Each differentiable op is a small class: ``forward`` on raw arrays, and
``_grad`` with the derivative, written once for both array namespaces (see
``_op.pyx``). Broadcasting is undone in one place, ``_Binary._grads``.
"""

import math

import numpy

cimport numpy as cnp
from xgrad._graph cimport ArrayNode, raw_meta_matches
from xgrad._array cimport ndarray, _wrap
from xgrad._function_node cimport apply1, apply2
from xgrad._dtypes cimport (
    promote_dtypes, array_scalar_dtype, math_dtype, scalar_for, is_scalar)
from xgrad._ops._op cimport Op
from xgrad._backend cimport native_kernels as K
from xgrad._ops._xp import numpy_ns
from xgrad._errors import DeviceError, DimensionError, DtypeError
from xgrad._ops.creation import array
from xgrad._backend.cuda import (
    unary as _gpu_unary, binary as _gpu_binary, is_device_array as _is_device_array,
    module_of as _module_of)

cdef object np_power = numpy.power
cdef object np_square = numpy.square
cdef object np_maximum = numpy.maximum
cdef object np_minimum = numpy.minimum
cdef object np_absolute = numpy.absolute
cdef object np_log = numpy.log
cdef object np_sqrt = numpy.sqrt
cdef object np_multiply = numpy.multiply
cdef object np_reciprocal = numpy.reciprocal
cdef object FLOAT32_64 = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))
cdef object NP = numpy_ns
cdef type NPA = numpy.ndarray
cdef tuple _RETAIN_0 = (0,)
cdef tuple _RETAIN_01 = (0, 1)
cdef object BOOL_DTYPE = numpy.dtype(numpy.bool_)

cnp.import_array()


cdef inline object _dtype(ndarray a):
    """``a.dtype`` at C speed for NumPy data (the promotion fast path)."""
    d = a._data
    if type(d) is NPA:
        return <object>cnp.PyArray_DESCR(<cnp.ndarray>d)
    return d.dtype


cdef object as_result(object r):
    """A raw result as an array: NumPy gives NumPy scalars for 0-d results;
    NumPy and CuPy arrays pass (``numpy.asarray`` would refuse CuPy's)."""
    return numpy.asarray(r) if isinstance(r, numpy.generic) else r


cdef bint on_gpu(object v):
    """Whether raw data is on a GPU (a CuPy array); NumPy arrays answer at
    C speed."""
    cdef type t = type(v)
    return t is not NPA and t is not float and t is not int and _is_device_array(v)


cdef object raw_module(object v):
    """``cuda.module_of(v)`` with NumPy data answered at C speed (the
    native hot path: sum's forward)."""
    return numpy if type(v) is NPA else _module_of(v)


cdef inline bint _is_python_scalar(object v):
    return is_scalar(v)


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
        g = self._grad(xp, gys[0], x, y)
        if (type(g) is NPA and type(gys[0]) is NPA and cnp.PyArray_DESCR(<cnp.ndarray>g)
                is cnp.PyArray_DESCR(<cnp.ndarray>gys[0])):
            return (g,)
        # NumPy 1.x's value-based casting can widen a 0-d gradient.
        return (g if g.dtype == gys[0].dtype else xp.cast(g, gys[0].dtype),)


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
        return K.abs_grad(gy, x) if xp is NP else gy * xp.sign(x)


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
        return _output_grad(_TANH_GRAD, xp, gy, y)


cdef class Sigmoid(_Unary):
    op_name = 'sigmoid'

    cdef object _forward1(self, x):
        self._retain_out_idx = _RETAIN_0
        return K.sigmoid_forward(x) if not on_gpu(x) else _gpu_unary('sigmoid', x)

    cdef object _grad(self, xp, gy, x, y):
        return _output_grad(_SIGMOID_GRAD, xp, gy, y)


cdef class _OutputGrad(Op):
    """gx = gy * f'(y) for an activation whose derivative is a function of
    its output y (tanh, sigmoid), recorded as one op in double backprop
    where the formula would record three, and computed by one fused kernel.
    Its own gradients: for gy, g * f'(y) (this op again); for y,
    g * gy * f''(y) written with f'' as a function of y."""

    cpdef forward(self, inputs):
        gy, y = inputs
        self._retain_in_idx = _RETAIN_01
        if on_gpu(gy) or on_gpu(y):
            return (self._formula(gy, y),)
        return (self._fused(gy, y),)

    cdef object _fused(self, gy, y):
        raise NotImplementedError

    cdef object _formula(self, gy, y):
        raise NotImplementedError

    cdef object _second(self, y):
        """f''(y) as a function of y (arrays of the namespace of y)."""
        raise NotImplementedError

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        g = gys[0]
        gy, y = xs
        out = []
        for t in targets:
            if t == 0:
                out.append(_output_grad(self, xp, g, y))
            else:
                out.append(g * gy * self._second(y))
        return tuple(out)


cdef object _output_grad(_OutputGrad op, xp, gy, y):
    """gy * f'(y) for ``op``'s activation in namespace ``xp``: the fused
    kernel on NumPy arrays, the formula on other raw arrays, and on xgrad
    arrays a new op of ``op``'s class, recorded (``op`` itself only serves
    as the formula's holder and is never applied here)."""
    if xp is NP:
        return op._fused(gy, y)
    if xp.raw:
        return op._formula(gy, y)
    cdef type cls = type(op)
    return apply2(cls.__new__(cls), <ndarray>gy, <ndarray>y)


cdef class TanhGrad(_OutputGrad):
    op_name = 'tanh_grad'

    cdef object _fused(self, gy, y):
        return K.tanh_grad(gy, y)

    cdef object _formula(self, gy, y):
        return gy * (1 - y * y)

    cdef object _second(self, y):
        return y * -2  # d/dy (1 - y*y)


cdef class SigmoidGrad(_OutputGrad):
    op_name = 'sigmoid_grad'

    cdef object _fused(self, gy, y):
        return K.sigmoid_grad(gy, y)

    cdef object _formula(self, gy, y):
        return gy * (y * (1 - y))

    cdef object _second(self, y):
        return 1 - y * 2  # d/dy y(1 - y)


# Formula holders for Tanh and Sigmoid's first-order gradients.
cdef TanhGrad _TANH_GRAD = TanhGrad.__new__(TanhGrad)
cdef SigmoidGrad _SIGMOID_GRAD = SigmoidGrad.__new__(SigmoidGrad)


cdef class Relu(_Unary):
    op_name = 'relu'

    cdef object _forward1(self, x):
        self._retain_out_idx = _RETAIN_0
        return K.relu_forward(x) if not on_gpu(x) else _gpu_unary('relu', x)

    cdef object _grad(self, xp, gy, x, y):
        # A select, not gy * (y > 0): an inf or NaN gy where y <= 0 gives 0 on
        # every path (the native kernels' and where's rule), not NaN on some.
        return K.relu_grad(gy, y) if xp is NP else xp.where(y > 0, gy, 0)


cdef inline ndarray _unary(_Unary op, object x):
    return apply1(op, as_array(x, 'x'))


cdef ndarray _math_unary(_Unary op, object x):
    """A math function: bool and int inputs are computed in float32
    (ChainerX's GetMathResultDtype, see xgrad/_dtypes.pyx)."""
    cdef ndarray a = as_array(x, 'x')
    da = _dtype(a)
    d = math_dtype(da)
    if d is not da:
        a = a.astype(d)
    cdef ndarray y = apply1(op, a)
    # NumPy 1.x's value-based casting widens some 0-d float16 results.
    return y if _dtype(y) is d else y.astype(d)


cdef ndarray _no_bool(ndarray x, str op):
    if _dtype(x) is BOOL_DTYPE:
        raise DtypeError('{} is not defined for bool arrays'.format(op))
    return x


def negative(x):
    """-x (DtypeError for bool arrays: use logical_not)"""
    return apply1(Negative.__new__(Negative), _no_bool(as_array(x, 'x'), 'negative'))


def absolute(x):
    """|x| (gradient sign(x), 0 at 0)"""
    return apply1(Absolute.__new__(Absolute), _no_bool(as_array(x, 'x'), 'absolute'))


def exp(x):
    return _math_unary(Exp.__new__(Exp), x)


def log(x):
    return _math_unary(Log.__new__(Log), x)


def sqrt(x):
    return _math_unary(Sqrt.__new__(Sqrt), x)


def square(x):
    return apply1(Square.__new__(Square), _no_bool(as_array(x, 'x'), 'square'))


def tanh(x):
    return _math_unary(Tanh.__new__(Tanh), x)


def sigmoid(x):
    """1 / (1 + exp(-x)), computed as 0.5 * tanh(x / 2) + 0.5 (no overflow)."""
    return _math_unary(Sigmoid.__new__(Sigmoid), x)


def relu(x):
    """max(x, 0) (gradient 0 at 0)"""
    return _math_unary(Relu.__new__(Relu), x)


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
    cdef bint takes_bool      # bool operands allowed (else DtypeError, as ChainerX)
    cdef bint compares        # a bool operand only with another (maximum, minimum)
    cdef bint float_result    # int results become float32 (true division)
    cdef object out_dtype     # the promoted dtype, decided before the forward

    cdef object _fwd(self, a, b):
        raise NotImplementedError

    cdef object _grad(self, xp, int p, gy, a, b, y):
        raise NotImplementedError

    cdef object _summed_grad(self, int p, gy, a, b, tuple shape):
        """Operand ``p``'s gradient summed to ``shape`` (the operand is
        broadcast), on host arrays, with the sum taken before the passes that
        do not vary along the summed axes; None: sum ``_grad``'s result."""
        return None

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
            y = self._checked_fwd(x, self.scalar)
        else:
            y = self._checked_fwd(self.scalar, x)
        # NumPy 1.x's value-based casting can widen (float16 + 1e5): keep
        # ChainerX's dtype.
        if type(y) is NPA and <object>cnp.PyArray_DESCR(<cnp.ndarray>y) is self.out_dtype:
            return y
        return y if y.dtype == self.out_dtype else y.astype(self.out_dtype)

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
        except OverflowError as e:  # a Python int beyond the array's dtype
            raise DtypeError('{}: a Python int operand does not fit the operand '
                             'dtypes {} and {}: {}'.format(
                                 self.name, numpy.result_type(a) if not isinstance(a, int)
                                 else 'int', numpy.result_type(b) if not isinstance(b, int)
                                 else 'int', e)) from None

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
            node = self._any_input_node(t)
            if xp is NP and self.scalar_pos == -1 and node.shape != gy.shape:
                g = self._summed_grad(p, gy, a, b, node.shape)
                if g is not None:
                    out.append(g if g.dtype == node.dtype else g.astype(node.dtype))
                    continue
            g = self._grad(xp, p, gy, a, b, y)
            if not raw_meta_matches(g, node):
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

    cdef object _summed_grad(self, int p, gy, a, b, tuple shape):
        # -sum(gy), not sum(-gy): the negation on the sum, not on gy
        return K.negative(NP.sum_to(gy, shape)) if p == 1 else None


cdef class Multiply(_Binary):
    op_name = 'multiply'

    def __cinit__(self):
        self.takes_bool = True
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
        self.float_result = True
        self.keep_inputs = True
        self.fused_grads = True

    cdef object _fwd(self, a, b):
        return K.divide(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        if xp is NP:  # (the same formulas by the pool's loops: NumPy's are one thread)
            if p == 0:
                return K.divide(gy, b)
            return K.divide(K.multiply(K.negative(K.divide(gy, b)), a), b)
        if p == 0:
            return gy / b
        return -(gy / b) * a / b

    cdef object _summed_grad(self, int p, gy, a, b, tuple shape):
        # b broadcast (a layer norm's std over (N, 1)): b is constant along
        # the summed axes, so -sum(gy a / b^2) = -sum(gy a) / b^2, one pass
        # over gy's size instead of four
        if p != 1 or b.dtype.kind != 'f' or b.shape != shape:
            return None
        return K.negative(NP.sum_to(K.multiply(gy, a), shape)) / (b * b)


cdef object _power_by_products(object a, object b):
    """a ** b for a host float32/64 array ``a`` and an exponent b of 2, 3,
    4, -1, -2 or 0.5 by products, a reciprocal or a square root; None for
    other operands. numpy.power runs C's pow() element by element for all
    but 2 (and 0.5 on Python floats only), glibc's slow path on negative
    bases: x ** 3 over (1024, 1024) float32 took 45 ms, two products 1.3
    ms (torch 0.08). A product rounds once more than pow(): within 2 ulps."""
    if type(a) is not NPA or (<object>a).dtype not in FLOAT32_64:
        return None
    try:
        e = float(b)
    except (TypeError, ValueError):
        return None
    if e == 0.5:
        return np_sqrt(a)
    if e == -1:
        return np_reciprocal(a)
    if e not in (2, 3, 4, -2):
        return None
    y = np_square(a)
    if type(y) is not NPA:  # (0-d: NumPy gave a scalar)
        y = numpy.asarray(y)
    if e == 3:
        return np_multiply(y, a, out=y)
    if e == 4:
        return np_square(y, out=y)
    if e == -2:
        return np_reciprocal(y, out=y)
    return y


cdef class Power(_Binary):
    op_name = 'power'
    cdef bint square  # x ** 2

    def __cinit__(self):
        self.keep_inputs = True
        self.keep_output = True

    cdef object _fwd(self, a, b):
        self.square = self.scalar_pos == 1 and b == 2
        if self.square:
            # x ** 2, the most written power: numpy.power runs the general
            # pow loop (four times the time of a product); square is x * x,
            # the correctly rounded square that pow also returns.
            return np_square(a)
        if self.scalar_pos == 1:
            y = _power_by_products(a, b)
            if y is not None:
                return y
        return np_power(a, b)

    cdef object _gpu_fwd(self, a, b):
        self.square = self.scalar_pos == 1 and b == 2
        return _Binary._gpu_fwd(self, a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        if p == 0:
            if self.square:  # square's gradient: 2 * gy * a in one pass
                return K.square_grad(gy, a) if xp is NP else gy * (a * 2)
            if self.scalar_pos == 1 and xp is NP:
                d = _power_by_products(a, b - 1)
                if d is not None:
                    return gy * b * d
            return gy * b * (a ** (b - 1))
        if self.scalar_pos == 0:
            return gy * y * (math.log(a) if a > 0 else math.nan)
        return gy * y * xp.log(a)


cdef class Maximum(_Binary):
    op_name = 'maximum'

    def __cinit__(self):
        self.takes_bool = True
        self.compares = True
        self.keep_inputs = True
        self.fused_grads = True

    cdef object _fwd(self, a, b):
        return np_maximum(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        # Ties send the gradient to the first operand.
        if xp is NP:
            g = K.compare_select(gy, a, b, K.COMPARE_GE if p == 0 else K.COMPARE_LT)
            if g is not None:
                return g
        # (a select, as compare_select: gy * mask made NaN of a masked inf gy)
        return xp.where(a >= b, gy, 0) if p == 0 else xp.where(a < b, gy, 0)


cdef class Minimum(_Binary):
    op_name = 'minimum'

    def __cinit__(self):
        self.takes_bool = True
        self.compares = True
        self.keep_inputs = True
        self.fused_grads = True

    cdef object _fwd(self, a, b):
        return np_minimum(a, b)

    cdef object _grad(self, xp, int p, gy, a, b, y):
        if xp is NP:
            g = K.compare_select(gy, a, b, K.COMPARE_LE if p == 0 else K.COMPARE_GT)
            if g is not None:
                return g
        return xp.where(a <= b, gy, 0) if p == 0 else xp.where(a > b, gy, 0)


cdef object _bool_error(_Binary op):
    return DtypeError('{}: bool operands are not allowed in arithmetic (ChainerX); '
                      'use logical_or/logical_and/logical_xor'.format(op.op_name))


cdef object _mixed_bool_error(_Binary op):
    return DtypeError('{}: a bool operand with a non-bool one is not supported '
                      '(ChainerX compares them)'.format(op.op_name))


cdef object _binary(_Binary op, object a, object b):
    """Promote (xgrad/_dtypes.pyx: operands of another dtype are cast, a
    recorded and differentiable astype), then apply ``op``."""
    cdef bint a_is = isinstance(a, ndarray)
    cdef bint b_is = isinstance(b, ndarray)
    if a_is and b_is:
        da = _dtype(<ndarray>a)
        db = _dtype(<ndarray>b)
        if not op.takes_bool and (da is BOOL_DTYPE or db is BOOL_DTYPE):
            raise _bool_error(op)
        if op.compares and (da is BOOL_DTYPE) != (db is BOOL_DTYPE):
            raise _mixed_bool_error(op)
        d = da if da is db else promote_dtypes(da, db)
        if op.float_result:
            d = math_dtype(d)
        if da is not d:
            a = _cast_operand(<ndarray>a, d)
        if db is not d:
            b = _cast_operand(<ndarray>b, d)
        op.scalar_pos = -1
        return apply2(op, <ndarray>a, <ndarray>b)
    if a_is and is_scalar(b):
        return _with_scalar(op, <ndarray>a, b, 1)
    if b_is and is_scalar(a):
        return _with_scalar(op, <ndarray>b, a, 0)
    if a_is:
        return _binary(op, a, as_array(b, 'x2', a))
    if b_is:
        return _binary(op, as_array(a, 'x1', b), b)
    return _binary(op, as_array(a, 'x1'), as_array(b, 'x2'))


cdef ndarray _cast_operand(ndarray x, object dtype):
    """An operand of another dtype than the result's, cast: on its raw data
    when it is on no graph (a mask, as in ``(x > 0) * x``, or an int array),
    where a recorded astype would link nothing and cost more than the
    product; recorded otherwise, so that the gradient flows back through."""
    if x._nodes is not None:
        return x.astype(dtype)
    if type(x._data) is NPA:
        return _wrap(x._data.astype(dtype), x._device)
    with x._device.scope():
        return _wrap(x._data.astype(dtype), x._device)


cdef object _with_scalar(_Binary op, ndarray x, object s, int pos):
    """``op`` on array ``x`` and scalar ``s`` (on side ``pos``)."""
    dx = _dtype(x)
    if not op.takes_bool and (dx is BOOL_DTYPE or type(s) is bool or isinstance(s, numpy.bool_)):
        raise _bool_error(op)
    if op.compares and (dx is BOOL_DTYPE) != (type(s) is bool or isinstance(s, numpy.bool_)):
        raise _mixed_bool_error(op)
    d = array_scalar_dtype(dx, s)
    if op.float_result:
        d = math_dtype(d)
    if dx is not d:
        x = x.astype(d)
    op.scalar_pos = pos
    try:
        op.scalar = scalar_for(s, d)
    except OverflowError:  # a Python int beyond every integer dtype
        raise DtypeError('{}: a Python int operand does not fit the operand dtypes {} '
                         'and int: {}'.format(op.name, d.name, s)) from None
    op.out_dtype = d
    return apply1(op, x)


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

cdef bint _is_bool(object v):
    """Whether an operand (xgrad array or scalar) is of the bool kind."""
    if isinstance(v, ndarray):
        return _dtype(<ndarray>v) is BOOL_DTYPE
    return isinstance(v, (bool, numpy.bool_))


cdef object _compare(object ufunc, object a, object b):
    if not isinstance(a, ndarray) and not _is_python_scalar(a):
        a = as_array(a, 'x1', b if isinstance(b, ndarray) else None)
    if not isinstance(b, ndarray) and not _is_python_scalar(b):
        b = as_array(b, 'x2', a if isinstance(a, ndarray) else None)
    if _is_bool(a) != _is_bool(b):
        raise DtypeError('{}: comparison of bool and non-bool operands is not supported '
                         '(ChainerX)'.format(ufunc.__name__))
    cdef ndarray ref = <ndarray>a if isinstance(a, ndarray) else (
        <ndarray>b if isinstance(b, ndarray) else None)
    raw_a = (<ndarray>a)._data if isinstance(a, ndarray) else a
    raw_b = (<ndarray>b)._data if isinstance(b, ndarray) else b
    if isinstance(a, ndarray) and isinstance(b, ndarray) and (
            (<ndarray>a)._device is not (<ndarray>b)._device):
        raise DeviceError('Operands are on different devices: {} and {}'.format(
            (<ndarray>a)._device.name, (<ndarray>b)._device.name))
    try:
        if on_gpu(raw_a) or on_gpu(raw_b):
            result = _gpu_binary(ufunc.__name__, raw_a, raw_b)  # CuPy's ufunc
        else:
            result = ufunc(raw_a, raw_b)
    except ValueError as e:
        raise DimensionError('{}: operands with shapes {} and {} cannot be '
                             'broadcast together'.format(
                                 ufunc.__name__, getattr(raw_a, 'shape', ()),
                                 getattr(raw_b, 'shape', ()))) from None
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
    return (1 / (1 + numpy.exp(-x.astype(numpy.float64)))).astype(x.dtype)


# promotion: how the result dtype follows from the inputs' (docs/dtype_promotion.md).
for _f, _ref, _domain, _ints, _promotion in (
        (negative, numpy.negative, real, _SIGNED, 'result_type'),
        (absolute, numpy.absolute, nonzero, INT_DTYPES, 'result_type'),
        (exp, numpy.exp, real, INT_DTYPES + (BOOL,), 'float'),
        (log, numpy.log, positive, INT_DTYPES + (BOOL,), 'float'),
        (sqrt, numpy.sqrt, positive, INT_DTYPES + (BOOL,), 'float'),
        (square, numpy.square, real, INT_DTYPES, 'result_type'),
        (tanh, numpy.tanh, real, INT_DTYPES + (BOOL,), 'float'),
        (sigmoid, _np_sigmoid, real, INT_DTYPES + (BOOL,), 'float'),
        (relu, lambda x: numpy.maximum(x, 0), nonzero, INT_DTYPES + (BOOL,), 'float')):
    register(OpInfo(_f.__name__, _f, ref=_ref, samples=_UNARY_SAMPLES, domain=_domain,
                    int_dtypes=_ints, promotion=_promotion))

for _name, _f, _ref, _domain, _ints, _promotion in (
        ('add', add, numpy.add, real, INT_DTYPES, 'result_type'),
        ('subtract', subtract, numpy.subtract, real, INT_DTYPES, 'result_type'),
        ('multiply', multiply, numpy.multiply, real, INT_DTYPES + (BOOL,), 'result_type'),
        ('divide', divide, numpy.divide, (real, nonzero), INT_DTYPES, 'float'),
        ('true_divide', true_divide, numpy.true_divide, (real, nonzero), INT_DTYPES, 'float'),
        ('power', power, numpy.power, (positive, real), (), 'result_type')):
    register(OpInfo(_name, _f, ref=_ref, samples=_BINARY_SAMPLES, broadcasting=True, domain=_domain,
                    int_dtypes=_ints, promotion=_promotion))

for _f, _ref in ((maximum, numpy.maximum), (minimum, numpy.minimum)):
    register(OpInfo(_f.__name__, _f, ref=_ref, samples=_BINARY_SAMPLES, broadcasting=True, gen=untied,
                    int_dtypes=INT_DTYPES + (BOOL,), promotion='result_type'))

for _f in (equal, not_equal, greater, greater_equal, less, less_equal):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__),
                    samples=_BINARY_SAMPLES, broadcasting=True, gen=untied, differentiable=False,
                    int_dtypes=INT_DTYPES + (BOOL,), promotion='bool'))
