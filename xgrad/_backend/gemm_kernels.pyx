# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""xgrad's float32 GEMM (sgemm.h), split over the worker pool.

``sgemm(a, b, out)`` computes out = a @ b (or out += a @ b) for 2-D float32
NumPy arrays of any strides, and returns False, touching nothing, where it
does not run: another dtype, the SSE2 path (no micro-kernel: the BLAS is
faster there), an ``out`` whose rows are not contiguous, a product whose
tiles would be a quarter padding or more (rows past a multiple of MR,
columns past one of NR: 128->128 5x5 stride 2 on 4x4 at batch 1, whose
products have 4 columns, took 1.7x the BLAS's time; 9 rows of 8-row tiles
2.1x), or a sum of fewer than MIN_DEPTH products. Callers then
use the BLAS. The convolution products that OpenBLAS runs slowly take it
(xgrad/_ops/convolution.py says which).

``sgemm_sum(a, b, out)`` sums a stack of products into one matrix (the
per-sample products of a weight gradient). ``sgemm_blocks(a, b, out,
blocks)`` runs a list of sub-block products of
three matrices in one call: the convolution over tap groups
(xgrad/_ops/_tap_groups.py), a few to a few hundred blocks a product.
"""

cimport numpy as cnp

from xgrad._backend.native_kernels cimport pool_threads, run_chunks, vector_path

import numpy

cnp.import_array()

cdef extern from "sgemm.h":
    ctypedef struct xgrad_matrix:
        const float* data
        Py_ssize_t rs
        Py_ssize_t cs
    ctypedef struct xgrad_sgemm_shape:
        void* kernel
        int mr
        int nr
        int mc
    int XGRAD_SGEMM_AVX2_MR
    xgrad_sgemm_shape xgrad_sgemm_shape_for(int path) noexcept nogil
    int xgrad_sgemm_run(xgrad_sgemm_shape s, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                        xgrad_matrix a, xgrad_matrix b, float* c, Py_ssize_t ldc,
                        int acc) noexcept nogil

# A product is split over the pool's threads when each thread gets at least
# this many multiply-adds (about 10 us of one core's work), into one part
# per thread: by columns of the result in whole panels where there are
# enough of them, else by rows.
DEF SPLIT_GRAIN = 1 << 20
# Sums of fewer products than this go to the BLAS: each tile's loads and
# stores of C then outweigh its multiply-adds (16 x 9 times 9 x 4096: 64
# GFLOP/s against OpenBLAS's 83).
DEF MIN_DEPTH = 16


cdef struct GemmJob:
    xgrad_sgemm_shape shape
    Py_ssize_t m, n, k, ldc
    xgrad_matrix a, b
    float* c
    # Between the products of a batch, in elements: a stack of up to two
    # batch axes, product ``item`` at (item // inner, item % inner).
    Py_ssize_t inner
    Py_ssize_t a_outer, b_outer, c_outer, a_step, b_step, c_step
    # Products summed into each C (sgemm_sum), ``a_term`` and ``b_term``
    # elements apart; 1 otherwise.
    Py_ssize_t terms, a_term, b_term
    int acc
    bint by_columns
    Py_ssize_t per_part  # columns or rows a part
    Py_ssize_t item_parts  # parts of each product
    int failed


cdef void _gemm_part(void* ctx, Py_ssize_t part) noexcept nogil:
    cdef GemmJob* job = <GemmJob*>ctx
    cdef Py_ssize_t item = part // job.item_parts
    cdef Py_ssize_t lo = part % job.item_parts * job.per_part
    cdef Py_ssize_t hi
    cdef Py_ssize_t outer = item // job.inner, inner = item % job.inner
    cdef xgrad_matrix a = job.a, b = job.b
    cdef float* c = job.c + outer * job.c_outer + inner * job.c_step
    cdef int ok
    cdef Py_ssize_t term
    a.data = a.data + outer * job.a_outer + inner * job.a_step
    b.data = b.data + outer * job.b_outer + inner * job.b_step
    if job.by_columns:
        hi = min(lo + job.per_part, job.n)
        b.data = b.data + lo * b.cs
        c = c + lo
    else:
        hi = min(lo + job.per_part, job.m)
        a.data = a.data + lo * a.rs
        c = c + lo * job.ldc
    for term in range(job.terms):  # (each part sums its terms in order)
        if job.by_columns:
            ok = xgrad_sgemm_run(job.shape, job.m, hi - lo, job.k, a, b, c, job.ldc,
                                 job.acc or term > 0)
        else:
            ok = xgrad_sgemm_run(job.shape, hi - lo, job.n, job.k, a, b, c, job.ldc,
                                 job.acc or term > 0)
        if not ok:
            job.failed = 1
            return
        a.data = a.data + job.a_term
        b.data = b.data + job.b_term


cdef inline Py_ssize_t _round_up(Py_ssize_t v, Py_ssize_t step) noexcept nogil:
    return (v + step - 1) // step * step


cdef bint _float32_operand(object x, int ndim):
    return (type(x) is cnp.ndarray and (<cnp.ndarray>x).ndim == ndim
            and (<cnp.ndarray>x).dtype.num == cnp.NPY_FLOAT32
            and cnp.PyArray_ISALIGNED(<cnp.ndarray>x))


cdef bint _takes(xgrad_sgemm_shape shape, object a, object b, object out, int operand_ndim,
                 int out_ndim):
    """Whether this path has a micro-kernel and ``a``, ``b`` (``operand_ndim``
    axes) and ``out`` (``out_ndim``) are aligned float32 NumPy arrays: what
    every entry here takes before looking at shapes and strides."""
    return (shape.kernel != NULL and type(out) is cnp.ndarray
            and _float32_operand(a, operand_ndim) and _float32_operand(b, operand_ndim)
            and _float32_operand(out, out_ndim))


cdef bint _plain_strides(cnp.ndarray x):
    """Non-negative strides in whole elements (what sgemm.h's operands take)."""
    cdef int i
    for i in range(x.ndim):
        if x.strides[i] < 0 or x.strides[i] % 4:
            return False
    return True


cdef void _run_split(GemmJob* job, Py_ssize_t batch) noexcept nogil:
    """Run ``job`` (``batch`` products), split over the pool's threads when
    each gets at least SPLIT_GRAIN multiply-adds: by columns in whole panels
    where there are enough of them, else by rows."""
    cdef Py_ssize_t m = job.m, n = job.n
    cdef Py_ssize_t threads = min(<Py_ssize_t>pool_threads(),
                                  max(1, batch * job.terms * m * n * job.k // SPLIT_GRAIN))
    # parts of each product: enough for every thread when the batch is short
    cdef Py_ssize_t parts = max(1, threads // batch), item
    job.by_columns = n >= parts * job.shape.nr or m < parts * job.shape.mr
    if parts == 1:
        job.by_columns, job.per_part = True, n
    elif job.by_columns:
        job.per_part = _round_up((n + parts - 1) // parts, job.shape.nr)
        parts = (n + job.per_part - 1) // job.per_part
    else:
        job.per_part = _round_up((m + parts - 1) // parts, job.shape.mr)
        parts = (m + job.per_part - 1) // job.per_part
    job.item_parts = parts
    if parts * batch == 1 or threads == 1:
        for item in range(parts * batch):
            _gemm_part(job, item)
    else:
        run_chunks(_gemm_part, job, parts * batch)


cdef void _start_job(GemmJob* job, xgrad_sgemm_shape shape, cnp.ndarray av, cnp.ndarray bv,
                     cnp.ndarray cv, int ra, int rc, bint accumulate):
    """``job`` for one product of the matrices at axes ra, ra + 1 of ``av``
    and ``bv`` into ``cv``'s at rc, rc + 1; callers add a stack or terms."""
    job.shape = shape
    job.m, job.k, job.n = av.shape[ra], av.shape[ra + 1], bv.shape[ra + 1]
    job.a.data = <const float*>cnp.PyArray_DATA(av)
    job.a.rs, job.a.cs = av.strides[ra] // 4, av.strides[ra + 1] // 4
    job.b.data = <const float*>cnp.PyArray_DATA(bv)
    job.b.rs, job.b.cs = bv.strides[ra] // 4, bv.strides[ra + 1] // 4
    job.c = <float*>cnp.PyArray_DATA(cv)
    job.ldc = cv.strides[rc] // 4
    job.inner = 1
    job.a_step = job.b_step = job.c_step = job.a_outer = job.b_outer = job.c_outer = 0
    job.terms, job.a_term, job.b_term = 1, 0, 0
    job.acc = accumulate
    job.failed = 0


cdef _run_job(GemmJob* job, Py_ssize_t batch, str entry):
    """Run ``job`` (``batch`` products) over the pool; MemoryError naming
    ``entry`` where a thread's packing scratch could not be allocated."""
    with nogil:
        _run_split(job, batch)
    if job.failed:
        raise MemoryError('{}: cannot allocate packing scratch for ({}, {}) @ ({}, {}) '
                          'products'.format(entry, job.m, job.k, job.k, job.n))


def available():
    """Whether sgemm runs on the dispatch path selected now (AVX2 or AVX-512)."""
    return xgrad_sgemm_shape_for(vector_path()).kernel != NULL


# The AVX2 micro-kernel's tile rows: the rules measured on that kernel (in
# convolution, _polyphase and _tap_groups) compare tile_rows() with it.
AVX2_TILE_ROWS = XGRAD_SGEMM_AVX2_MR


def tile_rows():
    """The rows of the micro-kernel's tile on the dispatch path selected now
    (8 on AVX-512, 6 on AVX2; 0 without one): a product of m rows runs
    ceil(m / tile_rows()) tiles, the last one computed whole."""
    return xgrad_sgemm_shape_for(vector_path()).mr


def declines(Py_ssize_t m, Py_ssize_t n, Py_ssize_t k):
    """Whether sgemm declines an (m, k) @ (k, n) product for speed (tiles a
    quarter padding or more, a sum of fewer than MIN_DEPTH products) on the
    dispatch path selected now, or has no kernel there; callers skip
    building its operands."""
    cdef xgrad_sgemm_shape shape = xgrad_sgemm_shape_for(vector_path())
    if shape.kernel == NULL:
        return True
    return _declined(shape, m, n, k)


cdef bint _declined(xgrad_sgemm_shape shape, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k):
    """Tiles a quarter padding or more, or too short a sum (the module's
    docstring): where the BLAS runs the product faster."""
    return bool(m and n and (4 * m < 3 * _round_up(m, shape.mr)
                             or 4 * n < 3 * _round_up(n, shape.nr) or k < MIN_DEPTH))


def sgemm(a, b, out, bint accumulate=False, bint any_shape=False):
    """out = a @ b, or out += a @ b with ``accumulate``, for matrices or for
    stacks of them (3-D, or 4-D: two batch axes of any strides, as
    attention's (batch, heads, rows, columns) views; the same shape in each,
    broadcast operands as strides of 0); True
    when done, False (nothing written) where this GEMM does not run (see
    the module's docstring). ``any_shape``: also the products it declines
    for speed (tiles a quarter padding or more, short sums), where calling
    the BLAS costs more (host_gemm: its threads would spin beside ours).
    ``out`` must not overlap ``a`` or ``b``."""
    cdef xgrad_sgemm_shape shape = xgrad_sgemm_shape_for(vector_path())
    cdef int nd = out.ndim if type(out) is cnp.ndarray else 0
    if nd not in (2, 3, 4) or not _takes(shape, a, b, out, nd, nd):
        return False
    cdef cnp.ndarray av = a, bv = b, cv = out
    cdef int r = nd - 2, i  # the row axis
    cdef Py_ssize_t batch = 1
    for i in range(r):
        batch *= cv.shape[i]
        if av.shape[i] != cv.shape[i] or bv.shape[i] != cv.shape[i]:
            raise ValueError('sgemm: shapes {} @ {} -> {} do not match'.format(
                a.shape, b.shape, out.shape))
    cdef Py_ssize_t m = av.shape[r], k = av.shape[r + 1], n = bv.shape[r + 1]
    if bv.shape[r] != k or cv.shape[r] != m or cv.shape[r + 1] != n:
        raise ValueError('sgemm: shapes {} @ {} -> {} do not match'.format(
            a.shape, b.shape, out.shape))
    if m == 0 or n == 0 or batch == 0:  # (empty arrays may have strides of 0)
        return True
    if not cnp.PyArray_ISWRITEABLE(cv) or (n > 1 and cv.strides[r + 1] != 4):
        return False
    if not any_shape and _declined(shape, m, n, k):
        return False
    if not (_plain_strides(av) and _plain_strides(bv) and _plain_strides(cv)):
        return False
    for i in range(r):
        if cv.shape[i] > 1 and cv.strides[i] == 0:
            return False  # (products writing one matrix)
    cdef GemmJob job
    _start_job(&job, shape, av, bv, cv, r, r, accumulate)
    if r:
        job.inner = cv.shape[r - 1]
        job.a_step, job.b_step = av.strides[r - 1] // 4, bv.strides[r - 1] // 4
        job.c_step = cv.strides[r - 1] // 4
    if r == 2:
        job.a_outer, job.b_outer = av.strides[0] // 4, bv.strides[0] // 4
        job.c_outer = cv.strides[0] // 4
    _run_job(&job, batch, 'sgemm')
    return True


def sgemm_sum(a, b, out, bint accumulate=False, bint any_shape=False):
    """out = a[0] @ b[0] + a[1] @ b[1] + ... (out += with ``accumulate``) for
    stacks ``a`` (batch, m, k) and ``b`` (batch, k, n) and a matrix ``out``
    (m, n): a weight gradient's per-sample products summed as they are
    computed, without a (batch, m, n) stack or operands copied to put the
    batch beside the sum's axis. Split over the pool by blocks of ``out``
    (as sgemm's products), each block summing the terms in order: one
    thread's bits at any thread count. True when done, False (nothing
    written) where sgemm would not run (see sgemm)."""
    cdef xgrad_sgemm_shape shape = xgrad_sgemm_shape_for(vector_path())
    if not _takes(shape, a, b, out, 3, 2):
        return False
    cdef cnp.ndarray av = a, bv = b, cv = out
    cdef Py_ssize_t terms = av.shape[0]
    cdef Py_ssize_t m = av.shape[1], k = av.shape[2], n = bv.shape[2]
    if (bv.shape[0] != terms or bv.shape[1] != k or cv.shape[0] != m or cv.shape[1] != n):
        raise ValueError('sgemm_sum: shapes {} @ {} -> {} do not match'.format(
            a.shape, b.shape, out.shape))
    if not cnp.PyArray_ISWRITEABLE(cv) or (n > 1 and cv.strides[1] != 4):
        return False
    if m == 0 or n == 0:
        return True
    if terms == 0 or k == 0:  # an empty sum
        if not accumulate:
            out.fill(0)
        return True
    if not any_shape and _declined(shape, m, n, k):
        return False
    if not (_plain_strides(av) and _plain_strides(bv) and _plain_strides(cv)):
        return False
    cdef GemmJob job
    _start_job(&job, shape, av, bv, cv, 1, 0, accumulate)
    job.terms, job.a_term, job.b_term = terms, av.strides[0] // 4, bv.strides[0] // 4
    _run_job(&job, 1, 'sgemm_sum')
    return True


cdef struct BlocksJob:
    xgrad_sgemm_shape shape
    const cnp.int64_t* spec  # rows of (r0, c0, k0, m, n, k, acc)
    Py_ssize_t count
    const float* a
    const float* b
    float* c
    Py_ssize_t ars, acs, brs, bcs, ldc
    bint by_columns
    Py_ssize_t parts, step  # the parts, and the columns (or rows) of out in each
    int failed


cdef void _blocks_part(void* ctx, Py_ssize_t part) noexcept nogil:
    """The share ``part`` of every block, in the blocks' order: the parts
    cut ``out`` itself into fixed ranges of columns (or rows), so that each
    element of ``out`` belongs to one part, whichever blocks write it, and
    is summed by one thread in the blocks' order (results are those of one
    thread, bit for bit)."""
    cdef BlocksJob* job = <BlocksJob*>ctx
    cdef const cnp.int64_t* row
    cdef Py_ssize_t i, r0, c0, k0, m, n, lo, hi
    cdef Py_ssize_t first = part * job.step, last = first + job.step
    cdef xgrad_matrix a, b
    a.rs, a.cs, b.rs, b.cs = job.ars, job.acs, job.brs, job.bcs
    for i in range(job.count):
        row = job.spec + 7 * i
        r0, c0, k0, m, n = row[0], row[1], row[2], row[3], row[4]
        if job.by_columns:
            lo, hi = max(c0, first), min(c0 + n, last)
            c0, n = lo, hi - lo
        else:
            lo, hi = max(r0, first), min(r0 + m, last)
            r0, m = lo, hi - lo
        if m <= 0 or n <= 0:
            continue
        a.data = job.a + r0 * job.ars + k0 * job.acs
        b.data = job.b + k0 * job.brs + c0 * job.bcs
        if not xgrad_sgemm_run(job.shape, m, n, row[5], a, b, job.c + r0 * job.ldc + c0,
                               job.ldc, row[6] != 0):
            job.failed = 1


def sgemm_blocks(a, b, out, blocks):
    """Sub-block products of three matrices indexed alike: for each row
    (r0, c0, k0, m, n, k, acc) of ``blocks`` (int64, 7 columns),
    out[r0:r0+m, c0:c0+n] = a[r0:r0+m, k0:k0+k] @ b[k0:k0+k, c0:c0+n], or
    += with acc, in row order. The convolution over tap groups
    (xgrad/_ops/_tap_groups.py) runs its whole plan in one call this way.
    Split over the pool's threads as one job: each thread takes a fixed
    range of the columns (or rows) of ``out`` in every block, so that one
    handoff serves all the blocks and each element is summed by one thread
    in the blocks' order. True when done; False (nothing written) where sgemm
    would not run for these operands (another dtype, the SSE2 path, rows of
    ``out`` not contiguous). A block outside the operands raises
    ValueError."""
    cdef xgrad_sgemm_shape shape = xgrad_sgemm_shape_for(vector_path())
    if not _takes(shape, a, b, out, 2, 2):
        return False
    cdef cnp.ndarray av = a, bv = b, cv = out
    if not cnp.PyArray_ISWRITEABLE(cv) or (cv.shape[1] > 1 and cv.strides[1] != 4):
        return False
    if not (_plain_strides(av) and _plain_strides(bv) and _plain_strides(cv)):
        return False
    cdef cnp.int64_t[:, ::1] spec = numpy.ascontiguousarray(blocks, dtype=numpy.int64)
    if spec.shape[1] != 7:
        raise ValueError('sgemm_blocks: blocks must have 7 columns, not {}'.format(
            spec.shape[1]))
    cdef Py_ssize_t i, r0, c0, k0, m, n, k, work = 0
    for i in range(spec.shape[0]):
        r0, c0, k0 = spec[i, 0], spec[i, 1], spec[i, 2]
        m, n, k = spec[i, 3], spec[i, 4], spec[i, 5]
        if (min(r0, c0, k0, m, n, k) < 0 or r0 + m > cv.shape[0] or c0 + n > cv.shape[1]
                or r0 + m > av.shape[0] or k0 + k > av.shape[1]
                or k0 + k > bv.shape[0] or c0 + n > bv.shape[1]):
            raise ValueError('sgemm_blocks: block {} {} is outside a {}, b {}, out {}'.format(
                i, tuple(spec[i]), a.shape, b.shape, out.shape))
        work += m * n * k
    if spec.shape[0] == 0:
        return True
    cdef BlocksJob job
    job.shape = shape
    job.spec = &spec[0, 0]
    job.count = spec.shape[0]
    job.a = <const float*>cnp.PyArray_DATA(av)
    job.b = <const float*>cnp.PyArray_DATA(bv)
    job.c = <float*>cnp.PyArray_DATA(cv)
    job.ars, job.acs = av.strides[0] // 4, av.strides[1] // 4
    job.brs, job.bcs = bv.strides[0] // 4, bv.strides[1] // 4
    job.ldc = cv.strides[0] // 4
    job.failed = 0
    # parts of out: whole panels of columns where there are two a part, else
    # whole tiles of rows
    cdef Py_ssize_t rows = cv.shape[0], cols = cv.shape[1]
    job.parts = min(<Py_ssize_t>pool_threads(), max(1, work // SPLIT_GRAIN))
    job.by_columns = job.parts == 1 or cols >= 2 * job.parts * shape.nr
    if job.parts > 1 and not job.by_columns and rows < 2 * job.parts * shape.mr:
        job.parts, job.by_columns = 1, True
    if job.by_columns:
        job.step = _round_up((cols + job.parts - 1) // job.parts, shape.nr)
    else:
        job.step = _round_up((rows + job.parts - 1) // job.parts, shape.mr)
    with nogil:
        if job.parts == 1:
            _blocks_part(&job, 0)
        else:
            run_chunks(_blocks_part, &job, job.parts)
    if job.failed:
        raise MemoryError('sgemm_blocks: cannot allocate packing scratch')
    return True
