"""The ops with native CPU kernels besides convolution (pooling, batch
normalization, matmul and linear, the vector kernels of the elementwise ops,
softmax, the LSTM cell) on every memory layout.

Each operand and the output gradient come in one layout of
tests/ops/_layouts.py, wrapped without a copy (``from_numpy``); the forward
and the first and second-order gradients must equal those of the same op on
C-contiguous copies. The two runs go through different code: the copies take
the native kernels; an operand that a kernel does not read as it is goes to
NumPy's loops or is made plain first (xgrad/_backend/operands.py).
Convolution: test_conv_layouts.py.
"""

import numpy
import pytest

import xgrad

from ._layouts import LAYOUTS, in_layout


def _cases(rng):
    """name: (function of xgrad arrays, the NumPy operands)."""
    x4 = rng.uniform(-1, 1, (4, 8, 12, 12))
    rows, cols = rng.uniform(-1, 1, (40, 33)), rng.uniform(-1, 1, (33, 50))
    return {
        'max_pool': (lambda x: xgrad.max_pool(x, 3, 2, 1), [x4]),
        'average_pool': (lambda x: xgrad.average_pool(x, 3, 2, 1), [x4]),
        'average_pool_ignore': (lambda x: xgrad.average_pool(x, 3, 2, 1, pad_mode='ignore'),
                                [x4]),
        'batch_norm': (lambda x, g, b: xgrad.batch_norm(x, g, b, axis=(0, 2, 3)),
                       [x4, rng.rand(8) + .5, rng.rand(8)]),
        'batch_norm_2d': (lambda x, g, b: xgrad.batch_norm(x, g, b),
                          [rng.uniform(-1, 1, (16, 10)), rng.rand(10) + .5, rng.rand(10)]),
        'fixed_batch_norm': (
            lambda x, g, b, m, v: xgrad.fixed_batch_norm(x, g, b, m, v, axis=(0, 2, 3)),
            [x4, rng.rand(8) + .5, rng.rand(8), rng.rand(8), rng.rand(8) + .5]),
        'matmul': (xgrad.matmul, [rows, cols]),
        'batched_matmul': (xgrad.matmul, [rng.uniform(-1, 1, (3, 20, 33)),
                                          rng.uniform(-1, 1, (3, 33, 25))]),
        'dot': (xgrad.dot, [rows, cols]),
        'linear': (xgrad.linear, [rows, rng.uniform(-1, 1, (50, 33)), rng.rand(50)]),
        'erf': (xgrad.erf, [x4]),
        'softplus': (xgrad.softplus, [x4]),
        'leaky_relu': (lambda x: xgrad.leaky_relu(x, 0.2), [x4]),
        'elu': (xgrad.elu, [x4]),
        'tanh': (xgrad.tanh, [x4]),
        'sigmoid': (xgrad.sigmoid, [x4]),
        'relu': (xgrad.relu, [x4]),
        'exp': (xgrad.exp, [x4]),
        'softmax': (lambda x: xgrad.softmax(x, axis=-1), [x4]),
        'log_softmax': (lambda x: xgrad.log_softmax(x, axis=-1), [x4]),
        'sum': (lambda x: xgrad.sum(x, axis=(0, 2, 3)), [x4]),
        'lstm': (lambda c, x: xgrad.lstm(c, x)[1], [rng.uniform(-1, 1, (6, 10)),
                                                   rng.uniform(-1, 1, (6, 40))]),
    }


NAMES = sorted(_cases(numpy.random.RandomState(0)))


def _gradients(fn, xs, gy):
    """fn's output, its first-order gradients weighted by gy (recorded), and
    the second-order gradients of the sum of their squares."""
    y = fn(*xs)
    first = xgrad.grad([y], xs, grad_outputs=[gy], enable_double_backprop=True)
    second = xgrad.grad([sum((g * g).sum() for g in first if g is not None)], xs)
    return [y] + list(first) + list(second)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('name', NAMES)
def test_native_op_on_layout(name, layout, dtype):
    rng = numpy.random.RandomState(0)
    fn, arrays = _cases(rng)[name]
    odd = [in_layout(a.astype(dtype), layout) for a in arrays]
    plain = [numpy.array(a, dtype=dtype, order='C') for a in odd]
    shape = fn(*[xgrad.array(a) for a in plain]).shape
    gy = rng.uniform(-1, 1, shape).astype(dtype)
    got = _gradients(fn, [xgrad.from_numpy(a).require_grad() for a in odd],
                     xgrad.from_numpy(in_layout(gy, layout)))
    want = _gradients(fn, [xgrad.array(a).require_grad() for a in plain],
                      xgrad.array(in_layout(gy, layout)))
    # (the two runs sum in other orders: batch norm's second-order gradient in
    # float32 sums 576 products a channel, 2e-5 apart of values up to 3)
    tol = 1e-4 if dtype == 'float32' else 1e-12
    for i, (a, b) in enumerate(zip(got, want)):
        assert (a is None) == (b is None), i
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape, i
            b = b.to_numpy()
            numpy.testing.assert_allclose(a.to_numpy(), b, rtol=tol,
                                          atol=tol * max(1.0, float(abs(b).max(initial=0))),
                                          err_msg='output {}'.format(i))
