"""A user's typed script: mypy must find nothing wrong in it
(tests/tooling/test_typing.py)."""
from typing import List, Optional, Tuple

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
# Results that are not one array (the stub takes them from the functions'
# return annotations): mypy must see each as what it is.
if xgrad.is_available():  # bool
    a, b = xgrad.broadcast_arrays(x, xgrad.ones((1, 1, 1, 4), xgrad.float64))
    first: Optional[xgrad.ndarray] = a.grad
    parts: List[xgrad.ndarray] = xgrad.split(scores, 3, axis=1) + xgrad.meshgrid(
        xgrad.arange(2), xgrad.arange(3))
    c, h = xgrad.lstm(xgrad.zeros((1, 2)), xgrad.ones((1, 8)))
    flag: bool = xgrad.is_available()
    dst = xgrad.zeros((2, 3))
    xgrad.copyto(dst, scores)  # returns None
    host: numpy.ndarray = xgrad.to_numpy(b)
    indices: Tuple[xgrad.ndarray, ...] = xgrad.nonzero(scores)
    assert a.shape == b.shape == (1, 2, 4, 4) and first is None and len(parts) == 5
    assert c.shape == h.shape == (1, 2) and flag and host.shape == b.shape
    assert len(indices) == 2 and bool(xgrad.all(dst == scores))
# Function transforms and checkpointing (issue 25)
v3 = xgrad.ones((3,), xgrad.float64)
jac = xgrad.functional.jacobian(lambda v: v * v, v3)
out, vjp_fn = xgrad.functional.vjp(lambda v: v * 2, v3)
vjps: Tuple[xgrad.ndarray, ...] = vjp_fn(v3)
out2, tangent_out = xgrad.functional.jvp(lambda v: v * v, (v3,), (v3,))
value, hv = xgrad.functional.hvp(lambda v: xgrad.sum(v * v), v3, v3)
value.backward()
kept: xgrad.ndarray = xgrad.checkpoint(layer, x, w)
assert jac.shape == (3, 3) and len(vjps) == 1 and kept.shape == (1, 3, 4, 4)
print(grads[0] is not None, worst < 1e-6, loss.shape)
