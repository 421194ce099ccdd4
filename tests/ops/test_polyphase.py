"""Strided convolutions over the input's phases (xgrad/_ops/_polyphase.py):
the reshapes and their adjoints, which convolutions take it, and conv /
conv_transpose through it against the loop references, with first and
second derivatives against numerical ones."""

import numpy
import pytest

import xgrad
from xgrad._backend import winograd_kernels
from xgrad._ops import _polyphase, convolution
from xgrad._ops._conv import thresholds
from xgrad._ops.convolution import Geometry
from xgrad._ops._conv.reference import (
    reference_conv as _reference_conv, reference_conv_transpose as _reference_conv_transpose)
from xgrad.testing import check_backward, check_double_backward, force_conv_algorithm

from ._conv_checks import data as _data, record_calls


def _geom(k, s, pad):
    return Geometry((k, k), (s, s), pad if isinstance(pad, tuple) else (pad, pad), (1, 1), 1)


def _plan(xshape, wshape, k, s, pad, transposed=False, any_size=False, rules=None):
    geom = _geom(k, s, pad)
    outsize = tuple(convolution.out_size(xshape[2 + i], k, s, geom.pad[i]) for i in range(2))
    # (transposed: gy (N, O, *outsize) -> x (N, C, *xshape[2:]))
    return _polyphase.plan(xshape, wshape, geom, outsize, numpy.float32, transposed=transposed,
                           any_size=any_size, rules=rules)


@pytest.fixture
def small(monkeypatch):
    """The input's phases forced (force_conv_algorithm), so that small
    (fast) cases take them; returns the entry points called."""
    seen = record_calls(monkeypatch, _polyphase.InputPhases, ('split_weight', 'merge_input'))
    record_calls(monkeypatch, winograd_kernels, ('filter_tiles', 'filter_gradients'), seen)
    with force_conv_algorithm('input_phases'):
        yield seen


# (n, c, o, h, w, k, stride, pad): 5x5 stride 2 (3x3 phases) at several
# paddings and odd sizes, 7x7 stride 3 (3x3), 6x6 stride 2 (3x3), 9x9
# stride 2 (5x5 phases)
CASES = [(2, 3, 4, 11, 9, 5, 2, 2), (1, 2, 3, 8, 8, 5, 2, 0), (2, 2, 3, 7, 10, 5, 2, (1, 2)),
         (1, 2, 3, 13, 12, 7, 3, 3), (1, 2, 2, 9, 9, 6, 2, 2), (1, 2, 2, 12, 11, 9, 2, 4)]


@pytest.mark.parametrize('n, c, o, h, w, k, s, pad', CASES)
def test_the_reshapes_are_each_others_adjoints(small, n, c, o, h, w, k, s, pad):
    phases = _plan((n, c, h, w), (o, c, k, k), k, s, pad, any_size=True)
    assert phases is not None and phases.q == -(-k // s)
    x = _data((n, c, h, w), 1)
    p = _data((n, c * s * s) + phases.phase_size, 2)
    xp = phases.split_input(x, numpy.float64)
    assert xp.shape == p.shape and xp.flags.c_contiguous
    # <split(x), p> == <x, merge(p)>: merge_input is split_input's adjoint
    numpy.testing.assert_allclose((xp * p).sum(), (x * phases.merge_input(p, (h, w))).sum(),
                                  rtol=1e-12)
    wt = _data((o, c, k, k), 3)
    pw = _data(phases.weight_shape(wt.shape), 4)
    numpy.testing.assert_allclose((phases.split_weight(wt, numpy.float64) * pw).sum(),
                                  (wt * phases.merge_weight(pw)).sum(), rtol=1e-12)
    # the weights' split loses nothing: merging it back is the identity
    numpy.testing.assert_array_equal(  # exact: copies of the same values
        phases.merge_weight(phases.split_weight(wt, numpy.float64)), wt)


@pytest.mark.parametrize('n, c, o, h, w, k, s, pad', CASES)
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_the_input_tiles_gather_the_phases_split_input_makes(small, n, c, o, h, w, k, s, pad,
                                                             dtype):
    # conv and its weight gradient read x's phases straight from x (the
    # input tiles' gather): the same tiles, bit for bit, as those of the
    # split copy, including the zeros past x and past the phases' size
    phases = _plan((n, c, h, w), (o, c, k, k), k, s, pad, any_size=True)
    t = phases.transform
    x = _data((n, c, h, w), 1, dtype)
    split = phases.split_input(x, dtype)
    outsize = tuple(size - phases.q + 1 for size in phases.phase_size)
    th, tw = t.tile_counts(outsize)
    v_split, v_gathered = (numpy.full((t.a * t.a, c * s * s, n * th * tw), numpy.nan, dtype)
                           for _ in range(2))
    t.input_tiles(split, v_split, (0, 0))
    t.input_tiles(x, v_gathered, None, phases)
    numpy.testing.assert_array_equal(v_gathered, v_split)


@pytest.mark.parametrize('n, c, o, h, w, k, s, pad', CASES)
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_the_filter_transform_gathers_the_phases_split_weight_makes(small, n, c, o, h, w, k, s,
                                                                    pad, dtype):
    # conv transforms the phases of its weights straight from w
    # (filter_tiles), and its weight gradient adds the transformed
    # gradients back into w's taps (filter_gradients): against G g G^T of
    # the split weights and its adjoint, G^T du G merged back
    phases = _plan((n, c, h, w), (o, c, k, k), k, s, pad, any_size=True)
    t, a = phases.transform, phases.transform.a
    wt = _data((o, c, k, k), 3, dtype)
    split = phases.split_weight(wt, numpy.float64)
    want = numpy.einsum('ik,ockl,jl->ijoc', t.g, split, t.g).reshape(a * a, o, -1)
    u = numpy.full((a * a, o, c * s * s), numpy.nan, dtype)
    assert winograd_kernels.filter_tiles(wt, u, t.g, s)
    # each value a sum of at most 64 products of |w| < 1 with G's entries (< 1),
    # rounded in the dtype, on any vector path (FMA or not): well inside these
    tol = dict(rtol=1e-12, atol=1e-13) if dtype == numpy.float64 else dict(rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(u, want, **tol)
    du = _data(u.shape, 4, dtype)
    gw = numpy.full(wt.shape, numpy.nan, dtype)
    assert winograd_kernels.filter_gradients(du, gw, t.g, s)
    gsplit = numpy.einsum('ik,ijoc,jl->ockl', t.g, du.astype(float).reshape(a, a, o, -1), t.g)
    numpy.testing.assert_allclose(gw, phases.merge_weight(gsplit), **tol)
    # the adjoint: <filter_tiles(w), du> == <w, filter_gradients(du)>
    numpy.testing.assert_allclose((want * du).sum(), (wt.astype(float) * gw).sum(),
                                  rtol=1e-12 if dtype == numpy.float64 else 1e-5)


@pytest.mark.parametrize('xshape, wshape, k, s, pad, takes', [
    ((8, 16, 40, 40), (32, 16, 5, 5), 5, 2, 2, True),   # 64 phase channels, 8 x 25 tiles
    ((4, 16, 40, 40), (32, 16, 5, 5), 5, 2, 2, True),   # 100 tiles
    ((3, 16, 40, 40), (32, 16, 5, 5), 5, 2, 2, False),  # 75 tiles
    ((8, 16, 32, 32), (32, 16, 5, 5), 5, 2, 2, True),   # 16 tiles a plane
    ((64, 16, 16, 16), (32, 16, 5, 5), 5, 2, 2, True),  # 4 tiles a plane
    ((64, 16, 8, 8), (32, 16, 5, 5), 5, 2, 2, False),   # one tile a plane
    ((32, 16, 20, 20), (32, 16, 5, 5), 5, 2, 2, False),  # 10x10 out of 12x12: 69% used
    ((32, 16, 36, 36), (32, 16, 5, 5), 5, 2, 2, True),  # 18x18 out of 20x20: 81%
    ((1, 16, 64, 64), (32, 16, 5, 5), 5, 2, 2, False),  # 64 tiles in the batch
    ((1, 32, 56, 56), (32, 32, 5, 5), 5, 2, 2, True),   # 49 tiles, but 32 channels
    ((12, 64, 16, 16), (64, 64, 5, 5), 5, 2, 2, True),  # 48 tiles, 64 channels
    ((8, 64, 16, 16), (64, 64, 5, 5), 5, 2, 2, False),  # 32 tiles
    ((1, 24, 56, 56), (24, 24, 5, 5), 5, 2, 2, False),  # 49 tiles of 24 channels
    ((1, 256, 56, 56), (256, 256, 5, 5), 5, 2, 2, False),  # 49 tiles of 256 channels
    ((2, 256, 56, 56), (256, 256, 5, 5), 5, 2, 2, True),  # 98 tiles
    ((1, 16, 16, 16), (32, 16, 5, 5), 5, 2, 2, False),  # 8x8 out: 4 tiles, 16 of 2x2
    ((8, 1, 32, 32), (16, 1, 5, 5), 5, 2, 2, False),    # 4 phase channels
    ((8, 16, 32, 32), (8, 16, 5, 5), 5, 2, 2, False),   # 8 outputs
    ((8, 16, 32, 32), (32, 16, 3, 3), 3, 2, 1, False),  # 2x2 phases: no transform
    ((8, 16, 32, 32), (32, 16, 5, 5), 5, 1, 2, False),  # stride 1: Winograd itself
    ((16, 16, 64, 64), (32, 16, 7, 7), 7, 3, 3, True),  # 3x3 phases, 16 x 36 tiles
    ((16, 16, 48, 48), (32, 16, 7, 7), 7, 3, 3, True),  # 16 tiles a plane
    ((4, 16, 48, 48), (32, 16, 7, 7), 7, 3, 3, False),  # 64 tiles
])
def test_which_convolutions_take_it(xshape, wshape, k, s, pad, takes):
    assert (_plan(xshape, wshape, k, s, pad) is not None) is takes
    geom = _geom(k, s, pad)
    for other in (geom._replace(groups=2), geom._replace(dilate=(2, 2)),
                  geom._replace(stride=(2, 1)), geom._replace(ksize=(5, 3))):
        assert _polyphase.plan(xshape, wshape, other, (16, 16), numpy.float32) is None
    assert _polyphase.plan(xshape, wshape, geom, (16, 16), numpy.float16) is None


def test_the_transposed_plan_asks_about_the_flipped_convolution():
    avx512 = thresholds.for_path('avx512')  # (AVX2's declines, below)
    # conv_transpose's input is the output's gradient: 16->32 channels on
    # 40x40 at batch 8 seen from gy (8, 32, 20, 20); the tiles are counted
    # over gy's planes (conv's output), as for conv: 32x32 takes im2col both ways
    assert _plan((8, 16, 40, 40), (32, 16, 5, 5), 5, 2, 2, True, rules=avx512) is not None
    assert _plan((8, 16, 32, 32), (32, 16, 5, 5), 5, 2, 2, True, rules=avx512) is None
    assert _plan((1, 16, 16, 16), (32, 16, 5, 5), 5, 2, 2, True, rules=avx512) is None


@pytest.mark.parametrize('path, float32_transposed', [('avx512', True), ('avx2', False),
                                                      ('sse2', True)])
def test_the_avx2_kernel_declines_the_float32_transposed_plan(path, float32_transposed):
    # there im2col's float32 product (our own AVX2 GEMM) and col2im were
    # faster; float64 (the BLAS's product) and the forward plan are kept
    xshape, wshape = (8, 16, 56, 56), (32, 16, 5, 5)
    geom = _geom(5, 2, 2)

    def plan(work, transposed):
        return _polyphase.plan(xshape, wshape, geom, (28, 28), work, transposed=transposed,
                               rules=thresholds.for_path(path))
    assert (plan(numpy.float32, True) is not None) is float32_transposed
    assert plan(numpy.float64, True) is not None
    assert plan(numpy.float32, False) is not None and plan(numpy.float64, False) is not None


@pytest.mark.parametrize('n, c, o, h, w, k, s, pad', CASES)
def test_conv_and_its_gradients_go_through_it_and_match_the_references(small, n, c, o, h, w,
                                                                       k, s, pad):
    x, wt, b = _data((n, c, h, w), 1), _data((o, c, k, k), 2), _data((o,), 3)
    y = xgrad.conv(xgrad.array(x), xgrad.array(wt), xgrad.array(b), stride=s, pad=pad)
    assert small == ['filter_tiles']
    numpy.testing.assert_allclose(y.to_numpy(), _reference_conv(x, wt, b, stride=s, pad=pad),
                                  rtol=1e-10, atol=1e-12)
    del small[:]
    inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
    gy = _data(y.shape, 4)
    gx, gw, gb = xgrad.grad([xgrad.conv(*inputs, stride=s, pad=pad)], inputs,
                            grad_outputs=[xgrad.array(gy)])
    # (the input gradient: the transposed plan, with the weights' phases split)
    assert sorted(set(small)) == ['filter_gradients', 'filter_tiles', 'merge_input',
                                  'split_weight']
    numpy.testing.assert_allclose(
        gx.to_numpy(), _reference_conv_transpose(gy, wt, stride=s, pad=pad, outsize=(h, w)),
        rtol=1e-10, atol=1e-12)
    # <conv(x, dw), gy> == <dw, gw> for a random direction dw
    dw = _data(wt.shape, 5)
    numpy.testing.assert_allclose((gw.to_numpy() * dw).sum(),
                                  (_reference_conv(x, dw, stride=s, pad=pad) * gy).sum(),
                                  rtol=1e-10)
    numpy.testing.assert_allclose(gb.to_numpy(), gy.sum(axis=(0, 2, 3)), rtol=1e-12)


@pytest.mark.parametrize('n, c, o, h, w, k, s, pad', CASES[:3] + CASES[4:5])
def test_first_and_second_derivatives_match_numerical_ones(small, n, c, o, h, w, k, s, pad):
    x, wt, b = _data((n, c, h, w), 1), _data((o, c, k, k), 2), _data((o,), 3)
    def f(xs):
        return (xgrad.conv(*xs, stride=s, pad=pad),)
    inputs = [xgrad.array(a).require_grad() for a in (x, wt, b)]
    y, = f(inputs)
    gy = [xgrad.array(_data(y.shape, 4))]
    check_backward(f, inputs, gy, atol=1e-6, rtol=1e-5)
    ggs = [xgrad.array(_data(a.shape, 5 + i)) for i, a in enumerate(inputs)]
    check_double_backward(f, inputs, gy, ggs, atol=1e-6, rtol=1e-5)
    assert 'filter_tiles' in small and 'filter_gradients' in small and 'merge_input' in small


@pytest.mark.parametrize('n, c, o, h, w, k, s, pad', CASES)
@pytest.mark.parametrize('extra', [0, 1])
def test_conv_transpose_through_it_matches_the_reference(small, n, c, o, h, w, k, s, pad,
                                                         extra):
    # conv_transpose of (n, o, oh, ow) with weights (o, c, k, k) back to h x w,
    # and to one row and column more than the smallest size (rows no input reaches)
    pads = pad if isinstance(pad, tuple) else (pad, pad)
    oh, ow = (convolution.out_size(size, k, s, p) for size, p in zip((h, w), pads))
    size = (s * (oh - 1) + k - 2 * pads[0] + extra, s * (ow - 1) + k - 2 * pads[1] + extra)
    x, wt, b = _data((n, o, oh, ow), 1), _data((o, c, k, k), 2), _data((c,), 3)
    y = xgrad.conv_transpose(xgrad.array(x), xgrad.array(wt), xgrad.array(b), stride=s,
                             pad=pad, outsize=size)
    assert 'merge_input' in small
    numpy.testing.assert_allclose(
        y.to_numpy(), _reference_conv_transpose(x, wt, b, stride=s, pad=pad, outsize=size),
        rtol=1e-10, atol=1e-12)


def test_float32_is_within_float32_rounding_of_the_float64_result(small):
    # F(4x4, 3x3) over the phases: the same bound as tests/ops/test_winograd.py's
    x, wt = _data((4, 16, 20, 20), 1), _data((24, 16, 5, 5), 2)
    exact = _reference_conv(x, wt, stride=2, pad=2)
    y = xgrad.conv(xgrad.array(x.astype(numpy.float32)), xgrad.array(wt.astype(numpy.float32)),
                   stride=2, pad=2).to_numpy()
    assert y.dtype == numpy.float32 and small == ['filter_tiles']
    scale = numpy.abs(x).max() * numpy.abs(wt).sum(axis=(1, 2, 3)).max()
    assert numpy.abs(y - exact).max() <= 256 * numpy.finfo(numpy.float32).eps * scale


def test_float16_goes_through_it_in_float32(small):
    x = _data((1, 2, 9, 9), 1, numpy.float16)
    wt = _data((3, 2, 5, 5), 2, numpy.float16)
    y = xgrad.conv(xgrad.array(x), xgrad.array(wt), stride=2, pad=2)
    assert y.dtype == numpy.float16 and small == ['filter_tiles']
    numpy.testing.assert_allclose(
        y.to_numpy(), _reference_conv(x.astype(numpy.float64), wt.astype(numpy.float64),
                                      stride=2, pad=2), rtol=1e-2, atol=1e-2)
