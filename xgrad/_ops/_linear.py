"""Linear ops that are each other's gradients.

A linear map given by a fixed plan (window geometry, argmax positions,
indices...) has its adjoint as its gradient, and the adjoint's gradient is
the map again: a pair of ops over one plan serves derivatives of any order.
``run`` applies one of them: recorded on xgrad arrays (double backprop), its
raw ``compute`` on raw arrays (the fast path).
"""

from xgrad._ops import _args
from xgrad._ops._op import PyOp


def run(op, *inputs):
    """``op`` on ``inputs`` (None ones left out): recorded (``_args.apply``)
    on xgrad arrays, ``op.compute`` on raw arrays. Gradient formulas call ops
    through this, so the same formula serves the fast path and double
    backprop."""
    inputs = tuple(a for a in inputs if a is not None)
    if isinstance(inputs[0], _args.ndarray):
        return _args.apply(op, *inputs)
    return op.compute(*inputs)


class LinearPair(PyOp):
    """One side of a pair: ``compute(raw)`` over ``self.plan``; its gradient
    is the class named by ``adjoint`` over the same plan."""
    adjoint = None

    def __init__(self, plan):
        self.plan = plan

    def forward(self, inputs):
        return (self.compute(inputs[0]),)

    def grads(self, xp, targets, gys, xs, ys):
        return (run(type(self).adjoint(self.plan), gys[0]),)
