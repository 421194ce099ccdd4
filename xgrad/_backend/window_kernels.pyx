# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Window kernels of 2-D convolution and pooling: im2col and its adjoint
(col2im), max pooling forward, its gradient and the gradient's adjoint
(gather), and average pooling forward and gradient.

Why im2col here: NumPy's im2col pads a copy of the input, then copies a 6-D strided view
of it into the column buffer; on small images (8x8 digits) that costs more
than the matmul. Here each column row is written straight from the input,
zeros where a window reaches into the padding, with contiguous runs copied
as runs. Max and average pooling in NumPy make one (masked) pass per window
tap; here it is one pass over the outputs.

Every kernel works channel by channel (im2col's rows, col2im's planes) or
plane by plane (pooling), so each splits its channels or planes over
xgrad's worker pool (native_kernels), the same serial loop per channel:
results are those of one thread, bit for bit.
"""

cimport numpy as cnp
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from xgrad._backend.native_kernels cimport pool_threads, run_chunks

import numpy

cdef extern from "select_loops.h" nogil:
    void xgrad_max_tap_f32_u8(const float* x, Py_ssize_t stride, float* y,
                              cnp.uint8_t* tap, cnp.uint8_t t, Py_ssize_t n)
    void xgrad_max_tap_f32_u16(const float* x, Py_ssize_t stride, float* y,
                               cnp.uint16_t* tap, cnp.uint16_t t, Py_ssize_t n)
    void xgrad_max_tap_f64_u8(const double* x, Py_ssize_t stride, double* y,
                              cnp.uint8_t* tap, cnp.uint8_t t, Py_ssize_t n)
    void xgrad_max_tap_f64_u16(const double* x, Py_ssize_t stride, double* y,
                               cnp.uint16_t* tap, cnp.uint16_t t, Py_ssize_t n)

cnp.import_array()

ctypedef fused real:
    float
    double


# The geometry of an im2col or col2im: x (m, C, h, w), the columns the
# matrix (C kh kw, m oh ow) with rows ``ld`` elements apart.
cdef struct Windows:
    Py_ssize_t c_count, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, m, ld


cdef inline Py_ssize_t _inside_from(Py_ssize_t offset, Py_ssize_t stride,
                                    Py_ssize_t count) noexcept nogil:
    """The first output column o < count whose input column o * stride +
    offset is inside the row (>= 0); count when none is. With
    ``_inside_to`` it splits a row of windows into the columns that read x
    and those that read the padding (a prefix and a suffix)."""
    cdef Py_ssize_t o = 0
    while o < count and o * stride + offset < 0:
        o += 1
    return o


cdef inline Py_ssize_t _inside_to(Py_ssize_t lo, Py_ssize_t offset, Py_ssize_t stride,
                                  Py_ssize_t count, Py_ssize_t width) noexcept nogil:
    """One past the last output column in [lo, count) whose input column
    o * stride + offset is < width."""
    cdef Py_ssize_t o = count
    while o > lo and (o - 1) * stride + offset >= width:
        o -= 1
    return o


cdef void _fill(const real* x, real* out, const Windows* g, Py_ssize_t c_lo,
                Py_ssize_t c_hi) noexcept nogil:
    """out (C, kh, kw, m, oh, ow) from x (m, C, h, w), channels c_lo..c_hi."""
    cdef Py_ssize_t c_count = g.c_count, h = g.h, w = g.w, kh = g.kh, kw = g.kw
    cdef Py_ssize_t sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw, dh = g.dh, dw = g.dw
    cdef Py_ssize_t oh = g.oh, ow = g.ow, m = g.m, ld = g.ld
    cdef Py_ssize_t c, i, j, s, oy, ox, iy, ix, lo, hi
    cdef const real* plane
    cdef real* row
    for c in range(c_lo, c_hi):
        for i in range(kh):
            for j in range(kw):
                # the output columns whose input column lies inside x
                lo = _inside_from(j * dw - pw, sw, ow)
                hi = _inside_to(lo, j * dw - pw, sw, ow, w)
                for s in range(m):
                    plane = x + (s * c_count + c) * h * w
                    row = out + ((c * kh + i) * kw + j) * ld + s * oh * ow
                    for oy in range(oh):
                        iy = oy * sh + i * dh - ph
                        if iy < 0 or iy >= h:
                            memset(row + oy * ow, 0, ow * sizeof(real))
                            continue
                        for ox in range(lo):
                            row[oy * ow + ox] = 0
                        ix = lo * sw + j * dw - pw
                        if sw == 1:
                            for ox in range(lo, hi):
                                row[oy * ow + ox] = plane[iy * w + ix + ox - lo]
                        else:
                            for ox in range(lo, hi):
                                row[oy * ow + ox] = plane[iy * w + ix + (ox - lo) * sw]
                        for ox in range(hi, ow):
                            row[oy * ow + ox] = 0


cdef void _fill_same(const real* x, real* out, const Windows* g, Py_ssize_t c_lo,
                     Py_ssize_t c_hi) noexcept nogil:
    """``_fill`` for stride 1, dilation 1 and an output of the input's size
    ("same" padding, 3x3 pad 1 say). A tap's block is then the plane shifted
    by dy rows and dx columns: one flat copy of the overlap, zeros for the
    rows outside and |dx| columns per row. On 4x4 and 8x8 images that beats
    a copy per row of 4-8 elements by about 2x."""
    cdef Py_ssize_t c_count = g.c_count, h = g.h, w = g.w, kh = g.kh, kw = g.kw
    cdef Py_ssize_t ph = g.ph, pw = g.pw, m = g.m, ld = g.ld
    cdef Py_ssize_t c, i, j, s, dy, dx, oy0, oy1, oy, a, n = h * w, start, length
    cdef const real* plane
    cdef real* block
    for c in range(c_lo, c_hi):
        for i in range(kh):
            dy = i - ph
            oy0 = -dy if dy < 0 else 0
            oy1 = h - dy if dy > 0 else h
            for j in range(kw):
                dx = j - pw
                for s in range(m):
                    plane = x + (s * c_count + c) * n
                    block = out + ((c * kh + i) * kw + j) * ld + s * n
                    if oy1 <= oy0 or dx >= w or -dx >= w:
                        memset(block, 0, n * sizeof(real))
                        continue
                    memset(block, 0, oy0 * w * sizeof(real))
                    memset(block + oy1 * w, 0, (h - oy1) * w * sizeof(real))
                    # block[k] = plane[k + dy*w + dx] over the rows inside;
                    # the |dx| elements per row that wrap around are zeroed
                    start = oy0 * w + (-dx if dx < 0 else 0)
                    length = (oy1 - oy0) * w - (dx if dx > 0 else -dx)
                    memcpy(block + start, plane + start + dy * w + dx, length * sizeof(real))
                    if dx > 0:
                        for oy in range(oy0, oy1):
                            for a in range(w - dx, w):
                                block[oy * w + a] = 0
                    elif dx < 0:
                        for oy in range(oy0, oy1):
                            for a in range(-dx):
                                block[oy * w + a] = 0


# Planes of at most this many output positions, in rows shorter than 8,
# take the tabulated loops (_fill_small, _add_small): im2col about 3x and
# col2im about 1.5x faster at 4x4 than the loops per row. At 8x8
# _fill_same's flat copies are still about 2x faster, and strided planes
# gained nothing from the tables (a gather per element either way).
DEF SMALL_PLANE = 256


cdef inline bint _tabulated(Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t h,
                            Py_ssize_t w) noexcept nogil:
    """Whether im2col and col2im take the tabulated loops (see SMALL_PLANE)."""
    return ow < 8 and oh * ow <= SMALL_PLANE and h * w < (1 << 30)


cdef Py_ssize_t _tap_list(int* at, int* src, const Windows* g, Py_ssize_t i,
                          Py_ssize_t j) noexcept nogil:
    """The output positions l whose window's tap (i, j) lies inside the
    (h, w) plane, in order (at[q] = l), with the offset it reads there
    (src[q]); returns how many. Lists, not a table with -1 for the padding:
    the loops over them have no branch (a 4x4 5x5 im2col 1.6x faster)."""
    cdef Py_ssize_t oy, ox, iy, ix, q = 0
    for oy in range(g.oh):
        iy = oy * g.sh + i * g.dh - g.ph
        if iy < 0 or iy >= g.h:
            continue
        for ox in range(g.ow):
            ix = ox * g.sw + j * g.dw - g.pw
            if 0 <= ix < g.w:
                at[q] = <int>(oy * g.ow + ox)
                src[q] = <int>(iy * g.w + ix)
                q += 1
    return q


cdef void _fill_small(const real* x, real* out, const Windows* g, Py_ssize_t c_lo,
                      Py_ssize_t c_hi) noexcept nogil:
    """``_fill`` for small output planes (2x2-7x7): there a block is a
    handful of rows of 2-16 elements, and the per-row and per-block calls
    (memset, memcpy, bounds) cost more than the copy. Here each tap's
    positions inside the plane are listed once (_tap_list) and every
    sample's block is zeros and one gather loop over them (about 3x faster
    at 4x4)."""
    cdef Py_ssize_t c_count = g.c_count, h = g.h, w = g.w, kh = g.kh, kw = g.kw
    cdef Py_ssize_t sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw, dh = g.dh, dw = g.dw
    cdef Py_ssize_t oh = g.oh, ow = g.ow, m = g.m, ld = g.ld
    cdef Py_ssize_t c, i, j, s, l, n = oh * ow, hw = h * w, inside
    cdef int at[SMALL_PLANE]
    cdef int src[SMALL_PLANE]
    cdef const real* plane
    cdef real* block
    for i in range(kh):
        for j in range(kw):
            inside = _tap_list(at, src, g, i, j)
            for c in range(c_lo, c_hi):
                block = out + ((c * kh + i) * kw + j) * ld
                plane = x + c * hw
                for s in range(m):
                    if inside < n:
                        memset(block, 0, n * sizeof(real))
                    for l in range(inside):
                        block[at[l]] = plane[src[l]]
                    block += n
                    plane += c_count * hw


# Strided windows (stride > 1) read every sh-th row and sw-th column, so
# _fill's row copies become gathers of one element at a time (0.6-0.8 ns an
# element with rows of 8). But tap (i, j) of every window reads one phase of
# the padded plane, xpad[r sh + a, t sw + b] with a = i dh % sh, b = j dw %
# sw, at r = oy + i dh // sh, t = ox + j dw // sw: so each plane is first
# split into its sh sw phases (padding included, as zeros), once, and each
# tap's block is then rows of contiguous copies from one phase. The split
# gathers about the plane's size where the taps gather kh kw / (sh sw)
# times it; with fewer than PHASE_TAPS taps a phase (1x1 or 2x2 windows
# with stride 2) the split costs more than it saves. One thread, float32:
# 5x5 stride 2, 16 channels on 16x16 at batch 64, 1.02 -> 0.54 ms; 128
# channels on 56x56, one sample, 1.06 -> 0.46 ms; 3x3 stride 2, 16
# channels on 32x32 at batch 64, 1.17-1.31 -> 0.82 ms. col2im keeps its
# strided adds: through the phases, each tap adds into the elements the
# tap before it wrote shifted by one, and the vector loads wait for those
# stores (3x3 stride 2: 1.3-1.4x slower; 5x5: 0.7-0.9x with the phases of
# 16 planes kept at once).
DEF PHASE_TAPS = 2


cdef inline bint _phased(Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh,
                         Py_ssize_t sw) noexcept nogil:
    """Whether im2col goes through the phases (see PHASE_TAPS)."""
    return (sh > 1 or sw > 1) and kh * kw >= PHASE_TAPS * sh * sw


cdef inline real _padded_at(const real* row, Py_ssize_t u, Py_ssize_t w,
                            Py_ssize_t pw) noexcept nogil:
    """Element u of ``row`` (w elements) after pw zeros: 0 in the padding."""
    return row[u - pw] if 0 <= u - pw < w else 0


cdef void _split_phases(const real* plane, real* phases, const Windows* g, Py_ssize_t hq,
                        Py_ssize_t wq) noexcept nogil:
    """phases[a, b, r, t] (sh, sw, hq, wq) = xpad[r sh + a, t sw + b], the
    padded (h, w) ``plane``: zeros where that lies outside the plane. Each
    row of x is dealt to its sw phase rows at once; with sw == 2, inside
    the row, by a loop of constant stride, which the compiler vectorizes
    (element by element with a variable stride, the split was 40% of a 3x3
    stride-2 im2col: 16 channels on 16x16 at batch 64, 0.43 -> 0.33 ms)."""
    cdef Py_ssize_t h = g.h, w = g.w, sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw
    cdef Py_ssize_t a, b, r, t, y, lo, hi
    cdef real* row
    cdef real* odd
    cdef const real* src
    for a in range(sh):
        for r in range(hq):
            row = phases + (a * sw * hq + r) * wq  # phase (a, 0); (a, b) is b hq wq further
            y = r * sh + a - ph
            if y < 0 or y >= h:
                for b in range(sw):
                    memset(row + b * hq * wq, 0, wq * sizeof(real))
                continue
            src = plane + y * w
            if sw != 2:
                for b in range(sw):
                    for t in range(wq):
                        row[b * hq * wq + t] = _padded_at(src, t * sw + b, w, pw)
                continue
            odd = row + hq * wq
            # t in [lo, hi): both of its columns, 2t - pw and 2t + 1 - pw, inside x
            lo = min((pw + 1) // 2, wq)
            hi = max(lo, min(wq, (w + pw - 2) // 2 + 1 if w + pw >= 2 else 0))
            for t in range(lo):
                row[t] = _padded_at(src, 2 * t, w, pw)
                odd[t] = _padded_at(src, 2 * t + 1, w, pw)
            src = src + 2 * lo - pw
            for t in range(hi - lo):
                row[lo + t] = src[2 * t]
                odd[lo + t] = src[2 * t + 1]
            src = plane + y * w
            for t in range(hi, wq):
                row[t] = _padded_at(src, 2 * t, w, pw)
                odd[t] = _padded_at(src, 2 * t + 1, w, pw)


cdef inline const real* _tap_phase(const real* phases, const Windows* g, Py_ssize_t i,
                                   Py_ssize_t j, Py_ssize_t hq,
                                   Py_ssize_t wq) noexcept nogil:
    """Where tap (i, j) of the window at output (0, 0) lies in the phases."""
    cdef Py_ssize_t di = i * g.dh, dj = j * g.dw
    return phases + (((di % g.sh) * g.sw + dj % g.sw) * hq + di // g.sh) * wq + dj // g.sw


cdef inline void _copy_row(real* dst, const real* src, Py_ssize_t n) noexcept nogil:
    """dst[:n] = src[:n] for the short rows of a phase block (8-28
    elements): in copies of 8 of constant size, which the compiler inlines
    as vector moves (a memcpy call per row cost a third of the time), the
    last one overlapping the one before it."""
    cdef Py_ssize_t k = 0
    if n < 8:
        for k in range(n):
            dst[k] = src[k]
        return
    while k + 8 < n:
        memcpy(dst + k, src + k, 8 * sizeof(real))
        k += 8
    memcpy(dst + n - 8, src + n - 8, 8 * sizeof(real))


cdef void _fill_phases(const real* x, real* out, const Windows* g, Py_ssize_t c_lo,
                       Py_ssize_t c_hi) noexcept nogil:
    """``_fill`` through each plane's phases (strided windows, see
    PHASE_TAPS), one plane at a time: its phases (a few KiB on the
    images of the convolutions here) stay in L1 while its taps are copied."""
    cdef Py_ssize_t c_count = g.c_count, h = g.h, w = g.w, kh = g.kh, kw = g.kw
    cdef Py_ssize_t oh = g.oh, ow = g.ow, m = g.m, ld = g.ld
    cdef Py_ssize_t hq = oh + (kh - 1) * g.dh // g.sh, wq = ow + (kw - 1) * g.dw // g.sw
    cdef Py_ssize_t c, s, i, j, oy, ox
    cdef real* phases = <real*>malloc(g.sh * g.sw * hq * wq * sizeof(real))
    cdef const real* src
    cdef real* dst
    if phases == NULL:
        _fill(x, out, g, c_lo, c_hi)
        return
    for c in range(c_lo, c_hi):
        for s in range(m):
            _split_phases(x + (s * c_count + c) * h * w, phases, g, hq, wq)
            for i in range(kh):
                for j in range(kw):
                    src = _tap_phase(phases, g, i, j, hq, wq)
                    dst = out + ((c * kh + i) * kw + j) * ld + s * oh * ow
                    for oy in range(oh):
                        _copy_row(dst, src, ow)
                        src += wq
                        dst += ow
    free(phases)


# -- im2col and col2im over the worker pool --------------------------------------
#
# Each channel's rows of columns (im2col) and each channel's planes of x
# (col2im) are written by one chunk, so the channels split over xgrad's
# threads (native_kernels' pool, as the elementwise kernels) with the same
# serial loop per channel: the results do not depend on the thread count.
# A split pays from about this many column elements a thread (waking the
# workers costs microseconds; a column element 0.1-0.6 ns).

DEF COLUMN_GRAIN = 65536
# Each thread's share is cut into this many chunks, which the threads take
# as they come (thread_pool.h): a worker that starts late (its core busy
# with the BLAS's threads, which poll for a while after each GEMM) takes
# fewer and the caller the rest, instead of the caller waiting for it.
# (An 8x8 max_pool over 512 planes of 32x32, two threads: the caller waited
# out a whole scheduler slice at times; 1.6x one thread's time.)
DEF CHUNKS_A_THREAD = 4

cdef enum ColumnKernel:
    FILL, FILL_SAME, FILL_SMALL, FILL_PHASES, ADD_BACK, ADD_SMALL, ADD_PHASES


cdef struct ColumnJob:
    Windows g
    int kernel
    bint f32
    const void* src  # x for the fills, the columns for the adds
    void* dst
    Py_ssize_t per_chunk  # channels a chunk


cdef void _column_range(ColumnJob* job, real* dst, Py_ssize_t lo,
                        Py_ssize_t hi) noexcept nogil:
    """The job's kernel on channels lo..hi (``dst`` its output, typed)."""
    cdef const real* src = <const real*>job.src
    cdef int k = job.kernel
    if k == FILL:
        _fill(src, dst, &job.g, lo, hi)
    elif k == FILL_SAME:
        _fill_same(src, dst, &job.g, lo, hi)
    elif k == FILL_SMALL:
        _fill_small(src, dst, &job.g, lo, hi)
    elif k == FILL_PHASES:
        _fill_phases(src, dst, &job.g, lo, hi)
    elif k == ADD_BACK:
        _add_back(src, dst, &job.g, lo, hi)
    elif k == ADD_PHASES:
        _add_phases(src, dst, &job.g, lo, hi)
    else:
        _add_small(src, dst, &job.g, lo, hi)


cdef void _column_chunk(void* ctx, Py_ssize_t chunk) noexcept nogil:
    cdef ColumnJob* job = <ColumnJob*>ctx
    cdef Py_ssize_t lo = chunk * job.per_chunk
    cdef Py_ssize_t hi = min(lo + job.per_chunk, job.g.c_count)
    if job.f32:
        _column_range(job, <float*>job.dst, lo, hi)
    else:
        _column_range(job, <double*>job.dst, lo, hi)


cdef void _run_columns(ColumnJob* job) noexcept nogil:
    """Run ``job`` over all channels, split over the pool's threads when
    each gets at least COLUMN_GRAIN column elements."""
    cdef Windows* g = &job.g
    cdef Py_ssize_t elements = g.c_count * g.kh * g.kw * g.m * g.oh * g.ow
    cdef Py_ssize_t nt = pool_threads()
    nt = min(nt, g.c_count, elements // COLUMN_GRAIN)
    if nt <= 1:
        job.per_chunk = g.c_count
        _column_chunk(job, 0)
        return
    job.per_chunk = (g.c_count + nt * CHUNKS_A_THREAD - 1) // (nt * CHUNKS_A_THREAD)
    run_chunks(_column_chunk, job, (g.c_count + job.per_chunk - 1) // job.per_chunk)


cdef Py_ssize_t _row_stride(cnp.ndarray cols, Py_ssize_t c, Py_ssize_t kh, Py_ssize_t kw,
                            Py_ssize_t m, Py_ssize_t oh, Py_ssize_t ow):
    """The distance, in elements, between the rows (c, i, j) of ``cols``
    taken as the matrix (C kh kw, m oh ow): ``cols`` is either (C, kh, kw,
    m, oh, ow), C-contiguous, or that matrix with its rows padded (a view
    of a wider buffer, unit stride along a row). -1 when it is neither."""
    cdef Py_ssize_t n = m * oh * ow, size = cnp.PyArray_ITEMSIZE(cols), ld
    cdef Py_ssize_t want[6]
    cdef int i
    if not cnp.PyArray_ISALIGNED(cols) or not cnp.PyArray_ISNOTSWAPPED(cols):
        return -1
    if cnp.PyArray_NDIM(cols) == 6:
        want[:] = [c, kh, kw, m, oh, ow]
        for i in range(6):
            if cnp.PyArray_DIM(cols, i) != want[i]:
                return -1
        return n if cnp.PyArray_IS_C_CONTIGUOUS(cols) else -1
    if (cnp.PyArray_NDIM(cols) != 2 or cnp.PyArray_DIM(cols, 0) != c * kh * kw
            or cnp.PyArray_DIM(cols, 1) != n):
        return -1
    if n > 1 and cnp.PyArray_STRIDE(cols, 1) != size:
        return -1
    ld = cnp.PyArray_STRIDE(cols, 0)
    if c * kh * kw <= 1:
        return n
    if ld % size != 0 or ld // size < n:
        return -1
    return ld // size


def im2col_2d(cnp.ndarray x, cnp.ndarray out, tuple ksize, tuple stride, tuple pad,
              tuple dilate, tuple outsize):
    """Fill ``out`` with the windows of ``x`` (m, C, h, w), C-contiguous, of
    the same float32/float64 dtype: ``out`` is (C, kh, kw, m, oh, ow),
    C-contiguous, or the matrix (C kh kw, m oh ow) with padded rows (see
    _row_stride). Returns False (and writes nothing) when the operands do
    not qualify."""
    cdef int t = cnp.PyArray_TYPE(x)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or cnp.PyArray_TYPE(out) != t:
        return False
    if not (cnp.PyArray_IS_C_CONTIGUOUS(x) and cnp.PyArray_ISNOTSWAPPED(x)
            and cnp.PyArray_ISALIGNED(x) and cnp.PyArray_ISWRITEABLE(out)):
        return False
    if cnp.PyArray_NDIM(x) != 4:
        return False
    cdef Py_ssize_t m = cnp.PyArray_DIM(x, 0), c = cnp.PyArray_DIM(x, 1)
    cdef Py_ssize_t h = cnp.PyArray_DIM(x, 2), w = cnp.PyArray_DIM(x, 3)
    cdef Py_ssize_t kh = ksize[0], kw = ksize[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = pad[0], pw = pad[1], dh = dilate[0], dw = dilate[1]
    cdef Py_ssize_t oh = outsize[0], ow = outsize[1]
    cdef Py_ssize_t ld = _row_stride(out, c, kh, kw, m, oh, ow)
    if ld < 0:
        return False
    cdef ColumnJob job
    job.g = Windows(c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, m, ld)
    job.f32 = t == cnp.NPY_FLOAT
    job.src = cnp.PyArray_DATA(x)
    job.dst = cnp.PyArray_DATA(out)
    if _tabulated(oh, ow, h, w):
        job.kernel = FILL_SMALL
    elif sh == 1 and sw == 1 and dh == 1 and dw == 1 and oh == h and ow == w:
        job.kernel = FILL_SAME
    elif _phased(kh, kw, sh, sw):
        job.kernel = FILL_PHASES
    else:
        job.kernel = FILL
    with nogil:
        _run_columns(&job)
    return True


cdef inline void _add_strided(real* dst, const real* src, Py_ssize_t n,
                              Py_ssize_t stride) noexcept nogil:
    """dst[k * stride] += src[k] for k < n (a row of _add_back)."""
    cdef Py_ssize_t k
    if stride == 1:
        for k in range(n):
            dst[k] += src[k]
    else:
        for k in range(n):
            dst[k * stride] += src[k]


cdef void _add_back(const real* cols, real* x, const Windows* g, Py_ssize_t c_lo,
                    Py_ssize_t c_hi) noexcept nogil:
    """The adjoint of ``_fill``: x (m, C, h, w) += each element of cols
    (C, kh, kw, m, oh, ow) where its window tap reads (padding dropped),
    channels c_lo..c_hi."""
    cdef Py_ssize_t c_count = g.c_count, h = g.h, w = g.w, kh = g.kh, kw = g.kw
    cdef Py_ssize_t sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw, dh = g.dh, dw = g.dw
    cdef Py_ssize_t oh = g.oh, ow = g.ow, m = g.m, ld = g.ld
    cdef Py_ssize_t c, i, j, s, oy, ox, iy, ix, lo, hi
    cdef real* plane
    cdef const real* row
    for c in range(c_lo, c_hi):
        for i in range(kh):
            for j in range(kw):
                lo = _inside_from(j * dw - pw, sw, ow)
                hi = _inside_to(lo, j * dw - pw, sw, ow, w)
                for s in range(m):
                    plane = x + (s * c_count + c) * h * w
                    row = cols + ((c * kh + i) * kw + j) * ld + s * oh * ow
                    for oy in range(oh):
                        iy = oy * sh + i * dh - ph
                        if 0 <= iy < h:
                            _add_strided(plane + iy * w + lo * sw + j * dw - pw,
                                         row + oy * ow + lo, hi - lo, sw)


cdef void _merge_phases(const real* phases, real* plane, const Windows* g, Py_ssize_t hq,
                        Py_ssize_t wq) noexcept nogil:
    """The adjoint of _split_phases: ``plane`` += each element of the
    phases that lies in it (the padding's dropped). A loop of its own: one
    function for both with a flag made im2col's split 1.10-1.38x slower."""
    cdef Py_ssize_t h = g.h, w = g.w, sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw
    cdef Py_ssize_t a, b, r, t, y, lo, hi
    cdef const real* row
    cdef real* dst
    for a in range(sh):
        for b in range(sw):
            lo = _inside_from(b - pw, sw, wq)
            hi = _inside_to(lo, b - pw, sw, wq, w)
            for r in range(hq):
                y = r * sh + a - ph
                if y < 0 or y >= h:
                    continue
                row = phases + ((a * sw + b) * hq + r) * wq
                dst = plane + y * w + lo * sw + b - pw
                for t in range(lo, hi):
                    dst[(t - lo) * sw] += row[t]


# _add_phases keeps the phases of this many bytes of planes at once (a
# channel's samples in blocks): each tap's row of the columns is then read
# in one run across the samples, as _add_back reads it.
DEF PHASES_BLOCK_BYTES = 131072


cdef void _add_phases(const real* cols, real* x, const Windows* g, Py_ssize_t c_lo,
                      Py_ssize_t c_hi) noexcept nogil:
    """``_add_back`` through the planes' phases (the adjoint of
    ``_fill_phases``): a tap's rows add into its phase as contiguous runs
    (vector adds) instead of into every stride-th element of x, and the
    phases go back into the plane once, not once a tap (5x5 stride 2 on
    16x16-56x56: 0.54-0.81x _add_back's time; 3x3: 0.82-0.93x). The phases of a block of a
    channel's samples at a time (PHASES_BLOCK_BYTES, in L2)."""
    cdef Py_ssize_t c_count = g.c_count, h = g.h, w = g.w, kh = g.kh, kw = g.kw
    cdef Py_ssize_t oh = g.oh, ow = g.ow, m = g.m, ld = g.ld
    cdef Py_ssize_t hq = oh + (kh - 1) * g.dh // g.sh, wq = ow + (kw - 1) * g.dw // g.sw
    cdef Py_ssize_t per_plane = g.sh * g.sw * hq * wq
    cdef Py_ssize_t block = max(1, min(m, PHASES_BLOCK_BYTES // (per_plane * sizeof(real))))
    cdef Py_ssize_t c, s0, s1, s, i, j, oy, k
    cdef real* phases = <real*>malloc(block * per_plane * sizeof(real))
    cdef const real* src
    cdef real* dst
    if phases == NULL:
        _add_back(cols, x, g, c_lo, c_hi)
        return
    for c in range(c_lo, c_hi):
        s0 = 0
        while s0 < m:
            s1 = min(m, s0 + block)
            memset(phases, 0, (s1 - s0) * per_plane * sizeof(real))
            for i in range(kh):
                for j in range(kw):
                    src = cols + ((c * kh + i) * kw + j) * ld + s0 * oh * ow
                    for s in range(s1 - s0):
                        dst = <real*>_tap_phase(phases + s * per_plane, g, i, j, hq, wq)
                        for oy in range(oh):
                            for k in range(ow):
                                dst[k] += src[k]
                            src += ow
                            dst += wq
            for s in range(s0, s1):
                _merge_phases(phases + (s - s0) * per_plane, x + (s * c_count + c) * h * w, g,
                              hq, wq)
            s0 = s1
    free(phases)


cdef void _add_small(const real* cols, real* x, const Windows* g, Py_ssize_t c_lo,
                     Py_ssize_t c_hi) noexcept nogil:
    """``_add_back`` by ``_fill_small``'s tables (4x4, 64 channels, batch
    8: 3x3 59 -> 36 us, 5x5 153 -> 100 us). Within one tap no two output
    positions read the same input element, so a block is one scatter-add
    loop without conflicts."""
    cdef Py_ssize_t c_count = g.c_count, h = g.h, w = g.w, kh = g.kh, kw = g.kw
    cdef Py_ssize_t sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw, dh = g.dh, dw = g.dw
    cdef Py_ssize_t oh = g.oh, ow = g.ow, m = g.m, ld = g.ld
    cdef Py_ssize_t c, i, j, s, l, n = oh * ow, hw = h * w, inside
    cdef int at[SMALL_PLANE]
    cdef int src[SMALL_PLANE]
    cdef real* plane
    cdef const real* block
    for i in range(kh):
        for j in range(kw):
            inside = _tap_list(at, src, g, i, j)
            for c in range(c_lo, c_hi):
                block = cols + ((c * kh + i) * kw + j) * ld
                plane = x + c * hw
                for s in range(m):
                    for l in range(inside):
                        plane[src[l]] += block[at[l]]
                    block += n
                    plane += c_count * hw


def col2im_2d(cnp.ndarray cols, cnp.ndarray x, tuple ksize, tuple stride, tuple pad,
              tuple dilate, tuple outsize=None):
    """Add ``cols`` into ``x`` (m, C, h, w), C-contiguous and of the same
    float32/float64 dtype, each element where im2col_2d took it from (the
    adjoint of im2col_2d): ``cols`` is (C, kh, kw, m, oh, ow),
    C-contiguous, or, with ``outsize`` (oh, ow), the matrix (C kh kw, m oh
    ow) with padded rows. Returns False (and writes nothing) when the
    operands do not qualify."""
    cdef int t = cnp.PyArray_TYPE(x)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or cnp.PyArray_TYPE(cols) != t:
        return False
    if not (cnp.PyArray_IS_C_CONTIGUOUS(x) and cnp.PyArray_ISALIGNED(x)
            and cnp.PyArray_ISWRITEABLE(x) and cnp.PyArray_NDIM(x) == 4):
        return False
    cdef Py_ssize_t m = cnp.PyArray_DIM(x, 0), c = cnp.PyArray_DIM(x, 1)
    cdef Py_ssize_t h = cnp.PyArray_DIM(x, 2), w = cnp.PyArray_DIM(x, 3)
    cdef Py_ssize_t kh = ksize[0], kw = ksize[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = pad[0], pw = pad[1], dh = dilate[0], dw = dilate[1]
    cdef Py_ssize_t oh, ow
    if outsize is not None:
        oh, ow = outsize
    elif cnp.PyArray_NDIM(cols) == 6:
        oh, ow = cnp.PyArray_DIM(cols, 4), cnp.PyArray_DIM(cols, 5)
    else:
        return False
    cdef Py_ssize_t ld = _row_stride(cols, c, kh, kw, m, oh, ow)
    if ld < 0:
        return False
    cdef ColumnJob job
    job.g = Windows(c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, m, ld)
    job.f32 = t == cnp.NPY_FLOAT
    job.src = cnp.PyArray_DATA(cols)
    job.dst = cnp.PyArray_DATA(x)
    if _tabulated(oh, ow, h, w):
        job.kernel = ADD_SMALL
    elif _phased(kh, kw, sh, sw):
        job.kernel = ADD_PHASES
    else:
        job.kernel = ADD_BACK
    with nogil:
        _run_columns(&job)
    return True


# -- max pooling -------------------------------------------------------------
#
# Taps are numbered in window order (i * kw + j); a tap in the padding reads
# -inf. As in pooling.py: strictly greater wins (ties keep the first tap) and
# NaN propagates to the maximum.

ctypedef fused tap_t:
    cnp.uint8_t
    cnp.uint16_t


# _max_pool_planes: planes per block, and the largest input plane it takes
# (a block's transposed copy then stays within 256 KiB of float32; larger
# planes take the loop per output row).
DEF PLANES_BLOCK = 64
DEF PLANES_MAX_AREA = 1024


cdef void _max_pool(const real* x, real* y, tap_t* taps, Py_ssize_t planes,
                    Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh, Py_ssize_t kw,
                    Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                    Py_ssize_t oh, Py_ssize_t ow) noexcept nogil:
    """Window maxima and their tap numbers: the first tap starts, greater
    wins, NaN sticks. Per output row, tap by tap over the row: the windows
    of a row are independent, so the inner loop carries no chain from one
    element to the next, and it reads and writes every element once
    unconditionally, so that the compiler makes the data-dependent choices
    selects, not branches (select_loops.h; random data mispredicted half
    of them: with a branch per tap it took 3.7 ns a tap). Columns whose tap
    falls in the padding read -inf, which never wins after the first tap,
    so later taps skip them."""
    cdef Py_ssize_t p, oy, ox, i, j, iy, t, lo, hi, start
    cdef real neg_inf = -1.0 / 0.0
    cdef const real* row
    cdef real* yrow
    cdef tap_t* trow
    cdef tap_t tt
    if kh == 2 and kw == 2 and sh == 2 and sw == 2 and ph == 0 and pw == 0 and (
            2 * oh <= h and 2 * ow <= w):
        _max_pool_2x2(x, y, taps, planes, h, w, oh, ow)
        return
    if h * w <= PLANES_MAX_AREA and planes > 1:
        if _max_pool_planes(x, y, taps, planes, h, w, kh, kw, sh, sw, ph, pw, oh, ow):
            return
    for p in range(planes):
        for oy in range(oh):
            yrow = y + (p * oh + oy) * ow
            trow = taps + (p * oh + oy) * ow
            t = 0
            for i in range(kh):
                iy = oy * sh + i - ph
                row = x + (p * h + iy) * w
                for j in range(kw):
                    # the columns ox in [lo, hi) read x; the others the padding
                    lo = _inside_from(j - pw, sw, ow)
                    hi = _inside_to(lo, j - pw, sw, ow, w)
                    if iy < 0 or iy >= h:
                        lo = hi = ow
                    start = j - pw
                    tt = <tap_t>t
                    if t == 0:
                        for ox in range(ow):
                            yrow[ox] = neg_inf
                            trow[ox] = 0
                        for ox in range(lo, hi):
                            yrow[ox] = row[ox * sw + start]
                    elif lo < hi:
                        _max_tap(row + lo * sw + start, sw, yrow + lo, trow + lo, tt, hi - lo)
                    t += 1


cdef inline void _max_tap(const real* x, Py_ssize_t stride, real* y, tap_t* taps, tap_t t,
                          Py_ssize_t n) noexcept nogil:
    """select_loops.h's xgrad_max_tap for these types."""
    if real is float:
        if tap_t is cnp.uint8_t:
            xgrad_max_tap_f32_u8(x, stride, y, taps, t, n)
        else:
            xgrad_max_tap_f32_u16(x, stride, y, taps, t, n)
    else:
        if tap_t is cnp.uint8_t:
            xgrad_max_tap_f64_u8(x, stride, y, taps, t, n)
        else:
            xgrad_max_tap_f64_u16(x, stride, y, taps, t, n)


cdef bint _max_pool_planes(const real* x, real* y, tap_t* taps, Py_ssize_t planes,
                           Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh, Py_ssize_t kw,
                           Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                           Py_ssize_t oh, Py_ssize_t ow) noexcept nogil:
    """``_max_pool`` for planes of at most PLANES_MAX_AREA elements: there
    the loop per output row runs its select loops over a few windows
    (2-16 on 4x4-32x32 images) and their set-up costs more than the
    comparisons. Here PLANES_BLOCK planes at a time are turned
    position-major (a transposing copy), so that each tap of each output
    position is one select loop across the planes; then the maxima and taps
    are turned back. The same taps in the same order as the loop per row,
    so the same results. One thread, forward + backward: 3x3 stride 2 on
    4x4, (64, 256): 1.94 -> 0.44 ms; on 16x16, (8, 64): 473 -> 263 us; on
    32x32, (8, 64): 1.19 -> 1.01 ms; 5x5 stride 1 on 32x32, (8, 16): 2.76 ->
    1.29 ms. False (nothing written) when the buffers cannot be allocated."""
    cdef Py_ssize_t hw = h * w, n = oh * ow, p0, nb, b, k, l, oy, ox, i, j, iy, ix, t
    cdef real neg_inf = -1.0 / 0.0
    cdef real* xt = <real*>malloc(hw * PLANES_BLOCK * sizeof(real))
    cdef real* yt = <real*>malloc(n * PLANES_BLOCK * sizeof(real))
    cdef tap_t* tt = <tap_t*>malloc(n * PLANES_BLOCK * sizeof(tap_t))
    cdef const real* src
    cdef real* yl
    cdef tap_t* tl
    if xt == NULL or yt == NULL or tt == NULL:
        free(xt)
        free(yt)
        free(tt)
        return False
    for p0 in range(0, planes, PLANES_BLOCK):
        nb = min(PLANES_BLOCK, planes - p0)
        for b in range(nb):  # xt[k, b] = plane p0 + b at position k
            src = x + (p0 + b) * hw
            for k in range(hw):
                xt[k * PLANES_BLOCK + b] = src[k]
        for l in range(n):
            oy = l // ow
            ox = l - oy * ow
            yl = yt + l * PLANES_BLOCK
            tl = tt + l * PLANES_BLOCK
            for b in range(nb):
                yl[b] = neg_inf
                tl[b] = 0
            t = 0
            for i in range(kh):
                iy = oy * sh + i - ph
                for j in range(kw):
                    ix = ox * sw + j - pw
                    if 0 <= iy < h and 0 <= ix < w:
                        src = xt + (iy * w + ix) * PLANES_BLOCK
                        if t == 0:
                            for b in range(nb):
                                yl[b] = src[b]
                        else:
                            _max_tap(src, 1, yl, tl, <tap_t>t, nb)
                    t += 1
        for b in range(nb):
            for l in range(n):
                y[(p0 + b) * n + l] = yt[l * PLANES_BLOCK + b]
                taps[(p0 + b) * n + l] = tt[l * PLANES_BLOCK + b]
    free(xt)
    free(yt)
    free(tt)
    return True


cdef void _max_pool_2x2(const real* x, real* y, tap_t* taps, Py_ssize_t planes,
                        Py_ssize_t h, Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow) noexcept nogil:
    """``_max_pool`` for 2x2 windows, stride 2, no padding (every window is
    inside x): the same rule, four taps unrolled."""
    cdef Py_ssize_t p, oy, ox, o
    cdef const real* r0
    cdef const real* r1
    cdef real best, v
    cdef int best_t
    cdef bint gt
    for p in range(planes):
        for oy in range(oh):
            r0 = x + (p * h + 2 * oy) * w
            r1 = r0 + w
            o = (p * oh + oy) * ow
            for ox in range(ow):
                best = r0[2 * ox]
                best_t = 0
                v = r0[2 * ox + 1]
                gt = v > best
                best_t = 1 if gt else best_t
                best = v if (gt or v != v) else best
                v = r1[2 * ox]
                gt = v > best
                best_t = 2 if gt else best_t
                best = v if (gt or v != v) else best
                v = r1[2 * ox + 1]
                gt = v > best
                best_t = 3 if gt else best_t
                best = v if (gt or v != v) else best
                y[o + ox] = best
                taps[o + ox] = <tap_t>best_t


cdef void _max_pool_scatter(const real* gy, const tap_t* taps, real* gx, Py_ssize_t planes,
                            Py_ssize_t h, Py_ssize_t w, const Py_ssize_t* rows,
                            const Py_ssize_t* cols, Py_ssize_t sh, Py_ssize_t sw,
                            Py_ssize_t oh, Py_ssize_t ow, bint gather) noexcept nogil:
    """gather False: gx (zeroed) += gy at each maximum; True: gy[o] = gx at
    o's maximum (0 in the padding). rows[t], cols[t]: tap t's offsets from
    a window's corner, less the padding (a table: a division per output
    took as long as the rest)."""
    cdef Py_ssize_t p, oy, ox, o, iy, ix, t, n = oh * ow, hw = h * w
    cdef real* plane
    cdef real* g
    cdef const tap_t* tp
    for p in range(planes):
        plane = gx + p * hw
        g = <real*>gy + p * n
        tp = taps + p * n
        for oy in range(oh):
            for ox in range(ow):
                o = oy * ow + ox
                t = tp[o]
                iy = oy * sh + rows[t]
                ix = ox * sw + cols[t]
                if gather:
                    g[o] = plane[iy * w + ix] if 0 <= iy < h and 0 <= ix < w else 0
                elif 0 <= iy < h and 0 <= ix < w:
                    plane[iy * w + ix] += g[o]


# -- Pooling over the worker pool ------------------------------------------------
#
# Every pooling kernel works plane by plane (a sample's channel), so the
# planes split over xgrad's threads with the same serial loop per plane (the
# results do not depend on the thread count), from about this many input
# elements a thread: a pooling element costs a few window taps, so smaller
# splits than im2col's pay (2x2 average_pool of (64, 32, 4, 4), two threads:
# 40 -> 26 us).

DEF POOL_GRAIN = 16384

cdef enum PoolKernel:
    MAX_POOL, MAX_POOL_SCATTER, AVERAGE_POOL, AVERAGE_POOL_GRAD


cdef struct PoolJob:
    int kernel
    bint f32, u8, gather
    bint failed  # a chunk could not allocate its scratch (average_pool's gradient)
    void* x  # the input side (N, C, h, w): x, or gx for the gradients
    void* y  # the output side (N, C, oh, ow): y, or gy
    void* taps
    const Py_ssize_t* offsets  # max_pool's scatter: the taps' rows, then columns
    const double* counts
    double count
    Py_ssize_t planes, h, w, kh, kw, sh, sw, ph, pw, oh, ow, per_chunk


cdef PoolJob _pool_job(int kernel, cnp.ndarray x, cnp.ndarray y, Py_ssize_t planes,
                       Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh, Py_ssize_t kw,
                       Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                       Py_ssize_t oh, Py_ssize_t ow):
    cdef PoolJob job
    memset(&job, 0, sizeof(job))
    job.kernel = kernel
    job.f32 = cnp.PyArray_TYPE(x) == cnp.NPY_FLOAT
    job.x, job.y = cnp.PyArray_DATA(x), cnp.PyArray_DATA(y)
    job.planes, job.h, job.w, job.kh, job.kw = planes, h, w, kh, kw
    job.sh, job.sw, job.ph, job.pw, job.oh, job.ow = sh, sw, ph, pw, oh, ow
    return job


cdef void _pool_planes(PoolJob* j, real* x, real* y, Py_ssize_t p0,
                       Py_ssize_t count) noexcept nogil:
    """The job's kernel on planes p0 .. p0 + count (x and y its arrays' starts)."""
    cdef Py_ssize_t hw = j.h * j.w, out = j.oh * j.ow
    x += p0 * hw
    y += p0 * out
    if j.kernel == MAX_POOL:
        if j.u8:
            _max_pool(<const real*>x, y, <cnp.uint8_t*>j.taps + p0 * out, count, j.h, j.w,
                      j.kh, j.kw, j.sh, j.sw, j.ph, j.pw, j.oh, j.ow)
        else:
            _max_pool(<const real*>x, y, <cnp.uint16_t*>j.taps + p0 * out, count, j.h, j.w,
                      j.kh, j.kw, j.sh, j.sw, j.ph, j.pw, j.oh, j.ow)
    elif j.kernel == MAX_POOL_SCATTER:
        if j.u8:
            _max_pool_scatter(<const real*>y, <const cnp.uint8_t*>j.taps + p0 * out, x, count,
                              j.h, j.w, j.offsets, j.offsets + j.kh * j.kw, j.sh, j.sw, j.oh,
                              j.ow, j.gather)
        else:
            _max_pool_scatter(<const real*>y, <const cnp.uint16_t*>j.taps + p0 * out, x, count,
                              j.h, j.w, j.offsets, j.offsets + j.kh * j.kw, j.sh, j.sw, j.oh,
                              j.ow, j.gather)
    elif j.kernel == AVERAGE_POOL:
        _average_pool(<const real*>x, y, j.counts, j.count, count, j.h, j.w, j.kh, j.kw,
                      j.sh, j.sw, j.ph, j.pw, j.oh, j.ow)
    else:
        if not _average_pool_grad(<const real*>y, x, j.counts, j.count, count, j.h, j.w,
                                  j.kh, j.kw, j.sh, j.sw, j.ph, j.pw, j.oh, j.ow):
            j.failed = True


cdef void _pool_chunk(void* ctx, Py_ssize_t chunk) noexcept nogil:
    cdef PoolJob* j = <PoolJob*>ctx
    cdef Py_ssize_t p0 = chunk * j.per_chunk
    cdef Py_ssize_t count = min(j.per_chunk, j.planes - p0)
    if j.f32:
        _pool_planes(j, <float*>j.x, <float*>j.y, p0, count)
    else:
        _pool_planes(j, <double*>j.x, <double*>j.y, p0, count)


cdef void _run_pool(PoolJob* job) noexcept nogil:
    """Run ``job`` over its planes, split over the pool's threads when each
    gets at least POOL_GRAIN input elements."""
    cdef Py_ssize_t nt = pool_threads()
    nt = min(nt, job.planes, job.planes * job.h * job.w // POOL_GRAIN)
    if nt <= 1:
        job.per_chunk = job.planes
        _pool_chunk(job, 0)
        return
    job.per_chunk = (job.planes + nt * CHUNKS_A_THREAD - 1) // (nt * CHUNKS_A_THREAD)
    run_chunks(_pool_chunk, job, (job.planes + job.per_chunk - 1) // job.per_chunk)


cdef bint _pool_operands(cnp.ndarray a, cnp.ndarray b, cnp.ndarray taps):
    cdef int t = cnp.PyArray_TYPE(a)
    return ((t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE) and cnp.PyArray_TYPE(b) == t
            and cnp.PyArray_NDIM(a) == 4 and cnp.PyArray_NDIM(b) == 4
            and cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_IS_C_CONTIGUOUS(b)
            and cnp.PyArray_IS_C_CONTIGUOUS(taps) and cnp.PyArray_ISNOTSWAPPED(a)
            and cnp.PyArray_ISALIGNED(a) and cnp.PyArray_ISALIGNED(b)
            and (cnp.PyArray_TYPE(taps) == cnp.NPY_UINT8
                 or cnp.PyArray_TYPE(taps) == cnp.NPY_UINT16)
            and cnp.PyArray_SIZE(taps) == cnp.PyArray_SIZE(b)
            and cnp.PyArray_DIM(a, 0) == cnp.PyArray_DIM(b, 0)
            and cnp.PyArray_DIM(a, 1) == cnp.PyArray_DIM(b, 1))


def max_pool_2d(cnp.ndarray x, cnp.ndarray y, cnp.ndarray taps, tuple ksize, tuple stride,
                tuple pad):
    """Fill y (N, C, oh, ow) with the window maxima of x (N, C, h, w) and taps
    (uint8 or uint16, y's shape) with their tap numbers. False (nothing
    written) when the operands do not qualify."""
    if not _pool_operands(x, y, taps):
        return False
    cdef Py_ssize_t planes = cnp.PyArray_DIM(x, 0) * cnp.PyArray_DIM(x, 1)
    cdef Py_ssize_t h = cnp.PyArray_DIM(x, 2), w = cnp.PyArray_DIM(x, 3)
    cdef Py_ssize_t oh = cnp.PyArray_DIM(y, 2), ow = cnp.PyArray_DIM(y, 3)
    cdef Py_ssize_t kh = ksize[0], kw = ksize[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = pad[0], pw = pad[1]
    if kh * kw > (256 if cnp.PyArray_TYPE(taps) == cnp.NPY_UINT8 else 65536):
        return False
    cdef void* pt = cnp.PyArray_DATA(taps)
    cdef bint u8 = cnp.PyArray_TYPE(taps) == cnp.NPY_UINT8
    cdef PoolJob job = _pool_job(MAX_POOL, x, y, planes, h, w, kh, kw, sh, sw, ph, pw, oh,
                                 ow)
    job.taps, job.u8 = pt, u8
    with nogil:
        _run_pool(&job)
    return True


def max_pool_2d_scatter(cnp.ndarray gy, cnp.ndarray taps, cnp.ndarray gx, tuple ksize,
                        tuple stride, tuple pad, bint gather):
    """gather False: add gy (N, C, oh, ow) into the zeroed gx (N, C, h, w) at
    the maxima ``taps`` recorded; True: fill gy with gx at the maxima. False
    when the operands do not qualify."""
    if not _pool_operands(gx, gy, taps):
        return False
    cdef Py_ssize_t planes = cnp.PyArray_DIM(gx, 0) * cnp.PyArray_DIM(gx, 1)
    cdef Py_ssize_t h = cnp.PyArray_DIM(gx, 2), w = cnp.PyArray_DIM(gx, 3)
    cdef Py_ssize_t oh = cnp.PyArray_DIM(gy, 2), ow = cnp.PyArray_DIM(gy, 3)
    cdef Py_ssize_t kh = ksize[0], kw = ksize[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = pad[0], pw = pad[1]
    if kh * kw > (256 if cnp.PyArray_TYPE(taps) == cnp.NPY_UINT8 else 65536):
        return False
    cdef void* pt = cnp.PyArray_DATA(taps)
    cdef bint u8 = cnp.PyArray_TYPE(taps) == cnp.NPY_UINT8
    cdef PoolJob job = _pool_job(MAX_POOL_SCATTER, gx, gy, planes, h, w, kh, kw, sh, sw, ph,
                                 pw, oh, ow)
    job.taps, job.u8, job.gather = pt, u8, gather
    cdef cnp.ndarray offsets = numpy.empty(2 * kh * kw, numpy.intp)
    cdef Py_ssize_t* table = <Py_ssize_t*>cnp.PyArray_DATA(offsets)
    cdef Py_ssize_t t
    for t in range(kh * kw):
        table[t] = t // kw - ph
        table[kh * kw + t] = t % kw - pw
    job.offsets = table
    with nogil:
        _run_pool(&job)
    return True


# -- average pooling ---------------------------------------------------------
#
# The same sums, in the same order, as pooling.py's NumPy pass per tap: each
# output adds its window's taps in window order from +0 (a tap in the padding
# adds 0), then is divided by its count; the gradient adds gy / count into gx
# tap by tap. So the results are NumPy's, bit for bit.

# average pooling's planes-first loops keep their scratch under this many
# bytes, fewer planes a block on larger planes: glibc serves blocks from
# 128 KiB up by mmap, which costs a mapping, page faults and an unmapping
# at every call.
DEF SCRATCH_BYTES = 65536


cdef inline Py_ssize_t _block_planes(Py_ssize_t elements, Py_ssize_t itemsize) noexcept nogil:
    """Planes a block when each takes ``elements`` of scratch (1 to PLANES_BLOCK)."""
    return max(1, min(PLANES_BLOCK, SCRATCH_BYTES // (elements * itemsize)))


cdef bint _average_pool_planes(const real* x, real* y, const double* counts, double count,
                               Py_ssize_t planes, Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh,
                               Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                               Py_ssize_t pw, Py_ssize_t oh, Py_ssize_t ow) noexcept nogil:
    """``_average_pool`` across a block of planes at a time, as
    _max_pool_planes: on small planes the loop per output is a chain of a
    few dependent adds per window, here each tap is one add across the
    planes. The same sums in the same order: the padding's taps, which add
    zero there, are skipped here (a sum that starts at +0 never becomes -0,
    so adding +0 changes nothing). One thread: 3x3 stride 2 on 4x4, (64,
    256), forward + backward 1.18 -> 0.52 ms; 3x3 stride 1 on 32x32, (8,
    64), forward 3.70 -> 2.95 ms. False (nothing written) when its scratch
    cannot be allocated."""
    cdef Py_ssize_t hw = h * w, n = oh * ow, bs = _block_planes(hw, sizeof(real))
    cdef Py_ssize_t p0, nb, b, k, l, oy, ox, i, j, iy, ix
    cdef real* xt = <real*>malloc(hw * bs * sizeof(real))
    cdef real acc[PLANES_BLOCK]
    cdef const real* src
    cdef double d
    if xt == NULL:
        return False
    p0 = 0
    while p0 < planes:
        nb = min(bs, planes - p0)
        for b in range(nb):  # xt[k, b] = plane p0 + b at position k
            src = x + (p0 + b) * hw
            for k in range(hw):
                xt[k * bs + b] = src[k]
        for l in range(n):
            oy = l // ow
            ox = l - oy * ow
            for b in range(nb):
                acc[b] = 0
            for i in range(kh):
                iy = oy * sh + i - ph
                if not 0 <= iy < h:
                    continue
                for j in range(kw):
                    ix = ox * sw + j - pw
                    if 0 <= ix < w:
                        src = xt + (iy * w + ix) * bs
                        for b in range(nb):
                            acc[b] = acc[b] + src[b]
            d = counts[l] if counts != NULL else count
            for b in range(nb):
                y[(p0 + b) * n + l] = <real>(<double>acc[b] / d)
        p0 += nb
    free(xt)
    return True


cdef inline void _quotients(const real* gy, real* q, Py_ssize_t stride, const double* counts,
                            double count, Py_ssize_t n) noexcept nogil:
    """q[l * stride] = gy[l] / count of output l, in gy's dtype (the count
    cast first), as pooling.py's xp.divide(gy, count, dtype=...)."""
    cdef Py_ssize_t l
    for l in range(n):
        q[l * stride] = gy[l] / <real>(counts[l] if counts != NULL else count)


cdef void _spread(const real* q, real* gx, Py_ssize_t stride, Py_ssize_t nb,
                         Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh, Py_ssize_t kw,
                         Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw,
                         Py_ssize_t oh, Py_ssize_t ow) noexcept nogil:
    """gx += q over each window, tap by tap (col2im's order): q's value at
    output position l and column b is q[l * stride + b], gx's at input
    position k gx[k * stride + b], for b < nb (one plane: stride 1, nb 1;
    a block of planes position-major: stride the block's width). Not
    inline: inlined into both callers, the block's loop ran 10-25% slower."""
    cdef Py_ssize_t i, j, oy, ox, iy, ix, b
    cdef const real* src
    cdef real* dst
    for i in range(kh):
        for j in range(kw):
            for oy in range(oh):
                iy = oy * sh + i - ph
                if not 0 <= iy < h:
                    continue
                for ox in range(ow):
                    ix = ox * sw + j - pw
                    if 0 <= ix < w:
                        dst = gx + (iy * w + ix) * stride
                        src = q + (oy * ow + ox) * stride
                        for b in range(nb):
                            dst[b] += src[b]


cdef bint _average_pool_grad_planes(const real* gy, real* gx, const double* counts,
                                    double count, Py_ssize_t planes, Py_ssize_t h,
                                    Py_ssize_t w, Py_ssize_t kh, Py_ssize_t kw,
                                    Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                                    Py_ssize_t pw, Py_ssize_t oh,
                                    Py_ssize_t ow) noexcept nogil:
    """``_average_pool_grad`` across a block of planes at a time, for
    overlapping windows: gx's and gy / count's planes turned position-major, each
    tap's adds one loop across the planes, in the same order (tap by tap,
    from gx's value), then gx turned back: the same result, bit for bit.
    One thread: 3x3 stride 1 on 32x32, (8, 64): 3.73 -> 1.48 ms. Windows
    that do not overlap (2x2 stride 2) add each element once, and there the
    three transposing copies cost more than they save (16x16: 0.86 -> 1.49
    ms), so they keep the loop per plane. False (nothing written) when the
    scratch cannot be allocated."""
    cdef Py_ssize_t hw = h * w, n = oh * ow, bs = _block_planes(hw + n, sizeof(real))
    cdef Py_ssize_t p0, nb, b, k, l
    cdef real* gxt = <real*>malloc((hw + n) * bs * sizeof(real))
    cdef real* qt = gxt + hw * bs
    if gxt == NULL:
        return False
    p0 = 0
    while p0 < planes:
        nb = min(bs, planes - p0)
        for b in range(nb):
            for k in range(hw):
                gxt[k * bs + b] = gx[(p0 + b) * hw + k]
            _quotients(gy + (p0 + b) * n, qt + b, bs, counts, count, n)
        _spread(qt, gxt, bs, nb, h, w, kh, kw, sh, sw, ph, pw, oh, ow)
        for b in range(nb):
            for k in range(hw):
                gx[(p0 + b) * hw + k] = gxt[k * bs + b]
        p0 += nb
    free(gxt)
    return True


cdef void _average_pool(const real* x, real* y, const double* counts, double count,
                        Py_ssize_t planes, Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh,
                        Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                        Py_ssize_t pw, Py_ssize_t oh, Py_ssize_t ow) noexcept nogil:
    """counts (oh * ow, per-output element counts) or, when NULL, one count
    for every window."""
    cdef Py_ssize_t p, oy, ox, i, j, iy, ix
    cdef real s
    cdef const real* plane
    if h * w <= PLANES_MAX_AREA and planes > 1 and _average_pool_planes(
            x, y, counts, count, planes, h, w, kh, kw, sh, sw, ph, pw, oh, ow):
        return
    for p in range(planes):
        plane = x + p * h * w
        for oy in range(oh):
            for ox in range(ow):
                s = 0
                for i in range(kh):
                    iy = oy * sh + i - ph
                    for j in range(kw):
                        ix = ox * sw + j - pw
                        s = s + (plane[iy * w + ix] if 0 <= iy < h and 0 <= ix < w else 0)
                # NumPy divides by the float64 counts (the float32 quotient
                # rounded from the double one: the same as dividing in float32)
                y[(p * oh + oy) * ow + ox] = <real>(
                    <double>s / (counts[oy * ow + ox] if counts != NULL else count))


cdef bint _average_pool_grad(const real* gy, real* gx, const double* counts, double count,
                             Py_ssize_t planes, Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh,
                             Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                             Py_ssize_t pw, Py_ssize_t oh, Py_ssize_t ow) noexcept nogil:
    """gx (zeroed) += gy / count over each window, tap by tap (col2im's
    order). Each plane's quotients are computed once, not at every tap that
    spreads them (with per-output counts the division per tap took 1.7x the
    time of 2x2 stride 2 on 16x16). False when their buffer cannot be
    allocated (nothing written)."""
    cdef Py_ssize_t p, n = oh * ow
    cdef real* q
    if (h * w <= PLANES_MAX_AREA and planes > 1 and (kh > sh or kw > sw)
            and _average_pool_grad_planes(gy, gx, counts, count, planes, h, w, kh, kw, sh, sw,
                                          ph, pw, oh, ow)):
        return True
    q = <real*>malloc(n * sizeof(real))
    if q == NULL:
        return False
    for p in range(planes):
        _quotients(gy + p * n, q, 1, counts, count, n)
        _spread(q, gx + p * h * w, 1, 1, h, w, kh, kw, sh, sw, ph, pw, oh, ow)
    free(q)
    return True


cdef bint _average_operands(cnp.ndarray a, cnp.ndarray b, object counts):
    cdef int t = cnp.PyArray_TYPE(a)
    return ((t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE) and cnp.PyArray_TYPE(b) == t
            and cnp.PyArray_NDIM(a) == 4 and cnp.PyArray_NDIM(b) == 4
            and cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_IS_C_CONTIGUOUS(b)
            and cnp.PyArray_ISNOTSWAPPED(a) and cnp.PyArray_ISNOTSWAPPED(b)
            and cnp.PyArray_ISALIGNED(a) and cnp.PyArray_ISALIGNED(b)
            and cnp.PyArray_DIM(a, 0) == cnp.PyArray_DIM(b, 0)
            and cnp.PyArray_DIM(a, 1) == cnp.PyArray_DIM(b, 1)
            and (counts is None or (
                type(counts) is cnp.ndarray
                and cnp.PyArray_TYPE(<cnp.ndarray>counts) == cnp.NPY_DOUBLE
                and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>counts)
                and cnp.PyArray_SIZE(<cnp.ndarray>counts)
                == cnp.PyArray_DIM(b, 2) * cnp.PyArray_DIM(b, 3))))


def average_pool_2d(cnp.ndarray x, cnp.ndarray y, object counts, double count, tuple ksize,
                    tuple stride, tuple pad, bint grad):
    """grad False: fill y (N, C, oh, ow) with the window sums of x (N, C, h,
    w) over their counts; True: add y / count over each window into the
    zeroed x. ``counts``: float64 per-output counts (oh * ow elements), or
    None for ``count`` everywhere. False (nothing written) when the operands
    do not qualify."""
    if not _average_operands(x, y, counts):
        return False
    cdef Py_ssize_t planes = cnp.PyArray_DIM(x, 0) * cnp.PyArray_DIM(x, 1)
    cdef Py_ssize_t h = cnp.PyArray_DIM(x, 2), w = cnp.PyArray_DIM(x, 3)
    cdef Py_ssize_t oh = cnp.PyArray_DIM(y, 2), ow = cnp.PyArray_DIM(y, 3)
    cdef Py_ssize_t kh = ksize[0], kw = ksize[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = pad[0], pw = pad[1]
    cdef const double* pc = NULL if counts is None else <const double*>cnp.PyArray_DATA(
        <cnp.ndarray>counts)
    cdef PoolJob job = _pool_job(AVERAGE_POOL_GRAD if grad else AVERAGE_POOL, x, y, planes, h,
                                 w, kh, kw, sh, sw, ph, pw, oh, ow)
    job.counts, job.count = pc, count
    with nogil:
        _run_pool(&job)
    if job.failed:
        raise MemoryError('average_pool_2d: no memory for the quotients of the gradient '
                          '({} outputs a plane)'.format(oh * ow))
    return True
