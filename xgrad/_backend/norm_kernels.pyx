# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Batch-normalization CPU kernels: statistics, normalization and the
closed-form gradient, one pass over memory each, channels split across
threads.

``x`` is seen as (N, C, L): N batch rows, C channels, L contiguous elements
per row and channel (the layout ``normalization._Layout`` merges any call
into). NumPy needs a pass per ufunc plus temporaries for the same formulas,
and runs single-threaded.
"""

from libc.math cimport sqrt

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
    if x.size:
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
    if x.size:
        job.is_double = _is_double(x)
        job.n, job.c, job.l = n, c, l
        job.gy, job.x, job.mean, job.inv_std, job.gamma = (
            _data(gy), _data(x), _data(mean), _data(inv_std), _data(gamma))
        job.gx = NULL if gx is None else _out(gx)
        job.ggamma, job.gbeta = _out(ggamma), _out(gbeta)
        _run(_backward_chunk, &job, x.size)
    return gx, ggamma, gbeta


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
