"""Reductions beyond sum and mean: var, std, prod, amax/amin (max/min),
argmax/argmin, cumsum, nansum, count_nonzero, and the softmax family
(logsumexp, softmax, log_softmax).

Names, arguments and defaults are ChainerX's (chainerx_cc/chainerx/python/
routines.cc); ``std`` and ``prod``, which ChainerX lacks, take NumPy's. Result
dtypes are ChainerX's (xgrad/_dtypes.pyx, docs/dtype_promotion.md): bool and
integer arrays sum (cumsum, nansum) into int64, and their variances and the
softmax family are computed in float32.

Every gradient is written once against an array namespace ``xp`` (see
``_op.pyx``), so each op here is differentiable twice and more.
"""

import functools
import warnings

import numpy

from xgrad._backend import cuda, native_kernels, scan_kernels
from xgrad._errors import describe
from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops._xp import numpy_ns
from xgrad._ops.manipulation import reshape
from xgrad._ops.registry import (
    BOOL, INT_DTYPES, OpInfo, Sample, distinct, register, within)

__all__ = ['var', 'std', 'prod', 'amax', 'amin', 'max', 'min', 'argmax', 'argmin',
           'nanargmax', 'nanargmin', 'cumsum', 'nansum', 'count_nonzero', 'logsumexp', 'softmax', 'log_softmax']

ALL_INTS = INT_DTYPES + (BOOL,)


# ---------------------------------------------------------------------------
# Shared argument handling

def _input(op, a, name='a'):
    return _args.as_array(a, name, op=op)


def _axes(op, axis, ndim):
    return _args.normalize_axes(axis, ndim, op=op)


def _one_axis(op, axis, ndim):
    """``axis`` (None or int) as a non-negative axis or None."""
    return None if axis is None else _args.normalize_axis(axis, ndim, op=op)


def _kept_shape(shape, axes):
    """``shape`` with the reduced ``axes`` as 1s (keepdims)."""
    if len(axes) == len(shape):
        return (1,) * len(shape)
    return tuple([1 if i in axes else n for i, n in enumerate(shape)])


def _unreduce(xp, a, in_shape, axes, keepdims):
    """A reduction's output (or its gradient) reshaped to broadcast against
    the input."""
    return a if keepdims else xp.reshape(a, _kept_shape(in_shape, axes))


def _count(shape, axes):
    n = 1
    for i in axes:
        n *= shape[i]
    return n


# ---------------------------------------------------------------------------
# var, std

def _variance(x, axes, keepdims, ddof):
    """NumPy's ``var`` without its Python overhead: float32 for bool and
    integer input (ChainerX's rule), float16 computed in float32; nan (0/0)
    or inf where n <= ddof."""
    dtype = _args.promoted_float(x.dtype)
    work = numpy.float32 if dtype == numpy.float16 else dtype
    x = x.astype(work, copy=False)
    n = _count(x.shape, axes)
    if n == 0:
        return _args.module_of(x).full(_reduced_shape(x.shape, axes, keepdims), numpy.nan,
                                       dtype)
    xp = _args.module_of(x)
    c = _args.array_result(x - xp.add.reduce(x, axis=axes, keepdims=True) / n)
    y = xp.add.reduce(xp.multiply(c, c, out=c), axis=axes, keepdims=keepdims)
    if n > ddof:
        y = y / (n - ddof)
    else:
        with numpy.errstate(divide='ignore', invalid='ignore'):
            y = y / 0.0
    return _args.array_result(y).astype(dtype, copy=False)


def _reduced_shape(shape, axes, keepdims):
    return _kept_shape(shape, axes) if keepdims else tuple(
        n for i, n in enumerate(shape) if i not in axes)


class _Reduction(PyOp):
    """A reduction over ``axes``: ``reduce(x)`` on the raw input, and
    ``grad(xp, x, gy, y)`` with gy (and y, when ``uses_output``) reshaped to
    broadcast against x. ``params`` become attributes (ddof, dtype...)."""
    uses_output = False

    def __init__(self, axes, keepdims, **params):
        self.axes, self.keepdims = axes, keepdims
        self.__dict__.update(params)

    def forward(self, inputs):
        self.retain_inputs((0,))
        if self.uses_output:
            self.retain_outputs((0,))
        return (_args.array_result(self.reduce(inputs[0])),)

    def grads(self, xp, targets, gys, xs, ys):
        x, = xs
        gy = _unreduce(xp, gys[0], x.shape, self.axes, self.keepdims)
        y = _unreduce(xp, ys[0], x.shape, self.axes, self.keepdims) if ys else None
        return (self.grad(xp, x, gy, y),)

class Var(_Reduction):
    """y = mean((x - mean(x))**2) * n / (n - ddof); gx = gy * 2 (x - mean(x)) /
    (n - ddof)."""
    op_name = 'var'

    def reduce(self, x):
        return _variance(x, self.axes, self.keepdims, self.ddof)

    def grad(self, xp, x, gy, y):
        n = _count(x.shape, self.axes)
        if n == 0:
            return xp.broadcast_to(gy, x.shape)  # empty
        centered = x - xp.mean(x, axis=self.axes, keepdims=True)
        return gy * centered * _safe_ratio(2.0, n - self.ddof)


class Std(_Reduction):
    """y = sqrt(var(x)); gx = gy (x - mean(x)) / ((n - ddof) y). At zero
    variance the gradient has a pole (nan), as sqrt does at 0."""
    op_name = 'std'
    uses_output = True

    def reduce(self, x):
        v = _variance(x, self.axes, self.keepdims, self.ddof)
        return _args.module_of(v).sqrt(v, out=v)

    def grad(self, xp, x, gy, y):
        n = _count(x.shape, self.axes)
        if n == 0:
            return xp.broadcast_to(gy, x.shape)  # empty
        centered = x - xp.mean(x, axis=self.axes, keepdims=True)
        return gy * centered / y * _safe_ratio(1.0, n - self.ddof)


def _safe_ratio(num, den):
    return num / den if den > 0 else float('nan')


def _moment(op, cls):
    def reduce(a, axis=None, keepdims=False, ddof=0):
        a = _input(op, a)
        axes = _axes(op, axis, a.ndim)
        if isinstance(ddof, bool) or not isinstance(ddof, (int, numpy.integer)) or ddof < 0:
            raise (ValueError if isinstance(ddof, (int, numpy.integer)) else TypeError)(
                '{}: ddof must be a non-negative int, not {}'.format(op, describe(ddof)))
        return _args.apply(cls(axes, bool(keepdims), ddof=int(ddof)), a)
    reduce.__name__ = reduce.__qualname__ = op
    return reduce


var = _moment('var', Var)
var.__doc__ = """The variance of ``a`` over ``axis`` (None: all axes), NumPy's
population variance: the mean squared deviation, divided by ``n - ddof``
instead of ``n`` when ``ddof`` is given (ChainerX's ``var`` has no ``ddof``;
it is an xgrad keyword with NumPy's meaning). Integer input gives float64."""

std = _moment('std', Std)
std.__doc__ = """The standard deviation ``sqrt(var(a, axis, keepdims, ddof))``
(NumPy's ``std``; ChainerX has none). Its gradient has a pole where the
variance is 0."""


# ---------------------------------------------------------------------------
# prod

# Up to this many reduced elements (and this many elements in the n-fold
# masked copy) the exclusive products are one masked product over an n x n
# array per row: two NumPy calls, where the prefix and suffix products take
# eight on the arrays of a training step. Larger, the masked copy would
# cost n times the input's memory.
_SMALL_EXCLUSIVE = 16
_SMALL_EXCLUSIVE_ELEMENTS = 1 << 16


def _exclusive_raw(x):
    """E[..., i] = prod_{k != i} x[..., k] on raw data (NumPy or CuPy),
    exact when some x are 0, unlike prod(x) / x[i]: for a short last axis
    the product of each row of x with x_i set to 1, else products from the
    left times products from the right. float16 works in float32."""
    work = x.astype(numpy.float32) if x.dtype == numpy.float16 else x
    xp = _args.module_of(x)
    n = work.shape[-1]
    if n <= _SMALL_EXCLUSIVE and work.size * n <= _SMALL_EXCLUSIVE_ELEMENTS:
        if xp is numpy:
            rows = numpy.where(_eye_mask(n), work.dtype.type(1), work[..., None, :])
            out = numpy.multiply.reduce(rows, axis=-1)
        else:
            out = xp.where(xp.eye(n, dtype=bool), 1, work[..., None, :]).prod(axis=-1)
        return out.astype(x.dtype, copy=False)
    out = xp.ones(work.shape, work.dtype)
    work[..., :-1].cumprod(axis=-1, out=out[..., 1:])
    out[..., :-1] *= work[..., :0:-1].cumprod(axis=-1)[..., ::-1]
    return out.astype(x.dtype, copy=False)


@functools.lru_cache(maxsize=None)
def _eye_mask(n):
    mask = numpy.eye(n, dtype=bool)
    mask.flags.writeable = False
    return mask


def _exclusive(xp, x):
    """Products of all-but-one along the last axis, recorded when ``x`` is an
    xgrad array (double backprop), raw otherwise."""
    if not isinstance(x, _args.ndarray):  # raw data (NumPy or CuPy)
        return _exclusive_raw(x)
    return _args.apply(ExclusiveProd(), x)


class ExclusiveProd(PyOp):
    """E_i = prod_{k != i} x_k along the last axis (the gradient of prod).

    Its own gradient, gx_j = sum_{i != j} gE_i prod_{k not in {i, j}} x_k, is
    again an exclusive product: of the n x n array whose row i is x with x_i
    set to 1 (so O(n^2) work, only when differentiating prod twice), with the
    diagonal masked. It is exact with zeros and differentiable again."""
    op_name = 'prod_grad'

    def forward(self, inputs):
        self.retain_inputs((0,))
        return (_exclusive_raw(inputs[0]),)

    def grads(self, xp, targets, gys, xs, ys):
        x, = xs
        ge = gys[0]
        n = x.shape[-1]
        eye = xp.constant(numpy.eye(n, dtype=bool), ge)
        rows = xp.where(eye, 1, xp.reshape(x, x.shape[:-1] + (1, n)))
        d = xp.where(eye, 0, _exclusive(xp, rows))
        return (xp.sum(xp.reshape(ge, ge.shape + (1,)) * d, axis=-2),)


class Prod(_Reduction):
    """y = prod(x over axes); gx = gy * (product of the other elements),
    computed without dividing by x, so it is right where x is 0."""
    op_name = 'prod'

    def reduce(self, x):
        if type(x) is numpy.ndarray:  # (numpy.prod is a Python wrapper of this)
            return numpy.multiply.reduce(x, axis=self.axes, keepdims=self.keepdims)
        return _args.module_of(x).prod(x, axis=self.axes, keepdims=self.keepdims)

    def grad(self, xp, x, gy, y):
        # The reduced axes last (moved there unless they are already), flattened into one.
        kept = x.ndim - len(self.axes)
        moved = self.axes != tuple(range(kept, x.ndim))
        if moved:
            perm = [i for i in range(x.ndim) if i not in self.axes] + list(self.axes)
            x = xp.transpose(x, perm)
        shape = x.shape
        flat = xp.reshape(x, shape[:kept] + (_count(shape, range(kept, x.ndim)),))
        others = xp.reshape(_exclusive(xp, flat), shape)
        if moved:
            others = xp.transpose(others, [perm.index(i) for i in range(x.ndim)])
        return gy * others


def prod(a, axis=None, keepdims=False):
    """The product of ``a`` over ``axis`` (None: all axes); NumPy's ``prod``
    (ChainerX has none). Integer input gives NumPy's int64/uint64.

    The gradient of each element is the product of the others, computed
    without division, so it is exact where elements are 0. Differentiating
    it again costs O(n^2) in the number n of reduced elements per output."""
    a = _input('prod', a)
    return _args.apply(Prod(_axes('prod', axis, a.ndim), bool(keepdims)), a)


# ---------------------------------------------------------------------------
# amax, amin

def _host_trailing(x, axes):
    """Whether ``axes`` are the trailing axes of the host array ``x`` (the
    native row kernels' reductions)."""
    return type(x) is numpy.ndarray and axes == tuple(range(x.ndim - len(axes), x.ndim))


def _reduce_extremum(x, axes, keepdims, minimum=False):
    """The maximum (``minimum``: the minimum) of raw ``x`` over ``axes``:
    over trailing axes of a contiguous host float32/64 array one vector
    pass a row (native_kernels.extremum_trailing), else NumPy's (CuPy's)."""
    if _host_trailing(x, axes):
        y = native_kernels.extremum_trailing(x, x.ndim - len(axes), minimum)
        if y is not None:
            return y.reshape(_kept_shape(x.shape, axes)) if keepdims else y
    xp = _args.module_of(x)
    return (xp.amin if minimum else xp.amax)(x, axis=axes, keepdims=keepdims)


class _Extremum(_Reduction):
    """y = max (min) over axes; the gradient goes, undivided, to every
    element equal to the result (ChainerX's rule for ties)."""
    minimum = False
    uses_output = True

    def reduce(self, x):
        return _reduce_extremum(x, self.axes, self.keepdims, self.minimum)

    def grads(self, xp, targets, gys, xs, ys):
        x = xs[0]
        if _host_trailing(x, self.axes):
            gx = native_kernels.extremum_trailing_grad(gys[0], x, ys[0])  # (or None)
            if gx is not None:
                return (gx,)
        return super().grads(xp, targets, gys, xs, ys)

    def grad(self, xp, x, gy, y):
        return xp.where(x == y, gy, 0)


class AMax(_Extremum):
    op_name = 'amax'


class AMin(_Extremum):
    op_name = 'amin'
    minimum = True


def _extremum(op, cls, what):
    def reduce(a, axis=None, keepdims=False):
        a = _input(op, a)
        axes = _axes(op, axis, a.ndim)
        for i in axes:
            if a.shape[i] == 0:
                raise _args.DimensionError(
                    '{}: cannot compute the {} along zero-sized axis {} of an array '
                    'with shape {}'.format(op, what, i, a.shape))
        return _args.apply(cls(axes, bool(keepdims)), a)
    reduce.__name__ = reduce.__qualname__ = op
    reduce.__doc__ = """The {what} of ``a`` over ``axis`` (None: all axes); NaN
    if a reduced element is NaN. Reducing a zero-sized axis raises
    DimensionError (ChainerX; NumPy raises ValueError).

    Ties: every element equal to the {what} gets the whole output gradient
    (ChainerX's rule; it is not split among them).""".format(what=what)
    return reduce


amax = _extremum('amax', AMax, 'maximum')
amin = _extremum('amin', AMin, 'minimum')


# ---------------------------------------------------------------------------
# argmax, argmin, count_nonzero: integer results, no gradient

def _arg_extremum(op, finder, what, method=None):
    def find(a, axis=None):
        a = _input(op, a)
        axis = _one_axis(op, axis, a.ndim)
        if (a.size == 0 if axis is None else a.shape[axis] == 0):
            raise _args.DimensionError(
                '{}: cannot find the {} of an empty sequence (array of shape {}, '
                'axis {})'.format(op, what, a.shape, axis))
        raw = _args.raw(a)
        if method is not None and type(raw) is numpy.ndarray:
            return _args.wrap(numpy.asarray(getattr(raw, method)(axis), numpy.int64), a)
        if method is not None:  # the array's own (NumPy's function wraps it)
            found = getattr(raw, method)
            return _args.constant(a, lambda: _args.array_result(
                found(axis=axis)).astype(numpy.int64, copy=False))
        found = _args.in_module(finder, _args.module_of(raw))
        return _args.constant(a, lambda: _args.array_result(
            found(raw, axis=axis)).astype(numpy.int64, copy=False))
    find.__name__ = find.__qualname__ = op
    find.__doc__ = """The int64 index of the {what} of ``a`` along ``axis``
    (None: of the flattened array); the first one on ties. No gradient.""".format(
        what=what)
    return find


argmax = _arg_extremum('argmax', numpy.argmax, 'maximum', 'argmax')
argmin = _arg_extremum('argmin', numpy.argmin, 'minimum', 'argmin')
nanargmax = _arg_extremum('nanargmax', numpy.nanargmax, 'maximum ignoring NaNs')
nanargmin = _arg_extremum('nanargmin', numpy.nanargmin, 'minimum ignoring NaNs')


def count_nonzero(a, axis=None):
    """The number (int64) of nonzero elements of ``a`` over ``axis`` (None:
    all axes). No gradient."""
    a = _input('count_nonzero', a)
    axes = _axes('count_nonzero', axis, a.ndim)
    raw = _args.raw(a)
    if type(raw) is numpy.ndarray and len(axes) == raw.ndim:  # NumPy's C count
        return _args.wrap(numpy.asarray(numpy.count_nonzero(raw), numpy.int64), a)
    return _args.constant(a, _count_nonzero, raw, axes)


def _count_nonzero(raw, axes):
    if len(axes) == raw.ndim:  # all axes: NumPy's C count (with axes, a Python sum)
        axes = None
    counts = _args.array_result(_args.module_of(raw).count_nonzero(raw, axis=axes))
    return counts.astype(numpy.int64, copy=False)


# ---------------------------------------------------------------------------
# cumsum, nansum

def _sum_dtype(dtype):
    """ChainerX sums bool and integers (uint8 too) into int64."""
    return numpy.int64 if dtype.kind in 'biu' else None


def _host_scan(a, axis, reverse=False):
    """scan_kernels.cumsum of a host float32/float64 array (made contiguous:
    NumPy's strided running sum is no faster), else None."""
    if type(a) is not numpy.ndarray or a.dtype.char not in 'fd':
        return None
    return scan_kernels.cumsum(numpy.ascontiguousarray(a), axis, reverse)


class Cumsum(PyOp):
    """y = running sum along ``axis``; gx = the running sum of gy taken from
    the end (flip, cumsum, flip). On the host, float32/float64 run
    scan_kernels' loops (NumPy's bits)."""
    op_name = 'cumsum'

    def __init__(self, axis):
        self.axis = axis

    def forward(self, inputs):
        x = inputs[0]
        y = _host_scan(x, self.axis)
        if y is None:
            y = _args.module_of(x).cumsum(x, axis=self.axis, dtype=_sum_dtype(x.dtype))
        return (y,)

    def grads(self, xp, targets, gys, xs, ys):
        gy = gys[0]
        if xp is numpy_ns:
            gx = _host_scan(gy, self.axis, reverse=True)
            if gx is not None:
                return (gx,)
        flip = (slice(None),) * self.axis + (slice(None, None, -1),)
        return (xp.getitem(xp.cumsum(xp.getitem(gy, flip), axis=self.axis), flip),)


def cumsum(a, axis=None):
    """The running sum of ``a`` along ``axis``; None: of the flattened array
    (the result is 1-D). Bool and integer input sums in int64 (ChainerX)."""
    a = _input('cumsum', a)
    axis = _one_axis('cumsum', axis, a.ndim)
    if axis is None:
        a = reshape(a, (a.size,)) if a.ndim != 1 else a
        axis = 0
    return _args.apply(Cumsum(axis), a)


class Nansum(_Reduction):
    """y = sum over axes of the non-NaN elements; gx = gy where x is not NaN,
    0 where it is."""
    op_name = 'nansum'

    def reduce(self, x):
        return _args.module_of(x).nansum(x, axis=self.axes, keepdims=self.keepdims,
                                         dtype=_sum_dtype(x.dtype))

    def grad(self, xp, x, gy, y):
        return xp.where(xp.isnan(x), 0, gy)


def nansum(a, axis=None, keepdims=False):
    """The sum of ``a`` over ``axis`` (None: all axes) treating NaN as 0.
    NaN elements get a zero gradient."""
    a = _input('nansum', a)
    return _args.apply(Nansum(_axes('nansum', axis, a.ndim), bool(keepdims)), a)


# ---------------------------------------------------------------------------
# logsumexp, softmax, log_softmax
#
# Computed stably: the maximum is subtracted before exp (and carries no
# gradient: the results do not depend on it). float16 input is computed in
# float32 and rounded once.

def _shifted(x, axes, dtype):
    """(x - max over axes) in the working precision, and the max (keepdims;
    0 where it is not finite or the axes are empty)."""
    work = numpy.dtype(numpy.float32) if dtype == numpy.float16 else dtype
    x = x.astype(work, copy=False)
    if any(x.shape[i] == 0 for i in axes):
        m = _args.module_of(x).zeros(_kept_shape(x.shape, axes), work)
    else:
        xp = _args.module_of(x)
        m = _reduce_extremum(x, axes, True)
        m = xp.where(xp.isfinite(m), m, work.type(0))
    return _args.array_result(x - m), m  # 0-d: an array, not a NumPy scalar


class LogSumExp(_Reduction):
    """y = log(sum(exp(x))) over axes; gx = gy * exp(x - y) (the softmax)."""
    op_name = 'logsumexp'
    uses_output = True

    def reduce(self, x):
        z, m = _shifted(x, self.axes, self.dtype)
        xp = _args.module_of(z)
        with numpy.errstate(divide='ignore'):  # log(0) = -inf over empty axes
            y = xp.log(xp.add.reduce(xp.exp(z, out=z), axis=self.axes, keepdims=True)) + m
        if not self.keepdims:
            y = y.reshape([n for i, n in enumerate(y.shape) if i not in self.axes])
        return y.astype(self.dtype, copy=False)

    def grad(self, xp, x, gy, y):
        return gy * xp.exp(x - y)


class Softmax(PyOp):
    """y = exp(x) / sum(exp(x)) over axes; gx = y (gy - sum(gy y))."""
    op_name = 'softmax'

    def __init__(self, axes, dtype):
        self.axes, self.dtype = axes, dtype

    def forward(self, inputs):
        self.retain_outputs((0,))
        if _our_gpu_kernel(inputs[0], self):
            return (cuda.kernels().softmax(cuda.cupy(), inputs[0], self.axes[0]),)
        y = _native_one_axis(inputs[0], self, log=False)
        if y is not None:
            return (y,)
        z, _ = _shifted(inputs[0], self.axes, self.dtype)
        xp = _args.module_of(z)
        e = xp.exp(z, out=z)
        e /= xp.add.reduce(e, axis=self.axes, keepdims=True)
        return (e.astype(self.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        y, = ys
        gy = gys[0]
        if xp is not numpy_ns and xp.raw and _our_gpu_kernel(gy, self):
            return (cuda.kernels().softmax_backward(cuda.cupy(), gy, y, self.axes[0]),)
        if xp is numpy_ns and len(self.axes) == 1:
            gx = native_kernels.softmax_axis_grad(gy, y, self.axes[0], False)
            if gx is not None:
                return (gx,)
        return (y * (gy - xp.sum(gy * y, axis=self.axes, keepdims=True)),)


class LogSoftmax(PyOp):
    """y = x - logsumexp(x) over axes; gx = gy - exp(y) sum(gy)."""
    op_name = 'log_softmax'

    def __init__(self, axes, dtype):
        self.axes, self.dtype = axes, dtype

    def forward(self, inputs):
        self.retain_outputs((0,))
        if _our_gpu_kernel(inputs[0], self):
            return (cuda.kernels().softmax(cuda.cupy(), inputs[0], self.axes[0], log=True),)
        y = _native_one_axis(inputs[0], self, log=True)
        if y is not None:
            return (y,)
        z, _ = _shifted(inputs[0], self.axes, self.dtype)
        xp = _args.module_of(z)
        with numpy.errstate(divide='ignore'):  # log(0) over empty axes
            z -= xp.log(xp.add.reduce(xp.exp(z), axis=self.axes, keepdims=True))
        return (z.astype(self.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        y, = ys
        gy = gys[0]
        if xp is not numpy_ns and xp.raw and _our_gpu_kernel(gy, self):
            return (cuda.kernels().softmax_backward(cuda.cupy(), gy, y, self.axes[0],
                                                    log=True),)
        if xp is numpy_ns and len(self.axes) == 1:
            gx = native_kernels.softmax_axis_grad(gy, y, self.axes[0], True)
            if gx is not None:
                return (gx,)
        return (gy - xp.exp(y) * xp.sum(gy, axis=self.axes, keepdims=True),)


def _native_one_axis(x, op, log):
    """The native kernels' (log-)softmax when it is over one axis of a NumPy
    float32/64 array in the op's dtype, or of bools or ints (cast to it, as
    ChainerX computes them; so that they give the float input's values):
    the rows kernel for the last axis, column tiles for another; else None."""
    if len(op.axes) != 1 or type(x) is not numpy.ndarray:
        return None
    if x.dtype != op.dtype:
        if x.dtype.kind not in 'biu':
            return None
        x = x.astype(op.dtype)
    return native_kernels.softmax_axis(x, op.axes[0], log)


def _our_gpu_kernel(a, op):
    """Whether our softmax kernels take ``a``: GPU data of the op's float
    dtype, over one axis."""
    return cuda.on_gpu(a) and a.dtype == op.dtype and len(op.axes) == 1


def _float_input(op, x):
    x = _input(op, x, 'x')
    return x, _args.promoted_float(x.dtype)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) over ``axis`` (None: all axes), without overflow:
    ``logsumexp([1000, 1000])`` is 1000 + log 2. Over an empty axis it is
    -inf. Bool and integer input is computed in float32 (ChainerX)."""
    x, dtype = _float_input('logsumexp', x)
    return _args.apply(LogSumExp(_axes('logsumexp', axis, x.ndim), bool(keepdims),
                                 dtype=dtype), x)


def _softmax_axes(op, axis, ndim):
    """ChainerX's softmax axes: None means axis 1 (the channel axis of a
    batch), not all axes (chainerx_cc/chainerx/routines/reduction.cc)."""
    return _axes(op, 1 if axis is None else axis, ndim)


def softmax(x, axis=None):
    """exp(x) / sum(exp(x)) over ``axis``, stable for large x (rows of
    ``softmax([[1000, 1000]])`` are [0.5, 0.5]). ``axis`` is an int or a tuple;
    None means axis 1, as in ChainerX (``Softmax`` in chainerx_cc/chainerx/
    routines/reduction.cc), so a 1-D ``x`` needs an explicit axis. Integer
    input is computed in the float dtype ``numpy.exp`` gives."""
    x, dtype = _float_input('softmax', x)
    return _args.apply(Softmax(_softmax_axes('softmax', axis, x.ndim), dtype), x)


def log_softmax(x, axis=None):
    """x - logsumexp(x, axis, keepdims=True), computed stably. As in ChainerX
    (``LogSoftmax`` in chainerx_cc/chainerx/routines/reduction.cc), ``axis``
    None means axis 1. Integer input is computed in the float dtype
    ``numpy.exp`` gives."""
    x, dtype = _float_input('log_softmax', x)
    return _args.apply(LogSoftmax(_softmax_axes('log_softmax', axis, x.ndim), dtype), x)


# ---------------------------------------------------------------------------
# Registry

REDUCTION_SAMPLES = (
    Sample((2, 3)), Sample((2, 3), axis=1), Sample((2, 3), axis=-1),
    Sample((2, 3, 2), axis=(0, 2)), Sample((2, 3), axis=0, keepdims=True),
    Sample((2, 3, 2), axis=(0, 2), keepdims=True), Sample(()), Sample((0, 3), axis=1),
    Sample((0, 3)))
# Reductions that need a nonempty reduced axis (max, argmax...).
NONEMPTY_SAMPLES = tuple(s for s in REDUCTION_SAMPLES if s.name != '0x3')


def _std_samples():
    """The reduction samples but the 0-d one: one element has zero variance,
    where std's gradient has a pole."""
    return tuple(s for s in REDUCTION_SAMPLES if s.name != '0d')


def _var_ref(a, axis=None, keepdims=False, ddof=0):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        return numpy.var(a, axis=axis, keepdims=keepdims, ddof=ddof)


def _std_ref(a, axis=None, keepdims=False, ddof=0):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        return numpy.std(a, axis=axis, keepdims=keepdims, ddof=ddof)


register(OpInfo('var', var, ref=_var_ref, int_dtypes=ALL_INTS, promotion='float',
                samples=REDUCTION_SAMPLES + (Sample((3, 2), axis=0, ddof=1),)))
# distinct: no two reduced elements close together, so no standard deviation
# near its pole at 0 (ill-conditioned second derivatives)
register(OpInfo('std', std, ref=_std_ref, int_dtypes=ALL_INTS, domain=distinct,
                promotion='float',
                samples=_std_samples() + (Sample((3, 2), axis=0, ddof=1),)))
register(OpInfo('prod', prod, ref=numpy.prod, int_dtypes=ALL_INTS,
                domain=within(-1.5, 1.5), samples=REDUCTION_SAMPLES))
register(OpInfo('amax', amax, ref=numpy.amax, int_dtypes=ALL_INTS, domain=distinct,
                samples=NONEMPTY_SAMPLES))
register(OpInfo('amin', amin, ref=numpy.amin, int_dtypes=ALL_INTS, domain=distinct,
                samples=NONEMPTY_SAMPLES))


def _with_nans(rs, shape):
    """Uniform in [-1, 1], about a quarter NaN."""
    return numpy.where(rs.uniform(0, 1, shape) < 0.25, numpy.nan, rs.uniform(-1, 1, shape))


def _first_nan(rs, shape):
    """Distinct values with a NaN first (no slice of a sample is all NaN)."""
    x = distinct(rs, shape)
    x.reshape(-1)[:1] = numpy.nan
    return x


def _half_zeros(rs, shape):
    return (rs.uniform(0, 1, shape) < 0.5) * 1.0


register(OpInfo('nansum', nansum, ref=numpy.nansum, int_dtypes=ALL_INTS, domain=_with_nans,
                promotion='int64_sum',
                samples=REDUCTION_SAMPLES))


def _int64(f):
    def ref(a, axis=None):
        return _args.array_result(f(a, axis=axis)).astype(numpy.int64)
    return ref


_ARG_SAMPLES = (Sample((2, 3)), Sample((2, 3), axis=1), Sample((2, 3), axis=-2),
                Sample(()), Sample((0, 3), axis=1))
register(OpInfo('argmax', argmax, ref=_int64(numpy.argmax), domain=distinct,
                int_dtypes=ALL_INTS, differentiable=False, samples=_ARG_SAMPLES))
register(OpInfo('argmin', argmin, ref=_int64(numpy.argmin), domain=distinct,
                int_dtypes=ALL_INTS, differentiable=False, samples=_ARG_SAMPLES))
for _f, _ref in ((nanargmax, numpy.nanargmax), (nanargmin, numpy.nanargmin)):
    register(OpInfo(_f.__name__, _f, ref=_int64(_ref), domain=_first_nan,
                    int_dtypes=ALL_INTS, differentiable=False,
                    samples=(Sample((2, 3)), Sample((2, 3), axis=1), Sample((2, 3), axis=-2))))
register(OpInfo('count_nonzero', count_nonzero, ref=_int64(numpy.count_nonzero),
                domain=_half_zeros,
                int_dtypes=ALL_INTS, differentiable=False,
                samples=(Sample((2, 3)), Sample((2, 3), axis=1), Sample((2, 3, 2), axis=(0, 2)),
                         Sample((2, 3), axis=-1), Sample(()), Sample((0, 3), axis=0))))
register(OpInfo('cumsum', cumsum, ref=numpy.cumsum, int_dtypes=ALL_INTS, promotion='int64_sum',
                samples=(Sample((2, 3)), Sample((2, 3), axis=1), Sample((2, 3), axis=-2),
                         Sample(()), Sample((4,), axis=0), Sample((0, 3), axis=1))))


def _exp_dtype(a):
    return _args.promoted_float(a.dtype)


def _ref_shift(a, axis):
    """a in float64 minus its max over ``axis`` (0 where not finite)."""
    x = a.astype(numpy.float64)
    m = numpy.max(x, axis=axis, keepdims=True, initial=-numpy.inf)
    m = numpy.where(numpy.isfinite(m), m, 0)
    return x - m, m


def _logsumexp_ref(a, axis=None, keepdims=False):
    z, m = _ref_shift(a, axis)
    with numpy.errstate(divide='ignore'):
        y = numpy.log(numpy.exp(z).sum(axis=axis, keepdims=True)) + m
    if not keepdims:
        y = numpy.squeeze(y, axis=tuple(range(a.ndim)) if axis is None else axis)
    return y.astype(_exp_dtype(a))


def _softmax_ref(a, axis=None):
    axis = 1 if axis is None else axis
    e = numpy.exp(_ref_shift(a, axis)[0])
    return (e / e.sum(axis, keepdims=True)).astype(_exp_dtype(a))


def _log_softmax_ref(a, axis=None):
    axis = 1 if axis is None else axis
    z = _ref_shift(a, axis)[0]
    return (z - numpy.log(numpy.exp(z).sum(axis, keepdims=True))).astype(_exp_dtype(a))


register(OpInfo('logsumexp', logsumexp, ref=_logsumexp_ref, int_dtypes=ALL_INTS, promotion='float',
                samples=REDUCTION_SAMPLES))
_SOFTMAX_SAMPLES = (Sample((2, 3)), Sample((2, 3, 2)), Sample((2, 3), axis=0),
                    Sample((2, 3), axis=-1), Sample((2, 3, 2), axis=(0, 2)),
                    Sample((0, 3)), Sample((2, 3, 0), axis=2))
register(OpInfo('softmax', softmax, ref=_softmax_ref, int_dtypes=ALL_INTS, promotion='float',
                samples=_SOFTMAX_SAMPLES))
register(OpInfo('log_softmax', log_softmax, ref=_log_softmax_ref, int_dtypes=ALL_INTS,
                promotion='float',
                samples=_SOFTMAX_SAMPLES))

max = amax
min = amin
