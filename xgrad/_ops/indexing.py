"""Indexing: ``take`` (elements along an axis by integer indices), ``nonzero``
(the indices of the nonzero elements; no gradient), and the registry entry of
``getitem`` (``a[key]``, implemented in Cython in manipulation.pyx).

``take``'s gradient adds gy back onto the taken positions, summing the
contributions of repeated indices. That is its own op, ``TakeGrad``, whose
gradient is ``Take`` again (so take is differentiable any number of times).
On the host ``TakeGrad`` adds whole rows of gy in one native pass
(xgrad/_backend/scatter_kernels.pyx), with the sums ``add.at`` gives; on a
GPU one ``add.at`` at flat indices.
"""

from typing import Tuple

import numpy

from xgrad import _core, _device
from xgrad._backend import scatter_kernels
from xgrad._ops import _args
from xgrad._ops._linear import LinearPair
from xgrad._ops.manipulation import getitem, reshape
from xgrad._ops.registry import BOOL, Arg, OpInfo, Sample, integers, register

__all__ = ['take', 'nonzero', 'getitem']

_INTS = (numpy.int64, numpy.int32, BOOL)
_MODES = ('raise', 'wrap', 'clip')


# ---------------------------------------------------------------------------
# take

class _TakePlan:
    """In-bounds, non-negative ``indices`` along ``axis`` of arrays of
    ``shape``; the indices move to the GPU once, with the first GPU data."""

    def __init__(self, indices, axis, shape):
        self.indices = indices
        self.axis = axis
        self.shape = shape

    def indices_for(self, x):
        self.indices = _args.on_device_of(x, self.indices)
        return self.indices


class Take(LinearPair):
    """``numpy.take`` along the plan's axis; its gradient, ``TakeGrad``, adds
    gy at those indices into zeros of the input's shape."""
    op_name = 'take'

    def compute(self, x):
        p = self.plan
        return _args.array_result(_args.module_of(x).take(x, p.indices_for(x), axis=p.axis))


class TakeGrad(LinearPair):
    """Zeros of the plan's shape with gy added at its indices (the adjoint of
    ``Take``)."""
    op_name = 'take_grad'

    def compute(self, gy):
        p = self.plan
        return _add_at(gy, p.indices_for(gy), p.axis, p.shape)


Take.adjoint, TakeGrad.adjoint = TakeGrad, Take


def take_checked(x, indices, axis):
    """``take`` of xgrad array ``x`` with raw ``indices`` that are already
    in bounds and non-negative along ``axis`` (recorded)."""
    return _args.apply(Take(_TakePlan(indices, axis, x.shape)), x)


def _add_at(gy, indices, axis, shape):
    """Zeros of ``shape`` plus the slices of ``gy`` (shaped like
    ``take(zeros(shape), indices, axis)``) added at ``indices`` along ``axis``:
    on the host by scatter_kernels' row adds, else as one ``add.at`` on the
    flat arrays (its fast 1-d path)."""
    out = scatter_kernels.scatter_rows(gy, indices, axis, tuple(shape))
    if out is not None:
        return out
    xp = _args.module_of(gy)
    outer = int(numpy.prod(shape[:axis], dtype=numpy.int64))
    inner = int(numpy.prod(shape[axis + 1:], dtype=numpy.int64))
    flat = ((xp.arange(outer)[:, None, None] * shape[axis]
             + indices.reshape(1, -1, 1)) * inner + xp.arange(inner))
    size = outer * shape[axis] * inner
    out = _device.raw_namespace_of(xp).scatter(gy.reshape(-1), flat.reshape(-1), (size,))
    return out.reshape(shape)


def _integer_indices(indices):
    """``indices`` as a raw NumPy integer array (TypeError for what is not
    array-like, DtypeError for non-integer values)."""
    if isinstance(indices, _args.ndarray):
        idx = _args.raw(indices)
    elif indices is None or isinstance(indices, (str, bytes, dict, set)):
        raise TypeError('take: indices must be an int or an array of ints, not {}'
                        .format(type(indices).__name__))
    else:
        try:
            idx = numpy.asarray(indices)
        except (TypeError, ValueError):
            raise TypeError('take: indices must be an int or an array of ints, not {}'
                            .format(type(indices).__name__)) from None
        if idx.size == 0 and idx.dtype.kind == 'f':
            idx = idx.astype(numpy.intp)  # [] is float64 to NumPy
    if idx.dtype.kind not in 'iu':
        raise _args.DtypeError('take: indices must have an integer dtype, not {}'
                               .format(idx.dtype))
    # intp leaves room for idx + n (uint64 ones are never negative anyway).
    return idx if idx.dtype == numpy.uint64 else idx.astype(numpy.intp, copy=False)


def take(a, indices, axis=None, mode=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (``axis=None``: of the
    flattened array, as in NumPy; ChainerX requires an axis). ``mode`` says
    what out-of-bounds indices do: 'raise' an xgrad.IndexError (ChainerX's
    native default, used for None), 'wrap' around, or 'clip' to the ends.
    Unlike NumPy, out-of-bounds indices raise even when the result is empty
    (NumPy reads no element then, so checks none)."""
    x = _args.as_array(a, 'take: a')
    idx = _integer_indices(indices)
    if mode is None:
        mode = 'raise'
    if mode not in _MODES:
        raise ValueError("take: mode must be 'raise', 'wrap' or 'clip', not {!r}"
                         .format(mode))
    if axis is None or x.ndim == 0:
        # NumPy takes axis 0 (or -1) of a 0-d array as that of its flattening.
        ax = 0 if axis is None else _args.normalize_axis(axis, 1, 'take: axis')
        axis, n = None, x.size
    else:
        ax = _args.normalize_axis(axis, x.ndim, 'take: axis')
        n = x.shape[ax]
    if idx.size and n == 0:
        raise _args.IndexError('take: cannot take {} indices from axis {} of size 0'
                               .format(idx.size, ax))
    if idx.size:
        if mode == 'raise':
            bad = (idx < -n) | (idx >= n)
            if bad.any():
                raise _args.IndexError('take: index {} is out of bounds for axis {} with '
                                       'size {}'.format(idx[bad].flat[0], ax, n))
            idx = _args.module_of(idx).where(idx < 0, idx + n, idx)
        elif mode == 'wrap':
            idx = idx % n
        else:
            idx = _args.module_of(idx).clip(idx, 0, n - 1)
    idx = idx.astype(numpy.intp, copy=False)
    if axis is None:
        x = reshape(x, (n,))
    return take_checked(x, idx, ax)


# ---------------------------------------------------------------------------
# nonzero

def nonzero(a) -> Tuple[_core.ndarray, ...]:
    """The indices of the nonzero elements, one int64 array per axis (no
    gradient). 0-d arrays raise DimensionError, as NumPy 2 refuses them."""
    x = _args.as_array(a, 'nonzero: a')
    if x.ndim == 0:
        raise _args.DimensionError('nonzero: a is 0-d; use nonzero(atleast_2d(a)) or '
                                   'index an array with at least one dimension')
    with _args.scope(x):
        return tuple(_args.wrap(i.astype(numpy.int64, copy=False), x)
                     for i in _args.module_of(_args.raw(x)).nonzero(_args.raw(x)))


# ---------------------------------------------------------------------------
# Registry

def _sparse(rs, shape):
    """About half exact zeros, the rest away from zero (nonzero's input)."""
    return (rs.uniform(0, 1, shape) < 0.5) * rs.uniform(0.5, 1, shape)


def _take_call(f, xs, kw):
    return f(xs[0], xs[1], **kw)


_INDEX = numpy.int64
register(OpInfo('take', take, ref=numpy.take, int_dtypes=_INTS, samples=[
    Sample((3, 4), Arg((5,), integers(0, 3), _INDEX), axis=0),
    Sample((3, 4), Arg((2, 3), integers(-4, 4), _INDEX), axis=-1),
    Sample((3, 4), Arg((6,), integers(-12, 12), _INDEX)),
    Sample((2, 3, 2), Arg((), integers(0, 3), _INDEX), axis=1),
    Sample((3,), Arg((4,), integers(-9, 9), _INDEX), axis=0, mode='wrap'),
    Sample((3,), Arg((4,), integers(-9, 9), _INDEX), axis=0, mode='clip'),
    Sample((), Arg((3,), integers(0, 1), _INDEX)),
    Sample((), Arg((2,), integers(-1, 1), _INDEX), axis=-1),
    Sample((0, 3), Arg((2,), integers(0, 3), _INDEX), axis=1),
    Sample((3, 2), Arg((0,), integers(0, 3), _INDEX), axis=0)], call=_take_call))

register(OpInfo('nonzero', nonzero, ref=numpy.nonzero, domain=_sparse,
                differentiable=False, int_dtypes=_INTS,
                samples=[Sample((3, 4)), Sample((5,)), Sample((2, 3, 2)), Sample((0, 3))]))


def _getitem_call(f, xs, kw):
    return f(xs[0], kw['key'])


def _key_sample(shape, key, name):
    return Sample(shape, key=key, name=name)


_MASK = numpy.array([[True, False, True, False], [False, False, True, True],
                     [True, True, False, False]])
register(OpInfo('getitem', getitem, ref=lambda x, key: x[key], call=_getitem_call,
                int_dtypes=_INTS, samples=[
                    _key_sample((3, 4), (slice(None), slice(1, None)), 'slices'),
                    _key_sample((3, 4), (1, slice(None, None, 2)), 'int-step'),
                    _key_sample((3, 4), (slice(None, None, -1), slice(3, 0, -2)),
                                'negative-steps'),
                    _key_sample((3, 4), (-1,), 'negative-int'),
                    _key_sample((2, 3, 4), (None, Ellipsis, 1), 'none-ellipsis'),
                    _key_sample((3, 4), numpy.array([0, 2, 0, 0]), 'repeated-ints'),
                    _key_sample((3, 4), (slice(None), numpy.array([[3, 3], [0, 3]])),
                                'repeated-ints-2d'),
                    _key_sample((3, 4), (numpy.array([[0], [2]]), numpy.array([1, 0, 1])),
                                'broadcast-arrays'),
                    _key_sample((3, 4), _MASK, 'bool-mask'),
                    _key_sample((3, 4), numpy.array([True, False, True]), 'bool-rows'),
                    _key_sample((), (), '0d-empty-key'),
                    _key_sample((), None, '0d-newaxis'),
                    _key_sample((0, 3), (slice(None), 1), 'empty'),
                    _key_sample((3,), numpy.array([], dtype=numpy.int64), 'no-indices')]))
