"""A user's typed script: mypy must find nothing wrong in it
(tests/test_typing.py)."""
from typing import List, Optional

import numpy

import xgrad
import xgrad.testing


def layer(x: xgrad.ndarray, w: xgrad.ndarray) -> xgrad.ndarray:
    return xgrad.tanh(xgrad.conv(x, w, stride=1, pad=1))


x = xgrad.array(numpy.ones((1, 2, 4, 4)), dtype=xgrad.float64).require_grad()
w = xgrad.array(numpy.full((3, 2, 3, 3), 0.1), dtype=xgrad.float64).require_grad()
y: xgrad.ndarray = xgrad.sum(layer(x, w))
grads: List[Optional[xgrad.ndarray]] = xgrad.grad([y], [x, w])
xgrad.backward(y)
result = xgrad.testing.check_backward(
    lambda xs: layer(xs[0], xs[1]), [x, w], [xgrad.ones((1, 3, 4, 4), xgrad.float64)],
    eps=1e-6, atol=1e-6, rtol=1e-5)
worst: float = result.worst_abs
same = xgrad.check_backward
scores = xgrad.ones((2, 3), xgrad.float64)
loss = xgrad.mean(xgrad.softmax_cross_entropy(scores, xgrad.array([0, 1])))
print(grads[0] is not None, worst < 1e-6, loss.shape)
