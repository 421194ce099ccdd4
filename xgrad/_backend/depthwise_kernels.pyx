# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Depthwise 2-D convolution (groups == input channels, as MobileNet's):
conv, its input gradient (conv_transpose with the same grouping) and its
weight gradient as direct per-channel stencils (depthwise.h), where im2col
builds columns of C/groups * kh * kw = 9 rows and runs one tiny product per
group.

conv and the input gradient split the (sample, channel) planes over
xgrad's worker pool, the weight gradient the channels (each sums its
samples in order): each output element is summed by one thread in one
order, so results do not depend on the thread count.
"""

cimport numpy as cnp
from libc.stdlib cimport calloc, free, malloc

from xgrad._backend.native_kernels cimport pool_threads, run_chunks, vector_path

import numpy

cnp.import_array()

cdef extern from "depthwise.h" nogil:
    enum: XGRAD_DW_MAX_TAPS
    ctypedef struct dw_geometry:
        Py_ssize_t n, c, m, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, hq, wq
    int dw_plan(dw_geometry* g)
    Py_ssize_t dw_work_size(const dw_geometry* g)
    int xgrad_vector_set_path(int path)
    int xgrad_vector_get_path()
    void dw_forward_f32(const float* x, const float* w, const float* b, float* y,
                        const dw_geometry* g, Py_ssize_t lo, Py_ssize_t hi, float* work)
    void dw_forward_f64(const double* x, const double* w, const double* b, double* y,
                        const dw_geometry* g, Py_ssize_t lo, Py_ssize_t hi, double* work)
    void dw_backward_f32(const float* gy, const float* w, float* gx, const dw_geometry* g,
                         Py_ssize_t lo, Py_ssize_t hi, float* work)
    void dw_backward_f64(const double* gy, const double* w, double* gx, const dw_geometry* g,
                         Py_ssize_t lo, Py_ssize_t hi, double* work)
    void dw_grad_weight_f32(const float* x, const float* gy, float* gw, const dw_geometry* g,
                            Py_ssize_t lo, Py_ssize_t hi, float* work, double* acc)
    void dw_grad_weight_f64(const double* x, const double* gy, double* gw,
                            const dw_geometry* g, Py_ssize_t lo, Py_ssize_t hi, double* work,
                            double* acc)

# A split over the pool: at least this many output elements (times taps) a
# thread, and about this many chunks a thread (for balance).
DEF GRAIN = 32768
DEF CHUNKS_A_THREAD = 4

cdef enum Kernel:
    FORWARD, BACKWARD, GRAD_WEIGHT


cdef struct Job:
    dw_geometry g
    int kernel
    bint f32
    const void* a  # x (forward, grad_weight) or gy (backward)
    const void* b  # w (forward, backward) or gy (grad_weight)
    const void* bias
    void* out
    Py_ssize_t units, per_chunk  # planes (channels for grad_weight), a chunk's
    bint failed


cdef void _chunk(void* ctx, Py_ssize_t chunk) noexcept nogil:
    cdef Job* j = <Job*>ctx
    cdef Py_ssize_t lo = chunk * j.per_chunk
    cdef Py_ssize_t hi = min(lo + j.per_chunk, j.units)
    cdef size_t item = sizeof(float) if j.f32 else sizeof(double)
    cdef Py_ssize_t size = dw_work_size(&j.g)
    cdef void* work = calloc(size + 16, item)
    # the weight gradient's sums, then its partial sums (32 lanes at most)
    cdef double* acc = <double*>malloc(j.g.m * j.g.kh * j.g.kw * 33 * sizeof(double) + 8)
    if work == NULL or acc == NULL:
        j.failed = True
        free(work)
        free(acc)
        return
    if j.kernel == FORWARD:
        if j.f32:
            dw_forward_f32(<const float*>j.a, <const float*>j.b, <const float*>j.bias,
                           <float*>j.out, &j.g, lo, hi, <float*>work)
        else:
            dw_forward_f64(<const double*>j.a, <const double*>j.b, <const double*>j.bias,
                           <double*>j.out, &j.g, lo, hi, <double*>work)
    elif j.kernel == BACKWARD:
        if j.f32:
            dw_backward_f32(<const float*>j.a, <const float*>j.b, <float*>j.out, &j.g, lo,
                            hi, <float*>work)
        else:
            dw_backward_f64(<const double*>j.a, <const double*>j.b, <double*>j.out, &j.g, lo,
                            hi, <double*>work)
    else:
        if j.f32:
            dw_grad_weight_f32(<const float*>j.a, <const float*>j.b, <float*>j.out, &j.g, lo,
                               hi, <float*>work, acc)
        else:
            dw_grad_weight_f64(<const double*>j.a, <const double*>j.b, <double*>j.out, &j.g,
                               lo, hi, <double*>work, acc)
    free(work)
    free(acc)


cdef bint _run(Job* j) noexcept nogil:
    """Run the job over its units, split over the pool where each thread
    gets GRAIN elements or more; False where memory ran out."""
    cdef dw_geometry* g = &j.g
    cdef Py_ssize_t elements = g.n * g.c * g.m * g.oh * g.ow * g.kh * g.kw
    cdef Py_ssize_t nt = min(<Py_ssize_t>pool_threads(), j.units, elements // GRAIN)
    xgrad_vector_set_path(vector_path())
    j.failed = False
    if j.units == 0:
        return True
    if nt <= 1:
        j.per_chunk = j.units
        _chunk(j, 0)
    else:
        j.per_chunk = (j.units + nt * CHUNKS_A_THREAD - 1) // (nt * CHUNKS_A_THREAD)
        run_chunks(_chunk, j, (j.units + j.per_chunk - 1) // j.per_chunk)
    return not j.failed


def cpu_path():
    """The dispatch path these kernels run: native_kernels.cpu_path()'s."""
    from xgrad._backend import native_kernels
    xgrad_vector_set_path(vector_path())
    return native_kernels.CPU_PATH_NAMES[xgrad_vector_get_path()]


cdef bint _geometry(Job* j, tuple xshape, tuple yshape, tuple ksize, tuple stride, tuple pad,
                    tuple dilate) except -1:
    cdef dw_geometry* g = &j.g
    g.n, g.c, g.h, g.w = xshape
    g.m = yshape[1] // g.c
    g.oh, g.ow = yshape[2], yshape[3]
    g.kh, g.kw = ksize
    g.sh, g.sw = stride
    g.ph, g.pw = pad
    g.dh, g.dw = dilate
    if (yshape[0] != g.n or g.m * g.c != yshape[1] or g.sh < 1 or g.sw < 1 or g.dh < 1
            or g.dw < 1 or g.ph < 0 or g.pw < 0 or g.kh < 1 or g.kw < 1):
        raise ValueError('depthwise: x {} and y {} are not a depthwise convolution'.format(
            xshape, yshape))
    if g.oh < 1 or g.ow < 1:
        return False
    return dw_plan(g)


cdef void _check(cnp.ndarray a, object dtype, tuple shape, str name) except *:
    if (a.dtype != dtype or not a.flags.c_contiguous or not a.flags.aligned
            or (<object>a).shape != shape):
        raise ValueError('depthwise: {} must be a C-contiguous aligned {} array of shape {}, '
                         'not {} {}'.format(name, dtype, shape, a.dtype, (<object>a).shape))


def applies(tuple ksize):
    """Whether the kernels take a window of ``ksize`` (2-D, at most
    XGRAD_DW_MAX_TAPS taps)."""
    return len(ksize) == 2 and ksize[0] * ksize[1] <= XGRAD_DW_MAX_TAPS


cdef object _float_dtype(cnp.ndarray a):
    """``a``'s dtype, float32 or float64 (else TypeError)."""
    dtype = a.dtype
    if dtype != numpy.float32 and dtype != numpy.float64:
        raise TypeError('depthwise: float32 or float64, not {}'.format(dtype))
    return dtype


cdef void _launch(Job* j, int kernel, cnp.ndarray a, cnp.ndarray b, cnp.ndarray out,
                  void* bias, Py_ssize_t units) except *:
    """Run ``kernel`` on operands a, b into ``out`` over ``units`` planes (or
    channels) of the planned geometry ``j.g``."""
    cdef bint ok
    j.kernel, j.f32 = kernel, out.dtype == numpy.float32
    j.a, j.b, j.out, j.bias = cnp.PyArray_DATA(a), cnp.PyArray_DATA(b), cnp.PyArray_DATA(out), bias
    j.units = units
    with nogil:
        ok = _run(j)
    if not ok:
        raise MemoryError('depthwise: no work space')


def conv_2d(cnp.ndarray x, cnp.ndarray w, object b, cnp.ndarray y, tuple stride, tuple pad,
            tuple dilate):
    """y (N, C M, oh, ow) = the depthwise convolution of x (N, C, h, w) with
    w (C M, 1, kh, kw), plus b (C M,) unless None; all C-contiguous, one
    float dtype. y's spatial size says the output (cover_all included)."""
    cdef Job j
    dtype = _float_dtype(x)
    _check(x, dtype, (<object>x).shape, 'x')
    _check(y, dtype, (<object>y).shape, 'y')
    if not _geometry(&j, (<object>x).shape, (<object>y).shape, (<object>w).shape[2:], stride, pad,
                     dilate):
        y.fill(0)
        if b is not None:
            y += numpy.asarray(b).reshape(1, -1, 1, 1)
        return y
    _check(w, dtype, (j.g.c * j.g.m, 1, j.g.kh, j.g.kw), 'w')
    if b is not None:
        _check(b, dtype, (j.g.c * j.g.m,), 'b')
    _launch(&j, FORWARD, x, w, y, NULL if b is None else cnp.PyArray_DATA(<cnp.ndarray>b),
            j.g.n * j.g.c)
    return y


def conv_transpose_2d(cnp.ndarray gy, cnp.ndarray w, cnp.ndarray gx, tuple stride, tuple pad,
                      tuple dilate):
    """gx (N, C, h, w) = conv's input gradient of the depthwise convolution
    (conv_2d's adjoint in x) from gy (N, C M, oh, ow), w (C M, 1, kh, kw)."""
    cdef Job j
    dtype = _float_dtype(gy)
    _check(gy, dtype, (<object>gy).shape, 'gy')
    _check(gx, dtype, (<object>gx).shape, 'gx')
    if not _geometry(&j, (<object>gx).shape, (<object>gy).shape, (<object>w).shape[2:], stride,
                     pad, dilate):
        gx.fill(0)
        return gx
    _check(w, dtype, (j.g.c * j.g.m, 1, j.g.kh, j.g.kw), 'w')
    _launch(&j, BACKWARD, gy, w, gx, NULL, j.g.n * j.g.c)
    return gx


def grad_weight_2d(cnp.ndarray x, cnp.ndarray gy, cnp.ndarray gw, tuple stride, tuple pad,
                   tuple dilate):
    """gw (C M, 1, kh, kw) = the depthwise convolution's weight gradient from
    x (N, C, h, w) and gy (N, C M, oh, ow)."""
    cdef Job j
    dtype = _float_dtype(x)
    _check(x, dtype, (<object>x).shape, 'x')
    _check(gy, dtype, (<object>gy).shape, 'gy')
    _check(gw, dtype, (<object>gw).shape, 'gw')
    if not _geometry(&j, (<object>x).shape, (<object>gy).shape, (<object>gw).shape[2:], stride,
                     pad, dilate):
        gw.fill(0)
        return gw
    _check(gw, dtype, (j.g.c * j.g.m, 1, j.g.kh, j.g.kw), 'gw')
    _launch(&j, GRAD_WEIGHT, x, gy, gw, NULL, j.g.c)
    return gw
