# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Running sums along one axis (cumsum and its gradient) of host float32 and
float64 arrays.

NumPy's ``add.accumulate`` walks a row at about 3 ns an element: one
dependent add after another, through its generic strided loop (3x torch's
cumsum on (256, 1000)). Here the array is seen as (outer, n, inner) around
the axis: with inner == 1, eight rows advance side by side (eight independent
chains of adds); with inner > 1, a step adds a whole inner row to the
previous one (vectorised). Each running sum still adds its elements one
after another in NumPy's order, so the bits are NumPy's, at any thread count.
"""

cimport numpy as cnp

from xgrad._backend.native_kernels cimport pool_threads, run_chunks

cnp.import_array()

ctypedef fused real:
    float
    double

cdef enum:
    GROUP = 8                  # rows advanced together when inner == 1
    PARALLEL_SIZE = 1 << 16    # elements from which the pool takes a split


cdef struct ScanJob:
    bint is_double, reverse
    bint rows                  # inner == 1: tasks are groups of GROUP rows
    Py_ssize_t outer, n, inner
    Py_ssize_t tasks
    Py_ssize_t segment         # inner elements a task takes (inner > 1)
    Py_ssize_t segments        # tasks per outer index (inner > 1)
    const char* x
    char* y


cpdef object cumsum(object x, int axis, bint reverse=False):
    """numpy.cumsum(x, axis=axis) of an aligned, native-order, C-contiguous
    float32/float64 NumPy array (``reverse``: the running sums from the end,
    numpy.cumsum of x flipped along the axis, flipped back); None for any
    other array (NumPy then). ``axis`` is in [0, x.ndim)."""
    if type(x) is not cnp.ndarray:
        return None
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef int t = cnp.PyArray_TYPE(a)
    if ((t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or not cnp.PyArray_IS_C_CONTIGUOUS(a)
            or not cnp.PyArray_ISALIGNED(a) or not cnp.PyArray_ISNOTSWAPPED(a)
            or not 0 <= axis < cnp.PyArray_NDIM(a)):
        return None
    cdef ScanJob j
    cdef Py_ssize_t k, parts, threads, size = cnp.PyArray_SIZE(a)
    cdef int d
    j.outer, j.inner = 1, 1
    for d in range(axis):
        j.outer *= cnp.PyArray_DIM(a, d)
    for d in range(axis + 1, cnp.PyArray_NDIM(a)):
        j.inner *= cnp.PyArray_DIM(a, d)
    j.n = cnp.PyArray_DIM(a, axis)
    j.is_double, j.reverse = t == cnp.NPY_DOUBLE, reverse
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), t, 0)
    if size == 0:
        return out
    j.x, j.y = <const char*>cnp.PyArray_DATA(a), <char*>cnp.PyArray_DATA(out)
    threads = pool_threads() if size >= PARALLEL_SIZE else 1
    j.rows = j.inner == 1
    if j.rows:
        j.tasks = (j.outer + GROUP - 1) // GROUP
    else:
        # segments of the inner rows (whole 64-byte lines), so that a few
        # outer indices still give every thread work
        parts = max(1, (threads + j.outer - 1) // j.outer)  # (splits of an inner row)
        j.segment = max(16, ((j.inner + parts - 1) // parts + 15) // 16 * 16)
        j.segments = (j.inner + j.segment - 1) // j.segment
        j.tasks = j.outer * j.segments
    with nogil:
        if threads > 1 and j.tasks > 1:
            run_chunks(_scan_task, &j, j.tasks)
        else:
            for k in range(j.tasks):
                _scan_task(&j, k)
    return out


cdef void _scan_task(void* ctx, Py_ssize_t k) noexcept nogil:
    cdef ScanJob* j = <ScanJob*>ctx
    if j.is_double:
        _scan[double](j, k, <const double*>j.x, <double*>j.y)
    else:
        _scan[float](j, k, <const float*>j.x, <float*>j.y)


cdef inline void _scan(ScanJob* j, Py_ssize_t k, const real* x, real* y) noexcept nogil:
    """Task k: rows [k GROUP, (k + 1) GROUP), or one outer index's segment
    of the inner columns."""
    cdef Py_ssize_t o, c0, r0
    if j.rows:
        r0 = k * GROUP
        if r0 + GROUP <= j.outer:
            _scan_group(x + r0 * j.n, y + r0 * j.n, j.n, j.reverse)
        else:
            _scan_columns(x + r0 * j.n, y + r0 * j.n, j.n, 1, 0, 1, j.reverse, j.outer - r0)
        return
    o = k // j.segments
    c0 = k % j.segments * j.segment
    _scan_columns(x + o * j.n * j.inner, y + o * j.n * j.inner, j.n, j.inner, c0,
                  min(c0 + j.segment, j.inner), j.reverse, 1)


cdef inline void _scan_group(const real* x, real* y, Py_ssize_t n, bint reverse) noexcept nogil:
    """Running sums of GROUP rows of n, side by side: eight independent
    chains of adds instead of one."""
    cdef real a0, a1, a2, a3, a4, a5, a6, a7
    cdef Py_ssize_t i, e, step = -1 if reverse else 1
    e = n - 1 if reverse else 0
    a0, a1, a2, a3 = x[e], x[n + e], x[2 * n + e], x[3 * n + e]
    a4, a5, a6, a7 = x[4 * n + e], x[5 * n + e], x[6 * n + e], x[7 * n + e]
    for i in range(n):
        if i:
            a0 = a0 + x[e]
            a1 = a1 + x[n + e]
            a2 = a2 + x[2 * n + e]
            a3 = a3 + x[3 * n + e]
            a4 = a4 + x[4 * n + e]
            a5 = a5 + x[5 * n + e]
            a6 = a6 + x[6 * n + e]
            a7 = a7 + x[7 * n + e]
        y[e], y[n + e], y[2 * n + e], y[3 * n + e] = a0, a1, a2, a3
        y[4 * n + e], y[5 * n + e], y[6 * n + e], y[7 * n + e] = a4, a5, a6, a7
        e += step


cdef inline void _scan_columns(const real* x, real* y, Py_ssize_t n, Py_ssize_t inner,
                               Py_ssize_t c0, Py_ssize_t c1, bint reverse,
                               Py_ssize_t blocks) noexcept nogil:
    """Running sums down columns [c0, c1) of ``blocks`` consecutive
    (n, inner) blocks (the first element of each sum is x's own: a -0.0
    stays -0.0, as NumPy's)."""
    cdef Py_ssize_t b, i, c, first = (n - 1) * inner if reverse else 0
    cdef Py_ssize_t step = -inner if reverse else inner
    cdef const real* src
    cdef real* dst
    cdef const real* prev
    for b in range(blocks):
        for c in range(c0, c1):
            y[first + c] = x[first + c]
        for i in range(1, n):
            src = x + first + i * step
            dst = y + first + i * step
            prev = dst - step
            for c in range(c0, c1):
                dst[c] = prev[c] + src[c]
        x += n * inner
        y += n * inner
