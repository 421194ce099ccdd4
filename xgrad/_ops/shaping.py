"""Array manipulation: joining (concatenate, stack, hstack, vstack, dstack),
splitting (split, hsplit, vsplit, dsplit), repeat, flips, triangles, diag,
and the view-like reshapes (ravel, moveaxis, atleast_2d, atleast_3d).

Two ops are written here because a composition would be slow:
``Concatenate`` (one copy of every input; its gradient is one split of the
output gradient) and ``Split`` (one multi-output op; its gradient is one
concatenation of the output gradients). Each is the other's gradient, so
both are differentiable any number of times. ``Repeat`` is a third: NumPy's
repeat forward, and a reshape-and-sum backward (per-element counts are a
``Take`` of repeated indices, whose gradient adds the copies up).

tril/triu are one op masking with a constant triangle (``Triangle``).
Everything else is an exact composition of existing differentiable ops:
ravel/atleast_* are reshapes, moveaxis a transpose, the flips indexing with
reversed slices, and diag an indexing (2-d in) or a scatter (1-d in) along
the diagonal.

Arguments are checked before anything is recorded; the errors name the op and
the argument (and the shapes or axes at fault). NumPy's semantics throughout:
negative axes, empty and 0-d arrays where NumPy takes them, NumPy's result
dtypes (concatenating int32 with float32 gives float64).
"""

import itertools
from typing import List

import numpy

from xgrad import _core
from xgrad._backend import native_kernels
from xgrad._errors import describe
from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops._xp import numpy_ns, tri_mask
from xgrad._ops.indexing import take_checked
from xgrad._ops.manipulation import (
    _insert_axes, getitem, reshape, scatter, transpose, view, to_device)
from xgrad._ops.reduction import broadcast_to
from xgrad._ops.registry import BOOL, OpInfo, Sample, register

__all__ = ['ravel', 'moveaxis', 'concatenate', 'stack', 'hstack', 'vstack', 'dstack',
           'split', 'hsplit', 'vsplit', 'dsplit', 'repeat', 'flip', 'fliplr', 'flipud',
           'tril', 'triu', 'diag', 'atleast_2d', 'atleast_3d', 'rollaxis', 'diagflat',
           'meshgrid']

_INTS = (numpy.int64, numpy.int32, BOOL)


# ---------------------------------------------------------------------------
# Joining

def _join_on_the_pool(xs, axis):
    """numpy.concatenate(xs, axis) for large host arrays of one dtype, each
    copied into its slice of the result on the pool (copy_into); None where
    that does not run (small, mixed dtypes, one thread): NumPy's then."""
    dtype = xs[0].dtype
    if not native_kernels.splits(sum(x.size for x in xs)) or any(
            type(x) is not numpy.ndarray or x.dtype != dtype for x in xs):
        return None
    shape = list(xs[0].shape)
    axis %= len(shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out = numpy.empty(shape, dtype)
    start = 0
    index = [slice(None)] * len(shape)
    for x in xs:
        index[axis] = slice(start, start + x.shape[axis])
        part = out[tuple(index)]
        if not native_kernels.copy_into(part, x):
            numpy.copyto(part, x)
        start += x.shape[axis]
    return out


class Concatenate(PyOp):
    """The inputs, each reshaped to its joining shape (stack's new axis,
    concatenate(axis=None)'s flattening), joined along ``axis`` in one copy;
    the gradient is one split of gy at the inputs' boundaries, each piece
    reshaped back and cast to its input's dtype. One op however many inputs
    need reshaping (not one reshape op each)."""
    op_name = 'concatenate'

    def __init__(self, axis, shapes, dtypes):
        self.axis = axis
        self.shapes = shapes
        self.offsets = list(itertools.accumulate(s[axis] for s in shapes[:-1]))
        self.dtypes = dtypes

    def forward(self, inputs):
        self.in_shapes = tuple(x.shape for x in inputs)
        xs = [x if x.shape == s else x.reshape(s) for x, s in zip(inputs, self.shapes)]
        if type(xs[0]) is numpy.ndarray:
            out = _join_on_the_pool(xs, self.axis)
            if out is not None:
                return (out,)
        return (_args.module_of(inputs[0]).concatenate(xs, axis=self.axis),)

    def grads(self, xp, targets, gys, xs, ys):
        pieces = xp.split(gys[0], self.offsets, self.axis)
        out = []
        for t in targets:
            g = pieces[t]
            if g.shape != self.in_shapes[t]:
                g = xp.reshape(g, self.in_shapes[t])
            out.append(xp.cast(g, self.dtypes[t]))
        return tuple(out)


def _arrays(arrays, op):
    """The sequence ``arrays`` as a list of xgrad arrays on one device."""
    if isinstance(arrays, (_args.ndarray, numpy.ndarray, str, bytes, dict, set)):
        raise TypeError('{}: arrays must be a sequence of arrays, not {}'.format(
            op, type(arrays).__name__))
    try:
        items = list(arrays)
    except TypeError:
        raise TypeError('{}: arrays must be a sequence of arrays, not {}'.format(
            op, type(arrays).__name__)) from None
    if not items:
        raise _args.DimensionError('{}: need at least one array to join'.format(op))
    like = next((a for a in items if isinstance(a, _args.ndarray)), None)
    xs = [_args.as_array(a, '{}: arrays[{}]'.format(op, i), like)
          for i, a in enumerate(items)]
    _args.same_device(xs, op)
    return xs


def _join(op, xs, shapes, axis):
    """Concatenate ``xs`` reshaped to ``shapes`` along ``axis``; every shape
    is checked before the first op is recorded."""
    ndim = len(shapes[0])
    if ndim == 0:
        raise _args.DimensionError('{}: zero-dimensional arrays cannot be '
                                   'concatenated'.format(op))
    for i, s in enumerate(shapes):
        if len(s) != ndim:
            raise _args.DimensionError(
                '{}: all arrays must have the same number of dimensions, but '
                'arrays[0] has shape {} and arrays[{}] has shape {}'.format(
                    op, shapes[0], i, s))
    axis = _args.normalize_axis(axis, ndim, op + ': axis')
    rest = shapes[0][:axis] + shapes[0][axis + 1:]
    if any(s[:axis] + s[axis + 1:] != rest for s in shapes):
        raise _args.DimensionError(
            '{}: shapes {} differ outside the concatenation axis {}'.format(
                op, ', '.join(map(str, shapes)), axis))
    # ChainerX's promotion over all inputs (float16 with int64 is float16);
    # the casts are recorded, so each gradient returns in its input's dtype.
    dtype = _args.result_dtype(*xs)
    xs = [x if x.dtype == dtype else x.astype(dtype) for x in xs]
    return _args.apply(Concatenate(axis, shapes, [x.dtype for x in xs]), *xs)


def concatenate(arrays, axis=0):
    """Join ``arrays`` along an existing axis (``axis=None``: flattened)."""
    xs = _arrays(arrays, 'concatenate')
    if axis is None:
        return _join('concatenate', xs, [(x.size,) for x in xs], 0)
    return _join('concatenate', xs, [x.shape for x in xs], axis)


def stack(arrays, axis=0):
    """Join arrays of one shape along a new axis ``axis``."""
    xs = _arrays(arrays, 'stack')
    shape = xs[0].shape
    for i, x in enumerate(xs):
        if x.shape != shape:
            raise _args.DimensionError(
                'stack: all arrays must have the same shape, but arrays[0] has '
                'shape {} and arrays[{}] has shape {}'.format(shape, i, x.shape))
    axis = _args.normalize_axis(axis, len(shape) + 1, 'stack: axis')
    return _join('stack', xs, [shape[:axis] + (1,) + shape[axis:]] * len(xs), axis)


def _lift(shape, ndim):
    """NumPy's atleast_{1,2,3}d shape for ``shape``: (n,) -> (1, n) ->
    (1, n, 1); (m, n) -> (m, n, 1)."""
    if len(shape) >= ndim:
        return shape
    if ndim == 3 and len(shape) == 2:
        return shape + (1,)
    if ndim == 3 and len(shape) == 1:
        return (1,) + shape + (1,)
    return (1,) * (ndim - len(shape)) + shape


def hstack(arrays):
    """Join along the second axis (the first for 1-d arrays)."""
    xs = _arrays(arrays, 'hstack')
    shapes = [_lift(x.shape, 1) for x in xs]
    return _join('hstack', xs, shapes, 0 if len(shapes[0]) == 1 else 1)


def vstack(arrays):
    """Join along the first axis, 1-d arrays as rows."""
    xs = _arrays(arrays, 'vstack')
    return _join('vstack', xs, [_lift(x.shape, 2) for x in xs], 0)


def dstack(arrays):
    """Join along the third axis (depth), after ``atleast_3d``."""
    xs = _arrays(arrays, 'dstack')
    return _join('dstack', xs, [_lift(x.shape, 3) for x in xs], 2)


def atleast_2d(a):
    """``a`` with at least two dimensions (1-d arrays become rows); arrays
    that have them already come back as a view, as in ChainerX."""
    x = _args.as_array(a, 'atleast_2d: a')
    if x.ndim == 1:  # NumPy's a[newaxis, :]: the new axis has stride 0
        return _insert_axes(x, (None, slice(None)))
    return view(x) if x.ndim >= 2 else reshape(x, _lift(x.shape, 2))


def atleast_3d(a):
    """``a`` with at least three dimensions ((n,) -> (1, n, 1), (m, n) ->
    (m, n, 1)); arrays that have them already come back as a view."""
    x = _args.as_array(a, 'atleast_3d: a')
    if x.ndim in (1, 2):  # NumPy's a[newaxis, :, newaxis] and a[:, :, newaxis]
        return _insert_axes(x, (None, slice(None), None) if x.ndim == 1
                            else (slice(None), slice(None), None))
    return view(x) if x.ndim >= 3 else reshape(x, _lift(x.shape, 3))


# ---------------------------------------------------------------------------
# Splitting

class Split(PyOp):
    """Views of the input between ``bounds`` along ``axis``. The gradient
    concatenates the output gradients (zeros for outputs that got none); when
    the pieces do not tile the axis in order (indices like [3, 1] overlap), it
    adds each piece's gradient in at its place instead."""
    op_name = 'split'

    def __init__(self, axis, bounds, in_shape):
        self.axis = axis
        self.bounds = bounds
        self.in_shape = in_shape
        stops = [0] + [b for _, b in bounds]
        self.tiles = (stops[-1] == in_shape[axis]
                      and all(a == s for (a, _), s in zip(bounds, stops)))

    def _key(self, start, stop):
        return (slice(None),) * self.axis + (slice(start, stop),)

    def forward(self, inputs):
        return tuple(inputs[0][self._key(a, b)] for a, b in self.bounds)

    def grads(self, xp, targets, gys, xs, ys):
        like = next(g for g in gys if g is not None)
        if self.tiles:
            parts = []
            for (a, b), g in zip(self.bounds, gys):
                if g is None:
                    shape = list(self.in_shape)
                    shape[self.axis] = b - a
                    g = xp.constant(numpy.zeros(shape, like.dtype), like)
                parts.append(g)
            return (xp.concatenate(parts, self.axis),)
        total = None
        for (a, b), g in zip(self.bounds, gys):
            if g is not None:
                g = xp.scatter(g, self._key(a, b), self.in_shape)
                total = g if total is None else total + g
        return (total,)


def _sections(op, indices_or_sections):
    """``indices_or_sections`` as an int (sections) or a list of ints."""
    v = indices_or_sections
    if isinstance(v, (numpy.ndarray, _args.ndarray)) and v.ndim == 0:
        v = v.item()  # a 0-d array is a number of sections, as in NumPy
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, (numpy.ndarray, _args.ndarray)):
        v = _args.raw(v) if isinstance(v, _args.ndarray) else v
        if v.ndim > 1 or (v.size and v.dtype.kind not in 'iu'):
            raise TypeError('{}: indices_or_sections must be an int or a 1-d sequence '
                            'of ints, not a {}-d {} array'.format(op, v.ndim, v.dtype))
        v = v.tolist()
    if _args.is_int(v):
        return int(v)
    if isinstance(v, (list, tuple)) and all(_args.is_int(i) for i in v):
        return [int(i) for i in v]
    raise TypeError('{}: indices_or_sections must be an int or a sequence of ints, '
                    'not {}'.format(op, describe(indices_or_sections)))


def _split(op, ary, indices_or_sections, axis, min_ndim=0):
    x = _args.as_array(ary, op + ': ary')
    if x.ndim < min_ndim:
        raise _args.DimensionError('{}: ary must be at least {}-d, not {}-d (shape {})'
                                   .format(op, min_ndim, x.ndim, x.shape))
    sections = _sections(op, indices_or_sections)
    axis = _args.normalize_axis(axis, x.ndim, op + ': axis')
    n = x.shape[axis]
    if isinstance(sections, int):
        if sections <= 0:
            raise ValueError('{}: the number of sections must be positive, not {}'
                             .format(op, sections))
        if n % sections:
            raise ValueError('{}: array split does not result in an equal division '
                             '(axis {} of length {} into {} sections)'.format(
                                 op, axis, n, sections))
        # An empty axis splits into any number of parts: each is an array
        # (some hundred bytes), so the count is checked against memory first.
        _args.check_result_size((sections, 256), numpy.uint8, op,
                                '{} output arrays'.format(sections))
        step = n // sections
        bounds = [(i * step, (i + 1) * step) for i in range(sections)]
    else:
        # Python slicing of [0] + indices + [n] pairs, as NumPy does.
        points = [0] + sections + [n]
        bounds = []
        for lo, hi in zip(points[:-1], points[1:]):
            start, stop, _ = slice(lo, hi).indices(n)
            bounds.append((start, max(start, stop)))
    outs = _args.apply(Split(axis, bounds, x.shape), x)
    return list(outs) if isinstance(outs, tuple) else [outs]


def split(ary, indices_or_sections, axis=0) -> List[_core.ndarray]:
    """Split ``ary`` along ``axis`` into ``indices_or_sections`` equal parts
    (an int), or at the given indices (a sequence). Returns a list of views.
    An int that does not divide the axis raises ValueError, as in NumPy."""
    return _split('split', ary, indices_or_sections, axis)


def hsplit(ary, indices_or_sections) -> List[_core.ndarray]:
    """``split`` along the second axis (the first for 1-d arrays)."""
    x = _args.as_array(ary, 'hsplit: ary')
    return _split('hsplit', x, indices_or_sections, 1 if x.ndim > 1 else 0, 1)


def vsplit(ary, indices_or_sections) -> List[_core.ndarray]:
    """``split`` along the first axis of an array of at least 2 dimensions."""
    return _split('vsplit', ary, indices_or_sections, 0, 2)


def dsplit(ary, indices_or_sections) -> List[_core.ndarray]:
    """``split`` along the third axis of an array of at least 3 dimensions."""
    return _split('dsplit', ary, indices_or_sections, 2, 3)


# ---------------------------------------------------------------------------
# Reshapes, transposes, repeat

def ravel(a):
    """The elements of ``a`` as a 1-d array (a reshape)."""
    x = _args.as_array(a, 'ravel: a')
    return reshape(x, (x.size,))


def _axes_in_order(op, axes, ndim, name):
    items = [axes] if _args.is_int(axes) else axes
    try:
        items = list(items)
    except TypeError:
        raise TypeError('{}: {} must be an int or a sequence of ints, not {}'.format(
            op, name, type(axes).__name__)) from None
    out = [_args.normalize_axis(a, ndim, '{}: {}'.format(op, name)) for a in items]
    if len(set(out)) != len(out):
        raise _args.DimensionError('{}: {} {} repeats an axis'.format(op, name, axes))
    return out


def moveaxis(a, source, destination):
    """Move axes ``source`` to positions ``destination``; the other axes keep
    their order (a transpose)."""
    x = _args.as_array(a, 'moveaxis: a')
    src = _axes_in_order('moveaxis', source, x.ndim, 'source')
    dst = _axes_in_order('moveaxis', destination, x.ndim, 'destination')
    if len(src) != len(dst):
        raise ValueError('moveaxis: source {} and destination {} must have the same '
                         'number of elements'.format(source, destination))
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


def rollaxis(a, axis, start=0):
    """Move ``axis`` to just before position ``start`` (NumPy's rollaxis)."""
    x = _args.as_array(a, 'rollaxis: a')
    axis = _args.normalize_axis(axis, x.ndim, 'rollaxis: axis')
    start = _args.int_arg(start, 'start', op='rollaxis')
    if not -x.ndim <= start <= x.ndim:
        raise _args.DimensionError('rollaxis: start {} is out of range for an array '
                                   'with {} dimensions'.format(start, x.ndim))
    if start < 0:
        start += x.ndim
    order = [i for i in range(x.ndim) if i != axis]
    order.insert(start - 1 if start > axis else start, axis)
    return transpose(x, order)


def meshgrid(*xi, indexing='xy') -> List[_core.ndarray]:
    """Coordinate arrays from 1-d coordinate vectors (NumPy's meshgrid,
    copied); ``indexing`` 'xy' (Cartesian) or 'ij' (matrix)."""
    if indexing not in ('xy', 'ij'):
        raise ValueError("meshgrid: indexing must be 'xy' or 'ij', not {!r}".format(
            indexing))
    xs = [ravel(_args.as_array(x, 'meshgrid: xi[{}]'.format(i))) for i, x in enumerate(xi)]
    shape = [x.size for x in xs]
    if indexing == 'xy' and len(xs) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        axis = i
        if indexing == 'xy' and len(xs) > 1 and i < 2:
            axis = 1 - i
        lifted = [1] * len(xs)
        lifted[axis] = x.size
        out.append(broadcast_to(reshape(x, tuple(lifted)), tuple(shape)).copy())
    return out


class Repeat(PyOp):
    """NumPy's repeat along ``axis``, each element ``repeats`` (an int) times;
    the gradient sums each element's copies (a reshape and a sum)."""
    op_name = 'repeat'

    def __init__(self, axis, repeats, in_shape):
        self.axis = axis
        self.repeats = repeats
        self.in_shape = in_shape

    def forward(self, inputs):
        return (_args.module_of(inputs[0]).repeat(inputs[0], self.repeats, axis=self.axis),)

    def grads(self, xp, targets, gys, xs, ys):
        axis, shape = self.axis, self.in_shape
        copies = shape[:axis] + (shape[axis], self.repeats) + shape[axis + 1:]
        if xp is numpy_ns and 0 < self.repeats < 8 and gys[0].dtype.char in 'fd':
            # The copies added one after another to 0: NumPy's own order for
            # a float32/64 sum of fewer than 8 (its pairwise sum starts at 8;
            # the 0 makes a lone -0.0 +0.0, as there; float16 sums in float32
            # there), without its reduce over a short strided axis (40x the
            # time for 2 copies).
            g = numpy.reshape(gys[0], copies)
            at = (slice(None),) * (axis + 1)
            total = numpy.add(g[at + (0,)], 0)
            for k in range(1, self.repeats):
                total += g[at + (k,)]
            return (total,)
        return (xp.sum(xp.reshape(gys[0], copies), axis=axis + 1),)


def _repeats(repeats, length):
    """``repeats`` as an int or a 1-d int64 array of ``length`` counts."""
    if isinstance(repeats, _args.ndarray):
        # The counts decide the result's shape: read on the host (an explicit
        # copy from a GPU, where NumPy may not read device data).
        repeats = repeats.to_numpy()
    if isinstance(repeats, (bool, numpy.bool_, str, bytes)) or repeats is None:
        raise TypeError('repeat: repeats must be an int or a sequence of ints, not {}'
                        .format(type(repeats).__name__))
    r = numpy.asarray(repeats)
    if r.dtype.kind not in 'iu' and not (r.size == 0 and r.dtype.kind == 'f'):
        raise TypeError('repeat: repeats must be an int or a sequence of ints, not {}'
                        .format(describe(repeats)))
    if r.ndim > 1:
        raise _args.DimensionError('repeat: repeats must be an int or a 1-d sequence, '
                                   'not of shape {}'.format(r.shape))
    if (r < 0).any():
        raise ValueError('repeat: repeats must not be negative, got {}'.format(repeats))
    if r.size == 1:
        return int(r.reshape(()))
    if r.size != length:
        raise _args.DimensionError(
            'repeat: {} repeats given for an axis of length {}'.format(r.size, length))
    return r.astype(numpy.int64)


def repeat(a, repeats, axis=None):
    """Repeat each element ``repeats`` times (an int, or one count per
    element) along ``axis``; ``axis=None`` repeats the flattened array. The
    gradient sums the copies of each element."""
    x = _args.as_array(a, 'repeat: a')
    if axis is None or x.ndim == 0:
        # NumPy takes axis 0 (or -1) of a 0-d array as that of its flattening.
        if axis is not None:
            _args.normalize_axis(axis, 1, 'repeat: axis')
        reps = _repeats(repeats, x.size)
        x, axis = ravel(x), 0
    else:
        axis = _args.normalize_axis(axis, x.ndim, 'repeat: axis')
        reps = _repeats(repeats, x.shape[axis])
    total = reps * x.shape[axis] if isinstance(reps, int) else int(numpy.sum(reps))
    _args.check_result_size(x.shape[:axis] + (total,) + x.shape[axis + 1:], x.dtype,
                            'repeat')
    if isinstance(reps, int):
        return _args.apply(Repeat(axis, reps, x.shape), x)
    # One count per element: a take of each element's index, repeated.
    source = numpy.repeat(numpy.arange(x.shape[axis]), reps)
    return take_checked(x, source, axis)


# ---------------------------------------------------------------------------
# Flips, triangles, diagonals

def _reversed(x, axes):
    return getitem(x, tuple(slice(None, None, -1) if i in axes else slice(None)
                            for i in range(x.ndim)))


def flip(m, axis=None):
    """Reverse the order of elements along ``axis`` (an int, a tuple, or None
    for all axes). The ChainerX docs call the argument ``axis``."""
    x = _args.as_array(m, 'flip: m')
    return _reversed(x, _args.normalize_axes(axis, x.ndim, 'flip: axis'))


def fliplr(m):
    """Reverse the columns (axis 1) of an array of at least 2 dimensions."""
    x = _args.as_array(m, 'fliplr: m')
    if x.ndim < 2:
        raise _args.DimensionError('fliplr: m must have at least 2 dimensions, not {} '
                                   '(shape {})'.format(x.ndim, x.shape))
    return _reversed(x, (1,))


def flipud(m):
    """Reverse the rows (axis 0) of an array of at least 1 dimension."""
    x = _args.as_array(m, 'flipud: m')
    if x.ndim < 1:
        raise _args.DimensionError('flipud: m must have at least 1 dimension, not 0')
    return _reversed(x, (0,))


class Triangle(PyOp):
    """tril/triu: x where a fixed mask holds, 0 elsewhere (NumPy's formula,
    which broadcasts a 1-d x to a square). Linear, so the gradient is gy
    masked the same way, summed back to x's shape. One op instead of
    ``where``'s general promotion and scalar handling."""

    def __init__(self, op_name, mask):
        self.op_name = op_name
        self.mask = mask  # NumPy bool, read-only

    def forward(self, inputs):
        x, = inputs
        self.shape = x.shape
        mask = _args.on_device_of(x, self.mask)
        y = _args.module_of(x).where(mask, x, x.dtype.type(0))
        return (_args.array_result(y).astype(x.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        gy = gys[0]
        gx = xp.where(xp.constant(self.mask, gy), gy, 0)  # (a weak 0 keeps gy's dtype)
        return (gx if gx.shape == self.shape else xp.sum_to(gx, self.shape),)


def _triangle(op, m, k, lower):
    x = _args.as_array(m, op + ': m')
    k = _args.int_arg(k, 'k', op=op)
    if x.ndim < 1:
        raise _args.DimensionError('{}: m must have at least 1 dimension, not 0'.format(op))
    # NumPy's own formula: the last two axes (a 1-d m broadcasts to a square).
    mask = tri_mask(*x.shape[-2:], k=k if lower else k - 1)
    return _args.apply(Triangle(op, mask if lower else ~mask), x)


def tril(m, k=0):
    """``m`` with the elements above the k-th diagonal zeroed (on the last two
    axes; a 1-d ``m`` is broadcast to a square first, as in NumPy)."""
    return _triangle('tril', m, k, True)


def triu(m, k=0):
    """``m`` with the elements below the k-th diagonal zeroed."""
    return _triangle('triu', m, k, False)


class Diagonal(PyOp):
    """The k-th diagonal of a 2-d array as a view (NumPy's and ChainerX's
    strides: the row and column strides added); the gradient scatters gy onto
    that diagonal of zeros."""
    op_name = 'diag'

    def __init__(self, k, key, in_shape):
        self.k = k
        self.key = key  # (rows, cols) of the diagonal, for the gradient
        self.in_shape = in_shape

    def forward(self, inputs):
        # An offset past the matrix gives the empty diagonal; clamped, it
        # also fits the C int that NumPy's and CuPy's diagonal take.
        rows, cols = self.in_shape
        return (inputs[0].diagonal(max(-rows, min(self.k, cols))),)

    def grads(self, xp, targets, gys, xs, ys):
        return (xp.scatter(gys[0], self.key, self.in_shape),)


def diag(v, k=0, device=None):
    """The k-th diagonal of a 2-d ``v``, or a square matrix with a 1-d ``v``
    on its k-th diagonal. ``device`` places an array-like ``v``."""
    k = _args.int_arg(k, 'k', op='diag')
    if not isinstance(v, _args.ndarray):
        v = _args.as_array(v, 'diag: v')
        if device is not None:
            v = to_device(v, device)
    row0, col0 = max(-k, 0), max(k, 0)
    if v.ndim == 1:
        n = v.shape[0] + abs(k)
        _args.check_result_size((n, n), v.dtype, 'diag', 'the matrix for k={}'.format(k))
        i = numpy.arange(v.shape[0])
        return scatter(v, (i + row0, i + col0), (n, n))
    if v.ndim == 2:
        i = numpy.arange(max(0, min(v.shape[0] - row0, v.shape[1] - col0)))
        return _args.apply(Diagonal(k, (i + row0, i + col0), v.shape), v)
    raise _args.DimensionError('diag: v must be 1-d or 2-d, not {}-d (shape {})'.format(
        v.ndim, v.shape))


def diagflat(v, k=0):
    """A square matrix with the flattened ``v`` on its k-th diagonal."""
    return diag(ravel(_args.as_array(v, 'diagflat: v')), k)


# ---------------------------------------------------------------------------
# Registry

def _listed(f, xs, kw):
    return f(xs, **kw)


register(OpInfo('ravel', ravel, ref=numpy.ravel, int_dtypes=_INTS,
                samples=[Sample((2, 3)), Sample(()), Sample((0, 3)), Sample((2, 1, 2))]))
register(OpInfo('moveaxis', moveaxis, ref=numpy.moveaxis, int_dtypes=_INTS, samples=[
    Sample((2, 3, 4), source=0, destination=-1),
    Sample((2, 3, 4), source=(0, 2), destination=(2, 0)),
    Sample((2, 3, 4), source=[-1, 0], destination=[0, 1]),
    Sample((0, 3), source=1, destination=0)]))
register(OpInfo('concatenate', concatenate, ref=numpy.concatenate, call=_listed,
                int_dtypes=_INTS, samples=[
                    Sample((2, 3), (1, 3)), Sample((2, 3), (2, 1), (2, 2), axis=1),
                    Sample((2, 3), (2, 2), axis=-1), Sample((2, 3), (3,), axis=None),
                    Sample((0, 3), (2, 3)), Sample((2, 3))]))
register(OpInfo('stack', stack, ref=numpy.stack, call=_listed, int_dtypes=_INTS, samples=[
    Sample((2, 3), (2, 3)), Sample((2, 3), (2, 3), (2, 3), axis=1),
    Sample((2, 3), (2, 3), axis=-1), Sample((), ()), Sample((0, 2), (0, 2), axis=1)]))
for _f, _samples in (
        (hstack, [Sample((2,), (3,)), Sample((2, 3), (2, 1)), Sample((2, 0), (2, 1))]),
        (vstack, [Sample((3,), (3,)), Sample((2, 3), (3,)), Sample((0, 2), (1, 2))]),
        (dstack, [Sample((3,), (3,)), Sample((2, 3), (2, 3)), Sample((2, 2, 1), (2, 2, 3))])):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__), call=_listed,
                    int_dtypes=_INTS, samples=_samples + [Sample((), ())]))

register(OpInfo('split', split, ref=numpy.split, int_dtypes=_INTS, samples=[
    Sample((6, 2), indices_or_sections=3), Sample((2, 5), indices_or_sections=[1, 3], axis=1),
    Sample((2, 3, 4), indices_or_sections=2, axis=-1),
    Sample((5,), indices_or_sections=[2, 2, 9]),
    Sample((5,), indices_or_sections=[3, 1], name='overlapping'),
    Sample((4,), indices_or_sections=1), Sample((0, 3), indices_or_sections=2)]))
register(OpInfo('hsplit', hsplit, ref=numpy.hsplit, int_dtypes=_INTS, samples=[
    Sample((2, 4), indices_or_sections=2), Sample((6,), indices_or_sections=[1, 4]),
    Sample((2, 3, 2), indices_or_sections=[-1])]))
register(OpInfo('vsplit', vsplit, ref=numpy.vsplit, int_dtypes=_INTS, samples=[
    Sample((4, 2), indices_or_sections=2), Sample((3, 2, 2), indices_or_sections=[1])]))
register(OpInfo('dsplit', dsplit, ref=numpy.dsplit, int_dtypes=_INTS, samples=[
    Sample((1, 2, 4), indices_or_sections=2), Sample((2, 1, 3), indices_or_sections=[1, 2])]))
register(OpInfo('atleast_2d', atleast_2d, ref=numpy.atleast_2d, int_dtypes=_INTS,
                samples=[Sample(()), Sample((3,)), Sample((2, 3)), Sample((0,)),
                         Sample((2, 1, 2))]))
register(OpInfo('atleast_3d', atleast_3d, ref=numpy.atleast_3d, int_dtypes=_INTS,
                samples=[Sample(()), Sample((3,)), Sample((2, 3)), Sample((0, 2)),
                         Sample((2, 1, 2))]))
register(OpInfo('repeat', repeat, ref=numpy.repeat, int_dtypes=_INTS, samples=[
    Sample((2, 3), repeats=2), Sample((2, 3), repeats=2, axis=1),
    Sample((2, 3), repeats=[1, 0, 3], axis=-1), Sample((3,), repeats=[2]),
    Sample((), repeats=3), Sample((), repeats=[2], axis=-1), Sample((2, 3), repeats=0, axis=0),
    Sample((0, 3), repeats=2, axis=0), Sample((2, 2), repeats=[2, 1], axis=0)]))
register(OpInfo('flip', flip, ref=numpy.flip, int_dtypes=_INTS, samples=[
    Sample((2, 3)), Sample((2, 3), axis=0), Sample((2, 3, 2), axis=(0, -1)),
    Sample(()), Sample((0, 3), axis=-1)]))
register(OpInfo('fliplr', fliplr, ref=numpy.fliplr, int_dtypes=_INTS,
                samples=[Sample((2, 3)), Sample((2, 3, 2)), Sample((2, 0))]))
register(OpInfo('flipud', flipud, ref=numpy.flipud, int_dtypes=_INTS,
                samples=[Sample((3,)), Sample((2, 3)), Sample((0, 2))]))
for _f in (tril, triu):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__), int_dtypes=_INTS,
                    samples=[Sample((3, 3)), Sample((3, 4), k=1), Sample((4, 3), k=-2),
                             Sample((2, 3, 3), k=-1), Sample((3,)), Sample((3, 3), k=5),
                             Sample((0, 3))]))
register(OpInfo('diag', diag, ref=numpy.diag, int_dtypes=_INTS, samples=[
    Sample((3,)), Sample((3,), k=1), Sample((2,), k=-2), Sample((3, 3)),
    Sample((3, 4), k=1), Sample((4, 3), k=-2), Sample((2, 3), k=5), Sample((0,)),
    Sample((0, 3))]))
register(OpInfo('rollaxis', rollaxis, ref=numpy.rollaxis, int_dtypes=_INTS, samples=[
    Sample((2, 3, 4), axis=2), Sample((2, 3, 4), axis=0, start=2),
    Sample((2, 3, 4), axis=1, start=3), Sample((2, 3, 4), axis=-1, start=-2),
    Sample((0, 3), axis=1)]))
register(OpInfo('diagflat', diagflat, ref=numpy.diagflat, int_dtypes=_INTS, samples=[
    Sample((3,)), Sample((2, 2), k=1), Sample((2,), k=-2), Sample(()), Sample((0,))]))
register(OpInfo('meshgrid', meshgrid, int_dtypes=_INTS, ref=numpy.meshgrid,
                call=lambda f, xs, kw: f(*xs, **kw), samples=[
                    Sample((2,), (3,)), Sample((2,), (3,), indexing='ij'),
                    Sample((2,), (3,), (4,)), Sample((2,), (3,), (4,), indexing='ij'),
                    Sample((3,)), Sample((0,), (2,), indexing='ij')]))
