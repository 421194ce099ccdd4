"""linalg.norm: the ord values NumPy takes, bad input, closed forms, the
zero gradient of the 2-norm at the origin, and the SVD gradient behind the
spectral and nuclear norms (all three factors, twice)."""

import numpy
import pytest

import xgrad
from xgrad._ops import _args, norms
from xgrad._ops.norms import norm

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# gradients of the 1 and inf norms are signs (+-1, 0), and those norms of
# small integers are sums of a few small integers.

INF = numpy.inf


def _leaf(values):
    return xgrad.array(numpy.array(values, numpy.float64)).require_grad()


def _grad(y, x):
    g, = xgrad.grad([y], [x], grad_outputs=[xgrad.ones_like(y)])
    return g.to_numpy()


def _eps(shape):
    return xgrad.full(shape, 1e-6, numpy.float64)


def test_norm_is_not_a_top_level_name():
    assert norms.__all__ == []
    assert not hasattr(xgrad, 'norm')
    assert xgrad.op_info('linalg.norm').func is norm


# ---------------------------------------------------------------------------
# Against NumPy

VECTOR_ORDS = [None, 2, 1, INF, -INF, 0, 3, 0.5, -1]
MATRIX_ORDS = [None, 'fro', 'nuc', 1, -1, 2, -2, INF, -INF]


@pytest.mark.parametrize('ord', VECTOR_ORDS)
@pytest.mark.parametrize('axis', [0, -1])
@pytest.mark.parametrize('keepdims', [False, True])
def test_vector_norms_match_numpy(ord, axis, keepdims):
    data = numpy.random.RandomState(0).uniform(-2, 2, (3, 4))
    numpy.testing.assert_allclose(
        norm(xgrad.array(data), ord, axis, keepdims).to_numpy(),
        numpy.linalg.norm(data, ord, axis, keepdims), rtol=1e-12)


@pytest.mark.parametrize('ord', MATRIX_ORDS)
@pytest.mark.parametrize('axis', [(0, 2), (2, 1), (-1, 0)])
@pytest.mark.parametrize('keepdims', [False, True])
def test_matrix_norms_match_numpy(ord, axis, keepdims):
    data = numpy.random.RandomState(1).uniform(-2, 2, (3, 4, 5))
    numpy.testing.assert_allclose(
        norm(xgrad.array(data), ord, axis, keepdims).to_numpy(),
        numpy.linalg.norm(data, ord, axis, keepdims), rtol=1e-12)


def test_axis_none():
    data = numpy.random.RandomState(2).uniform(-2, 2, (2, 3, 4))
    x = xgrad.array(data)
    numpy.testing.assert_allclose(norm(x).to_numpy(), numpy.linalg.norm(data))
    assert norm(x, keepdims=True).shape == (1, 1, 1)
    numpy.testing.assert_allclose(norm(x[0], 1).to_numpy(), numpy.linalg.norm(data[0], 1))
    numpy.testing.assert_allclose(norm(x[0, 0], 1).to_numpy(),
                                  numpy.linalg.norm(data[0, 0], 1))


def test_integer_input_is_float64():
    x = xgrad.array(numpy.array([[3, 4], [0, 0]], numpy.int8))
    y = norm(x)
    assert y.dtype == numpy.float64 and y.to_numpy() == 5
    assert norm(x, 'nuc').dtype == numpy.float64


def test_empty_input_follows_numpy():
    assert norm(xgrad.zeros((0, 3))).to_numpy() == 0
    assert norm(xgrad.zeros((0,)), INF).to_numpy() == 0
    assert norm(xgrad.zeros((0, 3)), 'nuc').to_numpy() == 0
    assert norm(xgrad.zeros((3, 0)), 2).to_numpy() == 0
    with pytest.raises(xgrad.DimensionError, match='norm.*empty'):
        norm(xgrad.zeros((0,)), -INF)


# ---------------------------------------------------------------------------
# Bad input

@pytest.mark.parametrize('shape, kwargs, error, pattern', [
    ((3,), {'ord': 'fro'}, ValueError, "'fro' for vectors"),
    ((3,), {'ord': 'nuc'}, ValueError, "'nuc' for vectors"),
    ((2, 3), {'ord': 3}, ValueError, 'order 3 for matrices'),
    ((2, 3), {'ord': 'abc'}, ValueError, "'abc'"),
    ((2, 3), {'ord': [1]}, TypeError, 'ord'),
    ((2, 3), {'ord': True}, TypeError, 'ord'),
    ((2, 3, 4), {'ord': 1}, ValueError, '1-D or 2-D'),
    ((2, 3, 4), {'axis': (0, 1, 2)}, ValueError, 'axis'),
    ((2, 3), {'axis': 2}, xgrad.DimensionError, 'axis 2'),
    ((2, 3), {'axis': (0, -2)}, xgrad.DimensionError, 'repeats'),
    ((2, 3), {'axis': 'x'}, TypeError, 'axis'),
])
def test_bad_input(shape, kwargs, error, pattern):
    x = xgrad.ones(shape, numpy.float64).require_grad()
    with pytest.raises(error, match='norm: .*' + pattern):
        norm(x * 1, **kwargs)
    assert x.get_grad() is None


def test_wrong_input_type_names_x():
    with pytest.raises(TypeError, match='norm: x must be'):
        norm('abc')


# ---------------------------------------------------------------------------
# Closed forms

def test_two_norm_and_its_gradient():
    x = _leaf([3.0, -4.0])
    y = norm(x)
    assert y.to_numpy() == 5
    numpy.testing.assert_allclose(_grad(y, x), [0.6, -0.8])


def test_two_norm_gradient_at_zero_is_zero():
    for kwargs in ({}, {'axis': 1}, {'ord': 'fro'}):
        x = _leaf([[0.0, 0.0], [3.0, 4.0]])
        g = _grad(norm(x, **kwargs), x)
        assert not numpy.isnan(g).any()
        numpy.testing.assert_allclose(g[0], [0, 0])


def test_inf_norm_ties_and_one_norm():
    x = _leaf([1.0, -3.0, 3.0])
    numpy.testing.assert_array_equal(_grad(norm(x, INF), x), [0, -1, 1])
    numpy.testing.assert_array_equal(_grad(norm(x, 1), x), [1, -1, 1])


def test_matrix_one_and_inf_norms():
    x = _leaf([[1.0, -5.0], [2.0, 1.0]])
    assert norm(x, 1).to_numpy() == 6  # column sums 3, 6
    numpy.testing.assert_array_equal(_grad(norm(x, 1), x), [[0, -1], [0, 1]])
    assert norm(x, INF).to_numpy() == 6  # row sums 6, 3
    numpy.testing.assert_array_equal(_grad(norm(x, INF), x), [[1, -1], [0, 0]])
    assert norm(x, -INF).to_numpy() == 3


def test_singular_value_norms_of_a_diagonal_matrix():
    x = _leaf([[3.0, 0.0], [0.0, -2.0]])
    assert norm(x, 'nuc').to_numpy() == pytest.approx(5)
    assert norm(x, 2).to_numpy() == pytest.approx(3)
    assert norm(x, -2).to_numpy() == pytest.approx(2)
    # d nuc / dx = u v^T; d s_max / dx = u_1 v_1^T.
    numpy.testing.assert_allclose(_grad(norm(x, 'nuc'), x), [[1, 0], [0, -1]], atol=1e-12)
    numpy.testing.assert_allclose(_grad(norm(x, 2), x), [[1, 0], [0, 0]], atol=1e-12)
    numpy.testing.assert_allclose(_grad(norm(x, -2), x), [[0, 0], [0, -1]], atol=1e-12)


def test_zero_norm_counts_and_has_no_gradient():
    x = _leaf([0.0, 2.0, -1.0])
    y = norm(x, 0)
    assert y.to_numpy() == 2 and y.dtype == numpy.float64
    assert not y.is_backprop_required()


# ---------------------------------------------------------------------------
# The SVD behind ord 2, -2, 'nuc': gradients through u, s and vt

@pytest.mark.parametrize('shape', [(3, 3), (4, 2), (2, 4), (2, 3, 2)])
def test_svd_gradients_of_all_factors(shape):
    rs = numpy.random.RandomState(0)
    m, n = shape[-2:]
    k = min(m, n)
    c = xgrad.array(rs.uniform(0.5, 1.5, (k,)))
    wu = xgrad.array(rs.uniform(-1, 1, shape[:-2] + (m, m)))
    wv = xgrad.array(rs.uniform(-1, 1, shape[:-2] + (n, n)))
    wa = xgrad.array(rs.uniform(-1, 1, shape))

    def f(args):
        # Functions of the factors that do not depend on their signs.
        u, s, vt = _args.apply(norms.Svd(), args[0])
        v = xgrad.swapaxes(vt, -1, -2)
        uu = xgrad.matmul(u * c, xgrad.swapaxes(u, -1, -2))
        vv = xgrad.matmul(v * c, vt)
        usv = xgrad.matmul(u * xgrad.reshape(c * s, s.shape[:-1] + (1, k)), vt)
        return (xgrad.sum(uu * wu) + xgrad.sum(vv * wv) + xgrad.sum(usv * wa)
                + xgrad.sum(s * s * s),)

    x = xgrad.array(rs.uniform(-1, 1, shape)).require_grad()
    gy = xgrad.array(numpy.array(0.7)).require_grad()
    xgrad.check_backward(f, [x], [gy], [_eps(shape)], atol=1e-6, rtol=1e-5)
    xgrad.check_double_backward(f, [x], [gy], [xgrad.array(rs.uniform(-1, 1, shape))],
                                [_eps(shape), _eps(())], atol=1e-5, rtol=1e-4)
