# cython: language_level=3
"""The base of xgrad's built-in ops: one gradient formula, two array kinds.

A built-in op writes its gradient once, in ``_grads(xp, ...)``, with array
operators and the functions of the namespace ``xp``. The engine calls it with
``xp`` = NumPy on raw arrays when nothing can be recorded (the fast path), and
with ``xp`` = xgrad on xgrad arrays otherwise, so the same formula is also the
double-backprop graph.
"""

from xgrad._core cimport FunctionNode
from xgrad._ops._xp import numpy_ns, xgrad_ns

cdef object NP = numpy_ns
cdef object XG = xgrad_ns


cdef class Op(FunctionNode):

    cpdef backward(self, target_input_indexes, grad_outputs):
        return self._grads(XG, tuple(target_input_indexes), tuple(grad_outputs),
                           self._bw_inputs, self._bw_outputs)

    cdef object _backward_raw(self, tuple targets, tuple grad_outputs,
                              tuple xs, tuple ys):
        return self._grads(NP, targets, grad_outputs, xs, ys)

    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys):
        raise NotImplementedError(type(self).__name__)
