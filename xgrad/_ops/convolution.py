"""N-dimensional convolution: ``conv`` and ``conv_transpose`` (ChainerX's
signatures, plus Chainer's ``dilate`` and ``groups`` as keyword arguments).

Arrays are channel-first: ``x`` is (N, C, d_1, ..., d_n) for n >= 0 spatial
axes. ``conv`` takes weights (out_C, in_C / groups, k_1, ..., k_n),
``conv_transpose`` weights (in_C, out_C / groups, k_1, ..., k_n), as Chainer.

The computation is im2col + GEMM: the windows of the padded input are a
strided view (no copy), gathered into columns a few samples at a time (one
cache-sized buffer, so the matmul reads them from cache) and contracted with
the weights by one matmul per chunk (float32 products of one channel group
on xgrad's own GEMM, ``gemm_kernels.sgemm``, which runs these skinny shapes
faster than the BLAS; other products on the BLAS). Its adjoint, col2im,
adds columns back tap by tap (k_1 * ... * k_n strided slice adds); with
stride 1 the transposed convolution is instead a convolution with the
flipped kernel (faster), and with 5x5 windows at stride 2 on mid-sized
images one such convolution per phase of the output
(``_conv_transpose_phases``).
Where they pay, 2-D 3x3 and 5x5 convolutions with stride 1 go through
Winograd's transforms instead (``_winograd``: fewer products), and strided
ones whose input phases make such a convolution (5x5 with stride 2: 3x3
over the phases) through ``_polyphase``.

Three ops are each other's gradients, as in Chainer, so derivatives of any
order stay in this family:

* ``_Conv``: y = conv(x, w) + b
* ``_ConvTranspose``: y = conv_transpose(x, w) + b, the adjoint of conv in x
* ``_ConvGradWeight``: gw = the gradient of conv in w, given x and gy

Each is defined by a raw NumPy kernel and an explicit output size, so cover_all
and outsize only matter where the public functions compute that size.
Gradient formulas call the three through ``_linear.run``, which runs the raw
kernel on raw arrays (the engine's fast path) and applies the recorded op on xgrad
arrays (double backprop).
"""

import collections
import contextlib
import contextvars
import functools
import itertools

import numpy
from numpy.lib.stride_tricks import as_strided

from xgrad import _dtypes
from xgrad._backend import cuda
from xgrad._backend import gemm_kernels, native_kernels, workspace
from xgrad._backend.gemm_kernels import sgemm
from xgrad._backend.operands import kernel_operands
from xgrad._backend.tap_columns import transpose_into
from xgrad._backend.window_kernels import col2im_2d, im2col_2d
from xgrad._ops import _args, _gemm_layout, _polyphase, _tap_groups, _winograd
from xgrad._ops._linear import run
from xgrad._ops._op import PyOp
from xgrad._ops.registry import BOOL, INT_DTYPES, Sample, OpInfo, register

__all__ = ['conv', 'conv_transpose']


# ---------------------------------------------------------------------------
# Geometry shared with pooling: parameters, output sizes, windows

Geometry = collections.namedtuple('Geometry', 'ksize stride pad dilate groups')
Geometry.__doc__ = """Where the windows of a convolution or pooling lie: one
entry per spatial axis (``groups``: the number of channel groups)."""


def spatial_tuple(value, n, name, op, minimum, too_small=ValueError):
    """``value`` (an int or a sequence of n ints) as a tuple of n ints, each
    at least ``minimum``. Wrong length: DimensionError; too small:
    ``too_small``; not an int: TypeError."""
    if type(value) is int and minimum <= value < 1 << 62:  # the usual case, valid as it is
        return (value,) * n
    if _args.is_int(value):
        values = (int(value),) * n
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError('{}: {} must be an int or a tuple of ints, not {}'.format(
                op, name, type(value).__name__)) from None
        if len(values) != n:
            raise _args.DimensionError(
                '{}: {} {} has {} entries, but the input has {} spatial '
                'dimensions'.format(op, name, values, len(values), n))
        for v in values:
            if not _args.is_int(v):
                raise TypeError('{}: {} must be an int or a tuple of ints, not {!r}'.format(
                    op, name, value))
        values = tuple(int(v) for v in values)
    for v in values:
        _args.fits_int64(v, name, op)
    if any(v < minimum for v in values):
        raise too_small('{}: {} must be {} for every axis, got {}'.format(
            op, name, 'positive' if minimum == 1 else 'non-negative', value))
    return values


def out_size(size, k, s, p, d=1, cover_all=False):
    """The output length of a window of k taps (dilation d) sliding with
    stride s over size + 2p elements (Chainer's get_conv_outsize); with
    cover_all, one more window covers a partial tail."""
    span = (k - 1) * d + 1
    return (size + 2 * p - span + (s - 1 if cover_all else 0)) // s + 1


def extent(geom, outsize):
    """How many padded elements per axis the windows of ``outsize`` outputs
    reach: (l - 1) * s + (k - 1) * d + 1."""
    return tuple((l - 1) * s + (k - 1) * d + 1 for l, k, s, d in zip(
        outsize, geom.ksize, geom.stride, geom.dilate))


def pad_input(x, geom, outsize, fill=0):
    """``x`` with ``geom.pad`` elements of ``fill`` before each spatial axis
    and enough after for every window of ``outsize`` (cover_all can reach past
    the pad). ``x`` itself when no padding is needed."""
    spatial = x.shape[2:]
    full = tuple(max(e, p + n) for e, p, n in zip(extent(geom, outsize), geom.pad, spatial))
    if full == spatial:  # no pad, no overhang
        return x
    out = _args.module_of(x).empty(x.shape[:2] + full, dtype=x.dtype)
    out[inner(geom.pad, spatial)] = x
    for axis, (p, n) in enumerate(zip(geom.pad, spatial)):  # fill the borders only
        before = (slice(None),) * (2 + axis)
        out[before + (slice(0, p),)] = fill
        out[before + (slice(p + n, None),)] = fill
    return out


def inner(pad, spatial):
    """The index of the unpadded region in a padded array."""
    return (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(pad, spatial))


def windows(xpad, geom, outsize):
    """The strided view (N, C, k_1..k_n, l_1..l_n) of every window of
    ``xpad``: element [.., k, l] is xpad[.., l * stride + k * dilate]."""
    strides = xpad.strides[2:]
    shape = xpad.shape[:2] + tuple(geom.ksize) + tuple(outsize)
    strides = (xpad.strides[:2] + tuple(t * d for t, d in zip(strides, geom.dilate))
               + tuple(t * s for t, s in zip(strides, geom.stride)))
    if cuda.on_gpu(xpad):  # CuPy's as_strided makes no read-only views
        return cuda.cupy().lib.stride_tricks.as_strided(xpad, shape, strides)
    return as_strided(xpad, shape, strides, writeable=False)


def window_offsets(geom, outsize):
    """(k, index) for each kernel tap k: ``index`` selects, in a padded array,
    the elements that tap k of every window reads (a strided slice)."""
    ranges = [range(k) for k in geom.ksize]
    for k in itertools.product(*ranges):
        yield k, (slice(None), slice(None)) + tuple(
            slice(i * d, i * d + (l - 1) * s + 1, s)
            for i, d, l, s in zip(k, geom.dilate, outsize, geom.stride))


def unpad(apad, geom, spatial):
    """The unpadded region of ``apad``, contiguous."""
    if apad.shape[2:] == tuple(spatial):
        return apad
    return apad[inner(geom.pad, spatial)].copy(order='C')


# ---------------------------------------------------------------------------
# Raw kernels (NumPy in, NumPy out)

# Which batch ranges one GEMM takes. Small images (a few hundred positions
# per sample, the 4x4-16x16 layers of small CNNs) give per-sample or
# few-sample GEMMs whose N is too narrow for the BLAS to reach its rate, and
# each chunk costs a Python round; so while the columns of the whole batch
# stay under _WHOLE_BATCH_ELEMENTS (16 MiB of float32) they are one GEMM (and
# conv keeps them for its weight gradient). Past that, columns are built a
# few samples at a time into one buffer of about _CHUNK_ELEMENTS, which the
# matmul reads from cache, not memory (large images: 32x32 and up, where
# one sample's GEMM is already wide).
_CHUNK_ELEMENTS = 1 << 20
_WHOLE_BATCH_ELEMENTS = 1 << 22
# conv_transpose's columns are the GEMM's output, which col2im reads right
# away: in chunks of 2 MiB of float32 it reads them from cache (one thread:
# the input gradient of 5x5 stride-2 convolutions, 16->32 channels on 16x16
# at batch 64, 2.72 -> 2.01 ms; 64->64 on 8x8, 3.91 -> 3.21 ms). But 256
# columns at least: narrower GEMMs lost more than the cache saved (256->256
# on 4x4 with 16 samples a chunk: 80 columns, 1.04x the whole batch's time).
_SPREAD_ELEMENTS = 1 << 19
_MIN_SPREAD_COLUMNS = 256
# float32 products of one channel group go to xgrad's own GEMM
# (gemm_kernels.sgemm) where the BLAS runs them below its rate: the forward
# W cols (M = the output channels, 16-256), the input gradient's columns W^T
# gy (K = the output channels) and the weight gradient cols gy^T (N = the
# output channels). One thread, GFLOP/s OpenBLAS -> ours, (O, C k k, N L):
# (32, 400, 4096) forward 86 -> 104, input gradient 61 -> 93, weight
# gradient 89 -> 105; (64, 1600, 256) 100 -> 113, 99 -> 100, 99 -> 112;
# (256, 6400, 64) 94 -> 110, 94 -> 91, 99 -> 103. Not the weight gradient
# of fewer than _OWN_GEMM_MIN_COLUMNS output channels: its result has fewer
# columns than the AVX-512 kernel's 32 ((16, 144, 4096): 73 -> 50). Other
# dtypes, channel groups and machines without AVX2 keep the BLAS.
_OWN_GEMM_MIN_COLUMNS = 32
# On the AVX2 kernel (6 x 16 tiles, gemm_kernels.AVX2_TILE_ROWS) the
# forward product of 64 or more output channels runs faster on the BLAS:
# conv's forward, one thread, Zen 3, own GEMM's time over the BLAS's (paired
# medians): 3x3 stride 2, 64->64 on 32x32 at batch 8 1.11, on 56x56 1.16,
# 128->128 on 32x32 1.13, 256->256 on 16x16 1.07 and on 56x56 at batch 1
# 1.06; 1x1 stride 2, 64->64 1.04-1.09, 128->128 1.06. Fewer channels stay
# on our own (16->32 0.97-1.03; 1x1 16->32 on 56x56 0.87). Two 64-channel
# shapes were the other way, within 3% (5x5 stride 2 on 56x56 at batch 1
# 0.97, 32->64 3x3 stride 2 0.98).
_AVX2_BLAS_FORWARD_ROWS = 64


def _own_forward_gemm(rows):
    """Whether conv's forward product of ``rows`` output channels (one
    group) goes to xgrad's own GEMM (see _AVX2_BLAS_FORWARD_ROWS)."""
    return (rows < _AVX2_BLAS_FORWARD_ROWS
            or gemm_kernels.tile_rows() != gemm_kernels.AVX2_TILE_ROWS)


def _empty(xp, shape, dtype):
    """xp.empty(shape, dtype); on the host from the workspace."""
    return workspace.empty(shape, dtype) if xp is numpy else xp.empty(shape, dtype)


def _matmul(xp, a, b, out=None):
    """a @ b for stacks of matrices (into ``out`` when given); where each sum
    has one term (a 1x1 window over one channel) a broadcast product:
    NumPy's matmul runs K = 1 off the BLAS, (16, 1) @ (1, 784) in 15 us
    against 4 us."""
    if a.shape[-1] == 1:
        return xp.multiply(a, b, out=out)
    return xp.matmul(a, b, out=out)


def _chunks(n, per_sample):
    """(lo, hi) batch ranges: the whole batch when its columns are at most
    ``_WHOLE_BATCH_ELEMENTS``, else about ``_CHUNK_ELEMENTS`` each."""
    if n * per_sample <= _WHOLE_BATCH_ELEMENTS:
        return [(0, n)] if n else []
    step = max(1, _CHUNK_ELEMENTS // max(1, per_sample))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def _spread_chunks(n, per_sample, positions):
    """_col2im_whole's batch ranges: columns of about _SPREAD_ELEMENTS, so
    that col2im reads the GEMM's output from cache, but GEMMs at least
    _MIN_SPREAD_COLUMNS wide (``positions`` columns a sample)."""
    step = max(1, _SPREAD_ELEMENTS // max(1, per_sample),
               -(-_MIN_SPREAD_COLUMNS // max(1, positions)))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def _column_chunks(x, geom, outsize):
    """im2col in batch chunks: yields (lo, hi, cols) where cols
    (groups, C/groups * prod(k), (hi - lo) * prod(l)) holds the windows of
    samples lo..hi of ``x``, one column per window. ``cols`` is one reused
    buffer: use it before asking for the next chunk."""
    x = _contiguous_for_im2col(x)
    if _native_im2col(x, geom):
        yield from _native_column_chunks(x, geom, outsize)
        return
    win = windows(pad_input(x, geom, outsize), geom, outsize)  # (N, C, k.., l..)
    n, c = x.shape[:2]
    g, nk = geom.groups, len(geom.ksize)
    rows = c // g * _prod(geom.ksize)
    ranges = _chunks(n, c * _prod(geom.ksize) * _prod(outsize))
    if not ranges:
        return
    # (C, k.., m, l..): sample and window position side by side in a row.
    order = (1,) + tuple(range(2, 2 + nk)) + (0,) + tuple(range(2 + nk, win.ndim))
    xp = _args.module_of(x)
    buf = xp.empty(tuple(win.shape[i] for i in order[:1 + nk]) + (ranges[0][1],)
                   + tuple(outsize), x.dtype)
    for lo, hi in ranges:
        m = hi - lo
        part = buf[(slice(None),) * (1 + nk) + (slice(0, m),)]
        xp.copyto(part, win[lo:hi].transpose(order))
        yield lo, hi, part.reshape(g, rows, m * _prod(outsize))


def _contiguous_for_im2col(x):
    """A strided, broadcast or unaligned float NumPy batch as a contiguous
    copy, which the native im2col and the BLAS take: the gradient of ``sum``
    or ``mean`` is a broadcast view (stride 0), and the strided paths cost
    far more than the copy (16->32 channels on 4x4, batch 64: the input
    gradient's columns took several times as long; a 1x1 convolution's
    gradients with a stride-0 gy, 1->16 channels on 56x56, batch 8: 0.23
    and 0.39 ms against 0.04 ms each, as matmul leaves the BLAS)."""
    if (type(x) is numpy.ndarray and x.ndim == 4 and x.dtype in (numpy.float32, numpy.float64)
            and not (x.flags.c_contiguous and x.flags.aligned)):
        return numpy.array(x, order='C')
    return x


def _native_im2col(x, geom):
    """Whether im2col_2d takes ``x``: a 2-D convolution of a contiguous,
    aligned NumPy float32/64 batch (the padding is written as zeros, not
    copied). The same conditions as im2col_2d's own, which refuses data at
    an odd address (from_numpy of an unaligned buffer)."""
    return (type(x) is numpy.ndarray and x.ndim == 4 and x.flags.c_contiguous
            and x.flags.aligned and x.dtype in (numpy.float32, numpy.float64))


def _native_column_chunks(x, geom, outsize):
    """_column_chunks by the native im2col: no padded copy, no strided view;
    each chunk's columns a matrix with padded rows (_gemm_layout)."""
    n, c = x.shape[:2]
    g, kk, ll = geom.groups, _prod(geom.ksize), _prod(outsize)
    ranges = _chunks(n, c * kk * ll)
    if not ranges:
        return
    flat = workspace.empty(_gemm_layout.padded_size(c * kk, ranges[0][1] * ll, x.dtype),
                           x.dtype)
    for lo, hi in ranges:
        m = hi - lo
        part = _gemm_layout.padded(flat, (c * kk, m * ll))
        if not im2col_2d(x[lo:hi], part, tuple(geom.ksize), tuple(geom.stride),
                         tuple(geom.pad), tuple(geom.dilate), tuple(outsize)):
            raise RuntimeError('im2col_2d refused {} {}'.format(x.shape, geom))
        yield lo, hi, part.reshape(g, c // g * kk, m * ll)


def _native_col2im(x, geom):
    """Whether col2im_2d can add back a 2-D convolution's columns for ``x``
    (a NumPy array; the columns are built contiguous here)."""
    return type(x) is numpy.ndarray and x.ndim == 4


def _col2im_whole(xm, wt, geom, spatial, shape, work):
    """conv_transpose by GEMMs over batch ranges + the native col2im: xm
    (n, g, c/g, L) the input (L positions of ``spatial``), wt (g, o/g *
    prod(k), c/g) the weights; the output (n, o, oh, ow) of ``shape``. Each
    range (_spread_chunks) is one GEMM: its samples side by side, (g, c/g, m
    * L), so the columns come out as im2col_2d's matrix (o kh kw, m h w),
    written into rows padded as _gemm_layout pads them."""
    n, g, cg, ll = xm.shape
    o, kk = shape[1], _prod(geom.ksize)
    out = workspace.zeros(shape, work)
    ranges = _spread_chunks(n, o * kk * ll, ll)
    flat = workspace.empty(_gemm_layout.padded_size(o * kk, (ranges[0][1] if ranges else 0) * ll,
                                                work), work)
    for lo, hi in ranges:
        m = hi - lo
        rhs = xm[lo:hi].transpose(1, 2, 0, 3).reshape(g, cg, m * ll)  # a copy unless m == 1
        cols = _gemm_layout.padded(flat, (o * kk, m * ll))
        if g > 1 or not sgemm(wt[0], rhs[0], cols):
            _matmul(numpy, wt, rhs, cols.reshape(g, o // g * kk, m * ll))
        if not col2im_2d(cols, out[lo:hi], tuple(geom.ksize), tuple(geom.stride),
                         tuple(geom.pad), tuple(geom.dilate), tuple(spatial)):
            raise RuntimeError('col2im_2d refused {} {}'.format(shape, geom))
    return out


def _phase_taps(size, out, k, s, p):
    """conv_transpose's output positions along one axis, phase by phase:
    (first position, its tap k0, taps T, left pad, positions U) for each
    position mod s. Output Y = s u + P gets x[l] w[k] for k = k0 + s t
    (k0 = (P + p) mod s) and l = u + d - t (d = (P + p) // s): a stride-1
    correlation of x with those T taps reversed, padded by T - 1 - d on the
    left. None when a left pad would be negative: pads past half the window
    or strides near the window's size (never with k >= 2 s + 1 and 2 p <=
    k - 1)."""
    phases = []
    for first in range(min(s, out)):
        k0, d = (first + p) % s, (first + p) // s
        taps = len(range(k0, k, s))
        if taps and taps - 1 - d < 0:
            return None
        phases.append((first, k0, taps, taps - 1 - d, len(range(first, out, s))))
    return phases


# conv_transpose by the output's phases (_conv_transpose_phases) against a
# GEMM into the whole output's columns and col2im's adds, or the input's
# phases (_polyphase): measured with stride 2 and 5x5 kernels, where the
# phase of 3x3 taps is a Winograd convolution. It moves x's channels'
# windows where col2im moves the output's, so it pays only when x has at
# most as many channels (a convolution's input gradient with as many
# channels in as out, the ResNet case), and on images of 24x24 to 40x40
# (phases of 12 to 20 positions a side). One thread, forward + both
# gradients, with against without, conv c->o on h x h at batch n: 64->64
# at batch 8 on 24x24 0.95x, 28x28 0.90x, 32x32 0.86-0.88x, 40x40 0.96x;
# 128->128 on 32x32 at batch 8 0.87x, batch 64 0.92x; conv_transpose
# alike (0.84-0.96x). Not on smaller images (16x16, batch 64: 64->64
# 0.94-1.03x, 128->128 1.01-1.08x; 8x8 1.09x the input gradient's time),
# larger ones (48x48 1.02x, 56x56 1.02-1.07x: the input's phases,
# Winograd over 49 tiles a plane, do better there), few positions in the
# batch (16x16 at batch 8: 1.22x) or 256 channels (1.2-1.7x: thin products
# per phase against one wide GEMM); 16->32's input gradient (twice the
# channels in x) 0.95-1.29x, 1->16's 1.6-4.7x.
_PHASE_MIN_SIDE = 12           # positions of a phase along each axis
_PHASE_MAX_SIDE = 20
_PHASE_MIN_POSITIONS = 1024    # a phase's positions in the batch
_PHASE_MAX_CHANNELS = 128      # of x


def _output_phases_apply(x, geom, outsize, work):
    """Whether _conv_transpose_phases can compute conv_transpose(x, w)."""
    if (type(x) is not numpy.ndarray or x.ndim != 4 or geom.groups != 1
            or tuple(geom.dilate) != (1, 1) or work not in (numpy.float32, numpy.float64)):
        return False
    return all(_phase_taps(size, out, k, s, p) is not None for size, out, k, s, p in zip(
        x.shape[2:], outsize, geom.ksize, geom.stride, geom.pad))


def _output_phases_pay(x, wshape, geom, outsize, work):
    """Whether conv_transpose_kernel takes _conv_transpose_phases (above)."""
    if (type(x) is not numpy.ndarray or x.ndim != 4 or geom.groups != 1
            or tuple(geom.dilate) != (1, 1) or work not in (numpy.float32, numpy.float64)):
        return False
    if any(s < 2 or k < 2 * s + 1 for k, s in zip(geom.ksize, geom.stride)):
        return False
    sides = [o // s for o, s in zip(outsize, geom.stride)]  # the smallest phase's
    return (_PHASE_MIN_SIDE <= min(sides) and max(sides) <= _PHASE_MAX_SIDE
            and x.shape[0] * sides[0] * sides[1] >= _PHASE_MIN_POSITIONS
            and x.shape[1] <= min(wshape[1], _PHASE_MAX_CHANNELS))


def _conv_transpose_phases(x, w, geom, outsize, work):
    """conv_transpose of x (n, c, h, w) with w (c, o, kh, kw), one group, no
    dilation, as s_h * s_w stride-1 convolutions of x, one per phase of the
    output (each with its taps of w, reversed): im2col of x and a GEMM per
    phase, each output written once, instead of a GEMM into the columns of
    the whole output and col2im's adds. None where it does not apply."""
    along_h = _phase_taps(x.shape[2], outsize[0], geom.ksize[0], geom.stride[0], geom.pad[0])
    along_w = _phase_taps(x.shape[3], outsize[1], geom.ksize[1], geom.stride[1], geom.pad[1])
    if along_h is None or along_w is None:
        return None
    n, o = x.shape[0], w.shape[1]
    out = workspace.empty((n, o) + tuple(outsize), work)
    sh, sw = geom.stride
    for y0, ky, ty, py, uy in along_h:
        for x0, kx, tx, px, ux in along_w:
            view = out[:, :, y0::sh, x0::sw]
            if not (ty and tx):  # no tap reaches these positions
                view[...] = 0
                continue
            taps = w[:, :, ky::sh, kx::sw][:, :, ::-1, ::-1].swapaxes(0, 1)
            sub = Geometry((ty, tx), (1, 1), (py, px), (1, 1), 1)
            view[...] = conv_kernel(x, numpy.ascontiguousarray(taps, dtype=work), None, sub,
                                    (uy, ux))
    return out


def _col2im_add(out, cols, geom, outsize):
    """Add ``cols`` (N, C, k_1..k_n, l_1..l_n) into the padded ``out``, each
    element where its window tap reads (the adjoint of im2col)."""
    for k, index in window_offsets(geom, outsize):
        out[index] += cols[(slice(None), slice(None)) + k]


def _padded_zeros(shape, geom, outsize, dtype, like):
    """Zeros shaped like ``pad_input`` pads an array of ``shape`` (on the
    device of ``like``)."""
    full = tuple(max(e, p + d) for e, p, d in zip(extent(geom, outsize), geom.pad, shape[2:]))
    return _args.module_of(like).zeros(tuple(shape[:2]) + full, dtype)


def col2im(cols, geom, outsize, spatial):
    """The adjoint of im2col: ``cols`` (N, C, k_1..k_n, l_1..l_n) added into
    an (N, C, *spatial) array, each element where its window tap reads."""
    out = _padded_zeros(cols.shape[:2] + tuple(spatial), geom, outsize, cols.dtype, cols)
    _col2im_add(out, cols, geom, outsize)
    return unpad(out, geom, spatial)


def _prod(values):
    p = 1
    for v in values:
        p *= v
    return p


def _add_bias(y, b):
    if b is not None:
        y += b.reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype, copy=False)
    return y


def _result_dtype(x, w, b):
    """ChainerX's result dtype of a convolution: x, w and b promoted."""
    return _dtypes.result_type(x, w, *(() if b is None else (b,)))


# Pointwise (1x1, stride 1, no padding) convolutions need no columns: each
# sample's channels are already a (C, positions) matrix, so forward, input
# gradient and (when it is smaller than the batch's copies) weight gradient
# are per-sample GEMMs that NumPy's matmul broadcasts over the batch, with
# no im2col and no transposing copy. Measured on one thread (batch 8, 64
# channels, 16x16): forward 299 -> 243 us, input gradient 278 -> 209 us,
# weight gradient 273 -> 223 us.

def _pointwise(geom, spatial, outsize):
    ones = (1,) * len(geom.ksize)  # (the geometry's fields are tuples)
    return (geom.ksize == ones and geom.stride == ones and not any(geom.pad)
            and tuple(spatial) == tuple(outsize))


def _pointwise_product(wm, x, b, g, work, outsize):
    """wm (g, o/g, c/g) applied to each sample of x (n, c, *outsize), plus b."""
    n, c = x.shape[:2]
    xm = _contiguous_for_im2col(x).astype(work, copy=False).reshape(n, g, c // g, _prod(outsize))
    xp = _args.module_of(x)
    # (into the workspace: a fresh output of each step's product was faulted
    # in page by page with OpenBLAS's threads, 187 faults a call at batch 8)
    y = _matmul(xp, wm, xm, out=_empty(xp, (n,) + wm.shape[:2] + (xm.shape[3],), work))
    if b is not None:
        y += b.astype(work, copy=False).reshape(wm.shape[:2] + (1,))
    return y.reshape((n, wm.shape[0] * wm.shape[1]) + tuple(outsize))


def _host_phases(x, wshape, geom, outsize, work, transposed=False, any_size=False):
    """_polyphase.plan for host data (the GPU keeps its own path)."""
    if type(x) is not numpy.ndarray or any(s == 1 for s in geom.stride):
        return None
    if transposed:  # x is the output's gradient: the convolution's input is outsize
        xshape = (x.shape[0], wshape[1]) + tuple(outsize)
        return _polyphase.plan(xshape, wshape, geom, x.shape[2:], work, transposed=True,
                               any_size=any_size)
    return _polyphase.plan(x.shape, wshape, geom, outsize, work, any_size=any_size)


def _host_tap_plan(x, wshape, geom, outsize, work, any_size=False):
    """_tap_groups.plan for host data."""
    if type(x) is not numpy.ndarray:
        return None
    return _tap_groups.plan(x.shape, wshape, geom, outsize, work, any_size=any_size)


# ---------------------------------------------------------------------------
# Each kernel's algorithm, chosen once per shape

# A kernel's choice (Winograd, the phases, tap groups, im2col...) depends
# only on the shapes, the compute dtype, whether the data is a NumPy array,
# and this process's threads and GEMM kernel. Its rules cost 0.4-1.4 us
# each in a loop, and in a training step, where their Python runs cold,
# 11-22 us of a small step's 120-190 us (one thread, batch 1: 1->16 1x1
# stride 2 on 4x4, 131 -> 118 us with the rules skipped, torch 121 us;
# conv_transpose 64->64 1x1 stride 2 on 16x16, 186 -> 174 us). So each
# choice is kept by its key (_choice): at most _MAX_CHOICES, then all are
# dropped. Code that changes a rule's threshold calls clear_choices().
_MAX_CHOICES = 1024
_choices = {}


def clear_choices():
    """Forget the kept choices (after a rule's threshold changed)."""
    _choices.clear()


def _choice(route, x, *shapes):
    """route(x, *shapes, forced), worked out once for each key: the route,
    whether x is a NumPy array, x's shape, ``shapes`` (hashable: shapes,
    geometry, dtype), the thread count, the GEMM kernel's tile and the
    algorithm forced (force_algorithm)."""
    forced = _forced.get()
    name = None if forced is None else forced.name
    key = (route, type(x) is numpy.ndarray, x.shape) + shapes + (
        native_kernels.max_threads(), gemm_kernels.tile_rows(), name)
    found = _choices.get(key)
    if found is None:
        if len(_choices) >= _MAX_CHOICES:
            _choices.clear()
        found = _choices[key] = route(x, *shapes, name)
    if forced is not None:
        how = 'output_phases' if found[0] is True else found[-2]
        forced.taken.append((route.__name__[1:-6], how))  # (kernel, algorithm)
    return found


# ---------------------------------------------------------------------------
# Forcing an algorithm (tests and benchmarks: xgrad.testing.force_conv_algorithm)

CONV_ALGORITHMS = ('winograd', 'phases', 'taps', 'pointwise', 'im2col')
CONV_TRANSPOSE_ALGORITHMS = ('output_phases', 'phases', 'taps', 'pointwise', 'flip', 'col2im',
                             'col2im_add')
GRAD_WEIGHT_ALGORITHMS = CONV_ALGORITHMS
ALGORITHMS = tuple(dict.fromkeys(CONV_ALGORITHMS + CONV_TRANSPOSE_ALGORITHMS))


class ForcedAlgorithm:
    """One force_algorithm block: the algorithm asked for, and what each
    kernel call inside it took, as (kernel, algorithm) pairs in call order
    (kernel: 'conv', 'conv_transpose' or 'grad_weight')."""

    def __init__(self, name):
        self.name = name
        self.taken = []


_forced = contextvars.ContextVar('xgrad_forced_conv_algorithm', default=None)


@contextlib.contextmanager
def force_algorithm(name):
    """Inside this block, each host convolution kernel (conv,
    conv_transpose, the weight gradient; also those that the gradients and
    the algorithms themselves call) that has the algorithm ``name`` and can
    compute its shape with it takes it, whether or not it pays there; the
    others choose as usual. Yields a ForcedAlgorithm whose ``taken`` lists
    what ran."""
    if name not in ALGORITHMS:
        raise ValueError('force_conv_algorithm: unknown algorithm {!r}; the algorithms are '
                         '{}'.format(name, ', '.join(ALGORITHMS)))
    forced = ForcedAlgorithm(name)
    token = _forced.set(forced)
    try:
        yield forced
    finally:
        _forced.reset(token)


def _forced_planned(forced, x, wshape, geom, outsize, work):
    """The forced algorithm of conv or its weight gradient, (how, plan), or
    None where it cannot compute this convolution."""
    if forced == 'winograd':
        plan = _winograd.transform_for(x, wshape, geom, outsize, work, any_size=True)
    elif forced == 'phases':
        plan = _host_phases(x, wshape, geom, outsize, work, any_size=True)
    elif forced == 'taps':
        plan = _host_tap_plan(x, wshape, geom, outsize, work, any_size=True)
    else:
        return None
    return None if plan is None else (forced, plan)


def _planned(x, wshape, geom, outsize, work):
    """The planned algorithms conv and its weight gradient share, best
    first: (how, plan), or None where none applies."""
    transform = _winograd.transform_for(x, wshape, geom, outsize, work)
    if transform is not None:  # 3x3 or 5x5, stride 1, 16+ channels
        return 'winograd', transform
    phases = _host_phases(x, wshape, geom, outsize, work)
    if phases is not None:  # 5x5, stride 2: Winograd over the input's phases
        return 'phases', phases
    # small images: GEMMs that skip the padding's taps (never pointwise
    # geometries: those have no padding, and the plan declines them)
    taps = _host_tap_plan(x, wshape, geom, outsize, work)
    if taps is not None:
        return 'taps', taps
    return None


def _conv_route(x, wshape, geom, outsize, work, forced=None):
    """conv_kernel's algorithm: (how, plan)."""
    planned = _forced_planned(forced, x, wshape, geom, outsize, work)
    if planned is not None:
        return planned
    if forced == 'im2col':
        return 'im2col', geom.groups == 1 and _own_forward_gemm(wshape[0])
    if forced == 'pointwise' and _pointwise(geom, x.shape[2:], outsize):
        return 'pointwise', None
    planned = _planned(x, wshape, geom, outsize, work)
    if planned is not None:
        return planned
    if _pointwise(geom, x.shape[2:], outsize):
        return 'pointwise', None
    return 'im2col', geom.groups == 1 and _own_forward_gemm(wshape[0])


def _conv_transpose_route(x, wshape, geom, outsize, work, forced=None):
    """conv_transpose_kernel's algorithm: (whether the output's phases come
    first, how, plan)."""
    n, c, g = x.shape[0], x.shape[1], geom.groups
    o = wshape[1] * g
    spatial = x.shape[2:]
    found = _forced_transpose_route(forced, x, wshape, geom, outsize, work)
    if found is not None:
        return found
    if _pointwise(geom, spatial, outsize):
        return False, 'pointwise', None
    output_phases = _output_phases_pay(x, wshape, geom, outsize, work)
    phases = _host_phases(x, wshape, geom, outsize, work, transposed=True)
    if phases is not None:
        return output_phases, 'phases', phases
    # Two algorithms, the same GEMM FLOPs; they differ in the elements they
    # move: (a) with stride 1 this is conv with the kernel flipped and in/out
    # swapped, padded by span - 1 - p: im2col of x over the output
    # positions, n * c * prod(k) * prod(outsize) elements, plus the flipped,
    # transposed copy of the weights, o * c/g * prod(k) (NumPy copies that
    # view at about 0.6 ns an element: 256->256 3x3, 0.36 ms); (b) one GEMM
    # w^T x (the transposed weights are a view the BLAS takes) gives the
    # columns of the output, n * o * prod(k) * prod(spatial) elements, which
    # col2im adds back. Take the one that moves fewer: (a) for a conv's
    # input gradient when the conv narrows the channels on images large
    # enough that the columns outweigh the weights (16->32 transposed on
    # 16x16, batch 8: (b) takes 2.45x (a)'s time), (b) when it widens them
    # and also on small images with many channels, where the weights
    # outweigh the columns ((b) takes of (a)'s time: 256->256 on 4x4, batch
    # 1, 0.44x; batch 8, 0.82x; 64->64 on 8x8, batch 1, 0.72x), and always
    # for stride > 1 (a would need a dilated x). (a) is also taken
    # whenever the flipped convolution is a Winograd one (3x3: 2.25-4x fewer
    # products, 5x5: 2.8x).
    full = _flipped_geometry(geom)
    flip = full is not None
    winograd = flip and _winograd.applies(x, (o, c // g) + tuple(geom.ksize), full, outsize,
                                          work)
    taps = None if winograd or type(x) is not numpy.ndarray else _tap_groups.plan(
        (n, o) + tuple(outsize), wshape, geom, spatial, work)
    if taps is not None:
        return output_phases, 'taps', taps
    spread_moves_fewer = _native_col2im(x, geom) and (
        n * o * _prod(spatial) < n * c * _prod(outsize) + o * (c // g))
    if flip and (not spread_moves_fewer or winograd):
        return output_phases, 'flip', full
    if _native_col2im(x, geom) and work in (numpy.float32, numpy.float64):
        return output_phases, 'col2im', None
    return output_phases, 'col2im_add', None


def _flipped_geometry(geom):
    """With stride 1, conv_transpose is conv with the kernel flipped and in
    and out swapped, padded by span - 1 - p: that conv's geometry, or None
    (a stride above 1, or a pad past the span)."""
    if not all(s == 1 for s in geom.stride) or not all(
            p <= (k - 1) * d for k, p, d in zip(geom.ksize, geom.pad, geom.dilate)):
        return None
    return geom._replace(pad=tuple((k - 1) * d - p for k, p, d in zip(
        geom.ksize, geom.pad, geom.dilate)))


def _forced_transpose_route(forced, x, wshape, geom, outsize, work):
    """The forced algorithm of conv_transpose_kernel (as its route returns
    it), or None where it cannot compute this convolution."""
    if forced == 'output_phases':
        if _output_phases_apply(x, geom, outsize, work):
            return (True,) + _conv_transpose_route(x, wshape, geom, outsize, work)[1:]
    elif forced == 'phases':
        plan = _host_phases(x, wshape, geom, outsize, work, transposed=True, any_size=True)
        if plan is not None:
            return False, 'phases', plan
    elif forced == 'taps':
        if type(x) is numpy.ndarray:
            plan = _tap_groups.plan((x.shape[0], wshape[1] * geom.groups) + tuple(outsize),
                                    wshape, geom, x.shape[2:], work, any_size=True)
            if plan is not None:
                return False, 'taps', plan
    elif forced == 'pointwise':
        if _pointwise(geom, x.shape[2:], outsize):
            return False, 'pointwise', None
    elif forced == 'flip':
        full = _flipped_geometry(geom)
        if full is not None:
            return False, 'flip', full
    elif forced == 'col2im':
        if _native_col2im(x, geom) and work in (numpy.float32, numpy.float64):
            return False, 'col2im', None
    elif forced == 'col2im_add':
        return False, 'col2im_add', None
    return None


def _grad_weight_route(x, gyshape, wshape, geom, work, forced=None):
    """conv_grad_weight_kernel's algorithm: (how, plan)."""
    outsize = gyshape[2:]
    planned = _forced_planned(forced, x, wshape, geom, outsize, work)
    if planned is not None:
        return planned
    if forced == 'im2col':
        return 'im2col', None
    if forced == 'pointwise' and _pointwise(geom, x.shape[2:], outsize):
        return 'pointwise', None
    planned = _planned(x, wshape, geom, outsize, work)
    if planned is not None:
        return planned
    og, cg = wshape[0] // geom.groups, x.shape[1] // geom.groups
    if _pointwise(geom, x.shape[2:], outsize) and og * cg <= (og + cg) * _prod(outsize):
        return 'pointwise', None
    return 'im2col', None


def conv_kernel(x, w, b, geom, outsize, keep_columns=None):
    """y[n, o, l] = sum over the window of x at l and o's channel group of
    w[o, c, k] * x[n, c, l * s + k * d - p], plus b[o]. ``keep_columns``: a
    list that receives the columns of ``x`` when the whole batch fits in one
    chunk (for the weight gradient, which needs the same columns)."""
    dtype = _result_dtype(x, w, b)
    work = _args.compute_dtype(dtype)
    x, w, b = kernel_operands(work, x, w, b)  # (what every algorithm's kernels read)
    n, o, g = x.shape[0], w.shape[0], geom.groups
    how, plan = _choice(_conv_route, x, w.shape, geom, tuple(outsize), work)
    if how == 'winograd':
        y = _winograd.conv(plan, numpy.ascontiguousarray(x, dtype=work), w, b, geom,
                           outsize, work, keep_columns)
        return y.astype(dtype, copy=False)
    if how == 'phases':  # Winograd over x's phases, gathered by its tile transforms
        y = _winograd.conv(plan.transform, numpy.ascontiguousarray(x, dtype=work), w, b,
                           plan.geom, outsize, work, keep_columns, phases=plan)
        return y.astype(dtype, copy=False)
    # (a copy when w is the flipped view of conv_transpose_kernel)
    wm = w.astype(work, copy=False).reshape(g, o // g, _prod(w.shape[1:]))
    if how == 'pointwise':
        return _pointwise_product(wm, x, b, g, work, outsize).astype(dtype, copy=False)
    if how == 'taps':
        return plan.conv(x, w, b).astype(dtype, copy=False)
    xp = _args.module_of(x)
    y = _empty(xp, (n, g, o // g, _prod(outsize)), work)
    # the bias, shaped to add to y's chunks as they are written (one pass)
    bias = None if b is None else b.astype(work, copy=False).reshape(g, o // g, 1)
    chunks = 0
    own = plan  # (im2col's: whether the product goes to our own GEMM)
    for lo, hi, cols in _column_chunks(x.astype(work, copy=False), geom, outsize):
        chunks += 1
        if hi - lo == 1:
            if not (own and sgemm(wm[0], cols[0], y[lo, 0])):
                _matmul(xp, wm, cols, y[lo])
            if bias is not None:
                y[lo] += bias
        else:  # columns are (.., sample, position): put the samples first
            part = _empty(xp, (g, o // g, cols.shape[2]), work)
            if not (own and sgemm(wm[0], cols[0], part[0])):
                _matmul(xp, wm, cols, part)
            part = part.reshape(g, o // g, hi - lo, _prod(outsize))
            if bias is None:
                y[lo:hi] = part.transpose(2, 0, 1, 3)
            else:  # the transposing copy and the bias add in one pass
                xp.add(part.transpose(2, 0, 1, 3), bias, out=y[lo:hi])
    if keep_columns is not None and chunks == 1:  # (one chunk: its buffer is not reused)
        keep_columns.append(cols)
    return y.reshape((n, o) + tuple(outsize)).astype(dtype, copy=False)


def conv_transpose_kernel(x, w, b, geom, outsize):
    """The adjoint of conv in its input: each x[n, c, l] spreads
    w[c, o, k] * x[n, c, l] to y[n, o, l * s + k * d - p], plus b[o]."""
    n, c, g = x.shape[0], x.shape[1], geom.groups
    o = w.shape[1] * g
    spatial = x.shape[2:]
    dtype = _result_dtype(x, w, b)
    work = _args.compute_dtype(dtype)
    x, w, b = kernel_operands(work, x, w, b)  # (what every algorithm's kernels read)
    output_phases, how, plan = _choice(_conv_transpose_route, x, w.shape, geom,
                                       tuple(outsize), work)
    if how == 'pointwise':  # y[n] = w^T x[n]
        wt = w.astype(work, copy=False).reshape(g, c // g, o // g).swapaxes(1, 2)
        return _pointwise_product(wt, x, b, g, work, outsize).astype(dtype, copy=False)
    if output_phases:
        y = _conv_transpose_phases(x, w, geom, outsize, work)
        if y is not None:
            return _add_bias(y, b).astype(dtype, copy=False)
    if how == 'phases':  # 5x5, stride 2: the adjoint of conv_kernel's phases
        gp = conv_transpose_kernel(x, plan.split_weight(w, work), None, plan.geom,
                                   plan.phase_size)
        return _add_bias(plan.merge_input(gp, outsize), b).astype(dtype, copy=False)
    if how == 'taps':  # small images: GEMMs that skip the padding's taps
        return _add_bias(plan.conv_transpose(x, w), b).astype(dtype, copy=False)
    if how == 'flip':  # plan: the flipped convolution's geometry
        flipped = w[(slice(None), slice(None)) + (slice(None, None, -1),) * len(geom.ksize)]
        flipped = flipped.reshape((g, c // g, o // g) + geom.ksize).swapaxes(1, 2)
        return conv_kernel(x, flipped.reshape((o, c // g) + geom.ksize), b, plan,
                           outsize).astype(dtype, copy=False)
    xm = x.astype(work, copy=False).reshape(n, g, c // g, _prod(spatial))
    wt = w.astype(work, copy=False).reshape(g, c // g, _prod(w.shape[1:])).swapaxes(1, 2)
    if how == 'col2im':
        return _add_bias(_col2im_whole(xm, wt, geom, spatial, (n, o) + tuple(outsize),
                                       work),
                         b).astype(dtype, copy=False)
    out = _padded_zeros((n, o) + tuple(outsize), geom, spatial, work, x)
    per_sample = o * _prod(geom.ksize) * _prod(spatial)
    for lo, hi in _chunks(n, per_sample):
        cols = _matmul(_args.module_of(wt), wt, xm[lo:hi])  # (m, g, o/g * prod(k), prod(l))
        _col2im_add(out[lo:hi], cols.reshape((hi - lo, o) + geom.ksize + spatial),
                    geom, spatial)
    return _add_bias(unpad(out, geom, outsize), b).astype(dtype, copy=False)


def conv_grad_weight_kernel(x, gy, wshape, dtype, geom, columns=None):
    """gw[o, c, k] = sum over n, l of gy[n, o, l] * x[n, c, l * s + k * d - p]
    (within o's channel group): the gradient of conv in w. ``columns``: the
    columns of the whole batch of ``x`` in the compute dtype, as conv_kernel
    kept them (saves building them again)."""
    work = _args.compute_dtype(numpy.dtype(dtype))
    x, gy = kernel_operands(work, x, gy)  # (what every algorithm's kernels read)
    how, plan = _choice(_grad_weight_route, x, tuple(gy.shape), tuple(wshape), geom, work)
    if how == 'winograd':
        tiles = columns if isinstance(columns, _winograd.Tiles) else None
        gw = _winograd.grad_weight(plan, numpy.ascontiguousarray(x, dtype=work),
                                   numpy.ascontiguousarray(gy, dtype=work), wshape, geom,
                                   work, tiles)
        return gw.astype(dtype, copy=False)
    if how == 'phases':  # 5x5, stride 2 (see conv_kernel)
        tiles = columns if isinstance(columns, _winograd.Tiles) else None
        gw = _winograd.grad_weight(plan.transform, numpy.ascontiguousarray(x, dtype=work),
                                   numpy.ascontiguousarray(gy, dtype=work), wshape, plan.geom,
                                   work, tiles, phases=plan)
        return gw.astype(dtype, copy=False)
    if how == 'taps':
        return plan.grad_weight(x, gy).astype(dtype, copy=False)
    n, g = x.shape[0], geom.groups
    og = wshape[0] // g
    gym = gy.astype(work, copy=False).reshape(n, g, og, _prod(gy.shape[2:]))
    xp = _args.module_of(x)
    ll, cg = gym.shape[3], x.shape[1] // g
    if how == 'pointwise':
        # (contiguous: a broadcast operand, sum's gradient, keeps matmul off the BLAS)
        gym = _contiguous_for_im2col(gy).astype(work, copy=False).reshape(gym.shape)
        # per-sample products summed: an (n, g, o/g, c/g) intermediate instead
        # of copies of both operands with the batch moved beside the positions
        xm = _contiguous_for_im2col(x).astype(work, copy=False).reshape(n, g, cg, ll)
        gw = _matmul(xp, gym, xm.swapaxes(2, 3)).sum(axis=0)
        return gw.reshape(wshape).astype(dtype, copy=False)
    # OpenBLAS runs these products fastest with the longer side of the
    # result as its rows: so where the windows (C/g * prod(k)) outnumber the
    # output channels, gw^T = cols @ rows^T, transposed at the end (one
    # thread, (O, C*k*k, N*L): (32, 400, 4096) 56 -> 86 GFLOP/s, (64, 1600,
    # 512) 72 -> 93, (16, 144, 4096) 35 -> 69), else gw = rows @ cols^T
    # ((32, 16, 6272): 50 against 37).
    ckk = _prod(wshape[1:])
    windows_first = ckk > og
    gw = _empty(xp, (g, ckk, og) if windows_first else (g, og, ckk), work)
    gw.fill(0)
    if isinstance(columns, numpy.ndarray) and columns.dtype == work:
        chunks = [(0, n, columns)]
    else:
        chunks = _column_chunks(x.astype(work, copy=False), geom, gy.shape[2:])
    for lo, hi, cols in chunks:
        rows = gym[lo:hi].transpose(1, 2, 0, 3).reshape(g, og, cols.shape[2])  # like cols
        if windows_first:
            if not (g == 1 and og >= _OWN_GEMM_MIN_COLUMNS
                    and sgemm(cols[0], rows[0].T, gw[0], accumulate=True)):
                gw += _matmul(xp, cols, rows.swapaxes(1, 2))
        else:
            gw += _matmul(xp, rows, cols.swapaxes(1, 2))
    if windows_first:  # back to (g, o/g, C/g k): w's own layout, C-contiguous
        # (a transposed view was the gradient once: an optimizer's update of
        # NIN's 1024x384x3x3 weights then took 41 ms instead of 3; NumPy's
        # transposing copy takes 48 ms there, transpose_into 2)
        out = _empty(xp, (g, og, ckk), work)
        if xp is numpy and work == numpy.float32:
            transpose_into(gw, out)
        else:
            out[...] = gw.swapaxes(1, 2)
        gw = out
    return gw.reshape(wshape).astype(dtype, copy=False)


# ---------------------------------------------------------------------------
# The three ops

def _bias_grad(xp, gy, b):
    sums = native_kernels.sum_channels(gy)  # (None but for host float32/64)
    if sums is not None:
        return xp.cast(sums, b.dtype)
    axes = (0,) + tuple(range(2, gy.ndim))
    if type(gy) is numpy.ndarray:  # (numpy.sum is a Python wrapper of this)
        return xp.cast(numpy.add.reduce(gy, axis=axes), b.dtype)
    return xp.cast(xp.sum(gy, axis=axes), b.dtype)


class _ConvLike(PyOp):
    """conv and conv_transpose: inputs (x, w[, b]), all retained. The
    gradient in x is the other one of the pair (each is the other's adjoint
    in x), in w a ``_ConvGradWeight``, in b the sum of gy."""

    columns = None  # of x, kept by a forward conv for its weight gradient
    # (conv's adjoint, conv_transpose, keeps none: the columns of conv's
    # input gradient conv(gy, w) serve conv_transpose's weight gradient)

    def __init__(self, geom, outsize):
        self.geom = geom
        self.outsize = outsize

    def forward(self, inputs):
        self.retain_inputs(tuple(range(len(inputs))))
        return (self.compute(*inputs),)

    def grads(self, xp, targets, gys, xs, ys):
        gy = gys[0]
        if len(targets) > 1:  # one contiguous copy of a broadcast gy (sum's
            gy = _contiguous_for_im2col(gy)  # gradient) for all the targets
        x, w = xs[:2]
        out = []
        columns = self.columns
        for t in targets:
            if t == 0:
                adjoint = self.adjoint(x.shape[2:])
                g = run(adjoint, gy, w)
                out.append(xp.cast(g, x.dtype))
                # conv_transpose's input gradient is conv(gy, w), whose
                # columns of gy are those its weight gradient needs
                columns = adjoint.columns if adjoint.columns is not None else columns
            elif t == 1:
                grad_weight = _ConvGradWeight(self.geom, w.shape, w.dtype, columns)
                out.append(run(grad_weight, *self.weight_grad_operands(x, gy)))
            else:
                out.append(_bias_grad(xp, gy, xs[2]))
        return tuple(out)


class _Conv(_ConvLike):
    op_name = 'conv'

    def compute(self, x, w, b=None):
        # The columns of x, kept for the weight gradient when they are one
        # chunk (at most _CHUNK_ELEMENTS): small convolutions spend as much
        # on building them as on the matmul.
        kept = []
        y = conv_kernel(x, w, b, self.geom, self.outsize, kept)
        self.columns = kept[0] if kept else None
        return y

    def adjoint(self, outsize):
        return _ConvTranspose(self.geom, outsize)

    def weight_grad_operands(self, x, gy):
        return x, gy


class _ConvTranspose(_ConvLike):
    op_name = 'conv_transpose'

    def compute(self, x, w, b=None):
        return conv_transpose_kernel(x, w, b, self.geom, self.outsize)

    def adjoint(self, outsize):
        return _Conv(self.geom, outsize)

    def weight_grad_operands(self, x, gy):
        # <conv_transpose(x, w), gy> = <x, conv(gy, w)>: gy plays conv's input.
        return gy, x


class _ConvGradWeight(PyOp):
    """gw = d<conv(x, w), gy>/dw, bilinear in (x, gy): its gradients are
    conv_transpose(gy, ggw) for x and conv(x, ggw) for gy."""
    op_name = 'conv_grad_weight'

    def __init__(self, geom, wshape, dtype, columns=None):
        self.geom = geom
        self.wshape = tuple(wshape)
        self.dtype = numpy.dtype(dtype)
        self.columns = columns  # of x, from the forward conv (or None)

    def compute(self, x, gy):
        return conv_grad_weight_kernel(x, gy, self.wshape, self.dtype, self.geom,
                                       self.columns)

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        return (self.compute(*inputs),)

    def grads(self, xp, targets, gys, xs, ys):
        ggw = gys[0]
        x, gy = xs
        out = []
        for t in targets:
            if t == 0:
                g = run(_ConvTranspose(self.geom, x.shape[2:]), gy, ggw)
                out.append(xp.cast(g, x.dtype))
            else:
                g = run(_Conv(self.geom, gy.shape[2:]), x, ggw)
                out.append(xp.cast(g, gy.dtype))
        return tuple(out)


# ---------------------------------------------------------------------------
# Public functions: argument checks, output sizes

def _inputs(op, x, w, b):
    x = _args.as_array(x, 'x')
    w = _args.as_array(w, 'w', x)
    b = None if b is None else _args.as_array(b, 'b', x)
    arrays = [x, w] + ([] if b is None else [b])
    # Any of ChainerX's dtypes: the result has their promoted dtype
    # (xgrad/_dtypes.pyx); the gradient is taken for float inputs only.
    _args.same_device(arrays, op)
    if x.ndim != w.ndim:
        raise _args.DimensionError('{}: x {} and w {} must have the same number of '
                                   'dimensions'.format(op, x.shape, w.shape))
    if x.ndim < 2:
        raise _args.DimensionError('{}: x {} must have a batch and a channel axis'.format(
            op, x.shape))
    return x, w, b


def _geometry(op, xshape, xdtype, wshape, stride, pad, dilate, groups):
    n = len(xshape) - 2
    groups = _args.int_arg(groups, 'groups', op=op)
    if groups < 1:
        raise ValueError('{}: groups must be positive, got {}'.format(op, groups))
    geom = Geometry(tuple(wshape[2:]), spatial_tuple(stride, n, 'stride', op, 1),
                    spatial_tuple(pad, n, 'pad', op, 0),
                    spatial_tuple(dilate, n, 'dilate', op, 1), int(groups))
    _args.check_result_size(tuple(xshape[:2]) + tuple(d + 2 * p for d, p in zip(
        xshape[2:], geom.pad)), xdtype, op, 'x with its padding')
    return geom


def _check_bias(op, bshape, channels, wshape):
    if bshape is not None and bshape != (channels,):
        raise _args.DimensionError('{}: b {} must have shape ({},) for w {}'.format(
            op, bshape, channels, wshape))


def _plain(stride, pad, dilate, groups, cover_all):
    """Whether the parameters are plain ints and cover_all a bool: the calls
    whose checked geometry is memoized (1.0 and True hash as 1, but must be
    checked, and refused or taken, as themselves)."""
    return (type(stride) is int and type(pad) is int and type(dilate) is int
            and type(groups) is int and type(cover_all) is bool)


def _conv_shapes(xshape, xdtype, wshape, bshape, stride, pad, dilate, groups, cover_all):
    """conv's checks on shapes and parameters: (geom, outsize)."""
    geom = _geometry('conv', xshape, xdtype, wshape, stride, pad, dilate, groups)
    c, o, g = xshape[1], wshape[0], geom.groups
    if c % g or o % g:
        raise _args.DimensionError('conv: groups={} must divide the channels of x {} and '
                                   'the filters of w {}'.format(g, xshape, wshape))
    if wshape[1] * g != c:
        raise _args.DimensionError(
            'conv: x {} has {} channels, but w {} takes {} (w.shape[1] * groups)'.format(
                xshape, c, wshape, wshape[1] * g))
    _check_bias('conv', bshape, o, wshape)
    outsize = tuple(out_size(d, k, s, p, dl, cover_all) for d, k, s, p, dl in zip(
        xshape[2:], geom.ksize, geom.stride, geom.pad, geom.dilate))
    if any(l < 1 for l in outsize):
        raise _args.DimensionError(
            'conv: the windows of w {} (dilate {}) do not fit in x {} padded by {}'.format(
                wshape, geom.dilate, xshape, geom.pad))
    return geom, outsize


# The checks of the last calls' shapes and plain-int parameters, whose
# Python costs about as much as a small convolution's products (1->16 1x1
# stride 2 on 4x4: 3.5 of the public call's 7 us besides the kernel).
_memo_conv_shapes = functools.lru_cache(maxsize=512)(_conv_shapes)


def conv(x, w, b=None, stride=1, pad=0, cover_all=False, *, dilate=1, groups=1):
    """N-dimensional convolution (cross-correlation) of ``x`` (N, C, d_1..d_n)
    with ``w`` (out_C, C / groups, k_1..k_n), plus ``b`` (out_C,).

    The output has l_i = (d_i + 2 p_i - (k_i - 1) * dilate_i - 1) // s_i + 1
    positions per axis; with ``cover_all``, one more where the windows would
    leave a tail of the input uncovered (Chainer's formula).
    ``stride``, ``pad`` and ``dilate`` are ints or one int per spatial axis;
    ``groups`` splits the channels into independent convolutions.
    """
    x, w, b = _inputs('conv', x, w, b)
    shapes = _memo_conv_shapes if _plain(stride, pad, dilate, groups, cover_all) else \
        _conv_shapes
    geom, outsize = shapes(x.shape, x.dtype, w.shape, None if b is None else b.shape, stride,
                           pad, dilate, groups, cover_all)
    return _args.apply(_Conv(geom, outsize), *(a for a in (x, w, b) if a is not None))


def conv_transpose(x, w, b=None, stride=1, pad=0, outsize=None, *, dilate=1, groups=1):
    """N-dimensional transposed convolution (the gradient of ``conv`` in its
    input) of ``x`` (N, C, d_1..d_n) with ``w`` (C, out_C / groups, k_1..k_n),
    plus ``b`` (out_C,).

    ``outsize`` None: l_i = s_i (d_i - 1) + (k_i - 1) * dilate_i + 1 - 2 p_i.
    Given, it must be a size ``conv`` with the same parameters maps back to
    d_i (with or without cover_all, decided for all axes at once as ChainerX).
    """
    x, w, b = _inputs('conv_transpose', x, w, b)
    geom = _geometry('conv_transpose', x.shape, x.dtype, w.shape, stride, pad, dilate, groups)
    c, g = x.shape[1], geom.groups
    if w.shape[0] != c:
        raise _args.DimensionError('conv_transpose: x {} has {} channels, but w {} takes {} '
                                   '(w.shape[0])'.format(x.shape, c, w.shape, w.shape[0]))
    if c % g:
        raise _args.DimensionError('conv_transpose: groups={} must divide the channels of '
                                   'x {}'.format(g, x.shape))
    _check_bias('conv_transpose', None if b is None else b.shape, w.shape[1] * g, w.shape)
    spatial = x.shape[2:]
    params = list(zip(geom.ksize, geom.stride, geom.pad, geom.dilate))
    if outsize is None:
        outsize = tuple(s * (d - 1) + (k - 1) * dl + 1 - 2 * p
                        for d, (k, s, p, dl) in zip(spatial, params))
        if any(l < 1 for l in outsize):
            raise _args.DimensionError(
                'conv_transpose: x {} with w {}, stride {} and pad {} gives the output '
                'size {}, which is not positive'.format(x.shape, w.shape, geom.stride,
                                                        geom.pad, outsize))
    else:
        # (an output shape: ChainerX's DimensionError when it is not positive)
        outsize = spatial_tuple(outsize, len(spatial), 'outsize', 'conv_transpose', 1,
                                _args.DimensionError)
        cover_all = any(out_size(l, k, s, p, dl) != d
                        for l, d, (k, s, p, dl) in zip(outsize, spatial, params))
        if any(out_size(l, k, s, p, dl, cover_all) != d
               for l, d, (k, s, p, dl) in zip(outsize, spatial, params)):
            raise _args.DimensionError(
                'conv_transpose: outsize {} does not fit x {}: conv with w {}, stride {} '
                'and pad {} maps it to another size'.format(
                    outsize, x.shape, w.shape, geom.stride, geom.pad))
    return _args.apply(_ConvTranspose(geom, tuple(outsize)),
                       *(a for a in (x, w, b) if a is not None))


# ---------------------------------------------------------------------------
# Registry: naive loop references (independent of the kernels above)

def _expand(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def _reference_conv(x, w, b=None, stride=1, pad=0, cover_all=False, dilate=1, groups=1):
    """conv by direct loops over output positions and kernel taps, in float64."""
    n = x.ndim - 2
    s, p, d = _expand(stride, n), _expand(pad, n), _expand(dilate, n)
    ksize = w.shape[2:]
    dtype = _result_dtype(x, w, b)
    # s extra zeros after each axis: room for cover_all's last window.
    xp = numpy.pad(x.astype(numpy.float64), [(0, 0)] * 2 + [(q, q + t) for q, t in zip(p, s)])
    outs = tuple((size + 2 * q - (k - 1) * dd - 1 + (t - 1 if cover_all else 0)) // t + 1
                 for size, k, t, q, dd in zip(x.shape[2:], ksize, s, p, d))
    y = numpy.zeros((x.shape[0], w.shape[0]) + outs)
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    for g in range(groups):
        xs, os = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for pos in numpy.ndindex(*outs):
            for k in numpy.ndindex(*ksize):
                at = tuple(i * t + j * dd for i, t, j, dd in zip(pos, s, k, d))
                y[(slice(None), os) + pos] += _at(xp, xs, at) @ w[(os, slice(None)) + k].T
    if b is not None:
        y += b.reshape((1, -1) + (1,) * n)
    return y.astype(dtype)


def _at(a, channels, position):
    """a[:, channels, *position]: (N, len(channels))."""
    return a[(slice(None), channels) + position]


def _reference_conv_transpose(x, w, b=None, stride=1, pad=0, outsize=None, dilate=1,
                              groups=1):
    """conv_transpose by scattering each input element times the kernel, in
    float64."""
    n = x.ndim - 2
    s, p, d = _expand(stride, n), _expand(pad, n), _expand(dilate, n)
    ksize = w.shape[2:]
    dtype = _result_dtype(x, w, b)
    if outsize is None:
        outsize = tuple(t * (size - 1) + (k - 1) * dd + 1 - 2 * q
                        for size, k, t, q, dd in zip(x.shape[2:], ksize, s, p, d))
    span = tuple(max(t * (size - 1) + (k - 1) * dd + 1, l + 2 * q) for size, k, t, q, dd, l
                 in zip(x.shape[2:], ksize, s, p, d, outsize))
    cg, og = x.shape[1] // groups, w.shape[1]
    x = x.astype(numpy.float64)
    y = numpy.zeros((x.shape[0], og * groups) + span)
    for g in range(groups):
        xs, os = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for pos in numpy.ndindex(*x.shape[2:]):
            for k in numpy.ndindex(*ksize):
                at = tuple(i * t + j * dd for i, t, j, dd in zip(pos, s, k, d))
                y[(slice(None), os) + at] += _at(x, xs, pos) @ w[(xs, slice(None)) + k]
    y = y[(slice(None), slice(None)) + tuple(slice(q, q + l) for q, l in zip(p, outsize))]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * n)
    return y.astype(dtype)


register(OpInfo(
    'conv', conv, ref=_reference_conv,
    samples=[Sample((2, 3, 5), (4, 3, 3)),
             Sample((2, 3, 6), (4, 3, 2), (4,), stride=2, pad=1),
             Sample((2, 3, 4, 4), (2, 3, 3, 3), (2,), pad=1),
             Sample((1, 2, 5, 4), (2, 2, 2, 2), stride=(2, 3), cover_all=True),
             Sample((1, 2, 5, 5), (2, 2, 2, 2), dilate=2, pad=(1, 0)),
             Sample((2, 4, 4, 3), (6, 2, 2, 2), (6,), groups=2),
             Sample((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), (2,), stride=(1, 2, 1),
                    pad=(0, 1, 1)),
             Sample((3, 4), (2, 4), (2,)),
             Sample((0, 2, 4, 4), (3, 2, 3, 3), (3,), pad=1)],
    int_dtypes=INT_DTYPES + (BOOL,), promotion='result_type'))

register(OpInfo(
    'conv_transpose', conv_transpose, ref=_reference_conv_transpose,
    samples=[Sample((2, 3, 4), (3, 2, 3)),
             Sample((2, 3, 3), (3, 2, 3), (2,), stride=2, pad=1, outsize=(6,)),
             Sample((1, 2, 2, 3), (2, 2, 2, 2), stride=2, outsize=(3, 6)),
             Sample((2, 4, 3, 3), (4, 1, 2, 2), (2,), dilate=2, groups=2, pad=1),
             Sample((1, 2, 2, 3, 2), (2, 3, 2, 2, 2), (3,), stride=(2, 1, 1),
                    pad=(0, 1, 0)),
             Sample((3, 4), (4, 2), (2,)),
             Sample((0, 2, 3, 3), (2, 3, 2, 2), (3,))],
    int_dtypes=INT_DTYPES + (BOOL,), promotion='result_type'))
