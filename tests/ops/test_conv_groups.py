"""Grouped convolutions with several channels a group: the 'groups'
algorithm (one group-1 convolution a group, each by the planned algorithm
the dispatcher chose for a group's shapes) against the float64 loop
references, gradients by the adjoint identity and numerically to second
order, bias, non-contiguous inputs, thread counts and the dispatcher's
choice. (Run on every CPU path by .ci/run's vector_paths.)"""

import dataclasses

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels
from xgrad._ops import convolution
from xgrad._ops._conv import dispatch, thresholds
from xgrad._ops._conv.reference import reference_conv, reference_conv_transpose
from xgrad.testing import check_backward, check_double_backward, force_conv_algorithm

from ._conv_checks import assert_adjoint_gradients, data

# (name, x shape, w shape, params, the per-group algorithm of conv on avx512)
CASES = [
    ('winograd g2', (4, 32, 16, 16), (32, 16, 3, 3), dict(pad=1, groups=2), 'winograd'),
    ('winograd g3', (4, 48, 16, 16), (48, 16, 3, 3), dict(pad=1, groups=3), 'winograd'),
    ('winograd g2 16->24', (4, 32, 16, 16), (48, 16, 3, 3), dict(pad=1, groups=2), 'winograd'),
    ('input_phases g2 5x5 s2', (16, 32, 32, 32), (32, 16, 5, 5), dict(stride=2, pad=2, groups=2),
     'input_phases'),
    ('taps g2 3x3 s2 8x8', (16, 128, 8, 8), (128, 64, 3, 3), dict(stride=2, pad=1, groups=2),
     'taps'),
    ('small g4 (per group im2col, forced)', (2, 8, 6, 7), (12, 2, 3, 3), dict(pad=1, groups=4),
     None),
]


def _forward_and_grads(x, w, b, gy, kw, forced='groups'):
    xa, wa, ba = (xgrad.array(a).require_grad() for a in (x, w, b))
    with force_conv_algorithm(forced) as taken:
        y = xgrad.conv(xa, wa, ba, **kw)
        gx, gw = xgrad.grad([y], [xa, wa], grad_outputs=[xgrad.array(gy)])
    return y, gx, gw, taken.taken


@pytest.mark.parametrize('dtype', ['float64', 'float32'])
@pytest.mark.parametrize('name, xshape, wshape, kw, per_group', CASES,
                         ids=[c[0] for c in CASES])
def test_matches_the_reference_and_the_adjoint_identity(name, xshape, wshape, kw, per_group,
                                                        dtype):
    x64, w64, b64 = data(xshape, 1), data(wshape, 2), data(wshape[:1], 3)
    ref = reference_conv(x64, w64, b64, **kw)
    gy = data(ref.shape, 6).astype(dtype)
    y, gx, gw, taken = _forward_and_grads(x64.astype(dtype), w64.astype(dtype),
                                          b64.astype(dtype), gy, kw)
    assert {t for t in taken if t[1] == 'groups'} == {
        ('conv', 'groups'), ('conv_transpose', 'groups'), ('grad_weight', 'groups')}, taken
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == 'float32' else dict(rtol=1e-10, atol=1e-10)
    numpy.testing.assert_allclose(y.to_numpy(), ref, **tol)
    assert_adjoint_gradients(reference_conv, x64, w64, xgrad.array(gy), gx, gw, kw)
    gx_ref = reference_conv_transpose(gy.astype(float), w64, outsize=xshape[2:], **kw)
    numpy.testing.assert_allclose(gx.to_numpy(), gx_ref, **tol)


@pytest.mark.parametrize('name, xshape, wshape, kw, per_group',
                         [c for c in CASES if c[4]], ids=[c[0] for c in CASES if c[4]])
def test_the_dispatcher_takes_groups_with_the_planned_per_group_algorithm(
        name, xshape, wshape, kw, per_group):
    """Unforced on avx512 with one thread: 'groups', each group by the
    planned algorithm, the result the reference's."""
    if native_kernels.cpu_path() != 'avx512':
        pytest.skip('the per-group choices are pinned on avx512')
    before = native_kernels.max_threads()
    native_kernels.set_thread_limit(1)
    convolution.clear_choices()
    try:
        _check_unforced(xshape, wshape, kw, per_group)
    finally:
        native_kernels.set_thread_limit(before)
        convolution.clear_choices()


def _check_unforced(xshape, wshape, kw, per_group):
    found = xgrad.conv_algorithm(xshape, wshape, threads=1, **kw)
    assert found.algorithm == 'groups' and per_group in found.reason, found
    x, w = data(xshape, 1, numpy.float32), data(wshape, 2, numpy.float32)
    geom, outsize = convolution._conv_shapes(xshape, numpy.float32, wshape, None,
                                             kw.get('stride', 1), kw['pad'], 1, kw['groups'],
                                             False)
    how, _, plan = dispatch.choice('conv', x, wshape, geom, tuple(outsize), numpy.float32)
    assert (how, plan.per.algorithm) == ('groups', per_group)
    numpy.testing.assert_allclose(convolution.conv_kernel(x, w, None, geom, outsize),
                                  reference_conv(x.astype(float), w.astype(float), **kw),
                                  rtol=2e-4, atol=2e-4)


def test_conv_transpose_grouped():
    """conv_transpose with groups (conv's input gradient's shapes): forward
    against its reference, forced and not."""
    x, w, b = data((4, 32, 16, 16), 1), data((32, 24, 3, 3), 2), data((48,), 3)
    kw = dict(pad=1, groups=2)
    ref = reference_conv_transpose(x, w, b, **kw)
    for forced in ('groups', None):
        if forced:
            with force_conv_algorithm(forced) as taken:
                y = xgrad.conv_transpose(xgrad.array(x), xgrad.array(w), xgrad.array(b), **kw)
            assert ('conv_transpose', 'groups') in taken.taken
        else:
            y = xgrad.conv_transpose(xgrad.array(x), xgrad.array(w), xgrad.array(b), **kw)
        numpy.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-10, atol=1e-10)


# Winograd with any channel count (per-group Winograd on small shapes)
_ANY_WINOGRAD = (('F(4x4,3x3)', 1, 1), ('F(2x2,3x3)', 1, 1), ('F(4x4,5x5)', 1, 1),
                 ('F(2x2,5x5)', 1, 1))


@pytest.mark.parametrize('per_group', ['winograd', None])
@pytest.mark.parametrize('xshape, wshape, kw', [
    ((2, 4, 6, 5), (6, 2, 3, 3), dict(pad=1, groups=2)),
    ((1, 6, 7, 6), (3, 2, 3, 3), dict(stride=2, pad=1, groups=3)),
])
def test_first_and_second_derivatives_numerically(xshape, wshape, kw, per_group):
    """check_backward and check_double_backward under force 'groups': the
    gradients call the grouped conv_transpose and weight gradient, and
    theirs the three again, each group by its per-group plan (Winograd
    with its thresholds lowered, or im2col)."""
    inputs = [xgrad.array(a).require_grad() for a in (
        data(xshape, 1), data(wshape, 2), data(wshape[:1], 3))]

    def func(xs):
        return (xgrad.conv(*xs, **kw),)
    y = func(inputs)[0]
    changes = dict(winograd=_ANY_WINOGRAD, groups_min_channels=1) if per_group else {}
    with dispatch.thresholds_replaced(**changes), force_conv_algorithm('groups') as forced:
        check_backward(func, inputs, [xgrad.array(data(y.shape, 6))])
        check_double_backward(func, inputs, [xgrad.array(data(y.shape, 6))],
                              [xgrad.array(data(a.shape, 7 + i)) for i, a in enumerate(inputs)])
    assert {kernel for kernel, how in forced.taken if how == 'groups'} == {
        'conv', 'conv_transpose', 'grad_weight'}
    if per_group and kw.get('stride', 1) == 1:
        assert ('conv', 'winograd') in forced.taken


def test_bias_is_added_once_and_non_contiguous_inputs():
    """A transposed view of x, a strided slice of w and a broadcast gy."""
    xshape, wshape, kw = (4, 32, 16, 16), (32, 16, 3, 3), dict(pad=1, groups=2)
    x64, w64, b64 = data(xshape, 1), data(wshape, 2), data((32,), 3)
    x_view = numpy.ascontiguousarray(x64.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    w_view = numpy.repeat(w64, 2, axis=3)[:, :, :, ::2]
    assert not x_view.flags.c_contiguous and not w_view.flags.c_contiguous
    for dtype in ('float32', 'float64'):
        xa = xgrad.array(x_view.astype(dtype)).require_grad()
        wa = xgrad.array(w_view.astype(dtype)).require_grad()
        ba = xgrad.array(b64.astype(dtype)).require_grad()
        with force_conv_algorithm('groups') as forced:
            y = xgrad.conv(xa, wa, ba, **kw)
            gx, gw, gb = xgrad.grad([xgrad.sum(y)], [xa, wa, ba])
        assert ('conv', 'groups') in forced.taken
        tol = 2e-4 if dtype == 'float32' else 1e-10
        ref = reference_conv(x64, w64, b64, **kw)
        numpy.testing.assert_allclose(y.to_numpy(), ref, rtol=tol, atol=tol)
        ones = numpy.ones(ref.shape)
        numpy.testing.assert_allclose(gb.to_numpy(), ones.sum(axis=(0, 2, 3)), rtol=tol)
        numpy.testing.assert_allclose(
            gx.to_numpy(), reference_conv_transpose(ones, w64, outsize=xshape[2:], **kw),
            rtol=tol, atol=tol * 10)
        assert_adjoint_gradients(reference_conv, x64, w64, xgrad.array(ones), gx, gw, kw)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_thread_counts_and_the_group_1_convolutions(dtype):
    """On 1 and 3 threads the grouped results are, bit for bit, those of
    the group-1 convolutions of each group's slices (the same kernels, the
    same plans); on avx512, whose Winograd forward and input gradient keep
    each sum's order, the forward and input gradient are also equal over
    thread counts (the weight gradient's batch sums are split by thread)."""
    x, w = data((4, 32, 16, 16), 1, dtype), data((32, 16, 3, 3), 2, dtype)
    gy = data((4, 32, 16, 16), 3, dtype)
    results = []
    before = native_kernels.max_threads()
    try:
        for threads in (1, 3):
            native_kernels.set_thread_limit(threads)
            convolution.clear_choices()
            y, gx, gw, _ = _forward_and_grads(x, w, numpy.zeros(32, dtype), gy,
                                              dict(pad=1, groups=2))
            results.append([a.to_numpy() for a in (y, gx, gw)])
            for i in range(2):
                part = slice(16 * i, 16 * (i + 1))
                yi, gxi, gwi, _ = _forward_and_grads(
                    numpy.ascontiguousarray(x[:, part]), w[part], numpy.zeros(16, dtype),
                    numpy.ascontiguousarray(gy[:, part]), dict(pad=1), forced='winograd')
                numpy.testing.assert_array_equal(y.to_numpy()[:, part], yi.to_numpy())
                numpy.testing.assert_array_equal(gx.to_numpy()[:, part], gxi.to_numpy())
                numpy.testing.assert_array_equal(gw.to_numpy()[part], gwi.to_numpy())
    finally:
        native_kernels.set_thread_limit(before)
        convolution.clear_choices()
    if native_kernels.cpu_path() == 'avx512':
        for one, three in zip(results[0][:2], results[1][:2]):
            numpy.testing.assert_array_equal(one, three)


def test_not_taken_where_it_does_not_apply():
    """One group, depthwise, and another forced algorithm: no 'groups'."""
    x, w = xgrad.array(data((2, 4, 6, 6), 1)), xgrad.array(data((4, 4, 3, 3), 2))
    with force_conv_algorithm('groups') as forced:
        xgrad.conv(x, w, pad=1)
        xgrad.conv(x, xgrad.array(data((4, 1, 3, 3), 2)), pad=1, groups=4)
    assert all(how != 'groups' for _, how in forced.taken), forced.taken
    with force_conv_algorithm('im2col') as forced:
        xgrad.conv(xgrad.array(data((4, 32, 16, 16), 1)), xgrad.array(data((32, 16, 3, 3), 2)),
                   pad=1, groups=2)
    assert forced.taken == [('conv', 'im2col')]


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_one_winograd_pass_and_a_group_at_a_time_give_the_same_bits(monkeypatch, dtype):
    """Groups that each take Winograd run as one pass over all the channels
    (dispatch.GroupPlan.one_pass: small groups on one thread, any on more)
    or a group at a time: the same bits either way (each group's filters
    and filter gradients are transformed alone), for conv, its input
    gradient (the flipped convolution) and its weight gradient; and the
    group-at-a-time run is the group-1 convolutions' results."""
    x, w = data((4, 48, 16, 16), 1, dtype), data((48, 16, 3, 3), 2, dtype)
    gy = data((4, 48, 16, 16), 3, dtype)
    path = native_kernels.cpu_path()
    rules = thresholds.for_path(path)
    runs = {}
    before = native_kernels.max_threads()
    try:
        native_kernels.set_thread_limit(1)
        for one_pass_below in (1 << 40, 0):  # (every group in one pass; none)
            monkeypatch.setitem(thresholds.THRESHOLDS, path, dataclasses.replace(
                rules, groups_one_pass_max_products=one_pass_below))
            convolution.clear_choices()
            geom, outsize = convolution._conv_shapes(x.shape, x.dtype, w.shape, None, 1, 1, 1,
                                                     3, False)
            how, _, plan = dispatch.choice('conv', x, w.shape, geom, tuple(outsize), x.dtype)
            assert (how, plan.per.algorithm, plan.one_pass) == (
                'groups', 'winograd', bool(one_pass_below))
            y, gx, gw, _ = _forward_and_grads(x, w, numpy.zeros(48, dtype), gy,
                                              dict(pad=1, groups=3))
            runs[one_pass_below] = [a.to_numpy() for a in (y, gx, gw)]
    finally:
        native_kernels.set_thread_limit(before)
        convolution.clear_choices()
    for one, each in zip(*runs.values()):
        numpy.testing.assert_array_equal(one, each)
    ref = reference_conv(x.astype(float), w.astype(float), pad=1, groups=3)
    numpy.testing.assert_allclose(runs[0][0], ref, rtol=1e-4 if dtype == 'float32' else 1e-10,
                                  atol=1e-4 if dtype == 'float32' else 1e-10)
