"""tensordot and linear: bad input, NumPy's axes forms, mixed dtypes, and
the gradients' dtypes."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# products of small integers and halves, sums of two or three of them: exact
# in float16 (and integers) whatever the summation order of the kernel or
# BLAS. Random data is compared with tolerances.


def _arr(shape, dtype=numpy.float64, seed=0):
    return xgrad.array(numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(dtype))


# ---------------------------------------------------------------------------
# tensordot

@pytest.mark.parametrize('shape_a, shape_b, axes', [
    ((2, 3, 4), (3, 4, 5), 2), ((2, 3), (3, 4), 1), ((2, 3), (4, 5), 0),
    ((3, 2, 4), (4, 5, 3), ([0, 2], [2, 0])), ((3, 4), (4, 3), ((0, 1), (1, 0))),
    ((4,), (4,), 1), ((2, 3), (3, 2), (1, 0)), ((0, 3), (3, 2), 1)])
def test_tensordot_matches_numpy(shape_a, shape_b, axes):
    a, b = _arr(shape_a, seed=1), _arr(shape_b, seed=2)
    numpy.testing.assert_allclose(
        xgrad.tensordot(a, b, axes).to_numpy(),
        numpy.tensordot(a.to_numpy(), b.to_numpy(), axes), rtol=1e-12)


def test_tensordot_promotes_mixed_dtypes_and_keeps_gradient_dtypes():
    a = _arr((2, 3), numpy.float32).require_grad()
    b = _arr((3, 4), numpy.float64).require_grad()
    y = xgrad.tensordot(a, b, 1)
    assert y.dtype == numpy.float64
    ga, gb = xgrad.grad([y], [a, b], grad_outputs=[xgrad.ones_like(y)])
    assert ga.dtype == numpy.float32 and gb.dtype == numpy.float64
    numpy.testing.assert_allclose(ga.to_numpy(), numpy.tile(b.to_numpy().sum(1), (2, 1)),
                                  rtol=1e-6)


def test_tensordot_shape_mismatch_names_the_shapes():
    with pytest.raises(xgrad.DimensionError, match=r'tensordot.*\(2, 3\).*\(4, 3\)'):
        xgrad.tensordot(_arr((2, 3)), _arr((4, 3)), 1)
    with pytest.raises(xgrad.DimensionError, match=r'\(2, 3\).*\(2, 3\)'):
        xgrad.tensordot(_arr((2, 3)), _arr((2, 3)), ([0, 1], [1, 0]))


@pytest.mark.parametrize('axes, error', [
    (-1, ValueError), (3, xgrad.DimensionError), (([0], [0, 1]), xgrad.DimensionError),
    (([2], [0]), xgrad.DimensionError), (([0, 0], [0, 1]), xgrad.DimensionError),
    ('ab', TypeError), (([0.5], [0]), TypeError), (None, TypeError)])
def test_tensordot_bad_axes(axes, error):
    with pytest.raises(error, match='tensordot'):
        xgrad.tensordot(_arr((2, 2)), _arr((2, 2)), axes)


def test_tensordot_wrong_types():
    with pytest.raises(TypeError, match='b must be'):
        xgrad.tensordot(_arr((2, 2)), 'x')


def test_products_promote_like_chainerx():
    """ChainerX takes any two of its dtypes in dot, matmul and linear; the
    result has their promoted dtype (docs/dtype_promotion.md)."""
    b = xgrad.array(numpy.array([[True, False], [True, True]]))
    i8 = xgrad.array(numpy.array([[1, -2], [3, 4]], numpy.int8))
    f16 = xgrad.array(numpy.array([[0.5, 1.0], [2.0, -1.0]], numpy.float16))
    i64 = xgrad.array(numpy.array([[1, 2], [3, 4]], numpy.int64))
    u8 = xgrad.array(numpy.array([[1, 2], [3, 4]], numpy.uint8))
    assert xgrad.tensordot(b, f16, 1).dtype == numpy.float16
    assert xgrad.matmul(f16, i64).dtype == numpy.float16
    numpy.testing.assert_array_equal(xgrad.matmul(f16, i64).to_numpy(),
                                     [[3.5, 5.0], [-1.0, 0.0]])
    assert xgrad.matmul(i8, u8).dtype == numpy.int16
    assert xgrad.dot(b, b).dtype == numpy.bool_
    y = xgrad.linear(i8, i8, xgrad.array(numpy.array([1, 1], numpy.int32)))
    assert y.dtype == numpy.int32
    numpy.testing.assert_array_equal(y.to_numpy(), [[6, -4], [-4, 26]])


def test_tensordot_accepts_array_likes():
    y = xgrad.tensordot([[1.0, 2.0]], _arr((2, 3)), 1)
    assert y.shape == (1, 3)


# ---------------------------------------------------------------------------
# linear

def test_linear_is_x_wt_plus_b_with_batch_axes():
    x = _arr((2, 3, 4, 5), seed=1)
    w = _arr((6, 20), seed=2)
    b = _arr((6,), seed=3)
    y = xgrad.linear(x, w, b, n_batch_axes=2)
    assert y.shape == (2, 3, 6)
    expected = x.to_numpy().reshape(2, 3, 20) @ w.to_numpy().T + b.to_numpy()
    numpy.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-12)
    y1 = xgrad.linear(x, _arr((6, 60), seed=2))
    assert y1.shape == (2, 6)


def test_linear_gradients():
    x = _arr((4, 3), seed=1).require_grad()
    w = _arr((2, 3), numpy.float32, seed=2).require_grad()
    b = _arr((2,), numpy.float32, seed=3).require_grad()
    y = xgrad.linear(x, w, b)
    assert y.dtype == numpy.float64
    gy = _arr((4, 2), seed=4)
    gx, gw, gb = xgrad.grad([y], [x, w, b], grad_outputs=[gy])
    assert (gx.dtype, gw.dtype, gb.dtype) == (numpy.float64, numpy.float32, numpy.float32)
    g = gy.to_numpy()
    numpy.testing.assert_allclose(gx.to_numpy(), g @ w.to_numpy(), rtol=1e-6)
    numpy.testing.assert_allclose(gw.to_numpy(), g.T @ x.to_numpy(), rtol=1e-6)
    numpy.testing.assert_allclose(gb.to_numpy(), g.sum(0), rtol=1e-6)


def test_linear_double_backward_through_every_input():
    rs = numpy.random.RandomState(0)
    xs = [xgrad.array(rs.uniform(-1, 1, s)).require_grad() for s in ((2, 3, 2), (4, 6), (4,))]
    gy = xgrad.array(rs.uniform(-1, 1, (2, 4))).require_grad()
    ggs = [xgrad.array(rs.uniform(-1, 1, x.shape)) for x in xs]
    eps = [xgrad.full(a.shape, 1e-6, numpy.float64) for a in xs + [gy]]
    xgrad.check_double_backward(lambda a: (xgrad.linear(*a),), xs, [gy], ggs, eps,
                                atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize('x_shape, w_shape, b_shape, kwargs, error, pattern', [
    ((2, 3), (4, 5), None, {}, xgrad.DimensionError, r'w must have shape \(M, 3\).*\(4, 5\)'),
    ((2, 3), (12,), None, {}, xgrad.DimensionError, r'w must have shape'),
    ((2, 3, 4), (5, 4), None, {}, xgrad.DimensionError, r'\(M, 12\)'),
    ((2, 3), (4, 3), (3,), {}, xgrad.DimensionError, r'b must have shape \(4,\)'),
    ((2, 3), (4, 3), (1, 4), {}, xgrad.DimensionError, r'b must have shape'),
    ((2, 3), (4, 3), None, {'n_batch_axes': 0}, ValueError, 'n_batch_axes'),
    ((2, 3), (4, 3), None, {'n_batch_axes': 2}, xgrad.DimensionError, 'n_batch_axes'),
    ((3,), (4, 3), None, {}, xgrad.DimensionError, 'n_batch_axes'),
    ((2, 3), (4, 3), None, {'n_batch_axes': 1.0}, TypeError, 'n_batch_axes'),
])
def test_linear_bad_input(x_shape, w_shape, b_shape, kwargs, error, pattern):
    x = _arr(x_shape).require_grad()
    args = [x * 1, _arr(w_shape)] + ([_arr(b_shape)] if b_shape else [])
    with pytest.raises(error, match='linear: .*' + pattern):
        xgrad.linear(*args, **kwargs)
    assert x.get_grad() is None


def test_linear_wrong_types_name_the_argument():
    x, w = _arr((2, 3)), _arr((4, 3))
    for args, name in (((None, w), 'x'), ((x, 'w'), 'w'), ((x, w, {}), 'b')):
        with pytest.raises(TypeError, match='linear: {} must be'.format(name)):
            xgrad.linear(*args)


def test_linear_with_empty_features_gives_the_bias():
    y = xgrad.linear(xgrad.zeros((2, 0)), xgrad.zeros((3, 0)), xgrad.ones((3,)))
    numpy.testing.assert_array_equal(y.to_numpy(), numpy.ones((2, 3)))
