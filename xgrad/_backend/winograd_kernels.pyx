# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The tile transforms of Winograd's F(2x2, 3x3) convolution (Lavin and
Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).

A 3x3 convolution with stride 1 computes each 2x2 block of outputs from a
4x4 tile of input. In the transformed domain the 9 products per output
become 16 per 2x2 block (2.25x fewer multiplications), summed over the
channels by 16 GEMMs, one per tile position (xgrad/_ops/convolution.py):

    y_tile = A^T [ (G g G^T) * (B^T d B) ] A

These kernels move the data into and out of that domain in one pass each:
``input_tiles`` (B^T d B of every 4x4 input tile), ``output_tiles`` (A^T m
A back to 2x2 outputs, plus the bias) and ``gradient_tiles`` (A gy A^T, the
adjoint of ``output_tiles``, which the weight gradient needs). The filter
transform G g G^T is a few small products, done in NumPy.

The 16 transformed values of a tile go to 16 planes, ``(16, C, P)`` with P
= N * tiles_h * tiles_w tiles in (sample, row, column) order, so that plane
k is the right-hand side of GEMM k.
"""

cimport numpy as cnp
from libc.string cimport memcpy

cnp.import_array()

ctypedef fused real:
    float
    double


cdef inline void _load_tile(const real* x, Py_ssize_t h, Py_ssize_t w, Py_ssize_t r0,
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


# Tiles are transformed a block at a time into a small buffer, then each of
# the 16 values is copied out as one run (or, for the output, read in as
# one): the 16 planes lie C * P elements apart (often a multiple of 4 KiB),
# and touching each of them once per tile made the caches alias (about 50 ns
# a tile instead of 10). A channel's tiles are contiguous in every plane
# across samples and rows, so a block spans them (small images have few
# tiles per row).
DEF BLOCK = 128


cdef inline void _flush(real* dst, Py_ssize_t k_stride, const real* buf,
                        Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(16):
        memcpy(dst + k * k_stride, buf + k * BLOCK, count * sizeof(real))


cdef inline Py_ssize_t _tile_written(real* plane, Py_ssize_t k_stride, const real* buf,
                                     Py_ssize_t fill, Py_ssize_t* done) noexcept nogil:
    """One more tile in ``buf`` (now ``fill + 1``): the block is copied out
    to ``plane + *done`` when full. Returns the new fill."""
    fill += 1
    if fill == BLOCK:
        _flush(plane + done[0], k_stride, buf, fill)
        done[0] += fill
        fill = 0
    return fill


cdef void _input_tiles(const real* x, real* v, Py_ssize_t n_count, Py_ssize_t c_count,
                       Py_ssize_t h, Py_ssize_t w, Py_ssize_t ph, Py_ssize_t pw,
                       Py_ssize_t th, Py_ssize_t tw) noexcept nogil:
    """v (16, C, N * th * tw) from x (N, C, h, w): B^T d B of the 4x4 tile
    at rows 2i - ph, columns 2j - pw of each plane."""
    cdef Py_ssize_t plane = n_count * th * tw, k_stride = c_count * plane
    cdef Py_ssize_t n, c, i, j, r, fill, done
    cdef real d[16]
    cdef real t[16]
    cdef real buf[16 * BLOCK]
    cdef const real* src
    for c in range(c_count):
        fill = 0
        done = 0
        for n in range(n_count):
            src = x + (n * c_count + c) * h * w
            for i in range(th):
                for j in range(tw):
                    _load_tile(src, h, w, 2 * i - ph, 2 * j - pw, d)
                    # t = B^T d (rows), then t B (columns)
                    for r in range(4):
                        t[r] = d[r] - d[8 + r]
                        t[4 + r] = d[4 + r] + d[8 + r]
                        t[8 + r] = d[8 + r] - d[4 + r]
                        t[12 + r] = d[4 + r] - d[12 + r]
                    for r in range(4):
                        buf[(4 * r) * BLOCK + fill] = t[4 * r] - t[4 * r + 2]
                        buf[(4 * r + 1) * BLOCK + fill] = t[4 * r + 1] + t[4 * r + 2]
                        buf[(4 * r + 2) * BLOCK + fill] = t[4 * r + 2] - t[4 * r + 1]
                        buf[(4 * r + 3) * BLOCK + fill] = t[4 * r + 1] - t[4 * r + 3]
                    fill = _tile_written(v + c * plane, k_stride, buf, fill, &done)
        if fill:
            _flush(v + c * plane + done, k_stride, buf, fill)


cdef void _output_tiles(const real* m, real* y, const real* bias, Py_ssize_t n_count,
                        Py_ssize_t o_count, Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t th,
                        Py_ssize_t tw) noexcept nogil:
    """y (N, O, ho, wo) from m (16, O, N * th * tw): A^T m A of each tile
    (its outputs beyond ho, wo dropped), plus bias[o] when bias is not NULL."""
    cdef Py_ssize_t plane = n_count * th * tw, k_stride = o_count * plane
    cdef Py_ssize_t n, o, i, j, r, k, p, p0, count
    cdef real e[16]
    cdef real t[8]
    cdef real buf[16 * BLOCK]
    cdef real b0
    cdef real* dst
    for o in range(o_count):
        b0 = bias[o] if bias != NULL else 0
        n = 0
        i = 0
        j = 0
        for p0 in range(0, plane, BLOCK):
            count = min(BLOCK, plane - p0)
            for k in range(16):
                memcpy(buf + k * BLOCK, m + k * k_stride + o * plane + p0,
                       count * sizeof(real))
            for p in range(count):
                for k in range(16):
                    e[k] = buf[k * BLOCK + p]
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
                j += 1  # the next tile: (n, i, j) in row-major order
                if j == tw:
                    j = 0
                    i += 1
                    if i == th:
                        i = 0
                        n += 1


cdef void _gradient_tiles(const real* gy, real* g, Py_ssize_t n_count, Py_ssize_t o_count,
                          Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t th,
                          Py_ssize_t tw) noexcept nogil:
    """g (16, O, N * th * tw) from gy (N, O, ho, wo): A q A^T of each 2x2
    block q of gy (zeros beyond ho, wo), the adjoint of ``_output_tiles``."""
    cdef Py_ssize_t plane = n_count * th * tw, k_stride = o_count * plane
    cdef Py_ssize_t n, o, i, j, r, fill, done
    cdef real q0, q1, q2, q3
    cdef real t[8]
    cdef real buf[16 * BLOCK]
    cdef const real* src
    for o in range(o_count):
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
                        buf[(4 * r) * BLOCK + fill] = t[2 * r]
                        buf[(4 * r + 1) * BLOCK + fill] = t[2 * r] + t[2 * r + 1]
                        buf[(4 * r + 2) * BLOCK + fill] = t[2 * r] - t[2 * r + 1]
                        buf[(4 * r + 3) * BLOCK + fill] = -t[2 * r + 1]
                    fill = _tile_written(g + o * plane, k_stride, buf, fill, &done)
        if fill:
            _flush(g + o * plane + done, k_stride, buf, fill)


cdef bint _plain(cnp.ndarray a, int ndim, int t):
    """C-contiguous, aligned, native float of type t, ndim axes."""
    return (cnp.PyArray_TYPE(a) == t and cnp.PyArray_NDIM(a) == ndim
            and cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a)
            and cnp.PyArray_ISNOTSWAPPED(a))


cdef int _float_type(cnp.ndarray a):
    cdef int t = cnp.PyArray_TYPE(a)
    return t if t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE else -1


def tile_counts(Py_ssize_t ho, Py_ssize_t wo):
    """(tiles_h, tiles_w): the 2x2 output blocks that cover ho x wo."""
    return (ho + 1) // 2, (wo + 1) // 2


def input_tiles(cnp.ndarray x, cnp.ndarray v, Py_ssize_t ph, Py_ssize_t pw):
    """Fill ``v`` (16, C, N * th * tw) with B^T d B of the input tiles of
    ``x`` (N, C, h, w) for a 3x3 convolution with padding (ph, pw); th, tw
    from ``v``'s size. Returns False (writing nothing) when the operands do
    not qualify (float32/64, one dtype, C-contiguous, aligned, shapes)."""
    cdef int t = _float_type(x)
    if t < 0 or not (_plain(x, 4, t) and _plain(v, 3, t)):
        return False
    cdef Py_ssize_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3]
    th, tw = tile_counts(h + 2 * ph - 2, w + 2 * pw - 2)
    if v.shape[0] != 16 or v.shape[1] != c or v.shape[2] != n * th * tw:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    with nogil:
        if t == cnp.NPY_FLOAT:
            _input_tiles[float](<float*>cnp.PyArray_DATA(x), <float*>cnp.PyArray_DATA(v),
                                n, c, h, w, ph, pw, cth, ctw)
        else:
            _input_tiles[double](<double*>cnp.PyArray_DATA(x), <double*>cnp.PyArray_DATA(v),
                                 n, c, h, w, ph, pw, cth, ctw)
    return True


def output_tiles(cnp.ndarray m, cnp.ndarray y, object bias=None):
    """Fill ``y`` (N, O, ho, wo) with A^T m A of the tiles of ``m`` (16, O,
    N * th * tw), plus ``bias`` (O,) of the same dtype when given. Returns
    False (writing nothing) when the operands do not qualify."""
    cdef int t = _float_type(m)
    if t < 0 or not (_plain(m, 3, t) and _plain(y, 4, t)):
        return False
    cdef cnp.ndarray b = None
    if bias is not None:
        b = <cnp.ndarray?>bias
        if not _plain(b, 1, t) or b.shape[0] != y.shape[1]:
            return False
    cdef Py_ssize_t n = y.shape[0], o = y.shape[1], ho = y.shape[2], wo = y.shape[3]
    th, tw = tile_counts(ho, wo)
    if m.shape[0] != 16 or m.shape[1] != o or m.shape[2] != n * th * tw:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    cdef void* pb = NULL if b is None else cnp.PyArray_DATA(b)
    with nogil:
        if t == cnp.NPY_FLOAT:
            _output_tiles[float](<float*>cnp.PyArray_DATA(m), <float*>cnp.PyArray_DATA(y),
                                 <float*>pb, n, o, ho, wo, cth, ctw)
        else:
            _output_tiles[double](<double*>cnp.PyArray_DATA(m), <double*>cnp.PyArray_DATA(y),
                                  <double*>pb, n, o, ho, wo, cth, ctw)
    return True


def gradient_tiles(cnp.ndarray gy, cnp.ndarray g):
    """Fill ``g`` (16, O, N * th * tw) with A q A^T of the 2x2 blocks q of
    ``gy`` (N, O, ho, wo). Returns False (writing nothing) when the
    operands do not qualify."""
    cdef int t = _float_type(gy)
    if t < 0 or not (_plain(gy, 4, t) and _plain(g, 3, t)):
        return False
    cdef Py_ssize_t n = gy.shape[0], o = gy.shape[1], ho = gy.shape[2], wo = gy.shape[3]
    th, tw = tile_counts(ho, wo)
    if g.shape[0] != 16 or g.shape[1] != o or g.shape[2] != n * th * tw:
        return False
    cdef Py_ssize_t cth = th, ctw = tw
    with nogil:
        if t == cnp.NPY_FLOAT:
            _gradient_tiles[float](<float*>cnp.PyArray_DATA(gy), <float*>cnp.PyArray_DATA(g),
                                   n, o, ho, wo, cth, ctw)
        else:
            _gradient_tiles[double](<double*>cnp.PyArray_DATA(gy),
                                    <double*>cnp.PyArray_DATA(g), n, o, ho, wo, cth, ctw)
    return True
