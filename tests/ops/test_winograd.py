"""Winograd F(2x2, 3x3) convolution (xgrad/_ops/_winograd.py and
xgrad/_backend/winograd_kernels.pyx): the tile transforms against their
matrix definitions, the convolutions that take it (and those that do not),
and conv / conv_transpose through it against the loop references, with
first and second derivatives against numerical ones."""

import numpy
import pytest

import xgrad
from xgrad._backend import winograd_kernels
from xgrad._ops import _winograd
from xgrad._ops.convolution import Geometry, _reference_conv, _reference_conv_transpose
from xgrad.testing import check_backward, check_double_backward

B_T = numpy.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float)
A_T = numpy.array([[1, 1, 1, 0], [0, 1, -1, -1]], float)


def _data(shape, seed, dtype=numpy.float64):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(dtype)


def _geom(pad):
    return Geometry((3, 3), (1, 1), (pad, pad), (1, 1), 1)


def _tiles_of(x, pad, th, tw):
    """(N, C, th, tw, 4, 4): the 4x4 input tiles, zeros outside x."""
    n, c, h, w = x.shape
    big = numpy.zeros((n, c, 2 * th + 2 + 2 * pad, 2 * tw + 2 + 2 * pad))
    big[:, :, pad:pad + h, pad:pad + w] = x
    out = numpy.empty((n, c, th, tw, 4, 4))
    for i in range(th):
        for j in range(tw):
            out[:, :, i, j] = big[:, :, 2 * i:2 * i + 4, 2 * j:2 * j + 4]
    return out


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('h, w, pad', [(4, 4, 1), (5, 7, 1), (3, 3, 0), (6, 5, 2), (1, 2, 1)])
def test_the_tile_transforms_are_their_matrix_definitions(h, w, pad, dtype):
    n, c, o = 2, 3, 4
    ho, wo = h + 2 * pad - 2, w + 2 * pad - 2
    th, tw = winograd_kernels.tile_counts(ho, wo)
    x = _data((n, c, h, w), 1, dtype)
    v = numpy.empty((16, c, n * th * tw), dtype)
    assert winograd_kernels.input_tiles(x, v, pad, pad)
    d = _tiles_of(x.astype(float), pad, th, tw)
    want = (B_T @ d @ B_T.T).transpose(4, 5, 1, 0, 2, 3).reshape(16, c, -1)
    numpy.testing.assert_allclose(v, want, rtol=1e-6, atol=1e-6)

    m = _data((16, o, n * th * tw), 2, dtype)
    bias = _data((o,), 3, dtype)
    y = numpy.empty((n, o, ho, wo), dtype)
    assert winograd_kernels.output_tiles(m, y, bias)
    blocks = A_T @ m.astype(float).reshape(4, 4, o, n, th, tw).transpose(2, 3, 4, 5, 0, 1) @ A_T.T
    full = blocks.transpose(1, 0, 2, 4, 3, 5).reshape(n, o, 2 * th, 2 * tw)[:, :, :ho, :wo]
    numpy.testing.assert_allclose(y, full + bias[:, None, None], rtol=1e-6, atol=1e-6)

    gy = _data((n, o, ho, wo), 4, dtype)
    g = numpy.empty((16, o, n * th * tw), dtype)
    assert winograd_kernels.gradient_tiles(gy, g)
    padded = numpy.zeros((n, o, 2 * th, 2 * tw))
    padded[:, :, :ho, :wo] = gy
    q = padded.reshape(n, o, th, 2, tw, 2).transpose(0, 1, 2, 4, 3, 5)
    want = (A_T.T @ q @ A_T).transpose(4, 5, 1, 0, 2, 3).reshape(16, o, -1)
    numpy.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)
    # gradient_tiles is the adjoint of output_tiles: <out(m), gy> = <m, g>
    y0 = numpy.empty_like(y)
    assert winograd_kernels.output_tiles(m, y0)
    numpy.testing.assert_allclose((y0.astype(float) * gy).sum(), (m.astype(float) * g).sum(),
                                  rtol=1e-5)


def test_the_kernels_refuse_operands_they_do_not_take():
    x = numpy.zeros((1, 2, 4, 4), numpy.float32)
    v = numpy.empty((16, 2, 4), numpy.float32)
    assert winograd_kernels.input_tiles(x, v, 1, 1)
    assert not winograd_kernels.input_tiles(x.astype(numpy.float64), v, 1, 1)  # dtypes differ
    assert not winograd_kernels.input_tiles(x, v[:, :, :3], 1, 1)  # shape, not contiguous
    assert not winograd_kernels.input_tiles(x, numpy.empty((16, 2, 9), numpy.float32), 1, 1)
    assert not winograd_kernels.input_tiles(x.astype(numpy.int32), v, 1, 1)
    y = numpy.empty((1, 2, 4, 4), numpy.float32)
    assert not winograd_kernels.output_tiles(v, y, numpy.zeros(3, numpy.float32))  # bias size
    assert not winograd_kernels.gradient_tiles(y[:, :, :, ::2], v)


@pytest.mark.parametrize('xshape, wshape, geom, outsize, takes', [
    ((4, 32, 8, 8), (32, 32, 3, 3), _geom(1), (8, 8), True),     # 64 tiles
    ((2, 32, 12, 12), (48, 32, 3, 3), _geom(0), (10, 10), False),  # 50 tiles
    ((2, 32, 14, 14), (48, 32, 3, 3), _geom(0), (12, 12), True),   # 72 tiles
    ((4, 16, 8, 8), (32, 16, 3, 3), _geom(1), (8, 8), False),    # 16 input channels
    ((4, 32, 8, 8), (16, 32, 3, 3), _geom(1), (8, 8), False),    # 16 outputs
    ((4, 32, 8, 8), (32, 32, 5, 5), Geometry((5, 5), (1, 1), (2, 2), (1, 1), 1), (8, 8),
     False),
    ((4, 32, 8, 8), (32, 32, 3, 3), Geometry((3, 3), (2, 2), (1, 1), (1, 1), 1), (4, 4),
     False),
    ((4, 32, 8, 8), (32, 32, 3, 3), Geometry((3, 3), (1, 1), (1, 1), (2, 2), 1), (6, 6),
     False),
    ((4, 64, 8, 8), (64, 32, 3, 3), Geometry((3, 3), (1, 1), (1, 1), (1, 1), 2), (8, 8),
     False),
    ((4, 32, 8, 8), (32, 32, 3, 3), _geom(1), (9, 9), False),    # not the stride-1 size
    ((4, 32, 8), (32, 32, 3), Geometry((3,), (1,), (1,), (1,), 1), (8,), False),  # 1-D
])
def test_which_convolutions_take_it(xshape, wshape, geom, outsize, takes):
    x = numpy.zeros(xshape, numpy.float32)
    assert _winograd.applies(x, wshape, geom, outsize, numpy.float32) is takes
    assert not _winograd.applies(x, wshape, geom, outsize, numpy.float16)
    assert not _winograd.applies(x.tolist(), wshape, geom, outsize, numpy.float32)


@pytest.fixture
def calls(monkeypatch):
    """The Winograd entry points called, by name; the size thresholds
    lowered to 16 channels and one tile, so that small (fast) cases take it."""
    monkeypatch.setattr(_winograd, 'MIN_CHANNELS', 16)
    monkeypatch.setattr(_winograd, 'MIN_TILES', 1)
    seen = []
    for name in ('conv', 'grad_weight'):
        original = getattr(_winograd, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            seen.append(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(_winograd, name, spy)
    return seen


@pytest.mark.parametrize('n, c, o, h, w, pad', [
    (2, 16, 16, 6, 6, 1), (1, 16, 20, 5, 7, 1), (3, 17, 16, 4, 5, 0), (2, 16, 16, 3, 4, 2),
])
def test_conv_and_its_gradients_go_through_it_and_match_the_references(calls, n, c, o, h, w,
                                                                       pad):
    x, wt, b = _data((n, c, h, w), 1), _data((o, c, 3, 3), 2), _data((o,), 3)
    y = xgrad.conv(xgrad.array(x), xgrad.array(wt), xgrad.array(b), pad=pad)
    assert calls == ['conv']
    numpy.testing.assert_allclose(y.to_numpy(), _reference_conv(x, wt, b, pad=pad),
                                  rtol=1e-10, atol=1e-12)
    inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
    gy = _data(y.shape, 4)
    gx, gw, gb = xgrad.grad([xgrad.conv(*inputs, pad=pad)], inputs,
                            grad_outputs=[xgrad.array(gy)])
    assert calls == ['conv', 'conv', 'conv', 'grad_weight']  # forward, the flipped gx, gw
    # the adjoints, from the loop references: <conv(x), gy> = <x, conv_transpose(gy)>
    numpy.testing.assert_allclose(gx.to_numpy(), _reference_conv_transpose(gy, wt, pad=pad,
                                                                           outsize=(h, w)),
                                  rtol=1e-10, atol=1e-12)
    numpy.testing.assert_allclose(gb.to_numpy(), gy.sum(axis=(0, 2, 3)), rtol=1e-12)
    eps = 1e-6
    for idx in [(0, 0, 1, 1), (o - 1, c - 1, 2, 0), (o // 2, 3, 0, 2)]:
        bumped = wt.copy()
        bumped[idx] += eps
        lower = wt.copy()
        lower[idx] -= eps
        numeric = ((_reference_conv(x, bumped, b, pad=pad) * gy).sum()
                   - (_reference_conv(x, lower, b, pad=pad) * gy).sum()) / (2 * eps)
        numpy.testing.assert_allclose(gw.to_numpy()[idx], numeric, rtol=1e-6, atol=1e-8)


def test_float32_is_within_float32_rounding_of_the_float64_result(calls):
    x, wt = _data((4, 32, 9, 9), 1), _data((24, 32, 3, 3), 2)
    exact = _reference_conv(x, wt, pad=1)
    y = xgrad.conv(xgrad.array(x.astype(numpy.float32)), xgrad.array(wt.astype(numpy.float32)),
                   pad=1).to_numpy()
    assert y.dtype == numpy.float32
    scale = numpy.abs(x).max() * numpy.abs(wt).sum(axis=(1, 2, 3)).max()
    assert numpy.abs(y - exact).max() <= 64 * numpy.finfo(numpy.float32).eps * scale
    assert calls == ['conv']


def test_chunked_batches_give_the_whole_batch_result(monkeypatch, calls):
    x, wt, b = _data((5, 16, 6, 5), 1), _data((16, 16, 3, 3), 2), _data((16,), 3)
    gy = _data((5, 16, 6, 5), 4)
    inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
    whole = xgrad.grad([xgrad.conv(*inputs, pad=1)], inputs, grad_outputs=[xgrad.array(gy)])
    monkeypatch.setattr(_winograd, '_CHUNK_ELEMENTS', 16 * 16 * 9 * 2)  # two samples a chunk
    chunked = xgrad.grad([xgrad.conv(*inputs, pad=1)], inputs, grad_outputs=[xgrad.array(gy)])
    for a, b_ in zip(whole, chunked):
        numpy.testing.assert_allclose(a.to_numpy(), b_.to_numpy(), rtol=1e-12, atol=1e-13)


def test_conv_transpose_through_it_matches_the_reference_with_second_derivatives(calls):
    x, wt, b = _data((2, 16, 4, 5), 1), _data((16, 16, 3, 3), 2), _data((16,), 3)
    y = xgrad.conv_transpose(xgrad.array(x), xgrad.array(wt), xgrad.array(b), pad=1)
    assert calls == ['conv']  # stride 1: the flipped convolution
    numpy.testing.assert_allclose(y.to_numpy(), _reference_conv_transpose(x, wt, b, pad=1),
                                  rtol=1e-10, atol=1e-12)

    def func(xs):
        return (xgrad.conv_transpose(*xs, pad=1),)
    inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
    check_backward(func, inputs, [xgrad.array(_data(y.shape, 4))], atol=1e-6, rtol=1e-5)
    check_double_backward(func, inputs, [xgrad.array(_data(y.shape, 4))],
                          [xgrad.array(_data(a.shape, 5 + i)) for i, a in enumerate(inputs)],
                          atol=1e-6, rtol=1e-5)
    assert 'grad_weight' in calls


def test_the_im2col_path_gives_the_same_float32_gradients(monkeypatch, calls):
    x, wt, b = (_data(s, i, numpy.float32) for i, s in enumerate(
        [(3, 16, 7, 6), (32, 16, 3, 3), (32,)]))
    gy = xgrad.array(_data((3, 32, 7, 6), 4, numpy.float32))

    def grads():
        inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
        y = xgrad.conv(*inputs, pad=1)
        return [y] + list(xgrad.grad([y], inputs, grad_outputs=[gy]))
    winograd = grads()
    assert calls == ['conv', 'conv', 'grad_weight']
    monkeypatch.setattr(_winograd, 'MIN_CHANNELS', 1 << 30)
    im2col = grads()
    assert len(calls) == 3
    for a, b_ in zip(winograd, im2col):
        a, b_ = a.to_numpy(), b_.to_numpy()
        numpy.testing.assert_allclose(a, b_, rtol=1e-4, atol=1e-4 * numpy.abs(b_).max())
