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

from concurrent.futures import ThreadPoolExecutor

import numpy

from xgrad._backend.native_kernels import max_threads

ctypedef fused real:
    float
    double

# Below this many elements a thread hand-off costs more than it saves.
PARALLEL_SIZE = 1 << 18
# The kernels release the GIL, so plain threads run them in parallel; a
# blocking hand-off (not OpenMP's spinning barrier) stays fast when the
# cores are shared with other processes.
_THREADS = max(1, min(max_threads(), 8))  # OMP_NUM_THREADS, else the CPUs
_pool = None


def _split_channels(run, Py_ssize_t size, Py_ssize_t c):
    """Call ``run(c0, c1)`` over [0, c) in one chunk per thread."""
    global _pool
    k = min(_THREADS, c) if size >= PARALLEL_SIZE else 1
    if k <= 1:
        run(0, c)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix='xgrad-norm')
    bounds = [c * i // k for i in range(k + 1)]
    futures = [_pool.submit(run, bounds[i], bounds[i + 1]) for i in range(1, k)]
    run(bounds[0], bounds[1])
    for f in futures:
        f.result()


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


# The inputs are const memoryviews, so that read-only data (a frozen
# parameter, a broadcast or a NumPy array marked read-only) is accepted.
def _forward_range(const real[:, :, ::1] x, const real[::1] gamma, const real[::1] beta,
                   real[:, :, ::1] y, real[::1] mean, real[::1] var, double eps,
                   Py_ssize_t c0, Py_ssize_t c1):
    with nogil:
        _forward(&x[0, 0, 0], &gamma[0], &beta[0], &y[0, 0, 0], &mean[0], &var[0],
                 x.shape[0], x.shape[1], x.shape[2], eps, c0, c1)


def _backward_range(const real[:, :, ::1] gy, const real[:, :, ::1] x, const real[::1] mean,
                    const real[::1] inv_std, const real[::1] gamma, real[:, :, ::1] gx,
                    real[::1] ggamma, real[::1] gbeta, Py_ssize_t c0, Py_ssize_t c1):
    cdef real* gxp = NULL if gx is None else &gx[0, 0, 0]
    with nogil:
        _backward(&gy[0, 0, 0], &x[0, 0, 0], &mean[0], &inv_std[0], &gamma[0], gxp,
                  &ggamma[0], &gbeta[0], x.shape[0], x.shape[1], x.shape[2], c0, c1)


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
    if x.size:
        _split_channels(lambda c0, c1: _forward_range(x, gamma, beta, y, mean, var, eps,
                                                      c0, c1), x.size, c)
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
    if x.size:
        _split_channels(lambda c0, c1: _backward_range(gy, x, mean, inv_std, gamma, gx,
                                                       ggamma, gbeta, c0, c1), x.size, c)
    return gx, ggamma, gbeta
