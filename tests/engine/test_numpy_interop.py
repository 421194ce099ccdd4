"""NumPy on the left of an xgrad array keeps the graph (``__array_ufunc__``),
or raises a TypeError; it never returns a NumPy array with the gradient
silently dropped. Each gradient is checked against its closed form."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# signbit of literal values.


def leaf(values, dtype=numpy.float32):
    return xgrad.array(numpy.asarray(values, dtype=dtype)).require_grad()


def grad_of(expr, a):
    y = expr(a)
    assert isinstance(y, xgrad.ndarray), type(y)
    assert y.is_backprop_required()
    xgrad.sum(y).backward()
    return y, a.grad.to_numpy()


A = [0.5, 1.0, 2.0]


@pytest.mark.parametrize('expr, value, grad, dtype', [
    (lambda a: numpy.ones(3) + a,
     lambda x: 1 + x, lambda x: numpy.ones_like(x), numpy.float64),
    # A NumPy scalar is a scalar, as in ChainerX: the float32 array decides.
    (lambda a: numpy.float64(2) * a,
     lambda x: 2 * x, lambda x: 2 * numpy.ones_like(x), numpy.float32),
    (lambda a: numpy.float32(0.5) * a,
     lambda x: 0.5 * x, lambda x: 0.5 * numpy.ones_like(x), numpy.float32),
    (lambda a: numpy.tanh(a),
     numpy.tanh, lambda x: 1 - numpy.tanh(x) ** 2, numpy.float32),
    (lambda a: numpy.exp(a),
     numpy.exp, numpy.exp, numpy.float32),
    (lambda a: numpy.float32(2) ** a,
     lambda x: 2 ** x, lambda x: numpy.log(2) * 2 ** x, numpy.float32),
    (lambda a: numpy.array([3.0, 4.0, 5.0], numpy.float32) - a,
     lambda x: [3, 4, 5] - x, lambda x: -numpy.ones_like(x), numpy.float32),
    (lambda a: numpy.float32(1) / a,
     lambda x: 1 / x, lambda x: -1 / x ** 2, numpy.float32),
    (lambda a: numpy.multiply(a, a),
     lambda x: x * x, lambda x: 2 * x, numpy.float32),
])
def test_numpy_on_the_left_records_on_the_graph(expr, value, grad, dtype):
    a = leaf(A)
    x = numpy.array(A, numpy.float64)
    y, ga = grad_of(expr, a)
    # ChainerX's promotion (xgrad/_dtypes.pyx), whatever the NumPy version:
    # NumPy 2 would make numpy.float64(2) * a float64, NumPy 1.x float32.
    assert y.dtype == dtype
    numpy.testing.assert_allclose(y.to_numpy(), value(x), rtol=1e-6)
    numpy.testing.assert_allclose(ga, grad(x), rtol=1e-6)


def test_numpy_weight_times_xgrad_matrix_parameter():
    """The issue's optimizer-style case: a NumPy float32 scalar times a
    parameter matrix, then a loss; dL/dW = 0.5 * x (outer with ones)."""
    W = leaf([[1.0, -2.0], [3.0, 0.5]])
    x = xgrad.array([[2.0, 1.0]])
    loss = xgrad.sum((numpy.float32(0.5) * W) @ x.T)
    loss.backward()
    numpy.testing.assert_allclose(W.grad.to_numpy(), [[1.0, 0.5], [1.0, 0.5]])


def test_numpy_functions_use_the_xgrad_namesake_on_a_graph():
    a = leaf([1.0, 2.0])
    y = numpy.concatenate([a, a * 3])
    assert isinstance(y, xgrad.ndarray)
    xgrad.sum(y).backward()
    numpy.testing.assert_allclose(a.grad.to_numpy(), [4.0, 4.0])


@pytest.mark.parametrize('expr', [
    lambda a: numpy.cbrt(a),            # a ufunc xgrad has no op for
    lambda a: numpy.add.reduce(a),      # a ufunc method other than a call
    lambda a: numpy.exp(a, out=numpy.empty(2, numpy.float32)),
    lambda a: numpy.cumprod(a),         # a NumPy function xgrad lacks
])
def test_what_would_drop_the_gradient_raises_type_error(expr):
    a = leaf([1.0, 2.0])
    with pytest.raises(TypeError, match='would drop its gradient'):
        expr(a)


def test_results_that_carry_no_gradient_and_arrays_off_the_graph_still_work():
    a = leaf([1.0, -2.0])
    assert numpy.allclose(a, [1.0, -2.0])
    assert numpy.shape(a) == (2,)
    numpy.testing.assert_array_equal(numpy.signbit(a), [False, True])
    # Off every graph NumPy computes as before.
    b = xgrad.array([1.0, 8.0])
    numpy.testing.assert_allclose(numpy.cbrt(b), [1.0, 2.0])
    assert numpy.add.reduce(b) == 9.0
    # Leaving the graph on purpose.
    numpy.testing.assert_allclose(numpy.cbrt(a.as_grad_stopped()), numpy.cbrt([1.0, -2.0]))


def test_asarray_gives_the_data_deliberately():
    """numpy.asarray on an xgrad array gives its data (no copy on the CPU),
    as ChainerX does for native arrays: frameworks rely on it."""
    a = leaf([1.0, 2.0])
    data = numpy.asarray(a)
    assert type(data) is numpy.ndarray
    assert numpy.shares_memory(data, a.to_numpy())
    assert numpy.array(a, dtype=numpy.float64).dtype == numpy.float64
