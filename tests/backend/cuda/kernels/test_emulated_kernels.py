"""xgrad's CUDA kernels, run on the CPU by the emulator, against NumPy.

Every wrapper of xgrad._kernels on float16/32/64: forward values against
NumPy, backward against the analytic derivatives written in NumPy, one launch
per fused call (none for empty arrays), sizes that are not multiples of the
block, and grid-stride loops (MAX_GRID lowered). float16 computes in float32
and rounds once, so it is held to about 1e-3. The elementwise kernels' 16-byte
packs: every size and placement of the operands (aligned or not) gives the
element-by-element result bit for bit.
"""

import types
import zlib

import math

import numpy
import pytest

from xgrad import _kernels as K
from xgrad._kernels import loader

from . import emulator

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# sums of integers in float64, far below 2**53: exact in any order.

pytestmark = pytest.mark.skipif(not emulator.available(), reason='g++ is not on PATH')

cp = emulator.numpy_cupy
DTYPES = ('float16', 'float32', 'float64')
TOL = {'float16': dict(rtol=2e-3, atol=2e-3),
       'float32': dict(rtol=2e-6, atol=2e-6),
       'float64': dict(rtol=1e-12, atol=1e-13)}
SHAPE = (3, 7, 13)          # 273 elements: two blocks, the second partial


@pytest.fixture(scope='module', autouse=True)
def _built():
    """All three sources compiled up front, in parallel (cached across runs)."""
    emulator.prebuild([(loader.source(n), loader.OPTIONS, loader.name_expressions(n))
                       for n in loader.SOURCES])


@pytest.fixture
def launches():
    del emulator.launches[:]
    return emulator.launches


def _rng(*key):
    return numpy.random.default_rng(zlib.crc32(repr(key).encode()))


def _close(actual, expected, dtype, scale=1.0, **override):
    tol = dict(TOL[dtype], **override)
    assert actual.dtype == numpy.dtype(dtype)
    assert actual.shape == numpy.shape(expected)
    numpy.testing.assert_allclose(actual.astype(numpy.float64), expected,
                                  rtol=tol['rtol'], atol=tol['atol'] * scale)


def _sigmoid(x):
    return 0.5 * numpy.tanh(0.5 * x) + 0.5


# name: (domain, f(x), f'(x)) in float64
UNARY = {
    'negative': ((-3, 3), numpy.negative, lambda x: -numpy.ones_like(x)),
    'absolute': ((-3, 3), numpy.abs, numpy.sign),
    'exp': ((-3, 3), numpy.exp, numpy.exp),
    'log': ((0.1, 4), numpy.log, lambda x: 1 / x),
    'sqrt': ((0.1, 4), numpy.sqrt, lambda x: 0.5 / numpy.sqrt(x)),
    'square': ((-3, 3), numpy.square, lambda x: 2 * x),
    'tanh': ((-3, 3), numpy.tanh, lambda x: 1 / numpy.cosh(x) ** 2),
    'sigmoid': ((-4, 4), _sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x)),
    'relu': ((-3, 3), lambda x: numpy.maximum(x, 0), lambda x: (x > 0) * 1.0),
    'sin': ((-3, 3), numpy.sin, numpy.cos),
    'cos': ((-3, 3), numpy.cos, lambda x: -numpy.sin(x)),
    'tan': ((-1.3, 1.3), numpy.tan, lambda x: 1 / numpy.cos(x) ** 2),
    'arcsin': ((-0.9, 0.9), numpy.arcsin, lambda x: 1 / numpy.sqrt(1 - x * x)),
    'arccos': ((-0.9, 0.9), numpy.arccos, lambda x: -1 / numpy.sqrt(1 - x * x)),
    'arctan': ((-3, 3), numpy.arctan, lambda x: 1 / (1 + x * x)),
    'sinh': ((-3, 3), numpy.sinh, numpy.cosh),
    'cosh': ((-3, 3), numpy.cosh, numpy.sinh),
    'arcsinh': ((-3, 3), numpy.arcsinh, lambda x: 1 / numpy.sqrt(x * x + 1)),
    'arccosh': ((1.2, 4), numpy.arccosh, lambda x: 1 / numpy.sqrt(x * x - 1)),
    'arctanh': ((-0.9, 0.9), numpy.arctanh, lambda x: 1 / (1 - x * x)),
    'expm1': ((-3, 3), numpy.expm1, numpy.exp),
    'log1p': ((-0.8, 3), numpy.log1p, lambda x: 1 / (1 + x)),
    'log2': ((0.1, 4), numpy.log2, lambda x: 1 / (x * numpy.log(2))),
    'log10': ((0.1, 4), numpy.log10, lambda x: 1 / (x * numpy.log(10))),
    'exp2': ((-3, 3), numpy.exp2, lambda x: numpy.exp2(x) * numpy.log(2)),
    'reciprocal': ((0.3, 3), numpy.reciprocal, lambda x: -1 / (x * x)),
    'softplus': ((-5, 5), lambda x: numpy.logaddexp(0, x), _sigmoid),
    'erf': ((-3, 3), numpy.vectorize(math.erf, otypes=[float]),
            lambda x: 2 / math.sqrt(math.pi) * numpy.exp(-x * x)),
}


def _unary_input(name, dtype, shape=SHAPE):
    (lo, hi), _, _ = UNARY[name]
    rng = _rng('unary', name, dtype)
    x = rng.uniform(lo, hi, shape)
    if name == 'reciprocal':
        x *= rng.choice([-1, 1], shape)
    return x.astype(dtype)


def test_the_test_table_covers_every_unary_op():
    assert tuple(UNARY) == K.UNARY


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('name', K.UNARY)
def test_unary_forward_matches_numpy(name, dtype, launches):
    x = _unary_input(name, dtype)
    y = K.unary_forward(cp, name, x)
    _close(y, UNARY[name][1](x.astype(numpy.float64)), dtype)
    assert launches == [loader.template('unary_forward', K.ctype(dtype), loader.functor(name))]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('name', K.UNARY)
def test_unary_backward_is_the_analytic_derivative_in_one_pass(name, dtype, launches):
    x = _unary_input(name, dtype)
    gy = _rng('gy', name, dtype).uniform(-1, 1, x.shape).astype(dtype)
    y = K.unary_forward(cp, name, x)
    reads = K.UNARY_BACKWARD_READS[name]
    del launches[:]
    gx = K.unary_backward(cp, name, gy, x if reads == 'x' else None, y if reads == 'y' else None)
    assert len(launches) == 1
    x64 = x.astype(numpy.float64)
    _close(gx, gy.astype(numpy.float64) * UNARY[name][2](x64), dtype)


@pytest.mark.parametrize('dtype', DTYPES)
def test_unary_gradients_at_zero_and_nan(dtype):
    x = numpy.array([0.0, -0.0, 2.0, -2.0, numpy.nan], dtype)
    gy = numpy.ones_like(x)
    assert K.unary_backward(cp, 'absolute', gy, x, None)[:4].tolist() == [0, 0, 1, -1]
    y = K.unary_forward(cp, 'relu', x)
    assert numpy.isnan(y[4]) and y[:4].tolist() == [0, 0, 2, 0]
    assert K.unary_backward(cp, 'relu', gy, None, y)[:4].tolist() == [0, 0, 1, 0]


@pytest.mark.parametrize('dtype', DTYPES)
def test_softplus_and_sigmoid_do_not_overflow(dtype):
    x = numpy.array([-1000, -30, 0, 30, 1000], dtype) if dtype != 'float16' else \
        numpy.array([-60000, -12, 0, 12, 60000], dtype)
    x64 = x.astype(numpy.float64)
    _close(K.unary_forward(cp, 'softplus', x), numpy.logaddexp(0, x64), dtype, scale=1.0)
    _close(K.unary_forward(cp, 'sigmoid', x), _sigmoid(x64), dtype)
    _close(K.unary_backward(cp, 'softplus', numpy.ones_like(x), x, None), _sigmoid(x64), dtype)


def test_zero_dimensional_arrays_keep_their_shape():
    x = numpy.array(0.5, numpy.float32)
    assert K.unary_forward(cp, 'exp', x).shape == ()
    assert K.unary_backward(cp, 'exp', x, None, x).shape == ()
    assert K.binary_forward(cp, 'add', x, x).shape == ()
    assert [g.shape for g in K.binary_backward(cp, 'multiply', x, x, x)] == [(), ()]
    assert K.add(cp, x, x).shape == ()
    assert K.accumulate(cp, x, x) == 1.0
    assert K.sum_to(cp, x, ()).shape == ()


def test_unary_takes_non_contiguous_input_and_keeps_the_shape():
    x = _unary_input('exp', 'float32', (6, 10))[:, ::2]
    y = K.unary_forward(cp, 'exp', x)
    assert y.shape == (6, 5) and y.flags.c_contiguous
    _close(y, numpy.exp(x.astype(numpy.float64)), 'float32')


def test_unary_backward_needs_the_operand_it_reads():
    x = numpy.ones(3, numpy.float32)
    with pytest.raises(ValueError, match='reads x'):
        K.unary_backward(cp, 'log', x, None, x)
    with pytest.raises(ValueError, match='reads y'):
        K.unary_backward(cp, 'tanh', x, x, None)
    with pytest.raises(ValueError):
        K.unary_backward(cp, 'log', x, numpy.ones(4, numpy.float32), None)
    with pytest.raises(ValueError, match='unknown'):
        K.unary_forward(cp, 'lgamma', x)
    with pytest.raises(TypeError, match='float16, float32 or float64'):
        K.unary_forward(cp, 'exp', numpy.ones(3, numpy.int32))


# ------------------------------------------------------------------- binary

BINARY = {
    'add': (numpy.add, lambda gy, a, b: (gy, gy)),
    'subtract': (numpy.subtract, lambda gy, a, b: (gy, -gy)),
    'multiply': (numpy.multiply, lambda gy, a, b: (gy * b, gy * a)),
    'divide': (numpy.divide, lambda gy, a, b: (gy / b, -gy * a / (b * b))),
    'maximum': (numpy.maximum, lambda gy, a, b: (gy * (a >= b), gy * (a < b))),
    'minimum': (numpy.minimum, lambda gy, a, b: (gy * (a <= b), gy * (a > b))),
}


def _binary_inputs(name, dtype, shape=SHAPE):
    rng = _rng('binary', name, dtype)
    a = rng.uniform(-2, 2, shape)
    b = rng.uniform(-2, 2, shape)
    if name == 'divide':
        b = rng.uniform(0.5, 2, shape) * rng.choice([-1, 1], shape)
    b.reshape(-1)[::4] = a.reshape(-1)[::4]          # ties
    return a.astype(dtype), b.astype(dtype), rng.uniform(-1, 1, shape).astype(dtype)


def test_the_test_table_covers_every_binary_op():
    assert tuple(BINARY) == K.BINARY


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('name', K.BINARY)
def test_binary_forward_matches_numpy(name, dtype, launches):
    a, b, _ = _binary_inputs(name, dtype)
    y = K.binary_forward(cp, name, a, b)
    _close(y, BINARY[name][0](a.astype(numpy.float64), b.astype(numpy.float64)), dtype)
    assert len(launches) == 1


@pytest.mark.parametrize('need', [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('name', K.BINARY)
def test_binary_backward_gives_both_gradients_in_one_pass(name, dtype, need, launches):
    a, b, gy = _binary_inputs(name, dtype)
    reads_a, reads_b = K.BINARY_BACKWARD_READS[name]
    reads = (reads_a if need[0] else '') + (reads_b if need[1] else '')
    ga, gb = K.binary_backward(cp, name, gy, a if 'a' in reads else None,
                               b if 'b' in reads else None, *need)
    assert len(launches) == 1
    expected = BINARY[name][1](*(v.astype(numpy.float64) for v in (gy, a, b)))
    for got, want, needed in zip((ga, gb), expected, need):
        if needed:
            _close(got, want, dtype)
        else:
            assert got is None


@pytest.mark.parametrize('name', ['maximum', 'minimum'])
def test_ties_give_the_gradient_to_a(name):
    a = numpy.array([1.0, 2.0, 3.0], numpy.float32)
    b = numpy.array([1.0, 1.0, 4.0], numpy.float32)
    ga, gb = K.binary_backward(cp, name, numpy.ones_like(a), a, b)
    assert ga[0] == 1 and gb[0] == 0 and ga[1:].tolist() != gb[1:].tolist()


def test_binary_needs_nothing_and_checks_operands(launches):
    a = numpy.ones(3, numpy.float32)
    assert K.binary_backward(cp, 'multiply', a, a, a, False, False) == (None, None)
    assert launches == []
    with pytest.raises(ValueError, match='reads b'):
        K.binary_backward(cp, 'multiply', a, a, None)
    with pytest.raises(ValueError):
        K.binary_forward(cp, 'add', a, numpy.ones(4, numpy.float32))
    with pytest.raises(ValueError):
        K.binary_forward(cp, 'add', a, numpy.ones(3, numpy.float64))
    with pytest.raises(ValueError, match='unknown'):
        K.binary_forward(cp, 'power', a, a)


# -------------------------------------------------------------- accumulate

@pytest.mark.parametrize('dtype', DTYPES)
def test_accumulate_adds_in_place_and_add_makes_a_new_array(dtype, launches):
    rng = _rng('acc', dtype)
    acc = rng.uniform(-1, 1, SHAPE).astype(dtype)
    g = rng.uniform(-1, 1, SHAPE).astype(dtype)
    expected = acc.astype(numpy.float64) + g.astype(numpy.float64)
    before = acc.copy()
    out = K.add(cp, acc, g)
    _close(out, expected, dtype)
    assert out is not acc and (acc == before).all()
    assert K.accumulate(cp, acc, g) is acc
    _close(acc, expected, dtype)
    assert len(launches) == 2


def test_accumulate_takes_a_non_contiguous_gradient_but_not_accumulator():
    acc = numpy.zeros((4, 3), numpy.float32)
    g = numpy.arange(24, dtype=numpy.float32).reshape(4, 6)[:, ::2]
    K.accumulate(cp, acc, g)
    assert (acc == g).all()
    with pytest.raises(ValueError, match='contiguous'):
        K.accumulate(cp, numpy.zeros((4, 6), numpy.float32)[:, ::2], acc)
    with pytest.raises(ValueError):
        K.accumulate(cp, acc, numpy.zeros((3, 4), numpy.float32))


# ------------------------------------------------------------------ sum_to

SUM_TO = [
    # (x shape, target, kernel or None for NumPy's fallback)
    ((2, 3, 4), (3, 1), 'sum_abc_blocks'),          # [r] k [r]
    ((2, 3, 4), (4,), 'sum_abc_blocks'),            # [r] k
    ((2, 3, 4), (2, 1, 1), 'sum_abc_blocks'),       # k [r]
    ((2, 3, 4), (), 'sum_abc_blocks'),              # everything, scalar target
    ((2, 3, 4), (1, 1, 1), 'sum_abc_blocks'),
    ((300,), (1,), 'sum_abc_blocks'),               # more terms than threads
    ((3, 2, 300), (2, 1), 'sum_abc_blocks'),        # rows of C >= block
    ((2, 3, 4), (2, 3, 4), 'sum_abc_columns'),      # nothing: a copy
    ((), (), 'sum_abc_columns'),
    ((2, 1, 4), (1, 4), 'sum_abc_blocks'),          # size-1 axes drop out
    ((1, 3, 1), (3, 1), 'sum_abc_columns'),
    ((5, 1300), (1300,), 'sum_abc_columns'),        # many columns
    ((1300, 3), (1300, 1), 'sum_abc_columns'),      # many short rows
    ((3, 4, 5), (3, 1, 5), None),                   # k [r] k: fallback
    ((2, 3, 4, 5), (1, 3, 1, 5), None),
    ((0, 3), (3,), 'zeros'),
    ((0, 3), (1, 3), 'zeros'),
    ((3, 0), (3, 1), 'zeros'),
    ((3, 0), (0,), 'zeros'),
]


def _summed_axes(xshape, shape):
    """The axes of x that sum_to(x, shape) sums (NumPy broadcasting in reverse)."""
    lead = len(xshape) - len(shape)
    return tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and xshape[lead + i] != 1)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('xshape,shape,kernel', SUM_TO)
def test_sum_to_matches_numpy(xshape, shape, kernel, dtype, launches):
    x = _rng('sum_to', xshape, dtype).uniform(-1, 1, xshape).astype(dtype)
    y = K.sum_to(cp, x, shape)
    axes = _summed_axes(xshape, shape)
    expected = x.astype(numpy.float64).sum(axis=axes).reshape(shape)
    terms = max(1, x.size // max(1, y.size))
    _close(y, expected, dtype, scale=numpy.sqrt(terms),
           **({'rtol': 1e-2} if dtype == 'float16' and kernel is None else {}))
    if kernel in (None, 'zeros'):
        assert launches == []
    else:
        assert launches == ['xgrad::{}<{}>'.format(kernel, K.ctype(dtype))]


SPLIT = [((70000,), ()), ((3, 70000), (3, 1)), ((300, 2, 300), (1, 2, 1))]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('xshape,shape', SPLIT)
def test_sum_to_splits_long_sums_over_blocks(xshape, shape, dtype, launches):
    x = _rng('split', xshape, dtype).uniform(-1, 1, xshape).astype(dtype)
    y = K.sum_to(cp, x, shape)
    axes = _summed_axes(xshape, shape)
    expected = x.astype(numpy.float64).sum(axis=axes).reshape(shape)
    assert y.shape == expected.shape and y.dtype == x.dtype
    _close(y, expected, dtype, scale=numpy.sqrt(x.size // y.size))
    assert launches == ['xgrad::{}<{}>'.format(k, K.ctype(dtype))
                        for k in ('sum_abc_split', 'sum_partials')]


COLUMN_SPLIT = [((300, 1024), (1024,)), ((37, 1030), (1, 1030)), ((2, 40, 1100), (1100,))]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('xshape,shape', COLUMN_SPLIT)
def test_sum_to_splits_long_columns_over_blocks(xshape, shape, dtype, launches):
    """Too few columns for one thread each to fill the GPU: each column is
    split into runs of rows (uneven last run included), then added."""
    x = _rng('columns', xshape, dtype).uniform(-1, 1, xshape).astype(dtype)
    y = K.sum_to(cp, x, shape)
    axes = _summed_axes(xshape, shape)
    expected = x.astype(numpy.float64).sum(axis=axes).reshape(shape)
    assert y.shape == expected.shape and y.dtype == x.dtype
    _close(y, expected, dtype, scale=numpy.sqrt(x.size // y.size))
    assert launches == ['xgrad::{}<{}>'.format(k, K.ctype(dtype))
                        for k in ('sum_abc_columns_split', 'sum_partials')]


BIG_SUM_TO = [((1 << 22,), ()), ((4096, 1024), (1024,)), ((1024, 4096), (1024, 1)),
              ((64, 1024, 64), (1024, 1)), ((4, 1 << 20), (1 << 20,)), ((1 << 16, 64), (64,)),
              ((1 << 14, 256), (256,)), ((8192, 512), (512,)), ((1 << 20, 4), (4,)),
              ((1 << 15, 128), (1, 128)), ((1 << 17, 32), (32,)), ((2048, 2048), (1, 2048)),
              ((1024, 1024, 4), (1024, 1))]


@pytest.mark.parametrize('xshape,shape', BIG_SUM_TO)
def test_sum_to_of_a_large_array_launches_enough_blocks(monkeypatch, xshape, shape):
    """Every reduction shape of 4M elements starts with at least 128 blocks
    (an H200 has 132 SMs): none leaves most of the GPU idle. (Launches are
    recorded, not run.)"""
    grids = []
    monkeypatch.setattr(K, '_launch', lambda cp, source, expression, grid, args:
                        grids.append((expression.split('<')[0], grid)))
    K.sum_to(cp, numpy.zeros(xshape, numpy.float32), shape)
    assert grids and grids[0][1] >= 128, grids


@pytest.mark.parametrize('xshape,shape', [((5, 3, 13), (3, 1)), ((40,), (1,)), ((7, 2), (2,))])
def test_sum_to_split_chunks_cover_every_term_once(monkeypatch, xshape, shape, launches):
    """Chunks that end inside a row of C, a last chunk shorter than the others."""
    monkeypatch.setattr(K, 'SPLIT_MIN_TERMS', 2)
    monkeypatch.setattr(K, 'SPLIT_TERMS_PER_BLOCK', 3)
    x = numpy.arange(numpy.prod(xshape), dtype=numpy.float64).reshape(xshape) + 1
    y = K.sum_to(cp, x, shape)
    axes = _summed_axes(xshape, shape)
    numpy.testing.assert_array_equal(y, x.sum(axis=axes).reshape(shape))
    assert [k.split('<')[0] for k in launches] == ['xgrad::sum_abc_split', 'xgrad::sum_partials']


def test_sum_to_result_is_new_and_rejects_bad_shapes():
    x = numpy.ones((2, 3), numpy.float32)
    y = K.sum_to(cp, x, (2, 3))
    assert y is not x and not numpy.shares_memory(x, y)
    assert K.sum_to(cp, x, 3).tolist() == [2, 2, 2]
    for bad in [(3, 2), (2,), (1, 2, 3), (2, 2)]:
        with pytest.raises(ValueError):
            K.sum_to(cp, x, bad)


# ------------------------------------------------------------------ softmax

SOFTMAX = [((2, 3, 5), 0), ((2, 3, 5), 1), ((2, 3, 5), 2), ((2, 3, 5), -1),
           ((2, 300, 2), 1),            # cols > block
           ((3, 1, 4), 1),              # cols == 1
           ((1, 1, 1), 0)]


def _softmax64(x, axis):
    e = numpy.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize('log', [False, True], ids=['softmax', 'log_softmax'])
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape,axis', SOFTMAX)
def test_softmax_forward_and_backward_match_numpy(shape, axis, dtype, log, launches):
    rng = _rng('softmax', shape, axis, dtype, log)
    x = rng.uniform(-4, 4, shape).astype(dtype)
    gy = rng.uniform(-1, 1, shape).astype(dtype)
    x64, gy64 = x.astype(numpy.float64), gy.astype(numpy.float64)
    p = _softmax64(x64, axis)
    y = K.softmax(cp, x, axis, log=log)
    _close(y, numpy.log(p) if log else p, dtype)
    gx = K.softmax_backward(cp, gy, y, axis, log=log)
    if log:
        expected = gy64 - p * gy64.sum(axis=axis, keepdims=True)
    else:
        expected = p * (gy64 - (gy64 * p).sum(axis=axis, keepdims=True))
    _close(gx, expected, dtype)
    prefix = 'log_softmax' if log else 'softmax'
    assert launches == ['xgrad::{}_{}<{}>'.format(prefix, step, K.ctype(dtype))
                        for step in ('forward', 'backward')]


@pytest.mark.parametrize('dtype', DTYPES)
def test_softmax_is_shift_invariant_and_finite_for_large_inputs(dtype):
    big = 60000 if dtype == 'float16' else 1e30
    x = numpy.array([[big, big - 1, -big], [0, 1, 2]], dtype)
    y = K.softmax(cp, x, 1)
    _close(y, _softmax64(x.astype(numpy.float64), 1), dtype)
    assert numpy.isfinite(K.softmax(cp, x, 1, log=True)[:, :2]).all()


def test_softmax_of_empty_arrays_launches_nothing(launches):
    for shape, axis in [((0, 3), 1), ((3, 0), 1), ((2, 0, 4), 0)]:
        x = numpy.zeros(shape, numpy.float32)
        assert K.softmax(cp, x, axis).shape == shape
        assert K.softmax_backward(cp, x, x, axis, log=True).shape == shape
    assert launches == []
    with pytest.raises(ValueError):
        K.softmax(cp, numpy.zeros((2, 3), numpy.float32), 2)


# ---------------------------------------------------- softmax cross entropy

@pytest.mark.parametrize('labels', ['int32', 'int64'])
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('n,c', [(7, 5), (3, 300), (4, 1)])
def test_softmax_cross_entropy_forward_and_backward(n, c, dtype, labels, launches):
    rng = _rng('sce', n, c, dtype, labels)
    x = rng.uniform(-4, 4, (n, c)).astype(dtype)
    t = rng.integers(0, c, n).astype(labels)
    t[1] = -1                                     # an ignored row
    gloss = rng.uniform(0.5, 2, n).astype(dtype)
    x64 = x.astype(numpy.float64)
    keep = t != -1
    lse = numpy.log(numpy.exp(x64 - x64.max(1, keepdims=True)).sum(1)) + x64.max(1)
    expected = numpy.where(keep, lse - x64[numpy.arange(n), numpy.maximum(t, 0)], 0)
    loss = K.softmax_cross_entropy(cp, x, t)
    _close(loss, expected, dtype)
    assert loss[1] == 0
    gx = K.softmax_cross_entropy_backward(cp, gloss, x, t)
    onehot = numpy.zeros((n, c))
    onehot[numpy.arange(n)[keep], t[keep]] = 1
    expected = gloss.astype(numpy.float64)[:, None] * (_softmax64(x64, 1) - onehot) * keep[:, None]
    _close(gx, expected, dtype)
    assert (gx[1] == 0).all()
    ct, lt = K.ctype(dtype), {'int32': 'int', 'int64': 'long long'}[labels]
    assert launches == ['xgrad::softmax_cross_entropy_{}<{}, {}>'.format(step, ct, lt)
                        for step in ('forward', 'backward')]


def test_softmax_cross_entropy_checks_shapes_and_label_types(launches):
    x = numpy.zeros((2, 3), numpy.float32)
    t = numpy.array([0, 2], numpy.uint8)          # other integers become int64
    assert K.softmax_cross_entropy(cp, x, t).shape == (2,)
    assert launches == ['xgrad::softmax_cross_entropy_forward<float, long long>']
    with pytest.raises(TypeError):
        K.softmax_cross_entropy(cp, x, numpy.zeros(2, numpy.float32))
    with pytest.raises(ValueError):
        K.softmax_cross_entropy(cp, x, numpy.zeros(3, numpy.int32))
    with pytest.raises(ValueError):
        K.softmax_cross_entropy_backward(cp, numpy.ones(3, numpy.float32), x,
                                         numpy.zeros(2, numpy.int32))
    empty = numpy.zeros((0, 3), numpy.float32)
    del launches[:]
    assert K.softmax_cross_entropy(cp, empty, numpy.zeros(0, numpy.int64)).shape == (0,)
    assert launches == []


# --------------------------------------------------------- empty, grid stride

def test_empty_arrays_launch_nothing(launches):
    e = numpy.zeros((0, 4), numpy.float32)
    assert K.unary_forward(cp, 'exp', e).shape == (0, 4)
    assert K.unary_backward(cp, 'exp', e, None, e).shape == (0, 4)
    assert K.binary_forward(cp, 'add', e, e).shape == (0, 4)
    assert [g.shape for g in K.binary_backward(cp, 'divide', e, e, e)] == [(0, 4)] * 2
    assert K.accumulate(cp, e, e) is e
    assert K.add(cp, e, e).shape == (0, 4)
    assert launches == []


def test_small_grids_cover_every_element_by_striding(monkeypatch, launches):
    monkeypatch.setattr(K, 'MAX_GRID', 2)
    x = _unary_input('tanh', 'float32', (1000,))        # needs 4 blocks
    _close(K.unary_forward(cp, 'tanh', x), numpy.tanh(x.astype(numpy.float64)), 'float32')
    x = _rng('stride').uniform(-1, 1, (5, 3, 7)).astype(numpy.float32)
    x64 = x.astype(numpy.float64)
    _close(K.softmax(cp, x, 1), _softmax64(x64, 1), 'float32')          # 35 rows
    _close(K.sum_to(cp, x, (3, 7)), x64.sum(0), 'float32')              # 21 blocks' worth
    wide = _rng('wide').uniform(-1, 1, (2, 1300)).astype(numpy.float32)
    _close(K.sum_to(cp, wide, (1300,)), wide.astype(numpy.float64).sum(0), 'float32')
    t = numpy.array([0, 1, -1, 2, 0], numpy.int64)
    loss = K.softmax_cross_entropy(cp, x[:, 0], t)
    assert loss[2] == 0 and numpy.isfinite(loss).all()
    assert len(launches) == 5


# ----------------------------------------------------------- 16-byte packs
# The elementwise kernels move 16-byte packs when every pointer is 16-byte
# aligned, else element by element, with a scalar tail: every placement of the
# operands must give the all-scalar result bit for bit (and NumPy's, within
# the tolerance), whatever the size. The emulator reports a pack access that
# is not 16-byte aligned (the device's misaligned address error).

PACK_SIZES = (0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 1000)
# (offset of each input, offset of the outputs), in elements past a 16-byte
# boundary; float64 at 2 is aligned again.
PLACEMENTS = [((0, 0, 0), 0), ((1, 1, 1), 1), ((1, 2, 3), 0), ((0, 0, 0), 3),
              ((2, 0, 0), 0), ((0, 3, 0), 2), ((2, 2, 2), 2)]
SCALAR = ((1, 1, 1), 1)   # no pointer aligned in any dtype: the reference


def _placed(a, offset):
    """A C-contiguous copy of ``a`` whose data starts ``offset`` elements past
    a 16-byte boundary (a view into a larger buffer)."""
    a = numpy.asarray(a)
    item = a.dtype.itemsize
    raw = numpy.empty(a.size + 32 // item, a.dtype)
    skip = (-raw.ctypes.data % 16) // item + offset
    out = raw[skip:skip + a.size].reshape(a.shape)
    out[...] = a
    assert out.flags.c_contiguous
    assert not a.size or out.ctypes.data % 16 == offset * item % 16
    return out


def _cp_placing_outputs(offset):
    """The emulator's array module, its new (NaN-filled) arrays placed at
    ``offset`` elements past a 16-byte boundary."""
    def empty(shape, dtype=float, order='C'):
        return _placed(emulator.numpy_cupy.empty(shape, dtype, order), offset)

    placing = types.SimpleNamespace(
        empty=empty, ascontiguousarray=numpy.ascontiguousarray,
        RawModule=cp.RawModule, cuda=cp.cuda)
    return placing


# name: (kernel, call(cp, operands) -> results, [(lo, hi)] per operand,
#        NumPy's float64 results of the operands)
def _acc(c, acc, g):
    return (K.accumulate(c, acc, g),)


PACKED = {
    'tanh_forward': ('unary_forward', lambda c, x: (K.unary_forward(c, 'tanh', x),),
                     [(-3, 3)], lambda x: (numpy.tanh(x),)),
    'tanh_backward': ('unary_backward',
                      lambda c, gy, y: (K.unary_backward(c, 'tanh', gy, None, y),),
                      [(-1, 1), (-0.9, 0.9)], lambda gy, y: (gy * (1 - y * y),)),
    'log_backward': ('unary_backward',
                     lambda c, gy, x: (K.unary_backward(c, 'log', gy, x, None),),
                     [(-1, 1), (0.1, 4)], lambda gy, x: (gy / x,)),
    'negative_backward': ('unary_backward',
                          lambda c, gy: (K.unary_backward(c, 'negative', gy, None, None),),
                          [(-1, 1)], lambda gy: (-gy,)),
    'multiply_forward': ('binary_forward',
                         lambda c, a, b: (K.binary_forward(c, 'multiply', a, b),),
                         [(-2, 2), (-2, 2)], lambda a, b: (a * b,)),
    'square_as_x_times_x': ('binary_forward',
                            lambda c, a: (K.binary_forward(c, 'multiply', a, a),),
                            [(-2, 2)], lambda a: (a * a,)),
    'divide_backward': ('binary_backward',
                        lambda c, gy, a, b: K.binary_backward(c, 'divide', gy, a, b),
                        [(-1, 1), (-2, 2), (0.5, 2)],
                        lambda gy, a, b: (gy / b, -gy * a / (b * b))),
    'multiply_backward_a_only': (
        'binary_backward',
        lambda c, gy, b: K.binary_backward(c, 'multiply', gy, None, b, True, False)[:1],
        [(-1, 1), (-2, 2)], lambda gy, b: (gy * b,)),
    'subtract_backward_b_only': (
        'binary_backward',
        lambda c, gy: K.binary_backward(c, 'subtract', gy, None, None, False, True)[1:],
        [(-1, 1)], lambda gy: (-gy,)),
    'accumulate': ('accumulate', _acc, [(-1, 1), (-1, 1)], lambda acc, g: (acc + g,)),
    'add3': ('add3', lambda c, a, b: (K.add(c, a, b),), [(-1, 1), (-1, 1)],
             lambda a, b: (a + b,)),
}


def _packed_operands(name, dtype, n):
    rng = _rng('packed', name, dtype, n)
    return [rng.uniform(lo, hi, n).astype(dtype) for lo, hi in PACKED[name][2]]


def _run_placed(name, operands, placement):
    """The results of case ``name`` with each operand (copied) and each new
    array at the placement's offsets; accumulate's acc is at the outputs'."""
    offsets, out_offset = placement
    call = PACKED[name][1]
    placed = [_placed(a, off) for a, off in zip(operands, offsets)]
    if name == 'accumulate':
        placed[0] = _placed(operands[0], out_offset)
    results = call(_cp_placing_outputs(out_offset), *placed)
    for r in results:
        assert not r.size or r.ctypes.data % 16 == out_offset * r.itemsize % 16
    return results


def _bits(a):
    return a.view('u{}'.format(a.dtype.itemsize))


def _check_placements(name, dtype, operands, placements, launches):
    """Every placement gives the all-scalar result bit for bit, one launch
    each (none for empty arrays); that result is NumPy's within tolerance."""
    n = operands[0].size
    del launches[:]
    reference = _run_placed(name, operands, SCALAR)
    expected = PACKED[name][3](*(a.astype(numpy.float64) for a in operands))
    for got, want in zip(reference, expected):
        _close(got, want, dtype)
    for placement in placements:
        for got, want in zip(_run_placed(name, operands, placement), reference):
            numpy.testing.assert_array_equal(
                _bits(got), _bits(want),
                err_msg='{} {} n={} placement {}'.format(name, dtype, n, placement))
    kernel = loader.template(PACKED[name][0], K.ctype(dtype)).split('<')[0]
    assert len(launches) == (len(placements) + 1) * (n > 0)
    assert all(k.startswith(kernel + '<') for k in launches)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('name', PACKED)
def test_packs_give_the_scalar_result_at_every_size_and_placement(name, dtype, launches):
    for n in PACK_SIZES:
        _check_placements(name, dtype, _packed_operands(name, dtype, n), PLACEMENTS, launches)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('name', ['tanh_forward', 'divide_backward', 'accumulate'])
def test_packs_stride_over_the_grid_when_it_is_lowered(name, dtype, monkeypatch, launches):
    pack = 16 // numpy.dtype(dtype).itemsize
    n = 2 * (2 * K.XGRAD_BLOCK * pack) + 5      # each thread: 2 packs, then the tail
    operands = _packed_operands(name, dtype, n)
    full = _run_placed(name, operands, ((0, 0, 0), 0))
    monkeypatch.setattr(K, 'MAX_GRID', 2)
    _check_placements(name, dtype, operands, [((0, 0, 0), 0), ((0, 1, 0), 0)], launches)
    for got, want in zip(_run_placed(name, operands, ((0, 0, 0), 0)), full):
        numpy.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize('dtype', DTYPES)
def test_packs_are_exact_where_numpy_is(dtype):
    """Sums, products and negation round once from exact values (float16 in
    float32, as NumPy's): the kernels' results equal NumPy's exactly."""
    for n in (17, 1000):
        a, b = _packed_operands('add3', dtype, n)
        for placement in (((0, 0, 0), 0), SCALAR, ((1, 2, 3), 0)):
            got, = _run_placed('add3', [a, b], placement)
            numpy.testing.assert_array_equal(got, a + b)        # exact, see the docstring
            got, = _run_placed('multiply_forward', [a, b], placement)
            numpy.testing.assert_array_equal(got, a * b)        # exact, see the docstring
            got, = _run_placed('accumulate', [a, b], placement)
            numpy.testing.assert_array_equal(got, a + b)        # exact, see the docstring
            got, = _run_placed('negative_backward', [a], placement)
            numpy.testing.assert_array_equal(got, -a)           # exact, see the docstring


def test_the_grid_counts_packs_not_elements(monkeypatch):
    assert [K._packs_grid(n, numpy.float32) for n in (1, 4 * 256, 4 * 256 + 1)] == [1, 1, 2]
    assert K._packs_grid(8 * 256 * 3, numpy.float16) == 3
    assert K._packs_grid(2 * 256 * 3 + 1, numpy.float64) == 4
    assert K._packs_grid(10 ** 9, numpy.float32) == K.MAX_GRID
    monkeypatch.setattr(K, 'MAX_GRID', 2)
    assert K._packs_grid(4 * 256 * 3, numpy.float32) == 2
    assert K._elements_grid(4 * 256) == 2      # sum_to's one thread per element


PACK_TEST_CODE = r"""
namespace xgrad {
template <class T>
__global__ void copy_pack_at(const T* x, T* y, long long i) {
    compute_t<T> c[16 / sizeof(T)];
    if (threadIdx.x == 0) {
        load(width<16 / sizeof(T)>(), x, i, c);
        store(width<16 / sizeof(T)>(), y, i, c);
    }
}
}  // namespace xgrad
"""


@pytest.mark.parametrize('dtype', DTYPES)
def test_emulator_reports_a_pack_access_that_is_not_16_byte_aligned(dtype):
    module = emulator.RawModule(
        code=loader.source('elementwise.cu') + PACK_TEST_CODE, options=loader.OPTIONS,
        name_expressions=['xgrad::copy_pack_at<{}>'.format(K.ctype(dtype))])
    f = module.get_function('xgrad::copy_pack_at<{}>'.format(K.ctype(dtype)))
    pack = 16 // numpy.dtype(dtype).itemsize
    x = _placed(numpy.arange(3 * pack, dtype=dtype), 0)
    y = _placed(numpy.zeros(3 * pack, dtype), 0)
    f((1,), (32,), (x, y, numpy.int64(pack)))
    assert (y[pack:2 * pack] == x[pack:2 * pack]).all() and (y[:pack] == 0).all()
    with pytest.raises(emulator.LaunchError, match='misaligned'):
        f((1,), (32,), (x, y, numpy.int64(1)))
    f((1,), (32,), (x, y, numpy.int64(0)))          # the flag does not stick


# ------------------------------------------------------------------ loader

def test_each_source_compiles_once_per_device_and_kernels_are_cached(monkeypatch):
    built = []

    class CountingModule(emulator.RawModule):
        def __init__(self, *args, **kwargs):
            built.append(kwargs['name_expressions'])
            super().__init__(*args, **kwargs)

    device = types.SimpleNamespace(id=0)
    fake = types.SimpleNamespace(**{k: getattr(cp, k) for k in (
        'empty', 'ascontiguousarray', 'zeros', 'sum')})
    fake.RawModule = CountingModule
    fake.cuda = types.SimpleNamespace(Device=lambda: device)
    x = numpy.ones(5, numpy.float32)
    for name in ('exp', 'tanh', 'log'):
        K.unary_forward(fake, name, x)
    K.binary_forward(fake, 'add', x.astype(numpy.float64), x.astype(numpy.float64))
    assert len(built) == 1 and list(built[0]) == list(loader.name_expressions('elementwise.cu'))
    exp = 'xgrad::unary_forward<float, xgrad::Exp>'
    assert loader.get_function(fake, 'elementwise.cu', exp) is \
        loader.get_function(fake, 'elementwise.cu', exp)
    device.id = 1
    K.unary_forward(fake, 'exp', x)
    assert len(built) == 2
    with pytest.raises(ValueError):
        loader.get_function(fake, 'elementwise.cu', 'xgrad::unary_forward<int, xgrad::Exp>')


# ----------------------------------------------------------------- emulator

EMULATOR_TEST_CODE = r'''
template <class T>
__global__ void reverse_block(const T* x, T* y, long long n) {
    __shared__ T s[XGRAD_BLOCK];
    const unsigned t = threadIdx.x;
    s[t] = t < n ? x[t] : T(0);
    __syncthreads();
    if (t < n) y[t] = s[n - 1 - t];
}
// threads >= 4 return before the barrier; they count as arrived
__global__ void early_exit(int* out) {
    __shared__ int s[4];
    if (threadIdx.x >= 4) return;
    s[threadIdx.x] = (int)threadIdx.x + 1;
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = s[0] + s[1] + s[2] + s[3];
}
__global__ void divergent(int* out) {
    if (threadIdx.x < 8) { __syncthreads(); }
    __syncthreads();
    out[0] = 1;
}
'''


@pytest.fixture(scope='module')
def test_module():
    return emulator.RawModule(code='#define XGRAD_BLOCK 256\n' + EMULATOR_TEST_CODE,
                              options=('-std=c++17',),
                              name_expressions=['reverse_block<float>', 'early_exit', 'divergent'])


def test_emulator_runs_barriers_and_shared_memory_like_a_block(test_module):
    x = numpy.arange(100, dtype=numpy.float32)
    y = numpy.zeros_like(x)
    test_module.get_function('reverse_block<float>')((1,), (256,), (x, y, numpy.int64(100)))
    assert (y == x[::-1]).all()
    out = numpy.zeros(3, numpy.int32)
    test_module.get_function('early_exit')((3,), (64,), (out,))
    assert out.tolist() == [10, 10, 10]


def test_emulator_reports_divergent_barriers(test_module):
    with pytest.raises(emulator.LaunchError, match='different __syncthreads'):
        test_module.get_function('divergent')((1,), (32,), (numpy.zeros(1, numpy.int32),))


def test_emulator_checks_arguments_against_the_kernel_signature(test_module):
    f = test_module.get_function('reverse_block<float>')
    x = numpy.zeros(8, numpy.float32)
    with pytest.raises(TypeError, match='NumPy scalars'):
        f((1,), (256,), (x, x, 8))
    with pytest.raises(TypeError, match='int32 scalar'):
        f((1,), (256,), (x, x, numpy.int32(8)))
    with pytest.raises(TypeError, match='float64 array'):
        f((1,), (256,), (x.astype(numpy.float64), x, numpy.int64(8)))
    with pytest.raises(ValueError, match='contiguous'):
        f((1,), (256,), (numpy.zeros(16, numpy.float32)[::2], x, numpy.int64(8)))
    with pytest.raises(TypeError, match='takes 3'):
        f((1,), (256,), (x, x))
    with pytest.raises(KeyError):
        test_module.get_function('reverse_block<double>')
