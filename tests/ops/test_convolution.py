"""conv and conv_transpose: closed forms, output sizes (cover_all, outsize),
agreement with the naive loop references and with PyTorch (values, first and
second derivatives), the batch-chunked kernels, and bad input.

The registry (test_registry.py) already checks every declared sample against
the references and numerically; this file covers what samples cannot say."""

import math

import numpy
import pytest

import xgrad
from xgrad._backend import gemm_kernels, native_kernels
from xgrad._ops import convolution
from xgrad._ops._conv import chunking, dispatch, geometry
from xgrad.testing import force_conv_algorithm
from xgrad._ops._conv.reference import (
    reference_conv as _reference_conv, reference_conv_transpose as _reference_conv_transpose)

from ._conv_checks import assert_adjoint_gradients, data as _data, strided_5x5_checked

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# windows of integer-valued data (a ones kernel counts taps; a delta kernel
# adds exact zeros to x, and the bias once, one rounding as NumPy's x + 0.5;
# an int64 convolution), exact whatever GEMM's summation order or thread
# split, and zero gradients of an empty batch. Random data through GEMM is
# compared with tolerances.


def _arr(shape, seed=0, dtype=numpy.float64):
    return xgrad.array(_data(shape, seed, dtype))


def _ones_like(y):
    return xgrad.ones_like(y)


# ---------------------------------------------------------------------------
# Closed forms

def test_window_counts_of_a_ones_kernel():
    # Each output counts the input elements its 3x3 window covers.
    y = xgrad.conv(xgrad.ones((1, 1, 3, 3)), xgrad.ones((1, 1, 3, 3)), pad=1)
    numpy.testing.assert_array_equal(y.to_numpy()[0, 0], [[4, 6, 4], [6, 9, 6], [4, 6, 4]])


def test_delta_kernel_shifts_and_bias_adds():
    x = _arr((2, 1, 4, 5))
    w = numpy.zeros((1, 1, 3, 3))
    w[0, 0, 0, 2] = 1  # tap (0, 2): y[i, j] = x[i + 0 - 1, j + 2 - 1]
    y = xgrad.conv(x, xgrad.array(w), xgrad.array([0.5]), pad=1).to_numpy()
    xp = numpy.pad(x.to_numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    numpy.testing.assert_array_equal(y, xp[:, :, 0:4, 2:7] + 0.5)


def test_one_by_one_conv_is_a_channel_matmul():
    x, w = _arr((2, 3, 4, 5), 1), _arr((6, 3, 1, 1), 2)
    y = xgrad.conv(x, w).to_numpy()
    numpy.testing.assert_allclose(
        y, numpy.einsum('oc,nchw->nohw', w.to_numpy()[:, :, 0, 0], x.to_numpy()), rtol=1e-12)


@pytest.mark.parametrize('transpose', [False, True])
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_strided_one_by_one_windows_of_one_channel_are_broadcast_products(monkeypatch,
                                                                          transpose, dtype):
    """A 1x1 window over one channel with stride 2 (not pointwise): each
    GEMM sums one product, which _matmul takes as a broadcast multiply
    (conv's forward, conv_transpose's spread), values as the references."""
    depths = []
    real = convolution._matmul
    monkeypatch.setattr(convolution, '_matmul',
                        lambda xp, a, b, out, *own: (depths.append(a.shape[-1]),
                                                     real(xp, a, b, out, *own)))
    x = _data((2, 1, 3, 4) if transpose else (2, 1, 6, 7), 1).astype(dtype)
    w = _data((1, 16, 1, 1) if transpose else (16, 1, 1, 1), 2).astype(dtype)
    geom = convolution.Geometry((1, 1), (2, 2), (0, 0), (1, 1), 1)
    if transpose:
        y = convolution.conv_transpose_kernel(x, w, None, geom, (6, 7))
        ref = _reference_conv_transpose(x, w, stride=(2, 2), pad=(0, 0), outsize=(6, 7))
    else:
        y = convolution.conv_kernel(x, w, None, geom, (3, 4))
        ref = _reference_conv(x, w, stride=(2, 2), pad=(0, 0))
    assert 1 in depths
    numpy.testing.assert_allclose(y, ref, rtol=1e-5 if dtype == numpy.float32 else 1e-12,
                                  atol=1e-6)


@pytest.mark.parametrize('xshape, wshape, groups', [
    ((3, 4, 5, 6), (6, 4, 1, 1), 1),        # weight gradient by per-sample products
    ((2, 6, 2, 1), (8, 3, 1, 1), 2),        # groups
    ((2, 8, 1, 1), (8, 8, 1, 1), 1),        # o * c > (o + c) * L: by the batch's columns
    ((2, 3, 7), (5, 3, 1), 1),              # 1-D
    ((2, 2, 2, 3, 2), (4, 2, 1, 1, 1), 1),  # 3-D
    ((2, 1, 4, 3), (3, 1, 1, 1), 1),        # one input channel: a broadcast product
    ((2, 2, 3, 3), (4, 1, 1, 1), 2),        # one per group
])
def test_pointwise_convolutions_match_the_references_with_gradients(xshape, wshape, groups):
    """1x1 convolutions take per-sample GEMMs without columns (in conv,
    conv_transpose and the weight gradient): the loop references, and
    first and second derivatives against numerical ones."""
    from xgrad.testing import check_backward, check_double_backward
    x, w, b = _data(xshape, 1), _data(wshape, 2), _data(wshape[:1], 3)
    numpy.testing.assert_allclose(
        xgrad.conv(xgrad.array(x), xgrad.array(w), xgrad.array(b), groups=groups).to_numpy(),
        _reference_conv(x, w, b, groups=groups), rtol=1e-12, atol=1e-14)
    wt = _data((xshape[1], wshape[0] // groups) + wshape[2:], 4)
    bt = _data((wshape[0],), 5)
    numpy.testing.assert_allclose(
        xgrad.conv_transpose(xgrad.array(x), xgrad.array(wt), xgrad.array(bt),
                             groups=groups).to_numpy(),
        _reference_conv_transpose(x, wt, bt, groups=groups), rtol=1e-12, atol=1e-14)
    for f, wv, bv in ((xgrad.conv, w, b), (xgrad.conv_transpose, wt, bt)):
        def func(xs, f=f):
            return (f(*xs, groups=groups),)
        inputs = [xgrad.array(a).require_grad() for a in (x, wv, bv)]
        y = func(inputs)[0]
        check_backward(func, inputs, [_arr(y.shape, 6)])
        check_double_backward(func, inputs, [_arr(y.shape, 6)],
                              [_arr(a.shape, 7 + i) for i, a in enumerate(inputs)])


def test_a_broadcast_output_gradient_takes_the_native_columns():
    """sum's gradient is a stride-0 view: it is copied for the native
    im2col (not taken by the strided path), and the gradients are those of
    the same values in a contiguous array."""
    gy = numpy.broadcast_to(numpy.float32(1), (2, 4, 5, 5))
    ready = convolution._contiguous_for_im2col(gy)
    assert ready.flags.c_contiguous and convolution._native_im2col(ready, None)
    numpy.testing.assert_array_equal(ready, gy)
    dense = numpy.ones((2, 4, 5, 5), numpy.float32)
    assert convolution._contiguous_for_im2col(dense) is dense
    x, w = _arr((2, 4, 5, 5), 1), _arr((4, 4, 3, 3), 2)
    xs = [x.require_grad(), w.require_grad()]
    summed = xgrad.grad([xgrad.sum(xgrad.conv(*xs, pad=1))], xs)
    dense = xgrad.grad([xgrad.conv(*xs, pad=1)], xs,
                       grad_outputs=[xgrad.ones((2, 4, 5, 5), numpy.float64)])
    for a, b in zip(summed, dense):
        numpy.testing.assert_allclose(a.to_numpy(), b.to_numpy(), rtol=1e-12)


@pytest.mark.parametrize('path, channels, own', [
    ('avx512', 64, True), ('avx512', 256, True), ('avx2', 32, True), ('avx2', 64, False),
    ('avx2', 128, False), ('sse2', 16, False)])  # (sse2: no kernel of ours, the BLAS runs it)
def test_the_forward_product_goes_to_our_gemm_by_the_kernel_and_channels(
        monkeypatch, on_cpu_path, path, channels, own):
    """On the AVX2 kernel (6-row tiles) 64 or more output channels are not
    preferred on our GEMM (thresholds' own_gemm_forward_max_rows), and this
    small product then goes to the BLAS (host_gemm); the result is the
    reference's either way."""
    on_cpu_path(path)
    asked = []
    ours = gemm_kernels.sgemm

    def spy(a, b, out, *args):
        asked.append(a.shape[-2:])
        return ours(a, b, out, *args)
    monkeypatch.setattr(gemm_kernels, 'sgemm', spy)
    x, w = _data((2, 3, 9, 9), 1, numpy.float32), _data((channels, 3, 3, 3), 2, numpy.float32)
    with force_conv_algorithm('im2col'):
        y = xgrad.conv(xgrad.array(x), xgrad.array(w), stride=2, pad=1)
    assert asked == ([(channels, 27)] if own else [])
    numpy.testing.assert_allclose(y.to_numpy(), _reference_conv(x, w, stride=2, pad=1),
                                  rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('shape', [(1, 16, 2, 2), (3, 5), (2, 3, 7, 5, 3), (0, 4, 3), (4, 0, 2),
                                   (2, 3, 0), (64, 8, 9, 9)])
def test_the_bias_gradient_sums_every_axis_but_the_channels(dtype, shape):
    """native_kernels.sum_channels (conv's bias gradient): each channel's sum
    within a float rounding of the exact one (double accumulation), on
    contiguous and strided batches."""
    rng = numpy.random.default_rng(0)
    wide = (rng.standard_normal(shape[:1] + (2 * shape[1],) + shape[2:]) + 3).astype(dtype)
    for x in (wide[:, :shape[1]].copy(), wide[:, ::2]):  # contiguous, strided
        got = native_kernels.sum_channels(x)
        assert got.shape == (shape[1],) and got.dtype == dtype
        planes = numpy.moveaxis(x, 1, 0).astype(numpy.float64)
        exact = numpy.array([math.fsum(p.ravel()) for p in planes])
        numpy.testing.assert_allclose(got, exact, rtol=2 * numpy.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_channel_sums_are_the_same_bits_on_every_cpu_path(dtype):
    """Planes of 1-70 elements (none, some or all in the 32 lanes' tail):
    sum_channels and sum over (0, 2) give the same bits on every CPU path
    this machine runs (32 lanes on each)."""
    rng = numpy.random.default_rng(1)
    before = native_kernels.cpu_path()
    xs = [(rng.standard_normal((9, 5, m)) * 10 ** rng.uniform(-3, 3, (1, 5, 1))).astype(dtype)
          for m in (1, 7, 31, 32, 33, 49, 64, 70)]
    results = {}
    try:
        for path in native_kernels.cpu_paths():
            native_kernels._select_cpu_path(path)
            results[path] = [(native_kernels.sum_channels(x).tobytes(),
                              xgrad.sum(xgrad.array(x), axis=(0, 2)).to_numpy().tobytes())
                             for x in xs]
    finally:
        native_kernels._select_cpu_path(before)
    first = next(iter(results.values()))
    assert all(r == first for r in results.values())
    for x, (channels, _) in zip(xs, first):
        exact = numpy.array([math.fsum(p.ravel()) for p in numpy.moveaxis(x, 1, 0)
                             .astype(numpy.float64)])
        numpy.testing.assert_allclose(numpy.frombuffer(channels, dtype), exact,
                                      rtol=2 * numpy.finfo(dtype).eps,
                                      atol=4 * numpy.finfo(dtype).eps * abs(x).sum())


def test_sum_channels_leaves_other_arrays_to_numpy():
    for x in (numpy.ones((2, 3), numpy.int32), numpy.ones((2, 3), numpy.float16),
              numpy.ones(3, numpy.float32), [[1.0, 2.0]]):
        assert native_kernels.sum_channels(x) is None


@pytest.mark.parametrize('op', [xgrad.conv, xgrad.conv_transpose])
def test_a_broadcast_output_gradient_is_copied_once_for_all_gradients(monkeypatch, op):
    """The x, w and b gradients of sum(conv) share one contiguous copy of
    the stride-0 gy (on 1->16 3x3 over 56x56, batch 1, the step 0.82x)."""
    x = _arr((2, 3, 7, 6), 1).astype(numpy.float32)
    w = _arr((3, 5, 3, 3), 2).astype(numpy.float32)  # conv: 3 -> 5 channels; transposed: 3 -> 5
    b = _arr((5,), 3).astype(numpy.float32)
    if op is xgrad.conv:
        w = _arr((5, 3, 3, 3), 2).astype(numpy.float32)
    xs = [x.require_grad(), w.require_grad(), b.require_grad()]
    y = op(*xs, pad=1)
    dense = xgrad.grad([op(*xs, pad=1)], xs, grad_outputs=[xgrad.ones(y.shape, numpy.float32)])
    copied = []
    contiguous = convolution._contiguous_for_im2col

    def spy(a):
        out = contiguous(a)
        if out is not a and 0 in a.strides:
            copied.append(a.shape)
        return out
    monkeypatch.setattr(convolution, '_contiguous_for_im2col', spy)
    summed = xgrad.grad([xgrad.sum(op(*xs, pad=1))], xs)
    assert copied == [y.shape]
    for a, e in zip(summed, dense):
        numpy.testing.assert_allclose(a.to_numpy(), e.to_numpy(), rtol=1e-6)


@pytest.mark.parametrize('transpose', [False, True])
@pytest.mark.parametrize('channels', [(1, 16), (16, 1), (8, 8)])
def test_a_pointwise_convolution_gives_matmul_no_broadcast_gradient(monkeypatch, channels,
                                                                     transpose):
    """1x1 convolutions are per-sample matmuls; a stride-0 gy (sum's
    gradient) is copied first, since matmul leaves the BLAS for it (several
    times slower). The gradients are those of a dense gy."""
    c, o = channels
    x = _arr((2, c, 6, 5), 1).astype(numpy.float32)
    w = _arr((c, o, 1, 1) if transpose else (o, c, 1, 1), 2).astype(numpy.float32)
    xs = [x.require_grad(), w.require_grad()]
    op = xgrad.conv_transpose if transpose else xgrad.conv
    dense = xgrad.grad([op(*xs)], xs, grad_outputs=[xgrad.ones((2, o, 6, 5), numpy.float32)])
    seen = []
    matmul = numpy.matmul

    def spy(*args, **kwargs):
        seen.extend(a for a in args if isinstance(a, numpy.ndarray))
        return matmul(*args, **kwargs)
    monkeypatch.setattr(numpy, 'matmul', spy)
    summed = xgrad.grad([xgrad.sum(op(*xs))], xs)
    assert seen and all(0 not in a.strides for a in seen)
    for a, b in zip(summed, dense):
        numpy.testing.assert_allclose(a.to_numpy(), b.to_numpy(), rtol=1e-6)


def test_no_spatial_axes_is_linear():
    x, w, b = _arr((3, 4), 1), _arr((2, 4), 2), _arr((2,), 3)
    numpy.testing.assert_allclose(xgrad.conv(x, w, b).to_numpy(),
                                  x.to_numpy() @ w.to_numpy().T + b.to_numpy(), rtol=1e-12)


@pytest.mark.parametrize('stride, pad, dilate, groups', [
    (1, 0, 1, 1), (2, 1, 1, 1), ((1, 3), (2, 0), (2, 1), 2), (3, 2, 2, 1)])
def test_conv_transpose_is_the_adjoint_of_conv(stride, pad, dilate, groups):
    x, w = _arr((2, 4, 9, 8), 1), _arr((6, 4 // groups, 3, 2), 2)
    kw = dict(stride=stride, pad=pad, dilate=dilate, groups=groups)
    y = xgrad.conv(x, w, **kw)
    gy = _arr(y.shape, 3)
    back = xgrad.conv_transpose(gy, w, outsize=x.shape[2:], **kw)
    assert back.shape == x.shape
    numpy.testing.assert_allclose(numpy.vdot(y.to_numpy(), gy.to_numpy()),
                                  numpy.vdot(x.to_numpy(), back.to_numpy()), rtol=1e-12)


def test_gradients_in_closed_form():
    x = _arr((2, 3, 5, 5), 1).require_grad()
    w = _arr((4, 3, 3, 3), 2).require_grad()
    b = _arr((4,), 3).require_grad()
    y = xgrad.conv(x, w, b, pad=1)
    gy = _arr(y.shape, 4)
    gx, gw, gb = xgrad.grad([y], [x, w, b], grad_outputs=[gy])
    numpy.testing.assert_allclose(gb.to_numpy(), gy.to_numpy().sum(axis=(0, 2, 3)),
                                  rtol=1e-12)
    # gw[o, c, i, j] = sum gy[n, o] * (x shifted by tap (i, j))[n, c]
    xp = numpy.pad(x.to_numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = numpy.empty((4, 3, 3, 3))
    for i in range(3):
        for j in range(3):
            expected[:, :, i, j] = numpy.einsum('nohw,nchw->oc', gy.to_numpy(),
                                                xp[:, :, i:i + 5, j:j + 5])
    numpy.testing.assert_allclose(gw.to_numpy(), expected, rtol=1e-12)
    numpy.testing.assert_allclose(
        gx.to_numpy(), xgrad.conv_transpose(gy, w, pad=1).to_numpy(), rtol=1e-12)


# ---------------------------------------------------------------------------
# Output sizes

def test_cover_all_adds_the_tail_window():
    x, w = _arr((1, 1, 5, 4)), _arr((1, 1, 2, 2))
    assert xgrad.conv(x, w, stride=(2, 3)).shape == (1, 1, 2, 1)
    y = xgrad.conv(x, w, stride=(2, 3), cover_all=True)
    assert y.shape == (1, 1, 3, 2)
    # The tail windows read zeros beyond the input.
    expected = _reference_conv(x.to_numpy(), w.to_numpy(), stride=(2, 3), cover_all=True)
    numpy.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-12)


def test_chainerx_docs_output_sizes():
    # The shapes of ChainerX's conv / conv_transpose examples, with 2 samples
    # and 1 channel so they stay cheap.
    x = _arr((2, 1, 30, 40, 50))
    w = _arr((1, 1, 10, 10, 10))
    kw = dict(stride=(2, 4, 6), pad=(5, 5, 5))
    assert xgrad.conv(x, w, **kw).shape == (2, 1, 16, 11, 9)
    assert xgrad.conv(x, w, cover_all=True, **kw).shape == (2, 1, 16, 11, 10)
    x = _arr((2, 1, 5, 10, 15))
    assert xgrad.conv_transpose(x, w, **kw).shape == (2, 1, 8, 36, 84)
    assert xgrad.conv_transpose(x, w, outsize=(9, 38, 87), **kw).shape == (2, 1, 9, 38, 87)


def test_conv_transpose_outsize_with_cover_all_is_the_gradient_of_cover_all_conv():
    x = _arr((1, 2, 5, 4), 1).require_grad()
    w = _arr((3, 2, 2, 2), 2)
    y = xgrad.conv(x, w, stride=(2, 3), cover_all=True)
    gy = _arr(y.shape, 3)
    gx, = xgrad.grad([y], [x], grad_outputs=[gy])
    back = xgrad.conv_transpose(gy, w, stride=(2, 3), outsize=(5, 4))
    numpy.testing.assert_allclose(gx.to_numpy(), back.to_numpy(), rtol=1e-12)


def test_dtypes():
    x32, w64 = _arr((1, 2, 4), 1, numpy.float32), _arr((3, 2, 2), 2)
    assert xgrad.conv(x32, w64).dtype == numpy.float64
    x16, w16 = _arr((1, 2, 4), 1, numpy.float16), _arr((3, 2, 2), 2, numpy.float16)
    assert xgrad.conv(x16, w16).dtype == numpy.float16
    assert xgrad.conv_transpose(x16, _arr((2, 3, 2), 2, numpy.float16)).dtype == numpy.float16
    x32.require_grad()
    w64.require_grad()
    y = xgrad.conv(x32, w64)
    gx, gw = xgrad.grad([y], [x32, w64], grad_outputs=[_ones_like(y)])
    assert gx.dtype == numpy.float32 and gw.dtype == numpy.float64


def test_empty_batch():
    x = xgrad.zeros((0, 2, 4, 4)).require_grad()
    w = _arr((3, 2, 3, 3)).require_grad()
    b = _arr((3,)).require_grad()
    y = xgrad.conv(x, w, b, pad=1)
    assert y.shape == (0, 3, 4, 4)
    gx, gw, gb = xgrad.grad([y], [x, w, b], grad_outputs=[_ones_like(y)])
    assert gx.shape == x.shape
    numpy.testing.assert_array_equal(gw.to_numpy(), numpy.zeros(w.shape))
    numpy.testing.assert_array_equal(gb.to_numpy(), numpy.zeros(3))


def test_non_contiguous_input():
    nhwc = _data((2, 5, 6, 3), 1)
    x = xgrad.transpose(xgrad.array(nhwc), (0, 3, 1, 2))
    w = _arr((4, 3, 3, 3), 2)
    expected = _reference_conv(numpy.ascontiguousarray(nhwc.transpose(0, 3, 1, 2)),
                               w.to_numpy(), stride=2, pad=1)
    numpy.testing.assert_allclose(xgrad.conv(x, w, stride=2, pad=1).to_numpy(), expected,
                                  rtol=1e-12)


# ---------------------------------------------------------------------------
# The kernels work on the batch a few samples at a time: force one sample per
# chunk and compare with the references (the registry's samples fit one chunk).

def _one_sample_a_chunk(monkeypatch):
    """Chunks of one sample (xgrad/_ops/_conv/chunking.py's sizes)."""
    monkeypatch.setattr(chunking, 'WHOLE_BATCH_ELEMENTS', 0)
    monkeypatch.setattr(chunking, 'COLUMN_CHUNK_ELEMENTS', 1)
    monkeypatch.setattr(chunking, 'COL2IM_CHUNK_ELEMENTS', 1)
    monkeypatch.setattr(chunking, 'COL2IM_MIN_COLUMNS', 1)


@pytest.mark.parametrize('stride, pad, dilate, groups', [
    (1, 1, 1, 1), (2, 1, 1, 2), ((1, 2), (0, 2), (2, 1), 1)])
def test_chunked_kernels_match_the_references(monkeypatch, stride, pad, dilate, groups):
    _one_sample_a_chunk(monkeypatch)
    kw = dict(stride=stride, pad=pad, dilate=dilate, groups=groups)
    x = _arr((3, 4, 7, 6), 1).require_grad()
    w = _arr((6, 4 // groups, 3, 2), 2).require_grad()
    y = xgrad.conv(x, w, **kw)
    numpy.testing.assert_allclose(y.to_numpy(), _reference_conv(x.to_numpy(), w.to_numpy(),
                                                                **kw), rtol=1e-12)
    gy = _arr(y.shape, 3)
    gx, gw = xgrad.grad([y], [x, w], grad_outputs=[gy])
    numpy.testing.assert_allclose(gx.to_numpy(), _reference_conv_transpose(
        gy.to_numpy(), w.to_numpy(), outsize=x.shape[2:], **kw), rtol=1e-12, atol=1e-14)
    # <gw, v> = d/dt <conv(x, w + t v), gy> = <conv(x, v), gy>
    v = _data(w.shape, 4)
    numpy.testing.assert_allclose(
        numpy.vdot(gw.to_numpy(), v),
        numpy.vdot(_reference_conv(x.to_numpy(), v, **kw), gy.to_numpy()), rtol=1e-12)


@pytest.mark.parametrize('n, per_sample, positions, ranges', [
    (10, 100, 16, [(0, 10)]),  # 10 samples fill the 1,000 elements
    (10, 300, 16, [(0, 4), (4, 8), (8, 10)]),  # 3 would, but 4 make 64 columns
    (10, 300, 64, [(0, 3), (3, 6), (6, 9), (9, 10)]),
    (7, 5000, 16, [(0, 4), (4, 7)]),  # not one sample fits: the columns decide
    (0, 1, 1, [])])
def test_col2im_chunks_cover_the_batch_with_wide_enough_gemms(monkeypatch, n, per_sample,
                                                              positions, ranges):
    monkeypatch.setattr(chunking, 'COL2IM_CHUNK_ELEMENTS', 1000)
    monkeypatch.setattr(chunking, 'COL2IM_MIN_COLUMNS', 64)
    assert chunking.col2im_ranges(n, per_sample, positions) == ranges


@pytest.mark.parametrize('whole_batch', [True, False])
@pytest.mark.parametrize('transpose', [False, True])
def test_float32_columns_in_padded_rows_match_the_references(monkeypatch, whole_batch,
                                                             transpose):
    """Batches of 4 samples of 8x8 outputs make float32 column rows of 1 KiB
    (256 elements), which _gemm_layout pads; one sample a chunk makes rows of
    64 elements, which it does not."""
    if not whole_batch:
        _one_sample_a_chunk(monkeypatch)
    kw = dict(stride=2, pad=1)
    x = _arr((4, 3, 8, 8) if transpose else (4, 3, 16, 16), 1, numpy.float32).require_grad()
    w = _arr((3, 5, 3, 3) if transpose else (5, 3, 3, 3), 2, numpy.float32).require_grad()
    f, ref = ((xgrad.conv_transpose, _reference_conv_transpose) if transpose
              else (xgrad.conv, _reference_conv))
    y = f(x, w, **kw)
    x64, w64 = x.to_numpy().astype(float), w.to_numpy().astype(float)
    numpy.testing.assert_allclose(y.to_numpy(), ref(x64, w64, **kw), rtol=1e-5, atol=1e-5)
    gy = _arr(y.shape, 3, numpy.float32)
    gx, gw = xgrad.grad([y], [x, w], grad_outputs=[gy])
    assert_adjoint_gradients(ref, x64, w64, gy, gx, gw, kw)


# (n, c, o, h, w, k, stride, pad, extra): conv_transpose of x (n, c, h, w)
# with w (c, o, k, k) into an output ``extra`` larger than the smallest
# (cover_all's); 5x5 stride 2 (phases of 3 and 2 taps), odd and
# non-square sizes, stride 3, even kernels, a kernel smaller than the
# stride (phases that no tap reaches) and a pad of k - 1
OUTPUT_PHASE_CASES = [
    (2, 3, 4, 8, 8, 5, 2, 2, 0), (1, 2, 3, 7, 9, 5, 2, 2, 1), (2, 3, 2, 5, 6, 3, 2, 0, 0),
    (1, 2, 3, 6, 5, 4, 2, 1, 1), (1, 3, 2, 9, 7, 5, 3, 2, 2), (2, 2, 3, 4, 4, 1, 2, 0, 1),
    (1, 2, 2, 6, 6, 3, 2, 2, 0), (1, 2, 2, 5, 5, 7, 3, 3, 0),
]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('n, c, o, h, w, k, s, pad, extra', OUTPUT_PHASE_CASES)
def test_conv_transpose_by_the_outputs_phases_matches_the_reference(dtype, n, c, o, h, w, k,
                                                                    s, pad, extra):
    """Each output phase as a stride-1 convolution of x with its taps of w,
    reversed (the left pad T - 1 - d); not applied where a pad would be
    negative."""
    assert geometry.output_phase_taps(8, 16, 5, 2, 2) == [(0, 0, 3, 1, 8), (1, 1, 2, 0, 8)]
    x, wt = _data((n, c, h, w), 1).astype(dtype), _data((c, o, k, k), 2).astype(dtype)
    outsize = tuple(s * (size - 1) + k - 2 * pad + extra for size in (h, w))
    geom = convolution.Geometry((k, k), (s, s), (pad, pad), (1, 1), 1)
    if not dispatch.output_phases_apply(x.shape, geom, outsize, dtype):
        # a phase would need a negative pad: never with 2s + 1 taps or
        assert not (k >= 2 * s + 1 and 2 * pad <= k - 1)  # more and at most half padded
        return
    y = convolution._conv_transpose_by_output_phases(x, wt, geom, outsize, dtype)
    assert y.shape == (n, o) + outsize and y.dtype == dtype
    ref = _reference_conv_transpose(x.astype(float), wt.astype(float), stride=s, pad=pad,
                                    outsize=outsize)
    tol = 1e-5 if dtype == numpy.float32 else 1e-12
    numpy.testing.assert_allclose(y, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize('transpose', [False, True])
def test_the_output_phases_serve_conv_and_conv_transpose(monkeypatch, transpose):
    """With as many channels in as out on a 32x32 image (5x5, stride 2),
    conv's input gradient and conv_transpose's forward go through the
    output's phases; values and gradients match the references."""
    taken = []
    original = convolution._conv_transpose_by_output_phases

    def spy(*args):
        taken.append(args[0].shape)
        return original(*args)
    monkeypatch.setattr(convolution, '_conv_transpose_by_output_phases', spy)
    with force_conv_algorithm('output_phases'):  # (at batch 2: too few positions to pay)
        x, w, y, x64, w64, ref, kwf = strided_5x5_checked(
            transpose, (2, 6, 16, 16) if transpose else (2, 6, 32, 32), (6, 6, 5, 5), (32, 32))
        assert bool(taken) is transpose  # conv's forward is no conv_transpose
        gy = _arr(y.shape, 3, numpy.float32)
        gx, gw = xgrad.grad([y], [x, w], grad_outputs=[gy])
    assert taken  # conv's input gradient (conv_transpose's is a conv)
    assert_adjoint_gradients(ref, x64, w64, gy, gx, gw, kwf)


@pytest.mark.parametrize('xshape, wshape, outsize, takes', [
    ((8, 64, 16, 16), (64, 64, 5, 5), (32, 32), True),     # 64->64 on 32x32
    ((8, 64, 12, 12), (64, 64, 5, 5), (24, 24), True),
    ((8, 64, 8, 8), (64, 64, 5, 5), (16, 16), False),      # phases of 8
    ((8, 64, 28, 28), (64, 64, 5, 5), (56, 56), False),    # phases of 28
    ((2, 64, 16, 16), (64, 64, 5, 5), (32, 32), False),    # 512 positions
    ((8, 256, 16, 16), (256, 256, 5, 5), (32, 32), False),  # 256 channels
    ((8, 32, 16, 16), (32, 16, 5, 5), (32, 32), False),    # x has more channels
    ((8, 64, 16, 16), (64, 64, 3, 3), (32, 32), False),    # 3x3: phases of 1-2 taps
    ((8, 64, 32, 32), (64, 64, 5, 5), (32, 32), False),    # stride 1
])
@pytest.mark.parametrize('path', ['sse2', 'avx2', 'avx512'])
def test_where_the_output_phases_are_taken(xshape, wshape, outsize, takes, path):
    """conv_transpose of x with w (the input gradient of a conv whose input
    is ``outsize``), on every CPU path's thresholds."""
    k = wshape[2]
    s = 1 if outsize == xshape[2:] else 2
    geom = convolution.Geometry((k, k), (s, s), (k // 2, k // 2), (1, 1), 1)
    found = dispatch.decide('conv_transpose', True, xshape, wshape, geom, outsize,
                            numpy.float32, path, threads=1)
    assert (found.algorithm == 'output_phases') is takes, found


def test_conv_transpose_weight_gradient_reuses_the_input_gradients_columns(monkeypatch):
    """conv_transpose's input gradient conv(gy, w) builds gy's columns, which
    are its weight gradient's too: one im2col for both, and both gradients
    still those of the references."""
    calls = []
    im2col = convolution.im2col_2d
    monkeypatch.setattr(convolution, 'im2col_2d', lambda *a: calls.append(a[0].shape) or im2col(*a))
    kw = dict(stride=2, pad=1)
    x = _arr((3, 4, 5, 5), 1).require_grad()
    w = _arr((4, 3, 3, 3), 2).require_grad()
    y = xgrad.conv_transpose(x, w, **kw)
    gy = _arr(y.shape, 3)
    gx, gw = xgrad.grad([y], [x, w], grad_outputs=[gy])
    assert calls == [gy.shape]  # (the forward's col2im builds none)
    numpy.testing.assert_allclose(gx.to_numpy(), _reference_conv(gy.to_numpy(), w.to_numpy(),
                                                                 **kw), rtol=1e-12)
    # <gw, v> = <conv_transpose(x, v), gy>
    v = _data(w.shape, 4)
    numpy.testing.assert_allclose(
        numpy.vdot(gw.to_numpy(), v),
        numpy.vdot(_reference_conv_transpose(x.to_numpy(), v, outsize=y.shape[2:], **kw),
                   gy.to_numpy()), rtol=1e-12)


# ---------------------------------------------------------------------------
# PyTorch

torch_cases = [
    # (x shape, w shape, kwargs)
    ((2, 3, 9), (4, 3, 3), dict(stride=2, pad=1)),
    ((2, 4, 7, 8), (6, 2, 3, 2), dict(stride=(2, 1), pad=(1, 0), dilate=(1, 2), groups=2)),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1), pad=1, dilate=(2, 1, 1))),
    ((3, 6, 6, 6), (6, 1, 3, 3), dict(pad=1, groups=6)),  # depthwise
]


def _torch_conv(torch, n, transpose):
    """torch.nn.functional.conv{n}d or conv_transpose{n}d."""
    return getattr(torch.nn.functional, '{}{}d'.format(
        'conv_transpose' if transpose else 'conv', n))


def _torch_kwargs(kw):
    return dict(stride=kw.get('stride', 1), padding=kw.get('pad', 0),
                dilation=kw.get('dilate', 1), groups=kw.get('groups', 1))


@pytest.mark.parametrize('xshape, wshape, kw', torch_cases)
def test_conv_matches_torch_with_gradients(xshape, wshape, kw):
    torch = pytest.importorskip('torch')
    x, w, b = _data(xshape, 1), _data(wshape, 2), _data(wshape[:1], 3)
    xs = [xgrad.array(a).require_grad() for a in (x, w, b)]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = xgrad.conv(*xs, **kw)
    t = _torch_conv(torch, len(xshape) - 2, False)(*ts, **_torch_kwargs(kw))
    numpy.testing.assert_allclose(y.to_numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)
    gy = _data(y.shape, 4)
    ours = xgrad.grad([y], xs, grad_outputs=[xgrad.array(gy)])
    theirs = torch.autograd.grad([t], ts, grad_outputs=[torch.tensor(gy)])
    for g, e in zip(ours, theirs):
        numpy.testing.assert_allclose(g.to_numpy(), e.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('xshape, wshape, kw, outsize, output_padding', [
    ((2, 3, 4), (3, 2, 3), dict(stride=2, pad=1), None, 0),
    ((2, 3, 4), (3, 2, 3), dict(stride=2, pad=1), (8,), 1),
    ((2, 4, 3, 4), (4, 1, 2, 3), dict(stride=(2, 1), pad=(0, 1), dilate=(1, 2), groups=2),
     (7, 6), (1, 0)),
    ((1, 2, 3, 2, 3), (2, 3, 2, 2, 2), dict(stride=1, pad=(1, 0, 1)), None, 0),
    ((2, 3, 6), (3, 2, 2), dict(pad=2), None, 0),  # stride 1, pad beyond the kernel
])
def test_conv_transpose_matches_torch_with_gradients(xshape, wshape, kw, outsize,
                                                     output_padding):
    torch = pytest.importorskip('torch')
    groups = kw.get('groups', 1)
    x, w, b = _data(xshape, 1), _data(wshape, 2), _data((wshape[1] * groups,), 3)
    xs = [xgrad.array(a).require_grad() for a in (x, w, b)]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = xgrad.conv_transpose(*xs, outsize=outsize, **kw)
    t = _torch_conv(torch, len(xshape) - 2, True)(*ts, output_padding=output_padding,
                                                  **_torch_kwargs(kw))
    numpy.testing.assert_allclose(y.to_numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)
    gy = _data(y.shape, 4)
    ours = xgrad.grad([y], xs, grad_outputs=[xgrad.array(gy)])
    theirs = torch.autograd.grad([t], ts, grad_outputs=[torch.tensor(gy)])
    for g, e in zip(ours, theirs):
        numpy.testing.assert_allclose(g.to_numpy(), e.numpy(), rtol=1e-10, atol=1e-12)


def test_second_derivatives_match_torch():
    # A gradient penalty: p = sum(d sum(tanh(conv(x, w))^2) / dx ^ 2), then dp/dx, dp/dw.
    torch = pytest.importorskip('torch')
    x, w = _data((2, 2, 6, 5), 1), _data((3, 2, 3, 2), 2)
    kw = dict(stride=(2, 1), pad=1, dilate=(1, 2))
    xs = [xgrad.array(a).require_grad() for a in (x, w)]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w)]
    y = xgrad.tanh(xgrad.conv(*xs, **kw))
    g, = xgrad.grad([xgrad.sum(y * y)], [xs[0]], enable_double_backprop=True)
    ours = xgrad.grad([xgrad.sum(g * g)], xs)
    t = torch.tanh(torch.nn.functional.conv2d(*ts, **_torch_kwargs(kw)))
    tg, = torch.autograd.grad([(t * t).sum()], [ts[0]], create_graph=True)
    theirs = torch.autograd.grad([(tg * tg).sum()], ts)
    for a, e in zip(ours, theirs):
        numpy.testing.assert_allclose(a.to_numpy(), e.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------
# Bad input

def test_ndim_mismatch_names_both_shapes():
    with pytest.raises(xgrad.DimensionError, match=r'conv: x \(2, 3, 5\).*w \(4, 3, 3, 3\)'):
        xgrad.conv(_arr((2, 3, 5)), _arr((4, 3, 3, 3)))
    with pytest.raises(xgrad.DimensionError, match='conv_transpose'):
        xgrad.conv_transpose(_arr((2, 3, 5)), _arr((3, 3, 3, 3)))
    with pytest.raises(xgrad.DimensionError, match='batch and a channel'):
        xgrad.conv(_arr((3,)), _arr((3,)))


def test_channel_mismatch_names_both_shapes():
    with pytest.raises(xgrad.DimensionError, match=r'x \(2, 3, 5, 5\).*w \(4, 2, 3, 3\)'):
        xgrad.conv(_arr((2, 3, 5, 5)), _arr((4, 2, 3, 3)))
    with pytest.raises(xgrad.DimensionError, match=r'x \(2, 3, 5\).*w \(2, 4, 3\)'):
        xgrad.conv_transpose(_arr((2, 3, 5)), _arr((2, 4, 3)))


def test_groups_must_divide_the_channels():
    with pytest.raises(xgrad.DimensionError, match='groups=2'):
        xgrad.conv(_arr((1, 3, 5)), _arr((4, 1, 3)), groups=2)
    with pytest.raises(xgrad.DimensionError, match='groups=2'):
        xgrad.conv(_arr((1, 4, 5)), _arr((3, 2, 3)), groups=2)
    with pytest.raises(xgrad.DimensionError, match='groups=2'):
        xgrad.conv_transpose(_arr((1, 3, 5)), _arr((3, 2, 3)), groups=2)
    with pytest.raises(ValueError, match='groups must be positive'):
        xgrad.conv(_arr((1, 4, 5)), _arr((3, 4, 3)), groups=0)
    with pytest.raises(TypeError, match='groups must be an int'):
        xgrad.conv(_arr((1, 4, 5)), _arr((3, 4, 3)), groups=1.0)


@pytest.mark.parametrize('kw, error, match', [
    (dict(stride=(1, 1, 1)), xgrad.DimensionError, 'stride'),
    (dict(pad=(1,)), xgrad.DimensionError, 'pad'),
    (dict(dilate=(1, 2, 3)), xgrad.DimensionError, 'dilate'),
    (dict(stride=0), ValueError, 'stride must be positive'),
    (dict(stride=(1, -1)), ValueError, 'stride must be positive'),
    (dict(pad=-1), ValueError, 'pad must be non-negative'),
    (dict(dilate=0), ValueError, 'dilate must be positive'),
    (dict(stride=1.5), TypeError, 'stride'),
    (dict(pad=(1, 'a')), TypeError, 'pad'),
    (dict(stride=True), TypeError, 'stride'),
    (dict(pad=1.0), TypeError, 'pad'),
    (dict(dilate=True), TypeError, 'dilate'),
])
def test_bad_parameters(kw, error, match):
    x, w = _arr((1, 2, 5, 5)), _arr((3, 2, 3, 3))
    xgrad.conv(x, w, stride=1, pad=1, dilate=1)  # (memoized checks of the plain ints:
    xgrad.conv(x, w, stride=1, pad=0, dilate=1)  # 1.5, True and 1.0 are still refused)
    with pytest.raises(error, match='conv: ' + match):
        xgrad.conv(x, w, **kw)
    with pytest.raises(error, match='conv_transpose: ' + match):
        xgrad.conv_transpose(x, _arr((2, 3, 3, 3)), **kw)


def test_integer_and_bool_inputs_promote_like_chainerx():
    """ChainerX takes any dtype in conv's forward; the result has the
    promoted dtype of x, w and b (docs/dtype_promotion.md)."""
    xi = xgrad.array(numpy.arange(10, dtype=numpy.int64).reshape(1, 2, 5) % 3)
    wi = xgrad.array(numpy.array([[[1, 0, -1], [2, 1, 0]]], numpy.int8))
    y = xgrad.conv(xi, wi)
    assert y.dtype == numpy.int64
    expected = [sum(int(xi.to_numpy()[0, c, l + k]) * int(wi.to_numpy()[0, c, k])
                    for c in range(2) for k in range(3)) for l in range(3)]
    numpy.testing.assert_array_equal(y.to_numpy()[0, 0], expected)
    assert xgrad.conv(xi, wi.astype(numpy.float16)).dtype == numpy.float16
    assert xgrad.conv(_arr((1, 2, 5)), wi, xgrad.ones((1,), numpy.bool_)).dtype == numpy.float64
    yb = xgrad.conv(xi > 0, wi > 0)
    assert yb.dtype == numpy.bool_
    assert xgrad.conv_transpose(xi, xgrad.ones((2, 3, 3), numpy.int32)).dtype == numpy.int64


def test_bad_bias():
    with pytest.raises(xgrad.DimensionError, match=r'b \(2,\)'):
        xgrad.conv(_arr((1, 2, 5)), _arr((3, 2, 3)), _arr((2,)))
    with pytest.raises(xgrad.DimensionError, match=r'b \(3,\)'):
        xgrad.conv_transpose(_arr((1, 2, 5)), _arr((2, 3, 3)), _arr((3,)), groups=2)


def test_windows_that_do_not_fit():
    with pytest.raises(xgrad.DimensionError, match='do not fit'):
        xgrad.conv(_arr((1, 1, 2, 5)), _arr((1, 1, 3, 3)))
    with pytest.raises(xgrad.DimensionError, match='do not fit'):
        xgrad.conv(_arr((1, 1, 3, 5)), _arr((1, 1, 3, 3)), dilate=2)
    with pytest.raises(xgrad.DimensionError, match='not positive'):
        xgrad.conv_transpose(_arr((1, 1, 1)), _arr((1, 1, 2)), pad=1)


def test_inconsistent_outsize():
    x, w = _arr((1, 2, 4)), _arr((2, 3, 3))
    # conv maps 9 and 10 back to 4, and 8 with cover_all.
    for good in (8, 9, 10):
        assert xgrad.conv_transpose(x, w, stride=2, outsize=(good,)).shape == (1, 3, good)
    for bad in ((7,), (11,), (2,)):
        with pytest.raises(xgrad.DimensionError, match=r'outsize \({},\)'.format(bad[0])):
            xgrad.conv_transpose(x, w, stride=2, outsize=bad)
    with pytest.raises(xgrad.DimensionError, match='outsize'):
        xgrad.conv_transpose(x, w, stride=2, outsize=(9, 9))
    for bad in ((0,), (-1,)):  # ChainerX: a DimensionError for an empty or negative size
        with pytest.raises(xgrad.DimensionError, match='outsize.* must be positive'):
            xgrad.conv_transpose(x, w, stride=2, outsize=bad)


def test_bad_input_records_nothing():
    x = _arr((1, 2, 5)).require_grad()
    h = x * 2
    with pytest.raises(xgrad.DimensionError):
        xgrad.conv(h, _arr((3, 4, 3)))
    h.sum().backward()
    numpy.testing.assert_array_equal(x.grad.to_numpy(), numpy.full(x.shape, 2.0))
