"""The fused two-operand loops of xgrad/_backend/native_kernels.pyx.

They replace NumPy's ufunc calls on the hot path of small graphs, so each is
held to NumPy's own result bit for bit: the arithmetic with a number operand
(``x * 0.99`` as an op hands it over), the float32 gradient formulas (which
must compute in float32, as NumPy's formula does) and compare_select, the
gradient of maximum and minimum. Operands a loop does not take give None (or
NumPy's result), never a different value or dtype.
"""

import warnings

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels as K
from xgrad.hooks import OpHook

F32, F64 = numpy.float32, numpy.float64
# (), size 1, 2-d, odd 1-d, and one past the size where the loop drops the GIL
SHAPES = [(), (1,), (3, 4), (101,), (40000,)]
ARITHMETIC = [('multiply', K.multiply, numpy.multiply), ('add', K.add, numpy.add),
              ('subtract', K.subtract, numpy.subtract), ('divide', K.divide, numpy.divide)]


def _values(shape, dtype, seed=0):
    rng = numpy.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _same(ours, theirs):
    """Equal bit for bit, in dtype and shape (a 0-d result may be an array or
    a NumPy scalar, as NumPy's own ufuncs give)."""
    assert type(ours) is numpy.ndarray or (numpy.ndim(ours) == 0 and isinstance(
        ours, numpy.generic))
    ours = numpy.asarray(ours)
    assert ours.dtype == theirs.dtype and ours.shape == numpy.shape(theirs)
    assert ours.tobytes() == numpy.asarray(theirs).tobytes()


@pytest.mark.parametrize('shape', SHAPES, ids=str)
@pytest.mark.parametrize('number', [0.99, F32(0.99), F64(0.99), -1e-30, float('inf'),
                                    float('nan')], ids=repr)
@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('name, ours, ufunc', ARITHMETIC, ids=[a[0] for a in ARITHMETIC])
def test_a_number_operand_gives_numpys_values(name, ours, ufunc, dtype, number, shape):
    x = _values(shape, dtype)
    with numpy.errstate(all='ignore'):
        for args in ((x, number), (number, x)):
            theirs = ufunc(*args)
            _same(ours(*args), theirs)


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('name, ours, ufunc', ARITHMETIC, ids=[a[0] for a in ARITHMETIC])
def test_a_number_and_a_broadcast_array(name, ours, ufunc, dtype):
    """A sum's gradient is one value broadcast (every stride 0): times a
    number, the result is a full array of its shape."""
    x = numpy.broadcast_to(dtype(1.5), (3, 4))
    for args in ((x, 0.25), (dtype(-2.0), x)):
        _same(ours(*args), ufunc(*args))


@pytest.fixture(params=[1, 3], ids=['1thread', '3threads'])
def threads(request):
    """xgrad's pool limited to 1 or 3 threads for the test (3: the large
    operands below split, NumPy's loop no longer takes them)."""
    before = K.max_threads()
    K.set_thread_limit(request.param)
    yield request.param
    K.set_thread_limit(before)


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('name, ours, ufunc', ARITHMETIC, ids=[a[0] for a in ARITHMETIC])
def test_a_large_array_and_a_number_on_threads(name, ours, ufunc, dtype, threads):
    """``x * 0.5``-style ops past the split size: the number second and
    first, NumPy's values bit for bit."""
    x = _values((300, 1000), dtype)
    for number in (0.5, -3.25, dtype(1e-3)):
        _same(ours(x, number), ufunc(x, dtype(number)))
        _same(ours(number, x), ufunc(dtype(number), x))


PLANES = [((32, 256, 14, 14), (256, 1, 1)), ((8, 64, 56, 56), (1, 64, 1, 1)),
          ((4, 6, 5, 8, 3), (6, 5, 1, 1)),     # a block of two dims over planes of 24
          ((64, 100, 2), (100, 1)),            # planes of 2: NumPy's loop
          ((3, 7, 9), (7, 1)), ((2, 3, 4, 4), (3, 4, 1))]


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('name, ours, ufunc', ARITHMETIC, ids=[a[0] for a in ARITHMETIC])
@pytest.mark.parametrize('big, small', PLANES, ids=str)
def test_a_channel_operand_over_planes(big, small, name, ours, ufunc, dtype, threads):
    """A (C, 1, 1) bias or scale over (N, C, H, W), on either side: NumPy's
    values bit for bit, in its shape and dtype."""
    a = _values(big, dtype, 1)
    b = _values(small, dtype, 2) + 7
    _same(ours(a, b), ufunc(a, b))
    _same(ours(b, a), ufunc(b, a))


ROWS = [((128, 512), (512,)), ((1024, 1000), (1000,)), ((7, 13), (13,)), ((3, 4, 33), (1, 33)),
        ((6, 5, 8), (5, 8)), ((2, 300, 700), (1, 1, 700)), ((40000, 3), (3,))]


@pytest.mark.parametrize('path', ['sse2', 'avx2', 'avx512'])
@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('name, ours, ufunc', ARITHMETIC, ids=[a[0] for a in ARITHMETIC])
@pytest.mark.parametrize('big, small', ROWS, ids=str)
def test_a_row_operand_along_a_batch(on_cpu_path, path, big, small, name, ours, ufunc, dtype,
                                     threads):
    """A bias or scale row repeated along the leading axes, on either side,
    at every size (vector_math.h's row loops on each CPU path, not NumPy's
    buffered broadcast): NumPy's values bit for bit, its shape and dtype,
    inf and NaN included."""
    on_cpu_path(path)
    a = _values(big, dtype, 1)
    b = _values(small, dtype, 2) + 7
    a.reshape(-1)[:3] = [numpy.inf, numpy.nan, 0.0]
    b.reshape(-1)[:1] = 0.0  # (x / 0 and 0 / 0)
    with numpy.errstate(all='ignore'):
        _same(ours(a, b), ufunc(a, b))
        _same(ours(b, a), ufunc(b, a))


@pytest.mark.parametrize('path', ['sse2', 'avx2', 'avx512'])
@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('name, ours, ufunc', ARITHMETIC, ids=[a[0] for a in ARITHMETIC])
@pytest.mark.parametrize('big, small', PLANES[:3] + ROWS[:2] + [((64, 1, 300), (1, 7, 1))],
                         ids=str)
def test_a_broadcast_view_of_the_others_shape(on_cpu_path, path, big, small, name, ours,
                                              ufunc, dtype, threads):
    """An operand that is a broadcast view of the other's shape (stride 0:
    the gradient of a mean or sum) takes the row and plane loops through its
    own elements, on either side and at every size: NumPy's values bit for
    bit, inf and NaN included; a view with negative strides too."""
    on_cpu_path(path)
    a = _values(big, dtype, 1)
    a.reshape(-1)[:3] = [numpy.inf, numpy.nan, 0.0]
    b = _values(small, dtype, 2) + 7
    for own in (b, b[..., ::-1]):
        view = numpy.broadcast_to(own, numpy.broadcast_shapes(big, small))
        full = numpy.broadcast_to(a, view.shape).copy()
        with numpy.errstate(all='ignore'):
            _same(ours(full, view), ufunc(full, view))
            _same(ours(view, full), ufunc(view, full))


@pytest.mark.parametrize('number', [1e300, -3.5e38, 3.4028235e38])
def test_a_float_beyond_float32_is_numpys(number):
    """NumPy 1.x computes float32 * 1e300 in float64, NumPy 2.x warns of the
    overflowing cast: either way, ours does what NumPy does."""
    x = _values((5,), F32)
    with warnings.catch_warnings(record=True) as theirs_warned:
        warnings.simplefilter('always')
        theirs = numpy.multiply(x, number)
    with warnings.catch_warnings(record=True) as ours_warned:
        warnings.simplefilter('always')
        ours = K.multiply(x, number)
    _same(ours, theirs)
    assert [w.category for w in ours_warned] == [w.category for w in theirs_warned]


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('shape', SHAPES[1:], ids=str)
def test_the_gradient_formulas_compute_in_the_dtype(shape, dtype):
    gy, x = _values(shape, dtype, 1), _values(shape, dtype, 2)
    y = numpy.tanh(x)
    s = (1 / (1 + numpy.exp(-x))).astype(dtype)
    one, two = dtype(1), dtype(2)
    _same(K.tanh_grad(gy, y), gy * (one - y * y))
    _same(K.sigmoid_grad(gy, s), gy * s * (one - s))
    _same(K.square_grad(gy, x), two * gy * x)
    # a scalar gradient (a broadcast 1 from sum's backward)
    g1 = numpy.full(1, 0.75, dtype)
    _same(K.tanh_grad(g1, y), g1 * (one - y * y))


def _strided_views(a):
    """Views of ``a`` that are neither C-contiguous nor broadcast: a slice of
    a wider array (a concatenation's gradient), a transpose, a reversal."""
    wide = numpy.concatenate([a, a * 2], axis=-1)
    return [wide[..., :a.shape[-1]], numpy.ascontiguousarray(a.T).T, a[::-1, ::-1]]


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('shape', [(3, 4), (300, 257)], ids=str)
def test_strided_operands_give_the_contiguous_bits(shape, dtype, threads):
    """A gradient formula with a sliced, transposed or reversed operand (the
    gradient of a concatenation, split or transpose) gives what it gives on
    the operands' contiguous copies, and NumPy's values: relu's gradient
    with NaN, inf and -0.0 in gy and y <= 0, tanh's, sigmoid's, |x|'s."""
    gy, y = _values(shape, dtype, 1), _values(shape, dtype, 2)
    gy[0, :3] = [numpy.nan, numpy.inf, -0.0]
    y[0, :4] = [-1.0, 0.0, -0.0, numpy.nan]
    formulas = [(K.relu_grad, lambda g, v: numpy.where(v > 0, g, dtype(0))),
                (K.tanh_grad, lambda g, v: g * (dtype(1) - v * v)),
                (K.sigmoid_grad, lambda g, v: g * v * (dtype(1) - v)),
                (K.abs_grad, lambda g, v: g * numpy.sign(v))]
    for ours, formula in formulas:
        for g_view, y_view in zip(_strided_views(gy), _strided_views(y)):
            plain = [numpy.ascontiguousarray(v) for v in (g_view, y_view)]
            with numpy.errstate(all='ignore'):
                theirs = formula(*plain)
                for args in ((g_view, y_view), (g_view, plain[1]), (plain[0], y_view)):
                    _same(ours(*args), theirs)


@pytest.mark.parametrize('layout', ['contiguous', 'sliced'])
def test_byte_swapped_operands_give_numpys_values(layout):
    """An operand in the other byte order is NumPy's to compute (the loops
    read native floats), whether contiguous or a slice that would be copied."""
    g = numpy.linspace(-2, 3, 24).astype('>f4').reshape(4, 6)
    y = numpy.linspace(-1, 1, 24).astype(F32).reshape(4, 6)
    if layout == 'sliced':
        g = numpy.concatenate([g, g], axis=1)[:, :6]
    numpy.testing.assert_array_equal(K.relu_grad(g, y), numpy.where(y > 0, g, 0))
    numpy.testing.assert_array_equal(K.multiply(g, y), g * y)
    numpy.testing.assert_array_equal(K.tanh_grad(g, y), g * (1 - y * y))


def test_crelus_gradient_through_its_concatenation():
    """crelu's gradient reaches relu's through slices of the concatenated
    gradient: 1 where x > 0, -1 where x < 0, times gy's matching half."""
    rng = numpy.random.default_rng(3)
    x = rng.standard_normal((64, 50)).astype(F32)
    gy = rng.standard_normal((64, 100)).astype(F32)
    xa = xgrad.array(x).require_grad()
    xgrad.backward([xgrad.crelu(xa)], grad_outputs=[xgrad.array(gy)])
    want = numpy.where(x > 0, gy[:, :50], 0) - numpy.where(x < 0, gy[:, 50:], 0)
    numpy.testing.assert_array_equal(xgrad.to_numpy(xa.grad), want.astype(F32))


C = K.CompareOp
COMPARISONS = [(C.COMPARE_GE, numpy.greater_equal), (C.COMPARE_GT, numpy.greater),
               (C.COMPARE_LE, numpy.less_equal), (C.COMPARE_LT, numpy.less)]


def _where(gy, a, b, compare):
    return numpy.where(compare(a, b), gy, numpy.zeros((), gy.dtype)).astype(gy.dtype)


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('shape', SHAPES[1:], ids=str)
@pytest.mark.parametrize('op, compare', COMPARISONS, ids=lambda c: getattr(c, '__name__', ''))
def test_compare_select_is_where(op, compare, shape, dtype):
    gy, a = _values(shape, dtype, 1), _values(shape, dtype, 2)
    b = a.copy()
    b.reshape(-1)[::3] += 1  # ties on two thirds, so >= and > differ
    b.reshape(-1)[1::3] -= 1
    _same(K.compare_select(gy, a, b, op), _where(gy, a, b, compare))
    # the other operand a size-1 array or a number, on either side
    for s in (numpy.zeros(1, dtype), numpy.array(0.25, dtype), 0, 0.25, dtype(-0.5),
              numpy.broadcast_to(dtype(0.5), shape)):  # all strides 0
        _same(K.compare_select(gy, a, s, op), _where(gy, a, s, compare))
        _same(K.compare_select(gy, s, a, op), _where(gy, s, a, compare))


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
def test_compare_select_nan_and_inf(dtype):
    """A comparison with NaN is false; an unselected gradient is exactly 0,
    even an infinite or NaN one (maximum's gradient goes to one operand)."""
    a = numpy.array([numpy.nan, 1, 2, numpy.inf, -numpy.inf, 0], dtype)
    b = numpy.array([0, numpy.nan, 2, 1, 0, -0.0], dtype)
    gy = numpy.array([1, 2, numpy.inf, numpy.nan, 5, 6], dtype)
    for op, compare in COMPARISONS:
        _same(K.compare_select(gy, a, b, op), _where(gy, a, b, compare))


@pytest.mark.parametrize('case', [
    'mixed dtypes', 'int gradient', 'other shape', 'strided gradient', 'bool operand',
    'two scalars', 'bad op', 'broadcast gradient', 'broadcast operands', 'huge int'])
def test_compare_select_declines_what_it_does_not_take(case):
    gy, a = _values((4, 3), F32, 1), _values((4, 3), F32, 2)
    b = a[::-1].copy()
    args = {
        'mixed dtypes': (gy, a, b.astype(F64), C.COMPARE_GE),
        'int gradient': (gy.astype(numpy.int32), a, b, C.COMPARE_GE),
        'other shape': (gy, a, b[:2], C.COMPARE_GE),
        'strided gradient': (numpy.asfortranarray(gy), a, b, C.COMPARE_GE),
        'bool operand': (gy, a, True, C.COMPARE_GE),
        'two scalars': (gy, 0.5, 0.25, C.COMPARE_GE),
        'bad op': (gy, a, b, 4),
        # a sum's gradient, every stride 0: its elements share one address
        'broadcast gradient': (numpy.broadcast_to(F32(1), gy.shape), a, b, C.COMPARE_GE),
        'broadcast operands': (gy, numpy.broadcast_to(F32(1), gy.shape),
                               numpy.broadcast_to(F32(2), gy.shape), C.COMPARE_GE),
        'huge int': (gy, a, 10 ** 400, C.COMPARE_GE),
    }[case]
    assert K.compare_select(*args) is None


class _OpNames(OpHook):
    def __init__(self):
        self.names = []

    def forward_preprocess(self, op, inputs, outputs):
        self.names.append(op.name)


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
def test_a_mask_times_an_array(dtype):
    """``(z > 0) * z``, relu written with a mask: a float result of z's dtype,
    z's gradient the mask (the mask itself takes none), and no astype among
    the ops recorded."""
    z = xgrad.array(_values((4, 5), dtype)).require_grad()
    mask = z > 0
    seen = _OpNames()
    with xgrad.op_hooks(seen):
        y = mask * z
    assert seen.names == ['multiply']
    assert y.dtype == dtype
    numpy.testing.assert_array_equal(xgrad.to_numpy(y), numpy.maximum(xgrad.to_numpy(z), 0))
    y.sum().backward()
    numpy.testing.assert_array_equal(xgrad.to_numpy(z.grad),
                                     (xgrad.to_numpy(z) > 0).astype(dtype))
    assert not mask.is_backprop_required()
    # the mask as second operand, and an int dtype staying NumPy's
    w = xgrad.array(_values((4, 5), dtype)).require_grad()
    (w * mask).sum().backward()
    numpy.testing.assert_array_equal(xgrad.to_numpy(w.grad), xgrad.to_numpy(mask).astype(dtype))
    i = xgrad.array(numpy.arange(-3, 3, dtype=numpy.int32))
    assert ((i > 0) * i).dtype == numpy.int32


def test_an_int_array_off_the_graph_times_a_float_leaf():
    """The int operand is cast on its raw data (it is on no graph): no
    recorded astype, a float32 result, the leaf's gradient the int values."""
    i = xgrad.array(numpy.arange(-3, 3, dtype=numpy.int32))
    w = xgrad.array(_values((6,), F32)).require_grad()
    seen = _OpNames()
    with xgrad.op_hooks(seen):
        y = i * w
    assert seen.names == ['multiply'] and y.dtype == F32
    y.sum().backward()
    numpy.testing.assert_array_equal(xgrad.to_numpy(w.grad), numpy.arange(-3, 3, dtype=F32))


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('big, kept', [
    ((32, 256, 14, 14), (256, 1, 1)), ((8, 64, 56, 56), (1, 64, 1, 1)),
    ((4, 6, 5, 8, 3), (6, 5, 1, 1)), ((5, 7, 9), (7, 1)), ((3, 10, 4, 4), (10, 4, 1)),
    ((64, 100, 2), (100, 1)), ((6, 5, 3, 8), (1, 3, 8)), ((2, 3, 0, 9), (3, 1, 1))], ids=str)
def test_sum_to_a_channel_shape(big, kept, dtype):
    """sum_to from a batch down to a channel bias's shape: the sum within a
    rounding of the float64 one, in ``kept``'s shape and the dtype, the same
    bits on 1 and 3 threads (each channel summed by one thread, in order)."""
    a = _values(big, dtype, 3)
    expected = a.astype(F64).sum(axis=tuple(i for i in range(a.ndim) if i < a.ndim - len(kept)
                                            or kept[i - a.ndim + len(kept)] == 1),
                                 keepdims=True).reshape(kept)
    results = []
    before = K.max_threads()
    for threads in (1, 3):
        K.set_thread_limit(threads)
        try:
            results.append(K.sum_to(a, kept))
        finally:
            K.set_thread_limit(before)
    for r in results:
        assert r.shape == kept and r.dtype == dtype
        scale = numpy.sqrt(numpy.prod(big) / max(1, numpy.prod(kept))) * 3
        numpy.testing.assert_allclose(r, expected, rtol=0, atol=scale * (
            1e-6 if dtype == F32 else 1e-14))
    assert results[0].tobytes() == results[1].tobytes()


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('shape, axes', [
    ((32, 256, 14, 14), (2, 3)), ((4, 6, 5, 8, 3), (0, 3, 4)), ((5, 7, 9), (2,)),
    ((3, 10, 4, 4), (0, 2, 3)), ((6, 5, 3, 8), (0, 1)), ((2, 3, 0, 9), (2, 3)),
    ((4, 6, 2), (2,)), ((4, 6, 9), (0, 2)), ((4, 6, 9), (1,))], ids=str)
@pytest.mark.parametrize('op', ['sum', 'mean'])
@pytest.mark.filterwarnings('ignore:Mean of empty slice', 'ignore:invalid value encountered')
def test_sums_over_leading_axes_and_trailing_planes(shape, axes, op, dtype):
    """xgrad.sum / xgrad.mean over leading axes and trailing planes (the
    native plane sums where they apply, NumPy's reduce elsewhere: planes of
    2, a summed axis between kept ones): the float64 value within a
    rounding, keepdims or not, the same bits on 1 and 3 threads."""
    a = _values(shape, dtype, 4)
    expected = getattr(a.astype(F64), op)(axis=axes) if a.size else None  # (empty: NumPy's)
    results = []
    before = K.max_threads()
    for threads in (1, 3):
        K.set_thread_limit(threads)
        try:
            y = getattr(xgrad, op)(xgrad.array(a), axis=axes)
            yk = getattr(xgrad, op)(xgrad.array(a), axis=axes, keepdims=True)
        finally:
            K.set_thread_limit(before)
        assert y.dtype == dtype and yk.shape == tuple(
            1 if i in axes else d for i, d in enumerate(shape))
        numpy.testing.assert_array_equal(yk.to_numpy().reshape(y.shape), y.to_numpy())
        results.append(y.to_numpy())
    if expected is not None and results[0].size and numpy.prod(
            [shape[i] for i in axes]):
        terms = numpy.prod([shape[i] for i in axes])
        tol = (1e-6 if dtype == F32 else 1e-14) * numpy.sqrt(terms) * 3 / (
            terms if op == 'mean' else 1)
        numpy.testing.assert_allclose(results[0], expected, rtol=0, atol=tol * 10)
    assert results[0].tobytes() == results[1].tobytes()


@pytest.mark.parametrize('path', ['sse2', 'avx2', 'avx512'])
@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('shape, axes', [
    ((4096, 512), (0,)), ((7, 9, 33), (0, 1)), ((3, 5), (0,)), ((64, 1000, 2), (0,)),
    ((256, 4096), (0,)), ((40, 1), (0,)),
    # kept, summed, kept: (N, T, D) over T, wide and narrow D, one block's
    # columns split over the threads, and a D under the kernel's minimum
    ((64, 128, 64), (1,)), ((8, 30, 20, 70), (1, 2)), ((2, 300, 5000), (1,)),
    ((5, 40, 100, 3), (1, 2)), ((6, 50, 7), (1,))], ids=str)
def test_sums_over_leading_or_middle_axes_are_numpys_bits(on_cpu_path, path, shape, axes, dtype,
                                                          threads):
    """A batch's sum (leading axes) or a sum over a block of middle axes
    adds whole rows in order, as NumPy's reduce does: its bits, for sum and
    mean, on every path and on 1 and 3 threads."""
    on_cpu_path(path)
    a = _values(shape, dtype, 5)
    expected = numpy.add.reduce(a, axis=axes)
    _same(xgrad.sum(xgrad.array(a), axis=axes).to_numpy(), expected)
    expected /= numpy.prod([shape[i] for i in axes])
    _same(xgrad.mean(xgrad.array(a), axis=axes).to_numpy(), expected)


@pytest.mark.parametrize('dtype', [F32, F64, numpy.float16])
@pytest.mark.parametrize('layout', ['full', 'broadcast', 'number_like', 'strided'])
def test_relu_grad_is_a_select_on_every_layout(layout, dtype):
    """relu_grad zeroes gy where y <= 0 whatever gy holds there (inf, NaN),
    on each of its paths: the select kernel (full operands), the scalar
    loop (a broadcast gy, as a sum's gradient), and NumPy's fallback
    (float16, strided operands). The scalar loop and the fallback
    multiplied by the mask, which made NaN of inf * 0."""
    y = numpy.array([-1.0, 0.0, -0.0, 2.0, numpy.nan, 3.0] * 5, dtype)
    if layout == 'broadcast':
        gy = numpy.broadcast_to(numpy.array(numpy.inf, dtype), y.shape)
        expected = numpy.where(y > 0, numpy.inf, 0).astype(dtype)
    elif layout == 'number_like':
        gy = numpy.full((1,), numpy.inf, dtype)
        expected = numpy.where(y > 0, numpy.inf, 0).astype(dtype)
    else:
        gy = numpy.array([numpy.inf, numpy.nan, -numpy.inf, 1.0, 5.0, numpy.nan] * 5, dtype)
        expected = numpy.where(y > 0, gy, 0).astype(dtype)
    if layout == 'strided':
        gy, y = numpy.repeat(gy, 2)[::2], numpy.repeat(y, 2)[::2]
    out = K.relu_grad(gy, y)
    assert out.dtype == dtype and out.shape == y.shape
    numpy.testing.assert_array_equal(out, expected)


SELECTS = [  # (condition, a, b) shapes; None: a number
    ((4, 12, 32, 32), (4, 12, 32, 32), (4, 12, 32, 32)),
    ((1, 1, 32, 32), (4, 12, 32, 32), None),           # an attention mask
    ((32,), None, (300, 32)),                           # a row condition, number first
    ((300, 32), (32,), (300, 32)),                       # a row operand
    ((1, 32), (32,), (1, 32)),                           # rows and a full operand alike
    ((5000, 7), (5000, 7), (1,)),                        # a one-element operand
    ((3,), (7, 3), (7, 3)),
]


@pytest.mark.parametrize('dtype', [F32, F64], ids=lambda d: d.__name__)
@pytest.mark.parametrize('shapes', SELECTS, ids=str)
def test_select_is_numpys_where(shapes, dtype, threads):
    """native_kernels.select, where's kernel: NumPy's where bit for bit for
    every operand kind (the result's shape, a row, one value, a number),
    NaN and infinities included, on 1 and 3 threads."""
    rng = numpy.random.default_rng(7)
    cshape, ashape, bshape = shapes
    cond = rng.integers(0, 2, cshape).astype(bool)
    ops = []
    for shape, number in ((ashape, dtype(-1e9)), (bshape, 0.5)):
        if shape is None:
            ops.append(number)
            continue
        v = _values(shape, dtype, len(ops))
        v.reshape(-1)[:2] = [numpy.nan, numpy.inf][:v.size]
        ops.append(v)
    got = K.select(cond, *ops)
    want = numpy.where(cond, *[o if isinstance(o, numpy.ndarray) else dtype(o) for o in ops])
    _same(got, want)


def test_select_declines_what_numpy_must_do():
    x = _values((4, 5), F32)
    cond = numpy.ones((4, 5), bool)
    assert K.select(cond, x, x.astype(F64)) is None          # mixed dtypes
    assert K.select(cond, x.astype(numpy.float16), 0.0) is None
    assert K.select(cond[:, :1], x, 0.0) is None            # a column, not a row
    assert K.select(cond.astype(numpy.int8), x, 0.0) is None
    assert K.select(numpy.ones((2, 4, 5), bool), x, 0.0) is None  # cond is larger
    assert K.select(cond, 1.0, 2.0) is None
    assert K.select(cond, x, F64(0.5)) is None               # a strong float64 scalar
    assert K.select(cond, x, 10 ** 400) is None              # beyond double's range
    assert K.select(cond, x, True) is None
    assert K.select(cond, x[:, ::2], 0.0) is None            # strided
    assert K.select(numpy.array(True), x, 0.0) is None


def test_where_and_its_gradient_with_a_mask_row():
    rng = numpy.random.default_rng(3)
    x = rng.standard_normal((2, 3, 16, 16)).astype(F32)
    keep = rng.integers(0, 2, (1, 1, 16, 16))
    xa = xgrad.array(x).require_grad()
    y = xgrad.where(xgrad.array(keep) > 0, xa, -1e9)
    _same(y.to_numpy(), numpy.where(keep > 0, x, F32(-1e9)))
    g = rng.standard_normal(x.shape).astype(F32)
    gx, = xgrad.grad([y], [xa], grad_outputs=[xgrad.array(g)])
    _same(gx.to_numpy(), numpy.where(keep > 0, g, F32(0)))
