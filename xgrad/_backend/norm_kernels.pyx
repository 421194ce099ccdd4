# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Batch-normalization CPU kernels: statistics, normalization and the
closed-form gradient, one pass over memory each, channels split across
threads.

``x`` is seen as (N, C, L): N batch rows, C channels, L contiguous elements
per row and channel (the layout ``normalization._Layout`` merges any call
into; (N, D) over N is (N, D, 1)). NumPy needs a pass per ufunc plus
temporaries for the same formulas, and runs single-threaded.

Two kernels, chosen by ``batch_norm_forward``/``batch_norm_backward`` from
L alone (``_by_columns``): with rows of 16 or more elements a channel's
L-element runs stream, and a thread takes whole channels; with shorter
ones (a dense layer's (N, D), small feature maps) a channel's elements lie
C * L apart, so the statistics are column sums of (N, C * L) instead,
rows in blocks fixed by the shape and columns in segments, each block's
partial sums in double added in order: the same bits at any thread count.
"""

from libc.math cimport sqrt
from libc.string cimport memset
from cpython.mem cimport PyMem_Free, PyMem_Malloc

import numpy

cimport numpy as cnp

from xgrad._backend.native_kernels cimport chunk_task, pool_threads, run_chunks, vector_path

cnp.import_array()

ctypedef fused real:
    float
    double

# Below this many elements a thread hand-off costs more than it saves.
PARALLEL_SIZE = 1 << 18


# One call's operands, for the chunk callbacks: arrays of (N, C, L) or C
# elements, of the dtype ``is_double`` says; a chunk takes ``per_chunk``
# channels.
cdef struct NormJob:
    bint is_double
    Py_ssize_t n, c, l, per_chunk
    double eps
    const char* x
    const char* gy
    const char* gamma
    const char* beta
    const char* mean
    const char* inv_std
    char* y
    char* mean_out
    char* var_out
    char* gx
    char* ggamma
    char* gbeta


cdef void _run(chunk_task task, NormJob* job, Py_ssize_t size):
    """Run ``task`` over the job's channels: on xgrad's worker pool (see
    native_kernels), one chunk of channels per thread, when ``size``
    elements are worth it; else in one call here. Without the GIL."""
    cdef Py_ssize_t k = min(<Py_ssize_t>pool_threads(), job.c) if size >= PARALLEL_SIZE else 1
    if k < 1:
        k = 1
    job.per_chunk = (job.c + k - 1) // k
    with nogil:
        if k == 1:
            task(job, 0)
        else:
            run_chunks(task, job, (job.c + job.per_chunk - 1) // job.per_chunk)


cdef void _forward(const real* x, const real* gamma, const real* beta, real* y,
                   real* mean_out, real* var_out, Py_ssize_t n, Py_ssize_t c,
                   Py_ssize_t l, double eps, Py_ssize_t c0, Py_ssize_t c1) noexcept nogil:
    cdef Py_ssize_t ch, i, j
    cdef const real* row
    cdef real* out
    cdef double s, d, mean, var, inv_std, scale, shift
    for ch in range(c0, c1):
        s = 0
        for i in range(n):
            row = x + (i * c + ch) * l
            for j in range(l):
                s = s + row[j]
        mean = s / (n * l)
        s = 0
        for i in range(n):
            row = x + (i * c + ch) * l
            for j in range(l):
                d = row[j] - mean
                s = s + d * d
        var = s / (n * l)
        inv_std = 1 / sqrt(var + eps)
        scale = gamma[ch] * inv_std
        shift = beta[ch] - mean * scale
        for i in range(n):
            row = x + (i * c + ch) * l
            out = y + (i * c + ch) * l
            for j in range(l):
                out[j] = <real>(row[j] * scale + shift)
        mean_out[ch] = <real>mean
        var_out[ch] = <real>var


cdef void _backward(const real* gy, const real* x, const real* mean,
                    const real* inv_std, const real* gamma, real* gx,
                    real* ggamma, real* gbeta, Py_ssize_t n, Py_ssize_t c,
                    Py_ssize_t l, Py_ssize_t c0, Py_ssize_t c1) noexcept nogil:
    cdef Py_ssize_t ch, i, j
    cdef const real* grow
    cdef const real* xrow
    cdef real* out
    cdef double sg, sgx, m, istd, scale, a, b
    cdef double count = n * l
    for ch in range(c0, c1):
        m = mean[ch]
        istd = inv_std[ch]
        sg = 0
        sgx = 0
        for i in range(n):
            grow = gy + (i * c + ch) * l
            xrow = x + (i * c + ch) * l
            for j in range(l):
                sg = sg + grow[j]
                sgx = sgx + grow[j] * (xrow[j] - m)
        gbeta[ch] = <real>sg
        ggamma[ch] = <real>(sgx * istd)
        if gx != NULL:
            # gx = scale * (gy - sg/count - (x - m) * istd^2 * sgx/count)
            scale = gamma[ch] * istd
            a = -scale * istd * istd * sgx / count
            b = -scale * sg / count - a * m
            for i in range(n):
                grow = gy + (i * c + ch) * l
                xrow = x + (i * c + ch) * l
                out = gx + (i * c + ch) * l
                for j in range(l):
                    out[j] = <real>(grow[j] * scale + xrow[j] * a + b)


cdef void _forward_chunk(void* ctx, Py_ssize_t k) noexcept nogil:
    cdef NormJob* j = <NormJob*>ctx
    cdef Py_ssize_t c0 = k * j.per_chunk, c1 = min(c0 + j.per_chunk, j.c)
    if j.is_double:
        _forward(<const double*>j.x, <const double*>j.gamma, <const double*>j.beta,
                 <double*>j.y, <double*>j.mean_out, <double*>j.var_out,
                 j.n, j.c, j.l, j.eps, c0, c1)
    else:
        _forward(<const float*>j.x, <const float*>j.gamma, <const float*>j.beta,
                 <float*>j.y, <float*>j.mean_out, <float*>j.var_out,
                 j.n, j.c, j.l, j.eps, c0, c1)


cdef void _backward_chunk(void* ctx, Py_ssize_t k) noexcept nogil:
    cdef NormJob* j = <NormJob*>ctx
    cdef Py_ssize_t c0 = k * j.per_chunk, c1 = min(c0 + j.per_chunk, j.c)
    if j.is_double:
        _backward(<const double*>j.gy, <const double*>j.x, <const double*>j.mean,
                  <const double*>j.inv_std, <const double*>j.gamma, <double*>j.gx,
                  <double*>j.ggamma, <double*>j.gbeta, j.n, j.c, j.l, c0, c1)
    else:
        _backward(<const float*>j.gy, <const float*>j.x, <const float*>j.mean,
                  <const float*>j.inv_std, <const float*>j.gamma, <float*>j.gx,
                  <float*>j.ggamma, <float*>j.gbeta, j.n, j.c, j.l, c0, c1)


cdef bint _is_double(x) except -1:
    if x.dtype == numpy.float64:
        return True
    if x.dtype == numpy.float32:
        return False
    raise TypeError('batch-norm kernels take float32 or float64, not {}'.format(x.dtype))


cdef inline const char* _data(a):
    return <const char*>cnp.PyArray_DATA(<cnp.ndarray>a)


cdef inline char* _out(a):
    return <char*>cnp.PyArray_DATA(<cnp.ndarray>a)


def _contiguous(a, dtype):
    return numpy.ascontiguousarray(a, dtype=dtype)


def batch_norm_forward(x, gamma, beta, double eps):
    """(y, mean, var) for ``x`` of shape (N, C, L), float32 or float64;
    ``gamma``/``beta`` of C elements; var is the biased variance. Statistics
    are accumulated in double, in two passes (no cancellation). An empty
    batch gives NaN statistics, as NumPy's mean of nothing."""
    x = _contiguous(x, x.dtype)
    n, c, l = x.shape
    gamma = _contiguous(gamma, x.dtype).reshape(c)
    beta = _contiguous(beta, x.dtype).reshape(c)
    y = numpy.empty_like(x)
    mean = numpy.full(c, numpy.nan, x.dtype)
    var = numpy.full(c, numpy.nan, x.dtype)
    cdef NormJob job
    if x.size and _by_columns(l):
        _is_double(x)
        _columns_forward(x, gamma, beta, eps, y, mean, var)
    elif x.size:
        job.is_double = _is_double(x)
        job.n, job.c, job.l, job.eps = n, c, l, eps
        job.x, job.gamma, job.beta = _data(x), _data(gamma), _data(beta)
        job.y, job.mean_out, job.var_out = _out(y), _out(mean), _out(var)
        _run(_forward_chunk, &job, x.size)
    return y, mean, var


def batch_norm_backward(gy, x, mean, inv_std, gamma, bint need_gx=True):
    """(gx or None, ggamma, gbeta) of batch_norm on (N, C, L) arrays."""
    x = _contiguous(x, x.dtype)
    gy = _contiguous(gy, x.dtype)
    n, c, l = x.shape
    gx = numpy.empty_like(x) if need_gx else None
    ggamma = numpy.zeros(c, x.dtype)
    gbeta = numpy.zeros(c, x.dtype)
    mean = _contiguous(mean, x.dtype)
    inv_std = _contiguous(inv_std, x.dtype)
    gamma = _contiguous(gamma, x.dtype).reshape(c)
    cdef NormJob job
    if x.size and _by_columns(l):
        _is_double(x)
        _columns_backward(gy, x, mean, inv_std, gamma, gx, ggamma, gbeta)
    elif x.size:
        job.is_double = _is_double(x)
        job.n, job.c, job.l = n, c, l
        job.gy, job.x, job.mean, job.inv_std, job.gamma = (
            _data(gy), _data(x), _data(mean), _data(inv_std), _data(gamma))
        job.gx = NULL if gx is None else _out(gx)
        job.ggamma, job.gbeta = _out(ggamma), _out(gbeta)
        _run(_backward_chunk, &job, x.size)
    return gx, ggamma, gbeta


# ---------------------------------------------------------------------------
# Batch normalization by columns: x of (N, C, L) with L < 16 seen as (N, W),
# W = C * L columns. Pass tasks cover (row block, column segment) pairs; the
# statistics' partial sums go to (blocks, 2, W) doubles, added over the
# blocks in order afterwards.

cdef enum:
    SHORT_ROWS = 16       # L below this: by columns
    COLUMN_PARALLEL_SIZE = 1 << 16  # (a row block is a task: finer than channels)
    BLOCK_ELEMENTS = 1 << 15
    MIN_BLOCK_ROWS = 16   # (so that the partials stay under 1/8 of x)
    SEGMENT = 1024        # columns a task takes

cdef enum ColumnPass:     # batch_norm_columns.h's steps
    SUM = 0               # partial[0] = sum x
    SQUARES = 1           # partial[0] = sum (x - center)^2
    GRADIENT_SUMS = 2     # partial[0] = sum gy, partial[1] = sum gy * (x - center)
    AFFINE = 3            # out = x * scale + shift
    GRADIENT = 4          # out = gy * scale + x * coef + shift


cdef struct ColumnJob:
    bint is_double, parallel
    ColumnPass step
    Py_ssize_t n, w, rows, blocks, segments
    const char* x
    const char* gy
    double* center   # per column
    double* scale
    double* coef
    double* shift
    char* out
    double* partial        # (blocks, 2, W)


cdef bint _by_columns(Py_ssize_t l):
    """Whether (N, C, L) takes the column kernel: rows of fewer than
    SHORT_ROWS elements per channel, too short for the channel kernel's
    streams."""
    return l < SHORT_ROWS


cdef extern from "batch_norm_columns.h" nogil:
    void bn_columns_f32(int step, const float* x0, const float* gy0, float* out0, double* p0,
                        double* p1, const double* center, const double* scale,
                        const double* coef, const double* shift, Py_ssize_t w, Py_ssize_t r0,
                        Py_ssize_t r1, Py_ssize_t c0, Py_ssize_t c1)
    void bn_columns_f64(int step, const double* x0, const double* gy0, double* out0,
                        double* p0, double* p1, const double* center, const double* scale,
                        const double* coef, const double* shift, Py_ssize_t w, Py_ssize_t r0,
                        Py_ssize_t r1, Py_ssize_t c0, Py_ssize_t c1)


cdef void _column_task(void* ctx, Py_ssize_t k) noexcept nogil:
    """Task k: row block k // segments, column segment k % segments."""
    cdef ColumnJob* j = <ColumnJob*>ctx
    cdef Py_ssize_t b = k // j.segments, s = k % j.segments
    cdef Py_ssize_t r0 = b * j.rows, r1 = min(r0 + j.rows, j.n)
    cdef Py_ssize_t c0 = s * SEGMENT, c1 = min(c0 + SEGMENT, j.w)
    cdef double* p = j.partial + 2 * b * j.w
    if j.is_double:
        bn_columns_f64(j.step, <const double*>j.x, <const double*>j.gy, <double*>j.out,
                       p, p + j.w, j.center, j.scale, j.coef, j.shift, j.w, r0, r1, c0, c1)
    else:
        bn_columns_f32(j.step, <const float*>j.x, <const float*>j.gy, <float*>j.out,
                       p, p + j.w, j.center, j.scale, j.coef, j.shift, j.w, r0, r1, c0, c1)


cdef void _column_pass(ColumnJob* j, ColumnPass step) noexcept nogil:
    """Run one pass over the whole of x (on the pool when it is large); the
    statistics passes zero the partial sums first and leave their sum over
    the blocks, in block order, in the first block's place."""
    cdef Py_ssize_t k, b, c, tasks = j.blocks * j.segments
    cdef double* p = j.partial
    j.step = step
    if step <= GRADIENT_SUMS:
        memset(p, 0, j.blocks * 2 * j.w * sizeof(double))
    if j.parallel and tasks > 1:
        run_chunks(_column_task, j, tasks)
    else:
        for k in range(tasks):
            _column_task(j, k)
    if step <= GRADIENT_SUMS:
        for b in range(1, j.blocks):
            for c in range(2 * j.w):
                p[c] += p[2 * b * j.w + c]


cdef void _channel_sums(ColumnJob* j, Py_ssize_t row, Py_ssize_t l, double* out) noexcept nogil:
    """out[ch] = the sum of channel ch's L columns of the partial sums' row."""
    cdef Py_ssize_t ch, i, c = j.w // l
    cdef const double* p = j.partial + row * j.w
    cdef double s
    for ch in range(c):
        s = 0
        for i in range(l):
            s += p[ch * l + i]
        out[ch] = s


cdef void _spread(const double* v, Py_ssize_t c, Py_ssize_t l, double* out) noexcept nogil:
    """out (C * L) = each channel's value repeated for its L columns."""
    cdef Py_ssize_t ch, i
    for ch in range(c):
        for i in range(l):
            out[ch * l + i] = v[ch]


cdef double* _column_job(ColumnJob* j, x) except NULL:
    """Set up ``j`` for x of (N, C, L); one buffer of doubles (to free): the
    (blocks, 2, W) partial sums and four per-column vectors of W (center,
    scale, coef, shift)."""
    n, c, l = x.shape
    j.is_double = x.dtype == numpy.float64
    j.n, j.w = n, c * l
    j.rows = max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // max(j.w, 1))
    j.blocks = (j.n + j.rows - 1) // j.rows
    j.segments = (j.w + SEGMENT - 1) // SEGMENT
    j.parallel = n * j.w >= COLUMN_PARALLEL_SIZE and pool_threads() >= 2
    j.x, j.gy, j.out = _data(x), NULL, NULL
    xgrad_vector_set_path(vector_path())
    cdef double* buf = <double*>PyMem_Malloc((j.blocks * 2 + 4) * j.w * sizeof(double))
    if buf == NULL:
        raise MemoryError()
    j.partial = buf
    j.center = buf + j.blocks * 2 * j.w
    j.scale = j.center + j.w
    j.coef = j.scale + j.w
    j.shift = j.coef + j.w
    return buf


cdef inline double* _doubles(a):
    return <double*>cnp.PyArray_DATA(<cnp.ndarray>a)


cdef _columns_forward(x, gamma, beta, double eps, y, mean_out, var_out):
    cdef Py_ssize_t n = x.shape[0], c = x.shape[1], l = x.shape[2], ch
    cdef ColumnJob j
    cdef double count = n * l
    per_channel = numpy.empty((6, c), numpy.float64)  # mean, var, scale, shift, gamma, beta
    per_channel[4] = gamma
    per_channel[5] = beta
    cdef double* mean = _doubles(per_channel)
    cdef double* var = mean + c
    cdef double* scale = var + c
    cdef double* shift = scale + c
    cdef double* g = shift + c
    cdef double* b = g + c
    cdef double* buf = _column_job(&j, x)
    j.out = _out(y)
    try:
        with nogil:
            _column_pass(&j, SUM)
            _channel_sums(&j, 0, l, mean)
            for ch in range(c):
                mean[ch] /= count
            _spread(mean, c, l, j.center)
            _column_pass(&j, SQUARES)
            _channel_sums(&j, 0, l, var)
            for ch in range(c):
                var[ch] /= count
                scale[ch] = g[ch] * (1 / sqrt(var[ch] + eps))
                shift[ch] = b[ch] - mean[ch] * scale[ch]
            _spread(scale, c, l, j.scale)
            _spread(shift, c, l, j.shift)
            _column_pass(&j, AFFINE)
    finally:
        PyMem_Free(buf)
    mean_out[...] = per_channel[0]
    var_out[...] = per_channel[1]


cdef _columns_backward(gy, x, mean, inv_std, gamma, gx, ggamma, gbeta):
    cdef Py_ssize_t n = x.shape[0], c = x.shape[1], l = x.shape[2], ch
    cdef ColumnJob j
    cdef double count = n * l
    # mean, inv_std, gamma, sums of gy, of gy * (x - mean), scale, a, b
    per_channel = numpy.empty((8, c), numpy.float64)
    per_channel[0] = mean
    per_channel[1] = inv_std
    per_channel[2] = gamma
    cdef double* m = _doubles(per_channel)
    cdef double* istd = m + c
    cdef double* g = istd + c
    cdef double* sg = g + c
    cdef double* sgx = sg + c
    cdef double* scale = sgx + c
    cdef double* a = scale + c
    cdef double* b = a + c
    cdef double* buf = _column_job(&j, x)
    j.gy = _data(gy)
    j.out = NULL if gx is None else _out(gx)
    try:
        with nogil:
            _spread(m, c, l, j.center)
            _column_pass(&j, GRADIENT_SUMS)
            _channel_sums(&j, 0, l, sg)
            _channel_sums(&j, 1, l, sgx)
            # gx = scale * (gy - sg/count - (x - m) * istd^2 * sgx/count), as _backward
            for ch in range(c):
                scale[ch] = g[ch] * istd[ch]
                a[ch] = -scale[ch] * istd[ch] * istd[ch] * sgx[ch] / count
                b[ch] = -scale[ch] * sg[ch] / count - a[ch] * m[ch]
                sgx[ch] *= istd[ch]  # ggamma
            if j.out != NULL:
                _spread(scale, c, l, j.scale)
                _spread(a, c, l, j.coef)
                _spread(b, c, l, j.shift)
                _column_pass(&j, GRADIENT)
    finally:
        PyMem_Free(buf)
    gbeta[...] = per_channel[3]
    ggamma[...] = per_channel[4]


# ---------------------------------------------------------------------------
# Layer normalization: x seen as (R, D), each row normalized over its D
# elements by layer_norm.h's row kernels (per CPU path). Rows go to threads
# in blocks fixed by the shape (``_row_blocks``), and the parameters'
# gradients are summed block by block, then over the blocks in order in
# double: the same bits at any thread count.

cdef extern from "layer_norm.h" nogil:
    int xgrad_vector_set_path(int path)
    void ln_forward_f32(const float* x, const float* gamma, const float* beta, float* y,
                        float* mean_out, float* inv_std_out, Py_ssize_t r0, Py_ssize_t r1,
                        Py_ssize_t d, double eps)
    void ln_forward_f64(const double* x, const double* gamma, const double* beta, double* y,
                        double* mean_out, double* inv_std_out, Py_ssize_t r0, Py_ssize_t r1,
                        Py_ssize_t d, double eps)
    void ln_backward_f32(const float* gy, const float* x, const float* mean,
                         const float* inv_std, const float* gamma, float* gx, float* sums,
                         Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t d)
    void ln_backward_f64(const double* gy, const double* x, const double* mean,
                         const double* inv_std, const double* gamma, double* gx, double* sums,
                         Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t d)

cdef struct RowJob:
    bint is_double
    Py_ssize_t r, d, block
    double eps
    const char* x
    const char* gy
    const char* gamma
    const char* beta
    const char* mean
    const char* inv_std
    char* y
    char* mean_out
    char* inv_std_out
    char* gx
    char* partial  # (blocks, 2, D) of x's dtype: each block's sums of gy * x_hat and gy


cdef Py_ssize_t _row_blocks(Py_ssize_t r, Py_ssize_t d):
    """How many blocks of rows: about 32K elements each, at most 256."""
    cdef Py_ssize_t rows = max(1, (1 << 15) // max(d, 1))
    return min(256, (r + rows - 1) // rows) if r else 0


cdef void _ln_forward_chunk(void* ctx, Py_ssize_t k) noexcept nogil:
    cdef RowJob* j = <RowJob*>ctx
    cdef Py_ssize_t r0 = k * j.block, r1 = min(r0 + j.block, j.r)
    if j.is_double:
        ln_forward_f64(<const double*>j.x, <const double*>j.gamma, <const double*>j.beta,
                       <double*>j.y, <double*>j.mean_out, <double*>j.inv_std_out,
                       r0, r1, j.d, j.eps)
    else:
        ln_forward_f32(<const float*>j.x, <const float*>j.gamma, <const float*>j.beta,
                       <float*>j.y, <float*>j.mean_out, <float*>j.inv_std_out,
                       r0, r1, j.d, j.eps)


cdef void _ln_backward_chunk(void* ctx, Py_ssize_t k) noexcept nogil:
    cdef RowJob* j = <RowJob*>ctx
    cdef Py_ssize_t r0 = k * j.block, r1 = min(r0 + j.block, j.r)
    if j.is_double:
        ln_backward_f64(<const double*>j.gy, <const double*>j.x, <const double*>j.mean,
                        <const double*>j.inv_std, <const double*>j.gamma, <double*>j.gx,
                        <double*>j.partial + k * 2 * j.d, r0, r1, j.d)
    else:
        ln_backward_f32(<const float*>j.gy, <const float*>j.x, <const float*>j.mean,
                        <const float*>j.inv_std, <const float*>j.gamma, <float*>j.gx,
                        <float*>j.partial + k * 2 * j.d, r0, r1, j.d)


cdef void _run_rows(chunk_task task, RowJob* job):
    """Run ``task`` over the job's row blocks: on the worker pool when the
    rows hold PARALLEL_SIZE elements or more, else here. Without the GIL."""
    cdef Py_ssize_t blocks = _row_blocks(job.r, job.d)
    cdef Py_ssize_t k
    cdef bint alone = job.r * job.d < PARALLEL_SIZE or pool_threads() < 2
    xgrad_vector_set_path(vector_path())
    job.block = (job.r + blocks - 1) // blocks if blocks else 0
    blocks = (job.r + job.block - 1) // job.block if job.block else 0
    with nogil:
        if alone:
            for k in range(blocks):
                task(job, k)
        else:
            run_chunks(task, job, blocks)


def layer_norm_forward(x, gamma, beta, double eps):
    """(y, mean, inv_std) for ``x`` of shape (R, D), float32 or float64, each
    row normalized over its D elements, then scaled by ``gamma`` and shifted
    by ``beta`` (D elements each); the statistics (R elements) in two
    passes (no cancellation), summed in x's dtype across vector lanes."""
    x = _contiguous(x, x.dtype)
    r, d = x.shape
    gamma = _contiguous(gamma, x.dtype).reshape(d)
    beta = _contiguous(beta, x.dtype).reshape(d)
    y = numpy.empty_like(x)
    mean = numpy.full(r, numpy.nan, x.dtype)
    inv_std = numpy.full(r, numpy.nan, x.dtype)
    cdef RowJob job
    if x.size:
        job.is_double = _is_double(x)
        job.r, job.d, job.eps = r, d, eps
        job.x, job.gamma, job.beta = _data(x), _data(gamma), _data(beta)
        job.y, job.mean_out, job.inv_std_out = _out(y), _out(mean), _out(inv_std)
        _run_rows(_ln_forward_chunk, &job)
    return y, mean, inv_std


def layer_norm_backward(gy, x, mean, inv_std, gamma, bint need_gx=True):
    """(gx or None, ggamma, gbeta) of layer_norm on (R, D) arrays."""
    x = _contiguous(x, x.dtype)
    gy = _contiguous(gy, x.dtype)
    r, d = x.shape
    gx = numpy.empty_like(x) if need_gx else None
    mean = _contiguous(mean, x.dtype)
    inv_std = _contiguous(inv_std, x.dtype)
    gamma = _contiguous(gamma, x.dtype).reshape(d)
    cdef Py_ssize_t blocks = _row_blocks(r, d)
    partial = numpy.zeros((blocks, 2, d), x.dtype)
    cdef RowJob job
    if x.size:
        job.is_double = _is_double(x)
        job.r, job.d = r, d
        job.gy, job.x, job.mean, job.inv_std, job.gamma = (
            _data(gy), _data(x), _data(mean), _data(inv_std), _data(gamma))
        job.gx = NULL if gx is None else _out(gx)
        job.partial = _out(partial)
        _run_rows(_ln_backward_chunk, &job)
    sums = numpy.zeros((2, d), numpy.float64)
    for k in range(blocks):  # in order: the same bits at any thread count
        sums += partial[k]  # (in double)
    return gx, sums[0].astype(x.dtype), sums[1].astype(x.dtype)
