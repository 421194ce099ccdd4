"""PyOp, the base of ops written in plain Python: one gradient formula for the
raw fast path and the recorded (double-backprop) path, and the
once-differentiable contract."""

import numpy
import pytest

import xgrad
from xgrad._ops import _args
from xgrad._ops._op import PyOp


class Cube(PyOp):
    """y = x ** 3 with the derivative written once against ``xp``."""
    op_name = 'cube'

    def forward(self, inputs):
        self.retain_inputs((0,))
        return (inputs[0] ** 3,)

    def grads(self, xp, targets, gys, xs, ys):
        self.seen.append(xp)
        return (gys[0] * 3 * xs[0] * xs[0],)


class OnceCube(Cube):
    op_name = 'once_cube'
    twice_differentiable = False

    def grads(self, xp, targets, gys, xs, ys):
        # A raw-only formula: NumPy calls on whatever arrays come in.
        return (numpy.multiply(gys[0], 3 * numpy.square(xs[0])),)


def cube(x, cls=Cube):
    op = cls()
    op.seen = []
    return _args.apply(op, x), op


def test_raw_fast_path_when_nothing_is_recorded():
    x = xgrad.array([1.0, 2.0]).require_grad()
    y, op = cube(x)
    y.backward()
    assert x.grad.tolist() == [3.0, 12.0]
    assert op.seen == [xgrad._ops._xp.numpy_ns]


def test_double_backprop_records_the_same_formula():
    x = xgrad.array([1.0, 2.0]).require_grad()
    y, _ = cube(x)
    gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.ones_like(y)],
                     enable_double_backprop=True)
    ggx, = xgrad.grad([gx], [x], grad_outputs=[xgrad.ones_like(gx)])
    assert gx.tolist() == [3.0, 12.0]
    assert ggx.tolist() == [6.0, 12.0]  # d/dx 3x^2 = 6x


def test_recorded_path_sees_the_xgrad_namespace():
    x = xgrad.array([1.0, 2.0]).require_grad()
    y, op = cube(x)
    xgrad.grad([y], [x], grad_outputs=[xgrad.ones_like(y)], enable_double_backprop=True)
    assert op.seen == [xgrad._ops._xp.xgrad_ns]


def test_once_differentiable_first_order_works():
    x = xgrad.array([1.0, 2.0]).require_grad()
    y, _ = cube(x, OnceCube)
    gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.ones_like(y)],
                     enable_double_backprop=True)
    assert gx.tolist() == [3.0, 12.0]
    assert gx.is_backprop_required()


def test_once_differentiable_second_order_raises_naming_the_op():
    x = xgrad.array([1.0, 2.0]).require_grad()
    y, _ = cube(x, OnceCube)
    gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.ones_like(y)],
                     enable_double_backprop=True)
    with pytest.raises(xgrad.GradientError, match='once_cube is not twice differentiable'):
        xgrad.grad([gx], [x], grad_outputs=[xgrad.ones_like(gx)])
    # The first-order graph is intact: asking again works.
    y2, _ = cube(x, OnceCube)
    y2.backward()
    assert x.grad.tolist() == [3.0, 12.0]


def test_once_differentiable_without_double_backprop_uses_raw_path():
    x = xgrad.array([2.0]).require_grad()
    y, _ = cube(x, OnceCube)
    y.backward()
    assert x.grad.tolist() == [12.0]


def test_forward_error_records_nothing():
    class Broken(PyOp):
        op_name = 'broken'

        def forward(self, inputs):
            raise xgrad.DimensionError('broken: bad shape')

    x = xgrad.array([1.0]).require_grad()
    with pytest.raises(xgrad.DimensionError):
        _args.apply(Broken(), x)
    y = x * 2
    y.backward()
    assert x.grad.tolist() == [2.0]
