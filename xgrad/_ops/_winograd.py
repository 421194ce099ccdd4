"""3x3 and 5x5 convolutions with stride 1 by Winograd's F(4x4, 3x3),
F(2x2, 3x3), F(4x4, 5x5) and F(2x2, 5x5) (Lavin and Gray 2016): 36
multiplications per 4x4 block of outputs instead of 144, 16 per 2x2 block
instead of 36, 64 per 4x4 block instead of 400, and 36 per 2x2 block
instead of 100.

Why: im2col + one GEMM does r^2 multiply-adds per output and input channel
(9 or 25); the transformed products do a^2 / m^2 (2.25, 4 or 9), as a^2
GEMMs of the same K (input channels) that OpenBLAS runs at nearly the rate
of the one large GEMM. With enough channels and tiles that is what decides
(``Transform.min_channels``, ``min_tiles``); with fewer the a^2 GEMMs are
too thin and im2col's single GEMM (K = r^2 C) wins.

Three passes use it, the same transform for each:

* forward: y = A^T [U * V] A with U = G g G^T (filters) and V = B^T d B
  (input tiles; ``winograd_kernels.input_tiles``);
* the input gradient, a convolution with the flipped kernel when stride is
  1 (``convolution.conv_transpose_kernel``'s flip path), so the forward;
* the weight gradient, the adjoint in g: gw = G^T [sum over tiles of
  (A gy A^T) * V] G, with the forward's V kept (up to _KEEP_ELEMENTS).

The matrices come from the Toom-Cook construction (A^T and G Vandermonde
matrices of the interpolation points, B^T the inverse's transpose, its
rows scaled to integers or quarters): points 0, 1, -1 and infinity for
F(2x2, 3x3), 0, 1, -1, 2, -2 and infinity for F(2x2, 5x5) and F(4x4, 3x3)
(the same B^T), and those with 1/2 and -1/2 for F(4x4, 5x5). The error is
that of the transforms' extra additions: F(2x2, 3x3)'s entries are 0, +-1
and +-1/2, a few units in the last place more than the direct sum in
float32; the six-point transforms' reach 5 in B^T, 8 in A^T
and 1/24 in G, about ten times the direct sum's rounding (5e-7 to 1.5e-6
of the sum of |x| |w| in float32), well inside the tolerances conv is
checked at; F(4x4, 5x5)'s (21/4 in B^T, 8 in A^T) about the same relative to
its 25-term sums. Host float32/float64 only (the GPU keeps its own path).
"""

import numpy

from xgrad._backend import winograd_kernels, workspace
from xgrad._ops import _gemm_layout

# Samples per chunk: the transformed tiles of a chunk stay under this many
# elements (2 MiB of float32), so that the a^2 GEMMs read them and write
# their products from cache, not memory. 16->32 channels, 5x5, 16x16,
# batch 64, forward + both gradients: 35 ms with chunks of 4M elements,
# 25 ms with 1M, 22 ms with 512K; 64->64 on 16x16, batch 8: 14.2 -> 12.2 ms.
_CHUNK_ELEMENTS = 1 << 19
# ... but at least this many tiles a chunk: the a^2 GEMMs are (O, C) times
# (C, tiles), and with many channels the cache-sized chunk holds a few
# dozen tiles (14 for 1,024 channels), too thin a product for the BLAS, and
# each chunk reads the (a^2, O, C) filters from memory again. 5x5 stride 2
# over 256->256 channels' phases (1,024 of them), 8x8 images, batch 64: 306
# -> 150 ms; 128->128 on 32x32, batch 8: 91 -> 54 ms.
_MIN_CHUNK_TILES = 128
# The forward keeps its transformed input tiles for the weight gradient
# (saves transforming x again) up to this many elements (16 MiB of float32).
_KEEP_ELEMENTS = 1 << 22


class Transform:
    """F(m x m, r x r): its matrices and where it pays over im2col."""

    def __init__(self, a_t, g, b_t, min_channels, min_tiles, unrolled=False):
        self.a_t = numpy.array(a_t, float)  # (m, a)
        self.g = numpy.array(g, float)  # (a, r)
        self.b_t = numpy.array(b_t, float)  # (a, a)
        self.m, self.a = self.a_t.shape
        self.r = self.g.shape[1]
        # kron(G, G): G g G^T of an r x r g, flattened, is this (a^2, r^2)
        # times g flattened; so all filters are one GEMM, straight into the
        # (a^2, O, C) layout.
        self.gg = numpy.kron(self.g, self.g)
        self.min_channels = min_channels
        self.min_tiles = min_tiles
        # F(2x2, 3x3) has kernels with its matrices written out (faster)
        self.unrolled = unrolled

    def tile_counts(self, outsize):
        return winograd_kernels.tile_counts(outsize[0], outsize[1], self.m)

    def input_tiles(self, x, v, pad, phases=None):
        """v = B^T d B of x's tiles (winograd_kernels.input_tiles); with
        ``phases`` (a _polyphase.Phases), of the tiles of x's phases."""
        if phases is not None:
            if self.unrolled:
                raise ValueError('the phases take a transform of 4x4 blocks or larger')
            done = winograd_kernels.input_tiles(x, v, self.b_t, self.m, phases.pad[0],
                                                phases.pad[1], phases.s, *phases.phase_size)
        elif self.unrolled:
            done = winograd_kernels.input_tiles_3x3(x, v, pad[0], pad[1])
        else:
            done = winograd_kernels.input_tiles(x, v, self.b_t, self.m, pad[0], pad[1])
        if not done:
            raise RuntimeError('winograd input_tiles refused {} {}'.format(x.shape, v.shape))

    def output_tiles(self, e, y, bias):
        """y = A^T e A (+ bias) of e's tiles."""
        if self.unrolled:
            done = winograd_kernels.output_tiles_3x3(e, y, bias)
        else:
            done = winograd_kernels.output_tiles(e, y, self.a_t, bias)
        if not done:
            raise RuntimeError('winograd output_tiles refused {}'.format(y.shape))

    def gradient_tiles(self, gy, g):
        """g = A q A^T of gy's blocks."""
        if self.unrolled:
            done = winograd_kernels.gradient_tiles_3x3(gy, g)
        else:
            done = winograd_kernels.gradient_tiles(gy, g, self.a_t)
        if not done:
            raise RuntimeError('winograd gradient_tiles refused {}'.format(gy.shape))


# Where they pay (one thread, against im2col on the same shapes, measured
# with bench/conv_sweep.py's steps, forward + both gradients):
# F(2x2, 3x3): both channel counts at least 32 and at least 64 tiles in the
# batch. 64->64 channels on 16x16, batch 8: 6.6 -> 4.7 ms; 256->256 on 8x8,
# batch 8: 22.0 -> 14.4 ms; 32->32 on 16x16, batch 8: 2.2 -> 1.8 ms. Below
# them the 16 GEMMs are too thin (K or N of a few dozen) and lose to
# im2col's one GEMM: 16->32 channels break even, 64->64 on 8x8 at batch 1
# (16 tiles) is 1.3x slower.
F2X2_3X3 = Transform(
    a_t=[[1, 1, 1, 0], [0, 1, -1, -1]],
    g=[[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
    b_t=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    min_channels=32, min_tiles=64, unrolled=True)
# F(2x2, 5x5): at least 16 channels each side and 64 tiles. It pays from
# fewer channels than F(2x2, 3x3) since it saves more (2.8x fewer products,
# and im2col's columns are 25 per output, not 9): 16->32 channels on 8x8,
# batch 64: 8.1 -> 5.8 ms; 64->64 on 16x16, batch 8: 22.0 -> 13.1 ms;
# 64->64 on 4x4, batch 64: 12.6 -> 7.3 ms; 128->128 on 16x16, batch 1:
# 10.1 -> 7.9 ms. With fewer tiles the filter transforms and the weight
# gradient's (36, O, C) products, which do not shrink with the batch, cost
# more than the GEMMs save: 64->64 on 8x8 at batch 1 (16 tiles) 0.8 ->
# 2.2 ms, 128->128 on 4x4 at batch 8 (32 tiles) 6.5 -> 8.5 ms.
F2X2_5X5 = Transform(
    a_t=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 1]],
    g=[[1 / 4, 0, 0, 0, 0],
       [1 / 6, 1 / 6, 1 / 6, 1 / 6, 1 / 6],
       [1 / 6, -1 / 6, 1 / 6, -1 / 6, 1 / 6],
       [1 / 24, 1 / 12, 1 / 6, 1 / 3, 2 / 3],
       [1 / 24, -1 / 12, 1 / 6, -1 / 3, 2 / 3],
       [0, 0, 0, 0, 1]],
    b_t=[[4, 0, -5, 0, 1, 0],
         [0, 4, 4, -1, -1, 0],
         [0, -4, 4, 1, -1, 0],
         [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0],
         [0, 4, 0, -5, 0, 1]],
    min_channels=16, min_tiles=64)
# F(4x4, 3x3): 2.25 products per output and input channel where F(2x2,
# 3x3) does 4, from 16 channels each side and at least 64 of its 6x6 tiles
# (1,024 outputs) in the batch; with fewer tiles its 36 GEMMs are too thin
# and F(2x2, 3x3) or im2col take over. Against F(2x2, 3x3) (one thread,
# forward + both gradients): 64->64 on 32x32, batch 8: 18.8 -> 13.9 ms;
# 64->64 on 4x4, batch 64 (64 tiles): 2.95 -> 2.18 ms; 128->128 on 32x32,
# batch 1 (64 tiles): 8.5 -> 6.9 ms; 16->32 on 8x8, batch 64: 2.41 ->
# 1.80 ms (im2col 3.32); 256->256 on 56x56, batch 1: 71.6 -> 55.5 ms.
# Below 64 tiles it loses: 64->64 on 8x8 at batch 8 (32 tiles) 1.87 ->
# 2.06 ms, 256->256 on 16x16 at batch 1 (16 tiles) 11.4 -> 16.7 ms.
F4X4_3X3 = Transform(
    a_t=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    g=[[1 / 4, 0, 0],
       [1 / 6, 1 / 6, 1 / 6],
       [1 / 6, -1 / 6, 1 / 6],
       [1 / 24, 1 / 12, 1 / 6],
       [1 / 24, -1 / 12, 1 / 6],
       [0, 0, 1]],
    b_t=F2X2_5X5.b_t,
    min_channels=16, min_tiles=64)
# F(4x4, 5x5): 8x8 tiles, 4 products per output and input channel where
# F(2x2, 5x5) does 9, and 4 tile values per output instead of 9 to gather
# and transform. The points 0, +-1, +-2, +-1/2 and infinity (those of
# F(6x6, 3x3) in NNPACK and oneDNN); the halves keep B^T's entries small
# (up to 21/4). Float32 error on 64 channels, 200 random tiles: 6 eps of
# the sum of |x| |w| at most (F(2x2, 5x5) 4, F(4x4, 3x3) 8). From 16
# channels each side and 32 tiles (512 outputs); against F(2x2, 5x5), one
# thread, forward + both gradients: 16->32 on 8x8, batch 64: 4.07 -> 2.41
# ms; 64->64 on 32x32, batch 8: 41.0 -> 20.9 ms; 64->64 on 4x4, batch 64:
# 5.7 -> 3.4 ms; at 32 tiles 0.76-0.96x (128->128 on 8x8, batch 8: 10.6 ->
# 8.1 ms); at 16 tiles it loses 1.09-1.20x (256->256 on 16x16, batch 1).
F4X4_5X5 = Transform(
    a_t=[[1, 1, 1, 1, 1, 1, 1, 0],
         [0, 1, -1, 2, -2, 1 / 2, -1 / 2, 0],
         [0, 1, 1, 4, 4, 1 / 4, 1 / 4, 0],
         [0, 1, -1, 8, -8, 1 / 8, -1 / 8, 1]],
    g=[[1, 0, 0, 0, 0],
       [-2 / 9, -2 / 9, -2 / 9, -2 / 9, -2 / 9],
       [-2 / 9, 2 / 9, -2 / 9, 2 / 9, -2 / 9],
       [1 / 90, 1 / 45, 2 / 45, 4 / 45, 8 / 45],
       [1 / 90, -1 / 45, 2 / 45, -4 / 45, 8 / 45],
       [32 / 45, 16 / 45, 8 / 45, 4 / 45, 2 / 45],
       [32 / 45, -16 / 45, 8 / 45, -4 / 45, 2 / 45],
       [0, 0, 0, 0, 1]],
    b_t=[[1, 0, -21 / 4, 0, 21 / 4, 0, -1, 0],
         [0, 1, 1, -17 / 4, -17 / 4, 1, 1, 0],
         [0, -1, 1, 17 / 4, -17 / 4, -1, 1, 0],
         [0, 1 / 2, 1 / 4, -5 / 2, -5 / 4, 2, 1, 0],
         [0, -1 / 2, 1 / 4, 5 / 2, -5 / 4, -2, 1, 0],
         [0, 2, 4, -5 / 2, -5, 1 / 2, 1, 0],
         [0, -2, 4, 5 / 2, -5, -1 / 2, 1, 0],
         [0, -1, 0, 21 / 4, 0, -21 / 4, 0, 1]],
    min_channels=16, min_tiles=32)
# By kernel size, the transforms in the order they are preferred: the first
# whose channels and tiles the convolution has computes it.
TRANSFORMS = {3: (F4X4_3X3, F2X2_3X3), 5: (F4X4_5X5, F2X2_5X5)}


class Tiles:
    """The forward's transformed input tiles, one (a^2, C, P) array per
    chunk of samples, kept for the weight gradient as im2col's columns are."""

    def __init__(self, transform, chunks):
        self.transform = transform
        self.chunks = chunks


def transform_for(x, wshape, geom, outsize, work, any_size=False):
    """The Transform that computes conv(x, w) here, or None: host
    float32/float64 data (see transform_for_shape)."""
    if type(x) is not numpy.ndarray or x.ndim != 4:
        return None
    return transform_for_shape(x.shape, wshape, geom, outsize, work, any_size=any_size)


def transform_for_shape(xshape, wshape, geom, outsize, work, count_tiles=True, any_size=False):
    """The Transform that computes a conv of x of ``xshape`` (N, C, h, w)
    with w of ``wshape``, or None: a float32/float64 2-D 3x3 or 5x5
    convolution with stride and dilation 1, one group, the stride-1 output
    size; the first of the kernel size's transforms with at least its
    channels in and out and (``count_tiles``: unless the caller counts
    them itself) its tiles in the batch. ``any_size``: the first transform
    whatever the channels and tiles (a forced algorithm)."""
    ksize = tuple(geom.ksize)
    if (len(ksize) != 2 or ksize[0] != ksize[1] or ksize[0] not in TRANSFORMS
            or tuple(geom.stride) != (1, 1) or tuple(geom.dilate) != (1, 1)
            or geom.groups != 1):
        return None
    if len(xshape) != 4 or len(wshape) != 4 or work not in (numpy.float32, numpy.float64):
        return None
    r = ksize[0]
    h, w = xshape[2:]
    ph, pw = geom.pad
    if tuple(outsize) != (h + 2 * ph - r + 1, w + 2 * pw - r + 1) or min(outsize) <= 0:
        return None
    if any_size:
        return TRANSFORMS[r][0]
    channels = min(xshape[1], wshape[0])
    for t in TRANSFORMS[r]:
        th, tw = t.tile_counts(outsize)
        if channels >= t.min_channels and (not count_tiles
                                           or xshape[0] * th * tw >= t.min_tiles):
            return t
    return None


def applies(x, wshape, geom, outsize, work):
    """Whether a Winograd transform computes conv(x, w) here."""
    return transform_for(x, wshape, geom, outsize, work) is not None


def _channels(wshape, phases):
    """The channels the a^2 products sum over: w's, or with ``phases`` (a
    _polyphase.Phases) those of w's phases, C s^2."""
    return wshape[1] if phases is None else phases.weight_shape(wshape)[1]


def _filters(t, w, work, phases=None):
    """U = G g G^T of each filter of w (O, C, r, r): (a^2, O, C). With
    ``phases`` (a _polyphase.Phases), of each filter's s^2 phases, (a^2, O,
    C s^2), gathered from w by winograd_kernels.filter_tiles: the phases'
    weights as an array are a 6-D transposing copy, which with this GEMM
    took 3.9-4.1 ms for 128->128 5x5 filters (one thread), 1.9-2.1 ms in
    the kernel. Without phases the GEMM (kron(G, G) times the filters) is
    about as fast as that kernel (256->256 3x3, 1.7-2.4 against 1.8-2.9
    ms)."""
    o, c = w.shape[:2]
    if phases is not None:
        u = workspace.empty((t.a * t.a, o, _channels(w.shape, phases)), work)
        if not winograd_kernels.filter_tiles(numpy.ascontiguousarray(w, dtype=work), u, t.g,
                                             phases.s):
            raise RuntimeError('winograd filter_tiles refused {}'.format(w.shape))
        return u
    flat = w.astype(work, copy=False).reshape(o * c, t.r * t.r)
    return (t.gg.astype(work) @ flat.T).reshape(t.a * t.a, o, c)


def _filter_gradients(t, du, wshape, work, phases=None):
    """The adjoint of _filters: w's gradient (O, C, r, r) from U's, ``du``."""
    if phases is not None:
        gw = workspace.empty(wshape, work)
        if not winograd_kernels.filter_gradients(du, gw, t.g, phases.s):
            raise RuntimeError('winograd filter_gradients refused {}'.format(du.shape))
        return gw
    # G^T dU G of each (o, c): the transpose of _filters' product
    o, c = wshape[:2]
    return (du.reshape(t.a * t.a, o * c).T @ t.gg.astype(work)).reshape(o, c, t.r, t.r)


def _sample_chunks(n, tiles, per_tile):
    """(lo, hi) of the chunks of n samples of ``tiles`` tiles each, each
    tile ``per_tile`` elements: _CHUNK_ELEMENTS a chunk, but at least
    _MIN_CHUNK_TILES tiles."""
    step = max(1, _CHUNK_ELEMENTS // max(1, tiles * per_tile), -(-_MIN_CHUNK_TILES // tiles))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def conv(t, x, w, b, geom, outsize, work, keep=None, phases=None):
    """y = conv(x, w) + b by the Transform t in ``work`` (x contiguous in
    ``work``); ``keep`` (a list) receives the batch's Tiles when they are at
    most _KEEP_ELEMENTS. With ``phases`` (a _polyphase.Phases) the
    convolution is over x's phases (``geom`` their geometry, ``w`` conv's
    own weights): the input tiles gather x's phases from x, the filter
    transform w's from w."""
    n, c = x.shape[0], _channels(w.shape, phases)
    o = w.shape[0]
    values = t.a * t.a
    th, tw = t.tile_counts(outsize)
    u = _filters(t, w, work, phases)
    bias = None if b is None else numpy.ascontiguousarray(b, dtype=work)
    y = workspace.empty((n, o) + tuple(outsize), work)
    chunks = _sample_chunks(n, th * tw, values * max(c, o))
    kept = [] if keep is not None and values * c * n * th * tw <= _KEEP_ELEMENTS else None
    # one buffer for every chunk's tiles (unless they are kept) and one for
    # the products, their rows padded (_gemm_layout)
    widest = chunks[0][1] * th * tw if chunks else 0
    flat = products = None
    for lo, hi in chunks:
        tiles = (hi - lo) * th * tw
        if kept is not None or flat is None:
            flat = workspace.empty(_gemm_layout.padded_size(values * c, widest, work), work)
            products = products if products is not None else workspace.empty(
                _gemm_layout.padded_size(values * o, widest, work), work)
        v = _gemm_layout.padded(flat, (values, c, tiles))
        t.input_tiles(x[lo:hi], v, geom.pad, phases)
        e = _gemm_layout.padded(products, (values, o, tiles))
        numpy.matmul(u, v, out=e)
        t.output_tiles(e, y[lo:hi], bias)
        if kept is not None:
            kept.append(v)
    if kept is not None:
        keep.append(Tiles(t, kept))
    return y


def grad_weight(t, x, gy, wshape, geom, work, tiles=None, phases=None):
    """gw = d<conv(x, w), gy>/dw (O, C, r, r) by the Transform t in
    ``work`` (x and gy contiguous in ``work``); ``tiles``: the forward's
    Tiles of x. With ``phases``, of the convolution over x's phases (as
    conv's; ``wshape`` conv's own)."""
    n, c = x.shape[0], _channels(wshape, phases)
    o = wshape[0]
    values = t.a * t.a
    th, tw = t.tile_counts(gy.shape[2:])
    du = workspace.zeros((values, o, c), work)
    chunks = _sample_chunks(n, th * tw, values * max(c, o))
    if tiles is not None and (tiles.transform is not t or len(tiles.chunks) != len(chunks)
                              or any(v.dtype != work for v in tiles.chunks)):
        tiles = None
    widest = chunks[0][1] * th * tw if chunks else 0
    flat_v = flat_g = None  # (rows padded: _gemm_layout)
    for i, (lo, hi) in enumerate(chunks):
        count = (hi - lo) * th * tw
        if tiles is not None:
            v = tiles.chunks[i]
        else:
            if flat_v is None:
                flat_v = workspace.empty(_gemm_layout.padded_size(values * c, widest, work), work)
            v = _gemm_layout.padded(flat_v, (values, c, count))
            t.input_tiles(x[lo:hi], v, geom.pad, phases)
        if flat_g is None:
            flat_g = workspace.empty(_gemm_layout.padded_size(values * o, widest, work), work)
        g = _gemm_layout.padded(flat_g, (values, o, count))
        t.gradient_tiles(gy[lo:hi], g)
        du += numpy.matmul(g, v.transpose(0, 2, 1))
    return _filter_gradients(t, du, tuple(wshape), work, phases)
