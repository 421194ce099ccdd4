"""1-D convolutions on the host run as 2-D ones of height 1
(convolution._runs_as_2d): every algorithm a 2-D convolution has reaches
them, and each must give the loop references' values and gradients, on
contiguous and strided inputs, and say so in xgrad.conv_algorithm."""

import numpy
import pytest

import xgrad
from xgrad._ops._conv import dispatch, thresholds
from xgrad._ops._conv.reference import reference_conv, reference_conv_transpose
from xgrad.testing import check_backward, check_double_backward, force_conv_algorithm

from ._conv_checks import assert_adjoint_gradients, data


# (x, w, parameters, the algorithm of the forward, input gradient, weight
# gradient on this machine's path; None: whatever the dispatcher chooses)
CASES = [
    ((4, 16, 40), (24, 16, 5), {'pad': 2}, None),
    ((3, 8, 33), (8, 8, 3), {'stride': 2, 'pad': 1}, None),
    ((2, 6, 30), (4, 6, 3), {'dilate': 3, 'pad': 2}, None),
    ((2, 6, 17), (4, 6, 4), {'stride': 3, 'cover_all': True}, None),
    ((2, 32, 21), (32, 16, 3), {'pad': 1, 'groups': 2}, None),
    ((3, 12, 25), (24, 1, 5), {'pad': 2, 'groups': 12}, 'depthwise'),
    ((3, 12, 25), (12, 1, 3), {'stride': 2, 'pad': 1, 'groups': 12}, 'depthwise'),
    ((5, 16, 9), (32, 16, 1), {}, 'pointwise'),
    ((16, 16, 6), (16, 16, 3), {'pad': 1}, 'taps'),
    ((2, 5, 11), (3, 5, 11), {'pad': 5}, None),
]


def _call(f, x, w, b, params):
    return f(x, w, b, **params)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('xshape, wshape, params, forced', CASES)
def test_the_forward_and_gradients_match_the_references(xshape, wshape, params, forced,
                                                        dtype):
    x64, w64, b64 = data(xshape, 1), data(wshape, 2), data(wshape[:1], 3)
    expected = reference_conv(x64, w64, b64, **params)
    x, w, b = (xgrad.array(a.astype(dtype)).require_grad() for a in (x64, w64, b64))
    tol = 1e-4 if dtype == numpy.float32 else 1e-11
    with force_conv_algorithm(forced) if forced else _nothing() as taken:
        y = xgrad.conv(x, w, b, **params)
        gy = xgrad.array(data(y.shape, 6).astype(dtype))
        gx, gw, gb = xgrad.grad([y], [x, w, b], grad_outputs=[gy])
    assert y.shape == expected.shape and y.dtype == dtype
    numpy.testing.assert_allclose(y.to_numpy(), expected, rtol=tol, atol=tol)
    ref_kw = {k: v for k, v in params.items()}
    assert_adjoint_gradients(lambda u, v, **kw: reference_conv(u, v, **kw), x64, w64, gy, gx,
                             gw, ref_kw)
    numpy.testing.assert_allclose(gb.to_numpy(), gy.to_numpy().sum(axis=(0, 2)), rtol=tol,
                                  atol=tol)
    if forced and (forced != 'taps' or _taps_possible(dtype)):
        # the forced algorithm ran on the forward and both gradients
        assert taken.taken and all(a == forced for _, a in taken.taken), taken.taken


def _taps_possible(dtype):
    """Whether tap groups can run here: float32, on a CPU path with
    xgrad's GEMM kernel (not on sse2)."""
    return dtype == numpy.float32 and thresholds.for_path().tap_tile_rows is not None


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize('xshape, wshape, params', [
    ((2, 3, 9), (4, 3, 3), {'pad': 1}),
    ((2, 4, 8), (4, 1, 3), {'stride': 2, 'pad': 1, 'groups': 4}),
    ((2, 4, 7), (6, 2, 2), {'dilate': 2, 'groups': 2}),
])
def test_second_derivatives_numerically(xshape, wshape, params):
    inputs = [xgrad.array(data(s, i)).require_grad()
              for i, s in enumerate((xshape, wshape, wshape[:1]))]

    def func(xs):
        return (xgrad.conv(*xs, **params),)
    y = func(inputs)[0]
    gy = xgrad.array(data(y.shape, 7))
    check_backward(func, inputs, [gy])
    check_double_backward(func, inputs, [gy], [xgrad.array(data(a.shape, 8 + i))
                                               for i, a in enumerate(inputs)])


@pytest.mark.parametrize('xshape, wshape, params', [
    ((3, 16, 20), (16, 8, 4), {'stride': 2, 'pad': 1}),
    ((2, 6, 9), (6, 4, 3), {'stride': 1, 'pad': 1}),
    ((2, 6, 9), (6, 2, 3), {'stride': 3, 'outsize': (27,), 'groups': 2}),
    ((2, 8, 10), (8, 1, 5), {'stride': 2, 'pad': 2, 'groups': 8}),
])
def test_conv_transpose_matches_the_reference(xshape, wshape, params):
    x64, w64, b64 = data(xshape, 1), data(wshape, 2), data((wshape[1] * params.get(
        'groups', 1),), 3)
    expected = reference_conv_transpose(x64, w64, b64, **params)
    x, w, b = (xgrad.array(a).require_grad() for a in (x64, w64, b64))
    y = xgrad.conv_transpose(x, w, b, **params)
    numpy.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-11, atol=1e-12)
    gy = xgrad.array(data(y.shape, 6))
    gx, gw = xgrad.grad([y], [x, w], grad_outputs=[gy])
    assert_adjoint_gradients(reference_conv_transpose, x64, w64, gy, gx, gw,
                             {k: v for k, v in params.items()})


@pytest.mark.parametrize('layout', ['strided', 'reversed', 'broadcast_gy'])
def test_strided_inputs(layout):
    base = data((3, 8, 2 * 23), 1).astype(numpy.float32)
    x64 = base[:, :, ::2] if layout == 'strided' else (
        base[:, :, ::-1] if layout == 'reversed' else base)
    w64 = data((6, 8, 3), 2).astype(numpy.float32)
    x = xgrad.asarray(x64).require_grad()
    w = xgrad.array(w64).require_grad()
    y = xgrad.conv(x, w, pad=1)
    numpy.testing.assert_allclose(y.to_numpy(), reference_conv(
        x64.astype(float), w64.astype(float), pad=1), rtol=1e-4, atol=1e-5)
    # the gradient of a sum: a broadcast gy (stride 0) for both gradients
    gx, gw = xgrad.grad([xgrad.sum(y)], [x, w])
    ones = numpy.ones(y.shape)
    numpy.testing.assert_allclose(gx.to_numpy(), reference_conv_transpose(
        ones, w64.astype(float), pad=1, outsize=(x64.shape[2],)), rtol=1e-4, atol=1e-5)
    assert gw.shape == w.shape and numpy.isfinite(gw.to_numpy()).all()


def test_the_query_says_it_runs_as_2d():
    for kernel in dispatch.KERNELS:
        one_d = xgrad.conv_algorithm((16, 128, 200), (128, 128, 5), pad=2, kernel=kernel,
                                     threads=1)
        two_d = xgrad.conv_algorithm((16, 128, 1, 200), (128, 128, 1, 5), pad=(0, 2),
                                     kernel=kernel, threads=1)
        assert one_d.algorithm == two_d.algorithm
        assert one_d.reason == two_d.reason + ' (1-D: run as 2-D of height 1)'


def test_on_a_device_1d_is_not_lifted():
    found = xgrad.conv_algorithm((2, 4, 9), (4, 4, 3), pad=1, device='cuda:0')
    assert '1-D' not in found.reason
