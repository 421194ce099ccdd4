"""The convolution dispatcher (xgrad/_ops/_conv/dispatch.py): which
algorithm each kernel takes on each CPU path, as a table of shapes, and
the public query xgrad.conv_algorithm."""

import os

import numpy
import pytest

import xgrad
from xgrad._backend import gemm_kernels, native_kernels
from xgrad._ops import convolution
from xgrad._ops._conv import dispatch, thresholds
from xgrad._ops._conv.geometry import Geometry
from xgrad.testing import force_conv_algorithm

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
    if how == 'groups':  # by the per-group choice (one pass or a convolution a group)
        return 'groups:' + _described(kernel, plan.per, host)
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


# ---------------------------------------------------------------------------
# The dispatcher's table as docs/conv_thresholds.md shows it: (what, x, w,
# parameters, then the algorithm of the forward, the input gradient and the
# weight gradient: one name on every path, or a name per path); one thread.

AVX512_TAPS = {'sse2': 'im2col', 'avx2': 'im2col', 'avx512': 'taps'}
AVX512_TAPS_T = {'sse2': 'col2im', 'avx2': 'col2im', 'avx512': 'taps'}
OWN_GEMM_TAPS = {'sse2': 'im2col', 'avx2': 'taps', 'avx512': 'taps'}
OWN_GEMM_TAPS_T = {'sse2': 'col2im', 'avx2': 'taps', 'avx512': 'taps'}

TABLE = [
    ('3x3, 64->64, 32x32, batch 8', (8, 64, 32, 32), (64, 64, 3, 3), {'pad': 1},
     'winograd', 'flip', 'winograd'),
    ('3x3, 32->32, 8x8, batch 8', (8, 32, 8, 8), (32, 32, 3, 3), {'pad': 1},
     'winograd', 'flip', 'winograd'),
    ('3x3, 16->32, 4x4, batch 8', (8, 16, 4, 4), (32, 16, 3, 3), {'pad': 1},
     AVX512_TAPS, AVX512_TAPS_T, AVX512_TAPS),
    ('3x3, 256->256, 4x4, batch 1', (1, 256, 4, 4), (256, 256, 3, 3), {'pad': 1},
     'im2col', 'col2im', 'im2col'),
    ('5x5, 16->32, 8x8, batch 64', (64, 16, 8, 8), (32, 16, 5, 5), {'pad': 2},
     'winograd', 'flip', 'winograd'),
    ('5x5 stride 2, 64->64, 56x56, batch 8', (8, 64, 56, 56), (64, 64, 5, 5),
     {'stride': 2, 'pad': 2}, 'input_phases',
     {'sse2': 'input_phases', 'avx2': 'col2im', 'avx512': 'input_phases'}, 'input_phases'),
    ('5x5 stride 2, 64->64, 32x32, batch 8', (8, 64, 32, 32), (64, 64, 5, 5),
     {'stride': 2, 'pad': 2}, 'input_phases', 'output_phases', 'input_phases'),
    ('5x5 stride 2, 64->64, 16x16, batch 8', (8, 64, 16, 16), (64, 64, 5, 5),
     {'stride': 2, 'pad': 2}, AVX512_TAPS, AVX512_TAPS_T, AVX512_TAPS),
    ('5x5 stride 2, 32->32, 8x8, batch 64', (64, 32, 8, 8), (32, 32, 5, 5),
     {'stride': 2, 'pad': 2}, OWN_GEMM_TAPS, OWN_GEMM_TAPS_T, OWN_GEMM_TAPS),
    ('the same in float64', (64, 32, 8, 8), (32, 32, 5, 5),
     {'stride': 2, 'pad': 2, 'dtype': 'float64'}, 'im2col', 'col2im', 'im2col'),
    ('3x3 stride 2, 64->128, 56x56, batch 8', (8, 64, 56, 56), (128, 64, 3, 3),
     {'stride': 2, 'pad': 1}, 'im2col', 'col2im', 'im2col'),
    ('3x3 stride 2, 64->64, 8x8, batch 16', (16, 64, 8, 8), (64, 64, 3, 3),
     {'stride': 2, 'pad': 1}, OWN_GEMM_TAPS, OWN_GEMM_TAPS_T, OWN_GEMM_TAPS),
    ('7x7 stride 2, 3->64, 224x224, batch 1', (1, 3, 224, 224), (64, 3, 7, 7),
     {'stride': 2, 'pad': 3}, 'im2col', 'col2im', 'im2col'),
    ('1x1, 64->128, 16x16, batch 8', (8, 64, 16, 16), (128, 64, 1, 1), {},
     'pointwise', 'pointwise', 'pointwise'),
    ('1x1, 2048->512, 2x2, batch 16', (16, 2048, 2, 2), (512, 2048, 1, 1), {},
     {'sse2': 'pointwise', 'avx2': 'im2col', 'avx512': 'im2col'},
     {'sse2': 'pointwise', 'avx2': 'col2im', 'avx512': 'col2im'}, 'im2col'),
    ('1x1, 64->64, 4x4, batch 32', (32, 64, 4, 4), (64, 64, 1, 1), {},
     'pointwise', 'pointwise', 'im2col'),
    ('1x1 stride 2, 64->128, 16x16, batch 8', (8, 64, 16, 16), (128, 64, 1, 1),
     {'stride': 2}, 'im2col', 'col2im', 'im2col'),
    ('3x3 dilate 2, 64->64, 16x16, batch 8', (8, 64, 16, 16), (64, 64, 3, 3),
     {'pad': 2, 'dilate': 2}, 'im2col', 'col2im', 'im2col'),
    ('3x3, 2 groups, 64->64, 16x16, batch 8', (8, 64, 16, 16), (64, 32, 3, 3),
     {'pad': 1, 'groups': 2}, 'groups', 'groups', 'groups'),
    ('3x3, 4 groups, 64->64, 28x28, batch 16', (16, 64, 28, 28), (64, 16, 3, 3),
     {'pad': 1, 'groups': 4}, 'groups', 'groups', 'groups'),
    ('5x5 stride 2, 2 groups, 32->32, 32x32, batch 16', (16, 32, 32, 32), (32, 16, 5, 5),
     {'stride': 2, 'pad': 2, 'groups': 2}, 'groups', 'groups', 'groups'),
    ('3x3 stride 2, 2 groups, 128->128, 8x8, batch 16', (16, 128, 8, 8), (128, 64, 3, 3),
     {'stride': 2, 'pad': 1, 'groups': 2}, {'sse2': 'im2col', 'avx2': 'groups',
                                            'avx512': 'groups'},
     {'sse2': 'col2im', 'avx2': 'groups', 'avx512': 'groups'},
     {'sse2': 'im2col', 'avx2': 'groups', 'avx512': 'groups'}),
    ('3x3, 32 groups of 4 channels, 56x56, batch 8', (8, 128, 56, 56), (128, 4, 3, 3),
     {'pad': 1, 'groups': 32}, 'im2col', 'col2im', 'im2col'),
    ('3x3 stride 2, 2 groups of 16, 16x16, batch 32', (32, 32, 16, 16), (32, 16, 3, 3),
     {'stride': 2, 'pad': 1, 'groups': 2}, 'im2col', 'col2im', 'im2col'),
    ('3x3, 2 groups, 64->64, 16x16, batch 8, float64', (8, 64, 16, 16), (64, 32, 3, 3),
     {'pad': 1, 'groups': 2, 'dtype': 'float64'}, 'groups', 'groups', 'groups'),
    ('3x3 depthwise, 64 groups, 28x28, batch 16', (16, 64, 28, 28), (64, 1, 3, 3),
     {'pad': 1, 'groups': 64}, 'depthwise', 'depthwise', 'depthwise'),
    ('3x3 depthwise stride 2, 144 groups, 56x56, batch 8, float64', (8, 144, 56, 56),
     (144, 1, 3, 3), {'stride': 2, 'pad': 1, 'groups': 144, 'dtype': 'float64'},
     'depthwise', 'depthwise', 'depthwise'),
    ('5x5 depthwise, multiplier 2, 32->64, 14x14, batch 8', (8, 32, 14, 14), (64, 1, 5, 5),
     {'pad': 2, 'groups': 32}, 'depthwise', 'depthwise', 'depthwise'),
    ('3x3x3, 16->32, 8x8x8, batch 2', (2, 16, 8, 8, 8), (32, 16, 3, 3, 3), {'pad': 1},
     'im2col', 'flip', 'im2col'),
    ('3x3x3 stride 2, 16->32, 8x8x8, batch 2', (2, 16, 8, 8, 8), (32, 16, 3, 3, 3),
     {'stride': 2, 'pad': 1}, 'im2col', 'col2im_add', 'im2col'),
    ('3x3, 64->64, 32x32, batch 8, on a GPU', (8, 64, 32, 32), (64, 64, 3, 3),
     {'pad': 1, 'device': 'cuda:0'}, 'im2col', 'flip', 'im2col'),
]


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('what, x, w, params, forward, grad_input, grad_weight', TABLE,
                         ids=[row[0] for row in TABLE])
def test_the_table(what, x, w, params, forward, grad_input, grad_weight, path):
    for kernel, expected in zip(dispatch.KERNELS, (forward, grad_input, grad_weight)):
        found = xgrad.conv_algorithm(x, w, kernel=kernel, cpu_path=path, threads=1, **params)
        want = expected if isinstance(expected, str) else expected[path]
        assert found.algorithm == want, (kernel, found)
        assert found.reason and found.kernel == kernel
        on_gpu = params.get('device', '').startswith('cuda')
        assert (found.cpu_path, found.device) == ((None, 'cuda') if on_gpu else (path, 'native'))


def test_the_query_names_groups_with_the_per_group_algorithm():
    for kernel, inner in (('forward', 'winograd'), ('grad_input', 'flip'),
                          ('grad_weight', 'winograd')):
        found = xgrad.conv_algorithm((16, 64, 28, 28), (64, 16, 3, 3), pad=1, groups=4,
                                     kernel=kernel, cpu_path='avx512', threads=1)
        assert found.algorithm == 'groups'
        assert found.reason.startswith('4 groups of 16->16 channels (16+ each side), one {} '
                                       'convolution a group: '.format(inner)), found.reason
    found = xgrad.conv_algorithm((16, 32, 32, 32), (32, 16, 5, 5), stride=2, pad=2, groups=2,
                                 cpu_path='avx512', threads=1)
    assert (found.algorithm, 'input_phases convolution a group') == (
        'groups', found.reason[found.reason.index('input_phases'):].split(':')[0])


@pytest.mark.parametrize('transposed', [False, True])
@pytest.mark.parametrize('x, w, params', [
    ((8, 64, 32, 32), (64, 64, 3, 3), {'pad': 1}),
    ((8, 16, 32, 32), (16, 16, 5, 5), {'stride': 2, 'pad': 2}),
    ((64, 32, 8, 8), (32, 32, 5, 5), {'stride': 2, 'pad': 2}),
    ((4, 8, 6, 6), (8, 8, 1, 1), {}),
    ((2, 4, 7, 5), (6, 2, 3, 2), {'stride': (2, 1), 'pad': 1, 'groups': 2}),
])
def test_the_query_answers_what_the_kernels_take(monkeypatch, transposed, x, w, params):
    """conv (or conv_transpose) and both its gradients run the algorithms
    xgrad.conv_algorithm names for them (dispatch.choice watched)."""
    if transposed:  # conv_transpose's w is (C, O / groups, ...)
        w = (x[1], w[0] // params.get('groups', 1)) + w[2:]
    taken = []
    real = dispatch.choice

    def spy(kernel, *args):
        found = real(kernel, *args)
        taken.append((kernel, found.algorithm))
        return found
    monkeypatch.setattr(dispatch, 'choice', spy)
    rng = numpy.random.RandomState(0)
    xa = xgrad.array(rng.rand(*x).astype('float32')).require_grad()
    wa = xgrad.array(rng.rand(*w).astype('float32')).require_grad()
    f = xgrad.conv_transpose if transposed else xgrad.conv
    y = f(xa, wa, **params)
    xgrad.grad([y], [xa, wa], grad_outputs=[xgrad.ones_like(y)])
    kernels = (('conv_transpose', 'conv') if transposed else ('conv', 'conv_transpose')) + (
        'grad_weight',)
    asked = [(k, xgrad.conv_algorithm(x, w, transposed=transposed, kernel=name,
                                      **params).algorithm)
             for k, name in zip(kernels, dispatch.KERNELS)]
    # (the forward first; the gradients' kernels, and those they call, after)
    assert taken[0] == asked[0] and all(a in taken[1:] for a in asked[1:]), (taken, asked)


def test_the_query_refuses_what_conv_refuses():
    with pytest.raises(xgrad.DimensionError, match='same number of dimensions'):
        xgrad.conv_algorithm((1, 2, 3, 3), (2, 2, 3))
    with pytest.raises(xgrad.DimensionError, match='channels'):
        xgrad.conv_algorithm((1, 2, 3, 3), (2, 3, 3, 3))
    with pytest.raises(ValueError, match="kernel must be one of"):
        xgrad.conv_algorithm((1, 2, 3, 3), (2, 2, 3, 3), kernel='backward')
    with pytest.raises(ValueError, match="device must be"):
        xgrad.conv_algorithm((1, 2, 3, 3), (2, 2, 3, 3), device='tpu:0')
    with pytest.raises(ValueError, match="unknown CPU path"):
        xgrad.conv_algorithm((1, 2, 3, 3), (2, 2, 3, 3), cpu_path='avx1024')


@pytest.mark.parametrize('o, threads, own, said', [
    (32, 1, True, 'measured faster'),   # preferred: on xgrad's sgemm, not the BLAS's default
    (64, 1, False, "NumPy's BLAS"),     # 64+ output channels: the BLAS measured faster
    (64, 2, True, 'one worker pool'),   # more threads: one pool, whatever the preference
])
def test_the_query_names_the_gemm_host_gemm_runs_for_im2col(o, threads, own, said):
    """On the AVX2 path im2col's forward product of 64+ output channels is
    not preferred on xgrad's sgemm; host_gemm decides the GEMM from that
    preference and the threads, and .gemm says what it decided."""
    found = xgrad.conv_algorithm((1, 3, 224, 224), (o, 3, 7, 7), stride=2, pad=3,
                                 cpu_path='avx2', threads=threads)
    assert found.algorithm == 'im2col'
    assert said in found.gemm, found.gemm
    assert ("xgrad's sgemm" in found.gemm) is own


@pytest.mark.parametrize('transposed', [False, True])
def test_the_kernels_hand_their_preference_to_host_gemm(monkeypatch, transposed):
    """im2col's (forward, weight gradient) and col2im's products run on
    xgrad's sgemm where the plan prefers it, also where host_gemm's default
    is the BLAS (one thread on the AVX2 path, patched in here); the values
    are those of the reference convolution."""
    if not gemm_kernels.available():
        pytest.skip('no sgemm kernel on this CPU path')
    from xgrad._backend import host_gemm
    from xgrad._ops._conv import reference
    monkeypatch.setattr(host_gemm, 'choice', lambda prefer_own=False: host_gemm.decide(
        'avx2', 'Haswell', True, 1, prefer_own))
    reached = []
    numpy_matmul = host_gemm._numpy_matmul
    monkeypatch.setattr(host_gemm, '_numpy_matmul',
                        lambda a, b, out, acc: reached.append(a.shape) or numpy_matmul(
                            a, b, out, acc))
    rng = numpy.random.RandomState(1)
    x = rng.standard_normal((2, 16, 20, 20)).astype(numpy.float32)
    w = rng.standard_normal((16 if transposed else 32, 32 if transposed else 16, 3, 3)
                            ).astype(numpy.float32)
    f = xgrad.conv_transpose if transposed else xgrad.conv
    algorithm = 'col2im' if transposed else 'im2col'
    xa, wa = xgrad.array(x).require_grad(), xgrad.array(w).require_grad()
    with force_conv_algorithm(algorithm):
        y = f(xa, wa, stride=2, pad=1)
        gy = rng.standard_normal(y.shape).astype(numpy.float32)
        if not transposed:
            gw, = xgrad.grad([y], [wa], grad_outputs=[xgrad.array(gy)])
    assert reached == []
    ref = reference.reference_conv_transpose if transposed else reference.reference_conv
    x64, w64 = x.astype(numpy.float64), w.astype(numpy.float64)
    numpy.testing.assert_allclose(y.to_numpy(), ref(x64, w64, stride=2, pad=1),
                                  rtol=1e-4, atol=1e-4)
    if not transposed:  # conv is linear in w: <gw, dw> = <conv(x, dw), gy>
        dw = rng.standard_normal(w.shape)
        expected = numpy.sum(ref(x64, dw, stride=2, pad=1) * gy)
        numpy.testing.assert_allclose(numpy.sum(gw.to_numpy() * dw), expected, rtol=1e-4)


def test_a_pointwise_convolution_on_a_small_map_says_why_it_takes_im2col():
    """ResNet-50's last 1x1 convolutions at 64x64 input: 2x2 maps, whose
    per-sample products of 4 columns would fill an eighth of AVX-512's
    32-column tiles; on a path without tiles of our own (the BLAS's) the
    per-sample GEMMs stay."""
    x, w = (16, 2048, 2, 2), (512, 2048, 1, 1)
    found = xgrad.conv_algorithm(x, w, cpu_path='avx512', threads=1)
    assert found.algorithm == 'im2col'
    assert found.reason.startswith('1x1 window on 4 positions a sample, per-sample GEMMs in '
                                   '32-column tiles cost more than one GEMM over the batch')
    one = Geometry((1, 1), (1, 1), (0, 0), (1, 1), 1)
    assert dispatch._pointwise_pays(x, 512, one, (2, 2), thresholds.for_path('avx512')) is False
    assert dispatch._pointwise_pays(x, 512, one, (2, 2), thresholds.for_path('sse2')) is True
    # (not a 1x1 window: the question does not arise)
    three = Geometry((3, 3), (1, 1), (1, 1), (1, 1), 1)
    assert not dispatch._pointwise_pays(x, 512, three, (2, 2), thresholds.for_path('sse2'))
