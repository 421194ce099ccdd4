"""ndarray methods and operators that call the op library: the same values
as NumPy's methods, and gradients through them."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# the gradient of a sum times 2: twos.

A = numpy.array([[0.5, -1.5, 2.0], [3.0, -0.25, 1.0]], numpy.float32)


@pytest.mark.parametrize('call', [
    lambda a: a.max(), lambda a: a.max(axis=1), lambda a: a.min(axis=0, keepdims=True),
    lambda a: a.argmax(), lambda a: a.argmin(axis=1), lambda a: a.var(axis=0),
    lambda a: a.prod(axis=1), lambda a: a.cumsum(axis=1), lambda a: a.all(),
    lambda a: a.any(axis=0), lambda a: a.clip(-1.0, 1.0), lambda a: a.ravel(),
    lambda a: a.flatten(), lambda a: a.take(numpy.array([2, 0]), axis=1),
    lambda a: a.repeat(2, axis=0), lambda a: a % 0.75, lambda a: 2.5 % a,
    lambda a: a // 0.75, lambda a: 4.0 // a,
], ids=['max', 'max_axis', 'min_keepdims', 'argmax', 'argmin', 'var', 'prod', 'cumsum',
        'all', 'any', 'clip', 'ravel', 'flatten', 'take', 'repeat', 'mod', 'rmod',
        'floordiv', 'rfloordiv'])
def test_method_matches_numpy(call):
    expected = numpy.asarray(call(A.copy()))
    actual = call(xgrad.array(A))
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    numpy.testing.assert_allclose(actual.to_numpy(), expected, rtol=1e-6)


def test_flatten_copies_and_ravel_is_differentiable():
    x = xgrad.array(A).require_grad()
    flat = x.flatten()
    (flat * 2).sum().backward()
    numpy.testing.assert_array_equal(x.grad.to_numpy(), numpy.full(A.shape, 2, A.dtype))
    assert flat._debug_data_memory_address != x._debug_data_memory_address


def test_mod_gradient():
    x = xgrad.array([2.5, -1.25]).require_grad()
    (x % 1.0).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]
    y = xgrad.array([0.75]).require_grad()
    (xgrad.array([2.0]) % y).sum().backward()
    assert y.grad.tolist() == [-2.0]  # -floor(2 / 0.75)
