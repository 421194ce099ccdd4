# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The tile transforms of Winograd's F(m x m, r x r) convolutions (Lavin and
Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).

An r x r convolution with stride 1 computes each m x m block of outputs
from an a x a tile of input, a = m + r - 1. In the transformed domain the
m^2 r^2 products of a block become a^2 (F(2x2, 3x3): 16 instead of 36;
F(4x4, 3x3): 36 instead of 144; F(2x2, 5x5): 36 instead of 100), summed
over the channels by a^2 GEMMs, one per tile position
(xgrad/_ops/_winograd.py):

    y_tile = A^T [ (G g G^T) * (B^T d B) ] A

These kernels move the data into and out of that domain in one pass each:
``input_tiles`` (B^T d B of every input tile), ``output_tiles`` (A^T e A
back to the m x m outputs, plus the bias), ``gradient_tiles`` (A q A^T,
the adjoint of ``output_tiles``, which the weight gradient needs),
``filter_tiles`` (G g G^T of every filter, or of its phases for a strided
convolution, _polyphase) and ``filter_gradients`` (its adjoint). The matrices
B^T (a x a) and A^T (m x a) are arguments: one set of kernels serves every
F(m, r) (their arithmetic in winograd_block.h, per dispatch path, with
the matrices of F(4x4, 3x3), F(2x2, 5x5) and F(4x4, 5x5) written out
there and recognized here by _kind). F(2x2, 3x3) also has whole kernels
with its matrices written out (the ``*_3x3`` functions at the end),
faster on its tiles.

The a^2 transformed values of a tile go to a^2 planes, ``(a^2, C, P)``
with P = N * tiles_h * tiles_w tiles in (sample, row, column) order, so
that plane k is the right-hand side of GEMM k.
"""

cimport numpy as cnp
from libc.string cimport memcpy, memset

from xgrad._backend.native_kernels cimport pool_threads, run_chunks, vector_path

import numpy

from xgrad._backend import native_kernels

cnp.import_array()

ctypedef fused real:
    float
    double

# Tiles are transformed a block of BLOCK at a time: gathered into a small
# buffer with value k of every tile in one row (buf[k * BLOCK + p]), then
# transformed by whole rows (winograd_block.h: vector loops over the block's
# tiles, compiled for SSE2, AVX2 and AVX-512), then each row is copied out
# as one run. The a^2 planes lie C * P elements apart (often a multiple of
# 4 KiB), and touching each of them once per tile made the caches alias
# (about 50 ns a tile instead of 10). A channel's tiles are contiguous in
# every plane across samples and rows, so a block spans them (small images
# have few tiles per row).
DEF BLOCK = 64
# The largest tile side the buffers hold (F(4x4, 5x5): 8).
DEF MAX_SIDE = 8
DEF MAX_VALUES = MAX_SIDE * MAX_SIDE

cdef extern from "winograd_block.h":
    enum: XGRAD_WINOGRAD_BLOCK
    enum: XGRAD_WINOGRAD_VALUES
    ctypedef struct xgrad_winograd_buffers:
        double d[MAX_VALUES * BLOCK]
        double t[MAX_VALUES * BLOCK]
        double out[MAX_VALUES * BLOCK]
    enum: XGRAD_WINOGRAD_ANY
    enum: XGRAD_WINOGRAD_B6
    enum: XGRAD_WINOGRAD_A4
    enum: XGRAD_WINOGRAD_A4_T
    enum: XGRAD_WINOGRAD_A2
    enum: XGRAD_WINOGRAD_A2_T
    enum: XGRAD_WINOGRAD_B8
    enum: XGRAD_WINOGRAD_A48
    enum: XGRAD_WINOGRAD_A48_T
    int xgrad_vector_set_path(int path) noexcept nogil
    int xgrad_vector_get_path() noexcept nogil
    void xgrad_winograd_transform_f32(int kind, const float* left, Py_ssize_t rows_out,
                                      const float* right, Py_ssize_t cols_out,
                                      Py_ssize_t rows_in, Py_ssize_t cols_in, const float* d,
                                      Py_ssize_t d_stride, float* t, float* out) noexcept nogil
    void xgrad_winograd_transform_f64(int kind, const double* left, Py_ssize_t rows_out,
                                      const double* right, Py_ssize_t cols_out,
                                      Py_ssize_t rows_in, Py_ssize_t cols_in, const double* d,
                                      Py_ssize_t d_stride, double* t,
                                      double* out) noexcept nogil
    void xgrad_winograd_load4_f32(const float* p, Py_ssize_t stride, Py_ssize_t side,
                                  float* d) noexcept nogil
    void xgrad_winograd_store4_f32(const float* out, float* dst, Py_ssize_t stride,
                                   float b0) noexcept nogil

assert XGRAD_WINOGRAD_BLOCK == BLOCK and XGRAD_WINOGRAD_VALUES == MAX_VALUES

# The matrices winograd_block.h has kernels of its own for (its
# XGRAD_WINOGRAD_ROWS), as (kind, matrix): a transform whose matrix is one of
# these, entry for entry, runs that kernel (the same sums, in registers).
_B6 = ((4, 0, -5, 0, 1, 0), (0, 4, 4, -1, -1, 0), (0, -4, 4, 1, -1, 0),
       (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1))
_A4 = ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1))
_A2 = ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 1))
_B8 = ((1, 0, -5.25, 0, 5.25, 0, -1, 0), (0, 1, 1, -4.25, -4.25, 1, 1, 0),
       (0, -1, 1, 4.25, -4.25, -1, 1, 0), (0, 0.5, 0.25, -2.5, -1.25, 2, 1, 0),
       (0, -0.5, 0.25, 2.5, -1.25, -2, 1, 0), (0, 2, 4, -2.5, -5, 0.5, 1, 0),
       (0, -2, 4, 2.5, -5, -0.5, 1, 0), (0, -1, 0, 5.25, 0, -5.25, 0, 1))
_A48 = ((1, 1, 1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0.5, -0.5, 0),
        (0, 1, 1, 4, 4, 0.25, 0.25, 0), (0, 1, -1, 8, -8, 0.125, -0.125, 1))
_KERNEL_MATRICES = tuple((kind, numpy.array(mat, float)) for kind, mat in (
    (XGRAD_WINOGRAD_B6, _B6), (XGRAD_WINOGRAD_A4, _A4),
    (XGRAD_WINOGRAD_A4_T, tuple(zip(*_A4))), (XGRAD_WINOGRAD_A2, _A2),
    (XGRAD_WINOGRAD_A2_T, tuple(zip(*_A2))), (XGRAD_WINOGRAD_B8, _B8),
    (XGRAD_WINOGRAD_A48, _A48), (XGRAD_WINOGRAD_A48_T, tuple(zip(*_A48)))))


cdef int _kind(cnp.ndarray mat):
    """The kernel kind of the transform matrix ``mat`` (2-D), or
    XGRAD_WINOGRAD_ANY (the matrix-driven kernel)."""
    for kind, known in _KERNEL_MATRICES:
        if mat.shape[0] == known.shape[0] and mat.shape[1] == known.shape[1] and (
                mat == known).all():
            return kind
    return XGRAD_WINOGRAD_ANY


cdef inline void _follow_path() noexcept nogil:
    """Run the dispatch path the vector kernels run (native_kernels selects
    it: the widest this CPU supports, or XGRAD_CPU_PATH's)."""
    xgrad_vector_set_path(vector_path())


def cpu_path():
    """The dispatch path these kernels run: native_kernels.cpu_path()'s."""
    _follow_path()
    return native_kernels.CPU_PATH_NAMES[xgrad_vector_get_path()]


cdef inline void _transform(int kind, const real* left, Py_ssize_t rows_out,
                            const real* right, Py_ssize_t cols_out, Py_ssize_t rows_in,
                            Py_ssize_t cols_in, xgrad_winograd_buffers* b,
                            const real* d=NULL, Py_ssize_t d_stride=BLOCK) noexcept nogil:
    """b.out = left . d . right^T for each tile of a block
    (winograd_block.h): d (b.d unless given) holds value (r, s) of tile p at
    d[(r * cols_in + s) * d_stride + p], b.out the (rows_out x cols_out)
    result with rows BLOCK apart. ``left`` is (rows_out, rows_in), ``right``
    (cols_out, cols_in), row-major; ``kind`` is _kind's of them (the same
    matrix) or XGRAD_WINOGRAD_ANY."""
    if d == NULL:
        d = <real*>b.d
    if real is float:
        xgrad_winograd_transform_f32(kind, left, rows_out, right, cols_out, rows_in, cols_in,
                                     d, d_stride, <float*>b.t, <float*>b.out)
    else:
        xgrad_winograd_transform_f64(kind, left, rows_out, right, cols_out, rows_in, cols_in,
                                     d, d_stride, b.t, b.out)


cdef inline void _emit(int kind, const real* left, Py_ssize_t rows_out, Py_ssize_t rows_in,
                       xgrad_winograd_buffers* b, real* dst, Py_ssize_t k_stride,
                       Py_ssize_t count) noexcept nogil:
    """left . b.d . left^T of a block of ``count`` tiles, each of the
    rows_out^2 values copied out as one run to its plane (k_stride apart)."""
    cdef Py_ssize_t k
    _transform(kind, left, rows_out, left, rows_out, rows_in, rows_in, b)
    for k in range(rows_out * rows_out):
        memcpy(dst + k * k_stride, <real*>b.out + k * BLOCK, count * sizeof(real))


cdef inline void _next_tile(Py_ssize_t* n, Py_ssize_t* i, Py_ssize_t* j, Py_ssize_t th,
                            Py_ssize_t tw) noexcept nogil:
    """(n, i, j) -> the next tile in (sample, row, column) order; with th =
    tw = s, (c, a_h, a_w) -> the next phase channel, c s^2 + a_h s + a_w."""
    j[0] += 1
    if j[0] == tw:
        j[0] = 0
        i[0] += 1
        if i[0] == th:
            i[0] = 0
            n[0] += 1


cdef inline void _read_rows(real* buf, Py_ssize_t block, const real* src, Py_ssize_t k_stride,
                            Py_ssize_t values, Py_ssize_t count) noexcept nogil:
    """buf[k * block + p] = src[k * k_stride + p] for k < values, p < count:
    a block of tiles' values from their planes."""
    cdef Py_ssize_t k
    for k in range(values):
        memcpy(buf + k * block, src + k * k_stride, count * sizeof(real))


cdef inline void _load_tile(const real* p, Py_ssize_t stride, Py_ssize_t a,
                            real* d) noexcept nogil:
    """d[(r * a + s) * BLOCK] = p[r * stride + s] for the a x a tile at p.
    The tile sides of the transforms (8, 6, 4, 2) have loops of constant
    trip counts, which the compiler unrolls."""
    cdef Py_ssize_t r, s
    if a == 8:
        for r in range(8):
            for s in range(8):
                d[(r * 8 + s) * BLOCK] = p[r * stride + s]
    elif a == 6:
        for r in range(6):
            for s in range(6):
                d[(r * 6 + s) * BLOCK] = p[r * stride + s]
    elif a == 4:
        for r in range(4):
            for s in range(4):
                d[(r * 4 + s) * BLOCK] = p[r * stride + s]
    elif a == 2:
        for r in range(2):
            for s in range(2):
                d[(r * 2 + s) * BLOCK] = p[r * stride + s]
    else:
        for r in range(a):
            for s in range(a):
                d[(r * a + s) * BLOCK] = p[r * stride + s]


cdef inline void _store_tile(const real* out, Py_ssize_t m, Py_ssize_t rows, Py_ssize_t cols,
                             real b0, real* dst, Py_ssize_t stride) noexcept nogil:
    """dst[r * stride + s] = out[(r * m + s) * BLOCK] + b0 for r < rows,
    s < cols of an m x m block (whole 4x4 and 2x2 blocks unrolled)."""
    cdef Py_ssize_t r, s
    if rows == 4 and cols == 4 and m == 4:
        for r in range(4):
            for s in range(4):
                dst[r * stride + s] = out[(r * 4 + s) * BLOCK] + b0
    elif rows == 2 and cols == 2 and m == 2:
        for r in range(2):
            for s in range(2):
                dst[r * stride + s] = out[(r * 2 + s) * BLOCK] + b0
    else:
        for r in range(rows):
            for s in range(cols):
                dst[r * stride + s] = out[(r * m + s) * BLOCK] + b0


cdef void _phase_plane(real* padded, Py_ssize_t hp, Py_ssize_t wp, const real* src,
                       Py_ssize_t h, Py_ssize_t w, Py_ssize_t s, Py_ssize_t a_h,
                       Py_ssize_t a_w, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t hq,
                       Py_ssize_t wq, bint zeros_written) noexcept nogil:
    """padded (hp x wp) = phase (a_h, a_w) of the plane src (h x w) padded
    by (ph, pw): padded[j, k] = src[s j + a_h - ph, s k + a_w - pw] for j <
    hq, k < wq, zeros elsewhere (outside src or the phase's hq x wq), every
    element written (_polyphase.Phases.split_input's values); with
    ``zeros_written``, only the elements read from src (the zeros are where
    the same phase of another plane of this size left them)."""
    cdef Py_ssize_t j, k, xr, k0, k1
    cdef real* row
    cdef const real* xs
    # the columns k with 0 <= s k + a_w - pw < w, within wq
    k0 = min(wq, (max(0, pw - a_w) + s - 1) // s)
    k1 = min(wq, (w - 1 + pw - a_w) // s + 1) if w - 1 + pw - a_w >= 0 else 0
    k1 = max(k0, k1)
    for j in range(hp):
        row = padded + j * wp
        xr = s * j + a_h - ph
        if j >= hq or xr < 0 or xr >= h:
            if not zeros_written:
                memset(row, 0, wp * sizeof(real))
            continue
        xs = src + xr * w + a_w - pw
        if not zeros_written:
            memset(row, 0, k0 * sizeof(real))
            memset(row + k1, 0, (wp - k1) * sizeof(real))
        if s == 2:  # (a constant stride: the compiler vectorizes the gather)
            for k in range(k0, k1):
                row[k] = xs[2 * k]
        else:
            for k in range(k0, k1):
                row[k] = xs[s * k]


cdef void _tiles(const real* x, real* v, int kind, const real* left, Py_ssize_t a,
                 Py_ssize_t side,
                 Py_ssize_t m, Py_ssize_t n_count, Py_ssize_t c_count, Py_ssize_t h,
                 Py_ssize_t w, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t th, Py_ssize_t tw,
                 Py_ssize_t s, Py_ssize_t hq, Py_ssize_t wq,
                 real* padded, Py_ssize_t ld, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """v (a^2, C, N * th * tw), rows ``ld`` apart, from x (N, C, h, w): L d L^T of the side x
    side tile d at rows m i - ph, columns m j - pw of each plane, zeros
    outside x; ``left`` is L (a x side). The input transform is this with
    side a and L = B^T; the gradient blocks with side m, L = A, no padding.

    With ``s`` > 1 the planes are the phases of x (_polyphase): x is (N,
    C / s^2, h, w), plane (c, a_h, a_w) (channel c s^2 + a_h s + a_w) its
    phase of x[c] padded by (ph, pw), hq x wq, whose tiles have no padding
    of their own. Gathered here, the phases need no copy of the batch.

    Each plane is first copied into ``padded``: zeros of the size the tiles
    cover, (m (th - 1) + side) x (m (tw - 1) + side), whose border the
    caller wrote and nobody overwrites (a phase plane is written whole,
    zeros included, for a channel's first sample; its other samples write
    only what they read from x, the zeros being the same). Every tile is
    then read without
    bounds checks (with padding, a small image's tiles all cross the
    border): the input transforms take about 0.9x their time with checks
    (median of 24 paired runs of 3x3 and 5x5 shapes, 0.7-1.1x). Gathering
    each tile row's tiles as contiguous runs of a copy split by column
    phase was slower (F(4x4, 3x3) 1.1-3.7x: the runs are as short as one
    tile on small images)."""
    cdef Py_ssize_t k_stride = c_count * ld
    cdef Py_ssize_t wp = m * (tw - 1) + side, hp = m * (th - 1) + side
    cdef Py_ssize_t n, c, i, j, r, fill, done, ss = s * s
    cdef xgrad_winograd_buffers buffers
    cdef real* d = <real*>buffers.d
    cdef const real* src
    # (a partial block computes its lanes past the tiles too: zeros, not
    # stack garbage, which could be denormals, slow to compute)
    memset(buffers.d, 0, sizeof(buffers.d))
    for c in range(lo, hi):
        fill = 0
        done = 0
        for n in range(n_count):
            if s > 1:
                src = x + (n * (c_count // ss) + c // ss) * h * w
                # (a channel's samples share its phase, and so its zeros)
                _phase_plane(padded, hp, wp, src, h, w, s, c // s % s, c % s, ph, pw, hq, wq,
                             n > 0)
            else:
                src = x + (n * c_count + c) * h * w
                for r in range(h):
                    memcpy(padded + (ph + r) * wp + pw, src + r * w, w * sizeof(real))
            for i in range(th):
                j = 0
                while j < tw:
                    if real is float and m == 4 and j + 4 <= tw and fill + 4 <= BLOCK:
                        # four tiles of a row by transposes (winograd_block.h)
                        xgrad_winograd_load4_f32(<const float*>padded + m * (i * wp + j), wp,
                                                 side, <float*>d + fill)
                        fill += 4
                        j += 4
                    else:
                        _load_tile(padded + m * (i * wp + j), wp, side, d + fill)
                        fill += 1
                        j += 1
                    if fill == BLOCK:
                        _emit(kind, left, a, side, &buffers, v + c * ld + done, k_stride,
                              fill)
                        done += fill
                        fill = 0
        if fill:
            _emit(kind, left, a, side, &buffers, v + c * ld + done, k_stride, fill)


# Elements past each padded plane: xgrad_winograd_load4_f32 reads a row of
# four side-6 tiles to its 20th element, 2 past the last tile.
DEF PLANE_SLACK = 4


cdef cnp.ndarray _padded_plane(Py_ssize_t side, Py_ssize_t m, Py_ssize_t th, Py_ssize_t tw,
                               object dtype, Py_ssize_t count):
    """The zeros _tiles copies each plane into, ``count`` of them (one a
    thread), each PLANE_SLACK elements longer than the tiles cover."""
    return numpy.zeros(count * ((m * (th - 1) + side) * (m * (tw - 1) + side) + PLANE_SLACK),
                       dtype)


cdef void _output_tiles(const real* e, real* y, int kind, const real* at, Py_ssize_t a,
                        Py_ssize_t m,
                        const real* bias, Py_ssize_t n_count, Py_ssize_t o_count,
                        Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t th,
                        Py_ssize_t tw, Py_ssize_t ld, Py_ssize_t lo,
                        Py_ssize_t hi) noexcept nogil:
    """y (N, O, ho, wo) from e (a^2, O, N * th * tw), rows ``ld`` apart: A^T
    e A of each tile (its outputs beyond ho, wo dropped), plus bias[o] when
    bias is not NULL."""
    cdef Py_ssize_t plane = n_count * th * tw, k_stride = o_count * ld
    cdef Py_ssize_t n, o, i, j, p, p0, count
    cdef xgrad_winograd_buffers buffers
    cdef real* d = <real*>buffers.d
    cdef const real* out = <real*>buffers.out
    cdef real b0
    # (a partial block computes its lanes past the tiles too: zeros, not
    # stack garbage, which could be denormals, slow to compute)
    memset(buffers.d, 0, sizeof(buffers.d))
    for o in range(lo, hi):
        b0 = bias[o] if bias != NULL else 0
        n = 0
        i = 0
        j = 0
        for p0 in range(0, plane, BLOCK):
            count = min(BLOCK, plane - p0)
            if count == BLOCK:  # whole blocks straight from the planes
                _transform(kind, at, m, at, m, a, a, &buffers, e + o * ld + p0, k_stride)
            else:  # (a partial one through the zeroed buffer: its lanes past the
                _read_rows(d, BLOCK, e + o * ld + p0, k_stride, a * a, count)  # planes)
                _transform(kind, at, m, at, m, a, a, &buffers)
            p = 0
            while p < count:
                if (real is float and m == 4 and p + 4 <= count and j + 4 <= tw
                        and m * i + 4 <= ho and m * (j + 4) <= wo):
                    xgrad_winograd_store4_f32(<const float*>out + p, <float*>y + (
                        (n * o_count + o) * ho + m * i) * wo + m * j, wo, b0)
                    p += 4
                    j += 3  # (and _next_tile the fourth, to the next row at its end)
                    _next_tile(&n, &i, &j, th, tw)
                    continue
                _store_tile(out + p, m, min(m, ho - m * i), min(m, wo - m * j), b0,
                            y + ((n * o_count + o) * ho + m * i) * wo + m * j, wo)
                _next_tile(&n, &i, &j, th, tw)
                p += 1


# -- The tile kernels over the worker pool -------------------------------------
#
# Every kernel above loops over channels (input channels for the input
# tiles, output channels for the output and gradient tiles), each channel's
# planes written by that channel alone, so the channels split over xgrad's
# threads (native_kernels' pool) with the same serial loop per channel: the
# results do not depend on the thread count. A split pays from about this
# many tile values a thread.

DEF TILE_GRAIN = 32768
# Each thread's share in this many chunks (see window_kernels.pyx).
DEF CHUNKS_A_THREAD = 4

cdef enum TileKernel:
    TILES, OUTPUT, INPUT_3X3, OUTPUT_3X3, GRADIENT_3X3


cdef struct TileJob:
    int kernel
    bint f32
    const void* src
    void* dst
    const void* mat  # TILES: the left matrix; OUTPUT: A^T
    int mat_kind  # _kind(mat)
    const void* bias
    void* scratch  # TILES: one zeroed plane a chunk (_scratch_planes), scratch_size apart
    Py_ssize_t scratch_size
    Py_ssize_t a, side, m, n, c, h, w, ph, pw, th, tw, ld  # c: the channels split
    Py_ssize_t s, hq, wq  # TILES: the phases' stride (1: none) and size
    Py_ssize_t per_chunk


cdef void _tile_range(TileJob* j, real* dst, Py_ssize_t chunk, Py_ssize_t lo,
                     Py_ssize_t hi) noexcept nogil:
    """The job's kernel on channels lo..hi (``dst`` its output, typed)."""
    cdef const real* src = <const real*>j.src
    cdef const real* mat = <const real*>j.mat
    cdef const real* bias = <const real*>j.bias
    cdef int k = j.kernel
    if k == TILES:
        _tiles(src, dst, j.mat_kind, mat, j.a, j.side, j.m, j.n, j.c, j.h, j.w, j.ph, j.pw,
               j.th, j.tw, j.s, j.hq, j.wq, <real*>j.scratch + chunk * j.scratch_size, j.ld,
               lo, hi)
    elif k == OUTPUT:
        _output_tiles(src, dst, j.mat_kind, mat, j.a, j.m, bias, j.n, j.c, j.h, j.w, j.th,
                      j.tw, j.ld, lo, hi)
    elif k == INPUT_3X3:
        _input_tiles_3x3(src, dst, j.n, j.c, j.h, j.w, j.ph, j.pw, j.th, j.tw, j.ld, lo, hi)
    elif k == OUTPUT_3X3:
        _output_tiles_3x3(src, dst, bias, j.n, j.c, j.h, j.w, j.th, j.tw, j.ld, lo, hi)
    else:
        _gradient_tiles_3x3(src, dst, j.n, j.c, j.h, j.w, j.th, j.tw, j.ld, lo, hi)


cdef void _tile_chunk(void* ctx, Py_ssize_t chunk) noexcept nogil:
    cdef TileJob* j = <TileJob*>ctx
    cdef Py_ssize_t lo = chunk * j.per_chunk
    cdef Py_ssize_t hi = min(lo + j.per_chunk, j.c)
    if j.f32:
        _tile_range(j, <float*>j.dst, chunk, lo, hi)
    else:
        _tile_range(j, <double*>j.dst, chunk, lo, hi)


cdef Py_ssize_t _tile_threads(Py_ssize_t channels, Py_ssize_t values) noexcept nogil:
    """How many threads a tile kernel over ``channels`` channels writing or
    reading ``values`` tile values uses (at least TILE_GRAIN each)."""
    cdef Py_ssize_t nt = pool_threads()
    nt = min(nt, channels, values // TILE_GRAIN)
    return nt if nt > 1 else 1


cdef Py_ssize_t _scratch_planes(Py_ssize_t nt):
    """How many zeroed planes _run_tiles' chunks need at most over nt threads."""
    return nt * CHUNKS_A_THREAD if nt > 1 else 1


cdef void _run_tiles(TileJob* job, Py_ssize_t nt) noexcept nogil:
    """Run ``job`` over its channels in ``nt`` chunks (one per thread)."""
    _follow_path()
    if nt <= 1:
        job.per_chunk = job.c
        _tile_chunk(job, 0)
        return
    job.per_chunk = (job.c + nt * CHUNKS_A_THREAD - 1) // (nt * CHUNKS_A_THREAD)
    run_chunks(_tile_chunk, job, (job.c + job.per_chunk - 1) // job.per_chunk)


cdef TileJob _tile_job(int kernel, int t, cnp.ndarray src, cnp.ndarray dst):
    cdef TileJob job
    memset(&job, 0, sizeof(job))
    job.kernel = kernel
    job.f32 = t == cnp.NPY_FLOAT
    job.src = cnp.PyArray_DATA(src)
    job.dst = cnp.PyArray_DATA(dst)
    return job


cdef bint _plain(cnp.ndarray a, int ndim, int t):
    """C-contiguous, aligned, native float of type t, ndim axes."""
    return (cnp.PyArray_TYPE(a) == t and cnp.PyArray_NDIM(a) == ndim
            and cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a)
            and cnp.PyArray_ISNOTSWAPPED(a))


cdef Py_ssize_t _tile_rows(cnp.ndarray a, int t, Py_ssize_t values, Py_ssize_t rows,
                           Py_ssize_t tiles):
    """The distance, in elements, between the rows of ``a`` (values, rows,
    tiles) of type t: C-contiguous, or its rows padded (a view of a wider
    buffer, _gemm_layout.padded: unit stride along a row, rows evenly
    spaced). -1 when it is neither or not of that shape."""
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(a) if cnp.PyArray_TYPE(a) == t else 0, ld
    if (size == 0 or cnp.PyArray_NDIM(a) != 3 or not cnp.PyArray_ISALIGNED(a)
            or not cnp.PyArray_ISNOTSWAPPED(a) or cnp.PyArray_DIM(a, 0) != values
            or cnp.PyArray_DIM(a, 1) != rows or cnp.PyArray_DIM(a, 2) != tiles):
        return -1
    if cnp.PyArray_IS_C_CONTIGUOUS(a):
        return tiles
    if tiles > 1 and cnp.PyArray_STRIDE(a, 2) != size:
        return -1
    ld = cnp.PyArray_STRIDE(a, 1)
    if ld % size != 0 or ld // size < tiles or cnp.PyArray_STRIDE(a, 0) != rows * ld:
        return -1
    return ld // size


cdef int _float_type(cnp.ndarray a):
    cdef int t = cnp.PyArray_TYPE(a)
    return t if t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE else -1


cdef cnp.ndarray _matrix(object values, int t, Py_ssize_t rows, Py_ssize_t cols):
    """``values`` as a C-contiguous (rows, cols) array of type t, or None
    when it is not of that shape or larger than the buffers."""
    cdef cnp.ndarray out = cnp.PyArray_FROMANY(values, t, 2, 2,
                                                   cnp.NPY_ARRAY_CARRAY | cnp.NPY_ARRAY_FORCECAST)
    if out.shape[0] != rows or out.shape[1] != cols or max(rows, cols) > MAX_SIDE:
        return None
    return out


def tile_counts(Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t m=2):
    """(tiles_h, tiles_w): the m x m output blocks that cover ho x wo."""
    return (ho + m - 1) // m, (wo + m - 1) // m


def input_tiles(cnp.ndarray x, cnp.ndarray v, object b_t, Py_ssize_t m, Py_ssize_t ph,
                Py_ssize_t pw, Py_ssize_t s=1, Py_ssize_t hq=0, Py_ssize_t wq=0):
    """Fill ``v`` (a^2, C, N * th * tw) with B^T d B of the a x a input tiles
    of ``x`` (N, C, h, w) for an r x r convolution (r = a - m + 1) with
    padding (ph, pw); ``b_t`` is B^T (a x a). With ``s`` > 1, of the tiles
    of x's phases instead (_polyphase.Phases.split_input's planes, hq x wq,
    x padded by (ph, pw); C = s^2 times x's channels; the tiles unpadded).
    Returns False (writing nothing) when the operands do not qualify
    (float32/64, one dtype, C-contiguous, aligned, shapes)."""
    cdef int t = _float_type(x)
    if t < 0 or not _plain(x, 4, t):
        return False
    cdef Py_ssize_t a = len(b_t)
    cdef cnp.ndarray bt = _matrix(b_t, t, a, a)
    if bt is None or not 1 <= m < a or s < 1:
        return False
    cdef Py_ssize_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3], r = a - m + 1
    if s > 1:
        th, tw = tile_counts(hq - r + 1, wq - r + 1, m)
        c *= s * s
    else:
        th, tw = tile_counts(h + 2 * ph - r + 1, w + 2 * pw - r + 1, m)
    if th <= 0 or tw <= 0 or ph < 0 or pw < 0:
        return False
    cdef Py_ssize_t ld = _tile_rows(v, t, a * a, c, n * th * tw)
    if ld < 0:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    cdef TileJob job = _tile_job(TILES, t, x, v)
    job.mat, job.mat_kind = cnp.PyArray_DATA(bt), _kind(bt)
    job.a, job.side, job.m, job.n, job.c, job.h, job.w = a, a, m, n, c, h, w
    job.ph, job.pw, job.th, job.tw, job.ld = ph, pw, cth, ctw, ld
    job.s, job.hq, job.wq = s, hq, wq
    cdef Py_ssize_t nt = _tile_threads(c, a * a * c * n * cth * ctw)
    cdef cnp.ndarray padded = _padded_plane(a, m, cth, ctw, x.dtype, _scratch_planes(nt))
    job.scratch = cnp.PyArray_DATA(padded)
    job.scratch_size = padded.shape[0] // _scratch_planes(nt)
    with nogil:
        _run_tiles(&job, nt)
    return True


def output_tiles(cnp.ndarray e, cnp.ndarray y, object a_t, object bias=None):
    """Fill ``y`` (N, O, ho, wo) with A^T e A of the tiles of ``e`` (a^2, O,
    N * th * tw), plus ``bias`` (O,) of the same dtype when given; ``a_t``
    is A^T (m x a). Returns False (writing nothing) when the operands do not
    qualify."""
    cdef int t = _float_type(e)
    if t < 0 or not _plain(y, 4, t):
        return False
    cdef Py_ssize_t m = len(a_t), a = len(a_t[0]) if m else 0
    cdef cnp.ndarray at = _matrix(a_t, t, m, a)
    if at is None or not 1 <= m < a:
        return False
    cdef cnp.ndarray b = None
    if bias is not None:
        b = <cnp.ndarray?>bias
        if not _plain(b, 1, t) or b.shape[0] != y.shape[1]:
            return False
    cdef Py_ssize_t n = y.shape[0], o = y.shape[1], ho = y.shape[2], wo = y.shape[3]
    th, tw = tile_counts(ho, wo, m)
    cdef Py_ssize_t ld = _tile_rows(e, t, a * a, o, n * th * tw)
    if ld < 0:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    cdef void* pb = NULL if b is None else cnp.PyArray_DATA(b)
    cdef TileJob job = _tile_job(OUTPUT, t, e, y)
    job.mat, job.mat_kind, job.bias = cnp.PyArray_DATA(at), _kind(at), pb
    job.a, job.m, job.n, job.c, job.h, job.w = a, m, n, o, ho, wo
    job.th, job.tw, job.ld = cth, ctw, ld
    with nogil:
        _run_tiles(&job, _tile_threads(o, a * a * o * n * cth * ctw))
    return True


def gradient_tiles(cnp.ndarray gy, cnp.ndarray g, object a_t):
    """Fill ``g`` (a^2, O, N * th * tw) with A q A^T of the m x m blocks q of
    ``gy`` (N, O, ho, wo); ``a_t`` is A^T (m x a). Returns False (writing
    nothing) when the operands do not qualify."""
    cdef int t = _float_type(gy)
    if t < 0 or not _plain(gy, 4, t):
        return False
    cdef Py_ssize_t m = len(a_t), a = len(a_t[0]) if m else 0
    cdef cnp.ndarray at = _matrix(a_t, t, m, a)
    if at is None or not 1 <= m < a:
        return False
    cdef cnp.ndarray a_mat = cnp.PyArray_FROMANY(at.T, t, 2, 2, cnp.NPY_ARRAY_CARRAY)
    cdef Py_ssize_t n = gy.shape[0], o = gy.shape[1], ho = gy.shape[2], wo = gy.shape[3]
    th, tw = tile_counts(ho, wo, m)
    cdef Py_ssize_t ld = _tile_rows(g, t, a * a, o, n * th * tw)
    if ld < 0:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    # (the m x m blocks are tiles of side m with no padding before them)
    cdef TileJob job = _tile_job(TILES, t, gy, g)
    job.mat, job.mat_kind = cnp.PyArray_DATA(a_mat), _kind(a_mat)
    job.a, job.side, job.m, job.n, job.c, job.h, job.w = a, m, m, n, o, ho, wo
    job.th, job.tw, job.ld, job.s = cth, ctw, ld, 1
    cdef Py_ssize_t nt = _tile_threads(o, a * a * o * n * cth * ctw)
    cdef cnp.ndarray padded = _padded_plane(m, m, cth, ctw, gy.dtype, _scratch_planes(nt))
    job.scratch = cnp.PyArray_DATA(padded)
    job.scratch_size = padded.shape[0] // _scratch_planes(nt)
    with nogil:
        _run_tiles(&job, nt)
    return True

# -- The filter transform -------------------------------------------------------
#
# U = G g G^T of every filter g (a^2 values from r^2), and its adjoint G^T dU
# G for the weight gradient, by the same block transform as the tiles: the
# filters of one output channel in blocks of BLOCK input channels, value k of
# each in one row. Through a strided convolution's phases, the NumPy way (a
# 6-D transposing copy of the weights into their phases, then kron(G, G)
# times the filters, one GEMM) took 3.3 ms for 128->128 5x5 filters, one
# thread, a third of the whole forward at batch 1; here about 2 ms. For
# stride 1 that GEMM alone is about as fast, and _winograd keeps it.


cdef void _phase_taps(Py_ssize_t* at, Py_ssize_t o, Py_ssize_t k0, Py_ssize_t count,
                      Py_ssize_t q, Py_ssize_t r, Py_ssize_t s,
                      Py_ssize_t c_count) noexcept nogil:
    """at[(t_h q + t_w) BLOCK + p] = where in w (O, C, r, r) tap (t_h, t_w)
    of the q x q phase channel k0 + p of filter row o lies: w[o, c, s t_h +
    a_h, s t_w + a_w] for k = c s^2 + a_h s + a_w, or -1 past r (a zero of
    that phase)."""
    cdef Py_ssize_t p, th, tw, y, x
    cdef Py_ssize_t c = k0 // (s * s), a_h = k0 // s % s, a_w = k0 % s
    for p in range(count):
        for th in range(q):
            y = s * th + a_h
            for tw in range(q):
                x = s * tw + a_w
                at[(th * q + tw) * BLOCK + p] = (((o * c_count + c) * r + y) * r + x
                                                 if y < r and x < r else -1)
        _next_tile(&c, &a_h, &a_w, s, s)  # (the next phase channel)


cdef void _filter_tiles(const real* w, real* u, const real* g, Py_ssize_t a, Py_ssize_t q,
                        Py_ssize_t r, Py_ssize_t s, Py_ssize_t o_count, Py_ssize_t c_count,
                        Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """u[(i, j), o, k] = (G g_k G^T)[i, j] for output channels lo..hi, g_k
    the q x q phase (a_h, a_w) of filter w[o, c] (k = c s^2 + a_h s + a_w):
    g_k[t_h, t_w] = w[o, c, s t_h + a_h, s t_w + a_w], zero past r."""
    cdef Py_ssize_t kc = c_count * s * s, o, k0, count, t, p, v, i
    cdef Py_ssize_t at[MAX_VALUES * BLOCK]
    cdef xgrad_winograd_buffers buffers
    cdef real* d = <real*>buffers.d
    memset(buffers.d, 0, sizeof(buffers.d))  # (a partial block's other lanes: zeros)
    for o in range(lo, hi):
        for k0 in range(0, kc, BLOCK):
            count = min(BLOCK, kc - k0)
            _phase_taps(at, o, k0, count, q, r, s, c_count)
            for t in range(0, q * q * BLOCK, BLOCK):
                for p in range(count):
                    i = at[t + p]
                    d[t + p] = w[i] if i >= 0 else 0
            _transform(XGRAD_WINOGRAD_ANY, g, a, g, a, q, q, &buffers)
            for v in range(a * a):
                memcpy(u + (v * o_count + o) * kc + k0, <real*>buffers.out + v * BLOCK,
                       count * sizeof(real))


cdef void _filter_gradients(const real* du, real* gw, const real* g_t, Py_ssize_t a,
                            Py_ssize_t q, Py_ssize_t r, Py_ssize_t s, Py_ssize_t o_count,
                            Py_ssize_t c_count, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """The adjoint of _filter_tiles: gw[o, c, s t_h + a_h, s t_w + a_w] =
    (G^T du_k G)[t_h, t_w] for output channels lo..hi, du_k the a x a
    values du[:, o, k] (k = c s^2 + a_h s + a_w); each element of gw is
    written once, by its one phase (taps past r, zero in every g_k, are
    dropped)."""
    cdef Py_ssize_t kc = c_count * s * s, o, k0, count, t, p, i
    cdef Py_ssize_t at[MAX_VALUES * BLOCK]
    cdef xgrad_winograd_buffers buffers
    cdef real* out = <real*>buffers.out
    memset(buffers.d, 0, sizeof(buffers.d))
    for o in range(lo, hi):
        for k0 in range(0, kc, BLOCK):
            count = min(BLOCK, kc - k0)
            _read_rows(<real*>buffers.d, BLOCK, du + o * kc + k0, o_count * kc, a * a, count)
            _transform(XGRAD_WINOGRAD_ANY, g_t, q, g_t, q, a, a, &buffers)
            _phase_taps(at, o, k0, count, q, r, s, c_count)
            for t in range(0, q * q * BLOCK, BLOCK):
                for p in range(count):
                    i = at[t + p]
                    if i >= 0:
                        gw[i] = out[t + p]


cdef struct FilterJob:
    bint f32, adjoint
    const void* src  # w (adjoint: du)
    void* dst  # u (adjoint: gw)
    const void* mat  # G (adjoint: G^T)
    Py_ssize_t a, q, r, s, o, c, per_chunk


cdef void _filter_chunk(void* ctx, Py_ssize_t chunk) noexcept nogil:
    cdef FilterJob* j = <FilterJob*>ctx
    cdef Py_ssize_t lo = chunk * j.per_chunk
    cdef Py_ssize_t hi = min(lo + j.per_chunk, j.o)
    if j.f32 and j.adjoint:
        _filter_gradients(<const float*>j.src, <float*>j.dst, <const float*>j.mat, j.a, j.q,
                          j.r, j.s, j.o, j.c, lo, hi)
    elif j.f32:
        _filter_tiles(<const float*>j.src, <float*>j.dst, <const float*>j.mat, j.a, j.q, j.r,
                      j.s, j.o, j.c, lo, hi)
    elif j.adjoint:
        _filter_gradients(<const double*>j.src, <double*>j.dst, <const double*>j.mat, j.a,
                          j.q, j.r, j.s, j.o, j.c, lo, hi)
    else:
        _filter_tiles(<const double*>j.src, <double*>j.dst, <const double*>j.mat, j.a, j.q,
                      j.r, j.s, j.o, j.c, lo, hi)


cdef bint _run_filters(bint adjoint, cnp.ndarray w, cnp.ndarray u, object g, Py_ssize_t s):
    """filter_tiles (adjoint: filter_gradients) on w (O, C, r, r) and u (a^2,
    O, C s^2); False, with nothing written, when they do not qualify."""
    cdef int t = _float_type(w)
    if t < 0 or not _plain(w, 4, t) or not _plain(u, 3, t) or s < 1:
        return False
    cdef Py_ssize_t a = len(g), q = len(g[0]) if a else 0
    cdef cnp.ndarray mat = _matrix(g, t, a, q)
    if mat is None or q < 1 or a < q:
        return False
    cdef Py_ssize_t o = w.shape[0], c = w.shape[1], r = w.shape[2]
    if (w.shape[3] != r or (r + s - 1) // s != q or u.shape[0] != a * a or u.shape[1] != o
            or u.shape[2] != c * s * s):
        return False
    if adjoint:
        mat = cnp.PyArray_FROMANY(mat.T, t, 2, 2, cnp.NPY_ARRAY_CARRAY)
    cdef FilterJob job
    job.f32, job.adjoint = t == cnp.NPY_FLOAT, adjoint
    job.src = cnp.PyArray_DATA(u if adjoint else w)
    job.dst = cnp.PyArray_DATA(w if adjoint else u)
    job.mat = cnp.PyArray_DATA(mat)
    job.a, job.q, job.r, job.s, job.o, job.c = a, q, r, s, o, c
    cdef Py_ssize_t nt = _tile_threads(o, a * a * o * c * s * s)
    with nogil:
        _follow_path()
        job.per_chunk = (o + nt - 1) // nt
        if nt <= 1:
            _filter_chunk(&job, 0)
        else:
            run_chunks(_filter_chunk, &job, (o + job.per_chunk - 1) // job.per_chunk)
    return True


def filter_tiles(cnp.ndarray w, cnp.ndarray u, object g, Py_ssize_t s=1):
    """Fill ``u`` (a^2, O, C) with G g G^T of each r x r filter g = w[o, c]
    of ``w`` (O, C, r, r); ``g`` is G (a x r). With ``s`` > 1, of each
    filter's s^2 phases instead (_polyphase.Phases.split_weight's filters,
    q x q, q = ceil(r / s); u (a^2, O, C s^2), G (a x q)). Returns False
    (writing nothing) when the operands do not qualify (float32/64, one
    dtype, C-contiguous, aligned, shapes)."""
    return _run_filters(False, w, u, g, s)


def filter_gradients(cnp.ndarray du, cnp.ndarray gw, object g, Py_ssize_t s=1):
    """Fill ``gw`` (O, C, r, r) with the adjoint of filter_tiles at ``du``
    (a^2, O, C s^2): G^T du G of each filter (of each phase, written to the
    taps of w it came from). Returns False (writing nothing) when the
    operands do not qualify."""
    return _run_filters(True, gw, du, g, s)


# ---------------------------------------------------------------------------
# F(2x2, 3x3) unrolled: the same transforms with its matrices written out
# (entries 0, +-1), one tile at a time in registers. For 3x3 these run about
# 1.6x faster than the matrix-driven kernels above (input tiles of 64
# channels, 16x16, batch 8: 284 against 459 us), and 3x3 is the common
# convolution.

cdef inline void _load_tile_4x4(const real* x, Py_ssize_t h, Py_ssize_t w, Py_ssize_t r0,
                                Py_ssize_t c0, real* d) noexcept nogil:
    """d (4x4, row-major) = x[r0:r0+4, c0:c0+4], zeros outside the plane."""
    cdef Py_ssize_t r, s, rr, cc
    if r0 >= 0 and c0 >= 0 and r0 + 4 <= h and c0 + 4 <= w:
        for r in range(4):
            for s in range(4):
                d[4 * r + s] = x[(r0 + r) * w + c0 + s]
        return
    for r in range(4):
        rr = r0 + r
        for s in range(4):
            cc = c0 + s
            if 0 <= rr < h and 0 <= cc < w:
                d[4 * r + s] = x[rr * w + cc]
            else:
                d[4 * r + s] = 0


# Blocks of tiles as above (the transform itself per tile, in registers).
DEF BLOCK_3X3 = 128


cdef inline void _flush_16(real* dst, Py_ssize_t k_stride, const real* buf,
                           Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(16):
        memcpy(dst + k * k_stride, buf + k * BLOCK_3X3, count * sizeof(real))


cdef inline Py_ssize_t _tile_written_16(real* plane, Py_ssize_t k_stride, const real* buf,
                                        Py_ssize_t fill, Py_ssize_t* done) noexcept nogil:
    """One more tile in ``buf`` (now ``fill + 1``): the block is copied out
    to ``plane + *done`` when full. Returns the new fill."""
    fill += 1
    if fill == BLOCK_3X3:
        _flush_16(plane + done[0], k_stride, buf, fill)
        done[0] += fill
        fill = 0
    return fill


cdef void _input_tiles_3x3(const real* x, real* v, Py_ssize_t n_count, Py_ssize_t c_count,
                           Py_ssize_t h, Py_ssize_t w, Py_ssize_t ph, Py_ssize_t pw,
                           Py_ssize_t th, Py_ssize_t tw, Py_ssize_t ld, Py_ssize_t lo,
                           Py_ssize_t hi) noexcept nogil:
    """v (16, C, N * th * tw), rows ``ld`` apart, from x (N, C, h, w): B^T d
    B of the 4x4 tile at rows 2i - ph, columns 2j - pw of each plane."""
    cdef Py_ssize_t k_stride = c_count * ld
    cdef Py_ssize_t n, c, i, j, r, fill, done
    cdef real d[16]
    cdef real t[16]
    cdef real buf[16 * BLOCK_3X3]
    cdef const real* src
    for c in range(lo, hi):
        fill = 0
        done = 0
        for n in range(n_count):
            src = x + (n * c_count + c) * h * w
            for i in range(th):
                for j in range(tw):
                    _load_tile_4x4(src, h, w, 2 * i - ph, 2 * j - pw, d)
                    # t = B^T d (rows), then t B (columns)
                    for r in range(4):
                        t[r] = d[r] - d[8 + r]
                        t[4 + r] = d[4 + r] + d[8 + r]
                        t[8 + r] = d[8 + r] - d[4 + r]
                        t[12 + r] = d[4 + r] - d[12 + r]
                    for r in range(4):
                        buf[(4 * r) * BLOCK_3X3 + fill] = t[4 * r] - t[4 * r + 2]
                        buf[(4 * r + 1) * BLOCK_3X3 + fill] = t[4 * r + 1] + t[4 * r + 2]
                        buf[(4 * r + 2) * BLOCK_3X3 + fill] = t[4 * r + 2] - t[4 * r + 1]
                        buf[(4 * r + 3) * BLOCK_3X3 + fill] = t[4 * r + 1] - t[4 * r + 3]
                    fill = _tile_written_16(v + c * ld, k_stride, buf, fill, &done)
        if fill:
            _flush_16(v + c * ld + done, k_stride, buf, fill)


cdef void _output_tiles_3x3(const real* m, real* y, const real* bias, Py_ssize_t n_count,
                            Py_ssize_t o_count, Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t th,
                            Py_ssize_t tw, Py_ssize_t ld, Py_ssize_t lo,
                            Py_ssize_t hi) noexcept nogil:
    """y (N, O, ho, wo) from m (16, O, N * th * tw), rows ``ld`` apart: A^T
    m A of each tile (its outputs beyond ho, wo dropped), plus bias[o] when
    bias is not NULL."""
    cdef Py_ssize_t plane = n_count * th * tw, k_stride = o_count * ld
    cdef Py_ssize_t n, o, i, j, r, k, p, p0, count
    cdef real e[16]
    cdef real t[8]
    cdef real buf[16 * BLOCK_3X3]
    cdef real b0
    cdef real* dst
    for o in range(lo, hi):
        b0 = bias[o] if bias != NULL else 0
        n = 0
        i = 0
        j = 0
        for p0 in range(0, plane, BLOCK_3X3):
            count = min(BLOCK_3X3, plane - p0)
            _read_rows(buf, BLOCK_3X3, m + o * ld + p0, k_stride, 16, count)
            for p in range(count):
                for k in range(16):
                    e[k] = buf[k * BLOCK_3X3 + p]
                # t = A^T e (2x4), then t A (2x2)
                for r in range(4):
                    t[r] = e[r] + e[4 + r] + e[8 + r]
                    t[4 + r] = e[4 + r] - e[8 + r] - e[12 + r]
                dst = y + ((n * o_count + o) * ho + 2 * i) * wo + 2 * j
                dst[0] = t[0] + t[1] + t[2] + b0
                if 2 * j + 1 < wo:
                    dst[1] = t[1] - t[2] - t[3] + b0
                if 2 * i + 1 < ho:
                    dst[wo] = t[4] + t[5] + t[6] + b0
                    if 2 * j + 1 < wo:
                        dst[wo + 1] = t[5] - t[6] - t[7] + b0
                _next_tile(&n, &i, &j, th, tw)


cdef void _gradient_tiles_3x3(const real* gy, real* g, Py_ssize_t n_count, Py_ssize_t o_count,
                              Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t th,
                              Py_ssize_t tw, Py_ssize_t ld, Py_ssize_t lo,
                              Py_ssize_t hi) noexcept nogil:
    """g (16, O, N * th * tw), rows ``ld`` apart, from gy (N, O, ho, wo): A q
    A^T of each 2x2 block q of gy (zeros beyond ho, wo), the adjoint of
    ``_output_tiles``."""
    cdef Py_ssize_t k_stride = o_count * ld
    cdef Py_ssize_t n, o, i, j, r, fill, done
    cdef real q0, q1, q2, q3
    cdef real t[8]
    cdef real buf[16 * BLOCK_3X3]
    cdef const real* src
    for o in range(lo, hi):
        fill = 0
        done = 0
        for n in range(n_count):
            for i in range(th):
                src = gy + ((n * o_count + o) * ho + 2 * i) * wo
                for j in range(tw):
                    q0 = src[2 * j]
                    q1 = src[2 * j + 1] if 2 * j + 1 < wo else 0
                    q2 = src[wo + 2 * j] if 2 * i + 1 < ho else 0
                    q3 = src[wo + 2 * j + 1] if 2 * i + 1 < ho and 2 * j + 1 < wo else 0
                    # t = A q (4x2), then t A^T (4x4); A = [[1,0],[1,1],[1,-1],[0,-1]]
                    t[0] = q0
                    t[1] = q1
                    t[2] = q0 + q2
                    t[3] = q1 + q3
                    t[4] = q0 - q2
                    t[5] = q1 - q3
                    t[6] = -q2
                    t[7] = -q3
                    for r in range(4):
                        buf[(4 * r) * BLOCK_3X3 + fill] = t[2 * r]
                        buf[(4 * r + 1) * BLOCK_3X3 + fill] = t[2 * r] + t[2 * r + 1]
                        buf[(4 * r + 2) * BLOCK_3X3 + fill] = t[2 * r] - t[2 * r + 1]
                        buf[(4 * r + 3) * BLOCK_3X3 + fill] = -t[2 * r + 1]
                    fill = _tile_written_16(g + o * ld, k_stride, buf, fill, &done)
        if fill:
            _flush_16(g + o * ld + done, k_stride, buf, fill)


def input_tiles_3x3(cnp.ndarray x, cnp.ndarray v, Py_ssize_t ph, Py_ssize_t pw):
    """Fill ``v`` (16, C, N * th * tw) with B^T d B of the input tiles of
    ``x`` (N, C, h, w) for a 3x3 convolution with padding (ph, pw); th, tw
    from ``v``'s size. Returns False (writing nothing) when the operands do
    not qualify (float32/64, one dtype, C-contiguous, aligned, shapes)."""
    cdef int t = _float_type(x)
    if t < 0 or not _plain(x, 4, t):
        return False
    cdef Py_ssize_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3]
    th, tw = tile_counts(h + 2 * ph - 2, w + 2 * pw - 2, 2)
    cdef Py_ssize_t ld = _tile_rows(v, t, 16, c, n * th * tw)
    if ld < 0:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    cdef TileJob job = _tile_job(INPUT_3X3, t, x, v)
    job.n, job.c, job.h, job.w, job.ph, job.pw = n, c, h, w, ph, pw
    job.th, job.tw, job.ld = cth, ctw, ld
    with nogil:
        _run_tiles(&job, _tile_threads(c, 16 * c * n * cth * ctw))
    return True


def output_tiles_3x3(cnp.ndarray m, cnp.ndarray y, object bias=None):
    """Fill ``y`` (N, O, ho, wo) with A^T m A of the tiles of ``m`` (16, O,
    N * th * tw), plus ``bias`` (O,) of the same dtype when given. Returns
    False (writing nothing) when the operands do not qualify."""
    cdef int t = _float_type(m)
    if t < 0 or not _plain(y, 4, t):
        return False
    cdef cnp.ndarray b = None
    if bias is not None:
        b = <cnp.ndarray?>bias
        if not _plain(b, 1, t) or b.shape[0] != y.shape[1]:
            return False
    cdef Py_ssize_t n = y.shape[0], o = y.shape[1], ho = y.shape[2], wo = y.shape[3]
    th, tw = tile_counts(ho, wo)
    cdef Py_ssize_t ld = _tile_rows(m, t, 16, o, n * th * tw)
    if ld < 0:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    cdef void* pb = NULL if b is None else cnp.PyArray_DATA(b)
    cdef TileJob job = _tile_job(OUTPUT_3X3, t, m, y)
    job.bias = pb
    job.n, job.c, job.h, job.w, job.th, job.tw, job.ld = n, o, ho, wo, cth, ctw, ld
    with nogil:
        _run_tiles(&job, _tile_threads(o, 16 * o * n * cth * ctw))
    return True


def gradient_tiles_3x3(cnp.ndarray gy, cnp.ndarray g):
    """Fill ``g`` (16, O, N * th * tw) with A q A^T of the 2x2 blocks q of
    ``gy`` (N, O, ho, wo). Returns False (writing nothing) when the
    operands do not qualify."""
    cdef int t = _float_type(gy)
    if t < 0 or not _plain(gy, 4, t):
        return False
    cdef Py_ssize_t n = gy.shape[0], o = gy.shape[1], ho = gy.shape[2], wo = gy.shape[3]
    th, tw = tile_counts(ho, wo)
    cdef Py_ssize_t ld = _tile_rows(g, t, 16, o, n * th * tw)
    if ld < 0:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    cdef TileJob job = _tile_job(GRADIENT_3X3, t, gy, g)
    job.n, job.c, job.h, job.w, job.th, job.tw, job.ld = n, o, ho, wo, cth, ctw, ld
    with nogil:
        _run_tiles(&job, _tile_threads(o, 16 * o * n * cth * ctw))
    return True
