"""Memory layouts for ``python -m xgrad check --layouts``: the op gets its
inputs with the same values held in another way, as a user's NumPy data
may come (a transposed view, every other element of a bigger buffer,
negative strides, an odd address), and its gradients must not change.

The gradient checks copy their inputs into fresh contiguous leaves, so a
layout is applied inside the checked function, by an identity op whose
forward copies into the layout and whose gradient passes through (itself
differentiable: a second-order check goes through it too). Native devices
only: a GPU array has no such layouts to give.
"""

import numpy

from xgrad import _core
from xgrad._ops.creation import from_numpy

# What --layouts takes, and what it runs when given no list.
LAYOUTS = ('transposed', 'strided', 'negative', 'unaligned')


def in_layout(a, layout):
    """``a``'s values (a NumPy array) held in ``layout``."""
    if layout == 'unaligned':  # one byte into a buffer: an odd address
        buf = numpy.zeros(a.nbytes + 1, numpy.uint8)
        view = buf[1:].view(a.dtype).reshape(a.shape)
        view[...] = a
        return view
    if a.ndim == 0:
        return a.copy()
    if layout == 'transposed':  # the last two axes swapped in memory
        if a.ndim >= 2:
            return numpy.swapaxes(numpy.ascontiguousarray(numpy.swapaxes(a, -1, -2)), -1, -2)
        layout = 'strided'
    if layout == 'strided':  # every other element of a bigger buffer
        big = numpy.zeros(tuple(2 * n for n in a.shape), a.dtype)
        view = big[tuple(slice(None, None, 2) for _ in a.shape)]
        view[...] = a
        return view
    if layout == 'negative':
        flip = (slice(None, None, -1),) * a.ndim
        return numpy.array(a[flip], order='C')[flip]
    raise ValueError('unknown layout {!r}; the layouts are {}'.format(
        layout, ', '.join(LAYOUTS)))


class _Relayout(_core.FunctionNode):
    """The identity, with its output held in a layout."""

    def __init__(self, layout):
        super().__init__()
        self.layout = layout

    def forward(self, inputs):
        return (in_layout(inputs[0], self.layout),)

    def backward(self, target_input_indexes, grad_outputs):
        return (grad_outputs[0],)


def relayout(x, layout):
    """``x`` (an xgrad array on a native device) held in ``layout``, on the
    graph: gradients flow back to ``x`` unchanged."""
    return _Relayout(layout).apply([x])[0]


def constant_in_layout(x, layout):
    """A constant input (labels, indices) in ``layout``, not on any graph."""
    return from_numpy(in_layout(x.to_numpy(), layout), x.device)
