"""The native window kernels (xgrad._backend.window_kernels.pyx): im2col
against NumPy's padded strided windows, col2im against its strided adds,
pooling against pooling.py's NumPy path, over geometries with padding,
strides, dilation, windows past the padding (cover_all) and padding wider
than the image."""

import itertools

import numpy
import pytest

from xgrad._backend.window_kernels import im2col_2d
from xgrad._ops import convolution as C

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# im2col moves bits (the columns are input elements or the padding value);
# max pooling and its double backward select elements. The one result that
# adds (overlapping windows into gx) has a tolerance.


def _numpy_columns(x, geom, outsize):
    win = C.windows(C.pad_input(x, geom, outsize), geom, outsize)  # (N, C, kh, kw, oh, ow)
    return numpy.ascontiguousarray(win.transpose(1, 2, 3, 0, 4, 5))


GEOMETRIES = [  # ksize, stride, pad, dilate, cover_all
    ((3, 3), (1, 1), (1, 1), (1, 1), False),
    ((3, 3), (2, 2), (1, 1), (1, 1), False),
    ((2, 3), (1, 2), (0, 2), (1, 1), False),
    ((3, 2), (2, 1), (3, 1), (2, 1), False),
    ((3, 3), (3, 3), (1, 0), (1, 2), True),
    ((1, 1), (1, 1), (0, 0), (1, 1), False),
    ((5, 5), (1, 1), (6, 6), (1, 1), False),
    # stride 1 with the output the size of the input (the flat-copy path)
    ((5, 5), (1, 1), (2, 2), (1, 1), False),
    ((3, 1), (1, 1), (1, 0), (1, 1), False),
    ((1, 5), (1, 1), (0, 2), (1, 1), False),
    ((2, 2), (1, 1), (1, 1), (1, 1), True),
    # strided windows through the planes' phases (im2col's and col2im's
    # phase paths, for rows of 8 outputs and more)
    ((5, 5), (2, 2), (2, 2), (1, 1), False),
    ((3, 5), (2, 3), (1, 4), (2, 1), True),
    # the phases' rows past x's columns, and pads wider than the windows reach
    ((4, 4), (2, 2), (0, 0), (1, 1), False),
    ((3, 3), (2, 2), (3, 3), (1, 1), True),
]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('ksize, stride, pad, dilate, cover_all', GEOMETRIES)
@pytest.mark.parametrize('shape', [(3, 2, 7, 6), (2, 3, 6, 9)])  # (even and odd widths)
def test_native_im2col_matches_numpy_windows(dtype, ksize, stride, pad, dilate, cover_all,
                                             shape):
    x = numpy.random.default_rng(0).standard_normal(shape).astype(dtype)
    geom = C.Geometry(ksize, stride, pad, dilate, 1)
    outsize = tuple(C.out_size(n, k, s, p, d, cover_all)
                    for n, k, s, p, d in zip(x.shape[2:], ksize, stride, pad, dilate))
    want = _numpy_columns(x, geom, outsize)
    got = numpy.full(want.shape, numpy.nan, dtype)
    assert im2col_2d(x, got, ksize, stride, pad, dilate, outsize)
    numpy.testing.assert_array_equal(got, want)


def test_native_im2col_refuses_what_it_does_not_take():
    x = numpy.ones((1, 1, 4, 4), numpy.float32)
    out = numpy.empty((1, 3, 3, 1, 2, 2), numpy.float32)
    args = ((3, 3), (1, 1), (0, 0), (1, 1), (2, 2))
    assert im2col_2d(x, out, *args)
    assert not im2col_2d(x.astype(numpy.float64), out, *args)  # dtypes differ
    assert not im2col_2d(numpy.ones((1, 1, 4, 8), numpy.float32)[..., ::2], out, *args)
    assert not im2col_2d(x, numpy.empty((1, 3, 3, 1, 2, 3), numpy.float32), *args)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('ksize, stride, pad, dilate, cover_all', GEOMETRIES)
@pytest.mark.parametrize('shape', [(3, 2, 7, 6), (2, 3, 4, 4), (2, 2, 16, 9), (2, 3, 19, 26)])
def test_native_col2im_matches_numpy(dtype, ksize, stride, pad, dilate, cover_all, shape):
    """col2im_2d (its loop per row, and its tables for rows shorter than 8)
    against convolution.col2im's strided adds. Windows overlap, so sums are
    made in another order: a tolerance of a few ulps of the largest sum."""
    from xgrad._backend.window_kernels import col2im_2d
    geom = C.Geometry(ksize, stride, pad, dilate, 1)
    outsize = tuple(C.out_size(n, k, s, p, d, cover_all)
                    for n, k, s, p, d in zip(shape[2:], ksize, stride, pad, dilate))
    if min(outsize) <= 0:
        pytest.skip('no window fits')
    rng = numpy.random.default_rng(4)
    cols = rng.standard_normal((shape[1],) + ksize + (shape[0],) + outsize).astype(dtype)
    want = C.col2im(numpy.ascontiguousarray(cols.transpose(3, 0, 1, 2, 4, 5)), geom,
                    outsize, shape[2:])
    got = numpy.zeros(shape, dtype)
    assert col2im_2d(cols, got, ksize, stride, pad, dilate)
    bound = 8 * numpy.finfo(dtype).eps * numpy.abs(cols).sum(axis=(1, 2)).max()
    numpy.testing.assert_allclose(got, want, rtol=0, atol=bound)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('ksize, stride, pad, dilate, cover_all', GEOMETRIES)
@pytest.mark.parametrize('shape', [(3, 2, 7, 6), (2, 3, 4, 4), (2, 2, 16, 9)])
def test_column_matrix_with_padded_rows(dtype, ksize, stride, pad, dilate, cover_all, shape):
    """im2col_2d into, and col2im_2d from, the (C kh kw, m oh ow) matrix
    with padding after each row (_gemm_layout.padded's layout) give
    the contiguous layout's results, and leave the padding alone."""
    from xgrad._backend.window_kernels import col2im_2d
    geom = C.Geometry(ksize, stride, pad, dilate, 1)
    outsize = tuple(C.out_size(n, k, s, p, d, cover_all)
                    for n, k, s, p, d in zip(shape[2:], ksize, stride, pad, dilate))
    if min(outsize) <= 0:
        pytest.skip('no window fits')
    x = numpy.random.default_rng(5).standard_normal(shape).astype(dtype)
    rows, n = shape[1] * ksize[0] * ksize[1], shape[0] * outsize[0] * outsize[1]
    want = numpy.empty((shape[1],) + ksize + (shape[0],) + outsize, dtype)
    assert im2col_2d(x, want, ksize, stride, pad, dilate, outsize)
    wide = numpy.full((rows, n + 3), 7.0, dtype)
    got = wide[:, :n]
    assert im2col_2d(x, got, ksize, stride, pad, dilate, outsize)
    numpy.testing.assert_array_equal(got, want.reshape(rows, n))
    assert (wide[:, n:] == 7.0).all()
    gx_want, gx_got = numpy.zeros(shape, dtype), numpy.zeros(shape, dtype)
    assert col2im_2d(want, gx_want, ksize, stride, pad, dilate)
    assert col2im_2d(got, gx_got, ksize, stride, pad, dilate, outsize)
    numpy.testing.assert_array_equal(gx_got, gx_want)  # (the same sums in the same order)


def test_column_matrix_layouts_the_kernels_refuse():
    from xgrad._backend.window_kernels import col2im_2d
    x = numpy.ones((2, 3, 5, 5), numpy.float32)
    args = ((3, 3), (1, 1), (1, 1), (1, 1))
    wide = numpy.zeros((27, 60), numpy.float32)
    assert im2col_2d(x, wide[:, :50], *args, (5, 5))
    assert not im2col_2d(x, wide[:, :49], *args, (5, 5))  # one column short
    assert not im2col_2d(x, wide[:, :100:2], *args, (5, 5))  # strided rows
    assert not im2col_2d(x, numpy.zeros((60, 27), numpy.float32).T[:, :50], *args, (5, 5))
    assert not im2col_2d(x, wide[:26, :50], *args, (5, 5))  # one row short
    assert col2im_2d(wide[:, :50], x, *args, (5, 5))
    assert not col2im_2d(wide[:, :50], x, *args)  # a matrix needs outsize
    assert not col2im_2d(wide[:, :100:2], x, *args, (5, 5))


@pytest.mark.parametrize('n, itemsize, padded', [
    (1024, 4, True), (256, 4, True), (4096, 8, True), (128, 8, True), (1280, 4, True),
    (1000, 4, False), (255, 4, False), (64, 4, False), (0, 4, False)])
def test_gemm_operand_rows_are_padded_when_a_multiple_of_1kib(n, itemsize, padded):
    from xgrad._ops import _gemm_layout
    dtype = numpy.float32 if itemsize == 4 else numpy.float64
    length = _gemm_layout.row_length(n, itemsize)
    assert length == (n + 64 // itemsize if padded else n)
    flat = numpy.empty(_gemm_layout.padded_size(6, n, dtype), dtype)
    matrix = _gemm_layout.padded(flat, (2, 3, n))
    assert matrix.shape == (2, 3, n) and numpy.shares_memory(matrix, flat) or n == 0
    assert n == 0 or matrix.strides == (3 * length * itemsize, length * itemsize, itemsize)
    merged = matrix.reshape(6, n)  # leading axes merge without a copy
    assert n == 0 or numpy.shares_memory(merged, flat)


POOLS = [  # ksize, stride, pad, cover_all
    ((2, 2), None, 0, False), ((3, 3), (2, 2), 1, False), ((3, 2), (1, 2), (1, 0), True),
    ((2, 2), (3, 3), 0, True), ((4, 4), (1, 1), 3, False)]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('ksize, stride, pad, cover_all', POOLS)
# (the second: 145 planes, more than one block of the kernel's planes-first
# loop, and a partial last block; planes of more than 1,024 elements, the
# third, take the loop per output row)
@pytest.mark.parametrize('shape', [(2, 3, 7, 6), (5, 29, 5, 4), (2, 3, 33, 34)])
def test_native_max_pool_matches_the_numpy_path(monkeypatch, dtype, ksize, stride, pad,
                                                cover_all, shape):
    """Values, tie-breaking (first tap), NaN, -inf padding, the gradient and
    its gradient, native against pooling.py's NumPy path."""
    import xgrad
    from xgrad._ops import pooling
    rng = numpy.random.default_rng(1)
    x = rng.integers(-3, 3, shape).astype(dtype)  # many ties
    x[0, 0, 1, 1] = numpy.nan
    x[1, 2] = -numpy.inf
    gy_shape = None
    results = []
    for native in (True, False):
        if not native:
            monkeypatch.setattr(pooling, '_native', lambda a: False)
        xv = xgrad.array(x).require_grad()
        y = xgrad.max_pool(xv, ksize, stride=stride, pad=pad, cover_all=cover_all)
        gy_shape = y.shape
        gy = xgrad.array(rng.standard_normal(gy_shape).astype(dtype)
                         if native else results[0][3]).require_grad()
        gx, = xgrad.grad([y], [xv], grad_outputs=[gy], enable_double_backprop=True)
        ggx = xgrad.array(numpy.arange(x.size, dtype=dtype).reshape(x.shape))
        ggy, = xgrad.grad([gx], [gy], grad_outputs=[ggx])
        results.append([a.to_numpy() if hasattr(a, 'to_numpy') else xgrad.to_numpy(a)
                        for a in (y, gx, ggy, gy)])
    (y, gx, ggy), (y0, gx0, ggy0) = results[0][:3], results[1][:3]
    numpy.testing.assert_array_equal(y, y0)
    numpy.testing.assert_array_equal(ggy, ggy0)
    # overlapping windows add into gx in another order
    numpy.testing.assert_allclose(
        gx, gx0, rtol=0, atol=16 * numpy.finfo(dtype).eps * numpy.abs(results[0][3]).max())


AVERAGE_POOLS = [  # ksize, stride, pad
    ((2, 2), None, 0), ((3, 3), (2, 2), 1), ((3, 2), (1, 2), (1, 0)), ((2, 2), (3, 3), 0),
    ((4, 4), (1, 1), 3), ((1, 1), (2, 1), (0, 0))]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('pad_mode', ['ignore', 'zero'])
@pytest.mark.parametrize('ksize, stride, pad', AVERAGE_POOLS)
# (as max pooling's: one block of planes, several and a partial one, and
# planes of more than 1,024 elements, which take the loop per output; 32x32
# planes go 16 (float64: 8) to a block, within the kernel's scratch)
@pytest.mark.parametrize('shape', [(2, 3, 7, 6), (5, 29, 5, 4), (2, 3, 33, 34),
                                   (3, 7, 32, 32)])
def test_native_average_pool_matches_the_numpy_path(monkeypatch, dtype, pad_mode, ksize,
                                                    stride, pad, shape):
    """The average, its gradient and the gradient's gradient, native against
    pooling.py's NumPy path, bit for bit: the kernel makes the same additions
    in the same order (taps in window order from +0, gx tap by tap) and the
    same IEEE divisions, so the result is exact on every machine. Windows
    of -0.0 only give +0.0 as there (compared bit by bit)."""
    import xgrad
    from xgrad._backend import window_kernels
    rng = numpy.random.default_rng(2)
    x = rng.standard_normal(shape).astype(dtype)
    x[0, :2, :4, :4] = -0.0
    ggx = xgrad.array(rng.standard_normal(x.shape).astype(dtype))
    calls = []
    kernel = window_kernels.average_pool_2d
    results = []
    for native in (True, False):
        monkeypatch.setattr(window_kernels, 'average_pool_2d', (
            lambda *a: calls.append(a[-1]) or kernel(*a)) if native else (lambda *a: False))
        xv = xgrad.array(x).require_grad()
        y = xgrad.average_pool(xv, ksize, stride=stride, pad=pad, pad_mode=pad_mode)
        gy = xgrad.array(rng.standard_normal(y.shape).astype(dtype)
                         if native else results[0][3]).require_grad()
        gx, = xgrad.grad([y], [xv], grad_outputs=[gy], enable_double_backprop=True)
        ggy, = xgrad.grad([gx], [gy], grad_outputs=[ggx])
        results.append([a.to_numpy() for a in (y, gx, ggy, gy)])
    assert set(calls) == {False, True}  # the forward and the gradient ran natively
    bits = 'u{}'.format(numpy.dtype(dtype).itemsize)
    for a, b in zip(results[0][:3], results[1][:3]):
        numpy.testing.assert_array_equal(a.view(bits), b.view(bits))


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('pool, kwargs', [
    ('max_pool', dict(ksize=2)), ('max_pool', dict(ksize=3, stride=2, pad=1, cover_all=True)),
    ('average_pool', dict(ksize=3, stride=1)),
    ('average_pool', dict(ksize=3, stride=2, pad=2)),
    ('average_pool', dict(ksize=2, stride=1, pad=1, pad_mode='zero'))])
def test_native_pooling_of_one_spatial_axis_matches_the_numpy_path(monkeypatch, dtype, pool,
                                                                   kwargs):
    """(N, C, w) goes through the 2-D kernels as height 1: the same values,
    gradient and gradient of the gradient as pooling.py's NumPy path (exact
    but for max pooling's gx, where overlapping windows add in another order)."""
    import xgrad
    from xgrad._ops import pooling
    rng = numpy.random.default_rng(3)
    x = rng.integers(-3, 3, (2, 3, 9)).astype(dtype)  # ties for max pooling
    ggx = xgrad.array(rng.standard_normal(x.shape).astype(dtype))
    results = []
    for native in (True, False):
        if not native:
            monkeypatch.setattr(pooling, '_native', lambda a: False)
        xv = xgrad.array(x).require_grad()
        y = getattr(xgrad, pool)(xv, **kwargs)
        gy = xgrad.array(rng.standard_normal(y.shape).astype(dtype)
                         if native else results[0][3]).require_grad()
        gx, = xgrad.grad([y], [xv], grad_outputs=[gy], enable_double_backprop=True)
        ggy, = xgrad.grad([gx], [gy], grad_outputs=[ggx])
        results.append([a.to_numpy() for a in (y, gx, ggy, gy)])
    (y, gx, ggy), (y0, gx0, ggy0) = results[0][:3], results[1][:3]
    numpy.testing.assert_array_equal(y, y0)
    numpy.testing.assert_array_equal(ggy, ggy0)
    if pool == 'average_pool':
        numpy.testing.assert_array_equal(gx, gx0)
    else:
        numpy.testing.assert_allclose(
            gx, gx0, rtol=0, atol=16 * numpy.finfo(dtype).eps * numpy.abs(results[0][3]).max())


@pytest.mark.parametrize('shape', [(5, 3, 4, 4), (2, 1, 1, 1), (2, 2, 1, 5), (3, 2, 8, 8),
                                   (2, 2, 2, 3)])
@pytest.mark.parametrize('ksize, pad', [((3, 3), (1, 1)), ((5, 5), (2, 2)), ((7, 3), (3, 1))])
def test_native_im2col_same_size_on_small_images(shape, ksize, pad):
    """Windows reaching past every edge, and wider than the image."""
    x = numpy.random.default_rng(1).standard_normal(shape).astype(numpy.float32)
    geom = C.Geometry(ksize, (1, 1), pad, (1, 1), 1)
    outsize = shape[2:]
    want = _numpy_columns(x, geom, outsize)
    got = numpy.full(want.shape, numpy.nan, numpy.float32)
    assert im2col_2d(x, got, ksize, (1, 1), pad, (1, 1), outsize)
    numpy.testing.assert_array_equal(got, want)


# Strided windows over rows of 8 or more outputs take the phases (im2col
# splits each plane into its stride-by-stride phases and copies each tap's
# block from one of them): odd and even sizes, padding on one axis, a tap
# reaching past the phases' end (cover_all), dilation, strides that differ
# per axis, and 2x2 windows with stride 2 (one tap a phase: the row loop).
STRIDED = [  # shape, ksize, stride, pad, dilate, cover_all
    ((2, 3, 16, 16), (5, 5), (2, 2), (2, 2), (1, 1), False),
    ((2, 3, 21, 19), (5, 5), (2, 2), (2, 2), (1, 1), False),
    ((2, 2, 20, 33), (3, 3), (2, 2), (1, 0), (1, 1), True),
    ((1, 2, 27, 25), (3, 3), (3, 3), (1, 1), (1, 1), True),
    ((2, 2, 24, 30), (3, 5), (2, 3), (2, 1), (2, 2), False),
    ((2, 2, 9, 40), (3, 3), (1, 2), (1, 1), (1, 1), False),
    ((2, 2, 18, 18), (4, 4), (2, 2), (1, 1), (1, 1), False),
    ((2, 2, 18, 18), (2, 2), (2, 2), (0, 0), (1, 1), False),
]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape, ksize, stride, pad, dilate, cover_all', STRIDED)
def test_native_im2col_of_strided_windows(dtype, shape, ksize, stride, pad, dilate, cover_all):
    x = numpy.random.default_rng(6).standard_normal(shape).astype(dtype)
    geom = C.Geometry(ksize, stride, pad, dilate, 1)
    outsize = tuple(C.out_size(n, k, s, p, d, cover_all)
                    for n, k, s, p, d in zip(shape[2:], ksize, stride, pad, dilate))
    assert outsize[1] >= 8  # (narrower rows take the tables)
    want = _numpy_columns(x, geom, outsize)
    got = numpy.full(want.shape, numpy.nan, dtype)
    assert im2col_2d(x, got, ksize, stride, pad, dilate, outsize)
    numpy.testing.assert_array_equal(got, want)  # (copies: exact)
    wide = numpy.full((shape[1] * ksize[0] * ksize[1], shape[0] * outsize[0] * outsize[1] + 5),
                      7.0, dtype)
    rows = wide[:, :-5]  # the matrix with padded rows (_gemm_layout's)
    assert im2col_2d(x, rows, ksize, stride, pad, dilate, outsize)
    numpy.testing.assert_array_equal(rows, want.reshape(rows.shape))
    assert (wide[:, -5:] == 7.0).all()
