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

import os
from concurrent.futures import ThreadPoolExecutor

import numpy

ctypedef fused real:
    float
    double

# Below this many elements a thread hand-off costs more than it saves.
PARALLEL_SIZE = 1 << 18
# The kernels release the GIL, so plain threads run them in parallel; a
# blocking hand-off (not OpenMP's spinning barrier) stays fast when the
# cores are shared with other processes.
_THREADS = max(1, min(os.cpu_count() or 1, 8))
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


def _contiguous(a, dtype):
    return numpy.ascontiguousarray(a, dtype=dtype)


def batch_norm_forward(x, gamma, beta, double eps):
    """(y, mean, var) for ``x`` of shape (N, C, L), float32 or float64;
    ``gamma``/``beta`` of C elements; var is the biased variance. Statistics
    are accumulated in double, in two passes (no cancellation)."""
    x = _contiguous(x, x.dtype)
    n, c, l = x.shape
    gamma = _contiguous(gamma, x.dtype).reshape(c)
    beta = _contiguous(beta, x.dtype).reshape(c)
    y = numpy.empty_like(x)
    mean = numpy.empty(c, x.dtype)
    var = numpy.empty(c, x.dtype)
    if x.dtype == numpy.float32:
        _forward_f32(x, gamma, beta, y, mean, var, eps)
    else:
        _forward_f64(x, gamma, beta, y, mean, var, eps)
    return y, mean, var


def batch_norm_backward(gy, x, mean, inv_std, gamma, bint need_gx=True):
    """(gx or None, ggamma, gbeta) of batch_norm on (N, C, L) arrays."""
    x = _contiguous(x, x.dtype)
    gy = _contiguous(gy, x.dtype)
    n, c, l = x.shape
    gx = numpy.empty_like(x) if need_gx else None
    ggamma = numpy.empty(c, x.dtype)
    gbeta = numpy.empty(c, x.dtype)
    args = (gy, x, _contiguous(mean, x.dtype), _contiguous(inv_std, x.dtype),
            _contiguous(gamma, x.dtype).reshape(c), gx, ggamma, gbeta)
    if x.dtype == numpy.float32:
        _backward_f32(*args)
    else:
        _backward_f64(*args)
    return gx, ggamma, gbeta


def _forward_f32(float[:, :, ::1] x, float[::1] gamma, float[::1] beta,
                 float[:, :, ::1] y, float[::1] mean, float[::1] var, double eps):
    if x.shape[0] * x.shape[1] * x.shape[2] == 0:
        return _empty_stats(mean, var)

    def run(Py_ssize_t c0, Py_ssize_t c1):
        with nogil:
            _forward(&x[0, 0, 0], &gamma[0], &beta[0], &y[0, 0, 0], &mean[0], &var[0],
                     x.shape[0], x.shape[1], x.shape[2], eps, c0, c1)
    _split_channels(run, x.shape[0] * x.shape[1] * x.shape[2], x.shape[1])


def _forward_f64(double[:, :, ::1] x, double[::1] gamma, double[::1] beta,
                 double[:, :, ::1] y, double[::1] mean, double[::1] var, double eps):
    if x.shape[0] * x.shape[1] * x.shape[2] == 0:
        return _empty_stats(mean, var)

    def run(Py_ssize_t c0, Py_ssize_t c1):
        with nogil:
            _forward(&x[0, 0, 0], &gamma[0], &beta[0], &y[0, 0, 0], &mean[0], &var[0],
                     x.shape[0], x.shape[1], x.shape[2], eps, c0, c1)
    _split_channels(run, x.shape[0] * x.shape[1] * x.shape[2], x.shape[1])


def _empty_stats(mean, var):
    """An empty batch: NaN statistics, as NumPy's mean of nothing."""
    numpy.asarray(mean)[...] = numpy.nan
    numpy.asarray(var)[...] = numpy.nan


def _backward_f32(float[:, :, ::1] gy, float[:, :, ::1] x, float[::1] mean,
                  float[::1] inv_std, float[::1] gamma, gx, float[::1] ggamma,
                  float[::1] gbeta):
    cdef float[:, :, ::1] gxv
    cdef float* gxp = NULL
    if x.shape[0] * x.shape[1] * x.shape[2] == 0:
        numpy.asarray(ggamma)[...] = 0
        numpy.asarray(gbeta)[...] = 0
        return
    if gx is not None:
        gxv = gx
        gxp = &gxv[0, 0, 0]

    def run(Py_ssize_t c0, Py_ssize_t c1):
        with nogil:
            _backward(&gy[0, 0, 0], &x[0, 0, 0], &mean[0], &inv_std[0], &gamma[0], gxp,
                      &ggamma[0], &gbeta[0], x.shape[0], x.shape[1], x.shape[2], c0, c1)
    _split_channels(run, x.shape[0] * x.shape[1] * x.shape[2], x.shape[1])


def _backward_f64(double[:, :, ::1] gy, double[:, :, ::1] x, double[::1] mean,
                  double[::1] inv_std, double[::1] gamma, gx, double[::1] ggamma,
                  double[::1] gbeta):
    cdef double[:, :, ::1] gxv
    cdef double* gxp = NULL
    if x.shape[0] * x.shape[1] * x.shape[2] == 0:
        numpy.asarray(ggamma)[...] = 0
        numpy.asarray(gbeta)[...] = 0
        return
    if gx is not None:
        gxv = gx
        gxp = &gxv[0, 0, 0]

    def run(Py_ssize_t c0, Py_ssize_t c1):
        with nogil:
            _backward(&gy[0, 0, 0], &x[0, 0, 0], &mean[0], &inv_std[0], &gamma[0], gxp,
                      &ggamma[0], &gbeta[0], x.shape[0], x.shape[1], x.shape[2], c0, c1)
    _split_channels(run, x.shape[0] * x.shape[1] * x.shape[2], x.shape[1])
