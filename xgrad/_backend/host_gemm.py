"""Which GEMM runs a float32 product on the host: NumPy's BLAS or xgrad's own.

xgrad's sgemm (gemm_kernels) has an AVX-512 and an AVX2 micro-kernel and runs
on xgrad's worker pool. Two things decide for it:

* **One worker pool.** NumPy's OpenBLAS has a pool of its own, whose idle
  threads busy-wait after each threaded call (about 2^28 cycles, 0.1 s, by
  default) on the cores xgrad's pool computes on. With more than one thread,
  a step that mixes the two (ResNet-50 at batch 8 on 2 cores: its one
  linear layer's three products on the BLAS) ran at 1.33 s where the same
  step with the BLAS on one thread took 0.84 s. So with more than one xgrad
  thread every product xgrad can run goes to its own sgemm.
* **The widest kernel.** OpenBLAS picks its kernels by CPU *model*: on a CPU
  it does not know as an AVX-512 core (AMD's Zen 4 in the OpenBLAS of NumPy
  2.4's wheels) it runs its Haswell (AVX2) kernels, at about half the rate
  of xgrad's AVX-512 kernel on a ResNet-50 step's convolution products. So
  on the AVX-512 path, one thread, products go to xgrad's sgemm unless the
  BLAS runs AVX-512 kernels too.

Elsewhere (one thread on the AVX2 path, where the BLAS's kernels match ours
and were measured faster on wide products; SSE2; another BLAS) NumPy's BLAS
runs, as before, unless the caller's own thresholds measured xgrad's sgemm
faster for its product (``prefer_own``: convolution's im2col and col2im
products, per xgrad/_ops/_conv/dispatch.py). ``choice()`` says which and
why; ``python -m xgrad info`` prints it. Every host float32 product of the
convolutions, matmul, linear and dot goes through ``matmul`` (or
``matmul_sum``) here: no caller calls sgemm itself.
"""

import contextlib
import ctypes
import functools

import numpy

from xgrad._backend import gemm_kernels, native_kernels

_NDARRAY = numpy.ndarray
_FLOAT32 = numpy.dtype(numpy.float32)
# OpenBLAS core names whose kernels use AVX-512 (openblas_get_corename()).
AVX512_BLAS_CORES = frozenset({'skylakex', 'cooperlake', 'sapphirerapids'})
_CORENAME_SYMBOLS = ('scipy_openblas_get_corename64_', 'scipy_openblas_get_corename',
                     'openblas_get_corename64_', 'openblas_get_corename')


@functools.lru_cache(maxsize=None)
def blas_core():
    """The kernel set ("Haswell", "SkylakeX"...) of the OpenBLAS loaded in
    this process (NumPy's), or None where there is none or it cannot say."""
    try:
        with open('/proc/self/maps') as maps:
            paths = {line.split()[-1] for line in maps if 'openblas' in line.lower()}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in _CORENAME_SYMBOLS:
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                name = fn()
                return name.decode() if name else None
    return None


# Products of at most this many multiply-adds OpenBLAS runs on the calling
# thread (it threads a GEMM above 4 * 65536): no pool of its own wakes.
SMALL_PRODUCT = 4 * 65536


class GemmChoice:
    """Which GEMM runs host float32 products (``own``: xgrad's sgemm), and
    why; ``one_pool``: own for the one-pool rule, so that products larger
    than SMALL_PRODUCT run on xgrad's sgemm even where it would decline
    them for speed."""

    __slots__ = ('own', 'reason', 'one_pool')

    def __init__(self, own, reason, one_pool=False):
        self.own = own
        self.reason = reason
        self.one_pool = one_pool

    def __repr__(self):
        return 'GemmChoice(own={!r}, reason={!r})'.format(self.own, self.reason)


@functools.lru_cache(maxsize=None)
def decide(path, core, has_kernel, threads=1, prefer_own=False):
    """The GemmChoice on CPU path ``path`` with NumPy's OpenBLAS running its
    ``core`` kernels (None: not known), ``has_kernel``: whether xgrad's
    sgemm has a micro-kernel on that path, ``threads``: xgrad's pool's;
    ``prefer_own``: the caller measured xgrad's sgemm faster for its
    product on this path (it then runs there even where the BLAS would)."""
    found = _decide(path, core, has_kernel, threads)
    if prefer_own and has_kernel and not found.own:
        return GemmChoice(True, "xgrad's sgemm ({}): measured faster than the BLAS for this "
                                "product (the caller's thresholds)".format(path))
    return found


@functools.lru_cache(maxsize=None)
def _decide(path, core, has_kernel, threads):
    if not has_kernel:
        return GemmChoice(False, "NumPy's BLAS: xgrad's sgemm has no kernel on the "
                                 '{} path'.format(path))
    if threads > 1:
        return GemmChoice(True, "xgrad's sgemm ({}, {} threads): one worker pool, not "
                                "NumPy's BLAS threads spinning beside xgrad's".format(
                                    path, threads), one_pool=True)
    if path != 'avx512':
        return GemmChoice(False, "NumPy's BLAS: on the {} path its kernels are as wide as "
                                 "xgrad's".format(path))
    if core is None:
        return GemmChoice(False, "NumPy's BLAS: not an OpenBLAS that names its kernels")
    if core.lower() in AVX512_BLAS_CORES:
        return GemmChoice(False, "NumPy's BLAS: OpenBLAS runs its {} (AVX-512) "
                                 'kernels'.format(core))
    return GemmChoice(True, "xgrad's sgemm (AVX-512): NumPy's OpenBLAS runs its {} kernels, "
                            'without AVX-512, on this CPU'.format(core))


_forced = None


_choices = {}  # (CPU path, threads, prefer_own) -> GemmChoice: the rest is fixed


def choice(prefer_own=False):
    """The GemmChoice for this process's CPU path (XGRAD_CPU_PATH) and BLAS
    (``prefer_own``: as ``decide``'s)."""
    if _forced is not None:
        return _forced
    key = (native_kernels.cpu_path(), native_kernels.max_threads(), prefer_own)
    found = _choices.get(key)
    if found is None:
        found = _choices[key] = decide(key[0], blas_core(), gemm_kernels.available(), key[1],
                                       prefer_own)
    return found


@contextlib.contextmanager
def forced(own):
    """Within the block, products take xgrad's sgemm (``own``, where it takes
    the operands) or NumPy's BLAS whatever ``choice()`` says (for tests)."""
    global _forced
    before = _forced
    _forced = GemmChoice(bool(own), 'forced', one_pool=bool(own))
    try:
        yield
    finally:
        _forced = before


def _stack_axes(views):
    """The batch axes of ``views`` (operands of one shape lead + (rows,
    cols)) merged where every view steps through them as through one axis,
    axes of size 1 dropped: a list of (size, strides of each view)."""
    axes = []
    for i in range(views[0].ndim - 2):
        size = views[0].shape[i]
        if size == 1:
            continue
        strides = tuple(v.strides[i] for v in views)
        if axes and all(s * size == o for s, o in zip(strides, axes[-1][1])):
            axes[-1] = (axes[-1][0] * size, strides)  # (outer steps over whole inner runs)
        else:
            axes.append((size, strides))
    return axes


def _stacked_sgemm(a, b, out, accumulate, any_shape):
    """sgemm over matmul's stack of products (``a`` and ``b`` broadcast to
    ``out``'s leading axes): the batch axes merged where they can be, the
    inner two (at most) in gemm_kernels' 3-D or 4-D stacks, any further
    outer ones looped here. False, nothing written, where sgemm declines
    (its reasons are the operands' dtype, strides and shape: the same for
    every sub-stack, so only the first can decline)."""
    if a.ndim == b.ndim == out.ndim == 3 and a.shape[0] == b.shape[0] == out.shape[0]:
        return gemm_kernels.sgemm(a, b, out, accumulate, any_shape)  # (no views to build)
    lead = out.shape[:-2]
    m, n = out.shape[-2:]
    k = a.shape[-1]
    views = (numpy.broadcast_to(a, lead + (m, k)), numpy.broadcast_to(b, lead + (k, n)), out)
    axes = _stack_axes(views)
    sizes = tuple(size for size, _ in axes)
    merged = [numpy.lib.stride_tricks.as_strided(
        v, sizes + v.shape[-2:], tuple(strides[i] for _, strides in axes) + v.strides[-2:],
        writeable=v is out) for i, v in enumerate(views)]
    for index in numpy.ndindex(*sizes[:-2]):
        if not gemm_kernels.sgemm(merged[0][index], merged[1][index], merged[2][index],
                                  accumulate, any_shape):
            return False
    return True


def _float32_arrays(a, b):
    """Whether ``a`` and ``b`` are float32 NumPy arrays (what sgemm computes)."""
    return (type(a) is _NDARRAY and type(b) is _NDARRAY and a.dtype is _FLOAT32
            and b.dtype is _FLOAT32)


def matmul(a, b, out=None, accumulate=False, prefer_own=False):
    """``numpy.matmul(a, b, out=out)`` (with ``accumulate``, ``out += a @ b``)
    for host arrays of 2 or more axes, run by xgrad's sgemm where
    ``choice(prefer_own)`` says so and it takes the operands (float32,
    aligned, non-negative strides; see gemm_kernels), else by NumPy."""
    if not _float32_arrays(a, b) or a.ndim < 2 or b.ndim < 2:
        return _numpy_matmul(a, b, out, accumulate)
    found = choice(prefer_own)
    if not found.own:
        return _numpy_matmul(a, b, out, accumulate)
    m, k = a.shape[-2:]
    n = b.shape[-1]
    any_shape = found.one_pool
    mnk = m * n * k
    if (not prefer_own and mnk <= SMALL_PRODUCT and mnk * _stack_size(a, b) <= SMALL_PRODUCT
            or not any_shape and gemm_kernels.declines(m, n, k)):
        # (microseconds of work, where the views below would cost as much, and
        # NumPy's BLAS runs it on the calling thread, waking no pool; or a
        # product sgemm leaves to the BLAS. A preferred product was measured
        # at its sizes by its caller.)
        return _numpy_matmul(a, b, out, accumulate)
    if out is None:
        if accumulate:
            raise ValueError('matmul: accumulate needs out')
        lead = numpy.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out = numpy.empty(lead + (m, n), numpy.float32)
    if out.ndim == 2:
        ok = gemm_kernels.sgemm(a, b, out, accumulate, any_shape)
    else:
        ok = _stacked_sgemm(a, b, out, accumulate, any_shape)
    return out if ok else _numpy_matmul(a, b, out, accumulate)


def matmul_sum(a, b, out, accumulate=False):
    """``out[...] = (a @ b).sum(axis=0)`` (with ``accumulate``, ``out +=``)
    for stacks ``a`` (t, m, k) and ``b`` (t, k, n) of host arrays into the
    matrix ``out`` (m, n): by xgrad's sgemm_sum, which sums the t products
    as it computes them, where ``choice()`` says so and it takes the
    operands; else by NumPy, through a (t, m, n) stack."""
    found = choice()
    if (found.own and _float32_arrays(a, b) and a.ndim == b.ndim == 3
            and a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2] > SMALL_PRODUCT
            and gemm_kernels.sgemm_sum(a, b, out, accumulate, found.one_pool)):
        return out
    total = numpy.matmul(a, b).sum(axis=0)
    if accumulate:
        out += total
    else:
        out[...] = total
    return out


def _stack_size(a, b):
    """How many products a stacked matmul of ``a`` and ``b`` computes."""
    size = 1
    for i in range(1, max(a.ndim, b.ndim) - 1):
        da = a.shape[-2 - i] if i <= a.ndim - 2 else 1
        db = b.shape[-2 - i] if i <= b.ndim - 2 else 1
        size *= max(da, db)
    return size


def _numpy_matmul(a, b, out, accumulate):
    if accumulate:
        out += numpy.matmul(a, b)
        return out
    return numpy.matmul(a, b, out=out)
