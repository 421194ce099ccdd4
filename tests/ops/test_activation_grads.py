"""Gradients recorded as single ops in double backprop (tanh's and
sigmoid's as TanhGrad and SigmoidGrad, a 2-d product's as one Matmul of
transposed operands); their own gradients must give the higher
derivatives. Checked up to the third derivative against the closed forms,
float32 and float64, on arrays and with a gradient that is not all ones."""

import numpy
import pytest

import xgrad


def _tanh_derivatives(x):
    t = numpy.tanh(x)
    return 1 - t * t, -2 * t * (1 - t * t), (1 - t * t) * (6 * t * t - 2)


def _sigmoid_derivatives(x):
    s = 1 / (1 + numpy.exp(-x))
    return s * (1 - s), s * (1 - s) * (1 - 2 * s), s * (1 - s) * (1 - 6 * s + 6 * s * s)


CASES = {'tanh': (xgrad.tanh, _tanh_derivatives), 'sigmoid': (xgrad.sigmoid, _sigmoid_derivatives)}
TOL = {'float32': dict(rtol=1e-4, atol=1e-5), 'float64': dict(rtol=1e-12, atol=1e-13)}


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('name', sorted(CASES))
def test_first_three_derivatives_match_the_closed_forms(name, dtype):
    f, derivatives = CASES[name]
    rng = numpy.random.default_rng(3)
    x_np = rng.uniform(-2.5, 2.5, (4, 5)).astype(dtype)
    w_np = rng.uniform(0.5, 1.5, (4, 5)).astype(dtype)  # a seed that is not all ones
    x = xgrad.array(x_np).require_grad()
    w = xgrad.array(w_np)
    d1, = xgrad.grad([f(x)], [x], grad_outputs=[w], enable_double_backprop=True)
    d2, = xgrad.grad([xgrad.sum(d1)], [x], enable_double_backprop=True)
    d3, = xgrad.grad([xgrad.sum(d2)], [x])
    e1, e2, e3 = derivatives(x_np.astype(numpy.float64))
    for got, want in ((d1, w_np * e1), (d2, w_np * e2), (d3, w_np * e3)):
        assert got.dtype == xgrad.dtype(dtype)
        numpy.testing.assert_allclose(xgrad.to_numpy(got), want, **TOL[dtype])


@pytest.mark.parametrize('name', sorted(CASES))
def test_the_gradient_with_respect_to_the_seed_is_the_first_derivative(name):
    """d/dw of sum(w * f'(x)) is f'(x): the op's gradient in its gy input."""
    f, derivatives = CASES[name]
    x_np = numpy.linspace(-2, 2, 7)
    x = xgrad.array(x_np)
    w = xgrad.array(numpy.ones(7) * 0.7).require_grad()
    g, = xgrad.grad([f(x.require_grad())], [x], grad_outputs=[w], enable_double_backprop=True)
    gw, = xgrad.grad([xgrad.sum(g * g)], [w])
    numpy.testing.assert_allclose(xgrad.to_numpy(gw), 2 * 0.7 * derivatives(x_np)[0] ** 2,
                                  rtol=1e-12)


def test_second_order_against_numerical_differentiation():
    x = xgrad.array(numpy.array([-1.3, -0.2, 0.4, 1.7])).require_grad()
    gy = xgrad.array(numpy.array([0.3, -1.1, 0.8, 0.5]))
    ggx = xgrad.array(numpy.array([0.9, 0.2, -0.4, 1.2]))
    for f, _ in CASES.values():
        xgrad.check_double_backward(lambda xs, f=f: (f(xs[0]),), (x,), (gy,), (ggx,),
                                    atol=1e-7, rtol=1e-6)


def test_matmul_gradients_to_the_third_order():
    """The gradient of a 2-d product records products of transposed operands
    (Matmul with ta/tb) and no transposes; their own gradients must give the
    higher derivatives. With u = x @ W and c the column sums of W:
    L1 = sum(u**3), g1 = dL1/dx = 3u**2 W.T, g2 = d sum(g1)/dx = 6 u c W.T,
    g3 = d sum(g2)/dx = 6 c**2 W.T in every row; d sum(g2)/dW against central
    differences of sum(6 (x @ W) c**2)."""
    rng = numpy.random.default_rng(5)
    x_np = rng.standard_normal((3, 4))
    w_np = rng.standard_normal((4, 2)) * 0.5
    x = xgrad.array(x_np).require_grad()
    w = xgrad.array(w_np).require_grad()
    u = x @ w
    g1, = xgrad.grad([xgrad.sum(u * u * u)], [x], enable_double_backprop=True)
    g2, = xgrad.grad([xgrad.sum(g1)], [x], enable_double_backprop=True)
    g3x, g3w = xgrad.grad([xgrad.sum(g2)], [x, w])
    un = x_np @ w_np
    c = w_np.sum(axis=0)
    numpy.testing.assert_allclose(xgrad.to_numpy(g1), 3 * un ** 2 @ w_np.T, rtol=1e-12)
    numpy.testing.assert_allclose(xgrad.to_numpy(g2), (6 * un * c) @ w_np.T, rtol=1e-12)
    numpy.testing.assert_allclose(xgrad.to_numpy(g3x),
                                  numpy.tile(6 * c ** 2 @ w_np.T, (3, 1)), rtol=1e-12)

    def third(wv):
        return numpy.sum(6 * (x_np @ wv) * wv.sum(axis=0) ** 2)
    numerical = numpy.zeros_like(w_np)
    for index in numpy.ndindex(*w_np.shape):
        step = numpy.zeros_like(w_np)
        step[index] = 1e-6
        numerical[index] = (third(w_np + step) - third(w_np - step)) / 2e-6
    numpy.testing.assert_allclose(xgrad.to_numpy(g3w), numerical, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize('double', [False, True])
@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
def test_relu_maximum_minimum_gradients_select_whatever_gy_holds(dtype, double):
    """The gradients of relu, maximum and minimum send gy to the chosen
    elements and 0 elsewhere, also for an inf or NaN gy, and the same on
    every path: the native select kernels (float32/64, raw), NumPy's
    formula (float16) and the recorded one (double backprop), which
    multiplied gy by the mask and so gave NaN where the first gave 0."""
    x = xgrad.array(numpy.array([-1.0, 0.0, 2.0], dtype)).require_grad()
    gy = xgrad.array(numpy.array([numpy.inf, numpy.nan, 1.0], dtype))
    gx, = xgrad.grad([xgrad.relu(x)], [x], grad_outputs=[gy], enable_double_backprop=double)
    numpy.testing.assert_array_equal(gx.to_numpy(), numpy.array([0.0, 0.0, 1.0], dtype))
    a = xgrad.array(numpy.array([-1.0, 3.0, 2.0], dtype)).require_grad()
    b = xgrad.array(numpy.array([1.0, 0.0, 2.0], dtype)).require_grad()
    inf = xgrad.array(numpy.full(3, numpy.inf, dtype))
    for op, to_a in ((xgrad.maximum, [0, 1, 1]), (xgrad.minimum, [1, 0, 1])):
        ga, gb = xgrad.grad([op(a, b) * inf], [a, b], enable_double_backprop=double)
        expected_a = numpy.where(to_a, numpy.inf, 0).astype(dtype)
        numpy.testing.assert_array_equal(ga.to_numpy(), expected_a)
        numpy.testing.assert_array_equal(gb.to_numpy(), numpy.where(
            to_a, 0, numpy.inf).astype(dtype))
