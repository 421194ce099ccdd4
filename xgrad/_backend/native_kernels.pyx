# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Fused CPU loops for elementwise forward and backward formulas.

Each kernel takes raw NumPy arrays and returns a new array, or falls back to
the same formula in NumPy when the operands are not C-contiguous float32 or
float64 arrays of one shape (a size-1 or fully broadcast operand counts as a
scalar and is fine). Why: NumPy runs ``gy * (1 - y * y)`` as three passes
with two temporaries and pays about a microsecond of dispatch per ufunc on
small arrays; one loop here does it in one pass, with the GIL released on
large arrays.
"""

cimport numpy as cnp
from libc.float cimport FLT_MAX
from libc.math cimport INFINITY, fabs
from libc.string cimport memcpy
from libc.stdint cimport uint16_t, uint32_t, uint64_t
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyTypeObject
from cpython.ref cimport PyObject, Py_INCREF

cdef extern from "select_loops.h" nogil:
    void xgrad_relu_f32(const float* x, float* out, Py_ssize_t n)
    void xgrad_relu_f64(const double* x, double* out, Py_ssize_t n)
    void xgrad_relu_grad_f32(const float* gy, const float* y, float* out, Py_ssize_t n)
    void xgrad_relu_grad_f64(const double* gy, const double* y, double* out, Py_ssize_t n)
    void xgrad_relu_grad_scalar_f32(float gy, const float* y, float* out, Py_ssize_t n)
    void xgrad_relu_grad_scalar_f64(double gy, const double* y, double* out, Py_ssize_t n)
    void xgrad_abs_grad_f32(const float* gy, const float* x, float* out, Py_ssize_t n)
    void xgrad_abs_grad_f64(const double* gy, const double* x, double* out, Py_ssize_t n)
    void xgrad_abs_grad_scalar_f32(float gy, const float* x, float* out, Py_ssize_t n)
    void xgrad_abs_grad_scalar_f64(double gy, const double* x, double* out, Py_ssize_t n)
    void xgrad_compare_select_f32(const float* gy, const float* a, const float* b,
                                  bint b_scalar, float s, int op, float* out, Py_ssize_t n)
    void xgrad_compare_select_f64(const double* gy, const double* a, const double* b,
                                  bint b_scalar, double s, int op, double* out,
                                  Py_ssize_t n)
    void xgrad_select_f32(const cnp.npy_bool* c, const float* a, const float* b, float va,
                          float vb, float* out, Py_ssize_t n)
    void xgrad_select_f64(const cnp.npy_bool* c, const double* a, const double* b,
                          double va, double vb, double* out, Py_ssize_t n)

cdef extern from "huber_loops.h" nogil:
    void xgrad_huber_f32(const float* x1, const float* x2, float d, float half_d, float* out,
                         Py_ssize_t n)
    void xgrad_huber_f64(const double* x1, const double* x2, double d, double half_d,
                         double* out, Py_ssize_t n)
    void xgrad_huber_grad_f32(const float* gy, const float* x1, const float* x2, float d,
                              float* g1, float* g2, Py_ssize_t n)
    void xgrad_huber_grad_f64(const double* gy, const double* x1, const double* x2, double d,
                              double* g1, double* g2, Py_ssize_t n)

cdef extern from "numpy/arrayobject.h":
    PyTypeObject PyArray_Type
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.PyArray_Descr* descr,
                                int nd, cnp.npy_intp* dims, cnp.npy_intp* strides,
                                void* data, int flags, PyObject* obj)

import numpy

cnp.import_array()

cdef type _NP_FLOAT32 = numpy.float32
cdef type _NP_FLOAT64 = numpy.float64

ctypedef fused real:
    float
    double

# Arithmetic loops here beat NumPy's at every size; on large operands they
# also release the GIL. (Transcendental functions: the vector kernels below.)
cdef Py_ssize_t SMALL = 4096
cdef Py_ssize_t NOGIL_SIZE = 32768


cdef extern from "half_cast.h" nogil:
    int xgrad_half_cast_supported()
    void xgrad_float_to_half(const float*, unsigned short*, Py_ssize_t)
    void xgrad_half_to_float(const unsigned short*, float*, Py_ssize_t)


cdef extern from "vector_math.h" nogil:
    ctypedef void (*xgrad_unary_f32)(const float*, float*, Py_ssize_t, double)
    ctypedef void (*xgrad_unary_f64)(const double*, double*, Py_ssize_t, double)
    ctypedef void (*xgrad_grad_f32)(const float*, const float*, const float*, float*,
                                    Py_ssize_t, double)
    ctypedef void (*xgrad_grad_f64)(const double*, const double*, const double*, double*,
                                    Py_ssize_t, double)
    ctypedef struct xgrad_f16:
        pass
    enum: XGRAD_HAS_FLOAT16
    void xgrad_unary_f16(xgrad_unary_f32 f, const xgrad_f16* x, xgrad_f16* y, Py_ssize_t n,
                         double p)
    void xgrad_grad_f16(xgrad_grad_f32 f, const xgrad_f16* gy, const xgrad_f16* x,
                        const xgrad_f16* y, xgrad_f16* out, Py_ssize_t n, double p)
    void xgrad_exp_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_exp_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_erf_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_erf_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_erf_grad_f32(const float*, const float*, const float*, float*,
                            Py_ssize_t, double)
    void xgrad_erf_grad_f64(const double*, const double*, const double*, double*,
                            Py_ssize_t, double)
    void xgrad_log_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_log_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_tanh_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_tanh_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_sigmoid_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_sigmoid_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_softplus_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_softplus_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_leaky_relu_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_leaky_relu_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_elu_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_gelu_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_gelu_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_gelu_tanh_f32(const float*, float*, Py_ssize_t, double)
    void xgrad_gelu_tanh_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_gelu_grad_f32(const float*, const float*, const float*, float*,
                             Py_ssize_t, double)
    void xgrad_gelu_grad_f64(const double*, const double*, const double*, double*,
                             Py_ssize_t, double)
    void xgrad_gelu_tanh_grad_f32(const float*, const float*, const float*, float*,
                                  Py_ssize_t, double)
    void xgrad_gelu_tanh_grad_f64(const double*, const double*, const double*, double*,
                                  Py_ssize_t, double)
    void xgrad_elu_f64(const double*, double*, Py_ssize_t, double)
    void xgrad_softplus_grad_f32(const float*, const float*, const float*, float*,
                                 Py_ssize_t, double)
    void xgrad_softplus_grad_f64(const double*, const double*, const double*, double*,
                                 Py_ssize_t, double)
    void xgrad_leaky_relu_grad_f32(const float*, const float*, const float*, float*,
                                   Py_ssize_t, double)
    void xgrad_leaky_relu_grad_f64(const double*, const double*, const double*, double*,
                                   Py_ssize_t, double)
    void xgrad_elu_grad_f32(const float*, const float*, const float*, float*,
                            Py_ssize_t, double)
    void xgrad_elu_grad_f64(const double*, const double*, const double*, double*,
                            Py_ssize_t, double)
    void xgrad_tanh_grad_f32(const float*, const float*, const float*, float*,
                             Py_ssize_t, double)
    void xgrad_tanh_grad_f64(const double*, const double*, const double*, double*,
                             Py_ssize_t, double)
    void xgrad_sigmoid_grad_f32(const float*, const float*, const float*, float*,
                                Py_ssize_t, double)
    void xgrad_sigmoid_grad_f64(const double*, const double*, const double*, double*,
                                Py_ssize_t, double)
    double xgrad_sum_f32(const float*, Py_ssize_t)
    double xgrad_sum_f64(const double*, Py_ssize_t)
    double xgrad_sum_planes_f32(const float*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    double xgrad_sum_planes_f64(const double*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void xgrad_column_sums_f32(const float*, float*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void xgrad_column_sums_f64(const double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t)
    int XGRAD_SHORT_ROW
    void xgrad_extremum_rows_f32(const float*, float*, Py_ssize_t, Py_ssize_t, int)
    void xgrad_binary_rows_f32(int, int, const float*, const float*, float*, Py_ssize_t,
                               Py_ssize_t)
    void xgrad_binary_planes_f32(int, int, const float*, const float*, float*, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void xgrad_binary_planes_f64(int, int, const double*, const double*, double*, Py_ssize_t,
                                 Py_ssize_t, Py_ssize_t, Py_ssize_t)
    void xgrad_binary_rows_f64(int, int, const double*, const double*, double*, Py_ssize_t,
                               Py_ssize_t)
    void xgrad_extremum_rows_f64(const double*, double*, Py_ssize_t, Py_ssize_t, int)
    void xgrad_softmax_rows_f32(const float*, float*, Py_ssize_t, Py_ssize_t, int)
    void xgrad_softmax_rows_f64(const double*, double*, Py_ssize_t, Py_ssize_t, int)
    void xgrad_softmax_grad_rows_f32(const float*, const float*, float*, Py_ssize_t,
                                     Py_ssize_t, int)
    void xgrad_softmax_grad_rows_f64(const double*, const double*, double*, Py_ssize_t,
                                     Py_ssize_t, int)
    enum: XGRAD_MID_TILE
    void xgrad_softmax_mid_f32(const float*, float*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                               Py_ssize_t, int)
    void xgrad_softmax_mid_f64(const double*, double*, Py_ssize_t, Py_ssize_t, Py_ssize_t,
                               Py_ssize_t, int)
    void xgrad_softmax_grad_mid_f32(const float*, const float*, float*, Py_ssize_t,
                                    Py_ssize_t, Py_ssize_t, Py_ssize_t, int)
    void xgrad_softmax_grad_mid_f64(const double*, const double*, double*, Py_ssize_t,
                                    Py_ssize_t, Py_ssize_t, Py_ssize_t, int)
    enum: XGRAD_HAS_PATHS
    int xgrad_vector_supported(int path)
    int xgrad_vector_set_path(int path)
    int xgrad_vector_get_path()


# -- dispatch path of the vector kernels ----------------------------------------
#
# vector_math.h compiles every vector kernel for SSE2 (the x86-64 baseline),
# AVX2 and AVX-512 and runs the path selected here, once, at import: the
# widest this CPU supports, or the one XGRAD_CPU_PATH names, so that tests
# can run each path a CPU has (CI does: see .ci/run). A path this CPU does
# not support, or an unknown name, is an ImportError saying what the CPU
# supports: falling back would let a CI step that meant to test AVX-512 pass
# on SSE2 without anyone noticing.

CPU_PATH_NAMES = ('sse2', 'avx2', 'avx512') if XGRAD_HAS_PATHS else ('generic',)
CPU_PATH_VARIABLE = 'XGRAD_CPU_PATH'


def cpu_paths():
    """The dispatch paths of the vector kernels this CPU supports, narrowest
    first (``('sse2', 'avx2')`` on a CPU without AVX-512; ``('generic',)``
    where xgrad was built without per-target variants)."""
    return tuple(name for i, name in enumerate(CPU_PATH_NAMES) if xgrad_vector_supported(i))


def cpu_path():
    """The dispatch path the vector kernels run: one of :func:`cpu_paths`."""
    return CPU_PATH_NAMES[xgrad_vector_get_path()]


cdef int vector_path() noexcept nogil:
    return xgrad_vector_get_path()


def _select_cpu_path(value):
    """Select the path ``value`` names (``XGRAD_CPU_PATH``'s value; empty or
    ``auto``: the widest this CPU supports); raises ImportError for a name
    that is not a path or a path this CPU does not support."""
    wanted = (value or '').strip().lower() or 'auto'
    supported = cpu_paths()
    if wanted == 'auto':
        wanted = supported[len(supported) - 1]  # (wraparound=False here)
    if wanted not in CPU_PATH_NAMES:
        raise ImportError('{}={!r} is not a dispatch path: use auto or one of {} (this CPU '
                          'supports {})'.format(CPU_PATH_VARIABLE, value,
                                                ', '.join(CPU_PATH_NAMES), ', '.join(supported)))
    if wanted not in supported or not xgrad_vector_set_path(CPU_PATH_NAMES.index(wanted)):
        raise ImportError('{}={} asks for a path this CPU does not support: it supports {} '
                          '(unset {} or set it to auto to use the widest)'.format(
                              CPU_PATH_VARIABLE, value, ', '.join(supported), CPU_PATH_VARIABLE))
    return wanted


def _cpu_path_environment():
    import os
    return os.environ.get(CPU_PATH_VARIABLE, '')


_select_cpu_path(_cpu_path_environment())


cdef extern from "numpy/arrayobject.h":
    enum: NPY_HALF


cdef struct UnaryKernel:
    xgrad_unary_f32 f32
    xgrad_unary_f64 f64


cdef struct GradKernel:
    xgrad_grad_f32 f32
    xgrad_grad_f64 f64


cdef UnaryKernel K_EXP = UnaryKernel(xgrad_exp_f32, xgrad_exp_f64)
cdef UnaryKernel K_LOG = UnaryKernel(xgrad_log_f32, xgrad_log_f64)
cdef UnaryKernel K_ERF = UnaryKernel(xgrad_erf_f32, xgrad_erf_f64)
cdef GradKernel G_ERF = GradKernel(xgrad_erf_grad_f32, xgrad_erf_grad_f64)
cdef UnaryKernel K_TANH = UnaryKernel(xgrad_tanh_f32, xgrad_tanh_f64)
cdef UnaryKernel K_SIGMOID = UnaryKernel(xgrad_sigmoid_f32, xgrad_sigmoid_f64)
cdef UnaryKernel K_SOFTPLUS = UnaryKernel(xgrad_softplus_f32, xgrad_softplus_f64)
cdef UnaryKernel K_LEAKY_RELU = UnaryKernel(xgrad_leaky_relu_f32, xgrad_leaky_relu_f64)
cdef UnaryKernel K_ELU = UnaryKernel(xgrad_elu_f32, xgrad_elu_f64)
cdef GradKernel G_SOFTPLUS = GradKernel(xgrad_softplus_grad_f32, xgrad_softplus_grad_f64)
cdef GradKernel G_LEAKY_RELU = GradKernel(xgrad_leaky_relu_grad_f32,
                                          xgrad_leaky_relu_grad_f64)
cdef GradKernel G_ELU = GradKernel(xgrad_elu_grad_f32, xgrad_elu_grad_f64)
cdef GradKernel G_TANH = GradKernel(xgrad_tanh_grad_f32, xgrad_tanh_grad_f64)
cdef GradKernel G_SIGMOID = GradKernel(xgrad_sigmoid_grad_f32, xgrad_sigmoid_grad_f64)
cdef UnaryKernel K_GELU = UnaryKernel(xgrad_gelu_f32, xgrad_gelu_f64)
cdef UnaryKernel K_GELU_TANH = UnaryKernel(xgrad_gelu_tanh_f32, xgrad_gelu_tanh_f64)
cdef GradKernel G_GELU = GradKernel(xgrad_gelu_grad_f32, xgrad_gelu_grad_f64)
cdef GradKernel G_GELU_TANH = GradKernel(xgrad_gelu_tanh_grad_f32, xgrad_gelu_tanh_grad_f64)


# -- threads ------------------------------------------------------------------
#
# A large array is cut into one contiguous chunk per thread (our worker pool,
# see thread_pool.h); each chunk runs the same serial loop, so a result does
# not depend on the number of threads. An op splits only when every thread
# gets at least a grain of elements: below that, waking the workers costs
# more than it saves (bench/threads.py measures where the split starts to
# pay).

cdef extern from "thread_pool.h" nogil:
    ctypedef void (*xgrad_task)(void* ctx, Py_ssize_t chunk) noexcept nogil
    enum: XGRAD_HAS_POOL
    int xgrad_pool_threads()
    void xgrad_pool_set_limit(int n)
    void xgrad_pool_init()
    void xgrad_pool_run(xgrad_task task, void* ctx, Py_ssize_t chunks)

xgrad_pool_init()


cdef void run_chunks(chunk_task task, void* ctx, Py_ssize_t chunks) noexcept nogil:
    xgrad_pool_run(<xgrad_task>task, ctx, chunks)


cdef int pool_threads() noexcept nogil:
    return xgrad_pool_threads()


# Elements per thread, at least: arithmetic is memory-bound and cheap per
# element, the vector kernels (exp, tanh, ...) cost several times more.
cdef Py_ssize_t GRAIN_ARITHMETIC = 65536
cdef Py_ssize_t GRAIN_VECTOR = 16384


cdef inline int _threads_for(Py_ssize_t n, Py_ssize_t grain) noexcept nogil:
    """How many threads an op on ``n`` elements uses."""
    if n < 2 * grain:
        return 1
    cdef int nt = xgrad_pool_threads()
    if nt > n // grain:
        nt = <int>(n // grain)
    return nt if nt > 1 else 1


cdef inline Py_ssize_t _chunk(Py_ssize_t n, int nt) noexcept nogil:
    """Elements per thread: n / nt rounded up to whole 64-byte lines."""
    return ((n + nt - 1) // nt + 15) // 16 * 16


def max_threads():
    """The number of threads a large CPU op runs on: OMP_NUM_THREADS when it
    is set, else the CPUs this process may use (1 without pthreads)."""
    return xgrad_pool_threads()


def _set_grains(Py_ssize_t arithmetic, Py_ssize_t vector):
    """Set the grains (for bench/threads.py, which measures them); returns
    the old ones."""
    global GRAIN_ARITHMETIC, GRAIN_VECTOR
    old = (GRAIN_ARITHMETIC, GRAIN_VECTOR)
    GRAIN_ARITHMETIC, GRAIN_VECTOR = max(arithmetic, 1), max(vector, 1)
    return old


def set_thread_limit(int n):
    """Use at most ``n`` threads (0: no limit; for tests and benchmarks)."""
    if n < 0:
        raise ValueError(f'thread limit must be >= 0, got {n}')
    xgrad_pool_set_limit(n)


# What a split op hands each chunk: the operands and the chunk's size. ``n``
# counts elements (rows, blocks for the row and block kernels), ``chunk``
# how many of them a chunk takes.
cdef struct Span:
    int t
    Py_ssize_t n, chunk, item
    int f              # a Formula
    UnaryKernel uk
    GradKernel gk
    double p
    bint sa, sb, flag
    char* a
    char* b
    char* c
    char* out
    Py_ssize_t m, step
    double* sums


cdef inline void _split(xgrad_task task, Span* s, int nt) noexcept nogil:
    """Run ``task`` over ``s.n`` elements in ``nt`` chunks (one per thread);
    one thread: the whole span as one chunk, in this thread."""
    if nt <= 1:
        s.chunk = s.n
        task(s, 0)
        return
    s.chunk = _chunk(s.n, nt)
    xgrad_pool_run(task, s, (s.n + s.chunk - 1) // s.chunk)


cdef void _run_span(xgrad_task task, Span* s, int nt):
    """Run ``task`` over all ``s.n`` elements, split over ``nt`` threads;
    without the GIL when split or from NOGIL_SIZE elements on."""
    if nt > 1 or s.n >= NOGIL_SIZE:
        with nogil:
            _split(task, s, nt)
    else:
        _split(task, s, 1)


cdef inline void _split_units(xgrad_task task, void* ctx, Py_ssize_t n, int nt,
                              Py_ssize_t* chunk) noexcept nogil:
    """Run ``task(ctx, c)`` over ``n`` units (rows, blocks, tiles) in ``nt``
    chunks of ``chunk[0]`` units; one thread (or one unit): all of them as
    one chunk, in this thread."""
    if nt > n:
        nt = <int>n
    if nt <= 1:
        chunk[0] = n
        task(ctx, 0)
        return
    chunk[0] = (n + nt - 1) // nt
    xgrad_pool_run(task, ctx, (n + chunk[0] - 1) // chunk[0])


cdef inline void _split_rows(xgrad_task task, Span* s, int nt) noexcept nogil:
    """_split_units over ``s.n`` rows (or blocks) of a Span."""
    _split_units(task, s, s.n, nt, &s.chunk)


cpdef bint splits(Py_ssize_t n):
    """Whether a memory-bound pass over ``n`` elements (a copy, arithmetic)
    runs on two threads or more: the pool's rule, for the ops that decide
    between a kernel on the pool and NumPy's single-threaded loop."""
    return _threads_for(n, GRAIN_ARITHMETIC) > 1


cdef enum Formula:
    MUL, ADD, SUB, DIV,              # a op b
    TANH_GRAD,                       # a * (1 - b*b)        (gy, y)
    SIGMOID_GRAD,                    # a * b * (1 - b)      (gy, y)
    RELU_GRAD,                       # b > 0 ? a : 0        (gy, y)
    SQRT_GRAD,                       # a / (2b)             (gy, y)
    SQUARE_GRAD,                     # 2 * a * b            (gy, x)
    ABS_GRAD,                        # a * sign(b)          (gy, x)
    RELU, NEG                        # f(a)


cdef inline int _kind(object a, Py_ssize_t* size, bint* scalar):
    """NPY_FLOAT / NPY_DOUBLE for a usable operand (native byte order), else
    -1."""
    if type(a) is not cnp.ndarray:
        return -1
    cdef cnp.ndarray arr = <cnp.ndarray>a
    cdef int t = cnp.PyArray_TYPE(arr)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or not cnp.PyArray_ISNOTSWAPPED(arr):
        return -1
    size[0] = cnp.PyArray_SIZE(arr)
    if cnp.PyArray_IS_C_CONTIGUOUS(arr):
        scalar[0] = size[0] == 1
        return t
    # A broadcast scalar: every stride 0 (e.g. the gradient of a sum).
    cdef int i
    for i in range(cnp.PyArray_NDIM(arr)):
        if cnp.PyArray_STRIDE(arr, i) != 0 and cnp.PyArray_DIM(arr, i) != 1:
            return -1
    scalar[0] = True
    return t


cdef bint _same_shape(cnp.ndarray a, cnp.ndarray b):
    cdef int i, nd = cnp.PyArray_NDIM(a)
    if nd != cnp.PyArray_NDIM(b):
        return False
    for i in range(nd):
        if cnp.PyArray_DIM(a, i) != cnp.PyArray_DIM(b, i):
            return False
    return True


cdef bint _fits(cnp.ndarray s, cnp.ndarray o):
    """Whether broadcasting ``s`` against ``o`` leaves ``o``'s shape as is."""
    cdef int ns = cnp.PyArray_NDIM(s), no = cnp.PyArray_NDIM(o), i
    if ns > no:
        return False
    for i in range(ns):
        if cnp.PyArray_DIM(s, ns - 1 - i) != 1 and (
                cnp.PyArray_DIM(s, ns - 1 - i) != cnp.PyArray_DIM(o, no - 1 - i)):
            return False
    return True


cdef inline real _apply(Formula f, real a, real b) noexcept nogil:
    # The constants are typed: a bare 1 or 2 is a C double literal, which made
    # float32 formulas compute in double (not what NumPy's float32 formula
    # does) and kept the loops from vectorising.
    cdef real one = 1, two = 2
    if f == MUL:
        return a * b
    if f == ADD:
        return a + b
    if f == SUB:
        return a - b
    if f == DIV:
        return a / b
    if f == TANH_GRAD:
        return a * (one - b * b)
    if f == SIGMOID_GRAD:
        return a * b * (one - b)
    if f == RELU_GRAD:
        return a if b > 0 else 0  # a select, as xgrad_relu_grad: an inf or NaN a gives 0 here
    if f == SQRT_GRAD:
        return a / (b + b)
    if f == SQUARE_GRAD:
        return two * a * b
    if f == ABS_GRAD:
        return a * (one if b > 0 else (-one if b < 0 else (b if b != b else 0)))
    return 0


cdef void _loop2(Formula f, real* a, bint a_scalar, real* b, bint b_scalar,
                 real* out, Py_ssize_t n) noexcept nogil:
    """out = f(a, b) elementwise. Each formula gets its own plain loop (the
    formula test is outside the loop), so the compiler vectorises it."""
    cdef Py_ssize_t i
    cdef real sa, sb
    cdef real one = 1, two = 2  # typed: see _apply
    if f == RELU_GRAD and not a_scalar and not b_scalar:
        if real is float:
            xgrad_relu_grad_f32(a, b, out, n)
        else:
            xgrad_relu_grad_f64(a, b, out, n)
        return
    if f == ABS_GRAD and not b_scalar:  # (selects in C, as relu's)
        if real is float:
            if a_scalar:
                xgrad_abs_grad_scalar_f32(a[0], b, out, n)
            else:
                xgrad_abs_grad_f32(a, b, out, n)
        else:
            if a_scalar:
                xgrad_abs_grad_scalar_f64(a[0], b, out, n)
            else:
                xgrad_abs_grad_f64(a, b, out, n)
        return
    if not a_scalar and not b_scalar:
        if f == MUL:
            for i in range(n):
                out[i] = a[i] * b[i]
        elif f == ADD:
            for i in range(n):
                out[i] = a[i] + b[i]
        elif f == SUB:
            for i in range(n):
                out[i] = a[i] - b[i]
        elif f == DIV:
            for i in range(n):
                out[i] = a[i] / b[i]
        elif f == TANH_GRAD:
            for i in range(n):
                out[i] = a[i] * (one - b[i] * b[i])
        elif f == SIGMOID_GRAD:
            for i in range(n):
                out[i] = a[i] * b[i] * (one - b[i])
        elif f == RELU_GRAD:  # (taken by xgrad_relu_grad above)
            for i in range(n):
                out[i] = a[i] if b[i] > 0 else 0
        elif f == SQRT_GRAD:
            for i in range(n):
                out[i] = a[i] / (b[i] + b[i])
        elif f == SQUARE_GRAD:
            for i in range(n):
                out[i] = two * a[i] * b[i]
    elif a_scalar and not b_scalar:
        sa = a[0]
        if f == MUL:
            for i in range(n):
                out[i] = sa * b[i]
        elif f == ADD:
            for i in range(n):
                out[i] = sa + b[i]
        elif f == SUB:
            for i in range(n):
                out[i] = sa - b[i]
        elif f == DIV:
            for i in range(n):
                out[i] = sa / b[i]
        elif f == TANH_GRAD:
            for i in range(n):
                out[i] = sa * (one - b[i] * b[i])
        elif f == SIGMOID_GRAD:
            for i in range(n):
                out[i] = sa * b[i] * (one - b[i])
        elif f == RELU_GRAD:  # (in C: Cython's ?: kept a branch per element)
            if real is float:
                xgrad_relu_grad_scalar_f32(sa, b, out, n)
            else:
                xgrad_relu_grad_scalar_f64(sa, b, out, n)
        elif f == SQRT_GRAD:
            for i in range(n):
                out[i] = sa / (b[i] + b[i])
        elif f == SQUARE_GRAD:
            for i in range(n):
                out[i] = two * sa * b[i]
    elif b_scalar and not a_scalar:
        # (a plain loop per formula, as above: with _apply's test inside the
        # loop GCC kept ``x * 0.5`` scalar, 0.56 ns an element against 0.065)
        sb = b[0]
        if f == MUL:
            for i in range(n):
                out[i] = a[i] * sb
        elif f == ADD:
            for i in range(n):
                out[i] = a[i] + sb
        elif f == SUB:
            for i in range(n):
                out[i] = a[i] - sb
        elif f == DIV:
            for i in range(n):
                out[i] = a[i] / sb
        else:
            for i in range(n):
                out[i] = _apply(f, a[i], sb)
    else:
        sa = a[0]
        sb = b[0]
        for i in range(n):
            out[i] = _apply(f, sa, sb)


cdef inline void _run2(int t, Formula f, void* pa, bint sa, void* pb, bint sb,
                       void* po, Py_ssize_t n) noexcept nogil:
    """``_loop2`` for the dtype ``t`` (NPY_FLOAT or NPY_DOUBLE)."""
    if t == cnp.NPY_FLOAT:
        _loop2[float](f, <float*>pa, sa, <float*>pb, sb, <float*>po, n)
    else:
        _loop2[double](f, <double*>pa, sa, <double*>pb, sb, <double*>po, n)


cdef tuple _compacted(object a, object b, int ta, int tb):
    """(a, b) with the operand that _kind refused (``ta``/``tb`` < 0)
    replaced by _compact_broadcast's view of it, when the other is plain;
    None when there is no such operand."""
    if (ta < 0) == (tb < 0):
        return None
    if ta < 0:
        small = _compact_broadcast(a, b)
        return None if small is None else (small, b)
    small = _compact_broadcast(b, a)
    return None if small is None else (a, small)


cdef object _compact_broadcast(object v, object like):
    """The elements behind ``v``, a broadcast view (stride 0 along some axes
    of length > 1: the gradient of a sum or mean over them) of the plain
    array ``like``'s shape and dtype, as a C-contiguous view with those axes
    of length 1, for the row and plane loops; None otherwise (NumPy then
    copies each element through its buffered loop, on one thread)."""
    if type(v) is not cnp.ndarray or type(like) is not cnp.ndarray:
        return None
    cdef cnp.ndarray a = <cnp.ndarray>v
    cdef int i, nd = cnp.PyArray_NDIM(a)
    if (cnp.PyArray_TYPE(a) != cnp.PyArray_TYPE(<cnp.ndarray>like) or nd > 32
            or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>like)
            or not _same_shape(a, <cnp.ndarray>like)):
        return None
    key = []
    cdef bint found = False
    for i in range(nd):
        if cnp.PyArray_STRIDE(a, i) == 0 and cnp.PyArray_DIM(a, i) > 1:
            key.append(_FIRST)
            found = True
        else:
            key.append(_ALL)
    if not found:
        return None
    small = a[tuple(key)]
    return small if cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>small) else None


cdef bint _strided(object v):
    """Whether ``v`` is a float32/float64 array that _kind refuses for its
    layout alone: a slice or transpose (no stride-0 axis of length > 1),
    whose C-order copy the fused loops then take. The gradient of a
    concatenation or split is such a slice, and NumPy's fallbacks ran
    through it element by element (relu's gradient of a (512, 1024) half of
    a concatenation: 2 ms by NumPy's where, 0.1 ms copied and fused)."""
    if type(v) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>v
    cdef int i, t = cnp.PyArray_TYPE(a)
    if ((t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or cnp.PyArray_IS_C_CONTIGUOUS(a)
            or not cnp.PyArray_ISNOTSWAPPED(a)):
        return False
    for i in range(cnp.PyArray_NDIM(a)):
        if cnp.PyArray_STRIDE(a, i) == 0 and cnp.PyArray_DIM(a, i) > 1:
            return False
    return True


cdef object _c_order(object v):
    """A C-order copy of ``v`` where _strided, else ``v``."""
    return cnp.PyArray_NewCopy(<cnp.ndarray>v, cnp.NPY_CORDER) if _strided(v) else v


cdef object _FIRST = slice(0, 1)
cdef object _ALL = slice(None)


cdef bint _number_of(object v, int t, double* value) noexcept:
    """Whether NumPy computes ``array_of_t op v`` in dtype ``t`` with v cast
    to ``t``: a NumPy scalar of that dtype, or a Python float (an op's scalar
    operand is one) that float32 holds. A float beyond float32's range gives
    float64 on NumPy 1.x and an overflow warning on 2.x, so it stays NumPy's.
    The value goes to ``value``."""
    cdef double d
    if t == cnp.NPY_FLOAT:
        if type(v) is _NP_FLOAT32:
            value[0] = <float>v
            return True
        if type(v) is float:
            d = <double>v
            if d != d or d == INFINITY or d == -INFINITY or fabs(d) <= FLT_MAX:
                value[0] = d
                return True
        return False
    if t == cnp.NPY_DOUBLE and (type(v) is _NP_FLOAT64 or type(v) is float):
        value[0] = <double>v
        return True
    return False


cdef object _binary(Formula f, object a, object b):
    """The fused loop for two operands, or None if they do not qualify. One
    operand may be a number (see _number_of): ``x * 0.5`` then runs here too,
    not through NumPy's scalar conversion."""
    cdef Py_ssize_t na = 0, nb = 0, n
    cdef bint sa = False, sb = False
    cdef int ta = _kind(a, &na, &sa)
    cdef int tb = _kind(b, &nb, &sb)
    cdef double number
    pair = _compacted(a, b, ta, tb)
    if pair is not None:
        return _binary(f, pair[0], pair[1])
    if ta < 0 or tb < 0:  # (a slice or transpose: its C-order copy)
        ca, cb = _c_order(a), _c_order(b)
        if ca is not a or cb is not b:
            return _binary(f, ca, cb)
    if ta >= 0 and tb < 0 and _number_of(b, ta, &number):
        return _binary_number(f, <cnp.ndarray>a, na, sa, number, False, ta)
    if tb >= 0 and ta < 0 and _number_of(a, tb, &number):
        return _binary_number(f, <cnp.ndarray>b, nb, sb, number, True, tb)
    if ta < 0 or tb != ta:
        return None
    cdef cnp.ndarray shape_of
    if not sa and not sb and not (na == nb and _same_shape(<cnp.ndarray>a, <cnp.ndarray>b)):
        found = _binary_rows(f, <cnp.ndarray>a, na, <cnp.ndarray>b, nb, ta)
        if found is None:
            found = _binary_planes(f, <cnp.ndarray>a, na, <cnp.ndarray>b, nb, ta)
        return found
    if not sa:
        shape_of = <cnp.ndarray>a
        n = na
        if sb and not _fits(<cnp.ndarray>b, shape_of):
            return None
    elif not sb:
        shape_of = <cnp.ndarray>b
        n = nb
        if not _fits(<cnp.ndarray>a, shape_of):
            return None
    else:
        # Both scalars: the result has the broadcast shape of the two.
        if not _same_shape(<cnp.ndarray>a, <cnp.ndarray>b):
            return None
        shape_of = <cnp.ndarray>a
        n = na
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(
        cnp.PyArray_NDIM(shape_of), cnp.PyArray_DIMS(shape_of), ta, 0)
    cdef void* pa = cnp.PyArray_DATA(<cnp.ndarray>a)
    cdef void* pb = cnp.PyArray_DATA(<cnp.ndarray>b)
    cdef void* po = cnp.PyArray_DATA(out)
    _run2_sized(ta, f, pa, sa, pb, sb, po, n)
    return out


cdef object _binary_number(Formula f, cnp.ndarray x, Py_ssize_t n, bint x_scalar,
                           double number, bint number_first, int t):
    """``x op number`` (``number op x`` if ``number_first``) into an array of
    x's shape (0-d included: NumPy would return a scalar object there)."""
    cdef float f32 = <float>number
    cdef void* pn = <void*>&f32 if t == cnp.NPY_FLOAT else <void*>&number
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x), t, 0)
    cdef void* px = cnp.PyArray_DATA(x)
    cdef void* po = cnp.PyArray_DATA(out)
    if number_first:
        _run2_sized(t, f, pn, True, px, x_scalar, po, n)
    else:
        _run2_sized(t, f, px, x_scalar, pn, True, po, n)
    return out


cdef inline void _run2_sized(int t, Formula f, void* pa, bint sa, void* pb, bint sb,
                             void* po, Py_ssize_t n) noexcept:
    """``_run2``, split over threads without the GIL where ``n`` is worth it."""
    if n >= NOGIL_SIZE:
        with nogil:
            _split_run2(t, f, <char*>pa, sa, <char*>pb, sb, <char*>po, n)
    else:
        _run2(t, f, pa, sa, pb, sb, po, n)


cdef void _split_run2(int t, Formula f, char* pa, bint sa, char* pb, bint sb,
                      char* po, Py_ssize_t n) noexcept nogil:
    """``_run2`` over ``n`` elements, one chunk per thread."""
    cdef Span s
    s.t, s.f, s.n, s.item = t, f, n, (4 if t == cnp.NPY_FLOAT else 8)
    s.a, s.sa, s.b, s.sb, s.out = pa, sa, pb, sb, po
    _split(_binary_chunk, &s, _threads_for(n, GRAIN_ARITHMETIC))


cdef void _binary_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t start = c * s.chunk, at = start * s.item
    _run2(s.t, <Formula>s.f, s.a if s.sa else s.a + at, s.sa, s.b if s.sb else s.b + at, s.sb,
          s.out + at, min(s.chunk, s.n - start))


cdef bint _is_row_of(cnp.ndarray row, cnp.ndarray big):
    """Whether ``row`` (leading 1s aside) equals the trailing dims of ``big``."""
    cdef int nr = cnp.PyArray_NDIM(row), nb = cnp.PyArray_NDIM(big), i = 0, j
    while i < nr and cnp.PyArray_DIM(row, i) == 1:
        i += 1
    if nr - i > nb:
        return False
    for j in range(i, nr):
        if cnp.PyArray_DIM(row, j) != cnp.PyArray_DIM(big, nb - nr + j):
            return False
    return nr <= nb


cdef object _binary_rows(Formula f, cnp.ndarray a, Py_ssize_t na,
                        cnp.ndarray b, Py_ssize_t nb, int t):
    """a op b where the smaller operand repeats along the leading axes of the
    larger one (a bias row added to every row of a batch), or None."""
    cdef bint a_is_row = na < nb
    cdef cnp.ndarray big = b if a_is_row else a
    cdef cnp.ndarray row = a if a_is_row else b
    cdef Py_ssize_t m = nb if not a_is_row else na, n = na if not a_is_row else nb
    cdef Py_ssize_t r, rows
    if m == 0 or n % m or not _is_row_of(row, big):
        return None
    rows = n // m
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(
        cnp.PyArray_NDIM(big), cnp.PyArray_DIMS(big), t, 0)
    cdef char* pbig = <char*>cnp.PyArray_DATA(big)
    cdef char* prow = <char*>cnp.PyArray_DATA(row)
    cdef char* po = <char*>cnp.PyArray_DATA(out)
    cdef Py_ssize_t step = m * cnp.PyArray_ITEMSIZE(big)
    cdef Span s
    s.t, s.f, s.flag, s.a, s.b, s.out = t, f, a_is_row, prow, pbig, po
    s.step, s.m, s.n = step, m, rows
    with nogil:
        _split_rows(_rows_chunk, &s, _threads_for(n, GRAIN_ARITHMETIC))
    return out


cdef void _rows_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t r0 = c * s.chunk
    _rows2(s.t, <Formula>s.f, s.flag, s.a, s.b, s.out, s.step, s.m, r0, min(r0 + s.chunk, s.n))


cdef inline void _rows2(int t, Formula f, bint a_is_row, char* prow, char* pbig, char* po,
                        Py_ssize_t step, Py_ssize_t m, Py_ssize_t r0, Py_ssize_t r1) noexcept nogil:
    """Rows r0 to r1 of ``_binary_rows``: the four arithmetic formulas by
    vector_math.h's row loops (compiled per CPU path), the others here."""
    cdef Py_ssize_t r
    if f == MUL or f == ADD or f == SUB or f == DIV:
        if t == cnp.NPY_FLOAT:
            xgrad_binary_rows_f32(<int>f, a_is_row, <float*>(pbig + r0 * step), <float*>prow,
                                  <float*>(po + r0 * step), r1 - r0, m)
        else:
            xgrad_binary_rows_f64(<int>f, a_is_row, <double*>(pbig + r0 * step),
                                  <double*>prow, <double*>(po + r0 * step), r1 - r0, m)
        return
    for r in range(r0, r1):
        if a_is_row:
            _run2(t, f, prow, False, pbig + r * step, False, po + r * step, m)
        else:
            _run2(t, f, pbig + r * step, False, prow, False, po + r * step, m)


# Planes shorter than this take NumPy's broadcasting loop (4-element planes:
# the same time; 2-element ones: ours 1.2x NumPy's).
cdef Py_ssize_t PLANE_MIN = 8


cdef bint _is_plane_block_of(cnp.ndarray small, cnp.ndarray big, Py_ssize_t* inner):
    """Whether ``small`` (leading 1s aside) is a block of ``big``'s dims
    followed by 1s where ``big`` has planes (a channel bias (C, 1, 1) of an
    (N, C, H, W) batch): then ``inner`` is the planes' size (H W), at least
    PLANE_MIN elements (NumPy's loop is as fast on shorter planes)."""
    cdef int ns = cnp.PyArray_NDIM(small), nb = cnp.PyArray_NDIM(big), i = 0, j, k
    if ns > nb:
        return False
    while i < ns and cnp.PyArray_DIM(small, i) == 1:
        i += 1
    j = i
    while j < ns and cnp.PyArray_DIM(small, j) == cnp.PyArray_DIM(big, nb - ns + j):
        j += 1
    inner[0] = 1
    for k in range(j, ns):
        if cnp.PyArray_DIM(small, k) != 1:
            return False
        inner[0] *= cnp.PyArray_DIM(big, nb - ns + k)
    return inner[0] >= PLANE_MIN


cdef object _binary_planes(Formula f, cnp.ndarray a, Py_ssize_t na,
                           cnp.ndarray b, Py_ssize_t nb, int t):
    """a op b where each element of the smaller operand meets one plane of
    the larger one (a channel bias or scale over (N, C, H, W): one vector
    pass per plane with the element as a scalar; NumPy's broadcasting loop
    runs W-long strides there, about 2x the time on 14x14 planes), or None."""
    cdef bint a_is_small = na < nb
    cdef cnp.ndarray big = b if a_is_small else a
    cdef cnp.ndarray small = a if a_is_small else b
    cdef Py_ssize_t m = na if a_is_small else nb, n = nb if a_is_small else na, inner = 0
    if m == 0 or not _is_plane_block_of(small, big, &inner) or n % (m * inner):
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(
        cnp.PyArray_NDIM(big), cnp.PyArray_DIMS(big), t, 0)
    cdef Span s
    s.t, s.f, s.flag = t, f, a_is_small
    s.a, s.b, s.out = <char*>cnp.PyArray_DATA(small), <char*>cnp.PyArray_DATA(big), \
        <char*>cnp.PyArray_DATA(out)
    s.item = cnp.PyArray_ITEMSIZE(big)
    s.m, s.step, s.n = m, inner * s.item, n // inner  # (m values, planes of step bytes)
    with nogil:
        _split_rows(_planes_chunk, &s, _threads_for(n, GRAIN_ARITHMETIC))
    return out


cdef void _planes_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t p, inner = s.step // s.item
    cdef Py_ssize_t p0 = c * s.chunk, p1 = min((c + 1) * s.chunk, s.n)
    cdef char* value
    cdef Formula f = <Formula>s.f
    if f == MUL or f == ADD or f == SUB or f == DIV:  # (per CPU path)
        if s.t == cnp.NPY_FLOAT:
            xgrad_binary_planes_f32(<int>f, s.flag, <float*>s.b, <float*>s.a, <float*>s.out,
                                    p0, p1, inner, s.m)
        else:
            xgrad_binary_planes_f64(<int>f, s.flag, <double*>s.b, <double*>s.a,
                                    <double*>s.out, p0, p1, inner, s.m)
        return
    for p in range(p0, p1):
        value = s.a + (p % s.m) * s.item
        if s.flag:
            _run2(s.t, <Formula>s.f, value, True, s.b + p * s.step, False, s.out + p * s.step,
                  inner)
        else:
            _run2(s.t, <Formula>s.f, s.b + p * s.step, False, value, True, s.out + p * s.step,
                  inner)


cdef void _loop1(Formula f, real* a, real* out, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if f == RELU:
        if real is float:
            xgrad_relu_f32(a, out, n)
        else:
            xgrad_relu_f64(a, out, n)
    elif f == NEG:
        for i in range(n):
            out[i] = -a[i]


cdef object _unary(Formula f, object a, Py_ssize_t limit):
    cdef Py_ssize_t n = 0
    cdef bint s = False
    cdef int t = _kind(a, &n, &s)
    if t < 0 or n > limit or (s and n != 1 and not cnp.PyArray_IS_C_CONTIGUOUS(a)):
        return None
    cdef cnp.ndarray arr = <cnp.ndarray>a
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(
        cnp.PyArray_NDIM(arr), cnp.PyArray_DIMS(arr), t, 0)
    cdef void* pa = cnp.PyArray_DATA(arr)
    cdef void* po = cnp.PyArray_DATA(out)
    cdef Span span
    span.t, span.f, span.n, span.item = t, f, n, cnp.PyArray_ITEMSIZE(arr)
    span.a, span.out = <char*>pa, <char*>po
    _run_span(_unary_chunk, &span, _threads_for(n, GRAIN_ARITHMETIC))
    return out


cdef void _unary_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t start = c * s.chunk
    _run1(s.t, <Formula>s.f, s.a + start * s.item, s.out + start * s.item,
          min(s.chunk, s.n - start))


cdef inline void _run1(int t, Formula f, void* pa, void* po, Py_ssize_t n) noexcept nogil:
    if t == cnp.NPY_FLOAT:
        _loop1[float](f, <float*>pa, <float*>po, n)
    else:
        _loop1[double](f, <double*>pa, <double*>po, n)


# -- forward ----------------------------------------------------------------

cdef inline bint _numpy_is_faster(object a) noexcept:
    """Whether NumPy's own loop should take a plain a op b with operand a:
    ours on small operands (where NumPy's dispatch costs more than the
    arithmetic) and on large ones split over threads; NumPy's SIMD loops on
    large ones where one thread would run ours."""
    cdef Py_ssize_t n
    if type(a) is not cnp.ndarray:
        return False
    n = cnp.PyArray_SIZE(<cnp.ndarray>a)
    return n > SMALL and _threads_for(n, GRAIN_ARITHMETIC) == 1


cdef object _binary_small(Formula f, object a, object b):
    """A plain a op b by our loop, or None where NumPy's is faster (or the
    operands do not qualify). NumPy's loop is never faster on a row
    repeated along a batch (its buffered broadcast: (128, 512) times a row
    of 512, 6.5 us against 3.6 by _binary_rows' per-path loops) nor on a
    channel bias or scale over planes (_binary_planes)."""
    if _numpy_is_faster(a) or _numpy_is_faster(b):
        return _binary_broadcast_only(f, a, b)
    return _binary(f, a, b)


cdef object _binary_broadcast_only(Formula f, object a, object b):
    """a op b for a row or a channel block of the other operand, or None."""
    cdef Py_ssize_t na = 0, nb = 0
    cdef bint sa = False, sb = False
    cdef int ta = _kind(a, &na, &sa)
    cdef int tb = _kind(b, &nb, &sb)
    pair = _compacted(a, b, ta, tb)
    if pair is not None:
        return _binary_broadcast_only(f, pair[0], pair[1])
    if ta < 0 or sa or tb != ta or sb or na == nb:
        return None
    if f == MUL or f == ADD or f == SUB or f == DIV:
        found = _binary_rows(f, <cnp.ndarray>a, na, <cnp.ndarray>b, nb, ta)
        if found is not None:
            return found
    return _binary_planes(f, <cnp.ndarray>a, na, <cnp.ndarray>b, nb, ta)


cdef object np_tanh = numpy.tanh
cdef object np_exp = numpy.exp
cdef object np_multiply = numpy.multiply
cdef object np_add = numpy.add
cdef object np_subtract = numpy.subtract
cdef object np_divide = numpy.true_divide
cdef object np_maximum = numpy.maximum
cdef object np_negative = numpy.negative
cdef object np_where = numpy.where
cdef Py_ssize_t UNLIMITED = <Py_ssize_t>1 << 62


cpdef object tanh_forward(object x):
    r = _vector_unary(K_TANH, x, 0)
    return np_tanh(x) if r is None else r


cpdef object exp_forward(object x):
    r = _vector_unary(K_EXP, x, 0)
    return np_exp(x) if r is None else r


cpdef object sigmoid_forward(object x):
    r = _vector_unary(K_SIGMOID, x, 0)
    if r is not None:
        return r
    y = numpy.asarray(np_multiply(x, 0.5))
    np_tanh(y, out=y)
    np_multiply(y, 0.5, out=y)
    np_add(y, 0.5, out=y)
    return y


cpdef object relu_forward(object x):
    r = _unary(RELU, x, UNLIMITED)
    return np_maximum(x, 0) if r is None else r


cpdef object negative(object x):
    r = _unary(NEG, x, SMALL if _numpy_is_faster(x) else UNLIMITED)
    return np_negative(x) if r is None else r


cdef object _times_one(object scale, object other):
    """``other`` as a read-only view when ``scale`` is a broadcast 1 that
    leaves ``other``'s shape and dtype as they are (the seed of a sum); None
    otherwise. Saves a full pass per op on the ones gradient of a loss."""
    cdef Py_ssize_t ns = 0, no = 0
    cdef bint ss = False, so = False
    cdef int t = _kind(scale, &ns, &ss)
    if t < 0 or not ss or _kind(other, &no, &so) != t or so:
        return None
    if not _fits(<cnp.ndarray>scale, <cnp.ndarray>other):
        return None
    cdef void* p = cnp.PyArray_DATA(<cnp.ndarray>scale)
    if (t == cnp.NPY_FLOAT and (<float*>p)[0] != 1) or (
            t == cnp.NPY_DOUBLE and (<double*>p)[0] != 1):
        return None
    view = (<cnp.ndarray>other).view()
    cnp.PyArray_CLEARFLAGS(<cnp.ndarray>view, cnp.NPY_ARRAY_WRITEABLE)
    return view


cpdef object multiply(object a, object b):
    r = _binary_small(MUL, a, b)
    if r is None:
        return np_multiply(a, b)
    return r


cpdef object multiply_grad(object gy, object x):
    """gy * x for a gradient ``gy``: a view of ``x`` when gy is a broadcast 1."""
    r = _times_one(gy, x)
    if r is not None:
        return r
    return multiply(gy, x)


cpdef object add(object a, object b):
    r = _binary_small(ADD, a, b)
    return np_add(a, b) if r is None else r


cpdef object subtract(object a, object b):
    r = _binary_small(SUB, a, b)
    return np_subtract(a, b) if r is None else r


cpdef object divide(object a, object b):
    r = _binary_small(DIV, a, b)
    return np_divide(a, b) if r is None else r


# -- backward (fused formulas) ------------------------------------------------

cpdef object tanh_grad(object gy, object y):
    """gy * (1 - y*y)"""
    r = _binary(TANH_GRAD, gy, y)
    return gy * (1 - y * y) if r is None else r


cpdef object sigmoid_grad(object gy, object y):
    """gy * y * (1 - y)"""
    r = _binary(SIGMOID_GRAD, gy, y)
    return gy * (y * (1 - y)) if r is None else r


cpdef object abs_grad(object gy, object x):
    """gy * sign(x) in one pass (NumPy's sign: 0 at +-0, NaN at NaN)."""
    r = _binary(ABS_GRAD, gy, x)
    return gy * numpy.sign(x) if r is None else r


cpdef object relu_grad(object gy, object y):
    """gy where y > 0, else 0: a select on every path (an inf or NaN gy
    where y <= 0 gives 0, as ``where`` does; ``gy * (y > 0)`` made NaN there)"""
    r = _binary(RELU_GRAD, gy, y)
    return np_where(y > 0, gy, 0) if r is None else r


# compare_select's comparisons (CompareOp in the .pxd, select_loops.h's
# numbering), each with its operands swapped: a >= b is b <= a.
cdef int[4] _SWAPPED = [COMPARE_LE, COMPARE_LT, COMPARE_GE, COMPARE_GT]


cpdef object compare_select(object gy, object a, object b, int op):
    """gy where ``a op b`` holds, else 0: the gradients of maximum and minimum
    in one pass (NumPy's ``gy * (a >= b)`` makes a bool mask, then a mixed
    bool-float product through its casting loop: ten times the time on
    small arrays). ``op`` is one of COMPARE_GE/GT/LE/LT. ``gy`` and one of
    ``a``/``b`` are C-contiguous float32/float64 arrays of one shape and
    dtype; the other is the same or a scalar (a size-1 array or a number).
    None when the operands do not qualify."""
    cdef Py_ssize_t ng = 0, nb = 0
    cdef bint sg = False, sb = False
    cdef double s = 0
    cdef int t = _kind(gy, &ng, &sg)
    if t < 0 or (sg and ng != 1) or not 0 <= op < 4:  # not a broadcast gy
        return None
    if not _is_like(a, t, gy):  # a scalar a: compare from b's side
        a, b = b, a
        op = _SWAPPED[op]
        if not _is_like(a, t, gy):
            return None
    if type(b) is cnp.ndarray:
        if _kind(b, &nb, &sb) != t:
            return None
        if _is_like(b, t, gy):
            sb = False
        elif sb:
            s = (<double*>cnp.PyArray_DATA(<cnp.ndarray>b))[0] if t == cnp.NPY_DOUBLE else (
                <float*>cnp.PyArray_DATA(<cnp.ndarray>b))[0]
        else:
            return None
    elif isinstance(b, (float, int, numpy.floating, numpy.integer)) and not isinstance(
            b, (bool, numpy.bool_)):
        try:
            s = b  # the op's scalar, of the arrays' dtype: exact in T
        except OverflowError:  # an int beyond double's range
            return None
        sb = True
    else:
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(
        cnp.PyArray_NDIM(<cnp.ndarray>gy), cnp.PyArray_DIMS(<cnp.ndarray>gy), t, 0)
    cdef void* pg = cnp.PyArray_DATA(<cnp.ndarray>gy)
    cdef void* pa = cnp.PyArray_DATA(<cnp.ndarray>a)
    cdef void* pb = NULL
    if type(b) is cnp.ndarray:
        pb = cnp.PyArray_DATA(<cnp.ndarray>b)
    cdef void* po = cnp.PyArray_DATA(out)
    if ng >= NOGIL_SIZE:  # worth releasing the GIL for
        with nogil:
            _compare_select_run(t, pg, pa, pb, sb, s, op, po, ng)
    else:
        _compare_select_run(t, pg, pa, pb, sb, s, op, po, ng)
    return out


cdef bint _is_like(object a, int t, object gy):
    """Whether ``a`` is a C-contiguous array of dtype ``t`` and gy's shape
    (not a broadcast one, whose elements share one address)."""
    cdef Py_ssize_t n = 0
    cdef bint scalar = False
    return (_kind(a, &n, &scalar) == t and (not scalar or n == 1)
            and n == cnp.PyArray_SIZE(<cnp.ndarray>gy)
            and _same_shape(<cnp.ndarray>a, <cnp.ndarray>gy))


cdef inline void _compare_select_run(int t, void* pg, void* pa, void* pb, bint sb, double s,
                                     int op, void* po, Py_ssize_t n) noexcept nogil:
    if t == cnp.NPY_FLOAT:
        xgrad_compare_select_f32(<float*>pg, <float*>pa, <float*>pb, sb, <float>s, op,
                                 <float*>po, n)
    else:
        xgrad_compare_select_f64(<double*>pg, <double*>pa, <double*>pb, sb, s, op,
                                 <double*>po, n)


cpdef object sqrt_grad(object gy, object y):
    """gy / (2y)"""
    r = _binary(SQRT_GRAD, gy, y)
    return gy / (y * 2) if r is None else r


cpdef object square_grad(object gy, object x):
    """2 * gy * x"""
    r = _binary(SQUARE_GRAD, gy, x)
    return gy * (x * 2) if r is None else r


cpdef bint add_into(object acc, object g):
    """acc += g in place when both are plain float arrays of one shape; False
    if the caller must add another way."""
    cdef Py_ssize_t na = 0, ng = 0, i
    cdef bint sa = False, sg = False
    cdef int t = _kind(acc, &na, &sa)
    if t < 0 or sa and na != 1 or _kind(g, &ng, &sg) != t:
        return False
    if not cnp.PyArray_IS_C_CONTIGUOUS(acc) or not cnp.PyArray_ISWRITEABLE(acc):
        return False
    if not sg and (ng != na or not _same_shape(<cnp.ndarray>acc, <cnp.ndarray>g)):
        return False
    if sg and not _fits(<cnp.ndarray>g, <cnp.ndarray>acc):
        return False
    cdef void* pa = cnp.PyArray_DATA(<cnp.ndarray>acc)
    cdef void* pg = cnp.PyArray_DATA(<cnp.ndarray>g)
    with nogil:
        _split_run2(t, ADD, <char*>pa, False, <char*>pg, sg, <char*>pa, na)
    return True


# -- broadcasting and its reverse -----------------------------------------------

cpdef object broadcast_view(object a, tuple shape):
    """A read-only view of ``a`` broadcast to ``shape`` (strides 0 where ``a``
    has length 1): ``numpy.broadcast_to`` in C, without its Python overhead."""
    if type(a) is not cnp.ndarray:
        if not isinstance(a, numpy.generic):
            return numpy.broadcast_to(a, shape)
        a = numpy.asarray(a)  # a NumPy scalar (0-d arithmetic gives those)
    cdef cnp.ndarray arr = <cnp.ndarray>a
    cdef int nd = len(shape), na = cnp.PyArray_NDIM(arr), i, j
    cdef cnp.npy_intp dims[32]
    cdef cnp.npy_intp strides[32]
    if nd > 32 or na > nd:
        return numpy.broadcast_to(a, shape)
    for i in range(nd):
        dims[i] = shape[i]
        j = i - (nd - na)
        if j < 0 or cnp.PyArray_DIM(arr, j) == 1:  # NumPy's: 0 for any length-1 axis
            strides[i] = 0
        elif cnp.PyArray_DIM(arr, j) == dims[i]:
            strides[i] = cnp.PyArray_STRIDE(arr, j)
        else:
            return numpy.broadcast_to(a, shape)  # raises the proper error
    cdef cnp.PyArray_Descr* descr = cnp.PyArray_DESCR(arr)
    Py_INCREF(<object>descr)  # PyArray_NewFromDescr steals it
    # flags 0: the view is read-only, as numpy.broadcast_to makes it.
    cdef cnp.ndarray view = PyArray_NewFromDescr(
        &PyArray_Type, descr, nd, dims, strides, cnp.PyArray_DATA(arr), 0, NULL)
    cnp.set_array_base(view, arr)
    return view


cpdef object sum_to(object a, tuple shape):
    """Sum ``a`` down to ``shape`` (the reverse of broadcasting): by sum_axes
    where the summed axes are leading ones and trailing planes (a batch down
    to one row, a channel bias's gradient), else by NumPy's reduce."""
    if a.shape == shape:
        return a
    cdef int nd = len(shape), lead = a.ndim - nd
    axes = tuple(range(lead)) + tuple([
        lead + i for i in range(nd) if shape[i] == 1 and a.shape[lead + i] != 1])
    if axes:
        out = sum_axes(a, axes)
        if out is not None:
            return out.reshape(shape)
    out = numpy.add.reduce(a, axis=axes, keepdims=True) if axes else a
    if lead:
        out = out.reshape(shape)
    return out


cpdef object sum_axes(object x, tuple axes, double divisor=1):
    """The sums over ``axes`` (sorted, not all of them) of a C-contiguous
    float32/64 array, divided by ``divisor``, where they are leading axes
    and trailing planes of PLANE_MIN or more elements around the kept ones
    (a global average pool: (N, C, H, W) over (2, 3)), leading axes only
    (a batch's sum), or one block of middle axes (an (N, T, D) batch over
    T); the kept axes' shape, or None. Planes: one vectorised sum each in
    double (NumPy's reduce over (2, 3) of (32, 256, 14, 14) float32: 2.3x
    the time on one thread); leading and middle axes: NumPy's row order and
    bits (its reduce over (64, 128, 64)'s axis 1: 5x the time). The outputs
    split over the pool."""
    cdef int t = _vector_dtype(x)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or not axes:
        return None
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef int nd = cnp.PyArray_NDIM(a), i = 0, j, k = 0
    cdef Py_ssize_t outer = 1, kept = 1, inner = 1
    while k < len(axes) and axes[k] == i:  # the leading axes summed
        outer *= cnp.PyArray_DIM(a, i)
        i += 1
        k += 1
    j = i
    while j < nd and (k == len(axes) or axes[k] != j):
        kept *= cnp.PyArray_DIM(a, j)
        j += 1
    if i == 0 and j < nd and len(axes) < nd - j:  # kept, summed, kept: a middle block
        return _middle_sums(a, t, axes, divisor)
    if j == i or len(axes) - k != nd - j:  # (no kept axis, or a summed one inside)
        return None
    for k in range(j, nd):
        inner *= cnp.PyArray_DIM(a, k)
    if kept == 0 or not cnp.PyArray_IS_C_CONTIGUOUS(a):
        return None
    shape = tuple([cnp.PyArray_DIM(a, k) for k in range(i, j)])
    if j == nd:  # leading axes only: rows added in order, as NumPy's reduce does
        # (but one kept element: NumPy then sums a contiguous run pairwise)
        return _column_sums(a, t, 1, outer, kept, shape, divisor) if kept > 1 else None
    if inner < PLANE_MIN and outer > 1:  # (rows of any length: scalar sums below 16)
        return None
    return _plane_sums(a, t, outer, kept, inner, shape, divisor)


# A middle block of summed axes takes the column sums where the kept axes
# after it hold this many elements or more (a row of an (N, T, D) batch's D
# features summed over T); NumPy keeps shorter ones.
DEF MIDDLE_MIN_COLUMNS = 16


cdef object _middle_sums(cnp.ndarray a, int t, tuple axes, double divisor):
    """The sums over ``axes``, consecutive, with kept axes before and after
    them, of C-contiguous ``a`` (the sum of (N, T, D) over T): for each
    index of the leading kept axes, the column sums of its (summed, trailing)
    block, NumPy's order and bits as there (its reduce adds whole rows of
    the trailing axes); None where the axes are not one block or the
    trailing axes hold under MIDDLE_MIN_COLUMNS elements."""
    cdef int nd = cnp.PyArray_NDIM(a), first = axes[0], last = axes[len(axes) - 1], k
    cdef Py_ssize_t blocks = 1, rows = 1, m = 1
    if last - first + 1 != len(axes) or not cnp.PyArray_IS_C_CONTIGUOUS(a):
        return None
    for k in range(nd):
        if k < first:
            blocks *= cnp.PyArray_DIM(a, k)
        elif k <= last:
            rows *= cnp.PyArray_DIM(a, k)
        else:
            m *= cnp.PyArray_DIM(a, k)
    if m < MIDDLE_MIN_COLUMNS or blocks == 0:
        return None
    shape = tuple([cnp.PyArray_DIM(a, k) for k in range(nd) if k < first or k > last])
    return _column_sums(a, t, blocks, rows, m, shape, divisor)


cdef object _column_sums(cnp.ndarray a, int t, Py_ssize_t blocks, Py_ssize_t rows,
                         Py_ssize_t m, object shape, double divisor):
    """out[b, j] = (a[b, 0, j] + a[b, 1, j] + ... + a[b, rows - 1, j]) /
    divisor for each of ``blocks`` blocks, in the dtype and in NumPy's
    order (its reduce over a leading or middle axis adds whole rows): the
    same bits, with the blocks, or one block's columns, split over the
    pool."""
    cdef cnp.ndarray out = numpy.zeros(shape, dtype=a.dtype)
    cdef Span s
    s.t, s.a, s.out = t, <char*>cnp.PyArray_DATA(a), <char*>cnp.PyArray_DATA(out)
    s.n, s.step, s.p = m, rows, divisor  # (columns; rows)
    cdef int nt = _threads_for(blocks * rows * m, GRAIN_ARITHMETIC)
    cdef Py_ssize_t c
    with nogil:
        # (threads take whole blocks, or column blocks of every row of one:
        # under 1024 columns each, two threads ran slower than one: 4096
        # rows of 512, 199 against 163 us)
        if nt > 1 and blocks >= nt:
            s.chunk = m
            xgrad_pool_run(_columns_sum_chunk, &s, blocks)
        elif nt <= 1 or m < 1024 * nt:
            s.chunk = m
            for c in range(blocks):
                _columns_sum_chunk(&s, c)
        else:
            s.chunk = _chunk(m, nt)
            xgrad_pool_run(_columns_sum_chunk, &s, blocks * ((m + s.chunk - 1) // s.chunk))
    return out


cdef void _columns_sum_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    """Chunk c: column chunk c % chunks of block c // chunks."""
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t chunks = (s.n + s.chunk - 1) // s.chunk
    cdef Py_ssize_t b = c // chunks, j0 = (c % chunks) * s.chunk, j1 = min(j0 + s.chunk, s.n)
    cdef Py_ssize_t j, base = b * s.step * s.n + j0
    cdef float* f32
    cdef double* f64
    cdef float d32 = <float>s.p
    if s.t == cnp.NPY_FLOAT:
        f32 = <float*>s.out + b * s.n
        xgrad_column_sums_f32(<float*>s.a + base, f32 + j0, s.step, s.n, j1 - j0)
        if s.p != 1:
            for j in range(j0, j1):
                f32[j] = f32[j] / d32
    else:
        f64 = <double*>s.out + b * s.n
        xgrad_column_sums_f64(<double*>s.a + base, f64 + j0, s.step, s.n, j1 - j0)
        if s.p != 1:
            for j in range(j0, j1):
                f64[j] = f64[j] / s.p


cdef object _plane_sums(cnp.ndarray a, int t, Py_ssize_t outer, Py_ssize_t kept,
                        Py_ssize_t inner, object shape, double divisor):
    """out[m] = the sum of the ``outer`` planes (of ``inner`` elements) of
    block m of ``kept``, over ``divisor``; ``out`` of ``shape``."""
    cdef cnp.ndarray out = numpy.empty(shape, dtype=a.dtype)
    cdef Span s
    s.t, s.a, s.out = t, <char*>cnp.PyArray_DATA(a), <char*>cnp.PyArray_DATA(out)
    s.n, s.m, s.step, s.p = kept, inner, outer, divisor  # (channels; plane; planes a channel)
    with nogil:
        _split_rows(_planes_sum_chunk, &s, _threads_for(outer * kept * inner,
                                                        GRAIN_ARITHMETIC))
    return out


cdef void _planes_sum_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t ch
    if s.step == 1 and s.m < XGRAD_SHORT_ROW:  # short rows: scalar sums in double
        for ch in range(c * s.chunk, min((c + 1) * s.chunk, s.n)):
            if s.t == cnp.NPY_FLOAT:
                (<float*>s.out)[ch] = <float>(_short_sum(<float*>s.a + ch * s.m, s.m) / s.p)
            else:
                (<double*>s.out)[ch] = _short_sum(<double*>s.a + ch * s.m, s.m) / s.p
        return
    for ch in range(c * s.chunk, min((c + 1) * s.chunk, s.n)):
        if s.t == cnp.NPY_FLOAT:
            (<float*>s.out)[ch] = <float>((xgrad_sum_f32(<float*>s.a + ch * s.m, s.m)
                                           if s.step == 1 else xgrad_sum_planes_f32(
                <float*>s.a + ch * s.m, s.step, s.n * s.m, s.m)) / s.p)
        else:
            (<double*>s.out)[ch] = (xgrad_sum_f64(<double*>s.a + ch * s.m, s.m)
                                    if s.step == 1 else xgrad_sum_planes_f64(
                <double*>s.a + ch * s.m, s.step, s.n * s.m, s.m)) / s.p


cdef inline double _short_sum(const real* x, Py_ssize_t m) noexcept nogil:
    """x[0] + ... + x[m - 1] in double, in order."""
    cdef double total = 0
    cdef Py_ssize_t j
    for j in range(m):
        total += x[j]
    return total


# -- where ---------------------------------------------------------------------

cdef struct SelectOperand:
    char* data
    int kind     # 0: the output's shape, 1: a row (period m), 2: one value
    double value


cdef int _select_operand(object v, int t, cnp.ndarray shape_of, Py_ssize_t* m,
                         SelectOperand* op) except -2:
    """Classify one operand of select (type ``t``: NPY_BOOL for the
    condition); -1 where it does not qualify. A row's period goes to m
    (every row operand must share it)."""
    cdef cnp.ndarray a
    cdef Py_ssize_t n
    if type(v) is not cnp.ndarray:
        # a Python int or float (weak: the arrays' dtype, as NumPy 2), or a
        # NumPy scalar of the arrays' dtype; any other would promote
        if t == cnp.NPY_BOOL or not (type(v) is int or type(v) is float or (
                isinstance(v, numpy.generic) and (<object>v).dtype.num == t)):
            return -1
        try:
            op.value = v
        except OverflowError:  # an int beyond double's range: NumPy's error
            return -1
        op.kind, op.data = 2, NULL
        return 0
    a = <cnp.ndarray>v
    if (cnp.PyArray_TYPE(a) != t or not cnp.PyArray_IS_C_CONTIGUOUS(a)
            or not cnp.PyArray_ISALIGNED(a) or not cnp.PyArray_ISNOTSWAPPED(a)):
        return -1
    n = cnp.PyArray_SIZE(a)
    op.data = <char*>cnp.PyArray_DATA(a)
    if cnp.PyArray_NDIM(a) > cnp.PyArray_NDIM(shape_of):  # (the result would have more axes)
        return -1
    if _same_shape(a, shape_of):
        op.kind = 0
        return 0
    if n == 1:  # (one value; a one-element condition stays NumPy's)
        if t == cnp.NPY_BOOL:
            return -1
        op.kind = 2
        op.value = (<float*>op.data)[0] if t == cnp.NPY_FLOAT else (<double*>op.data)[0]
        return 0
    if not _is_row_of(a, shape_of) or (m[0] and m[0] != n):
        return -1
    op.kind = 1
    m[0] = n
    return 0


cdef struct SelectJob:
    int t
    SelectOperand c, a, b
    char* out
    Py_ssize_t n, rows, m, chunk  # rows of m elements (the last one shorter)


cpdef object select(object cond, object a, object b):
    """numpy.where(cond, a, b) for host float32/64 data, split over the
    pool: cond a bool array, a and b arrays of one float dtype or numbers,
    each of the result's shape, a row repeated along its leading axes (an
    attention mask (1, 1, T, T) over (B, H, T, T); rows of one length), or
    one value; None for other operands (NumPy's where then). Exact."""
    cdef cnp.ndarray shape_of = None
    cdef int t = -1
    for v in (a, b):
        if type(v) is cnp.ndarray:
            if t == -1:
                t = cnp.PyArray_TYPE(<cnp.ndarray>v)
            elif cnp.PyArray_TYPE(<cnp.ndarray>v) != t:
                return None
            if shape_of is None or (cnp.PyArray_SIZE(<cnp.ndarray>v), cnp.PyArray_NDIM(
                    <cnp.ndarray>v)) > (cnp.PyArray_SIZE(shape_of), cnp.PyArray_NDIM(shape_of)):
                shape_of = <cnp.ndarray>v  # (the result's shape: the most elements and axes)
    if type(cond) is not cnp.ndarray or (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE):
        return None
    if (cnp.PyArray_SIZE(<cnp.ndarray>cond) > cnp.PyArray_SIZE(shape_of)
            or cnp.PyArray_NDIM(<cnp.ndarray>cond) > cnp.PyArray_NDIM(shape_of)):
        return None
    cdef SelectJob j
    cdef Py_ssize_t m = 0, n = cnp.PyArray_SIZE(shape_of)
    if (_select_operand(cond, cnp.NPY_BOOL, shape_of, &m, &j.c) < 0
            or _select_operand(a, t, shape_of, &m, &j.a) < 0
            or _select_operand(b, t, shape_of, &m, &j.b) < 0 or n == 0):
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(shape_of),
                                             cnp.PyArray_DIMS(shape_of), t, 0)
    j.t, j.out, j.n = t, <char*>cnp.PyArray_DATA(out), n
    j.m = m if m else SELECT_BLOCK  # (no row operand: blocks of the flat arrays)
    j.rows = (n + j.m - 1) // j.m
    with nogil:
        _split_units(_select_rows, &j, j.rows, _threads_for(n, GRAIN_ARITHMETIC), &j.chunk)
    return out


cdef Py_ssize_t SELECT_BLOCK = 4096


cdef void _select_rows(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef SelectJob* j = <SelectJob*>ctx
    cdef Py_ssize_t r, m = j.m
    cdef cnp.npy_bool* cr
    for r in range(c * j.chunk, min((c + 1) * j.chunk, j.rows)):
        cr = <cnp.npy_bool*>j.c.data + (0 if j.c.kind == 1 else r * m)
        if j.t == cnp.NPY_FLOAT:
            xgrad_select_f32(cr, <float*>_select_data(&j.a, r, m, 4),
                             <float*>_select_data(&j.b, r, m, 4), <float>j.a.value,
                             <float>j.b.value, <float*>j.out + r * m, min(m, j.n - r * m))
        else:
            xgrad_select_f64(cr, <double*>_select_data(&j.a, r, m, 8),
                             <double*>_select_data(&j.b, r, m, 8), j.a.value, j.b.value,
                             <double*>j.out + r * m, min(m, j.n - r * m))


cdef inline char* _select_data(SelectOperand* a, Py_ssize_t r, Py_ssize_t m,
                               Py_ssize_t item) noexcept nogil:
    """Row r's data of one operand (rows of m items); NULL for one value."""
    if a.kind == 2:
        return NULL
    return a.data + (0 if a.kind == 1 else r * m * item)


# -- Huber loss --------------------------------------------------------------

cdef bint _plain_like(object a, cnp.ndarray like):
    """Whether ``a`` is an aligned, native-order, C-contiguous array of
    ``like``'s dtype and shape."""
    return (type(a) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.PyArray_TYPE(like)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)
            and cnp.PyArray_ISALIGNED(<cnp.ndarray>a)
            and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a) and _same_shape(<cnp.ndarray>a, like))


cdef struct HuberJob:
    int t
    double delta
    char* gy
    char* x1
    char* x2
    char* out    # the loss, or the gradient to x1
    char* out2   # the gradient to x2 (NULL: the forward)
    Py_ssize_t n, chunk, item


cdef void _huber_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef HuberJob* j = <HuberJob*>ctx
    cdef Py_ssize_t i0 = c * j.chunk, k = min(j.chunk, j.n - i0), o = i0 * j.item
    cdef double half = 0.5 * j.delta  # (rounded to the dtype, as the scalar of a - 0.5 * delta)
    if j.out2 == NULL:
        if j.t == cnp.NPY_FLOAT:
            xgrad_huber_f32(<float*>(j.x1 + o), <float*>(j.x2 + o), <float>j.delta,
                            <float>half, <float*>(j.out + o), k)
        else:
            xgrad_huber_f64(<double*>(j.x1 + o), <double*>(j.x2 + o), j.delta, half,
                            <double*>(j.out + o), k)
    elif j.t == cnp.NPY_FLOAT:
        xgrad_huber_grad_f32(<float*>(j.gy + o), <float*>(j.x1 + o), <float*>(j.x2 + o),
                             <float>j.delta, <float*>(j.out + o), <float*>(j.out2 + o), k)
    else:
        xgrad_huber_grad_f64(<double*>(j.gy + o), <double*>(j.x1 + o), <double*>(j.x2 + o),
                             j.delta, <double*>(j.out + o), <double*>(j.out2 + o), k)


cdef object _huber(object gy, object x1, object x2, double delta):
    """huber_forward (gy None) or huber_grad's job, split over the pool."""
    if type(x1) is not cnp.ndarray or not _plain_like(x1, <cnp.ndarray>x1) or not _plain_like(
            x2, <cnp.ndarray>x1) or (gy is not None and not _plain_like(gy, <cnp.ndarray>x1)):
        return None
    cdef int t = cnp.PyArray_TYPE(<cnp.ndarray>x1)
    if t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE:
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(<cnp.ndarray>x1),
                                             cnp.PyArray_DIMS(<cnp.ndarray>x1), t, 0)
    cdef cnp.ndarray out2 = None
    cdef HuberJob j
    j.t, j.delta, j.n, j.item = t, delta, cnp.PyArray_SIZE(out), cnp.PyArray_ITEMSIZE(out)
    j.x1, j.x2 = <char*>cnp.PyArray_DATA(<cnp.ndarray>x1), <char*>cnp.PyArray_DATA(<cnp.ndarray>x2)
    j.out, j.out2, j.gy = <char*>cnp.PyArray_DATA(out), NULL, NULL
    if gy is not None:
        out2 = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(out), cnp.PyArray_DIMS(out), t, 0)
        j.gy, j.out2 = <char*>cnp.PyArray_DATA(<cnp.ndarray>gy), <char*>cnp.PyArray_DATA(out2)
    if j.n:
        with nogil:
            _split_units(_huber_chunk, &j, j.n, _threads_for(j.n, GRAIN_ARITHMETIC), &j.chunk)
    return out if gy is None else (out, out2)


cpdef object huber_forward(object x1, object x2, double delta):
    """ChainerX's huber_loss(x1, x2, delta) in one pass (huber_loops.h) for
    plain float32/float64 arrays of one shape and dtype, split over the
    pool; None for others."""
    return _huber(None, x1, x2, delta)


cpdef object huber_grad(object gy, object x1, object x2, double delta):
    """(gy * clip(x1 - x2, -delta, delta), its negation) in one pass, for
    plain arrays of one shape and float dtype; None for others."""
    return _huber(gy, x1, x2, delta)


# -- copies between layouts on the pool ------------------------------------------

cdef enum:
    COPY_MAX_DIMS = 32


cdef struct CopyJob:
    char* dst
    char* src
    int nd                  # dims after merging; the last one is a row
    int item
    Py_ssize_t rows, chunk  # rows: the product of shape[:nd - 1]
    Py_ssize_t shape[COPY_MAX_DIMS]
    Py_ssize_t dstr[COPY_MAX_DIMS]
    Py_ssize_t sstr[COPY_MAX_DIMS]


cpdef bint copy_into(object dst, object src):
    """Copy ``src`` into ``dst`` (NumPy arrays of one shape and dtype, byte
    order included, aligned, items of 1, 2, 4 or 8 bytes, any strides,
    not overlapping) on the pool, rows of the last axis at a time (memcpy
    where both are contiguous): True; False where it does not take them
    (fewer than two threads for the size, one axis after merging, other
    dtypes), for NumPy's single-threaded copy. Exact: a copy."""
    if type(dst) is not cnp.ndarray or type(src) is not cnp.ndarray:
        return False
    cdef cnp.ndarray d = <cnp.ndarray>dst, a = <cnp.ndarray>src
    cdef Py_ssize_t n = cnp.PyArray_SIZE(d)
    cdef int nt = _threads_for(n, GRAIN_ARITHMETIC)
    cdef int nd = cnp.PyArray_NDIM(d), item = <int>cnp.PyArray_ITEMSIZE(d), k
    if (nt < 2 or nd != cnp.PyArray_NDIM(a) or nd > COPY_MAX_DIMS
            or cnp.PyArray_TYPE(d) != cnp.PyArray_TYPE(a)
            or item not in (1, 2, 4, 8) or cnp.PyArray_ITEMSIZE(a) != item
            or not (cnp.PyArray_ISALIGNED(d) and cnp.PyArray_ISALIGNED(a)
                    and cnp.PyArray_ISWRITEABLE(d))
            or not _same_shape(d, a) or d.dtype != a.dtype  # (byte order too)
            or numpy.may_share_memory(d, a)):
        return False
    cdef CopyJob j
    j.item, j.nd = item, 0
    for k in range(nd):  # size-1 axes dropped, mergeable neighbours merged
        if cnp.PyArray_DIM(d, k) == 1:
            continue
        if (j.nd and j.dstr[j.nd - 1] == cnp.PyArray_DIM(d, k) * cnp.PyArray_STRIDE(d, k)
                and j.sstr[j.nd - 1] == cnp.PyArray_DIM(d, k) * cnp.PyArray_STRIDE(a, k)):
            j.shape[j.nd - 1] *= cnp.PyArray_DIM(d, k)
            j.dstr[j.nd - 1] = cnp.PyArray_STRIDE(d, k)
            j.sstr[j.nd - 1] = cnp.PyArray_STRIDE(a, k)
            continue
        j.shape[j.nd] = cnp.PyArray_DIM(d, k)
        j.dstr[j.nd] = cnp.PyArray_STRIDE(d, k)
        j.sstr[j.nd] = cnp.PyArray_STRIDE(a, k)
        j.nd += 1
    if j.nd < 2:
        return False
    j.rows = 1
    for k in range(j.nd - 1):
        j.rows *= j.shape[k]
    if j.rows < nt:
        return False
    j.dst, j.src = <char*>cnp.PyArray_DATA(d), <char*>cnp.PyArray_DATA(a)
    with nogil:
        _split_units(_copy_rows, &j, j.rows, nt, &j.chunk)
    return True


cdef void _copy_rows(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef CopyJob* j = <CopyJob*>ctx
    cdef Py_ssize_t r0 = c * j.chunk, r1 = min(r0 + j.chunk, j.rows), rem = r0, r, i
    cdef Py_ssize_t idx[COPY_MAX_DIMS]
    cdef int last = j.nd - 1, k
    cdef char* d = j.dst
    cdef char* s = j.src
    cdef Py_ssize_t n = j.shape[last], ds = j.dstr[last], ss = j.sstr[last]
    cdef bint plain = ds == j.item and ss == j.item
    for k in range(last - 1, -1, -1):  # row r0's position
        idx[k] = rem % j.shape[k]
        rem //= j.shape[k]
        d += idx[k] * j.dstr[k]
        s += idx[k] * j.sstr[k]
    for r in range(r0, r1):
        if plain:
            memcpy(d, s, n * j.item)
        elif j.item == 4:
            for i in range(n):
                (<uint32_t*>(d + i * ds))[0] = (<uint32_t*>(s + i * ss))[0]
        elif j.item == 8:
            for i in range(n):
                (<uint64_t*>(d + i * ds))[0] = (<uint64_t*>(s + i * ss))[0]
        elif j.item == 2:
            for i in range(n):
                (<uint16_t*>(d + i * ds))[0] = (<uint16_t*>(s + i * ss))[0]
        else:
            for i in range(n):
                d[i * ds] = s[i * ss]
        k = last - 1  # the next row
        while k >= 0:
            idx[k] += 1
            d += j.dstr[k]
            s += j.sstr[k]
            if idx[k] < j.shape[k]:
                break
            d -= j.shape[k] * j.dstr[k]
            s -= j.shape[k] * j.sstr[k]
            idx[k] = 0
            k -= 1


cpdef object cast_half(object x, object dtype):
    """``x`` (float32 or float16, C-contiguous, aligned, in native byte
    order) cast to ``dtype``, the other of the two, by F16C (half_cast.h),
    split over the pool; None for other arrays and dtypes, or where F16C is
    not used (the SSE2 path, a CPU without it)."""
    if type(x) is not cnp.ndarray or not xgrad_half_cast_supported():
        return None
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef int t = cnp.PyArray_TYPE(a), to
    if not (cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a)
            and cnp.PyArray_ISNOTSWAPPED(a)):
        return None
    if t == cnp.NPY_FLOAT and dtype == HALF_DTYPE:
        to = NPY_HALF
    elif t == NPY_HALF and dtype == FLOAT_DTYPE:
        to = cnp.NPY_FLOAT
    else:
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), to, 0)
    cdef Span s
    s.t, s.a, s.out, s.n = t, <char*>cnp.PyArray_DATA(a), <char*>cnp.PyArray_DATA(out), \
        cnp.PyArray_SIZE(a)
    _run_span(_cast_half_chunk, &s, _threads_for(s.n, GRAIN_ARITHMETIC))
    return out


cdef object HALF_DTYPE = numpy.dtype(numpy.float16)
cdef object FLOAT_DTYPE = numpy.dtype(numpy.float32)


cdef void _cast_half_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t start = c * s.chunk, k = min(s.chunk, s.n - start)
    if s.t == cnp.NPY_FLOAT:
        xgrad_float_to_half(<float*>s.a + start, <unsigned short*>s.out + start, k)
    else:
        xgrad_half_to_float(<unsigned short*>s.a + start, <float*>s.out + start, k)


cpdef object extremum_trailing(object x, int kept, bint minimum):
    """The maximum (``minimum``: the minimum) of a C-contiguous float32/64
    array over all but its first ``kept`` axes, NaN where a reduced element
    is NaN, as NumPy's amax/amin (shape ``x.shape[:kept]``); None for other
    arrays, or when nothing is reduced or an axis is empty. One vectorised
    pass a row (NumPy's reduce over a last axis of 512 float32: 3.7x the
    time), rows split over the pool; one row (the whole array) is split
    into blocks whose extremes are then reduced. Exact: the same result with any
    split."""
    cdef int t = _vector_dtype(x)
    if t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE:
        return None
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef int nd = cnp.PyArray_NDIM(a)
    if kept < 0 or kept >= nd or not cnp.PyArray_IS_C_CONTIGUOUS(a) \
            or not cnp.PyArray_ISALIGNED(a):
        return None
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a), m = 1
    cdef int k
    for k in range(kept, nd):
        m *= cnp.PyArray_DIM(a, k)
    if n == 0 or m == 0:
        return None
    shape = tuple([cnp.PyArray_DIM(a, k) for k in range(kept)])
    cdef cnp.ndarray out = numpy.empty(shape, dtype=a.dtype)
    cdef cnp.ndarray partial
    cdef Span s
    cdef int nt = _threads_for(n, GRAIN_ARITHMETIC)
    s.t, s.flag, s.a, s.m = t, minimum, <char*>cnp.PyArray_DATA(a), m
    if n // m > 1 or nt <= 1:  # rows split over the threads (at most one a thread)
        s.n, s.out = n // m, <char*>cnp.PyArray_DATA(out)
        with nogil:
            _split_rows(_extremum_chunk, &s, nt)
        return out
    # (one row on several threads: blocks of it, then their extremes)
    s.chunk = _chunk(n, nt)
    partial = numpy.empty((n + s.chunk - 1) // s.chunk, dtype=a.dtype)
    s.n, s.out = n, <char*>cnp.PyArray_DATA(partial)
    with nogil:
        xgrad_pool_run(_extremum_block, &s, cnp.PyArray_SIZE(partial))
        _extremum_rows(t, s.out, <char*>cnp.PyArray_DATA(out), 1,
                       cnp.PyArray_SIZE(partial), minimum)
    return out


cpdef object extremum_trailing_grad(object gy, object x, object y):
    """The gradient of extremum_trailing: gy[r] where x's row r holds its
    extremum y[r] (every tie, ChainerX's rule), else 0; gy and y with one
    element a row of x (C-contiguous, x's dtype). None when the operands do
    not qualify. One pass (NumPy's ``where(x == y, gy, 0)`` with y and gy
    broadcast: a bool mask, then the select; 3x the time)."""
    cdef int t = _vector_dtype(x)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or _vector_dtype(gy) != t \
            or _vector_dtype(y) != t:
        return None
    cdef cnp.ndarray a = <cnp.ndarray>x, g = <cnp.ndarray>gy, e = <cnp.ndarray>y
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a), rows = cnp.PyArray_SIZE(e)
    if (rows == 0 or n % rows or cnp.PyArray_SIZE(g) != rows
            or not cnp.PyArray_IS_C_CONTIGUOUS(a) or not cnp.PyArray_ISALIGNED(a)
            or not cnp.PyArray_IS_C_CONTIGUOUS(g) or not cnp.PyArray_ISALIGNED(g)
            or not cnp.PyArray_IS_C_CONTIGUOUS(e) or not cnp.PyArray_ISALIGNED(e)):
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), t, 0)
    cdef Span s
    s.t, s.a, s.b, s.c, s.out, s.n, s.m = (t, <char*>cnp.PyArray_DATA(a),
                                          <char*>cnp.PyArray_DATA(g),
                                          <char*>cnp.PyArray_DATA(e),
                                          <char*>cnp.PyArray_DATA(out), rows, n // rows)
    with nogil:
        _split_rows(_select_equal_chunk, &s, _threads_for(n, GRAIN_ARITHMETIC))
    return out


cdef void _select_equal_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t r
    for r in range(c * s.chunk, min((c + 1) * s.chunk, s.n)):
        if s.t == cnp.NPY_FLOAT:
            _select_equal_row[float](<float*>s.a + r * s.m, (<float*>s.b)[r],
                                     (<float*>s.c)[r], <float*>s.out + r * s.m, s.m)
        else:
            _select_equal_row[double](<double*>s.a + r * s.m, (<double*>s.b)[r],
                                      (<double*>s.c)[r], <double*>s.out + r * s.m, s.m)


cdef inline void _select_equal_row(real* x, real g, real e, real* out,
                                   Py_ssize_t m) noexcept nogil:
    """out = g where x == e, else 0 (one row of extremum_trailing_grad)."""
    cdef Py_ssize_t j
    for j in range(m):
        out[j] = g if x[j] == e else 0


cdef inline void _extremum_rows(int t, char* x, char* out, Py_ssize_t rows, Py_ssize_t m,
                                bint minimum) noexcept nogil:
    if t == cnp.NPY_FLOAT:
        xgrad_extremum_rows_f32(<float*>x, <float*>out, rows, m, minimum)
    else:
        xgrad_extremum_rows_f64(<double*>x, <double*>out, rows, m, minimum)


cdef void _extremum_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t r0 = c * s.chunk
    cdef Py_ssize_t item = 4 if s.t == cnp.NPY_FLOAT else 8
    _extremum_rows(s.t, s.a + r0 * s.m * item, s.out + r0 * item, min(s.chunk, s.n - r0),
                   s.m, s.flag)


cdef void _extremum_block(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t start = c * s.chunk
    cdef Py_ssize_t item = 4 if s.t == cnp.NPY_FLOAT else 8
    _extremum_rows(s.t, s.a + start * item, s.out + c * item, 1, min(s.chunk, s.n - start),
                   s.flag)


# -- vector kernels (vector_math.h) --------------------------------------------
#
# One fused, vectorised pass per op for float16/32/64 at every size. The
# dispatch looks only at the operands' dtype (float16/32/64 in native byte
# order); which dtype an op computes in is decided before, by the op. An
# operand that is not contiguous is copied to a contiguous one first; a result
# is always a new C-contiguous array.

cdef inline int _vector_dtype(object a):
    """NPY_HALF/FLOAT/DOUBLE for a NumPy array the vector kernels take, else -1."""
    if type(a) is not cnp.ndarray:
        return -1
    cdef cnp.ndarray arr = <cnp.ndarray>a
    cdef int t = cnp.PyArray_TYPE(arr)
    if t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE and not (t == NPY_HALF and XGRAD_HAS_FLOAT16):
        return -1
    if not cnp.PyArray_ISNOTSWAPPED(arr):
        return -1
    return t


cdef inline cnp.ndarray _contiguous(object a):
    """``a`` itself when C-contiguous and aligned, else an aligned C-order
    copy of the same shape. Not ``numpy.ascontiguousarray``: it returns at
    least one dimension, so a 0-d operand (one that is unaligned, say) came
    back as shape (1,) and that shape leaked into results and gradients."""
    if cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a) and cnp.PyArray_ISALIGNED(<cnp.ndarray>a):
        return <cnp.ndarray>a
    return cnp.PyArray_NewCopy(<cnp.ndarray>a, cnp.NPY_CORDER)


cdef inline void _run_unary(UnaryKernel k, int t, void* x, void* y, Py_ssize_t n,
                            double p) noexcept nogil:
    if t == cnp.NPY_FLOAT:
        k.f32(<float*>x, <float*>y, n, p)
    elif t == cnp.NPY_DOUBLE:
        k.f64(<double*>x, <double*>y, n, p)
    else:
        xgrad_unary_f16(k.f32, <xgrad_f16*>x, <xgrad_f16*>y, n, p)


cdef void _vector_unary_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t start = c * s.chunk
    _run_unary(s.uk, s.t, s.a + start * s.item, s.out + start * s.item,
               min(s.chunk, s.n - start), s.p)


cdef object _vector_unary(UnaryKernel k, object x, double p):
    """k(x) as a new array, or None when x is not a float16/32/64 NumPy array."""
    cdef int t = _vector_dtype(x)
    if t < 0:
        return None
    cdef cnp.ndarray a = _contiguous(x)
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), t, 0)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    cdef char* px = <char*>cnp.PyArray_DATA(a)
    cdef char* po = <char*>cnp.PyArray_DATA(out)
    cdef Span s
    s.uk, s.t, s.n, s.item, s.a, s.out, s.p = k, t, n, cnp.PyArray_ITEMSIZE(a), px, po, p
    _run_span(_vector_unary_chunk, &s, _threads_for(n, GRAIN_VECTOR))
    return out


cdef inline void _run_grad(GradKernel k, int t, void* gy, void* x, void* y, void* out,
                           Py_ssize_t n, double p) noexcept nogil:
    if t == cnp.NPY_FLOAT:
        k.f32(<float*>gy, <float*>x, <float*>y, <float*>out, n, p)
    elif t == cnp.NPY_DOUBLE:
        k.f64(<double*>gy, <double*>x, <double*>y, <double*>out, n, p)
    else:
        xgrad_grad_f16(k.f32, <xgrad_f16*>gy, <xgrad_f16*>x, <xgrad_f16*>y, <xgrad_f16*>out, n, p)


cdef void _vector_grad_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t at = c * s.chunk * s.item
    _run_grad(s.gk, s.t, s.a + at, s.b + at if s.b != NULL else NULL,
              s.c + at if s.c != NULL else NULL, s.out + at, min(s.chunk, s.n - c * s.chunk), s.p)


cdef object _vector_grad(GradKernel k, object gy, object x, object y, double p):
    """k(gy, x, y) as a new array; x or y may be None when the formula does
    not read it. None when the operands are not NumPy float arrays of one
    dtype and shape (broadcasting is left to the caller's fallback)."""
    cdef int t = _vector_dtype(gy)
    if t < 0:
        return None
    for a in (x, y):
        if a is not None and (_vector_dtype(a) != t or not _same_shape(<cnp.ndarray>a, <cnp.ndarray>gy)):
            return None
    cdef cnp.ndarray g = _contiguous(gy)
    cdef cnp.ndarray xa = _contiguous(x) if x is not None else None
    cdef cnp.ndarray ya = _contiguous(y) if y is not None else None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(g), cnp.PyArray_DIMS(g), t, 0)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(g)
    cdef char* pg = <char*>cnp.PyArray_DATA(g)
    cdef char* px = <char*>cnp.PyArray_DATA(xa) if xa is not None else NULL
    cdef char* py = <char*>cnp.PyArray_DATA(ya) if ya is not None else NULL
    cdef char* po = <char*>cnp.PyArray_DATA(out)
    cdef Span s
    s.gk, s.t, s.n, s.item, s.p = k, t, n, cnp.PyArray_ITEMSIZE(g), p
    s.a, s.b, s.c, s.out = pg, px, py, po
    _run_span(_vector_grad_chunk, &s, _threads_for(n, GRAIN_VECTOR))
    return out


cdef object np_log = numpy.log


cpdef object log_forward(object x):
    r = _vector_unary(K_LOG, x, 0)
    return np_log(x) if r is None else r


cpdef object erf_forward(object x):
    """The error function of a float16/32/64 NumPy array (libm's erf, vector
    variants where libmvec has them), or None for other operands."""
    return _vector_unary(K_ERF, x, 0)


cpdef object erf_grad(object gy, object x):
    """gy * 2/sqrt(pi) * exp(-x*x), or None."""
    return _vector_grad(G_ERF, gy, x, None, 0)


cpdef object softplus_forward(object x, double beta):
    """log(1 + exp(beta x)) / beta, or None for operands the kernel does not take."""
    return _vector_unary(K_SOFTPLUS, x, beta)


cpdef object gelu_forward(object x, bint tanh_approximation):
    """x Phi(x) (tanh_approximation: torch's approximate='tanh'), or None
    for operands the kernel does not take."""
    return _vector_unary(K_GELU_TANH if tanh_approximation else K_GELU, x, 0)


cpdef object gelu_grad(object gy, object x, bint tanh_approximation):
    """gy times GELU's derivative at x, or None."""
    return _vector_grad(G_GELU_TANH if tanh_approximation else G_GELU, gy, x, None, 0)


cpdef object leaky_relu_forward(object x, double slope):
    """x if x >= 0 else slope x, or None."""
    return _vector_unary(K_LEAKY_RELU, x, slope)


cpdef object elu_forward(object x, double alpha):
    """x if x >= 0 else alpha (exp(x) - 1), or None."""
    return _vector_unary(K_ELU, x, alpha)


cpdef object softplus_grad(object gy, object x, double beta):
    """gy sigmoid(beta x), or None."""
    return _vector_grad(G_SOFTPLUS, gy, x, None, beta)


cpdef object leaky_relu_grad(object gy, object x, double slope):
    """gy if x >= 0 else slope gy, or None."""
    return _vector_grad(G_LEAKY_RELU, gy, x, None, slope)


cpdef object elu_grad(object gy, object x, object y, double alpha):
    """gy if x >= 0 else gy (y + alpha), or None."""
    return _vector_grad(G_ELU, gy, x, y, alpha)


cdef inline void _softmax_rows(int t, bint log, void* x, void* y, Py_ssize_t r0,
                               Py_ssize_t rows, Py_ssize_t m) noexcept nogil:
    """Rows r0 to r0 + rows of a softmax over rows of m elements."""
    if t == cnp.NPY_FLOAT:
        xgrad_softmax_rows_f32(<float*>x + r0 * m, <float*>y + r0 * m, rows, m, log)
    else:
        xgrad_softmax_rows_f64(<double*>x + r0 * m, <double*>y + r0 * m, rows, m, log)


cdef inline void _softmax_grad_rows(int t, bint log, void* gy, void* y, void* gx,
                                    Py_ssize_t r0, Py_ssize_t rows, Py_ssize_t m) noexcept nogil:
    if t == cnp.NPY_FLOAT:
        xgrad_softmax_grad_rows_f32(<float*>gy + r0 * m, <float*>y + r0 * m,
                                    <float*>gx + r0 * m, rows, m, log)
    else:
        xgrad_softmax_grad_rows_f64(<double*>gy + r0 * m, <double*>y + r0 * m,
                                    <double*>gx + r0 * m, rows, m, log)


cpdef object softmax_last_axis(object x, bint log):
    """softmax (log_softmax if ``log``) over the last axis of a float32/64
    array, or None (other dtypes, 0-d, empty)."""
    cdef int t = _vector_dtype(x)
    if t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE or cnp.PyArray_NDIM(<cnp.ndarray>x) == 0:
        return None
    cdef cnp.ndarray a = _contiguous(x)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    cdef Py_ssize_t m = cnp.PyArray_DIM(a, cnp.PyArray_NDIM(a) - 1)
    if n == 0:
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), t, 0)
    cdef void* px = cnp.PyArray_DATA(a)
    cdef void* po = cnp.PyArray_DATA(out)
    cdef Py_ssize_t rows = n // m
    cdef Span s
    s.t, s.flag, s.a, s.out, s.n, s.m = t, log, <char*>px, <char*>po, rows, m
    with nogil:
        _split_rows(_softmax_chunk, &s, _threads_for(n, GRAIN_VECTOR))
    return out


cdef void _softmax_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t r0 = c * s.chunk
    _softmax_rows(s.t, s.flag, s.a, s.out, r0, min(s.chunk, s.n - r0), s.m)


cpdef object softmax_last_axis_grad(object gy, object y, bint log):
    """The gradient of softmax_last_axis from gy and its output y, or None."""
    cdef int t = _vector_dtype(y)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE or _vector_dtype(gy) != t
            or cnp.PyArray_NDIM(<cnp.ndarray>y) == 0
            or not _same_shape(<cnp.ndarray>gy, <cnp.ndarray>y)):
        return None
    cdef cnp.ndarray g = _contiguous(gy)
    cdef cnp.ndarray ya = _contiguous(y)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(ya)
    cdef Py_ssize_t m = cnp.PyArray_DIM(ya, cnp.PyArray_NDIM(ya) - 1)
    if n == 0:
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(ya), cnp.PyArray_DIMS(ya), t, 0)
    cdef void* pg = cnp.PyArray_DATA(g)
    cdef void* py = cnp.PyArray_DATA(ya)
    cdef void* po = cnp.PyArray_DATA(out)
    cdef Py_ssize_t rows = n // m
    cdef Span s
    s.t, s.flag, s.a, s.b, s.out, s.n, s.m = t, log, <char*>pg, <char*>py, <char*>po, rows, m
    with nogil:
        _split_rows(_softmax_grad_chunk, &s, _threads_for(n, GRAIN_VECTOR))
    return out


cdef void _softmax_grad_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t r0 = c * s.chunk
    _softmax_grad_rows(s.t, s.flag, s.a, s.b, s.out, r0, min(s.chunk, s.n - r0), s.m)


cpdef object softmax_axis(object x, int axis, bint log):
    """softmax (log_softmax if ``log``) over axis ``axis`` of a float32/64
    array, or None (other dtypes, 0-d, empty): the last axis by the rows
    kernel, another (the channels of (N, C, H, W)) by tiles of XGRAD_MID_TILE
    columns of its (outer, m, inner) blocks, split over the pool."""
    cdef int t = _vector_dtype(x)
    if t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE:
        return None
    cdef int nd = cnp.PyArray_NDIM(<cnp.ndarray>x)
    if not 0 <= axis < nd:
        return None
    if axis == nd - 1:
        return softmax_last_axis(x, log)
    cdef cnp.ndarray a = _contiguous(x)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    if n == 0:
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(nd, cnp.PyArray_DIMS(a), t, 0)
    cdef Span s
    s.t, s.flag, s.a, s.b, s.out = (t, log, <char*>cnp.PyArray_DATA(a), NULL,
                                    <char*>cnp.PyArray_DATA(out))
    _mid_blocks(a, axis, &s)
    with nogil:
        _split_rows(_softmax_mid_chunk, &s, _threads_for(n, GRAIN_VECTOR))
    return out


cpdef object softmax_axis_grad(object gy, object y, int axis, bint log):
    """The gradient of softmax_axis from gy and its output y, or None."""
    cdef int t = _vector_dtype(y)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE or _vector_dtype(gy) != t
            or not _same_shape(<cnp.ndarray>gy, <cnp.ndarray>y)):
        return None
    cdef int nd = cnp.PyArray_NDIM(<cnp.ndarray>y)
    if not 0 <= axis < nd:
        return None
    if axis == nd - 1:
        return softmax_last_axis_grad(gy, y, log)
    cdef cnp.ndarray g = _contiguous(gy)
    cdef cnp.ndarray ya = _contiguous(y)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(ya)
    if n == 0:
        return None
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(nd, cnp.PyArray_DIMS(ya), t, 0)
    cdef Span s
    s.t, s.flag, s.a, s.b, s.out = (t, log, <char*>cnp.PyArray_DATA(g),
                                    <char*>cnp.PyArray_DATA(ya), <char*>cnp.PyArray_DATA(out))
    _mid_blocks(ya, axis, &s)
    with nogil:
        _split_rows(_softmax_mid_chunk, &s, _threads_for(n, GRAIN_VECTOR))
    return out


cdef void _mid_blocks(cnp.ndarray a, int axis, Span* s):
    """s.m: the axis's length; s.step: the elements after it (inner); s.n:
    the tiles, (outer blocks) x (tiles of XGRAD_MID_TILE columns a block)."""
    cdef Py_ssize_t outer = 1, inner = 1
    cdef int k
    for k in range(axis):
        outer *= cnp.PyArray_DIM(a, k)
    for k in range(axis + 1, cnp.PyArray_NDIM(a)):
        inner *= cnp.PyArray_DIM(a, k)
    s.m, s.step = cnp.PyArray_DIM(a, axis), inner
    s.n = outer * ((inner + XGRAD_MID_TILE - 1) // XGRAD_MID_TILE)


cdef void _softmax_mid_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    """Tiles of softmax_axis (s.b NULL: x in s.a) or of its gradient (gy in
    s.a, y in s.b)."""
    cdef Span* s = <Span*>ctx
    cdef Py_ssize_t tiles = (s.step + XGRAD_MID_TILE - 1) // XGRAD_MID_TILE, u, o, j0, j1
    cdef Py_ssize_t at
    for u in range(c * s.chunk, min((c + 1) * s.chunk, s.n)):
        o, j0 = u // tiles, (u % tiles) * XGRAD_MID_TILE
        j1, at = min(j0 + XGRAD_MID_TILE, s.step), o * s.m * s.step
        if s.t == cnp.NPY_FLOAT and s.b == NULL:
            xgrad_softmax_mid_f32(<float*>s.a + at, <float*>s.out + at, s.m, s.step, j0, j1,
                                  s.flag)
        elif s.t == cnp.NPY_FLOAT:
            xgrad_softmax_grad_mid_f32(<float*>s.a + at, <float*>s.b + at, <float*>s.out + at,
                                       s.m, s.step, j0, j1, s.flag)
        elif s.b == NULL:
            xgrad_softmax_mid_f64(<double*>s.a + at, <double*>s.out + at, s.m, s.step, j0, j1,
                                  s.flag)
        else:
            xgrad_softmax_grad_mid_f64(<double*>s.a + at, <double*>s.b + at,
                                       <double*>s.out + at, s.m, s.step, j0, j1, s.flag)


# -- sum of every element ---------------------------------------------------------

# Contiguous float32/64 arrays are summed here, at every size and thread
# count: blocks of SUM_BLOCK elements (in parallel on large arrays), each in
# double; then the block sums in order, compensated (Neumaier). A result
# therefore does not depend on the number of threads.
cdef Py_ssize_t SUM_BLOCK = 4096


cpdef object sum_all(object x, double divisor=1):
    """The sum of all elements of a float32/64 array (divided by ``divisor``,
    before the one rounding to float32: the mean), as a 0-d array of its
    dtype; None for other arrays (NumPy sums those). More accurate than
    NumPy's pairwise sum for float32 (double accumulation), split over
    threads on large arrays, and without NumPy's reduction set-up on small
    ones (0.06 us where add.reduce takes 1.4)."""
    cdef int t = _vector_dtype(x)
    if t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE:
        return None
    cdef cnp.ndarray a = _contiguous(x)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a), blocks = (n + SUM_BLOCK - 1) // SUM_BLOCK, b
    cdef char* p = <char*>cnp.PyArray_DATA(a)
    cdef double total = 0, carry = 0, v, s, one
    cdef double* sums
    cdef Span span
    if blocks <= 1:
        if n:
            _block_sums(t, p, n, &total, 0, 1)
    else:
        sums = <double*>PyMem_Malloc(blocks * sizeof(double))
        if sums == NULL:
            raise MemoryError()
        span.t, span.a, span.m, span.sums, span.n = t, p, n, sums, blocks
        with nogil:
            _split_rows(_sum_chunk, &span, _threads_for(n, GRAIN_ARITHMETIC))
            for b in range(blocks):
                v = sums[b]
                s = total + v
                if (total if total >= 0 else -total) >= (v if v >= 0 else -v):
                    carry += (total - s) + v
                else:
                    carry += (v - s) + total
                total = s
        PyMem_Free(sums)
        total += carry
    if divisor != 1:
        total /= divisor
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(0, NULL, t, 0)
    if t == cnp.NPY_FLOAT:
        (<float*>cnp.PyArray_DATA(out))[0] = <float>total
    else:
        (<double*>cnp.PyArray_DATA(out))[0] = total
    return out


cpdef object sum_channels(object x):
    """The sums of a batch (N, C, ...) over every axis but the channels, as a
    (C,) array of its dtype (conv's bias gradient); None for other arrays
    (NumPy sums those). Each sample's plane of a channel is one vectorized
    sum, added in double: NumPy's reduce over axes (0, 2, 3) took 8 us of a
    small training step's 111 (1->16 1x1 stride 2 on 4x4 at batch 1; 1.7
    us called alone in a loop). Split over channels by _plane_sums."""
    cdef int t = _vector_dtype(x)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or cnp.PyArray_NDIM(<cnp.ndarray>x) < 2:
        return None
    cdef cnp.ndarray a = _contiguous(x)
    cdef Py_ssize_t c = cnp.PyArray_DIM(a, 1), n = cnp.PyArray_DIM(a, 0)
    return _plane_sums(a, t, n, c, cnp.PyArray_SIZE(a) // (n * c) if n * c else 0, (c,), 1)


cdef void _sum_chunk(void* ctx, Py_ssize_t c) noexcept nogil:
    cdef Span* s = <Span*>ctx  # n: blocks; m: elements
    _block_sums(s.t, s.a, s.m, s.sums, c * s.chunk, min((c + 1) * s.chunk, s.n))


cdef inline void _block_sums(int t, char* p, Py_ssize_t n, double* sums,
                             Py_ssize_t b0, Py_ssize_t b1) noexcept nogil:
    """sums[b] for the blocks b0 to b1 of ``sum_all``."""
    cdef Py_ssize_t b, start
    for b in range(b0, b1):
        start = b * SUM_BLOCK
        if t == cnp.NPY_FLOAT:
            sums[b] = xgrad_sum_f32(<float*>p + start, min(SUM_BLOCK, n - start))
        else:
            sums[b] = xgrad_sum_f64(<double*>p + start, min(SUM_BLOCK, n - start))
