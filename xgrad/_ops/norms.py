"""Vector and matrix norms: ``xgrad.linalg.norm``, NumPy's ``linalg.norm``.

ChainerX has no ``norm``, so the signature, the ``ord`` values and the
results (dtypes, empty input) are NumPy's. Vector norms are taken along one
axis, matrix norms over two; integer input is computed in float64.

The Euclidean/Frobenius norm is one op (the most used one, with a zero
gradient at the origin rather than NaN); the others are composed of
differentiable ops. The spectral (``ord=2``, ``-2``) and nuclear (``'nuc'``)
norms go through an SVD whose gradient is written with matrix products, so
every norm here is differentiable twice where it is smooth: away from zero
entries for ``ord=1``/``inf``, from ties between the maximized sums, and from
repeated or zero singular values for the SVD-based norms.

Nothing here is exported at the top level (``__all__`` is empty): ``norm``
is public as ``xgrad.linalg.norm`` only.
"""

import numbers

import numpy

from xgrad._errors import describe
from xgrad._ops import _args, _lapack
from xgrad._ops._op import PyOp
from xgrad._ops._singular import require_distinct, require_nonzero
from xgrad._ops.elementwise import absolute
from xgrad._ops.manipulation import astype, reshape, transpose
from xgrad._ops.reduction import sum as _sum
from xgrad._ops.registry import BOOL, INT_DTYPES, OpInfo, Sample, register
from xgrad._ops.statistics import amax, amin

__all__ = []

INF = float('inf')


# ---------------------------------------------------------------------------
# The Euclidean norm

class L2Norm(PyOp):
    """y = sqrt(sum(x**2)) over axes; gx = gy x / y, taken as 0 where y = 0
    (the subgradient PyTorch uses) instead of NaN."""
    op_name = 'norm'

    def __init__(self, axes, keepdims):
        self.axes, self.keepdims = axes, keepdims

    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        self.retain_outputs((0,))
        work = x.astype(numpy.float32) if x.dtype == numpy.float16 else x
        xp = _args.module_of(work)
        y = xp.sqrt(xp.add.reduce(work * work, axis=self.axes, keepdims=self.keepdims))
        return (_args.array_result(y).astype(x.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        x, = xs
        gy, y = gys[0], ys[0]
        if not self.keepdims:
            kept = tuple(1 if i in self.axes else n for i, n in enumerate(x.shape))
            gy, y = xp.reshape(gy, kept), xp.reshape(y, kept)
        return (gy * x / xp.where(y == 0, 1, y),)


def _l2(x, axes, keepdims):
    return _args.apply(L2Norm(axes, keepdims), x)


# ---------------------------------------------------------------------------
# Singular values (for ord 2, -2 and 'nuc')

def _rows(xp, v):
    """v (..., k) as (..., 1, k): scales the columns of a (..., m, k) matrix."""
    return xp.reshape(v, v.shape[:-1] + (1, v.shape[-1]))


def _cols(xp, v):
    """v (..., k) as (..., k, 1): scales the rows of a (..., k, n) matrix."""
    return xp.reshape(v, v.shape + (1,))


class Svd(PyOp):
    """The reduced SVD of a stack of matrices, a = u diag(s) vt (float16 is
    decomposed in float32). Its gradient is the full one (for s, u and vt;
    Townsend, "Differentiating the Singular Value Decomposition", 2016),
    written with matrix products so that it is differentiable again. It
    needs distinct singular values (and nonzero ones for a non-square
    matrix) at the rank tolerance of xgrad._ops._singular: LinAlgError
    naming ``caller`` (the routine the user called: svd, pinv) otherwise."""
    op_name = 'svd'

    def __init__(self, caller='svd'):
        self.caller = caller

    def forward(self, inputs):
        a, = inputs
        self.retain_outputs((0, 1, 2))
        work = numpy.float32 if a.dtype == numpy.float16 else a.dtype
        u, s, vt = _lapack.svd(self.caller, a.astype(work, copy=False),
                               full_matrices=False)
        return tuple(v.astype(a.dtype, copy=False) for v in (u, s, vt))

    def grads(self, xp, targets, gys, xs, ys):
        u, s, vt = ys
        gu, gs, gvt = gys
        m, k, n = u.shape[-2], s.shape[-1], vt.shape[-1]
        eye = xp.constant(numpy.eye(k, dtype=bool), s)
        swap = lambda v: xp.swapaxes(v, -1, -2)  # NOQA: E731
        inner = None  # the k x k middle factor of u @ inner @ vt

        def add(a, b):
            return b if a is None else a + b

        if gs is not None:
            inner = xp.where(eye, _rows(xp, gs), 0)
        if gu is not None or gvt is not None:
            require_distinct(s, max(m, n), '{}: no gradient of the singular vectors where '
                             'singular values are repeated'.format(self.caller))
            s2 = s * s
            # f[i, j] = 1 / (s_j**2 - s_i**2) off the diagonal, 0 on it.
            f = xp.where(eye, 0, 1 / xp.where(eye, 1, _rows(xp, s2) - _cols(xp, s2)))
        if gu is not None:
            utgu = xp.matmul(swap(u), gu)
            inner = add(inner, f * (utgu - swap(utgu)) * _rows(xp, s))
        if gvt is not None:
            vtgv = xp.matmul(vt, swap(gvt))
            inner = add(inner, _cols(xp, s) * (f * (vtgv - swap(vtgv))))
        ga = None if inner is None else xp.matmul(xp.matmul(u, inner), vt)
        if (gu is not None and m > k) or (gvt is not None and n > k):
            require_nonzero(s, max(m, n), '{}: no gradient of the singular vectors where a '
                            'is rank-deficient (a zero singular value)'.format(self.caller))
        if gu is not None and m > k:
            # (I - u u^T) gu diag(1/s) vt: the part of gu outside span(u).
            ga = add(ga, xp.matmul((gu - xp.matmul(u, utgu)) / _rows(xp, s), vt))
        if gvt is not None and n > k:
            # u diag(1/s) gvt (I - v v^T)
            ga = add(ga, xp.matmul(u, (gvt - xp.matmul(xp.matmul(gvt, swap(vt)), vt))
                                   / _cols(xp, s)))
        return (ga,)


def _singular_values(x):
    """The singular values (descending) of the matrices in the last two axes."""
    return _args.apply(Svd(), x)[1]


# ---------------------------------------------------------------------------
# norm

def _max0(y, axes, keepdims):
    """amax over axes of a nonnegative ``y``; 0 over empty axes (NumPy)."""
    if any(y.shape[i] == 0 for i in axes):
        return _sum(y, axis=axes, keepdims=keepdims)
    return amax(y, axis=axes, keepdims=keepdims)


def _min(y, axes, keepdims):
    if any(y.shape[i] == 0 for i in axes):
        raise _args.DimensionError('norm: the minimum over an empty axis is undefined '
                                   '(array of shape {}, axes {})'.format(y.shape, axes))
    return amin(y, axis=axes, keepdims=keepdims)


def _norm_axes(axis, ndim):
    """``axis`` (None, an int, or a tuple of one or two ints) as a tuple of
    distinct non-negative axes."""
    if axis is None:
        return None
    items = (axis,) if isinstance(axis, (int, numpy.integer)) else axis
    try:
        items = tuple(items)
    except TypeError:
        raise TypeError('norm: axis must be None, an int or a tuple of ints, not '
                        '{}'.format(type(axis).__name__)) from None
    if len(items) not in (1, 2):
        raise ValueError('norm: axis must name 1 (vector norm) or 2 (matrix norm) '
                         'axes, not {}'.format(describe(axis)))
    axes = tuple(_args.normalize_axis(a, ndim, 'norm: axis') for a in items)
    if len(set(axes)) != len(axes):
        raise _args.DimensionError('norm: axis {!r} repeats an axis'.format(axis))
    return axes


def _vector_norm(x, ord, axis, keepdims):
    axes = (axis,)
    if ord is None or ord == 2:
        return _l2(x, axes, keepdims)
    if ord == INF:
        return _max0(absolute(x), axes, keepdims)
    if ord == -INF:
        return _min(absolute(x), axes, keepdims)
    if ord == 0:
        # The number of nonzeros: piecewise constant, so no gradient.
        return _args.constant(x, lambda: _args.array_result(numpy.sum(
            _args.raw(x) != 0, axis=axis, keepdims=keepdims)).astype(x.dtype))
    if ord == 1:
        return _sum(absolute(x), axis=axes, keepdims=keepdims)
    with numpy.errstate(divide='ignore'):  # (0 ** negative) = inf, as in NumPy
        return _sum(absolute(x) ** ord, axis=axes, keepdims=keepdims) ** (1.0 / ord)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    if ord in (None, 'fro'):
        return _l2(x, tuple(sorted(axes)), keepdims)
    if ord in (1, -1, INF, -INF):
        # 1: the largest column sum of |x|; inf: the largest row sum.
        summed, reduced = (row, col) if ord in (1, -1) else (col, row)
        sums = _sum(absolute(x), axis=summed, keepdims=True)
        y = (_max0 if ord > 0 else _min)(sums, (reduced,), True)
    elif ord in (2, -2, 'nuc'):
        others = [i for i in range(x.ndim) if i not in axes]
        perm = others + [row, col]
        stacked = x if perm == list(range(x.ndim)) else transpose(x, perm)
        s = _singular_values(stacked)
        last = (s.ndim - 1,)
        y = (_sum(s, axis=last) if ord == 'nuc' else
             _max0(s, last, False) if ord == 2 else _min(s, last, False))
        kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        return reshape(y, kept) if keepdims else y
    else:
        raise ValueError('norm: invalid norm order {!r} for matrices'.format(ord))
    if keepdims:
        return y
    return reshape(y, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def norm(x, ord=None, axis=None, keepdims=False):
    """The norm of ``x`` (NumPy's ``linalg.norm``).

    ``axis`` an int: vector norms along it; a pair: matrix norms over those
    two axes; None: the vector norm of a 1-D ``x``, the matrix norm of a 2-D
    one, and with ``ord`` None the 2-norm of any ``x`` flattened.

    Vector ``ord``: None or 2 (Euclidean), 1, inf (max |x|), -inf (min |x|),
    0 (the number of nonzeros; no gradient), or any other number p
    ((sum |x|**p)**(1/p)). Matrix ``ord``: None or 'fro' (Frobenius), 'nuc'
    (the sum of singular values), 1 / -1 (max / min column sum of |x|), inf /
    -inf (max / min row sum), 2 / -2 (largest / smallest singular value).
    Another ``ord`` raises ValueError naming it.

    The Euclidean and Frobenius norms have gradient x / norm, taken as 0 at
    x = 0."""
    try:
        x = _args.as_array(x, 'x')
    except TypeError as e:
        raise TypeError('norm: {}'.format(e)) from None
    if x.dtype.kind != 'f':
        x = astype(x, numpy.float64)
    if not isinstance(keepdims, (bool, numpy.bool_, numbers.Integral)):
        raise TypeError('norm: keepdims must be a bool, not {}'.format(
            type(keepdims).__name__))
    keepdims = bool(keepdims)
    if not (ord is None or isinstance(ord, str) or
            (isinstance(ord, numbers.Real) and not isinstance(ord, bool))):
        raise TypeError('norm: ord must be None, a number, \'fro\' or \'nuc\', not '
                        '{!r}'.format(ord))
    axes = _norm_axes(axis, x.ndim)
    if axes is None:
        if ord is None:
            return _l2(x, tuple(range(x.ndim)), keepdims)
        if x.ndim not in (1, 2):
            raise ValueError('norm: ord={!r} without axis needs a 1-D or 2-D x, not '
                             'shape {}'.format(ord, x.shape))
        axes = tuple(range(x.ndim))
    if len(axes) == 1:
        if isinstance(ord, str):
            raise ValueError('norm: invalid norm order {!r} for vectors'.format(ord))
        return _vector_norm(x, ord, axes[0], keepdims)
    return _matrix_norm(x, ord, axes, keepdims)


# ---------------------------------------------------------------------------
# Registry

def _untied_magnitudes(rs, shape):
    """Random signs, magnitudes in [0.3, 1.5] at least 0.24 / size apart:
    away from the kinks of |x| at 0 and from ties of max |x| (jittered, so
    sums of them do not tie either)."""
    n = int(numpy.prod(shape, dtype=numpy.int64))
    mags = 0.3 + (rs.permutation(n) + rs.uniform(0.1, 0.9, n)) * (1.2 / max(n, 1))
    return (rs.choice([-1.0, 1.0], n) * mags).reshape(shape)


def _norm_ref(x, ord=None, axis=None, keepdims=False):
    dtype = x.dtype if x.dtype.kind == 'f' else numpy.dtype(numpy.float64)
    with numpy.errstate(divide='ignore'):
        y = numpy.linalg.norm(x.astype(numpy.float64), ord, axis, keepdims)
    return _args.array_result(y).astype(dtype)


register(OpInfo(
    'linalg.norm', norm, ref=_norm_ref, domain=_untied_magnitudes,
    int_dtypes=INT_DTYPES + (BOOL,),
    samples=(Sample((2, 3)), Sample((2, 3, 2)), Sample(()), Sample((0, 3)),
             Sample((2, 3), axis=1), Sample((2, 3), axis=-2, keepdims=True),
             Sample((4,), ord=1), Sample((4,), ord=INF), Sample((4,), ord=-INF),
             Sample((4,), ord=3), Sample((4,), ord=0.5), Sample((2, 3), ord=1, axis=0),
             Sample((2, 3), ord='fro'), Sample((2, 3, 2), ord='fro', axis=(2, 0)),
             Sample((2, 3), ord=1), Sample((2, 3), ord=-1), Sample((3, 2), ord=INF),
             Sample((3, 2), ord=-INF, keepdims=True),
             Sample((2, 3), ord='nuc'), Sample((3, 2), ord=2), Sample((2, 3), ord=-2),
             Sample((2, 3, 2), ord='nuc', axis=(0, 2)),
             Sample((3, 2), ord=2, axis=(1, 0), keepdims=True))))
