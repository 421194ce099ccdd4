# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Columns of a 2-D convolution by tap groups, and their adjoint.

im2col (window_kernels) writes every window tap, those in the padding as
zeros, and the GEMM then multiplies the zeros: on small images most of
the work (5x5 on 4x4 images with pad 2: half the products). Here the
output positions are cut into groups whose windows read the same
rectangle of taps (xgrad/_ops/_tap_groups.py plans them), and only the
taps of each group's rectangle get columns, so the GEMMs over the groups
skip what lies outside.

Layouts, chosen so that every copy is a contiguous run of channels: x is
(m, h, w, C) (channels last), the columns the matrix (oh ow m, kh kw C)
with one row a window: row (q, s) for sample s at the q-th output
position of ``order`` (a permutation of the positions oy * ow + ox;
row-major when None, so that positions with the same taps can sit side
by side), column (i, j, c). One kernel row of a window, taps j0..j1, is
then one run of (j1 - j0) C elements, both in x and in its row. A group
is a row of ``groups`` (q0, q1, i0, i1, j0, j1): the positions order[q0]
.. order[q1 - 1], taps i0 <= i < i1, j0 <= j < j1, its rows q0 m .. q1 m.

Both kernels split the samples over xgrad's worker pool: the same serial
loop per sample, so results are those of one thread, bit for bit.
"""

cimport numpy as cnp
from libc.string cimport memcpy, memset

from xgrad._backend.native_kernels cimport pool_threads, run_chunks, vector_path

import numpy

cnp.import_array()

# Split over threads when each gets at least this many column elements.
DEF COLUMN_GRAIN = 65536


cdef struct TapJob:
    const cnp.int64_t* groups
    const cnp.int64_t* top  # each position slot's window: its first input row (oy sh - ph)
    const cnp.int64_t* left  # and column (ox sw - pw)
    Py_ssize_t group_count
    Py_ssize_t h, w, c_count, m, kw, ld
    float* x  # (m, h, w, C)
    float* cols
    bint add  # col2im: add the columns back into x
    Py_ssize_t per_chunk  # samples a chunk


cdef void _tap_range(TapJob* job, Py_ssize_t s_lo, Py_ssize_t s_hi) noexcept nogil:
    """Fill (or add back) the rows of samples s_lo..s_hi, group by group,
    one kernel row of a window at a time: the taps j0..j1 that lie in the
    image are one run of x's row, those in the padding zeros."""
    cdef Py_ssize_t g, q, s, i, iy, ja, jb, lo, c = job.c_count, w = job.w
    cdef Py_ssize_t span, plane = job.h * w * c
    cdef const cnp.int64_t* row
    cdef float* window  # the row of the columns of (q, s)
    cdef float* at_cols
    cdef float* at_x
    for g in range(job.group_count):
        row = job.groups + 6 * g
        span = (row[5] - row[4]) * c
        for q in range(row[0], row[1]):
            lo = job.left[q]
            ja = max(row[4], -lo)  # the taps j0..j1 inside the image: ja..jb
            jb = min(row[5], w - lo)
            for s in range(s_lo, s_hi):
                window = job.cols + (q * job.m + s) * job.ld
                for i in range(row[2], row[3]):
                    iy = job.top[q] + i
                    at_cols = window + (i * job.kw + row[4]) * c
                    if iy < 0 or iy >= job.h or ja >= jb:
                        if not job.add:  # a kernel row in the padding reads zeros
                            memset(at_cols, 0, span * sizeof(float))
                        continue
                    at_x = job.x + s * plane + (iy * w + lo + ja) * c
                    if job.add:
                        _add_run(at_x, at_cols + (ja - row[4]) * c, (jb - ja) * c)
                    else:
                        memset(at_cols, 0, (ja - row[4]) * c * sizeof(float))
                        memcpy(at_cols + (ja - row[4]) * c, at_x, (jb - ja) * c * sizeof(float))
                        memset(at_cols + (jb - row[4]) * c, 0, (row[5] - jb) * c * sizeof(float))


cdef inline void _add_run(float* to, const float* frm, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t t
    for t in range(n):
        to[t] += frm[t]


cdef void _tap_chunk(void* ctx, Py_ssize_t chunk) noexcept nogil:
    cdef TapJob* job = <TapJob*>ctx
    cdef Py_ssize_t lo = chunk * job.per_chunk
    _tap_range(job, lo, min(lo + job.per_chunk, job.m))


cdef object _run(cnp.ndarray x, cnp.ndarray cols, groups, tuple ksize, tuple stride,
                 tuple pad, tuple outsize, bint add, order):
    """Check the operands, then run the fill or the add over all samples."""
    if not (x.dtype.num == cnp.NPY_FLOAT32 and cols.dtype.num == cnp.NPY_FLOAT32
            and x.ndim == 4 and cols.ndim == 2 and cnp.PyArray_IS_C_CONTIGUOUS(x)
            and cnp.PyArray_ISALIGNED(x) and cnp.PyArray_ISALIGNED(cols)):
        raise ValueError('tap columns: x must be a C-contiguous float32 (m, h, w, C) array '
                         'and cols a float32 matrix, not {} {} and {} {}'.format(
                             x.dtype, (<object>x).shape, cols.dtype, (<object>cols).shape))
    if not cnp.PyArray_ISWRITEABLE(x if add else cols):
        raise ValueError('tap columns: the output is read-only')
    cdef Py_ssize_t m = x.shape[0], h = x.shape[1], w = x.shape[2], c_count = x.shape[3]
    cdef Py_ssize_t kh = ksize[0], kw = ksize[1], oh = outsize[0], ow = outsize[1]
    if min(kh, kw, stride[0], stride[1]) < 1 or min(pad[0], pad[1], oh, ow) < 0:
        raise ValueError('tap columns: bad geometry {} {} {} {}'.format(
            ksize, stride, pad, outsize))
    if (cols.shape[0] != oh * ow * m or cols.shape[1] != kh * kw * c_count
            or (cols.shape[1] > 1 and cols.strides[1] != 4) or cols.strides[0] % 4
            or (cols.shape[0] > 1 and cols.strides[0] < 4 * cols.shape[1])):
        raise ValueError('tap columns: cols {} (strides {}) is not the ({}, {}) matrix with '
                         'contiguous rows'.format((<object>cols).shape, (<object>cols).strides,
                                                  oh * ow * m, kh * kw * c_count))
    cdef cnp.int64_t[:, ::1] spec = numpy.ascontiguousarray(groups, dtype=numpy.int64)
    if spec.shape[1] != 6:
        raise ValueError('tap columns: groups must have 6 columns')
    cdef Py_ssize_t g, elements = 0
    for g in range(spec.shape[0]):
        if not (0 <= spec[g, 0] <= spec[g, 1] <= oh * ow and 0 <= spec[g, 2] <= spec[g, 3] <= kh
                and 0 <= spec[g, 4] <= spec[g, 5] <= kw):
            raise ValueError('tap columns: group {} {} is outside {} positions, taps {}'.format(
                g, tuple(spec[g]), oh * ow, ksize))
        elements += ((spec[g, 1] - spec[g, 0]) * (spec[g, 3] - spec[g, 2])
                     * (spec[g, 5] - spec[g, 4]) * c_count * m)
    cdef cnp.int64_t[::1] slots = _permutation(order, oh * ow)
    if spec.shape[0] == 0 or c_count == 0 or m == 0:
        return
    positions = numpy.arange(oh * ow) if slots is None else numpy.asarray(slots)
    cdef cnp.int64_t[::1] top = positions // ow * stride[0] - pad[0]
    cdef cnp.int64_t[::1] left = positions % ow * stride[1] - pad[1]
    cdef TapJob job
    job.groups = &spec[0, 0]
    job.top, job.left = &top[0], &left[0]
    job.group_count = spec.shape[0]
    job.h, job.w, job.c_count, job.m, job.kw = h, w, c_count, m, kw
    job.ld = cols.strides[0] // 4 if cols.shape[0] > 1 else cols.shape[1]
    job.x = <float*>cnp.PyArray_DATA(x)
    job.cols = <float*>cnp.PyArray_DATA(cols)
    job.add = add
    cdef Py_ssize_t nt = min(<Py_ssize_t>pool_threads(), m, elements // COLUMN_GRAIN)
    with nogil:
        if nt <= 1:
            _tap_range(&job, 0, m)
        else:
            job.per_chunk = (m + 4 * nt - 1) // (4 * nt)
            run_chunks(_tap_chunk, &job, (m + job.per_chunk - 1) // job.per_chunk)


cdef cnp.int64_t[::1] _permutation(order, Py_ssize_t positions):
    """``order`` as int64, checked to be a permutation of 0..positions;
    None for None (the identity)."""
    if order is None:
        return None
    cdef cnp.int64_t[::1] slots = numpy.ascontiguousarray(order, dtype=numpy.int64).reshape(-1)
    cdef cnp.uint8_t[::1] seen = numpy.zeros(positions, dtype=numpy.uint8)
    cdef Py_ssize_t q
    if slots.shape[0] != positions:
        raise ValueError('tap columns: order has {} entries for {} positions'.format(
            slots.shape[0], positions))
    for q in range(positions):
        if not 0 <= slots[q] < positions or seen[slots[q]]:
            raise ValueError('tap columns: order is not a permutation of the {} '
                             'positions'.format(positions))
        seen[slots[q]] = 1
    return slots


def fill_tap_columns(cnp.ndarray x, cnp.ndarray cols, groups, tuple ksize, tuple stride,
                     tuple pad, tuple outsize, order=None):
    """Write the columns of each group's taps (zeros where a tap reads the
    padding); the other elements of ``cols`` are left as they are."""
    _run(x, cols, groups, ksize, stride, pad, outsize, False, order)


def add_tap_columns(cnp.ndarray cols, cnp.ndarray x, groups, tuple ksize, tuple stride,
                    tuple pad, tuple outsize, order=None):
    """The adjoint of fill_tap_columns: add each group's columns back into
    ``x`` where their taps read it (padding dropped)."""
    _run(x, cols, groups, ksize, stride, pad, outsize, True, order)


cdef extern from "transpose.h" nogil:
    void xgrad_transpose_rows(int path, const float* src, Py_ssize_t src_ld, float* dst,
                              Py_ssize_t dst_ld, Py_ssize_t cols, Py_ssize_t r_lo,
                              Py_ssize_t r_hi)

# Rows of src a chunk of the threaded copy (a multiple of the 16-row bands).
DEF TRANSPOSE_ROWS = 64


cdef struct TransposeJob:
    const float* src
    float* dst
    Py_ssize_t rows, cols, src_ld, dst_ld
    int path


cdef void _transpose_chunk(void* ctx, Py_ssize_t chunk) noexcept nogil:
    cdef TransposeJob* job = <TransposeJob*>ctx
    cdef Py_ssize_t lo = chunk * TRANSPOSE_ROWS
    xgrad_transpose_rows(job.path, job.src, job.src_ld, job.dst, job.dst_ld, job.cols, lo,
                         min(lo + TRANSPOSE_ROWS, job.rows))


def transpose_into(cnp.ndarray src, cnp.ndarray dst):
    """dst = src.T for float32 matrices with contiguous rows, or each
    matrix of a C-contiguous stack (B, R, C) into one (B, C, R)
    (transpose.h): the layout moves of the tap-group convolution (the batch
    to the last axis and back, the weights' taps before their channels),
    which NumPy's transposing copy runs at 2.7 ns an element on a (64,
    4096) matrix."""
    if not (src.ndim == dst.ndim and src.ndim in (2, 3) and src.dtype.num == cnp.NPY_FLOAT32
            and dst.dtype.num == cnp.NPY_FLOAT32 and cnp.PyArray_ISALIGNED(src)
            and cnp.PyArray_ISALIGNED(dst) and cnp.PyArray_ISWRITEABLE(dst)):
        raise ValueError('transpose_into: float32 matrices or stacks, the output writeable')
    cdef int r = src.ndim - 2
    cdef Py_ssize_t batch = src.shape[0] if r else 1
    cdef Py_ssize_t rows = src.shape[r], cols = src.shape[r + 1], item
    if dst.shape[r] != cols or dst.shape[r + 1] != rows or (r and dst.shape[0] != batch):
        raise ValueError('transpose_into: {} into {}'.format((<object>src).shape,
                                                             (<object>dst).shape))
    if rows == 0 or cols == 0 or batch == 0:
        return
    if r and not (cnp.PyArray_IS_C_CONTIGUOUS(src) and cnp.PyArray_IS_C_CONTIGUOUS(dst)):
        raise ValueError('transpose_into: stacks must be C-contiguous')
    if ((cols > 1 and src.strides[r + 1] != 4) or (rows > 1 and dst.strides[r + 1] != 4)
            or src.strides[r] % 4 or dst.strides[r] % 4
            or (rows > 1 and src.strides[r] < 4 * cols)
            or (cols > 1 and dst.strides[r] < 4 * rows)):
        raise ValueError('transpose_into: rows must be contiguous and apart')
    cdef TransposeJob job
    job.src = <const float*>cnp.PyArray_DATA(src)
    job.dst = <float*>cnp.PyArray_DATA(dst)
    job.rows, job.cols = rows, cols
    job.src_ld = src.strides[r] // 4 if rows > 1 else cols
    job.dst_ld = dst.strides[r] // 4 if cols > 1 else rows
    job.path = vector_path()
    cdef Py_ssize_t chunks = (rows + TRANSPOSE_ROWS - 1) // TRANSPOSE_ROWS
    cdef Py_ssize_t nt = min(<Py_ssize_t>pool_threads(), chunks, rows * cols // COLUMN_GRAIN)
    with nogil:
        if r:  # a stack: one matrix after another on this thread
            for item in range(batch):
                xgrad_transpose_rows(job.path, job.src + item * rows * cols, job.src_ld,
                                     job.dst + item * rows * cols, job.dst_ld, cols, 0, rows)
        elif nt <= 1:
            xgrad_transpose_rows(job.path, job.src, job.src_ld, job.dst, job.dst_ld, cols, 0,
                                 rows)
        else:
            run_chunks(_transpose_chunk, &job, chunks)
