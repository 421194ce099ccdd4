"""3x3 and 5x5 convolutions with stride 1 by Winograd's F(4x4, 3x3),
F(2x2, 3x3), F(4x4, 5x5) and F(2x2, 5x5) (Lavin and Gray 2016): 36
multiplications per 4x4 block of outputs instead of 144, 16 per 2x2 block
instead of 36, 64 per 4x4 block instead of 400, and 36 per 2x2 block
instead of 100.

Why: im2col + one GEMM does r^2 multiply-adds per output and input channel
(9 or 25); the transformed products do a^2 / m^2 (2.25, 4 or 9), as a^2
GEMMs of the same K (input channels) that OpenBLAS runs at nearly the rate
of the one large GEMM. With enough channels and tiles that is what decides
(thresholds.Thresholds.winograd); with fewer the a^2 GEMMs are
too thin and im2col's single GEMM (K = r^2 C) wins.

Three passes use it, the same transform for each:

* forward: y = A^T [U * V] A with U = G g G^T (filters) and V = B^T d B
  (input tiles; ``winograd_kernels.input_tiles``);
* the input gradient, a convolution with the flipped kernel when stride is
  1 (``convolution.conv_transpose_kernel``'s flip path), so the forward;
* the weight gradient, the adjoint in g: gw = G^T [sum over tiles of
  (A gy A^T) * V] G, with the forward's V kept (up to chunking.WHOLE_BATCH_ELEMENTS).

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

from xgrad._backend import host_gemm, winograd_kernels, workspace
from xgrad._ops import _gemm_layout
from xgrad._ops._conv import chunking, thresholds

class Transform:
    """F(m x m, r x r): its matrices."""

    def __init__(self, name, a_t, g, b_t, unrolled=False):
        self.name = name  # (its key in thresholds.Thresholds.winograd)
        self.a_t = numpy.array(a_t, float)  # (m, a)
        self.g = numpy.array(g, float)  # (a, r)
        self.b_t = numpy.array(b_t, float)  # (a, a)
        self.m, self.a = self.a_t.shape
        self.r = self.g.shape[1]
        # kron(G, G): G g G^T of an r x r g, flattened, is this (a^2, r^2)
        # times g flattened; so all filters are one GEMM, straight into the
        # (a^2, O, C) layout.
        self.gg = numpy.kron(self.g, self.g)
        # F(2x2, 3x3) has kernels with its matrices written out (faster)
        self.unrolled = unrolled

    def tile_counts(self, outsize):
        return winograd_kernels.tile_counts(outsize[0], outsize[1], self.m)

    def input_tiles(self, x, v, pad, input_phases=None):
        """v = B^T d B of x's tiles (winograd_kernels.input_tiles); with
        ``input_phases`` (a _polyphase.InputPhases), of the tiles of x's
        phases."""
        if input_phases is not None:
            if self.unrolled:
                raise ValueError('the phases take a transform of 4x4 blocks or larger')
            ph = input_phases
            done = winograd_kernels.input_tiles(x, v, self.b_t, self.m, ph.pad[0], ph.pad[1],
                                                ph.s, *ph.phase_size)
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


# Where each transform pays: thresholds.Thresholds.winograd (docs/conv_thresholds.md).
F2X2_3X3 = Transform(
    'F(2x2,3x3)',
    a_t=[[1, 1, 1, 0], [0, 1, -1, -1]],
    g=[[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
    b_t=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    unrolled=True)
F2X2_5X5 = Transform(
    'F(2x2,5x5)',
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
         [0, 4, 0, -5, 0, 1]])
# F(4x4, 3x3): 2.25 products per output and input channel where F(2x2, 3x3) does 4.
F4X4_3X3 = Transform(
    'F(4x4,3x3)',
    a_t=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    g=[[1 / 4, 0, 0],
       [1 / 6, 1 / 6, 1 / 6],
       [1 / 6, -1 / 6, 1 / 6],
       [1 / 24, 1 / 12, 1 / 6],
       [1 / 24, -1 / 12, 1 / 6],
       [0, 0, 1]],
    b_t=F2X2_5X5.b_t)
# F(4x4, 5x5): 8x8 tiles, 4 products per output and input channel where
# F(2x2, 5x5) does 9. The points 0, +-1, +-2, +-1/2 and infinity (those of
# F(6x6, 3x3) in NNPACK and oneDNN); the halves keep B^T's entries small
# (up to 21/4): float32 error on 64 channels, 200 random tiles, 6 eps of
# the sum of |x| |w| at most (F(2x2, 5x5) 4, F(4x4, 3x3) 8).
F4X4_5X5 = Transform(
    'F(4x4,5x5)',
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
         [0, -1, 0, 21 / 4, 0, -21 / 4, 0, 1]])
# By kernel size, the transforms in the order they are preferred: the first
# whose thresholds the convolution meets computes it.
TRANSFORMS = {3: (F4X4_3X3, F2X2_3X3), 5: (F4X4_5X5, F2X2_5X5)}


class Tiles:
    """The forward's transformed input tiles, one (a^2, C, P) array per
    chunk of samples, kept for the weight gradient as im2col's columns are."""

    def __init__(self, transform, chunks):
        self.transform = transform
        self.chunks = chunks


def transform_for(x, wshape, geom, outsize, work, any_size=False, rules=None):
    """The Transform that computes conv(x, w) here, or None: host
    float32/float64 data (see transform_for_shape)."""
    if type(x) is not numpy.ndarray or x.ndim != 4:
        return None
    return transform_for_shape(x.shape, wshape, geom, outsize, work, any_size=any_size,
                               rules=rules)


def transform_for_shape(xshape, wshape, geom, outsize, work, count_tiles=True, any_size=False,
                        rules=None):
    """The Transform that computes a conv of x of ``xshape`` (N, C, h, w)
    with w of ``wshape``, or None: a float32/float64 2-D 3x3 or 5x5
    convolution with stride and dilation 1, one group, the stride-1 output
    size; the first of the kernel size's transforms with at least its
    channels in and out and (``count_tiles``: unless the caller counts
    them itself) its tiles in the batch, by ``rules`` (a
    thresholds.Thresholds; None: the CPU path's). ``any_size``: the first
    transform whatever the channels and tiles (a forced algorithm)."""
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
    limits = (rules or thresholds.for_path()).winograd_limits
    for t in TRANSFORMS[r]:
        min_channels, min_tiles = limits(t.name)
        th, tw = t.tile_counts(outsize)
        if channels >= min_channels and (not count_tiles or xshape[0] * th * tw >= min_tiles):
            return t
    return None


def applies(x, wshape, geom, outsize, work, rules=None):
    """Whether a Winograd transform computes conv(x, w) here."""
    return transform_for(x, wshape, geom, outsize, work, rules=rules) is not None


def _channels(wshape, input_phases):
    """The channels the a^2 products sum over: w's, or with ``input_phases``
    (a _polyphase.InputPhases) those of w's phases, C s^2."""
    return wshape[1] if input_phases is None else input_phases.weight_shape(wshape)[1]


def _filters(t, w, work, input_phases=None):
    """U = G g G^T of each filter of w (O, C, r, r): (a^2, O, C). With
    ``input_phases`` (a _polyphase.InputPhases), of each filter's s^2
    phases, (a^2, O, C s^2), gathered from w by winograd_kernels.filter_tiles: the phases'
    weights as an array are a 6-D transposing copy, which with this GEMM
    took 3.9-4.1 ms for 128->128 5x5 filters (one thread), 1.9-2.1 ms in
    the kernel. Without phases the GEMM (kron(G, G) times the filters) is
    about as fast as that kernel (256->256 3x3, 1.7-2.4 against 1.8-2.9
    ms)."""
    o, c = w.shape[:2]
    if input_phases is not None:
        u = workspace.empty((t.a * t.a, o, _channels(w.shape, input_phases)), work)
        if not winograd_kernels.filter_tiles(numpy.ascontiguousarray(w, dtype=work), u, t.g,
                                             input_phases.s):
            raise RuntimeError('winograd filter_tiles refused {}'.format(w.shape))
        return u
    flat = w.astype(work, copy=False).reshape(o * c, t.r * t.r)
    return host_gemm.matmul(t.gg.astype(work), flat.T).reshape(t.a * t.a, o, c)


def _filter_gradients(t, du, wshape, work, input_phases=None):
    """The adjoint of _filters: w's gradient (O, C, r, r) from U's, ``du``."""
    if input_phases is not None:
        gw = workspace.empty(wshape, work)
        if not winograd_kernels.filter_gradients(du, gw, t.g, input_phases.s):
            raise RuntimeError('winograd filter_gradients refused {}'.format(du.shape))
        return gw
    # G^T dU G of each (o, c): the transpose of _filters' product
    o, c = wshape[:2]
    return host_gemm.matmul(du.reshape(t.a * t.a, o * c).T,
                            t.gg.astype(work)).reshape(o, c, t.r, t.r)


def _group_filters(t, w, work, groups):
    """_filters of a grouped w (O, C/g, r, r), a group at a time: each
    group's U has the bits of its group-1 convolution's (one product over
    all groups' filters may take another GEMM and round otherwise)."""
    og = w.shape[0] // groups
    u = numpy.empty((t.a * t.a,) + w.shape[:2], work)
    for i in range(groups):
        u[:, i * og:(i + 1) * og] = _filters(t, w[i * og:(i + 1) * og], work)
    return u


def _group_filter_gradients(t, du, wshape, work, groups):
    """_filter_gradients of a grouped du (a^2, O, C/g), a group at a time
    (as _group_filters)."""
    og = wshape[0] // groups
    gw = numpy.empty(wshape, work)
    for i in range(groups):
        gw[i * og:(i + 1) * og] = _filter_gradients(
            t, numpy.ascontiguousarray(du[:, i * og:(i + 1) * og]), (og,) + wshape[1:], work)
    return gw


def _products(u, flat, products, values, c, o, tiles, groups):
    """matmul's (filters, tiles, out) for a chunk: (a^2, O, C) by
    (a^2, C, tiles); with ``groups`` g the a^2 g products of a group's rows,
    (a^2 g, O/g, C/g) by (a^2 g, C/g, tiles), as views of the same buffers
    (their padded rows are evenly spaced: _gemm_layout)."""
    if groups == 1:
        return (u, _gemm_layout.padded(flat, (values, c, tiles)),
                _gemm_layout.padded(products, (values, o, tiles)))
    return (u.reshape(values * groups, o // groups, c // groups),
            _gemm_layout.padded(flat, (values * groups, c // groups, tiles)),
            _gemm_layout.padded(products, (values * groups, o // groups, tiles)))


def conv(t, x, w, b, geom, outsize, work, keep=None, input_phases=None, groups=1):
    """y = conv(x, w) + b by the Transform t in ``work`` (x contiguous in
    ``work``); ``keep`` (a list) receives the batch's Tiles when they are at
    most chunking.WHOLE_BATCH_ELEMENTS. With ``input_phases`` (a
    _polyphase.InputPhases) the convolution is over x's phases (``geom``
    their geometry, ``w`` conv's own weights): the input tiles gather x's
    phases from x, the filter transform w's from w. With ``groups`` g, w is
    (O, C/g, r, r): the tiles of every channel in one pass, a^2 g products
    of a group's (O/g, C/g) filters by its (C/g, tiles) tiles, one output
    pass (see _products)."""
    n, c = x.shape[0], _channels(w.shape, input_phases) * groups
    o = w.shape[0]
    values = t.a * t.a
    th, tw = t.tile_counts(outsize)
    u = _group_filters(t, w, work, groups) if groups > 1 else _filters(t, w, work, input_phases)
    bias = None if b is None else numpy.ascontiguousarray(b, dtype=work)
    y = workspace.empty((n, o) + tuple(outsize), work)
    # (chunks of as many tiles as one group's convolution would take)
    chunks = chunking.winograd_ranges(n, th * tw, values * max(c, o) // groups)
    kept = None
    if keep is not None and values * c * n * th * tw <= chunking.WHOLE_BATCH_ELEMENTS:
        kept = []
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
        t.input_tiles(x[lo:hi], v, geom.pad, input_phases)
        host_gemm.matmul(*_products(u, flat, products, values, c, o, tiles, groups))
        t.output_tiles(_gemm_layout.padded(products, (values, o, tiles)), y[lo:hi], bias)
        if kept is not None:
            kept.append(v)
    if kept is not None:
        keep.append(Tiles(t, kept))
    return y


def grad_weight(t, x, gy, wshape, geom, work, tiles=None, input_phases=None, groups=1):
    """gw = d<conv(x, w), gy>/dw (O, C/g, r, r) by the Transform t in
    ``work`` (x and gy contiguous in ``work``); ``tiles``: the forward's
    Tiles of x. With ``input_phases``, of the convolution over x's phases (as
    conv's; ``wshape`` conv's own). ``groups`` g: conv's."""
    n, c = x.shape[0], _channels(wshape, input_phases) * groups
    o = wshape[0]
    values = t.a * t.a
    th, tw = t.tile_counts(gy.shape[2:])
    du = workspace.zeros((values, o, c // groups), work)
    du_stack = du.reshape(values * groups, o // groups, c // groups)
    chunks = chunking.winograd_ranges(n, th * tw, values * max(c, o) // groups)
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
            t.input_tiles(x[lo:hi], v, geom.pad, input_phases)
        if flat_g is None:
            flat_g = workspace.empty(_gemm_layout.padded_size(values * o, widest, work), work)
        t.gradient_tiles(gy[lo:hi], _gemm_layout.padded(flat_g, (values, o, count)))
        g = _gemm_layout.padded(flat_g, (values * groups, o // groups, count))
        v = v.reshape(values * groups, c // groups, count)  # (a group's rows: _products)
        host_gemm.matmul(g, v.transpose(0, 2, 1), out=du_stack, accumulate=True)
    if groups > 1:
        return _group_filter_gradients(t, du, tuple(wshape), work, groups)
    return _filter_gradients(t, du, tuple(wshape), work, input_phases)
