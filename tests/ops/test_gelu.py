"""gelu beyond the registry's generated tests: torch's closed forms (exact
and tanh), the formula path (no vector kernel), and bad arguments."""

import math

import numpy
import pytest

import xgrad
from xgrad._ops import mathematical
from xgrad._ops._xp import numpy_ns


def _closed_form(x, approximate):
    """(y, dy/dx) in float64."""
    x = x.astype(numpy.float64)
    if approximate == 'tanh':
        k = math.sqrt(2 / math.pi)
        t = numpy.tanh(k * (x + 0.044715 * x ** 3))
        return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
    cdf = 0.5 * (1 + numpy.vectorize(math.erf, otypes=[float])(x / math.sqrt(2)))
    return x * cdf, cdf + x * numpy.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


@pytest.mark.parametrize('approximate', ['none', 'tanh'])
@pytest.mark.parametrize('dtype, rtol', [('float16', 3e-3), ('float32', 2e-6), ('float64', 1e-13)])
def test_closed_form(approximate, dtype, rtol):
    x = numpy.linspace(-9, 9, 1001).astype(dtype)
    xa = xgrad.array(x).require_grad()
    y = xgrad.gelu(xa, approximate=approximate)
    xgrad.sum(y).backward()
    want_y, want_g = _closed_form(x, approximate)
    assert y.dtype == numpy.dtype(dtype) and xa.grad.dtype == numpy.dtype(dtype)
    numpy.testing.assert_allclose(y.to_numpy(), want_y, rtol=rtol, atol=rtol)
    numpy.testing.assert_allclose(xa.grad.to_numpy(), want_g, rtol=rtol, atol=rtol)


@pytest.mark.parametrize('approximate', ['none', 'tanh'])
def test_the_formula_path_agrees_with_the_vector_kernel(approximate, monkeypatch):
    """Where the kernel does not apply (CuPy arrays take the same lines), the
    ufunc formula and its gradient give the kernel's values."""
    x = numpy.random.RandomState(0).standard_normal((7, 9))
    gy = numpy.random.RandomState(1).standard_normal((7, 9))
    kernel_y = mathematical._gelu(x, approximate)
    kernel_g = mathematical._gelu_grad(numpy_ns, gy, x, None, approximate)
    monkeypatch.setattr(mathematical.native_kernels, 'gelu_forward', lambda x, t: None)
    monkeypatch.setattr(mathematical.native_kernels, 'gelu_grad', lambda gy, x, t: None)
    numpy.testing.assert_allclose(mathematical._gelu(x, approximate), kernel_y, rtol=1e-13)
    g = mathematical._gelu_grad(numpy_ns, gy, x, None, approximate)
    _, dy = _closed_form(x, approximate)
    numpy.testing.assert_allclose(g, gy * dy, rtol=1e-12, atol=1e-14)
    numpy.testing.assert_allclose(g, kernel_g, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize('bad', ['erf', 'TANH', None, True])
def test_a_bad_approximation_is_refused(bad):
    x = xgrad.ones((2, 3)).require_grad()
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh'"):
        xgrad.gelu(x, approximate=bad)
