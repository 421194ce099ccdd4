"""Convolution over tap groups (xgrad/_ops/_tap_groups.py): the plan covers
every output position once and every tap that reads the image, and the
three products match the float64 references, directly and through
xgrad.conv / conv_transpose with their gradients."""

import dataclasses
import itertools

import numpy
import pytest

import xgrad
from xgrad._backend import gemm_kernels
from xgrad._backend import native_kernels as K
from xgrad._backend.tap_columns import add_tap_columns, fill_tap_columns, transpose_into
from xgrad._ops import _tap_groups
from xgrad._ops._conv import chunking, thresholds
from xgrad._ops.convolution import Geometry
from xgrad._ops._conv.reference import (
    reference_conv as _reference_conv, reference_conv_transpose as _reference_conv_transpose)

from ._conv_checks import assert_adjoint_gradients, data, record_calls, strided_5x5_checked

needs_gemm = pytest.mark.skipif(not gemm_kernels.available(),
                                reason='xgrad sgemm needs the AVX2 or AVX-512 path')


@pytest.fixture(params=K.cpu_paths())
def path(request):
    """Each dispatch path this CPU runs (transpose.h's AVX tiles and scalar
    loops, the GEMM's AVX2 and AVX-512 micro-kernels)."""
    before = K.cpu_path()
    K._select_cpu_path(request.param)
    yield request.param
    K._select_cpu_path(before)


def _geometry(k, s, p):
    return Geometry(tuple(k), tuple(s), tuple(p), (1, 1), 1)


def _out(size, k, s, p):
    return tuple((n + 2 * q - kk) // ss + 1 for n, kk, ss, q in zip(size, k, s, p))


# (n, c, o, (h, w), (kh, kw), (sh, sw), (ph, pw)): 5x5 and 3x3 with the
# usual pads, non-square images and kernels, mixed strides, a pad of k - 1
# (outputs whose windows reach the padding on both sides) and batches
# narrower than a GEMM tile (groups then merge positions).
CASES = [
    (8, 32, 32, (4, 4), (5, 5), (1, 1), (2, 2)),
    (8, 32, 48, (8, 8), (5, 5), (2, 2), (2, 2)),
    (16, 32, 32, (4, 4), (3, 3), (2, 2), (1, 1)),
    (8, 32, 32, (5, 7), (3, 5), (1, 2), (1, 2)),
    (12, 40, 32, (6, 5), (4, 4), (2, 1), (3, 3)),
    (64, 32, 32, (4, 4), (5, 5), (2, 2), (2, 2)),
    (9, 32, 32, (3, 3), (3, 3), (1, 1), (2, 2)),
    (16, 16, 32, (16, 16), (5, 5), (2, 2), (2, 2)),  # positions in classes of equal taps
]


def _rules(**changes):
    """The AVX-512 path's thresholds (its 8-row tile) whatever this CPU runs,
    so that which plans are taken does not depend on the machine (the
    products run on the kernel this CPU has); a path without our GEMM keeps
    its own (no plans). ``changes``: fields replaced."""
    rules = thresholds.for_path('avx512') if gemm_kernels.available() else thresholds.for_path()
    return dataclasses.replace(rules, **changes)


def _forced_plan(n, c, o, size, k, s, p):
    """The plan of the case, with the pay rules off (every case is planned)."""
    rules = _rules(tap_max_work_fraction=float('inf'), tap_min_windows_per_out_channel=0,
                   tap_min_windows_per_out_channel_threaded=0, tap_min_products_threaded=0)
    return _tap_groups.plan((n, c) + size, (o, c) + k, _geometry(k, s, p), _out(size, k, s, p),
                            numpy.float32, rules=rules)


def _row_major(n, size, k, s, p, outsize):
    order = numpy.arange(outsize[0] * outsize[1])
    return order, _tap_groups._groups(n, size, k, s, p, outsize)


@pytest.mark.parametrize('grouping', [
    _row_major,
    _tap_groups._class_groups,
    lambda *args: _tap_groups._class_groups(*args, by=(True, False)),
    lambda *args: _tap_groups._class_groups(*args, by=(False, True)),
], ids=['row-major', 'classes', 'row-classes', 'column-classes'])
@pytest.mark.parametrize('n, c, o, size, k, s, p', CASES)
def test_the_groups_cover_each_position_once_and_every_tap_it_reads(grouping, n, c, o, size,
                                                                     k, s, p):
    outsize = _out(size, k, s, p)
    order, groups = grouping(n, size, k, s, p, outsize)
    assert sorted(order.tolist()) == list(range(outsize[0] * outsize[1]))
    assert groups[0, 0] == 0 and groups[-1, 1] == outsize[0] * outsize[1]
    assert (groups[1:, 0] == groups[:-1, 1]).all()  # consecutive, no gaps
    for q0, q1, i0, i1, j0, j1 in groups.tolist():
        assert (q1 - q0) * n >= _tap_groups._DEFAULT_TILE_ROWS or len(groups) == 1
        for q in order[q0:q1].tolist():
            oy, ox = divmod(q, outsize[1])
            for i, j in itertools.product(range(k[0]), range(k[1])):
                iy, ix = oy * s[0] - p[0] + i, ox * s[1] - p[1] + j
                if 0 <= iy < size[0] and 0 <= ix < size[1]:
                    assert i0 <= i < i1 and j0 <= j < j1, (q, i, j)


def test_the_groups_skip_the_padding_of_small_images():
    """5x5 with pad 2 on 4x4 at batch 64: each position its own group with
    exactly its taps, half of im2col's products (14 of 20 taps a side)."""
    groups = _tap_groups._groups(64, (4, 4), (5, 5), (1, 1), (2, 2), (4, 4))
    rows = [(2, 5), (1, 5), (0, 4), (0, 3)]
    assert [tuple(g[2:]) for g in groups.tolist()] == [r + c for r in rows for c in rows]
    area = (groups[:, 3] - groups[:, 2]) * (groups[:, 5] - groups[:, 4])
    assert area.sum() == 14 * 14


def test_classes_of_positions_skip_the_padding_of_mid_sized_images():
    """5x5 stride 2 on 16x16 at batch 12: a position's 12 rows fill 1.5
    micro-kernel tiles of 8, so row-major runs of positions mix the first
    and last output columns with the middle ones; classes of equal taps
    (corners, edges, the middle) do 0.87 of im2col's products against 0.91
    (rows rounded up to whole tiles), so the plan puts the positions in
    that order. At batch 8 a position is one tile, and row-major groups
    are already exact."""
    args = (12, (16, 16), (5, 5), (2, 2), (2, 2), (8, 8))
    order, groups = _tap_groups._class_groups(*args)
    by_class = _tap_groups._work_fraction(groups, 12, (5, 5), (8, 8))
    row_major = _tap_groups._work_fraction(_tap_groups._groups(*args), 12, (5, 5), (8, 8))
    assert by_class < 0.9 < row_major
    exact = (3 + 6 * 5 + 4) ** 2 / 40 ** 2  # taps inside a side: 3, 5 (six times), 4
    plan = _tap_groups._plan(12, 32, 32, *args[1:])
    if plan is not None:  # (None where xgrad's GEMM is missing: plan() checks that)
        assert numpy.array_equal(plan.order, order)
        assert numpy.array_equal(plan.order[plan.inverse], numpy.arange(64))
        eight = _tap_groups._plan(8, 32, 32, *args[1:])
        assert eight.order is None and eight.work_fraction == pytest.approx(exact)


@pytest.mark.parametrize('n, c, o, size, k, s, p', CASES)
def test_the_three_products_match_the_references(monkeypatch, path, n, c, o, size, k, s, p):
    plan = _forced_plan(n, c, o, size, k, s, p)
    if not gemm_kernels.available():
        assert plan is None  # (the SSE2 path: no micro-kernel, im2col and the BLAS)
        return
    _check_products(plan, n, c, o, size, k, s, p)


@needs_gemm
@pytest.mark.parametrize('n, chunk', [(32, 16), (32, 8), (24, 12)])
def test_batches_in_chunks_match_the_references(monkeypatch, n, chunk):
    """Columns past chunking.WHOLE_BATCH_ELEMENTS: the plan takes the batch in
    halves or quarters, the forward and input gradient chunk by chunk, the
    weight gradient summed over the chunks."""
    per_sample = 25 * 32 * 16  # 5x5 taps, 32 channels, 4x4 outputs (before the skipping)
    monkeypatch.setattr(chunking, 'WHOLE_BATCH_ELEMENTS', chunk * per_sample)
    plan = _forced_plan(n, 32, 32, (8, 8), (5, 5), (2, 2), (2, 2))
    assert plan.batch == chunk
    _check_products(plan, n, 32, 32, (8, 8), (5, 5), (2, 2), (2, 2))
    with pytest.raises(ValueError, match='chunks of'):
        plan.conv(numpy.zeros((chunk + 1, 32, 8, 8), numpy.float32),
                  numpy.zeros((32, 32, 5, 5), numpy.float32), None)


def _check_products(plan, n, c, o, size, k, s, p):
    """The plan's three products against the float64 references."""
    x, w, b = data((n, c) + size, 1), data((o, c) + k, 2), data(o, 3)
    gy = data((n, o) + _out(size, k, s, p), 4)
    x32, w32, gy32 = (a.astype(numpy.float32) for a in (x, w, gy))
    y = plan.conv(x32, w32, b.astype(numpy.float32))
    assert y.dtype == numpy.float32 and y.flags.c_contiguous
    numpy.testing.assert_allclose(y, _reference_conv(x, w, b, stride=s, pad=p),
                                  rtol=1e-4, atol=1e-4)
    gx = plan.conv_transpose(gy32, w32)
    numpy.testing.assert_allclose(
        gx, _reference_conv_transpose(gy, w, stride=s, pad=p, outsize=size),
        rtol=1e-4, atol=1e-4)
    # gw against <gw, v> = <conv(x, v), gy>
    v = data(w.shape, 5)
    gw = plan.grad_weight(x32, gy32)
    numpy.testing.assert_allclose(numpy.vdot(gw, v),
                                  numpy.vdot(_reference_conv(x, v, stride=s, pad=p), gy),
                                  rtol=1e-4)
    # the results are new arrays, not this thread's scratch buffers
    assert not any(numpy.shares_memory(a, b) for a, b in itertools.combinations(
        (y, gx, gw, plan.conv(x32, w32, None)), 2))


@needs_gemm
@pytest.mark.parametrize('transpose', [False, True])
def test_conv_and_conv_transpose_take_the_groups_with_their_gradients(monkeypatch, transpose):
    """64->64 5x5 stride 2 on 8x8 at batch 64 (28% of im2col's products in
    the padding): conv's forward, weight and input gradients, and
    conv_transpose's forward, go through the groups; values and gradients
    match the references."""
    taken = record_calls(monkeypatch, _tap_groups.TapPlan,
                         ('conv', 'conv_transpose', 'grad_weight'))
    x, w, y, x64, w64, ref, kwf = strided_5x5_checked(
        transpose, (64, 32, 4, 4) if transpose else (64, 32, 8, 8), (32, 32, 5, 5), (8, 8))
    gy = xgrad.array(data(y.shape, 3).astype(numpy.float32))
    gx, gw = xgrad.grad([y], [x, w], grad_outputs=[gy])
    assert sorted(taken) == ['conv', 'conv_transpose', 'grad_weight']
    assert_adjoint_gradients(ref, x64, w64, gy, gx, gw, kwf)


@pytest.mark.parametrize('xshape, wshape, k, s, p, takes', [
    ((64, 64, 8, 8), (64, 64), 5, 2, 2, True),     # 28% of the products in the padding
    ((64, 64, 4, 4), (64, 64), 3, 2, 1, True),
    ((8, 128, 4, 4), (128, 128), 5, 1, 2, True),   # 1 GEMM column an output channel
    ((8, 256, 4, 4), (256, 256), 3, 1, 1, False),  # half a column an output channel
    ((64, 16, 8, 8), (32, 16), 5, 2, 2, True),     # 16 input channels
    ((64, 8, 8, 8), (32, 8), 5, 2, 2, False),      # 8
    ((4, 64, 8, 8), (64, 64), 5, 2, 2, False),     # batch 4
    ((64, 64, 32, 32), (64, 64), 3, 1, 1, False),  # 6% in the padding
    ((64, 64, 16, 16), (64, 64), 5, 2, 2, True),   # columns past 16 MiB: in halves
    ((64, 256, 16, 16), (256, 256), 5, 2, 2, False),  # in eighths
    ((64, 64, 8, 8), (64, 64), 5, 2, 0, False),    # no padding
])
def test_where_the_groups_are_taken(xshape, wshape, k, s, p, takes):
    """On one thread (on more, 4 GEMM columns an output channel at least)."""
    geom = _geometry((k, k), (s, s), (p, p))
    plan = _tap_groups.plan(xshape, wshape + (k, k), geom, _out(xshape[2:], (k, k), (s, s),
                                                                 (p, p)), numpy.float32,
                            rules=_rules(), threads=1)
    assert (plan is not None) is (takes and gemm_kernels.available())
    assert _tap_groups.plan(xshape, wshape + (k, k), geom, (4, 4), numpy.float64,
                            rules=_rules(), threads=1) is None


@pytest.mark.parametrize('xshape, wshape, k, s, p, takes', [
    ((8, 128, 4, 4), (128, 128), 5, 1, 2, False),  # 8 rows a position: a tile and a third
    ((8, 64, 8, 8), (64, 64), 5, 2, 2, False),
    ((64, 64, 8, 8), (64, 64), 5, 2, 2, True),     # 64 rows: a partial tile in 11
    ((12, 64, 8, 8), (64, 64), 5, 2, 2, True),     # 12 rows: two whole tiles
])
def test_the_avx2_tile_of_6_rows_declines_groups_of_8(xshape, wshape, k, s, p, takes):
    """With the AVX2 kernel's 6-row tile a partial tile counts as two
    (tap_partial_tile_cost): batch 8 plans lose there, batch 64 ones pay."""
    geom = _geometry((k, k), (s, s), (p, p))
    plan = _tap_groups.plan(xshape, wshape + (k, k), geom, _out(xshape[2:], (k, k), (s, s),
                                                                 (p, p)), numpy.float32,
                            rules=thresholds.for_path('avx2'), threads=1)
    assert (plan is not None) is takes


@pytest.mark.parametrize('path, xshape, o, k, takes', [
    ('avx2', (32, 16, 8, 8), 32, 3, False),  # 0.85 of the products, 32 channels at batch 32
    ('avx2', (64, 16, 8, 8), 32, 3, True),   # 0.86 at batch 64
    ('avx2', (12, 64, 8, 8), 64, 3, False),  # 0.84, 64 channels at batch 12
    ('avx2', (16, 64, 8, 8), 64, 3, True),   # 0.85 at batch 16
    ('avx2', (12, 64, 8, 8), 64, 5, True),   # 0.72
    ('avx512', (32, 16, 8, 8), 32, 3, True),  # (the AVX-512 tile: no such rule)
])
def test_the_avx2_tile_declines_marginal_plans_of_small_batches(path, xshape, o, k, takes):
    """On the AVX2 kernel plans above tap_marginal's fraction of im2col's
    products lost to it under 16 samples, or 64 with fewer than 64 output
    channels."""
    geom = _geometry((k, k), (2, 2), (k // 2, k // 2))
    plan = _tap_groups.plan(xshape, (o, xshape[1], k, k), geom,
                            _out(xshape[2:], (k, k), (2, 2), (k // 2, k // 2)), numpy.float32,
                            rules=thresholds.for_path(path), threads=1)
    assert (plan is not None) is takes


def test_a_partial_tile_counts_by_the_kernel():
    """One position of 8 rows: on the 8-row tile 8 rows of work, on the
    6-row tile two tiles, the partial one counted twice (18 rows)."""
    groups = numpy.array([[0, 1, 0, 5, 0, 5]])
    full = 8 * 25
    assert _tap_groups._work_fraction(groups, 8, (5, 5), (1, 1), 8) == pytest.approx(1.0)
    avx2 = thresholds.for_path('avx2').tap_partial_tile_cost
    assert _tap_groups._work_fraction(groups, 8, (5, 5), (1, 1), 6, avx2) == pytest.approx(
        18 * 25 / full)
    assert _tap_groups._work_fraction(groups, 12, (5, 5), (1, 1), 6, avx2) == pytest.approx(1.0)


def test_the_kernels_refuse_operands_outside_their_layout():
    x = numpy.zeros((8, 4, 4, 2), numpy.float32)   # (batch, h, w, C)
    cols = numpy.zeros((16 * 8, 9 * 2), numpy.float32)
    geometry = ((3, 3), (1, 1), (1, 1), (4, 4))
    good = numpy.array([[0, 16, 0, 3, 0, 3]])
    fill_tap_columns(x, cols, good, *geometry)
    for bad in ([[0, 17, 0, 3, 0, 3]], [[0, 16, 0, 4, 0, 3]], [[3, 2, 0, 3, 0, 3]]):
        with pytest.raises(ValueError, match='outside'):
            fill_tap_columns(x, cols, numpy.array(bad), *geometry)
    with pytest.raises(ValueError, match='matrix'):
        add_tap_columns(cols[:, :-1], x, good, *geometry)
    with pytest.raises(ValueError, match='float32'):
        fill_tap_columns(x.astype(numpy.float64), cols, good, *geometry)
    with pytest.raises(ValueError):
        transpose_into(cols, numpy.zeros(cols.shape, numpy.float32))
    for bad in (numpy.arange(15), numpy.r_[0, numpy.arange(15)], numpy.arange(1, 17)):
        with pytest.raises(ValueError, match='order'):
            fill_tap_columns(x, cols, good, *geometry, order=bad)
    # the rows follow the order of the positions
    marked = x + numpy.arange(16, dtype=numpy.float32).reshape(1, 4, 4, 1)
    reversed_cols = numpy.zeros_like(cols)
    fill_tap_columns(marked, reversed_cols, good, *geometry, order=numpy.arange(16)[::-1])
    fill_tap_columns(marked, cols, good, *geometry)
    assert (reversed_cols.reshape(16, 8, 18)[::-1] == cols.reshape(16, 8, 18)).all()


@needs_gemm
def test_sgemm_blocks_run_sub_products_and_refuse_blocks_outside():
    a, b = data((20, 30), 1).astype(numpy.float32), data((30, 40), 2).astype(numpy.float32)
    out = numpy.full((20, 40), 7, numpy.float32)
    blocks = [(0, 0, 0, 20, 16, 30, 0), (4, 16, 10, 16, 24, 20, 0), (4, 16, 0, 16, 24, 10, 1)]
    assert gemm_kernels.sgemm_blocks(a, b, out, numpy.array(blocks))
    want = numpy.full((20, 40), 7.0)
    want[:, :16] = a[:, :] @ b[:, :16]
    want[4:20, 16:40] = a[4:20] @ b[:, 16:40]
    numpy.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match='outside'):
        gemm_kernels.sgemm_blocks(a, b, out, numpy.array([(0, 0, 0, 21, 16, 30, 0)]))
    with pytest.raises(ValueError, match='outside'):
        gemm_kernels.sgemm_blocks(a, b, out, numpy.array([(0, 30, 0, 4, 16, 30, 0)]))
    assert not gemm_kernels.sgemm_blocks(a.astype(float), b, out, numpy.array(blocks))


def test_transpose_into_matches_numpy_on_ragged_tiles(path):
    """Whole 8x8 tiles, 16-row bands, ragged edges, tall and wide matrices,
    rows apart by more than their length, and stacks."""
    for shape in [(1, 1), (17, 33), (64, 5), (3, 100), (40, 24), (24, 40), (300, 9)]:
        a = data(shape, 1).astype(numpy.float32)
        out = numpy.empty(shape[::-1], numpy.float32)
        transpose_into(a, out)
        assert (out == a.T).all()
    wide = data((20, 50), 2).astype(numpy.float32)[:, 3:40]  # rows 50 apart
    out = numpy.full((40, 30), -1, numpy.float32)
    transpose_into(wide, out[:37, 5:25])
    assert (out[:37, 5:25] == wide.T).all() and (out[:, :5] == -1).all()
    stack = data((3, 13, 21), 3).astype(numpy.float32)
    out = numpy.empty((3, 21, 13), numpy.float32)
    transpose_into(stack, out)
    assert (out == stack.transpose(0, 2, 1)).all()


def test_the_kernels_split_over_threads_as_one_thread_does():
    """Large enough to be split over the pool (by channels, by row
    chunks): the same values, bit for bit, as on one thread."""
    x = data((32, 12, 12, 64), 1).astype(numpy.float32)  # (batch, h, w, C)
    order, groups = _tap_groups._class_groups(1, (12, 12), (5, 5), (1, 1), (2, 2), (12, 12))
    geometry = ((5, 5), (1, 1), (2, 2), (12, 12), order)
    a = data((1000, 700), 2).astype(numpy.float32)
    results = []
    for limit in (0, 1):
        K.set_thread_limit(limit)
        try:
            cols = numpy.zeros((144 * 32, 25 * 64), numpy.float32)
            fill_tap_columns(x, cols, groups, *geometry)
            back = numpy.zeros_like(x)
            add_tap_columns(cols, back, groups, *geometry)
            t = numpy.empty((700, 1000), numpy.float32)
            transpose_into(a, t)
            results.append((cols, back, t))
        finally:
            K.set_thread_limit(0)
    for threaded, alone in zip(*results):
        assert numpy.array_equal(threaded, alone)
    assert (results[0][2] == a.T).all()


@needs_gemm
def test_python_threads_each_have_their_own_scratch():
    """Two Python threads running tap-group convolutions at once (their
    scratch comes from the one workspace, which hands a block to one array
    at a time) get what each gets alone."""
    import threading
    plan = _tap_groups.plan((64, 32, 8, 8), (32, 32, 5, 5), _geometry((5, 5), (2, 2), (2, 2)),
                            (4, 4), numpy.float32, rules=_rules())
    assert plan is not None
    inputs = [(data((64, 32, 8, 8), s).astype(numpy.float32),
               data((32, 32, 5, 5), s + 10).astype(numpy.float32),
               data((64, 32, 4, 4), s + 20).astype(numpy.float32)) for s in range(2)]

    def run(x, w, gy):
        return [(plan.conv(x, w, None), plan.conv_transpose(gy, w), plan.grad_weight(x, gy))
                for _ in range(5)]
    alone = [run(*args)[0] for args in inputs]
    results = [None, None]
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, run(*inputs[i])))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        for got in results[i]:
            for a, b in zip(got, alone[i]):
                assert numpy.array_equal(a, b)


@needs_gemm
@pytest.mark.parametrize('blocks', ['forward', 'input_grad', 'weight_grad'])
def test_sgemm_blocks_split_over_threads_as_one_thread_does(blocks):
    """Blocks that add onto rows other blocks wrote, over other row ranges
    (the weight gradient's kernel rows of different groups): each element
    is summed by one thread in the blocks' order, so the split gives one
    thread's values bit for bit."""
    plan = _tap_groups.plan((64, 32, 8, 8), (32, 32, 5, 5), _geometry((5, 5), (2, 2), (2, 2)),
                            (4, 4), numpy.float32, rules=_rules())
    spec = getattr(plan, blocks)
    positions, kk_c = plan._columns_shape
    shapes = {'forward': ((positions, kk_c), (kk_c, 32), (positions, 32)),
              'input_grad': ((positions, 32), (32, kk_c), (positions, kk_c)),
              'weight_grad': ((kk_c, positions), (positions, 32), (kk_c, 32))}[blocks]
    a, b = (data(shape, seed).astype(numpy.float32) for seed, shape in enumerate(shapes[:2]))
    results = []
    for limit in (0, 1):
        K.set_thread_limit(limit)
        try:
            out = numpy.zeros(shapes[2], numpy.float32)
            assert gemm_kernels.sgemm_blocks(a, b, out, spec)
            results.append(out)
        finally:
            K.set_thread_limit(0)
    assert numpy.array_equal(results[0], results[1])
    want = numpy.zeros(shapes[2])
    for r0, c0, k0, m, n, k, acc in spec.tolist():
        part = a[r0:r0 + m, k0:k0 + k].astype(float) @ b[k0:k0 + k, c0:c0 + n]
        want[r0:r0 + m, c0:c0 + n] = part + (want[r0:r0 + m, c0:c0 + n] if acc else 0)
    numpy.testing.assert_allclose(results[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('threads, takes', [(1, True), (2, False), (8, False)])
def test_more_threads_take_the_groups_with_more_columns_and_products(threads, takes):
    geom = _geometry((5, 5), (1, 1), (2, 2))
    kw = dict(rules=_rules(), threads=threads)
    one_a_channel = _tap_groups.plan((8, 128, 4, 4), (128, 128, 5, 5), geom, (4, 4),
                                     numpy.float32, **kw)
    four_a_channel = _tap_groups.plan((32, 128, 4, 4), (128, 128, 5, 5), geom, (4, 4),
                                      numpy.float32, **kw)
    geom = _geometry((3, 3), (2, 2), (1, 1))
    small = _tap_groups.plan((64, 16, 8, 8), (32, 16, 3, 3), geom, (4, 4), numpy.float32, **kw)
    assert (one_a_channel is not None) is (takes and gemm_kernels.available())
    assert (four_a_channel is not None) is gemm_kernels.available()
    assert (small is not None) is (takes and gemm_kernels.available())
