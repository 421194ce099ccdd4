"""The convolution dispatcher (xgrad/_ops/_conv/dispatch.py): which
algorithm each kernel takes on each CPU path, as a table of shapes, and
the public query xgrad.conv_algorithm."""

import os

import numpy
import pytest

from xgrad._backend import gemm_kernels, native_kernels
from xgrad._ops import convolution
from xgrad._ops._conv import dispatch, thresholds

from ._conv_dispatch_grid import conv_cases

PATHS = ('sse2', 'avx2', 'avx512')
GRID = os.path.join(os.path.dirname(__file__), 'conv_dispatch_grid.txt')


def _key(case):
    xshape, wshape, s, p, d, g, dtype, host = case

    def f(v):
        return 'x'.join(map(str, v)) if isinstance(v, tuple) else str(v)
    return '{} {} s{} p{} d{} g{} {} {}'.format(f(xshape), f(wshape), f(s), f(p), f(d), g,
                                                dtype, 'host' if host else 'device')


def _described(kernel, found, host):
    """A choice as the grid file writes it."""
    how, plan = found.algorithm, found.plan
    if how == 'winograd':
        return how + ':' + plan.name
    if how == 'input_phases':
        return how + ':' + plan.transform.name
    if how == 'taps':
        return 'taps:b{}'.format(plan.batch)
    if how == 'im2col' and kernel == 'conv' and host:
        return 'im2col:' + ('own' if plan else 'blas')
    return how


def _choices(case, path, threads):
    """(conv, its input gradient, its weight gradient) of a grid case."""
    xshape, wshape, s, p, d, g, dtype, host = case
    work = numpy.dtype(dtype).type
    geom, outsize = convolution._conv_shapes(xshape, numpy.float32, wshape, None, s, p, d, g,
                                             False)
    gyshape = (xshape[0], wshape[0]) + tuple(outsize)
    found = (
        ('conv', dispatch.decide('conv', host, xshape, wshape, geom, tuple(outsize), work,
                                 path, threads)),
        ('conv_transpose', dispatch.decide('conv_transpose', host, gyshape, wshape, geom,
                                           tuple(xshape[2:]), work, path, threads)),
        ('grad_weight', dispatch.decide('grad_weight', host, xshape, wshape, geom, gyshape,
                                        work, path, threads)))
    return tuple(_described(kernel, c, host) for kernel, c in found)


def _expected():
    """{key: [per kernel {(path, threads): algorithm}]} from the grid file."""
    table = {}
    with open(GRID) as f:
        for line in f:
            if line.startswith('#'):
                continue
            key, *columns = line.rstrip('\n').split(' | ')
            per_kernel = []
            for column in columns:
                entries = dict(e.split('=', 1) for e in column.split())
                per_kernel.append({(path, t): entries.get('{}/{}'.format(path, t),
                                                          entries.get(path, entries.get('*')))
                                   for path in PATHS for t in (1, 2)})
            table[key] = per_kernel
    return table


def test_the_choices_over_the_grid_on_every_path():
    """Every case of the grid takes, on each CPU path and with one or two
    pool threads, the algorithm the table says (the decisions before the
    dispatcher gathered them, 0f6f540)."""
    expected = _expected()
    cases = {_key(c): c for c in conv_cases()}
    assert set(cases) == set(expected)
    wrong = []
    for key, case in cases.items():
        for path in PATHS:
            for threads in (1, 2):
                got = _choices(case, path, threads)
                want = tuple(k[(path, threads)] for k in expected[key])
                if got != want:
                    wrong.append('{} on {}/{}: {} != {}'.format(key, path, threads, got, want))
    assert not wrong, '{} differ, e.g.\n'.format(len(wrong)) + '\n'.join(wrong[:20])


def test_the_tables_tile_rows_are_the_gemm_kernels():
    """The tap groups' tile in each path's table is that path's GEMM tile
    (and no GEMM kernel of ours: no tap groups)."""
    before = native_kernels.cpu_path()
    try:
        for path in native_kernels.cpu_paths():
            native_kernels._select_cpu_path(path)
            rules = thresholds.for_path()
            assert rules is thresholds.for_path(path)
            if gemm_kernels.available():
                assert rules.tap_tile_rows == gemm_kernels.tile_rows(), path
                assert rules.own_gemm, path
            else:
                assert rules.tap_tile_rows is None and not rules.own_gemm, path
    finally:
        native_kernels._select_cpu_path(before)


def test_an_unknown_path_is_refused():
    with pytest.raises(ValueError, match="unknown CPU path 'avx1024'"):
        thresholds.for_path('avx1024')
