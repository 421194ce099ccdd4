"""3x3 convolutions with stride 1 by Winograd's F(2x2, 3x3) (Lavin and Gray
2016): 16 multiplications per 2x2 block of outputs instead of 36.

Why: im2col + one GEMM does 9 multiply-adds per output and input channel;
the transformed products do 4 (16 per 2x2 block), as 16 GEMMs of the same
K (input channels) that OpenBLAS runs at nearly the rate of the one large
GEMM. With enough channels and tiles that is what decides (MIN_CHANNELS,
MIN_TILES below); with fewer the 16 GEMMs are too thin and im2col's single
GEMM (K = 9 C) wins.

Three passes use it, the same transform for each:

* forward: y = A^T [U * V] A with U = G g G^T (filters) and V = B^T d B
  (input tiles; ``winograd_kernels.input_tiles``);
* the input gradient, a convolution with the flipped kernel when stride is
  1 (``convolution.conv_transpose_kernel``'s flip path), so the forward;
* the weight gradient, the adjoint in g: gw = G^T [sum over tiles of
  (A gy A^T) * V] G, with the forward's V kept when it is one chunk.

The error is that of the transforms' few extra additions (the entries of
B, G and A are 0, +-1 and +-1/2): a few units in the last place more than
the direct sum in float32, well inside the tolerances conv is checked at.
Host float32/float64 only (the GPU keeps its own path).
"""

import numpy

from xgrad._backend.winograd_kernels import (gradient_tiles, input_tiles, output_tiles,
                                             tile_counts)

# Where it pays (one thread, against im2col on the same shapes, measured
# with bench/conv_sweep.py's steps, forward + both gradients): both channel
# counts at least 32 and at least 64 tiles in the batch. 64->64 channels on
# 16x16, batch 8: 6.6 -> 4.7 ms; 256->256 on 8x8, batch 8: 22.0 -> 14.4 ms;
# 32->32 on 16x16, batch 8: 2.2 -> 1.8 ms. Below them the 16 GEMMs are too
# thin (K or N of a few dozen) and lose to im2col's one GEMM: 16->32
# channels break even, 64->64 on 8x8 at batch 1 (16 tiles) is 1.3x slower.
MIN_CHANNELS = 32
MIN_TILES = 64
# Samples per chunk: the transformed tiles of a chunk stay under this many
# elements (the im2col path's whole-batch limit).
_CHUNK_ELEMENTS = 1 << 22

_G = numpy.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


class Tiles:
    """The forward's transformed input tiles (16, C, P) of the whole batch,
    kept for the weight gradient as im2col's columns are."""

    def __init__(self, v):
        self.v = v


def applies(x, wshape, geom, outsize, work):
    """Whether F(2x2, 3x3) computes conv(x, w) here: host float32/float64
    data of one 2-D 3x3 convolution with stride and dilation 1, one group,
    at least MIN_CHANNELS channels in and out, the stride-1 output size,
    at least MIN_TILES 2x2 output blocks in the batch."""
    if (tuple(geom.ksize) != (3, 3) or tuple(geom.stride) != (1, 1)
            or tuple(geom.dilate) != (1, 1) or geom.groups != 1):
        return False
    if (type(x) is not numpy.ndarray or x.ndim != 4 or len(wshape) != 4
            or work not in (numpy.float32, numpy.float64)):
        return False
    if min(x.shape[1], wshape[0]) < MIN_CHANNELS:
        return False
    h, w = x.shape[2:]
    ph, pw = geom.pad
    if tuple(outsize) != (h + 2 * ph - 2, w + 2 * pw - 2) or min(outsize) <= 0:
        return False
    th, tw = tile_counts(*outsize)
    return x.shape[0] * th * tw >= MIN_TILES


# kron(G, G): G g G^T of a 3x3 g, flattened, is this (16, 9) times g
# flattened; so all filters are one GEMM, straight into the (16, O, C) layout.
_GG = numpy.kron(_G, _G)


def _filters(w, work):
    """U = G g G^T of each filter: (16, O, C)."""
    o, c = w.shape[:2]
    flat = w.astype(work, copy=False).reshape(o * c, 9)
    return (_GG.astype(work) @ flat.T).reshape(16, o, c)


def _sample_chunks(n, per_sample):
    step = max(1, _CHUNK_ELEMENTS // max(1, per_sample))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def _input(x, v, geom):
    if not input_tiles(x, v, geom.pad[0], geom.pad[1]):
        raise RuntimeError('winograd input_tiles refused {} {}'.format(x.shape, v.shape))


def conv(x, w, b, geom, outsize, work, keep=None):
    """y = conv(x, w) + b in ``work`` (x contiguous in ``work``); ``keep``
    (a list) receives the whole batch's Tiles when it is one chunk."""
    n, c = x.shape[:2]
    o = w.shape[0]
    th, tw = tile_counts(*outsize)
    u = _filters(w, work)
    bias = None if b is None else numpy.ascontiguousarray(b, dtype=work)
    y = numpy.empty((n, o) + tuple(outsize), work)
    chunks = _sample_chunks(n, 16 * max(c, o) * th * tw)
    flat = numpy.empty(16 * c * (chunks[0][1] - chunks[0][0]) * th * tw, work)  # reused
    for lo, hi in chunks:
        v = flat[:16 * c * (hi - lo) * th * tw].reshape(16, c, (hi - lo) * th * tw)
        _input(x[lo:hi], v, geom)
        if not output_tiles(numpy.matmul(u, v), y[lo:hi], bias):
            raise RuntimeError('winograd output_tiles refused {}'.format(y.shape))
    if keep is not None and len(chunks) == 1:
        keep.append(Tiles(v))
    return y


def grad_weight(x, gy, wshape, geom, work, tiles=None):
    """gw = d<conv(x, w), gy>/dw (O, C, 3, 3) in ``work`` (x and gy
    contiguous in ``work``); ``tiles``: the forward's Tiles of x."""
    n, c = x.shape[:2]
    o = wshape[0]
    outsize = gy.shape[2:]
    th, tw = tile_counts(*outsize)
    du = numpy.zeros((16, o, c), work)
    chunks = _sample_chunks(n, 16 * max(c, o) * th * tw)
    for lo, hi in chunks:
        if tiles is not None and len(chunks) == 1:
            v = tiles.v
        else:
            v = numpy.empty((16, c, (hi - lo) * th * tw), work)
            _input(x[lo:hi], v, geom)
        g = numpy.empty((16, o, (hi - lo) * th * tw), work)
        if not gradient_tiles(gy[lo:hi], g):
            raise RuntimeError('winograd gradient_tiles refused {}'.format(gy.shape))
        du += numpy.matmul(g, v.transpose(0, 2, 1))
    # G^T dU G of each (o, c): the transpose of _filters' product
    return (du.reshape(16, o * c).T @ _GG.astype(work)).reshape(o, c, 3, 3)
