# cython: language_level=3
"""The base of xgrad's built-in ops: one gradient formula, two array kinds.

A built-in op writes its gradient once, in ``_grads(xp, ...)``, with array
operators and the functions of the namespace ``xp``. The engine calls it with
``xp`` = NumPy (CuPy on a GPU: the device's ``ns``) on raw arrays when nothing
can be recorded (the fast path), and
with ``xp`` = xgrad on xgrad arrays otherwise, so the same formula is also the
double-backprop graph.
"""

from xgrad._context cimport device_ns
from xgrad._function_node cimport FunctionNode, apply
from xgrad._errors import GradientError
from xgrad._ops._xp import numpy_ns, xgrad_ns

cdef object NP = numpy_ns
cdef object XG = xgrad_ns


cdef class Op(FunctionNode):

    cdef bint _formula_only(self):
        # The formula computes with the retained arrays and keeps none: the
        # engine may hand it the arrays themselves (see _retained_input).
        return True

    cpdef backward(self, target_input_indexes, grad_outputs):
        return self._grads(XG, tuple(target_input_indexes), tuple(grad_outputs),
                           self._bw_inputs, self._bw_outputs)

    cdef object _backward_raw(self, tuple targets, tuple grad_outputs,
                              tuple xs, tuple ys):
        return self._grads(device_ns(self._device), targets, grad_outputs, xs, ys)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        raise NotImplementedError(type(self).__name__)


cdef class PyOp(Op):
    """The base of ops written in plain Python.

    Define ``forward(self, inputs)`` on raw arrays (tuple in, tuple out; call
    ``self.retain_inputs``/``self.retain_outputs`` for what the gradient
    needs) and ``grads(self, xp, targets, gys, xs, ys)``: one gradient per
    target input index, written with array operators and functions of ``xp``
    (see the module docstring). ``gys`` may hold None for outputs that got no
    gradient; ``xs``/``ys`` are the retained inputs/outputs.

    An op whose ``grads`` only works on raw arrays sets
    ``twice_differentiable = False``: its gradient is then still computed when
    double backprop is on, but backpropagating through that gradient raises
    a GradientError that names the op.
    """
    twice_differentiable = True

    cdef bint _formula_only(self):
        return False  # Python code may keep what it is given

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        return tuple(self.grads(xp, targets, gys, xs, ys))

    def grads(self, xp, targets, gys, xs, ys):
        raise NotImplementedError(type(self).__name__)

    cpdef backward(self, target_input_indexes, grad_outputs):
        if type(self).twice_differentiable:
            return Op.backward(self, target_input_indexes, grad_outputs)
        return _once_differentiable_backward(self, tuple(target_input_indexes),
                                             tuple(grad_outputs))


cdef class _FirstOrderGradient(FunctionNode):
    """Computes a once-differentiable op's gradient from its (recorded)
    upstream gradients and retained arrays; refuses to be differentiated."""
    op_name = 'first_order_gradient'
    cdef PyOp op
    cdef tuple targets
    cdef Py_ssize_t n_gys, n_xs

    cpdef forward(self, inputs):
        raw = tuple(inputs)
        gys = raw[:self.n_gys]
        xs = raw[self.n_gys:self.n_gys + self.n_xs]
        ys = raw[self.n_gys + self.n_xs:]
        return tuple(self.op.grads(self.op._device.ns, self.targets, gys, xs, ys))

    cpdef backward(self, target_input_indexes, grad_outputs):
        raise GradientError(
            'op {} is not twice differentiable: its gradient cannot be '
            'backpropagated (double backprop went through {})'.format(
                self.op.name, self.op.name))


cdef tuple _once_differentiable_backward(PyOp op, tuple targets, tuple gys):
    cdef _FirstOrderGradient g = _FirstOrderGradient.__new__(_FirstOrderGradient)
    g.op = op
    g.targets = targets
    xs = op._bw_inputs if op._bw_inputs is not None else ()
    ys = op._bw_outputs if op._bw_outputs is not None else ()
    g.n_gys = len(gys)
    g.n_xs = len(xs)
    return apply(g, gys + tuple(xs) + tuple(ys))
