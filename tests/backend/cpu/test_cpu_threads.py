"""CPU kernels split over threads (our worker pool): same results as one thread.

* Every native kernel family, on arrays large enough to split (sizes that are
  not multiples of a chunk, float16/32/64), gives bit for bit the result of
  one thread, and NumPy's within float tolerance.
* The sum of a large float array is the same at every thread count, and
  closer to the exact sum than NumPy's (float32 is accumulated in double).
* OMP_NUM_THREADS is honoured, and a process forked after a split op still
  splits ops (the workers do not survive fork: the child starts its own;
  with GNU OpenMP's pool a child that started a parallel loop hung).
* Idle workers sleep: they take next to no CPU time once an op is done
  (GNU OpenMP's threads spun for milliseconds after each loop, against
  NumPy's BLAS threads: a WGAN-GP step with default threads beside PyTorch
  took 14x its one-thread time).
"""

import math
import os
import subprocess
import sys
import textwrap

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels as K

# More than two grains of either kind: every op below splits on 2+ threads.
N = 4 * 65536 + 37
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


# Exact assertions in this file (issue 24's audit): a split result is
# compared bit for bit with the one-thread result of the same kernel in the
# same process. That holds on every machine because xgrad's pool cuts an
# array into chunks that start at multiples of 16 elements (_chunk in
# native_kernels.pyx), so every element is computed by the same SIMD clone,
# in the same vector lane position and body/tail split, whatever the number
# of chunks; sum_all sums fixed blocks of 4096 elements and adds the block
# sums in order (the block, not the thread, is the unit). Nothing here
# compares with NumPy or libm exactly: those comparisons carry tolerances.
#
# Thread counts: the limit can only lower the pool's size (OMP_NUM_THREADS,
# else the CPUs in this process's affinity mask), so the split runs below use
# 2, 3 and every thread, each capped by what the machine has. On a one-CPU
# machine (or OMP_NUM_THREADS=1) every run is serial and the comparisons are
# trivially true; test_splitting_runs_in_a_fresh_process_with_four_threads
# below covers the split there.
SPLIT_LIMITS = (2, 3, 0)  # 0: no limit


@pytest.fixture
def one_thread_then_all():
    """Run f with one thread and with 2, 3 and every thread (each capped by
    the pool's size); the serial result and the last split one, after
    asserting that every split result is bit-identical to the serial one."""
    def run(f):
        K.set_thread_limit(1)
        try:
            serial = f()
            splits = []
            for limit in SPLIT_LIMITS:
                K.set_thread_limit(limit)
                splits.append(f())
        finally:
            K.set_thread_limit(0)
        for split in splits[:-1]:
            for a, b in zip(split if isinstance(split, tuple) else (split,),
                            serial if isinstance(serial, tuple) else (serial,)):
                assert numpy.asarray(a).tobytes() == numpy.asarray(b).tobytes()
        return serial, splits[-1]
    return run


def _data(dtype, seed=0, n=N):
    rng = numpy.random.default_rng(seed)
    return rng.uniform(-3, 3, n).astype(dtype)


UNARY = {
    'tanh': (K.tanh_forward, numpy.tanh),
    'exp': (K.exp_forward, numpy.exp),
    'log': (lambda x: K.log_forward(abs(x) + 0.5), lambda x: numpy.log(abs(x) + 0.5)),
    'sigmoid': (K.sigmoid_forward, lambda x: 1 / (1 + numpy.exp(-x))),
    'negative': (K.negative, numpy.negative),
    'relu': (K.relu_forward, lambda x: numpy.maximum(x, 0)),
    'leaky_relu': (lambda x: K.leaky_relu_forward(x, 0.2), lambda x: numpy.where(x >= 0, x, 0.2 * x)),
    'softmax': (lambda x: K.softmax_last_axis(x.reshape(-1, 31)[:, :], False),
                lambda x: (lambda e: e / e.sum(-1, keepdims=True))(
                    numpy.exp(x.reshape(-1, 31) - x.reshape(-1, 31).max(-1, keepdims=True)))),
}
BINARY = {
    'multiply': (K.multiply, numpy.multiply),
    'add': (K.add, numpy.add),
    'subtract': (K.subtract, numpy.subtract),
    'divide': (lambda a, b: K.divide(a, abs(b) + 1), lambda a, b: a / (abs(b) + 1)),
    'tanh_grad': (K.tanh_grad, lambda gy, y: gy * (1 - y * y)),
    'sigmoid_grad': (K.sigmoid_grad, lambda gy, y: gy * y * (1 - y)),
    'softplus_grad': (lambda gy, x: K.softplus_grad(gy, x, 1.5),
                      lambda gy, x: gy / (1 + numpy.exp(-1.5 * x))),
    'bias_row': (lambda a, b: K.add(a[:256 * 1024].reshape(256, 1024), b[:1024]),
                 lambda a, b: a[:256 * 1024].reshape(256, 1024) + b[:1024]),
}


def _tol(dtype):
    return {'float16': 2e-3, 'float32': 2e-6, 'float64': 1e-13}[numpy.dtype(dtype).name]


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('name', sorted(UNARY))
def test_unary_kernels_split_like_one_thread(name, dtype, one_thread_then_all):
    kernel, reference = UNARY[name]
    x = _data(dtype, n=N - N % 31 if name == 'softmax' else N)
    serial, split = one_thread_then_all(lambda: kernel(x))
    numpy.testing.assert_array_equal(split, serial)
    numpy.testing.assert_allclose(split, reference(x), rtol=_tol(dtype) * 4, atol=_tol(dtype))


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('name', sorted(BINARY))
def test_binary_kernels_split_like_one_thread(name, dtype, one_thread_then_all):
    kernel, reference = BINARY[name]
    a, b = _data(dtype, 1), _data(dtype, 2)
    serial, split = one_thread_then_all(lambda: kernel(a, b))
    numpy.testing.assert_array_equal(split, serial)
    numpy.testing.assert_allclose(split, reference(a, b), rtol=_tol(dtype) * 4, atol=_tol(dtype))


def test_float16_vector_kernel_splits_like_one_thread(one_thread_then_all):
    x = _data('float16')
    serial, split = one_thread_then_all(lambda: K.tanh_forward(x))
    assert split.dtype == numpy.float16
    numpy.testing.assert_array_equal(split, serial)
    numpy.testing.assert_allclose(split, numpy.tanh(x.astype(numpy.float64)), atol=1e-3)


def test_gradient_accumulation_splits_like_one_thread(one_thread_then_all):
    g = _data('float32', 3)

    def accumulate():
        acc = _data('float32', 4)
        assert K.add_into(acc, g)
        return acc
    serial, split = one_thread_then_all(accumulate)
    numpy.testing.assert_array_equal(split, serial)
    numpy.testing.assert_allclose(split, _data('float32', 4) + g, rtol=1e-6)


# (N, C, L) for the batch-norm kernels: the channel kernel (L >= 16: a chunk
# of channels per thread) and the column kernel (L < 16: blocks of rows and
# segments of 1024 columns), each over PARALLEL_SIZE elements; and one small.
BATCH_NORM_SHAPES = [
    (16, 7, 2347),   # channels: 7 of 2347-element rows
    (300, 1100, 1),  # columns: a dense layer's (N, D); 11 row blocks, 2 segments
    (4000, 20, 5),   # columns: 5 per channel; 13 row blocks
    (3, 5, 1),       # one block, one thread
]


@pytest.mark.parametrize('shape', BATCH_NORM_SHAPES)
@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_batch_norm_kernels_split_like_one_thread(dtype, shape, one_thread_then_all):
    """The batch-norm kernels (norm_kernels) run on the same pool: statistics,
    output and all three gradients as one thread's, bit for bit, and as
    NumPy's two-pass formulas in float64."""
    from xgrad._backend import norm_kernels
    n, c, l = shape
    assert n * c * l >= norm_kernels.PARALLEL_SIZE or n * c * l < 100
    rng = numpy.random.default_rng(5)
    x = rng.normal(1, 2, (n, c, l)).astype(dtype)
    gy = rng.normal(0, 1, (n, c, l)).astype(dtype)
    gamma = rng.uniform(0.5, 2, c).astype(dtype)
    beta = rng.uniform(-1, 1, c).astype(dtype)

    def both():
        y, mean, var = norm_kernels.batch_norm_forward(x, gamma, beta, 1e-5)
        inv_std = (1 / numpy.sqrt(var.astype(numpy.float64) + 1e-5)).astype(dtype)
        gx, ggamma, gbeta = norm_kernels.batch_norm_backward(gy, x, mean, inv_std, gamma)
        return y, mean, var, gx, ggamma, gbeta
    serial, split = one_thread_then_all(both)
    for a, b in zip(split, serial):
        numpy.testing.assert_array_equal(a, b)
    x64, gy64 = x.astype(numpy.float64), gy.astype(numpy.float64)
    mean = x64.mean(axis=(0, 2))
    var = x64.var(axis=(0, 2))
    inv_std = 1 / numpy.sqrt(var + 1e-5)
    x_hat = (x64 - mean[:, None]) * inv_std[:, None]
    gbeta = gy64.sum(axis=(0, 2))
    ggamma = (gy64 * x_hat).sum(axis=(0, 2))
    gx = gamma[:, None] * inv_std[:, None] * (gy64 - (x_hat * ggamma[:, None] + gbeta[:, None])
                                              / (n * l))
    rtol = 1e-4 if dtype == 'float32' else 1e-10
    y, m, v, kgx, kggamma, kgbeta = split
    numpy.testing.assert_allclose(m, mean, rtol=rtol)
    numpy.testing.assert_allclose(v, var, rtol=rtol)
    numpy.testing.assert_allclose(y, x_hat * gamma[:, None] + beta[:, None], rtol=rtol, atol=rtol)
    numpy.testing.assert_allclose(kgbeta, gbeta, rtol=rtol, atol=rtol * n * l)
    numpy.testing.assert_allclose(kggamma, ggamma, rtol=rtol, atol=rtol * n * l)
    numpy.testing.assert_allclose(kgx, gx, rtol=rtol, atol=rtol)


# im2col_2d and col2im_2d split channels: (shape, ksize, stride, pad) for
# each of their loops (rows of 8+, stride 1 of the input's size, rows
# shorter than 8), with more than two grains of column elements.
WINDOW_CASES = [((8, 9, 40, 40), (3, 3), (2, 2), (1, 1)),
                ((8, 9, 16, 16), (3, 3), (1, 1), (1, 1)),
                ((40, 9, 6, 6), (5, 5), (1, 1), (2, 2))]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape, ksize, stride, pad', WINDOW_CASES)
def test_im2col_and_col2im_split_channels_like_one_thread(dtype, shape, ksize, stride, pad,
                                                          one_thread_then_all):
    from xgrad._backend.window_kernels import col2im_2d, im2col_2d
    from xgrad._ops import convolution as C
    outsize = tuple(C.out_size(n, k, s, p) for n, k, s, p in zip(shape[2:], ksize, stride, pad))
    x = numpy.random.default_rng(7).standard_normal(shape).astype(dtype)
    cols_shape = (shape[1],) + ksize + (shape[0],) + outsize
    assert numpy.prod(cols_shape) > 2 * 65536
    cols_in = numpy.random.default_rng(8).standard_normal(cols_shape).astype(dtype)

    def run():
        cols = numpy.empty(cols_shape, dtype)
        assert im2col_2d(x, cols, ksize, stride, pad, (1, 1), outsize)
        gx = numpy.zeros(shape, dtype)
        assert col2im_2d(cols_in, gx, ksize, stride, pad, (1, 1))
        return cols, gx

    serial, split = one_thread_then_all(run)
    assert serial[0].tobytes() == split[0].tobytes() and serial[1].tobytes() == split[1].tobytes()
    want = numpy.ascontiguousarray(C.windows(C.pad_input(x, C.Geometry(
        ksize, stride, pad, (1, 1), 1), outsize), C.Geometry(ksize, stride, pad, (1, 1), 1),
        outsize).transpose(1, 2, 3, 0, 4, 5))
    numpy.testing.assert_array_equal(serial[0], want)  # (a copy: exact)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('name', ['F2X2_3X3', 'F4X4_3X3', 'F4X4_5X5'])
def test_winograd_tile_kernels_split_channels_like_one_thread(dtype, name, one_thread_then_all):
    """Input, output (with bias) and gradient tiles: the unrolled F(2x2,
    3x3) kernels and the matrix-driven ones."""
    from xgrad._ops import _winograd
    t = getattr(_winograd, name)
    rng = numpy.random.default_rng(9)
    n, c, o, h = 8, 12, 10, 32
    x = rng.standard_normal((n, c, h, h)).astype(dtype)
    ho = h + 2 - t.r + 1
    th, tw = t.tile_counts((ho, ho))
    e = rng.standard_normal((t.a * t.a, o, n * th * tw)).astype(dtype)
    gy = rng.standard_normal((n, o, ho, ho)).astype(dtype)
    bias = rng.standard_normal(o).astype(dtype)
    assert t.a * t.a * min(c, o) * n * th * tw > 2 * 32768

    def run():
        v = numpy.empty((t.a * t.a, c, n * th * tw), dtype)
        t.input_tiles(x, v, (1, 1))
        y = numpy.empty((n, o, ho, ho), dtype)
        t.output_tiles(e, y, bias)
        g = numpy.empty((t.a * t.a, o, n * th * tw), dtype)
        t.gradient_tiles(gy, g)
        return v, y, g

    serial, split = one_thread_then_all(run)
    for a, b in zip(serial, split):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape, ksize, stride, pad', [
    ((8, 37, 40, 40), (3, 3), (2, 2), (1, 1)),  # planes of 1,600: the loop per row
    ((64, 37, 8, 8), (3, 3), (2, 2), (1, 1)),  # planes of 64: blocks of planes
    ((8, 37, 32, 32), (2, 2), (2, 2), (0, 0))])  # the unrolled 2x2
def test_pooling_kernels_split_planes_like_one_thread(dtype, shape, ksize, stride, pad,
                                                      one_thread_then_all):
    """max_pool (values, taps, the gradient's scatter and its gather) and
    average_pool (forward and gradient) over 8 * 37 or 64 * 37 planes."""
    from xgrad._backend import window_kernels as W
    from xgrad._ops import convolution as C
    rng = numpy.random.default_rng(10)
    x = rng.integers(-4, 4, shape).astype(dtype)  # ties
    outsize = tuple(C.out_size(n, k, s, p) for n, k, s, p in zip(shape[2:], ksize, stride, pad))
    gy = rng.standard_normal(shape[:2] + outsize).astype(dtype)
    assert x.size > 2 * 65536

    def run():
        y = numpy.empty(gy.shape, dtype)
        taps = numpy.empty(gy.shape, numpy.uint8)
        assert W.max_pool_2d(x, y, taps, ksize, stride, pad)
        gx = numpy.zeros(shape, dtype)
        assert W.max_pool_2d_scatter(gy, taps, gx, ksize, stride, pad, False)
        back = numpy.empty(gy.shape, dtype)
        assert W.max_pool_2d_scatter(back, taps, x, ksize, stride, pad, True)
        mean = numpy.empty(gy.shape, dtype)
        assert W.average_pool_2d(x, mean, None, 9.0, ksize, stride, pad, False)
        gmean = numpy.zeros(shape, dtype)
        assert W.average_pool_2d(gmean, gy, None, 9.0, ksize, stride, pad, True)
        return y, taps, gx, back, mean, gmean

    serial, split = one_thread_then_all(run)
    for a, b in zip(serial, split):
        assert a.tobytes() == b.tobytes()
    numpy.testing.assert_array_equal(serial[0], serial[3])  # the gather reads the maxima


def test_batch_norm_kernels_refuse_other_dtypes():
    from xgrad._backend import norm_kernels
    x = numpy.ones((2, 3, 4), numpy.float16)
    with pytest.raises(TypeError, match='float16'):
        norm_kernels.batch_norm_forward(x, numpy.ones(3, numpy.float16),
                                        numpy.zeros(3, numpy.float16), 1e-5)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_sum_is_the_same_at_every_thread_count_and_accurate(dtype, one_thread_then_all):
    # Ill-conditioned for a float32 accumulator: a large constant plus noise.
    x = (_data('float64', 5, n=3 * N) + 1000).astype(dtype)
    exact = math.fsum(x.astype(numpy.float64).tolist())
    serial, split = one_thread_then_all(lambda: K.sum_all(x))
    assert split.dtype == numpy.dtype(dtype) and split.shape == ()
    assert split.tobytes() == serial.tobytes()  # same blocks, same order: see the top
    ulp = float(numpy.spacing(numpy.asarray(exact, dtype=dtype)))
    error = abs(float(split) - exact)
    if dtype == 'float32':
        # Proven on every machine: the double accumulation errs by at most
        # n * eps64 * sum|x| (about 0.07 here, whatever the lane order of the
        # SIMD clone) against a float32 half-ulp of 32, so the result is the
        # exact sum rounded once, give or take that: within one ulp, hence
        # never worse than NumPy's float32 sum by more than an ulp.
        assert error <= ulp
        assert error <= abs(float(numpy.sum(x)) - exact) + ulp
    else:
        # Not a proven bound: the a-priori bound of a blocked sum is
        # 4096 * eps * sum|x|, thousands of ulps. The inputs are fixed (PCG64,
        # seed 5: the same values on every machine) and the order is xgrad's
        # (4096-element blocks, compensated sum of the blocks) except the
        # lane count of `omp simd reduction` inside a block, which the
        # dispatch path sets (1 scalar, 2 SSE2, 4 AVX2, 8 AVX-512). A NumPy
        # emulation of each lane count 1, 2, 4, 8, 16 on these inputs gives
        # errors of 2, 0, 0, 1, 0 ulps; NumPy's pairwise sum errs by 0. So
        # 4 ulps absolute, and NumPy's error + 2 ulps, hold on every path.
        assert error <= 4 * ulp
        assert error <= abs(float(numpy.sum(x)) - exact) + 2 * ulp


def test_sum_and_mean_ops_use_it_with_every_axis_and_keepdims():
    x = _data('float32', 6, n=512 * 513).reshape(512, 513)
    exact = math.fsum(x.astype(numpy.float64).ravel().tolist())
    a = xgrad.array(x).require_grad()
    s = xgrad.sum(a, axis=(0, 1), keepdims=True)
    assert s.shape == (1, 1) and s.dtype == xgrad.float32
    # float32 through sum_all's double accumulation: one rounding of the
    # exact sum on every machine (the bound is proven: see the test above).
    assert abs(float(xgrad.to_numpy(s)[0, 0]) - exact) <= numpy.spacing(numpy.float32(exact))
    m = xgrad.mean(a)
    numpy.testing.assert_allclose(float(xgrad.to_numpy(m)), exact / x.size, rtol=1e-6)
    m.backward()
    # Exact on every machine: the gradient is the constant 1/n rounded once
    # to float32 and broadcast (data movement), no arithmetic on the data.
    numpy.testing.assert_array_equal(xgrad.to_numpy(a.grad), numpy.full(x.shape, 1 / x.size, numpy.float32))
    # A non-contiguous operand is summed from a contiguous copy.
    t = xgrad.sum(xgrad.array(x.T))
    assert abs(float(xgrad.to_numpy(t)) - exact) <= numpy.spacing(numpy.float32(exact))


def _python(code, **env):
    environment = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''),
                       **env)
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)], env=environment,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(os.name != 'posix', reason='no pthreads: always one thread')
def test_omp_num_threads_is_honoured():
    # OMP_NUM_THREADS sets the pool's size whatever the number of CPUs (also
    # 3 on a one- or two-CPU machine), so this runs on every machine.
    code = 'from xgrad._backend import native_kernels as K; print(K.max_threads())'
    assert _python(code, OMP_NUM_THREADS='1').stdout.strip() == '1'
    assert _python(code, OMP_NUM_THREADS='3').stdout.strip() == '3'


@pytest.mark.skipif(os.name != 'posix', reason='no pthreads: always one thread')
def test_splitting_runs_in_a_fresh_process_with_four_threads():
    """The bit-for-bit split checks above compare nothing on a one-CPU machine
    (the pool has one thread there): a process with OMP_NUM_THREADS=4 splits
    whatever the CPUs, and its split results equal its serial ones."""
    result = _python('''
        import numpy
        from xgrad._backend import native_kernels as K
        from xgrad._backend.window_kernels import col2im_2d, im2col_2d
        assert K.max_threads() == 4, K.max_threads()
        x = numpy.random.default_rng(0).uniform(-3, 3, 4 * 65536 + 37)
        runs = []
        for limit in (1, 0):
            K.set_thread_limit(limit)
            cols = numpy.empty((9, 3, 3, 4, 16, 16))
            im2col_2d(x[:9 * 4 * 256].reshape(4, 9, 16, 16), cols, (3, 3), (1, 1), (1, 1),
                      (1, 1), (16, 16))
            gx = numpy.zeros((4, 9, 16, 16))
            col2im_2d(cols, gx, (3, 3), (1, 1), (1, 1), (1, 1))
            runs.append([K.tanh_forward(x), K.exp_forward(x.astype(numpy.float32)),
                         K.add(x, x[::-1].copy()), K.sum_all(x), K.sum_all(x.astype(numpy.float32)),
                         cols, gx])
        print(all(a.tobytes() == b.tobytes() for a, b in zip(*runs)))
    ''', OMP_NUM_THREADS='4')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['True']


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='no fork')
def test_a_forked_child_runs_ops_after_the_parent_ran_them_in_parallel():
    result = _python('''
        import os, numpy
        from xgrad._backend import native_kernels as K
        x = numpy.ones(1 << 20, numpy.float32)
        first = K.tanh_forward(x)
        pid = os.fork()
        if pid == 0:
            # Bit-equal on every machine: the same kernel (same SIMD clone,
            # same chunking) on the same data; NumPy's tanh is another
            # implementation and may differ in the last bit.
            os._exit(0 if K.tanh_forward(x).tobytes() == first.tobytes() else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), K.max_threads() > 0)
    ''')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['0', 'True']


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('shape', [(0, 3), (1,), (7, 5), (64, 65), (3, 4096 + 5)])
def test_sum_and_mean_of_every_element_are_accurate(shape, dtype):
    """float32: the exact value rounded once (the double accumulator's own
    error is far below a float32 ulp: proven, on every machine); float64:
    within 8 eps of the sum of magnitudes. That float64 bound is not the
    a-priori one (4096 eps for a 4096-element block); it holds on every
    machine for these fixed inputs (PCG64, seed 7) because an emulation of
    every SIMD lane count (1, 2, 4, 8, 16) of the block sum errs by at most
    0.03 of it."""
    x = (_data('float64', 7, n=int(numpy.prod(shape))) * 1e3 + 0.1).astype(dtype).reshape(shape)
    exact = math.fsum(x.astype(numpy.float64).ravel().tolist())
    magnitude = math.fsum(abs(x.astype(numpy.float64)).ravel().tolist())

    def bound(value, scale=1):
        if dtype == 'float32':
            return numpy.spacing(numpy.float32(abs(value)))
        return 8 * numpy.finfo(numpy.float64).eps * magnitude / scale

    a = xgrad.array(x)
    s = xgrad.to_numpy(xgrad.sum(a))
    assert s.dtype == numpy.dtype(dtype) and s.shape == ()
    assert abs(float(s) - exact) <= (bound(exact) if x.size else 0)
    if x.size:
        m = xgrad.to_numpy(xgrad.mean(a, keepdims=True))
        assert m.shape == (1,) * x.ndim and m.dtype == numpy.dtype(dtype)
        assert abs(float(m.ravel()[0]) - exact / x.size) <= bound(exact / x.size, x.size)


@pytest.mark.skipif(K.max_threads() < 2, reason='one CPU, or no pthreads')
def test_workers_sleep_once_an_op_is_done():
    import time
    x = _data('float32')
    K.tanh_forward(x)  # starts the workers
    for _ in range(3):
        K.tanh_forward(x)
        start = time.process_time()  # CPU time of every thread of the process
        time.sleep(0.1)
        assert time.process_time() - start < 0.01


# scan_kernels.cumsum: (shape, axis) for groups of eight rows with a short
# last group (inner 1), inner rows split into segments (few outer indices),
# and many outer indices; each over the pool's PARALLEL_SIZE.
SCAN_CASES = [((1003, 131), 1), ((3, 40000), 0), ((2, 300, 200), 1), ((70, 50, 40), 2),
              ((5, 7, 3), 0)]


@pytest.mark.parametrize('shape, axis', SCAN_CASES)
@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('reverse', [False, True])
def test_running_sums_are_numpys_bits_at_every_thread_count(shape, axis, dtype, reverse,
                                                           one_thread_then_all):
    """cumsum's kernel (and its gradient's, from the end) adds each running
    sum in NumPy's order: NumPy's bits, NaN, inf and -0.0 included, at any
    thread count."""
    from xgrad._backend import scan_kernels
    rng = numpy.random.default_rng(3)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[[0, 7, 11, x.size - 1]] = [-0.0, numpy.nan, numpy.inf, -0.0]
    serial, split = one_thread_then_all(lambda: scan_kernels.cumsum(x, axis, reverse))
    flip = tuple(slice(None, None, -1) if d == axis else slice(None) for d in range(x.ndim))
    expected = (numpy.cumsum(x[flip], axis=axis)[flip] if reverse
                else numpy.cumsum(x, axis=axis))
    assert split.dtype == expected.dtype and split.shape == expected.shape
    assert split.tobytes() == numpy.ascontiguousarray(expected).tobytes()


def test_running_sums_leave_other_arrays_to_numpy():
    from xgrad._backend import scan_kernels
    x = numpy.ones((4, 6), numpy.float32)
    for a, axis in ((x[:, ::2], 0), (x.astype(numpy.float16), 0), (x.astype(numpy.int64), 1),
                    (x.astype('>f4'), 1), (x, 2), (x, -1), (x.tolist(), 0)):
        assert scan_kernels.cumsum(a, axis) is None
