"""Tensor contractions: ``dot`` and ``tensordot`` (NumPy's) and ``linear``
(ChainerX's fully connected layer, y = x W^T + b).

Both run as one BLAS matrix product. ``tensordot`` is composed of transpose,
reshape and matmul, so its gradients are those ops' (differentiable to any
order); ``linear`` is one fused op whose gradients are matmuls again.
Operands of different dtypes promote as in NumPy.
"""


import numpy

from xgrad._errors import describe
from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops._xp import matmul_raw
from xgrad._ops.linalg import PRODUCT_SAMPLES, matmul
from xgrad._ops.manipulation import reshape, transpose
from xgrad._ops.registry import BOOL, INT_DTYPES, OpInfo, Sample, register

__all__ = ['dot', 'tensordot', 'linear']


def _operands(op, a, b, names=('a', 'b')):
    """The two operands as xgrad arrays on one device; the errors name the op
    and the argument."""
    like = a if isinstance(a, _args.ndarray) else b if isinstance(b, _args.ndarray) else None
    arrays = []
    for name, v in zip(names, (a, b)):
        try:
            arrays.append(_args.as_array(v, name, like))
        except TypeError as e:
            raise TypeError('{}: {}'.format(op, e)) from None
    _args.same_device(arrays, op)
    return _promoted(arrays)


def _promoted(arrays):
    """``arrays`` cast to their ChainerX result dtype (xgrad/_dtypes.pyx):
    the product of int8 and float16 is float16, of two bools bool."""
    dtype = _args.result_dtype(*arrays)
    return [x if x.dtype == dtype else x.astype(dtype) for x in arrays]


def _prod(dims):
    n = 1
    for d in dims:
        n *= d
    return n


# ---------------------------------------------------------------------------
# tensordot

def _contracted_axes(axes, a, b):
    """NumPy's ``axes`` (an int N: the last N of a with the first N of b; or
    a pair of axis sequences) as two lists of non-negative axes."""
    if isinstance(axes, (int, numpy.integer)) and not isinstance(axes, bool):
        n = int(axes)
        if n < 0:
            raise ValueError('tensordot: axes must be non-negative, not {}'.format(n))
        if n > a.ndim or n > b.ndim:
            raise _args.DimensionError(
                'tensordot: cannot contract {} axes of operands with shapes {} and '
                '{}'.format(n, a.shape, b.shape))
        return list(range(a.ndim - n, a.ndim)), list(range(n))
    try:
        axes_a, axes_b = axes
    except (TypeError, ValueError):
        raise TypeError('tensordot: axes must be an int or a pair of axis sequences, '
                        'not {}'.format(describe(axes))) from None
    out = []
    for name, ax, x in (('axes[0]', axes_a, a), ('axes[1]', axes_b, b)):
        ax = [ax] if isinstance(ax, (int, numpy.integer)) else ax
        try:
            ax = [_args.normalize_axis(i, x.ndim, 'tensordot: ' + name) for i in ax]
        except TypeError as e:
            raise TypeError('tensordot: {}'.format(e)) from None
        if len(set(ax)) != len(ax):
            raise _args.DimensionError('tensordot: {} repeats an axis: {}'.format(
                name, ax))
        out.append(ax)
    if len(out[0]) != len(out[1]):
        raise _args.DimensionError(
            'tensordot: axes[0] and axes[1] contract different numbers of axes: '
            '{!r}'.format(axes))
    return out


def tensordot(a, b, axes=2):
    """The sum of products of ``a`` and ``b`` over the given axes (NumPy's
    ``tensordot``): ``axes=N`` contracts the last N axes of ``a`` with the
    first N of ``b``; ``axes=([i, ...], [j, ...])`` contracts axis i of ``a``
    with axis j of ``b``, pairwise. The result has the free axes of ``a``,
    then those of ``b``.

    Computed as one matrix product of transposed, reshaped operands, so it is
    BLAS-fast and differentiable to any order."""
    a, b = _operands('tensordot', a, b)
    axes_a, axes_b = _contracted_axes(axes, a, b)
    for i, j in zip(axes_a, axes_b):
        if a.shape[i] != b.shape[j]:
            raise _args.DimensionError(
                'tensordot: shapes {} and {} do not match along the contracted axes '
                '{} and {}'.format(a.shape, b.shape, axes_a, axes_b))
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [j for j in range(b.ndim) if j not in axes_b]
    k = _prod(a.shape[i] for i in axes_a)
    a2 = _matrix(a, free_a + axes_a, (_prod(a.shape[i] for i in free_a), k))
    b2 = _matrix(b, axes_b + free_b, (k, _prod(b.shape[j] for j in free_b)))
    out_shape = tuple(a.shape[i] for i in free_a) + tuple(b.shape[j] for j in free_b)
    return reshape(matmul(a2, b2), out_shape)


def _matrix(x, perm, shape):
    """``x`` with its axes in order ``perm``, as a matrix of ``shape``
    (skipping the ops that would do nothing)."""
    if perm != list(range(x.ndim)):
        x = transpose(x, perm)
    return x if x.shape == shape else reshape(x, shape)


# ---------------------------------------------------------------------------
# linear

class Linear(PyOp):
    """y = x2 @ w.T (+ b) with x2 = x as a (batch, features) matrix.
    gx = gy @ w, gw = gy.T @ x2, gb = sum of gy over the batch."""
    op_name = 'linear'

    def __init__(self, batch_shape, n_features):
        self.batch_shape = batch_shape
        self.n_features = n_features

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        x, w = inputs[0], inputs[1]
        self.dtypes = tuple(v.dtype for v in inputs)
        self.x_shape = x.shape
        xp = _args.module_of(x)
        y = (matmul_raw if xp is numpy else xp.matmul)(
            x.reshape(_prod(self.batch_shape), self.n_features), w.T)
        if len(inputs) == 3:
            if y.dtype == numpy.result_type(y.dtype, inputs[2].dtype):
                y += inputs[2]
            else:
                y = y + inputs[2]
        return (y.reshape(self.batch_shape + (w.shape[0],)),)

    def grads(self, xp, targets, gys, xs, ys):
        x, w = xs
        gy = xp.reshape(gys[0], (_prod(self.batch_shape), w.shape[0]))
        out = []
        for t in targets:
            if t == 0:
                g = xp.reshape(xp.matmul(gy, w), self.x_shape)
            elif t == 1:
                x2 = xp.reshape(x, (_prod(self.batch_shape), self.n_features))
                g = xp.matmul(xp.transpose(gy), x2)
            else:
                g = xp.sum(gy, axis=0)
            out.append(xp.cast(g, self.dtypes[t]))
        return tuple(out)


def linear(x, w, b=None, n_batch_axes=1):
    """ChainerX's ``linear``: y = x W^T + b. The first ``n_batch_axes`` axes
    of ``x`` are kept (the batch); the rest are flattened into N features, so
    ``w`` has shape (M, N), ``b`` (optional) shape (M,), and y shape
    ``x.shape[:n_batch_axes] + (M,)``.

    ``n_batch_axes`` must be at least 1 and leave at least one feature axis
    (ChainerX normalizes it as an axis of ``x``)."""
    like = next((v for v in (x, w, b) if isinstance(v, _args.ndarray)), None)
    x, w = _operands('linear', x, w, ('x', 'w'))
    inputs = [x, w]
    if b is not None:
        try:
            inputs.append(_args.as_array(b, 'b', like))
        except TypeError as e:
            raise TypeError('linear: {}'.format(e)) from None
        _args.same_device(inputs, 'linear')
        inputs = _promoted(inputs)
        x, w = inputs[:2]
    n_batch_axes = _args.int_arg(n_batch_axes, 'n_batch_axes', op='linear')
    if n_batch_axes < 1:
        raise ValueError('linear: n_batch_axes must be at least 1, not {}'.format(
            n_batch_axes))
    if n_batch_axes >= x.ndim:
        raise _args.DimensionError(
            'linear: n_batch_axes {} leaves no feature axis in x of shape {}'.format(
                n_batch_axes, x.shape))
    n_batch_axes = int(n_batch_axes)
    n_features = _prod(x.shape[n_batch_axes:])
    if w.ndim != 2 or w.shape[1] != n_features:
        raise _args.DimensionError(
            'linear: w must have shape (M, {}) for x of shape {} with n_batch_axes={}, '
            'not {}'.format(n_features, x.shape, n_batch_axes, w.shape))
    if b is not None and inputs[2].shape != (w.shape[0],):
        raise _args.DimensionError('linear: b must have shape ({},) for w of shape {}, '
                                   'not {}'.format(w.shape[0], w.shape, inputs[2].shape))
    return _args.apply(Linear(x.shape[:n_batch_axes], n_features), *inputs)


# ---------------------------------------------------------------------------
# Registry

def _tensordot_ref(a, b, axes=2):
    return numpy.tensordot(a, b, axes)


register(OpInfo(
    'tensordot', tensordot, ref=_tensordot_ref, int_dtypes=INT_DTYPES + (BOOL,),
    promotion='result_type',
    samples=(Sample((2, 3, 4), (3, 4, 2)), Sample((2, 3), (3, 2), axes=1),
             Sample((2, 3), (4,), axes=0), Sample((3, 2, 4), (4, 3), axes=([0, 2], [1, 0])),
             Sample((2, 3), (3, 2), axes=([-1], [0])), Sample((3,), (3,), axes=(0, 0)),
             Sample((), (2, 3), axes=0), Sample((0, 3), (3, 2), axes=1),
             Sample((2, 0), (0, 3), axes=1))))


def _linear_ref(x, w, b=None, n_batch_axes=1):
    batch = x.shape[:n_batch_axes]
    y = numpy.tensordot(x.reshape(_prod(batch), _prod(x.shape[n_batch_axes:])), w, (1, 1))
    if b is not None:
        y = y + b
    return y.reshape(batch + (w.shape[0],))


register(OpInfo(
    'linear', linear, ref=_linear_ref, int_dtypes=INT_DTYPES + (BOOL,),
    promotion='result_type',
    samples=(Sample((2, 3), (4, 3), (4,)), Sample((2, 3), (4, 3)),
             Sample((2, 3, 2), (4, 6), (4,)), Sample((2, 3, 2), (4, 2), (4,), n_batch_axes=2),
             Sample((0, 3), (4, 3), (4,)), Sample((2, 3), (0, 3), (0,)),
             Sample((2, 0), (4, 0), (4,)))))


# ---------------------------------------------------------------------------
# dot

def dot(a, b):
    """``numpy.dot``: a product for 0-d operands, ``matmul`` up to 2-d, and
    for N-d operands the sum over the last axis of ``a`` and the
    second-to-last of ``b`` (its only axis when 1-d). The result is
    C-contiguous, as NumPy's. Without a float operand there is no gradient,
    and NumPy's ``dot`` computes it (bool included)."""
    if (isinstance(a, _args.ndarray) and isinstance(b, _args.ndarray) and a.dtype is b.dtype
            and a.dtype.kind == 'f' and 0 < a.ndim <= 2 and 0 < b.ndim <= 2
            and a.shape[-1] == b.shape[0]):
        return matmul(a, b)  # the common case, answered before the general checks
    x1 = _args.as_array(a, 'a', b if isinstance(b, _args.ndarray) else None)
    x2 = _args.as_array(b, 'b', x1)
    n1, n2 = x1.ndim, x2.ndim
    if n1 and n2 and x1.shape[n1 - 1] != x2.shape[max(n2 - 2, 0)]:
        raise _args.DimensionError('dot: shapes {} and {} are not aligned'.format(
            x1.shape, x2.shape))
    # Both operands in the result dtype first (NumPy 1.x would let a 0-d
    # operand's value decide); a bool or integer one has no gradient anyway.
    dtype = _args.result_dtype(x1, x2)
    if x1.dtype.kind != 'f' and x2.dtype.kind != 'f':
        raw1, raw2 = _args.raw(x1), _args.raw(x2)
        return _args.wrap(_args.module_of(raw1).dot(
            raw1.astype(dtype, copy=False), raw2.astype(dtype, copy=False)), x1)
    if x1.dtype != dtype:
        x1 = x1.astype(dtype)
    if x2.dtype != dtype:
        x2 = x2.astype(dtype)
    if n1 == 0 or n2 == 0:
        return x1 * x2
    if n1 > 2 or n2 > 2:
        y = tensordot(x1, x2, ([n1 - 1], [max(n2 - 2, 0)]))
        # NumPy's fresh C-order strides (an empty result's too)
        return y if y.is_contiguous and y.size else y.copy()
    return matmul(x1, x2)


register(OpInfo('dot', dot, ref=numpy.dot,
                samples=PRODUCT_SAMPLES + (Sample((), (2, 3)), Sample((2, 2, 3), (3,)),
                                            Sample((2, 3), (4, 3, 2)),
                                            Sample((2, 1, 3), (2, 3, 2))),
                int_dtypes=INT_DTYPES + (BOOL,), promotion='result_type'))
