"""Winograd F(2x2, 3x3), F(4x4, 3x3), F(2x2, 5x5) and F(4x4, 5x5) convolution
(xgrad/_ops/_winograd.py and xgrad/_backend/winograd_kernels.pyx): the matrices against the
convolution they stand for, the tile transforms against their matrix
definitions, the convolutions that take it (and those that do not), and
conv / conv_transpose through it against the loop references, with first
and second derivatives against numerical ones."""

import numpy
import pytest

import xgrad
from xgrad._backend import winograd_kernels
from xgrad._ops import _winograd
from xgrad._ops._conv import chunking
from xgrad._ops.convolution import Geometry
from xgrad._ops._conv.reference import (
    reference_conv as _reference_conv, reference_conv_transpose as _reference_conv_transpose)
from xgrad.testing import check_backward, check_double_backward, force_conv_algorithm

F3, F4, F5 = _winograd.F2X2_3X3, _winograd.F4X4_3X3, _winograd.F2X2_5X5
F45 = _winograd.F4X4_5X5
ALL = [F3, F4, F5, F45]
ALL_IDS = ['3x3', '4x4-3x3', '5x5', '4x4-5x5']


def _data(shape, seed, dtype=numpy.float64):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(dtype)


def _geom(pad, k=3):
    return Geometry((k, k), (1, 1), (pad, pad), (1, 1), 1)


@pytest.mark.parametrize('t', ALL, ids=ALL_IDS)
def test_the_matrices_compute_the_correlation_they_stand_for(t):
    # 1-D: A^T [(G g) * (B^T d)] = sum_k d[i + k] g[k] for i < m, exactly in
    # float64 up to rounding (the 2-D transform is this along both axes)
    for seed in range(5):
        d, g = _data(t.a, seed), _data(t.r, seed + 10)
        want = [sum(d[i + k] * g[k] for k in range(t.r)) for i in range(t.m)]
        numpy.testing.assert_allclose(t.a_t @ ((t.g @ g) * (t.b_t @ d)), want,
                                      rtol=1e-13, atol=1e-14)


def _tiles_of(x, pad, th, tw, a, m):
    """(N, C, th, tw, a, a): the input tiles, zeros outside x."""
    n, c, h, w = x.shape
    big = numpy.zeros((n, c, m * th + a + 2 * pad, m * tw + a + 2 * pad))
    big[:, :, pad:pad + h, pad:pad + w] = x
    out = numpy.empty((n, c, th, tw, a, a))
    for i in range(th):
        for j in range(tw):
            out[:, :, i, j] = big[:, :, m * i:m * i + a, m * j:m * j + a]
    return out


def _kernels(t, unrolled):
    """(input_tiles, output_tiles, gradient_tiles) with the Transform's
    matrices bound: the unrolled F(2x2, 3x3) ones or the matrix-driven ones."""
    k = winograd_kernels
    if unrolled:
        return k.input_tiles_3x3, k.output_tiles_3x3, k.gradient_tiles_3x3
    return ((lambda x, v, ph, pw: k.input_tiles(x, v, t.b_t, t.m, ph, pw)),
            (lambda e, y, bias=None: k.output_tiles(e, y, t.a_t, bias)),
            (lambda gy, g: k.gradient_tiles(gy, g, t.a_t)))


@pytest.mark.parametrize('t, unrolled', [(F3, True), (F3, False), (F4, False), (F5, False),
                                         (F45, False)],
                         ids=['3x3-unrolled', '3x3', '4x4-3x3', '5x5', '4x4-5x5'])
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('h, w, pad', [(4, 4, 1), (5, 7, 1), (6, 6, 0), (6, 5, 2), (1, 2, 2),
                                       (11, 9, 2)])
# the planes' rows contiguous, or padded as _gemm_layout pads them (here by 5)
@pytest.mark.parametrize('row_pad', [0, 5])
def test_the_tile_transforms_are_their_matrix_definitions(t, unrolled, h, w, pad, dtype,
                                                          row_pad):
    input_tiles, output_tiles, gradient_tiles = _kernels(t, unrolled)
    n, c, o, a, m = 2, 3, 4, t.a, t.m
    ho, wo = h + 2 * pad - t.r + 1, w + 2 * pad - t.r + 1
    if min(ho, wo) <= 0:
        pytest.skip('no output')
    th, tw = t.tile_counts((ho, wo))

    def planes(rows, fill=numpy.nan):
        wide = numpy.full((a * a, rows, n * th * tw + row_pad), fill, dtype)
        return wide, wide[:, :, :n * th * tw]

    x = _data((n, c, h, w), 1, dtype)
    v_wide, v = planes(c)
    assert input_tiles(x, v, pad, pad)
    assert numpy.isnan(v_wide[:, :, n * th * tw:]).all()  # the padding left alone
    d = _tiles_of(x.astype(float), pad, th, tw, a, m)
    want = (t.b_t @ d @ t.b_t.T).transpose(4, 5, 1, 0, 2, 3).reshape(a * a, c, -1)
    numpy.testing.assert_allclose(v, want, rtol=1e-6, atol=1e-5)

    e_wide, e = planes(o)
    e[...] = _data((a * a, o, n * th * tw), 2, dtype)
    bias = _data((o,), 3, dtype)
    y = numpy.empty((n, o, ho, wo), dtype)
    assert output_tiles(e, y, bias)
    blocks = (t.a_t @ e.astype(float).reshape(a, a, o, n, th, tw).transpose(2, 3, 4, 5, 0, 1)
              @ t.a_t.T)
    full = blocks.transpose(1, 0, 2, 4, 3, 5).reshape(n, o, m * th, m * tw)[:, :, :ho, :wo]
    numpy.testing.assert_allclose(y, full + bias[:, None, None], rtol=1e-5, atol=1e-5)

    gy = _data((n, o, ho, wo), 4, dtype)
    g_wide, g = planes(o)
    assert gradient_tiles(gy, g)
    assert numpy.isnan(g_wide[:, :, n * th * tw:]).all()
    padded = numpy.zeros((n, o, m * th, m * tw))
    padded[:, :, :ho, :wo] = gy
    q = padded.reshape(n, o, th, m, tw, m).transpose(0, 1, 2, 4, 3, 5)
    want = (t.a_t.T @ q @ t.a_t).transpose(4, 5, 1, 0, 2, 3).reshape(a * a, o, -1)
    numpy.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)
    # gradient_tiles is the adjoint of output_tiles: <out(e), gy> = <e, g>
    y0 = numpy.empty_like(y)
    assert output_tiles(e, y0)
    numpy.testing.assert_allclose((y0.astype(float) * gy).sum(), (e.astype(float) * g).sum(),
                                  rtol=1e-5)


@pytest.mark.parametrize('t', [F4, F5, F45], ids=['4x4-3x3', '5x5', '4x4-5x5'])
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_the_written_out_matrices_give_the_matrix_driven_bits(t, dtype):
    # winograd_block.h computes the B^T and A^T of F(4x4, 3x3), F(2x2, 5x5)
    # and F(4x4, 5x5) by kernels of their own, each sum in the order of
    # the matrix-driven kernel. That one still runs for the same matrices
    # with their rows reversed, which reverses the outputs and keeps every
    # sum: the two must agree bit for bit.
    k, a, m, pad = winograd_kernels, t.a, t.m, 2
    n, c, h, w = 2, 3, 11, 9
    th, tw = t.tile_counts((h + 2 * pad - t.r + 1, w + 2 * pad - t.r + 1))
    tiles = n * th * tw
    x = _data((n, c, h, w), 5, dtype)
    v, v_rev = (numpy.empty((a * a, c, tiles), dtype) for _ in range(2))
    assert k.input_tiles(x, v, t.b_t, m, pad, pad)
    assert k.input_tiles(x, v_rev, t.b_t[::-1], m, pad, pad)
    numpy.testing.assert_array_equal(v_rev.reshape(a, a, c, tiles)[::-1, ::-1],
                                     v.reshape(a, a, c, tiles))

    y, y_rev = (numpy.empty((n, c, m * th, m * tw), dtype) for _ in range(2))
    assert k.output_tiles(v, y, t.a_t) and k.output_tiles(v, y_rev, t.a_t[::-1])
    blocks = (n, c, th, m, tw, m)
    numpy.testing.assert_array_equal(y_rev.reshape(blocks)[:, :, :, ::-1, :, ::-1],
                                     y.reshape(blocks))

    g, g_rev = (numpy.empty((a * a, c, tiles), dtype) for _ in range(2))
    assert k.gradient_tiles(y, g, t.a_t) and k.gradient_tiles(y, g_rev, t.a_t[:, ::-1])
    numpy.testing.assert_array_equal(g_rev.reshape(a, a, c, tiles)[::-1, ::-1],
                                     g.reshape(a, a, c, tiles))


@pytest.mark.parametrize('t', ALL, ids=ALL_IDS)
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
# 70 input channels: a block of 64 and a partial one; 16 x 200 filters: the
# output channels split over the pool's threads where it has several
@pytest.mark.parametrize('o, c', [(3, 70), (16, 200)])
def test_the_filter_transforms_are_their_matrix_definitions(t, dtype, o, c):
    a = t.a
    w = _data((o, c, t.r, t.r), 6, dtype)
    u = numpy.full((a * a, o, c), numpy.nan, dtype)
    assert winograd_kernels.filter_tiles(w, u, t.g)
    # each value a sum of at most 64 products of |w| < 1 with G's entries (< 1),
    # rounded in the dtype, on any vector path (FMA or not): well inside these
    tol = dict(rtol=1e-12, atol=1e-13) if dtype == numpy.float64 else dict(rtol=1e-5, atol=1e-6)
    want = numpy.einsum('ik,ockl,jl->ijoc', t.g, w.astype(float), t.g).reshape(a * a, o, c)
    numpy.testing.assert_allclose(u, want, **tol)
    du = _data(u.shape, 7, dtype)
    gw = numpy.full(w.shape, numpy.nan, dtype)
    assert winograd_kernels.filter_gradients(du, gw, t.g)
    want = numpy.einsum('ik,ijoc,jl->ockl', t.g, du.astype(float).reshape(a, a, o, c), t.g)
    numpy.testing.assert_allclose(gw, want, **tol)


def test_the_kernels_refuse_operands_they_do_not_take():
    k = winograd_kernels
    x = numpy.zeros((1, 2, 4, 4), numpy.float32)
    v = numpy.empty((16, 2, 4), numpy.float32)
    assert k.input_tiles_3x3(x, v, 1, 1)
    assert not k.input_tiles_3x3(x.astype(numpy.float64), v, 1, 1)  # dtypes differ
    assert not k.input_tiles_3x3(x, v[:, :, :3], 1, 1)  # shape
    assert not k.input_tiles_3x3(x, numpy.empty((16, 3, 4), numpy.float32)[:, :2], 1, 1)
    assert not k.input_tiles_3x3(x, numpy.empty((16, 2, 8), numpy.float32)[:, :, ::2], 1, 1)
    assert k.input_tiles_3x3(x, numpy.empty((16, 2, 7), numpy.float32)[:, :, :4], 1, 1)
    assert not k.input_tiles_3x3(x, numpy.empty((16, 2, 9), numpy.float32), 1, 1)
    assert not k.input_tiles_3x3(x.astype(numpy.int32), v, 1, 1)
    y = numpy.empty((1, 2, 4, 4), numpy.float32)
    assert not k.output_tiles_3x3(v, y, numpy.zeros(3, numpy.float32))  # bias size
    assert not k.gradient_tiles_3x3(y[:, :, :, ::2], v)
    # the matrix-driven kernels: the same checks, and matrices they cannot take
    v5 = numpy.empty((36, 2, 4), numpy.float32)
    assert k.input_tiles(x, v5, F5.b_t, 2, 2, 2)
    assert not k.input_tiles(x.astype(numpy.float64), v5, F5.b_t, 2, 2, 2)
    assert not k.input_tiles(x, v5[:, :, :3], F5.b_t, 2, 2, 2)
    assert not k.input_tiles(x, v5, F5.b_t[:5], 2, 2, 2)  # B^T not square
    assert not k.input_tiles(x, v5, F5.b_t, 6, 2, 2)  # m >= a
    v9 = numpy.empty((81, 2, 1), numpy.float32)
    assert not k.input_tiles(x, v9, numpy.eye(9), 2, 2, 2)  # 9x9 tiles: beyond the buffers
    assert not k.input_tiles(x, numpy.empty((64, 2, 4), numpy.float32), numpy.eye(8), 2, 2, 2)
    assert not k.output_tiles(v5, y, F5.a_t, numpy.zeros(3, numpy.float32))
    assert not k.output_tiles(v5, y, F5.a_t[:, :5])  # A^T and the planes disagree
    assert not k.gradient_tiles(y[:, :, :, ::2], v5, F5.a_t)
    assert not k.gradient_tiles(y, v5, F3.a_t)  # 16 planes, not 36
    assert k.output_tiles(v5, y, F5.a_t) and k.gradient_tiles(y, v5, F5.a_t)
    # the filter transforms (refusing, they write nothing)
    w3 = numpy.ones((2, 3, 3, 3), numpy.float32)
    u = numpy.full((36, 2, 3), numpy.nan, numpy.float32)
    assert not k.filter_tiles(w3.astype(numpy.float64), u, F4.g)  # dtypes differ
    assert not k.filter_tiles(w3.astype(numpy.int32), numpy.zeros(u.shape, numpy.int32), F4.g)
    assert not k.filter_tiles(w3, numpy.full((36, 2, 4), 0, numpy.float32)[:, :, :3], F4.g)
    assert not k.filter_tiles(w3, numpy.empty((16, 2, 3), numpy.float32), F4.g)  # a is 6
    assert not k.filter_tiles(w3, u, F45.g)  # G of 5x5 filters
    assert not k.filter_tiles(w3, u, F4.g, 2)  # 2x2 phases: u would be (36, 2, 12)
    assert not k.filter_tiles(numpy.ones((2, 3, 3, 2), numpy.float32), u, F4.g)  # not square
    assert not k.filter_tiles(w3, u, numpy.eye(9)[:, :3])  # beyond the buffers
    assert numpy.isnan(u).all()
    assert not k.filter_gradients(u, w3[:, :2], F4.g)
    assert not k.filter_gradients(u, w3[:, :, :, ::-1], F4.g)  # not contiguous
    assert (w3 == 1).all()
    assert k.filter_tiles(w3, u, F4.g) and k.filter_gradients(u, w3, F4.g)


@pytest.mark.parametrize('xshape, wshape, geom, outsize, takes', [
    ((4, 32, 8, 8), (32, 32, 3, 3), _geom(1), (8, 8), F3),     # 64 tiles
    ((2, 32, 12, 12), (48, 32, 3, 3), _geom(0), (10, 10), None),  # 50 tiles
    ((2, 32, 14, 14), (48, 32, 3, 3), _geom(0), (12, 12), F3),   # 72 tiles
    ((4, 16, 8, 8), (32, 16, 3, 3), _geom(1), (8, 8), None),    # 16 input channels
    ((16, 16, 8, 8), (32, 16, 3, 3), _geom(1), (8, 8), F4),     # 64 tiles of 4x4 outputs
    ((4, 32, 16, 16), (32, 32, 3, 3), _geom(1), (16, 16), F4),  # (preferred to F3)
    ((3, 32, 16, 16), (32, 32, 3, 3), _geom(1), (16, 16), F3),  # 48 tiles of 4x4: F3
    ((16, 8, 8, 8), (32, 8, 3, 3), _geom(1), (8, 8), None),     # 8 input channels
    ((4, 32, 8, 8), (16, 32, 3, 3), _geom(1), (8, 8), None),    # 16 outputs
    ((4, 32, 8, 8), (32, 32, 5, 5), _geom(2, 5), (8, 8), F5),
    ((4, 16, 8, 8), (32, 16, 5, 5), _geom(2, 5), (8, 8), F5),   # 5x5 pays from 16 channels
    ((8, 32, 8, 8), (32, 32, 5, 5), _geom(2, 5), (8, 8), F45),   # 32 tiles of 4x4 outputs
    ((7, 32, 8, 8), (32, 32, 5, 5), _geom(2, 5), (8, 8), F5),    # 28 of 4x4: F(2x2, 5x5)
    ((20, 32, 6, 6), (32, 32, 5, 5), _geom(1, 5), (4, 4), F5),   # 20 of 4x4, 80 of 2x2
    ((4, 8, 8, 8), (32, 8, 5, 5), _geom(2, 5), (8, 8), None),
    ((1, 64, 8, 8), (64, 64, 5, 5), _geom(2, 5), (8, 8), None),  # 16 tiles
    ((8, 32, 8, 8), (32, 32, 5, 5), _geom(1, 5), (6, 6), F45),  # any padding
    ((4, 32, 8, 8), (32, 32, 3, 3), Geometry((3, 3), (2, 2), (1, 1), (1, 1), 1), (4, 4),
     None),
    ((4, 32, 8, 8), (32, 32, 3, 3), Geometry((3, 3), (1, 1), (1, 1), (2, 2), 1), (6, 6),
     None),
    ((4, 64, 8, 8), (64, 32, 3, 3), Geometry((3, 3), (1, 1), (1, 1), (1, 1), 2), (8, 8),
     None),
    ((4, 32, 8, 8), (32, 32, 3, 5), Geometry((3, 5), (1, 1), (1, 2), (1, 1), 1), (8, 8),
     None),  # not square
    ((4, 32, 8, 8), (32, 32, 7, 7), _geom(3, 7), (8, 8), None),  # no 7x7 transform
    ((4, 32, 8, 8), (32, 32, 3, 3), _geom(1), (9, 9), None),    # not the stride-1 size
    ((4, 32, 8), (32, 32, 3), Geometry((3,), (1,), (1,), (1,), 1), (8,), None),  # 1-D
])
def test_which_convolutions_take_it(xshape, wshape, geom, outsize, takes):
    x = numpy.zeros(xshape, numpy.float32)
    assert _winograd.transform_for(x, wshape, geom, outsize, numpy.float32) is takes
    assert _winograd.applies(x, wshape, geom, outsize, numpy.float32) is (takes is not None)
    assert not _winograd.applies(x, wshape, geom, outsize, numpy.float16)
    assert not _winograd.applies(x.tolist(), wshape, geom, outsize, numpy.float32)


@pytest.fixture
def calls(monkeypatch):
    """The Winograd entry points called, by name, with Winograd forced
    (force_conv_algorithm), so that small (fast) cases take it (F(2x2, 3x3)
    for 3x3 unless a test chooses with ``use``)."""
    monkeypatch.setitem(_winograd.TRANSFORMS, 3, (F3,))
    seen = []
    for name in ('conv', 'grad_weight'):
        original = getattr(_winograd, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            seen.append(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(_winograd, name, spy)
    with force_conv_algorithm('winograd'):
        yield seen


@pytest.fixture
def use(monkeypatch):
    """use(t): t alone computes its kernel size's convolutions; returns r."""
    def use(t):
        monkeypatch.setitem(_winograd.TRANSFORMS, t.r, (t,))
        return t.r
    return use


_CASES_3X3 = [(2, 16, 16, 6, 6, 1), (1, 16, 20, 5, 7, 1), (3, 17, 16, 4, 5, 0),
              (2, 16, 16, 3, 4, 2), (1, 16, 16, 11, 9, 1)]
_CASES_5X5 = [(2, 16, 16, 6, 6, 2), (1, 16, 20, 5, 7, 2), (3, 17, 16, 6, 7, 0),
              (2, 16, 16, 3, 4, 2), (1, 16, 16, 9, 6, 1)]


@pytest.mark.parametrize('t, n, c, o, h, w, pad',
                         [(t,) + case for t in (F3, F4) for case in _CASES_3X3]
                         + [(t,) + case for t in (F5, F45) for case in _CASES_5X5])
def test_conv_and_its_gradients_go_through_it_and_match_the_references(calls, use, t, n, c,
                                                                       o, h, w, pad):
    k = use(t)
    x, wt, b = _data((n, c, h, w), 1), _data((o, c, k, k), 2), _data((o,), 3)
    y = xgrad.conv(xgrad.array(x), xgrad.array(wt), xgrad.array(b), pad=pad)
    assert calls == ['conv']
    numpy.testing.assert_allclose(y.to_numpy(), _reference_conv(x, wt, b, pad=pad),
                                  rtol=1e-10, atol=1e-12)
    inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
    gy = _data(y.shape, 4)
    gx, gw, gb = xgrad.grad([xgrad.conv(*inputs, pad=pad)], inputs,
                            grad_outputs=[xgrad.array(gy)])
    assert calls[:2] == ['conv', 'conv'] and calls[-1] == 'grad_weight'
    # the adjoints, from the loop references: <conv(x), gy> = <x, conv_transpose(gy)>
    numpy.testing.assert_allclose(gx.to_numpy(), _reference_conv_transpose(gy, wt, pad=pad,
                                                                           outsize=(h, w)),
                                  rtol=1e-10, atol=1e-12)
    numpy.testing.assert_allclose(gb.to_numpy(), gy.sum(axis=(0, 2, 3)), rtol=1e-12)
    eps = 1e-6
    for idx in [(0, 0, 1, 1), (o - 1, c - 1, k - 1, 0), (o // 2, 3, 0, k - 1)]:
        bumped = wt.copy()
        bumped[idx] += eps
        lower = wt.copy()
        lower[idx] -= eps
        numeric = ((_reference_conv(x, bumped, b, pad=pad) * gy).sum()
                   - (_reference_conv(x, lower, b, pad=pad) * gy).sum()) / (2 * eps)
        numpy.testing.assert_allclose(gw.to_numpy()[idx], numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize('t, ulps', [(F3, 64), (F4, 256), (F5, 256), (F45, 256)], ids=ALL_IDS)
def test_float32_is_within_float32_rounding_of_the_float64_result(calls, use, t, ulps):
    # the six-point transforms' larger entries (5 in B^T, 8 in A^T, 1/24 in
    # G) cost about ten times F(2x2, 3x3)'s rounding: a bound of 256 float32
    # ulps of the sum of |x| |w| (measured: about 20)
    k = use(t)
    x, wt = _data((4, 32, 9, 9), 1), _data((24, 32, k, k), 2)
    exact = _reference_conv(x, wt, pad=k // 2)
    y = xgrad.conv(xgrad.array(x.astype(numpy.float32)), xgrad.array(wt.astype(numpy.float32)),
                   pad=k // 2).to_numpy()
    assert y.dtype == numpy.float32
    scale = numpy.abs(x).max() * numpy.abs(wt).sum(axis=(1, 2, 3)).max()
    assert numpy.abs(y - exact).max() <= ulps * numpy.finfo(numpy.float32).eps * scale
    assert calls == ['conv']


@pytest.mark.parametrize('t', ALL, ids=ALL_IDS)
@pytest.mark.parametrize('keep', [True, False], ids=['tiles-kept', 'tiles-not-kept'])
def test_chunked_batches_give_the_whole_batch_result(monkeypatch, calls, use, t, keep):
    k = use(t)
    x, wt, b = _data((5, 16, 6, 5), 1), _data((16, 16, k, k), 2), _data((16,), 3)
    gy = _data((5, 16, 6, 5), 4)
    inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
    whole = xgrad.grad([xgrad.conv(*inputs, pad=k // 2)], inputs,
                       grad_outputs=[xgrad.array(gy)])
    th, tw = t.tile_counts((6, 5))
    monkeypatch.setattr(chunking, 'WINOGRAD_CHUNK_ELEMENTS', t.a ** 2 * 16 * th * tw * 2)  # 2
    monkeypatch.setattr(chunking, 'WINOGRAD_MIN_CHUNK_TILES', 1)
    if not keep:
        monkeypatch.setattr(chunking, 'WHOLE_BATCH_ELEMENTS', 0)
    tiles = []
    chunked = xgrad.grad([xgrad.conv(*inputs, pad=k // 2)], inputs,
                         grad_outputs=[xgrad.array(gy)])
    for a, b_ in zip(whole, chunked):
        numpy.testing.assert_allclose(a.to_numpy(), b_.to_numpy(), rtol=1e-12, atol=1e-13)
    y = _winograd.conv(t, x, wt, b, _geom(k // 2, k), (6, 5), numpy.float64, keep=tiles)
    assert len(tiles) == keep and (not keep or len(tiles[0].chunks) == 3)


def test_a_chunk_holds_at_least_the_minimum_tiles(monkeypatch):
    # cache-sized chunks of 1 sample, but at least 5 tiles of 2 a sample: 3 samples a chunk
    monkeypatch.setattr(chunking, 'WINOGRAD_CHUNK_ELEMENTS', 10)
    monkeypatch.setattr(chunking, 'WINOGRAD_MIN_CHUNK_TILES', 5)
    assert chunking.winograd_ranges(7, 2, 5) == [(0, 3), (3, 6), (6, 7)]
    monkeypatch.setattr(chunking, 'WINOGRAD_MIN_CHUNK_TILES', 1)
    assert chunking.winograd_ranges(3, 2, 5) == [(0, 1), (1, 2), (2, 3)]
    monkeypatch.setattr(chunking, 'WINOGRAD_CHUNK_ELEMENTS', 1 << 20)
    assert chunking.winograd_ranges(3, 2, 5) == [(0, 3)]


@pytest.mark.parametrize('t', ALL, ids=ALL_IDS)
def test_conv_transpose_through_it_matches_the_reference_with_second_derivatives(calls, use,
                                                                                 t):
    k = use(t)
    x, wt, b = _data((2, 16, 4, 5), 1), _data((16, 16, k, k), 2), _data((16,), 3)
    pad = k // 2
    y = xgrad.conv_transpose(xgrad.array(x), xgrad.array(wt), xgrad.array(b), pad=pad)
    assert calls == ['conv']  # stride 1: the flipped convolution
    numpy.testing.assert_allclose(y.to_numpy(), _reference_conv_transpose(x, wt, b, pad=pad),
                                  rtol=1e-10, atol=1e-12)

    def func(xs):
        return (xgrad.conv_transpose(*xs, pad=pad),)
    inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
    check_backward(func, inputs, [xgrad.array(_data(y.shape, 4))], atol=1e-6, rtol=1e-5)
    check_double_backward(func, inputs, [xgrad.array(_data(y.shape, 4))],
                          [xgrad.array(_data(a.shape, 5 + i)) for i, a in enumerate(inputs)],
                          atol=1e-6, rtol=1e-5)
    assert 'grad_weight' in calls


@pytest.mark.parametrize('t', ALL, ids=ALL_IDS)
def test_the_im2col_path_gives_the_same_float32_gradients(monkeypatch, calls, use, t):
    k = use(t)
    x, wt, b = (_data(s, i, numpy.float32) for i, s in enumerate(
        [(3, 16, 7, 6), (32, 16, k, k), (32,)]))
    gy = xgrad.array(_data((3, 32, 7, 6), 4, numpy.float32))

    def grads():
        inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
        y = xgrad.conv(*inputs, pad=k // 2)
        return [y] + list(xgrad.grad([y], inputs, grad_outputs=[gy]))
    winograd = grads()
    assert calls == ['conv', 'conv', 'grad_weight']
    with force_conv_algorithm('im2col'):
        im2col = grads()
    assert len(calls) == 3
    for a, b_ in zip(winograd, im2col):
        a, b_ = a.to_numpy(), b_.to_numpy()
        numpy.testing.assert_allclose(a, b_, rtol=1e-4, atol=1e-4 * numpy.abs(b_).max())
