"""xgrad's CUDA kernels: thin wrappers that pick a template and launch it.

Every wrapper takes the array module ``cp`` first (CuPy, or a stand-in with
``empty``, ``zeros``, ``ascontiguousarray``, ``sum``, ``RawModule`` and
``cuda.Device``), so importing this package never imports CuPy. Arrays are
float16, float32 or float64 (float16 is computed in float32); inputs are made
C-contiguous, results are new C-contiguous arrays. Each call is one kernel
launch (none for empty arrays), except ``sum_to``'s two passes over long
sums and its fallback. Kernels are
compiled on first use per device by :mod:`xgrad._kernels.loader`; scalars go
to them as ``numpy.int64``, null pointers as None.
"""

import numpy

from xgrad._kernels import loader
from xgrad._kernels.loader import BINARY, UNARY, XGRAD_BLOCK

__all__ = [
    'UNARY', 'UNARY_BACKWARD_READS', 'BINARY', 'BINARY_BACKWARD_READS', 'XGRAD_BLOCK',
    'ctype', 'unary_forward', 'unary_backward', 'binary_forward', 'binary_backward',
    'accumulate', 'add', 'sum_to', 'softmax', 'softmax_backward',
    'softmax_cross_entropy', 'softmax_cross_entropy_backward']

# Most blocks per launch; grid-stride loops cover the rest. (Tests lower it
# to exercise the strides.)
MAX_GRID = 4096
# sum_to's thread-per-kept-element kernel: at least this many kept elements
# when each sums a column (C == 1), else at most COLUMNS_MAX_TERMS terms each.
COLUMNS_MIN_KEEP = 1024
COLUMNS_MAX_TERMS = 16
# sum_to in two passes (split each kept element's sum over several blocks)
# when there are fewer kept elements than this and at least SPLIT_MIN_TERMS
# terms each; each block of the first pass sums about SPLIT_TERMS_PER_BLOCK.
SPLIT_MAX_KEEP = 128
SPLIT_MIN_TERMS = 1 << 16
SPLIT_TERMS_PER_BLOCK = 1 << 13
SPLIT_MAX_PARTS = 1024
# The columns kernel with fewer blocks than this (an H200 has 132 SMs) splits
# each column into parts of at least COLUMNS_MIN_ROWS rows (two passes).
COLUMNS_MIN_BLOCKS = 256
COLUMNS_MIN_ROWS = 16

# Which operand each unary backward reads ('x', 'y', or None for neither);
# the other may be passed as None.
UNARY_BACKWARD_READS = {
    'negative': None, 'absolute': 'x', 'exp': 'y', 'log': 'x', 'sqrt': 'y',
    'square': 'x', 'tanh': 'y', 'sigmoid': 'y', 'relu': 'y', 'sin': 'x', 'cos': 'x',
    'tan': 'y', 'arcsin': 'x', 'arccos': 'x', 'arctan': 'x', 'sinh': 'x', 'cosh': 'x',
    'arcsinh': 'x', 'arccosh': 'x', 'arctanh': 'x', 'expm1': 'y', 'log1p': 'x',
    'log2': 'x', 'log10': 'x', 'exp2': 'y', 'reciprocal': 'y', 'softplus': 'x',
    'erf': 'x'}

# Which operands (of 'ab') each binary gradient reads: (for ga, for gb).
# An operand no requested gradient reads may be passed as None.
BINARY_BACKWARD_READS = {
    'add': ('', ''), 'subtract': ('', ''), 'multiply': ('b', 'a'),
    'divide': ('b', 'ab'), 'maximum': ('ab', 'ab'), 'minimum': ('ab', 'ab')}

_CTYPES = {numpy.dtype(numpy.float16): 'xgrad::half',
           numpy.dtype(numpy.float32): 'float',
           numpy.dtype(numpy.float64): 'double'}
_LABEL_CTYPES = {numpy.dtype(numpy.int32): 'int', numpy.dtype(numpy.int64): 'long long'}


def ctype(dtype):
    """The kernels' storage type of a NumPy dtype: float16 -> 'xgrad::half'."""
    try:
        return _CTYPES[numpy.dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError('xgrad kernels take float16, float32 or float64 arrays, '
                        'not {}'.format(dtype)) from None


def _i64(n):
    return numpy.int64(n)


def _grid(blocks):
    return max(1, min(int(blocks), MAX_GRID))


def _elements_grid(n):
    """Blocks for one thread per element (sum_to's per-element kernels)."""
    return _grid((n + XGRAD_BLOCK - 1) // XGRAD_BLOCK)


def _packs_grid(n, dtype):
    """Blocks for the elementwise kernels: one thread per 16-byte pack (4
    floats, 8 halves, 2 doubles; see common.cuh's for_each_pack)."""
    return _elements_grid(-(-n * numpy.dtype(dtype).itemsize // 16))


def _launch(cp, source, expression, grid, args):
    loader.get_function(cp, source, expression)((grid,), (XGRAD_BLOCK,), args)


def _same(what, a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError('{}: operands differ: {} {} and {} {}'.format(
            what, a.shape, a.dtype, b.shape, b.dtype))


def _op(table, name, kind):
    if name not in table:
        raise ValueError('unknown {} op {!r}'.format(kind, name))
    return loader.functor(name)


# ---------------------------------------------------------------- elementwise

def unary_forward(cp, name, x):
    """y = name(x), a new array of x's shape and dtype."""
    f = _op(UNARY_BACKWARD_READS, name, 'unary')
    t = ctype(x.dtype)
    y = cp.empty(x.shape, x.dtype)
    x = cp.ascontiguousarray(x)
    if x.size:
        _launch(cp, 'elementwise.cu', loader.template('unary_forward', t, f),
                _packs_grid(x.size, x.dtype), (x, y, _i64(x.size)))
    return y


def unary_backward(cp, name, gy, x, y):
    """gx = gy * name'(x), fused in one pass.

    Only the operand named by ``UNARY_BACKWARD_READS[name]`` is read; the
    other (both, for 'negative') may be None.
    """
    f = _op(UNARY_BACKWARD_READS, name, 'unary')
    t = ctype(gy.dtype)
    x, y = _read_operands(cp, name, gy, (('x', x), ('y', y)), UNARY_BACKWARD_READS[name] or '')
    gx = cp.empty(gy.shape, gy.dtype)
    gy = cp.ascontiguousarray(gy)
    if gy.size:
        _launch(cp, 'elementwise.cu', loader.template('unary_backward', t, f),
                _packs_grid(gy.size, gy.dtype), (gy, x, y, gx, _i64(gy.size)))
    return gx


def _read_operands(cp, name, gy, operands, reads):
    """The (key, array) ``operands`` a gradient reads (named in ``reads``),
    checked against ``gy`` and made contiguous; None for the others."""
    out = []
    for key, a in operands:
        if key not in reads:
            out.append(None)
        elif a is None:
            raise ValueError('the gradient of {} reads {}'.format(name, key))
        else:
            _same(name + ' backward', gy, a)
            out.append(cp.ascontiguousarray(a))
    return out


def binary_forward(cp, name, a, b):
    """y = name(a, b) for a and b of one shape and dtype (ValueError otherwise)."""
    f = _op(BINARY_BACKWARD_READS, name, 'binary')
    _same(name, a, b)
    t = ctype(a.dtype)
    y = cp.empty(a.shape, a.dtype)
    a = cp.ascontiguousarray(a)
    b = cp.ascontiguousarray(b)
    if a.size:
        _launch(cp, 'elementwise.cu', loader.template('binary_forward', t, f),
                _packs_grid(a.size, a.dtype), (a, b, y, _i64(a.size)))
    return y


def binary_backward(cp, name, gy, a, b, need_a=True, need_b=True):
    """(ga or None, gb or None): both gradients of name(a, b) in one pass.

    Maximum and minimum give ties to a. An operand that the requested
    gradients do not read (``BINARY_BACKWARD_READS``) may be None.
    """
    f = _op(BINARY_BACKWARD_READS, name, 'binary')
    if not (need_a or need_b):
        return None, None
    reads_a, reads_b = BINARY_BACKWARD_READS[name]
    reads = (reads_a if need_a else '') + (reads_b if need_b else '')
    t = ctype(gy.dtype)
    a, b = _read_operands(cp, name, gy, (('a', a), ('b', b)), reads)
    ga = cp.empty(gy.shape, gy.dtype) if need_a else None
    gb = cp.empty(gy.shape, gy.dtype) if need_b else None
    gy = cp.ascontiguousarray(gy)
    if gy.size:
        _launch(cp, 'elementwise.cu', loader.template('binary_backward', t, f),
                _packs_grid(gy.size, gy.dtype),
                (gy, a, b, ga, gb, _i64(gy.size)))
    return ga, gb


def accumulate(cp, acc, g):
    """acc += g in place (acc C-contiguous, same shape and dtype); returns acc."""
    _same('accumulate', acc, g)
    t = ctype(acc.dtype)
    if not acc.flags.c_contiguous:
        raise ValueError('accumulate: acc must be C-contiguous')
    g = cp.ascontiguousarray(g)
    if acc.size:
        _launch(cp, 'elementwise.cu', loader.template('accumulate', t),
                _packs_grid(acc.size, acc.dtype), (acc, g, _i64(acc.size)))
    return acc


def add(cp, a, b):
    """a + b, a new array (same shape and dtype)."""
    _same('add', a, b)
    t = ctype(a.dtype)
    out = cp.empty(a.shape, a.dtype)
    a = cp.ascontiguousarray(a)
    b = cp.ascontiguousarray(b)
    if a.size:
        _launch(cp, 'elementwise.cu', loader.template('add3', t),
                _packs_grid(a.size, a.dtype), (a, b, out, _i64(a.size)))
    return out


# ----------------------------------------------------------------- reduction

def _sum_to_plan(xshape, shape):
    """(pattern, sizes, reduced axes): x's axes as merged runs of 'r'educed
    and 'k'ept axes (size-1 axes dropped), and the axes to sum."""
    lead = len(xshape) - len(shape)
    if lead < 0:
        raise ValueError('sum_to: cannot sum {} to {}'.format(xshape, shape))
    pattern, sizes, axes = [], [], []
    for i, n in enumerate(xshape):
        if i < lead:
            kind = 'r'
        elif shape[i - lead] == n:
            kind = 'k'
        elif shape[i - lead] == 1:
            kind = 'r'
        else:
            raise ValueError('sum_to: cannot sum {} to {}'.format(xshape, shape))
        if kind == 'r':
            axes.append(i)
        if n == 1:
            continue
        if pattern and pattern[-1] == kind:
            sizes[-1] *= n
        else:
            pattern.append(kind)
            sizes.append(n)
    return ''.join(pattern), sizes, tuple(axes)


def sum_to(cp, x, shape):
    """x summed down to ``shape`` (NumPy broadcasting in reverse), a new array.

    ``shape`` may have fewer axes than x (leading axes are summed); its size-1
    axes are summed. When the summed and kept axes (size-1 axes dropped,
    neighbours of one kind merged) form [summed] kept [summed] -- which
    includes summing everything and summing nothing -- this is one launch of
    our kernel on x viewed as (A, B, C), or two when a few kept elements
    each sum many terms (the sums are split over blocks, then added). Other
    patterns (e.g. kept, summed, kept) fall back to ``cp.sum(x, axis)`` and a
    reshape. The dtype stays x's
    (float16 sums in float32 in our kernel).
    """
    if isinstance(shape, (int, numpy.integer)):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    t = ctype(x.dtype)
    pattern, sizes, axes = _sum_to_plan(tuple(x.shape), shape)
    if x.size == 0 or 0 in shape:
        return cp.zeros(shape, x.dtype)
    if pattern not in ('', 'r', 'k', 'rk', 'kr', 'rkr'):
        return cp.sum(x, axis=axes).astype(x.dtype, copy=False).reshape(shape)
    a = b = c = 1                       # x viewed as (A, B, C), summed to (B,)
    if 'k' in pattern:
        k = pattern.index('k')
        b = sizes[k]
        a = sizes[0] if k else 1
        c = sizes[k + 1] if k + 1 < len(sizes) else 1
    elif pattern:
        c = sizes[0]
    x = cp.ascontiguousarray(x)
    y = cp.empty(shape, x.dtype)
    terms = a * c
    if terms == 1 or (c == 1 and b >= COLUMNS_MIN_KEEP) or (
            b >= COLUMNS_MIN_KEEP and terms <= COLUMNS_MAX_TERMS):
        kernel, grid = 'sum_abc_columns', _elements_grid(b)
        parts = min(-(-COLUMNS_MIN_BLOCKS // grid), a // COLUMNS_MIN_ROWS, SPLIT_MAX_PARTS)
        if c == 1 and parts >= 2:
            return _sum_columns_in_two_passes(cp, x, y, a, b, parts)
    elif b < SPLIT_MAX_KEEP and terms >= SPLIT_MIN_TERMS:
        return _sum_to_in_two_passes(cp, x, y, a, b, c)
    else:
        kernel, grid = 'sum_abc_blocks', _grid(b)
    _launch(cp, 'reduce.cu', loader.template(kernel, t), grid,
            (x, y, _i64(a), _i64(b), _i64(c)))
    return y


def _sum_to_in_two_passes(cp, x, y, a, b, c):
    """Few kept elements with many terms each: one block per kept element
    would leave most of the GPU idle, so pass 1 spreads each sum over
    ``parts`` blocks (partial sums in the compute type) and pass 2 adds them."""
    t = ctype(x.dtype)
    parts = min(SPLIT_MAX_PARTS, -(-(a * c) // SPLIT_TERMS_PER_BLOCK))
    partial = cp.empty(b * parts, numpy.float32 if x.dtype == numpy.float16 else x.dtype)
    _launch(cp, 'reduce.cu', loader.template('sum_abc_split', t), _grid(b * parts),
            (x, partial, _i64(a), _i64(b), _i64(c), _i64(parts)))
    _launch(cp, 'reduce.cu', loader.template('sum_partials', t), _grid(b),
            (partial, y, _i64(b), _i64(parts)))
    return y


def _sum_columns_in_two_passes(cp, x, y, a, b, parts):
    """Many kept elements but too few for one thread each to fill the GPU
    (e.g. a bias gradient, (65536, 1024) -> (1024,)): pass 1 splits each
    column into ``parts`` runs of rows, pass 2 adds the partial sums."""
    t = ctype(x.dtype)
    partial = cp.empty(b * parts, numpy.float32 if x.dtype == numpy.float16 else x.dtype)
    _launch(cp, 'reduce.cu', loader.template('sum_abc_columns_split', t),
            _elements_grid(b * parts), (x, partial, _i64(a), _i64(b), _i64(parts)))
    _launch(cp, 'reduce.cu', loader.template('sum_partials', t), _grid(b),
            (partial, y, _i64(b), _i64(parts)))
    return y


# ------------------------------------------------------------------- softmax

def _rows(shape, axis):
    """(outer, cols, inner) of x viewed around ``axis``."""
    ndim = len(shape)
    if not isinstance(axis, (int, numpy.integer)) or not -ndim <= axis < ndim:
        raise ValueError('axis {!r} is out of range for {} dimensions'.format(axis, ndim))
    axis = int(axis) % ndim
    outer = inner = 1
    for n in shape[:axis]:
        outer *= n
    for n in shape[axis + 1:]:
        inner *= n
    return outer, shape[axis], inner


def softmax(cp, x, axis, log=False):
    """softmax (or log_softmax) of x over one axis, max-shifted."""
    t = ctype(x.dtype)
    outer, cols, inner = _rows(x.shape, axis)
    y = cp.empty(x.shape, x.dtype)
    x = cp.ascontiguousarray(x)
    if x.size:
        kernel = 'log_softmax_forward' if log else 'softmax_forward'
        _launch(cp, 'softmax.cu', loader.template(kernel, t), _grid(outer * inner),
                (x, y, _i64(outer), _i64(cols), _i64(inner)))
    return y


def softmax_backward(cp, gy, y, axis, log=False):
    """gx from gy and the forward's output y: y * (gy - sum(gy * y)) for
    softmax, gy - exp(y) * sum(gy) for log_softmax (sums over the axis)."""
    _same('softmax backward', gy, y)
    t = ctype(y.dtype)
    outer, cols, inner = _rows(y.shape, axis)
    gx = cp.empty(y.shape, y.dtype)
    gy = cp.ascontiguousarray(gy)
    y = cp.ascontiguousarray(y)
    if y.size:
        kernel = 'log_softmax_backward' if log else 'softmax_backward'
        _launch(cp, 'softmax.cu', loader.template(kernel, t), _grid(outer * inner),
                (gy, y, gx, _i64(outer), _i64(cols), _i64(inner)))
    return gx


def _labels(cp, x, t):
    if x.ndim != 2 or t.ndim != 1 or t.shape[0] != x.shape[0]:
        raise ValueError('softmax_cross_entropy: x must be (N, C) and t (N,), '
                         'not {} and {}'.format(x.shape, t.shape))
    dtype = numpy.dtype(t.dtype)
    if dtype not in _LABEL_CTYPES:
        if dtype.kind not in 'iu':
            raise TypeError('softmax_cross_entropy: labels must be integers, '
                            'not {}'.format(dtype))
        t = t.astype(numpy.int64)
        dtype = numpy.dtype(numpy.int64)
    return cp.ascontiguousarray(t), _LABEL_CTYPES[dtype]


def softmax_cross_entropy(cp, x, t):
    """loss[r] = logsumexp(x[r]) - x[r, t[r]] for x (N, C) and labels t (N,),
    0 where t[r] == -1. Labels must be validated by the caller."""
    ct = ctype(x.dtype)
    t, lt = _labels(cp, x, t)
    x = cp.ascontiguousarray(x)
    n, c = x.shape
    loss = cp.empty((n,), x.dtype)
    if n:
        _launch(cp, 'softmax.cu',
                loader.template('softmax_cross_entropy_forward', ct, lt), _grid(n),
                (x, t, loss, _i64(n), _i64(c)))
    return loss


def softmax_cross_entropy_backward(cp, gloss, x, t):
    """gx[r, k] = gloss[r] * (softmax(x[r])[k] - (k == t[r])), 0 on rows with
    t == -1; the softmax is recomputed from x in the same launch."""
    ct = ctype(x.dtype)
    t, lt = _labels(cp, x, t)
    n, c = x.shape
    if gloss.shape != (n,) or gloss.dtype != x.dtype:
        raise ValueError('softmax_cross_entropy backward: gloss must be ({},) {}, '
                         'not {} {}'.format(n, x.dtype, gloss.shape, gloss.dtype))
    gloss = cp.ascontiguousarray(gloss)
    x = cp.ascontiguousarray(x)
    gx = cp.empty(x.shape, x.dtype)
    if x.size:
        _launch(cp, 'softmax.cu',
                loader.template('softmax_cross_entropy_backward', ct, lt), _grid(n),
                (gloss, x, t, gx, _i64(n), _i64(c)))
    return gx
