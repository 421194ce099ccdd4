"""xgrad's own float32 GEMM (xgrad/_backend/sgemm.h, gemm_kernels.sgemm).

Every dispatch path this CPU runs is selected in turn: AVX-512 and AVX2
have micro-kernels (8 x 32 and 6 x 16), the SSE2 baseline has none and
``sgemm`` must then decline (return False, write nothing) so that callers
use the BLAS. Products are compared with float64 ones at shapes around
every edge the blocking has: partial row and column tiles, depths past one
KC block (256), widths past one NC block (1024), A read in place (rows
contiguous, at most 256 columns) or packed, B read in place (rows
contiguous, at most 64 rows) or packed, transposed and padded operands,
stacks of products, and accumulation.

Products get a tolerance of K float32 rounding steps of the sum of
magnitudes (FMA and blocking order, not the BLAS's). Exact assertions: what
a declined call or the padding of ``out`` keeps (data left alone), and the
product split over threads against one thread (one xgrad kernel against
itself in one process: each result is summed by one thread in the same
order at any thread count).
"""

import numpy
import pytest

from xgrad._backend import gemm_kernels, native_kernels as K

SHAPES = [  # (m, k, n): tiles (8 x 32 on AVX-512, 6 x 16 on AVX2) at most a
    # quarter padding, sums of 16 products or more
    (8, 16, 32), (24, 17, 100), (32, 16, 120), (48, 255, 40), (64, 256, 64),
    (65, 257, 257), (20, 300, 200), (23, 600, 250), (8, 40, 1100), (128, 520, 96),
    (130, 70, 1030), (256, 16, 64), (300, 20, 32), (47, 33, 90),
    (47, 600, 48), (100, 520, 64),  # ('t' A: read in place, sums over KC blocks)
]


@pytest.fixture(params=K.cpu_paths())
def path(request):
    before = K.cpu_path()
    K._select_cpu_path(request.param)
    yield request.param
    K._select_cpu_path(before)


TILES = {'avx512': (8, 32), 'avx2': (6, 16)}  # (MR, NR)


def test_tile_rows_are_the_selected_micro_kernel_s(path):
    # the rules measured on the AVX2 kernel compare tile_rows() with
    # AVX2_TILE_ROWS: it must say that kernel and no other
    assert gemm_kernels.tile_rows() == {'sse2': 0, **{p: t[0] for p, t in TILES.items()}}[path]
    assert (gemm_kernels.tile_rows() == gemm_kernels.AVX2_TILE_ROWS) is (path == 'avx2')


def _mostly_padding(path, m, k, n):
    """What sgemm leaves to the BLAS: tiles a quarter padding or more, or
    fewer than 16 products a sum."""
    mr, nr = TILES[path]
    return 4 * m < 3 * (-(-m // mr) * mr) or 4 * n < 3 * (-(-n // nr) * nr) or k < 16


def _operand(rng, shape, layout):
    """A float32 matrix of ``shape`` laid out as ``layout`` says: 'c'
    contiguous, 't' the transpose of a contiguous array, 'p' rows padded."""
    if layout == 't':
        return numpy.ascontiguousarray(rng.standard_normal(shape[::-1], dtype=numpy.float32)).T
    if layout == 'p':
        flat = numpy.full((shape[0], shape[1] + 16), numpy.nan, numpy.float32)
        view = flat[:, :shape[1]]
        view[...] = rng.standard_normal(shape, dtype=numpy.float32)
        return view
    return rng.standard_normal(shape, dtype=numpy.float32)


def _check(a, b, out, expected):
    # each result is a sum of k float32 products: compare with a bound on
    # the rounding of such a sum (k ulps of the sum of magnitudes)
    k = a.shape[-1]
    scale = numpy.abs(a.astype(numpy.float64)) @ numpy.abs(b.astype(numpy.float64))
    bound = (k + 2) * numpy.finfo(numpy.float32).eps * scale + 1e-30
    assert numpy.all(numpy.abs(out - expected) <= bound)


@pytest.mark.parametrize('m,k,n', SHAPES)
@pytest.mark.parametrize('layouts', ['cc', 'tc', 'ct', 'tt', 'pp'])
def test_products_match_float64(path, m, k, n, layouts):
    rng = numpy.random.default_rng(m * 1000 + k * 10 + n)
    a = _operand(rng, (m, k), layouts[0])
    b = _operand(rng, (k, n), layouts[1])
    out = numpy.full((m, n), numpy.nan, numpy.float32)
    done = gemm_kernels.sgemm(a, b, out)
    assert gemm_kernels.available() is (path != 'sse2')
    assert done is (gemm_kernels.available() and not _mostly_padding(path, m, k, n))
    if not done:
        assert numpy.isnan(out).all()  # nothing written
        return
    _check(a, b, out, a.astype(numpy.float64) @ b.astype(numpy.float64))


@pytest.mark.parametrize('m,k,n', [(1, 1, 1), (7, 3, 9), (8, 40, 12), (3, 40, 1100),
                                   (4, 16, 4096), (16, 9, 4096), (64, 40, 33)])
def test_declines_products_that_would_be_mostly_padding(path, m, k, n):
    """Tiles a quarter padding or more (4 rows, 33 columns of 32-column
    tiles, anything narrower than a tile) or sums of fewer than 16
    products: the BLAS's."""
    assert path not in TILES or _mostly_padding(path, m, k, n)
    rng = numpy.random.default_rng(6)
    a, b = _operand(rng, (m, k), 'c'), _operand(rng, (k, n), 'c')
    out = numpy.full((m, n), numpy.nan, numpy.float32)
    assert gemm_kernels.sgemm(a, b, out) is False
    assert numpy.isnan(out).all()


@pytest.mark.parametrize('m,k,n', [(24, 17, 64), (65, 300, 40), (20, 600, 1100)])
@pytest.mark.parametrize('layouts', ['ct', 'tc'])
def test_accumulate_adds_to_out(path, m, k, n, layouts):
    if not gemm_kernels.available() or _mostly_padding(path, m, k, n):
        pytest.skip('the BLAS\'s on ' + path)
    rng = numpy.random.default_rng(1)
    a, b = _operand(rng, (m, k), layouts[0]), _operand(rng, (k, n), layouts[1])
    start = rng.standard_normal((m, n), dtype=numpy.float32)
    out = start.copy()
    assert gemm_kernels.sgemm(a, b, out, accumulate=True)
    _check(a, b, out, start + a.astype(numpy.float64) @ b.astype(numpy.float64))


def test_into_padded_rows_leaves_the_padding(path):
    if not gemm_kernels.available():
        pytest.skip('no micro-kernel on ' + path)
    rng = numpy.random.default_rng(2)
    a, b = _operand(rng, (14, 70), 'c'), _operand(rng, (70, 50), 'c')
    flat = numpy.full((14, 64), -7.0, numpy.float32)
    assert gemm_kernels.sgemm(a, b, flat[:, :50])
    assert (flat[:, 50:] == -7.0).all()
    _check(a, b, flat[:, :50], a.astype(numpy.float64) @ b.astype(numpy.float64))


def test_stacks_of_products(path):
    if not gemm_kernels.available():
        pytest.skip('no micro-kernel on ' + path)
    rng = numpy.random.default_rng(3)
    a = rng.standard_normal((5, 24, 17), dtype=numpy.float32)
    b = rng.standard_normal((5, 100, 17), dtype=numpy.float32).transpose(0, 2, 1)
    out = numpy.empty((5, 24, 100), numpy.float32)
    assert gemm_kernels.sgemm(a, b, out)
    _check(a, b, out, a.astype(numpy.float64) @ b.astype(numpy.float64))


def test_empty_products(path):
    if not gemm_kernels.available():
        pytest.skip('no micro-kernel on ' + path)
    a, b = numpy.empty((8, 0), numpy.float32), numpy.empty((0, 40), numpy.float32)
    out = numpy.ones((8, 40), numpy.float32)
    assert gemm_kernels.sgemm(a, b, out, accumulate=True) is False  # (the BLAS's)
    assert (out == 1).all()
    assert gemm_kernels.sgemm(numpy.empty((0, 20), numpy.float32),
                              numpy.empty((20, 40), numpy.float32),
                              numpy.empty((0, 40), numpy.float32)) is True  # nothing to do


def test_declines_what_it_does_not_run(path):
    rng = numpy.random.default_rng(4)
    a, b = _operand(rng, (8, 16), 'c'), _operand(rng, (16, 40), 'c')
    out = numpy.zeros((8, 40), numpy.float32)
    assert gemm_kernels.sgemm(a.astype(numpy.float64), b, out) is False  # another dtype
    assert gemm_kernels.sgemm(a, b, numpy.zeros((8, 80), numpy.float32)[:, ::2]) is False
    assert gemm_kernels.sgemm(a[::-1], b, out) is False  # a negative stride
    assert gemm_kernels.sgemm(a, b, [[0.0] * 40] * 8) is False  # not an array
    readonly = numpy.zeros((8, 40), numpy.float32)
    readonly.flags.writeable = False
    assert gemm_kernels.sgemm(a, b, readonly) is False
    assert (out == 0).all()


def test_mismatched_shapes_are_an_error(path):
    if not gemm_kernels.available():
        pytest.skip('no micro-kernel on ' + path)
    a = numpy.zeros((8, 16), numpy.float32)
    with pytest.raises(ValueError, match='do not match'):
        gemm_kernels.sgemm(a, numpy.zeros((5, 40), numpy.float32),
                           numpy.zeros((8, 40), numpy.float32))
    with pytest.raises(ValueError, match='do not match'):
        gemm_kernels.sgemm(a, numpy.zeros((16, 40), numpy.float32),
                           numpy.zeros((8, 41), numpy.float32))


def test_split_over_threads_matches_one_thread(path):
    """A product large enough to be split (by columns, or by rows when it is
    narrow) gives the same values as on one thread: each result is summed by
    one thread, in the same order."""
    if not gemm_kernels.available():
        pytest.skip('no micro-kernel on ' + path)
    rng = numpy.random.default_rng(5)
    for m, k, n in [(64, 512, 2048), (512, 512, 48)]:
        a, b = _operand(rng, (m, k), 'c'), _operand(rng, (k, n), 'c')
        split = numpy.empty((m, n), numpy.float32)
        alone = numpy.empty((m, n), numpy.float32)
        assert gemm_kernels.sgemm(a, b, split)
        K.set_thread_limit(1)
        try:
            assert gemm_kernels.sgemm(a, b, alone)
        finally:
            K.set_thread_limit(0)
        assert numpy.array_equal(split, alone)


@pytest.mark.parametrize('m, k, n', [(16, 1024, 96), (20, 650, 260), (70, 37, 64), (8, 16, 32),
                                     (130, 300, 1100), (40, 9 + 256, 70)])
def test_a_column_major_b_gives_the_row_major_ones_bits(path, m, k, n):
    """A linear layer's W^T: B's columns contiguous, packed by transposed
    8 x 8 tiles (ragged depths and a partial last panel element by element).
    Packing only moves values: the products are those of the same B with
    its rows contiguous, bit for bit."""
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    rng = numpy.random.default_rng(9)
    a = rng.standard_normal((m, k), dtype=numpy.float32)
    w = rng.standard_normal((n, k), dtype=numpy.float32)
    column_major = numpy.empty((m, n), numpy.float32)
    row_major = numpy.empty((m, n), numpy.float32)
    assert gemm_kernels.sgemm(a, w.T, column_major, False, True)
    assert gemm_kernels.sgemm(a, numpy.ascontiguousarray(w.T), row_major, False, True)
    numpy.testing.assert_array_equal(column_major, row_major)
    _check(a, w.T, column_major, a.astype(numpy.float64) @ w.T.astype(numpy.float64))


@pytest.mark.parametrize('terms, m, k, n', [(5, 24, 17, 100), (3, 64, 300, 40), (9, 128, 64, 128),
                                            (2, 20, 600, 1100), (1, 8, 16, 32)])
def test_sum_of_products_matches_float64(path, terms, m, k, n):
    """sgemm_sum: a pointwise convolution's weight gradient, gy[i] (m, k)
    times x[i]^T (k, n) (a transposed view) summed over the samples."""
    rng = numpy.random.default_rng(terms * 100 + m)
    a = rng.standard_normal((terms, m, k), dtype=numpy.float32)
    b = rng.standard_normal((terms, n, k), dtype=numpy.float32).transpose(0, 2, 1)
    out = numpy.full((m, n), numpy.nan, numpy.float32)
    done = gemm_kernels.sgemm_sum(a, b, out)
    assert done is (gemm_kernels.available() and not _mostly_padding(path, m, k, n))
    if not done:
        assert numpy.isnan(out).all()
        return
    a64, b64 = a.astype(numpy.float64), b.astype(numpy.float64)
    scale = (numpy.abs(a64) @ numpy.abs(b64)).sum(axis=0)
    bound = (terms * k + 2) * numpy.finfo(numpy.float32).eps * scale + 1e-30
    assert numpy.all(numpy.abs(out - (a64 @ b64).sum(axis=0)) <= bound)
    before = out.copy()
    assert gemm_kernels.sgemm_sum(a, b, out, accumulate=True)
    assert numpy.all(numpy.abs(out - 2 * before) <= 2 * bound)


def test_sum_of_products_is_the_loop_of_accumulated_products_bit_for_bit(path):
    """Each element is summed term by term, each term in k order, by one
    thread, whatever the thread count: the bits of a loop of accumulating
    sgemm calls on one thread."""
    if not gemm_kernels.available():
        pytest.skip('no micro-kernel on ' + path)
    rng = numpy.random.default_rng(11)
    for terms, m, k, n in [(32, 128, 64, 128), (16, 512, 96, 48), (4, 64, 700, 256)]:
        a = rng.standard_normal((terms, m, k), dtype=numpy.float32)
        b = rng.standard_normal((terms, n, k), dtype=numpy.float32).transpose(0, 2, 1)
        split = numpy.empty((m, n), numpy.float32)
        assert gemm_kernels.sgemm_sum(a, b, split)
        K.set_thread_limit(1)
        try:
            loop = numpy.empty((m, n), numpy.float32)
            for i in range(terms):
                assert gemm_kernels.sgemm(a[i], b[i], loop, accumulate=i > 0)
            alone = numpy.empty((m, n), numpy.float32)
            assert gemm_kernels.sgemm_sum(a, b, alone)
        finally:
            K.set_thread_limit(0)
        numpy.testing.assert_array_equal(split, loop)
        numpy.testing.assert_array_equal(alone, loop)


def test_sum_of_no_products(path):
    if not gemm_kernels.available():
        pytest.skip('no micro-kernel on ' + path)
    out = numpy.ones((8, 32), numpy.float32)
    empty_a, empty_b = numpy.empty((0, 8, 16), numpy.float32), numpy.empty((0, 16, 32), numpy.float32)
    assert gemm_kernels.sgemm_sum(empty_a, empty_b, out, accumulate=True)
    assert (out == 1).all()
    assert gemm_kernels.sgemm_sum(empty_a, empty_b, out)
    assert (out == 0).all()


def test_sum_of_products_declines_and_refuses_as_sgemm_does(path):
    rng = numpy.random.default_rng(12)
    a = rng.standard_normal((3, 8, 16), dtype=numpy.float32)
    b = rng.standard_normal((3, 16, 32), dtype=numpy.float32)
    out = numpy.zeros((8, 32), numpy.float32)
    assert gemm_kernels.sgemm_sum(a.astype(numpy.float64), b, out) is False
    assert gemm_kernels.sgemm_sum(a[:, ::-1], b, out) is False  # a negative stride
    assert gemm_kernels.sgemm_sum(a, b, numpy.zeros((8, 64), numpy.float32)[:, ::2]) is False
    assert (out == 0).all()
    if gemm_kernels.available():
        with pytest.raises(ValueError, match='do not match'):
            gemm_kernels.sgemm_sum(a, b[:2], out)
        with pytest.raises(ValueError, match='do not match'):
            gemm_kernels.sgemm_sum(a, b, numpy.zeros((8, 33), numpy.float32))
