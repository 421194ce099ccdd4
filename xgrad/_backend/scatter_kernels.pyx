# cython: boundscheck=False, wraparound=False, cdivision=True
"""Row scatter-adds: the gradients of ``take`` and of integer-array indexing.

``add_rows_at(out, indices, gy)`` adds ``gy[o, j, :]`` onto
``out[o, indices[j], :]`` for every j, repeats accumulating, in the order of
``indices``: the sums ``numpy.add.at`` gives, element for element, without
its per-element dispatch (an embedding's gradient, 2,240 rows of 256 floats
into a 10,000-row table: 3.4 ms on ``add.at`` at flat indices, one pass of
adds here). Threads split the columns (or, for narrow rows, the outer
blocks), so each element is summed by one thread in index order, whatever
the thread count.
"""

import numpy

cimport numpy as cnp

from xgrad._backend.native_kernels cimport pool_threads, run_chunks

cnp.import_array()

ctypedef fused real:
    float
    double

# Fewer adds than this run on the calling thread.
DEF PARALLEL_ADDS = 1 << 16
# Columns per thread at least, when the columns are split.
DEF COLUMN_GRAIN = 64


cdef struct Job:
    char* out
    const char* gy
    const cnp.intp_t* indices
    Py_ssize_t outer, rows, n, inner
    Py_ssize_t parts
    bint by_columns
    bint double


cdef void _add(real* out, const real* gy, const cnp.intp_t* indices, Py_ssize_t o0,
               Py_ssize_t o1, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t inner, Py_ssize_t c0,
               Py_ssize_t c1) noexcept nogil:
    cdef Py_ssize_t o, j, c
    cdef real* dst
    cdef const real* src
    for o in range(o0, o1):
        for j in range(n):
            dst = out + (o * rows + indices[j]) * inner
            src = gy + (o * n + j) * inner
            for c in range(c0, c1):
                dst[c] += src[c]


cdef inline Py_ssize_t _part(Py_ssize_t size, Py_ssize_t parts, Py_ssize_t k) noexcept nogil:
    return size * k // parts


cdef void _chunk(void* ctx, Py_ssize_t k) noexcept nogil:
    cdef Job* job = <Job*>ctx
    cdef Py_ssize_t o0 = 0, o1 = job.outer, c0 = 0, c1 = job.inner
    if job.by_columns:
        c0, c1 = _part(job.inner, job.parts, k), _part(job.inner, job.parts, k + 1)
    else:
        o0, o1 = _part(job.outer, job.parts, k), _part(job.outer, job.parts, k + 1)
    if job.double:
        _add(<double*>job.out, <const double*>job.gy, job.indices, o0, o1, job.rows, job.n,
             job.inner, c0, c1)
    else:
        _add(<float*>job.out, <const float*>job.gy, job.indices, o0, o1, job.rows, job.n,
             job.inner, c0, c1)


def add_rows_at(cnp.ndarray out, cnp.ndarray indices, cnp.ndarray gy):
    """out[o, indices[j], :] += gy[o, j, :] for all o, j, in j's order: out
    (outer, rows, inner) and gy (outer, n, inner) C-contiguous, of one dtype,
    float32 or float64; indices (n,) intp, C-contiguous, each in
    [0, rows) (not checked here: the forward checked them). True when done,
    False (nothing written) for operands it does not take."""
    if (out.ndim != 3 or gy.ndim != 3 or indices.ndim != 1
            or cnp.PyArray_TYPE(out) not in (cnp.NPY_FLOAT32, cnp.NPY_FLOAT64)
            or cnp.PyArray_TYPE(gy) != cnp.PyArray_TYPE(out)
            or cnp.PyArray_TYPE(indices) != cnp.NPY_INTP
            or not (cnp.PyArray_IS_C_CONTIGUOUS(out) and cnp.PyArray_IS_C_CONTIGUOUS(gy)
                    and cnp.PyArray_IS_C_CONTIGUOUS(indices))
            or not cnp.PyArray_ISWRITEABLE(out)
            or gy.shape[0] != out.shape[0] or gy.shape[2] != out.shape[2]
            or gy.shape[1] != indices.shape[0]):
        return False
    cdef Job job
    job.out = <char*>cnp.PyArray_DATA(out)
    job.gy = <const char*>cnp.PyArray_DATA(gy)
    job.indices = <const cnp.intp_t*>cnp.PyArray_DATA(indices)
    job.outer, job.rows, job.inner = out.shape[0], out.shape[1], out.shape[2]
    job.n = gy.shape[1]
    job.double = cnp.PyArray_TYPE(out) == cnp.NPY_FLOAT64
    cdef Py_ssize_t adds = job.outer * job.n * job.inner
    cdef Py_ssize_t threads = pool_threads() if adds >= PARALLEL_ADDS else 1
    job.by_columns = job.inner >= 2 * COLUMN_GRAIN or job.outer < threads
    if job.by_columns:
        job.parts = max(1, min(threads, job.inner // COLUMN_GRAIN))
    else:
        job.parts = max(1, min(threads, job.outer))
    if adds == 0:
        return True
    with nogil:
        if job.parts == 1:
            _chunk(&job, 0)
        else:
            run_chunks(_chunk, &job, job.parts)
    return True


def scatter_rows(gy, indices, Py_ssize_t axis, tuple shape):
    """Zeros of ``shape`` with the slices of ``gy`` (shaped like
    ``numpy.take(zeros(shape), indices, axis)``) added at ``indices`` (in
    bounds, non-negative) along ``axis`` by ``add_rows_at``; None for what
    it does not take (not a float32/64 NumPy array: the caller adds
    another way)."""
    if type(gy) is not numpy.ndarray or gy.dtype not in (numpy.float32, numpy.float64):
        return None
    cdef Py_ssize_t outer = 1, inner = 1, i
    for i in range(axis):
        outer *= shape[i]
    for i in range(axis + 1, len(shape)):
        inner *= shape[i]
    out = numpy.zeros((outer, shape[axis], inner), gy.dtype)
    rows = numpy.ascontiguousarray(numpy.asarray(indices).reshape(-1), dtype=numpy.intp)
    if not add_rows_at(out, rows, numpy.ascontiguousarray(gy).reshape(outer, rows.size,
                                                                        inner)):
        return None
    return out.reshape(shape)
