"""Shaping ops (xgrad/_ops/shaping.py) beyond the registry-generated tests.

* Bad input: each row of ``BAD`` raises the named error with a message that
  names the op and the argument at fault, records no op (every op-applying
  name the modules use is replaced by a tripwire for the call) and leaves the
  arrays involved unchanged and still differentiable.
* Closed forms the generated tests cannot see: which slice of the gradient
  goes to which input, gradients of ``split`` outputs that were never used
  (zeros), overlapping split indices, per-element ``repeat`` counts, mixed
  dtypes in ``concatenate``.
"""

import numpy
import pytest

import xgrad
from xgrad._ops import _args, indexing, shaping

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# data movement (reshape, concatenate, split, stack, flip, diag, tril/triu,
# repeat: bits copied) and gradients that scatter or add a few small integers
# or ones in float (exact in any order); no BLAS or libm result is compared
# exactly.


def _leaf(shape=(2, 3), dtype=numpy.float32):
    n = int(numpy.prod(shape))
    return xgrad.array((numpy.arange(n).reshape(shape) * 0.5 + 1).astype(dtype)).require_grad()


def _grad(y, x, gy=None):
    gy = xgrad.ones_like(y) if gy is None else xgrad.array(gy)
    g, = xgrad.grad([y], [x], grad_outputs=[gy])
    return g.to_numpy()


# ---------------------------------------------------------------------------
# Bad input

def _tripwire(*args, **kwargs):
    raise AssertionError('an op was recorded before the arguments were checked')


def check_bad(monkeypatch, call, arrays, error, match):
    """``call()`` raises ``error`` matching ``match`` before any op is applied,
    and ``arrays`` keep their data, gradients and graphs."""
    monkeypatch.setattr(_args, 'apply', _tripwire)
    for module in (shaping, indexing):
        for name in ('reshape', 'getitem', 'scatter', 'transpose', 'view', 'where',
                     'to_device'):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, _tripwire)
    before = [(a.to_numpy().copy(), a.grad, a.is_backprop_required()) for a in arrays]
    with pytest.raises(error, match=match):
        call()
    monkeypatch.undo()
    for a, (data, grad, required) in zip(arrays, before):
        numpy.testing.assert_array_equal(a.to_numpy(), data)
        assert a.grad is grad and a.is_backprop_required() == required
        if a.dtype.kind == 'f' and required:
            g, = xgrad.grad([xgrad.sum(a * 2.0)], [a])
            numpy.testing.assert_array_equal(g.to_numpy(), numpy.full(a.shape, 2.0))


DimErr, DtypeErr = xgrad.DimensionError, xgrad.DtypeError
X23 = (2, 3)
BAD = [
    # (name, call(x) with x a (2, 3) float32 leaf, error, message pattern)
    ('concatenate-axis', lambda x: xgrad.concatenate([x, x], axis=2), DimErr,
     r'concatenate: axis 2 is out of range for an array with 2 dimensions'),
    ('concatenate-shapes', lambda x: xgrad.concatenate([x, xgrad.zeros((3, 3))], axis=1),
     DimErr, r'concatenate: shapes \(2, 3\), \(3, 3\) differ outside the concatenation '
     r'axis 1'),
    ('concatenate-ndim', lambda x: xgrad.concatenate([x, xgrad.zeros(3)]), DimErr,
     r'concatenate: .*arrays\[0\] has shape \(2, 3\) and arrays\[1\] has shape \(3,\)'),
    ('concatenate-0d', lambda x: xgrad.concatenate([x[0, 0], x[0, 1]]), DimErr,
     r'concatenate: zero-dimensional arrays cannot be concatenated'),
    ('concatenate-none', lambda x: xgrad.concatenate([]), DimErr,  # ChainerX's class
     r'concatenate: need at least one array'),
    ('concatenate-str', lambda x: xgrad.concatenate('ab'), TypeError,
     r'concatenate: arrays must be a sequence of arrays, not str'),
    ('concatenate-single-array', lambda x: xgrad.concatenate(x), TypeError,
     r'concatenate: arrays must be a sequence of arrays, not ndarray'),
    ('concatenate-str-item', lambda x: xgrad.concatenate([x, 'a']), TypeError,
     r'concatenate: arrays\[1\] must be an xgrad.ndarray \(or array-like\), not str'),
    ('concatenate-axis-type', lambda x: xgrad.concatenate([x, x], axis='0'), TypeError,
     r'concatenate: axis must be an int, not str'),
    ('stack-shapes', lambda x: xgrad.stack([x, xgrad.zeros((3, 2))]), DimErr,
     r'stack: all arrays must have the same shape, but arrays\[0\] has shape \(2, 3\) '
     r'and arrays\[1\] has shape \(3, 2\)'),
    ('stack-axis', lambda x: xgrad.stack([x, x], axis=-4), DimErr,
     r'stack: axis -4 is out of range for an array with 3 dimensions'),
    ('hstack-shapes', lambda x: xgrad.hstack([x, xgrad.zeros((3, 1))]), DimErr,
     r'hstack: shapes \(2, 3\), \(3, 1\) differ outside the concatenation axis 1'),
    ('vstack-shapes', lambda x: xgrad.vstack([x, xgrad.zeros(2)]), DimErr,
     r'vstack: shapes \(2, 3\), \(1, 2\) differ'),
    ('dstack-shapes', lambda x: xgrad.dstack([x, xgrad.zeros(3)]), DimErr,
     r'dstack: shapes \(2, 3, 1\), \(1, 3, 1\) differ'),
    ('split-unequal', lambda x: xgrad.split(x, 2, axis=1), ValueError,
     r'split: array split does not result in an equal division \(axis 1 of length 3 '
     r'into 2 sections\)'),
    ('split-zero-sections', lambda x: xgrad.split(x, 0), ValueError,
     r'split: the number of sections must be positive, not 0'),
    ('split-axis', lambda x: xgrad.split(x, 1, axis=-3), DimErr,
     r'split: axis -3 is out of range'),
    ('split-float-index', lambda x: xgrad.split(x, [1.5]), TypeError,
     r'split: indices_or_sections must be an int or a sequence of ints, not \[1.5\]'),
    ('split-str', lambda x: xgrad.split(x, 'ab'), TypeError,
     r'split: indices_or_sections must be'),
    ('split-ary-str', lambda x: xgrad.split('abc', 1), TypeError,
     r'split: ary must be an xgrad.ndarray'),
    ('hsplit-0d', lambda x: xgrad.hsplit(x[0, 0], 1), DimErr,
     r'hsplit: ary must be at least 1-d, not 0-d \(shape \(\)\)'),
    ('vsplit-1d', lambda x: xgrad.vsplit(x[0], 1), DimErr,
     r'vsplit: ary must be at least 2-d, not 1-d \(shape \(3,\)\)'),
    ('dsplit-2d', lambda x: xgrad.dsplit(x, 1), DimErr,
     r'dsplit: ary must be at least 3-d, not 2-d'),
    ('repeat-negative', lambda x: xgrad.repeat(x, -1), ValueError,
     r'repeat: repeats must not be negative'),
    ('repeat-length', lambda x: xgrad.repeat(x, [1, 2], axis=1), DimErr,
     r'repeat: 2 repeats given for an axis of length 3'),
    ('repeat-float', lambda x: xgrad.repeat(x, 1.5), TypeError,
     r'repeat: repeats must be an int or a sequence of ints'),
    ('repeat-axis', lambda x: xgrad.repeat(x, 2, axis=2), DimErr,
     r'repeat: axis 2 is out of range'),
    ('moveaxis-lengths', lambda x: xgrad.moveaxis(x, (0, 1), 0), ValueError,
     r'moveaxis: source \(0, 1\) and destination 0 must have the same number'),
    ('moveaxis-repeated', lambda x: xgrad.moveaxis(x, (0, -2), (0, 1)), DimErr,
     r'moveaxis: source \(0, -2\) repeats an axis'),
    ('moveaxis-range', lambda x: xgrad.moveaxis(x, 0, 2), DimErr,
     r'moveaxis: destination 2 is out of range'),
    ('flip-axis', lambda x: xgrad.flip(x, axis=3), DimErr, r'flip: axis 3 is out of range'),
    ('flip-repeated', lambda x: xgrad.flip(x, axis=(1, -1)), DimErr,
     r'flip: axis 1 is repeated'),
    ('fliplr-1d', lambda x: xgrad.fliplr(x[0]), DimErr,
     r'fliplr: m must have at least 2 dimensions, not 1'),
    ('flipud-0d', lambda x: xgrad.flipud(x[0, 0]), DimErr,
     r'flipud: m must have at least 1 dimension'),
    ('tril-0d', lambda x: xgrad.tril(x[0, 0]), DimErr, r'tril: m must have at least 1'),
    ('triu-k', lambda x: xgrad.triu(x, k=1.0), TypeError, r'triu: k must be an int, not float'),
    ('diag-3d', lambda x: xgrad.diag(xgrad.zeros((2, 2, 2))), DimErr,
     r'diag: v must be 1-d or 2-d, not 3-d \(shape \(2, 2, 2\)\)'),
    ('diag-k', lambda x: xgrad.diag(x, k='1'), TypeError, r'diag: k must be an int, not str'),
    ('diag-str', lambda x: xgrad.diag('abc'), TypeError, r'diag: v must be an xgrad.ndarray'),
    ('ravel-none', lambda x: xgrad.ravel(None), TypeError,
     r'ravel: a must be an xgrad.ndarray \(or array-like\), not NoneType'),
    ('atleast_2d-str', lambda x: xgrad.atleast_2d('a'), TypeError, r'atleast_2d: a must be'),
]


@pytest.mark.parametrize('call, error, match', [pytest.param(*row[1:], id=row[0])
                                                for row in BAD])
def test_bad_input(monkeypatch, call, error, match):
    x = _leaf(X23)
    check_bad(monkeypatch, lambda: call(x), [x], error, match)


# ---------------------------------------------------------------------------
# Joining

def test_concatenate_gradient_goes_to_each_input():
    a, b = _leaf((2, 3)), _leaf((2, 1))
    y = xgrad.concatenate([a, b], axis=1)
    gy = numpy.arange(8, dtype=numpy.float32).reshape(2, 4)
    ga, gb = xgrad.grad([y], [a, b], grad_outputs=[xgrad.array(gy)])
    numpy.testing.assert_array_equal(ga.to_numpy(), gy[:, :3])
    numpy.testing.assert_array_equal(gb.to_numpy(), gy[:, 3:])


def test_concatenate_mixed_dtypes():
    a = _leaf((2,), numpy.float32)
    b = _leaf((3,), numpy.float64)
    n = xgrad.array(numpy.array([7], numpy.int32))
    y = xgrad.concatenate([a, n, b])
    assert y.dtype == numpy.float64
    numpy.testing.assert_array_equal(y.to_numpy(), [1, 1.5, 7, 1, 1.5, 2])
    ga, gb = xgrad.grad([y], [a, b], grad_outputs=[xgrad.array(numpy.arange(6.))])
    assert ga.dtype == numpy.float32 and gb.dtype == numpy.float64
    numpy.testing.assert_array_equal(ga.to_numpy(), [0, 1])
    numpy.testing.assert_array_equal(gb.to_numpy(), [3, 4, 5])


def test_concatenate_takes_array_likes():
    x = _leaf((2,))
    y = xgrad.concatenate((x, [5.0], numpy.array([6.0], numpy.float32)))
    numpy.testing.assert_array_equal(y.to_numpy(), [1, 1.5, 5, 6])
    numpy.testing.assert_array_equal(_grad(y, x), [1, 1])


def test_stack_gradients_are_the_slices():
    a, b = _leaf((2, 3)), _leaf((2, 3))
    y = xgrad.stack([a, b], axis=-1)
    assert y.shape == (2, 3, 2)
    gy = numpy.arange(12, dtype=numpy.float32).reshape(2, 3, 2)
    ga, gb = xgrad.grad([y], [a, b], grad_outputs=[xgrad.array(gy)])
    numpy.testing.assert_array_equal(ga.to_numpy(), gy[..., 0])
    numpy.testing.assert_array_equal(gb.to_numpy(), gy[..., 1])


def test_hstack_vstack_dstack_of_1d():
    a, b = _leaf((3,)), _leaf((3,))
    assert xgrad.hstack([a, b]).shape == (6,)
    assert xgrad.vstack([a, b]).shape == (2, 3)
    assert xgrad.dstack([a, b]).shape == (1, 3, 2)
    y = xgrad.vstack([a, b])
    numpy.testing.assert_array_equal(_grad(y, b, numpy.array([[1, 2, 3], [4, 5, 6]],
                                                             numpy.float32)), [4, 5, 6])


def test_atleast_returns_a_connected_view():
    x = _leaf((2, 3, 1))
    for y in (xgrad.atleast_2d(x), xgrad.atleast_3d(x)):
        assert y is not x and y.shape == x.shape
        numpy.testing.assert_array_equal(_grad(y * 3.0, x), numpy.full(x.shape, 3.0))
    assert xgrad.atleast_3d(_leaf((4,))).shape == (1, 4, 1)
    assert xgrad.atleast_2d(_leaf(())).shape == (1, 1)


# ---------------------------------------------------------------------------
# Splitting

def test_split_returns_a_list_of_pieces():
    x = _leaf((6, 2))
    pieces = xgrad.split(x, [2, 3])
    assert isinstance(pieces, list) and [p.shape for p in pieces] == [(2, 2), (1, 2), (3, 2)]
    for p, e in zip(pieces, numpy.split(x.to_numpy(), [2, 3])):
        numpy.testing.assert_array_equal(p.to_numpy(), e)
    assert len(xgrad.split(x, 1)) == 1


def test_split_gradient_of_unused_outputs_is_zero():
    x = _leaf((3, 2))
    a, b, c = xgrad.split(x, 3)
    numpy.testing.assert_array_equal(_grad(b * 2.0, x), [[0, 0], [2, 2], [0, 0]])
    # Double backprop through the zero-filled concatenation: d(gx)/d(gb).
    # (A backward pass consumes the graph it went through: split again.)
    a, b, c = xgrad.split(x, 3)
    gb = xgrad.array(numpy.ones((1, 2), numpy.float32)).require_grad()
    gx, = xgrad.grad([b], [x], grad_outputs=[gb], enable_double_backprop=True)
    w = numpy.arange(6, dtype=numpy.float32).reshape(3, 2)
    ggb, = xgrad.grad([xgrad.sum(gx * xgrad.array(w))], [gb])
    numpy.testing.assert_array_equal(ggb.to_numpy(), w[1:2])


def test_split_with_overlapping_indices_adds_up():
    # [3, 1] gives x[0:3], x[3:1] (empty) and x[1:5]: elements 1 and 2 twice.
    x = _leaf((5,))
    p0, p1, p2 = xgrad.split(x, [3, 1])
    assert [p.shape for p in (p0, p1, p2)] == [(3,), (0,), (4,)]
    g, = xgrad.grad([xgrad.sum(p0) + xgrad.sum(p2 * 10.0)], [x])
    numpy.testing.assert_array_equal(g.to_numpy(), [1, 11, 11, 10, 10])


def test_hsplit_dsplit_axes():
    x = _leaf((2, 4, 6))
    assert [p.shape for p in xgrad.hsplit(x, 2)] == [(2, 2, 6)] * 2
    assert [p.shape for p in xgrad.vsplit(x, [1])] == [(1, 4, 6), (1, 4, 6)]
    assert [p.shape for p in xgrad.dsplit(x, 3)] == [(2, 4, 2)] * 3
    assert [p.shape for p in xgrad.hsplit(_leaf((4,)), 2)] == [(2,), (2,)]


def test_split_and_concatenate_round_trip():
    x = _leaf((4, 3))
    y = xgrad.concatenate(xgrad.split(x, [1, 3], axis=0), axis=0)
    numpy.testing.assert_array_equal(y.to_numpy(), x.to_numpy())
    numpy.testing.assert_array_equal(_grad(y * 2.0, x), numpy.full((4, 3), 2.0))


# ---------------------------------------------------------------------------
# repeat, moveaxis, flips, triangles, diag

def test_repeat_gradient_sums_copies():
    x = _leaf((3,))
    y = xgrad.repeat(x, [2, 0, 3])
    numpy.testing.assert_array_equal(y.to_numpy(), [1, 1, 2, 2, 2])
    numpy.testing.assert_array_equal(_grad(y, x, numpy.arange(5, dtype=numpy.float32)),
                                     [1, 0, 9])
    x = _leaf((2, 2))
    y = xgrad.repeat(x, 3)  # flattened: 4 elements, 3 copies each
    numpy.testing.assert_array_equal(_grad(y, x, numpy.arange(12, dtype=numpy.float32)),
                                     [[3, 12], [21, 30]])
    y = xgrad.repeat(x, numpy.array([2]), axis=1)
    assert y.shape == (2, 4)
    numpy.testing.assert_array_equal(_grad(y, x), numpy.full((2, 2), 2.0))


def test_moveaxis_like_numpy():
    x = _leaf((2, 3, 4))
    for src, dst in ((0, -1), ((0, 1), (-1, -2)), ([2, 0], [0, 1])):
        y = xgrad.moveaxis(x, src, dst)
        numpy.testing.assert_array_equal(y.to_numpy(), numpy.moveaxis(x.to_numpy(), src, dst))


def test_flip_gradient_is_flipped():
    x = _leaf((2, 3))
    gy = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    numpy.testing.assert_array_equal(_grad(xgrad.flip(x), x, gy), gy[::-1, ::-1])
    numpy.testing.assert_array_equal(_grad(xgrad.fliplr(x), x, gy), gy[:, ::-1])


def test_tril_triu_gradients_are_masked():
    x = _leaf((3, 3))
    gy = numpy.arange(9, dtype=numpy.float32).reshape(3, 3)
    numpy.testing.assert_array_equal(_grad(xgrad.tril(x, -1), x, gy), numpy.tril(gy, -1))
    numpy.testing.assert_array_equal(_grad(xgrad.triu(x, 1), x, gy), numpy.triu(gy, 1))


def test_diag_gradients():
    v = _leaf((2,))
    y = xgrad.diag(v, k=1)
    gy = numpy.arange(9, dtype=numpy.float32).reshape(3, 3)
    numpy.testing.assert_array_equal(_grad(y, v, gy), [1, 5])
    m = _leaf((3, 4))
    y = xgrad.diag(m, k=-1)
    numpy.testing.assert_array_equal(y.to_numpy(), numpy.diag(m.to_numpy(), -1))
    g = _grad(y, m, numpy.array([1, 2], numpy.float32))
    numpy.testing.assert_array_equal(g, numpy.eye(3, 4, -1) * [[1], [1], [2]])


@pytest.mark.parametrize('k', [4, -3, 2 ** 31, -2 ** 40])
def test_diag_of_a_matrix_past_its_corner_is_empty(k):
    # NumPy's diagonal() takes a C int offset: 2**31 would overflow it.
    m = _leaf((3, 4))
    y = xgrad.diag(m, k=k)
    assert y.shape == (0,) and y.dtype == numpy.float32
    g = _grad(xgrad.sum(y), m, numpy.float32(1))
    numpy.testing.assert_array_equal(g, numpy.zeros((3, 4)))


def test_diag_of_a_vector_too_far_off_the_diagonal_names_k():
    with pytest.raises(xgrad.DimensionError, match='diag: the matrix for k=1099511627776'):
        xgrad.diag(xgrad.array(numpy.ones(3, numpy.float32)), k=2 ** 40)


def test_diag_of_a_list_on_a_device():
    y = xgrad.diag([1.0, 2.0], device='native:0')
    assert y.device.name == 'native:0'
    numpy.testing.assert_array_equal(y.to_numpy(), numpy.diag([1.0, 2.0]))


@pytest.mark.parametrize('join', ['concatenate', 'stack'])
def test_join_of_mixed_dtypes_promotes_as_chainerx_and_casts_gradients_back(join):
    # ChainerX: float16 with int64 is float16 (NumPy would say float64);
    # float16 with float32 is float32.
    h = xgrad.array(numpy.array([1.0, 2.0], numpy.float16)).require_grad()
    f = xgrad.array(numpy.array([3.0, 4.0], numpy.float32)).require_grad()
    i = xgrad.array(numpy.array([5, 6], numpy.int64))
    assert getattr(xgrad, join)([h, i]).dtype == numpy.float16
    y = getattr(xgrad, join)([h, f, i])
    assert y.dtype == numpy.float32
    numpy.testing.assert_array_equal(y.to_numpy().ravel(), [1, 2, 3, 4, 5, 6])
    gy = numpy.arange(6, dtype=numpy.float32).reshape(y.shape)
    xgrad.backward([y], grad_outputs=[xgrad.array(gy)])
    assert h.grad.dtype == numpy.float16 and f.grad.dtype == numpy.float32
    numpy.testing.assert_array_equal(h.grad.to_numpy(), gy.ravel()[:2])
    numpy.testing.assert_array_equal(f.grad.to_numpy(), gy.ravel()[2:4])


@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
@pytest.mark.parametrize('repeats', [1, 2, 3, 7, 8, 9])
@pytest.mark.parametrize('shape, axis', [((4, 6), 1), ((4, 6), 0), ((3, 5, 2), 1), ((7,), 0)])
def test_repeat_gradient_is_numpys_sum_of_the_copies(dtype, repeats, shape, axis):
    """repeat's gradient sums each element's copies with NumPy's bits (short
    counts add the copies in turn; -0.0, NaN and inf as NumPy's sum gives
    them), on any axis."""
    rng = numpy.random.default_rng(repeats)
    x = xgrad.array(rng.standard_normal(shape).astype(dtype)).require_grad()
    y = xgrad.repeat(x, repeats, axis=axis)
    gy = rng.standard_normal(y.shape).astype(dtype)
    gy.flat[:4] = [-0.0, -0.0, numpy.nan, numpy.inf]
    y.grad = xgrad.array(gy)
    y.backward()
    copies = shape[:axis] + (shape[axis], repeats) + shape[axis + 1:]
    expected = gy.reshape(copies).sum(axis=axis + 1)
    assert x.grad.dtype == expected.dtype
    assert x.grad.to_numpy().tobytes() == expected.tobytes()
