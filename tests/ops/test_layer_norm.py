"""layer_norm beyond the registry's generated tests: the closed form on the
native kernels' multi-block path and on the ufunc path (float16), results
independent of the thread count, the recorded second derivative, and bad
input."""

import os
import subprocess
import sys

import numpy
import pytest

import xgrad


def _reference(x, gamma, beta, gy, eps):
    """(y, gx, ggamma, gbeta) in float64 by the closed form over the last
    gamma.ndim axes."""
    k = gamma.ndim
    axes = tuple(range(x.ndim - k, x.ndim))
    xd, g64, gy64 = x.astype('f8'), gamma.astype('f8'), gy.astype('f8')
    mean = xd.mean(axis=axes, keepdims=True)
    inv_std = 1 / numpy.sqrt(xd.var(axis=axes, keepdims=True) + eps)
    x_hat = (xd - mean) * inv_std
    g = gy64 * g64
    gx = inv_std * (g - g.mean(axis=axes, keepdims=True)
                    - x_hat * (g * x_hat).mean(axis=axes, keepdims=True))
    lead = tuple(range(x.ndim - k))
    return x_hat * g64 + beta, gx, (gy64 * x_hat).sum(axis=lead), gy64.sum(axis=lead)


def _run(x, gamma, beta, gy, eps):
    xs = [xgrad.array(a).require_grad() for a in (x, gamma, beta)]
    y = xgrad.layer_norm(*xs, eps=eps)
    xgrad.sum(y * xgrad.array(gy)).backward()
    return [y.to_numpy()] + [a.grad.to_numpy() for a in xs]


@pytest.mark.parametrize('shape, k, dtype, rtol', [
    ((600, 512), 1, 'float32', 2e-5),     # over PARALLEL_SIZE: row blocks on the pool
    ((3, 70, 96), 1, 'float64', 1e-12),
    ((5, 4, 6, 7), 2, 'float32', 2e-5),
    ((9, 33), 1, 'float16', 2e-2),        # the ufunc path, float32 inside
    ((1, 1), 1, 'float32', 1e-6),         # one element: x_hat = 0
])
def test_closed_form(shape, k, dtype, rtol):
    rs = numpy.random.RandomState(0)
    x = (rs.standard_normal(shape) * 3 + 1).astype(dtype)
    gamma = rs.uniform(0.5, 1.5, shape[-k:]).astype(dtype)
    beta = rs.standard_normal(shape[-k:]).astype(dtype)
    gy = rs.standard_normal(shape).astype(dtype)
    got = _run(x, gamma, beta, gy, 1e-5)
    want = _reference(x, gamma, beta, gy, 1e-5)
    for name, a, b in zip(('y', 'gx', 'ggamma', 'gbeta'), got, want):
        assert a.dtype == numpy.dtype(dtype) and a.shape == b.shape, name
        scale = max(numpy.abs(b).max(), 1.0)
        numpy.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=name)


def test_non_contiguous_x_and_parameters():
    rs = numpy.random.RandomState(1)
    x = rs.standard_normal((8, 40)).astype('float32')
    gamma = rs.uniform(0.5, 1.5, 80).astype('float32')[::2]
    beta = rs.standard_normal(40).astype('float32')
    gy = rs.standard_normal((40, 8)).astype('float32').T
    xt = xgrad.array(x.T.copy()).require_grad()
    ys = xgrad.layer_norm(xgrad.transpose(xt), xgrad.array(gamma), xgrad.array(beta))
    xgrad.sum(ys * xgrad.array(gy)).backward()
    y, gx, _, _ = _reference(x, gamma, beta, gy, 1e-5)
    numpy.testing.assert_allclose(ys.to_numpy(), y, rtol=2e-5, atol=2e-5)
    numpy.testing.assert_allclose(xt.grad.to_numpy(), gx.T, rtol=2e-5, atol=2e-5)


_BITS = r'''
import hashlib, numpy, xgrad
rs = numpy.random.RandomState(2)
x = xgrad.array(rs.standard_normal((1024, 768)).astype('float32')).require_grad()
g = xgrad.array(rs.uniform(0.5, 1.5, 768).astype('float32')).require_grad()
b = xgrad.array(rs.standard_normal(768).astype('float32')).require_grad()
y = xgrad.layer_norm(x, g, b)
xgrad.sum(y * y).backward()
print(hashlib.sha1(b''.join(a.to_numpy().tobytes() for a in (y, x.grad, g.grad, b.grad))).hexdigest())
'''


def test_the_same_bits_at_any_thread_count():
    """Row blocks depend on the shape alone, and the parameters' gradients
    are summed over the blocks in order."""
    digests = set()
    for threads in ('1', '2', '3'):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        out = subprocess.run([sys.executable, '-c', _BITS], env=env, capture_output=True,
                             text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests


def test_second_derivative_against_numerical_differentiation():
    rs = numpy.random.RandomState(3)
    x = rs.standard_normal((3, 5))
    gamma, beta = rs.uniform(0.5, 1.5, 5), rs.standard_normal(5)
    gy, ggx = rs.standard_normal((3, 5)), rs.standard_normal((3, 5))
    ggg, ggb = rs.standard_normal(5), rs.standard_normal(5)
    def f(inputs):
        return xgrad.layer_norm(*inputs),
    xgrad.check_double_backward(
        f, [xgrad.array(a).require_grad() for a in (x, gamma, beta)],
        [xgrad.array(gy).require_grad()],
        [xgrad.array(a) for a in (ggx, ggg, ggb)], eps=1e-4, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('x, gamma, beta, kwargs, error, match', [
    ((4, 5), (4,), (4,), {}, xgrad.DimensionError, 'trailing axes of x'),
    ((4, 5), (4, 5, 1), (4, 5, 1), {}, xgrad.DimensionError, 'trailing axes'),
    ((4, 5), (), (), {}, xgrad.DimensionError, 'at least one axis'),
    ((4, 5), (5,), (4,), {}, xgrad.DimensionError, 'beta has shape'),
    ((4, 5), (5,), (5,), {'eps': 0}, ValueError, 'eps must be'),
    ((4, 5), (5,), (5,), {'eps': -1.0}, ValueError, 'eps must be'),
])
def test_bad_shapes_and_eps(x, gamma, beta, kwargs, error, match):
    xs = [xgrad.ones(s).require_grad() for s in (x, gamma, beta)]
    with pytest.raises(error, match=match):
        xgrad.layer_norm(*xs, **kwargs)
    assert all(a.grad is None for a in xs)


def test_integer_input_is_a_dtype_error():
    with pytest.raises(xgrad.DtypeError, match='layer_norm: x'):
        xgrad.layer_norm(xgrad.ones((2, 3), 'int32'), xgrad.ones(3), xgrad.zeros(3))
