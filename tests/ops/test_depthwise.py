"""Depthwise convolution (groups == input channels): the 'depthwise'
algorithm's stencils (xgrad/_backend/depthwise_kernels.pyx) against the
float64 loop references, gradients by the adjoint identity and numerically,
second order numerically, thread counts, layouts and the dispatcher's
choice. (Run on every CPU path by .ci/run's vector_paths.)"""

import itertools

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels
from xgrad._ops._conv.reference import reference_conv, reference_conv_transpose
from xgrad.testing import check_backward, check_double_backward, force_conv_algorithm

from ._conv_checks import assert_adjoint_gradients, data
from ._layouts import LAYOUTS, in_layout


def _cases():
    """(xshape, kernel, stride, pad, dilate, multiplier): the strides,
    paddings, dilations, windows and multipliers the brief asks for, with
    odd sizes and batches of 1 and 3."""
    out = []
    for (kh, kw), s, d, m in itertools.product(((1, 1), (3, 3), (5, 5), (3, 5)), (1, 2, 3),
                                               (1, 2), (1, 2)):
        n = 1 if (s + d + m) % 2 else 3
        for p in sorted({0, (kh - 1) // 2, kh - 1}):
            xshape = (n, 3, 9 + s, 11 + d)
            if xshape[2] + 2 * p < (kh - 1) * d + 1:
                continue
            out.append((xshape, (kh, kw), s, (p, min(p, kw - 1)), d, m))
    return out


CASES = _cases()


def _ids(case):
    xshape, k, s, p, d, m = case
    return 'n{}_k{}x{}_s{}_p{}x{}_d{}_m{}'.format(xshape[0], k[0], k[1], s, p[0], p[1], d, m)


def _forward_and_grads(x, w, b, gy, kw):
    xa, wa, ba = (xgrad.array(a).require_grad() for a in (x, w, b))
    with force_conv_algorithm('depthwise') as forced:
        y = xgrad.conv(xa, wa, ba, **kw)
        gx, gw = xgrad.grad([y], [xa, wa], grad_outputs=[xgrad.array(gy)])
    return y, gx, gw, forced.taken


@pytest.mark.parametrize('dtype', ['float64', 'float32'])
@pytest.mark.parametrize('case', CASES, ids=_ids)
def test_matches_the_reference_and_the_adjoint_identity(case, dtype):
    xshape, k, s, p, d, m = case
    c = xshape[1]
    x64, w64, b64 = data(xshape, 1), data((c * m, 1) + k, 2), data((c * m,), 3)
    kw = dict(stride=s, pad=p, dilate=d, groups=c)
    ref = reference_conv(x64, w64, b64, **kw)
    gy = data(ref.shape, 6).astype(dtype)
    y, gx, gw, taken = _forward_and_grads(x64.astype(dtype), w64.astype(dtype),
                                          b64.astype(dtype), gy, kw)
    assert set(taken) == {('conv', 'depthwise'), ('conv_transpose', 'depthwise'),
                          ('grad_weight', 'depthwise')}, taken
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == 'float32' else dict(rtol=1e-12, atol=1e-12)
    numpy.testing.assert_allclose(y.to_numpy(), ref, **tol)
    assert_adjoint_gradients(reference_conv, x64, w64, xgrad.array(gy), gx, gw,
                             dict(stride=s, pad=p, dilate=d, groups=c))
    # the input gradient is conv_transpose with the same grouping: its reference
    gx_ref = reference_conv_transpose(gy.astype(float), w64, stride=s, pad=p, dilate=d,
                                      groups=c, outsize=xshape[2:])
    numpy.testing.assert_allclose(gx.to_numpy(), gx_ref, **tol)


def test_the_weight_gradient_of_float32_is_accurate():
    """float32's partial sums against float64's over a long sum (64 samples
    of 56x56): the error of a few float32 roundings, not of a long chain."""
    x, gy = data((64, 4, 56, 56), 1), data((64, 4, 56, 56), 2)
    w = data((4, 1, 3, 3), 3)
    exact = None
    for dtype in ('float64', 'float32'):
        _, _, gw, _ = _forward_and_grads(x.astype(dtype), w.astype(dtype),
                                         numpy.zeros(4, dtype), gy.astype(dtype),
                                         dict(pad=1, groups=4))
        if exact is None:
            exact = gw.to_numpy()
        else:
            scale = numpy.abs(x).mean() * numpy.abs(gy).mean() * 64 * 56 * 56
            assert numpy.abs(gw.to_numpy() - exact).max() < 1e-6 * scale


@pytest.mark.parametrize('case', [((2, 2, 5, 6), (3, 3), 1, (1, 1), 1, 2),
                                  ((1, 3, 7, 5), (3, 3), 2, (1, 0), 2, 1),
                                  ((2, 2, 6, 6), (2, 3), 3, (1, 2), 1, 1)], ids=_ids)
def test_first_and_second_derivatives_numerically(case):
    """check_backward and check_double_backward: conv's gradients call the
    depthwise conv_transpose and weight gradient, and theirs the three again."""
    xshape, k, s, p, d, m = case
    c = xshape[1]
    inputs = [xgrad.array(a).require_grad() for a in (
        data(xshape, 1), data((c * m, 1) + k, 2), data((c * m,), 3))]

    def func(xs):
        return (xgrad.conv(*xs, stride=s, pad=p, dilate=d, groups=c),)
    y = func(inputs)[0]
    with force_conv_algorithm('depthwise') as forced:
        check_backward(func, inputs, [xgrad.array(data(y.shape, 6))])
        check_double_backward(func, inputs, [xgrad.array(data(y.shape, 6))],
                              [xgrad.array(data(a.shape, 7 + i)) for i, a in enumerate(inputs)])
    assert {how for _, how in forced.taken} == {'depthwise'}
    assert {kernel for kernel, _ in forced.taken} == {'conv', 'conv_transpose', 'grad_weight'}


def test_conv_transpose_with_the_same_grouping():
    """conv_transpose of C M channels to C, groups C (w (C M, 1, k, k)):
    its forward, and its gradients numerically."""
    x, w, b = data((2, 6, 4, 5), 1), data((6, 1, 3, 3), 2), data((3,), 3)
    kw = dict(stride=2, pad=1, groups=3, outsize=(7, 9))
    inputs = [xgrad.array(a).require_grad() for a in (x, w, b)]

    def func(xs):
        return (xgrad.conv_transpose(*xs, **kw),)
    with force_conv_algorithm('depthwise') as forced:
        y = func(inputs)[0]
        check_backward(func, inputs, [xgrad.array(data(y.shape, 6))])
    assert ('conv_transpose', 'depthwise') in forced.taken
    numpy.testing.assert_allclose(y.to_numpy(), reference_conv_transpose(x, w, b, **kw),
                                  rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_thread_counts_give_identical_results(dtype):
    x, w = data((3, 40, 29, 31), 1, dtype), data((80, 1, 3, 3), 2, dtype)
    gy = data((3, 80, 15, 16), 3, dtype)
    results = []
    before = native_kernels.max_threads()
    try:
        for threads in (1, 3):
            native_kernels.set_thread_limit(threads)
            xgrad._ops.convolution.clear_choices()
            _, gx, gw, _ = _forward_and_grads(x, w, numpy.zeros(80, dtype), gy,
                                              dict(stride=2, pad=1, groups=40))
            y = xgrad.conv(xgrad.array(x), xgrad.array(w), stride=2, pad=1, groups=40)
            results.append([a.to_numpy() for a in (y, gx, gw)])
    finally:
        native_kernels.set_thread_limit(before)
        xgrad._ops.convolution.clear_choices()
    for one, three in zip(*results):
        numpy.testing.assert_array_equal(one, three)


@pytest.mark.parametrize('stride, pad', [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2),
                                         (3, 1), ((2, 1), (1, 2))])
def test_each_plane_is_computed_as_if_alone(stride, pad):
    """The kernels keep a plane's padded copy between the planes of a
    thread's chunk and write only the next plane's values into it (at column
    strides 1 and 2): each sample's output and input gradient must be those
    of the sample alone, bit for bit, whatever the planes before it held
    (infinities and NaN in the first sample here)."""
    x = data((3, 5, 9, 10), 1, 'float32')
    x[0] = numpy.inf
    x[0, :, ::2] = numpy.nan
    w = data((10, 1, 3, 3), 2, 'float32')
    kw = dict(stride=stride, pad=pad, groups=5)
    with force_conv_algorithm('depthwise'):
        y = xgrad.conv(xgrad.array(x), xgrad.array(w), **kw).to_numpy()
        gy = data(y.shape, 3, 'float32')
        gy[0] = numpy.inf
        gx = xgrad.conv_transpose(xgrad.array(gy), xgrad.array(w), outsize=x.shape[2:],
                                  **kw).to_numpy()
        for i in (1, 2):
            alone = xgrad.conv(xgrad.array(x[i:i + 1]), xgrad.array(w), **kw).to_numpy()
            numpy.testing.assert_array_equal(y[i:i + 1], alone)
            alone = xgrad.conv_transpose(xgrad.array(gy[i:i + 1]), xgrad.array(w),
                                         outsize=x.shape[2:], **kw).to_numpy()
            numpy.testing.assert_array_equal(gx[i:i + 1], alone)
    numpy.testing.assert_allclose(y[1:], reference_conv(x[1:], w, **kw), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_layouts(layout):
    """Transposed, strided, unaligned... x, w and gy: the same values as the
    contiguous arrays give."""
    x, w = data((2, 4, 9, 8), 1, 'float32'), data((8, 1, 3, 3), 2, 'float32')
    gy = data((2, 8, 5, 4), 3, 'float32')
    kw = dict(stride=2, pad=1, groups=4)
    x, w, gy = (in_layout(a, layout) for a in (x, w, gy))  # (broadcast: other values)
    expected = _forward_and_grads(*(numpy.array(a) for a in (x, w, numpy.zeros(8, 'float32'),
                                                             gy)), kw)[:3]
    xa, wa = (xgrad.from_numpy(a).require_grad() for a in (x, w))
    with force_conv_algorithm('depthwise') as forced:
        y = xgrad.conv(xa, wa, **kw)
        gx, gw = xgrad.grad([y], [xa, wa], grad_outputs=[xgrad.from_numpy(gy)])
    assert {how for _, how in forced.taken} == {'depthwise'}
    for got, want in zip((y, gx, gw), expected):
        numpy.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-6, atol=1e-6)


def test_non_finite_values_stay_where_the_taps_reach():
    """An inf in x's last column and a NaN weight: only the sums that take
    them are not finite (the kernels' widened rows multiply zeros past each
    output row, which must not spread them)."""
    x, w = data((1, 2, 6, 6), 1), data((2, 1, 3, 3), 2)
    x[0, 0, 2, 5] = numpy.inf
    gy = data((1, 2, 6, 6), 3)
    _, gx, gw, _ = _forward_and_grads(x, w, numpy.zeros(2), gy, dict(pad=1, groups=2))
    numpy.testing.assert_allclose(gw.to_numpy()[1], reference_conv(
        x[:, 1:], gy[:, 1:].swapaxes(0, 1), pad=1).swapaxes(0, 1)[0], rtol=1e-12)
    assert numpy.isfinite(gw.to_numpy()[0, 0, :, 0]).all()  # the left taps never read col 5
    w[1, 0, 1, 1] = numpy.nan
    _, gx, _, _ = _forward_and_grads(x, w, numpy.zeros(2), gy, dict(pad=1, groups=2))
    assert numpy.isfinite(gx.to_numpy()[0, 0][:, :4]).all()  # the inf spreads in x's grad
    assert numpy.isnan(gx.to_numpy()[0, 1]).all()  # the center tap reaches every position


def test_not_taken_where_it_does_not_apply():
    """force_conv_algorithm('depthwise') leaves other shapes to their own
    choice: two channels a group, 3-D, int-free float16 is float32 work."""
    with force_conv_algorithm('depthwise') as forced:
        xgrad.conv(xgrad.array(data((1, 4, 5, 5), 1)), xgrad.array(data((4, 2, 3, 3), 2)),
                   groups=2)
        xgrad.conv(xgrad.array(data((1, 2, 3, 4, 4), 1)),
                   xgrad.array(data((2, 1, 2, 2, 2), 2)), groups=2)
    assert forced.taken and all(how != 'depthwise' for _, how in forced.taken)


def test_the_dispatcher_names_it_with_its_reason():
    for kernel in ('forward', 'grad_input', 'grad_weight'):
        a = xgrad.conv_algorithm((16, 64, 28, 28), (128, 1, 3, 3), stride=2, pad=1, groups=64,
                                 kernel=kernel)
        assert a.algorithm == 'depthwise', a
        assert '64 groups of one input channel and 2 outputs each (3x3 window)' in a.reason
    assert xgrad.conv_algorithm((16, 64, 28, 28), (64, 1, 3, 3), pad=1, groups=64,
                                device='cuda:0').algorithm != 'depthwise'
    # several channels a group: not depthwise ('groups' per-group Winograd: test_conv_groups)
    assert xgrad.conv_algorithm((16, 64, 28, 28), (64, 16, 3, 3), pad=1,
                                groups=4).algorithm == 'groups'
    # one input channel: an ordinary convolution
    assert xgrad.conv_algorithm((16, 1, 28, 28), (8, 1, 3, 3), pad=1).algorithm != 'depthwise'
