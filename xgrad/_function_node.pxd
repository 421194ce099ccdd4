# The op protocol and recording (_function_node.pyx).
cimport cython

from xgrad._graph cimport OpNode
from xgrad._array cimport ndarray


# Not tracked by the garbage collector: the built-in ops hold no arrays
# (Python subclasses are tracked through their __dict__). The directive must
# be here: a subclass of a type of another module is tracked otherwise.
@cython.no_gc
cdef class FunctionNode(OpNode):
    cdef bint _applied
    cdef tuple _retain_in_idx
    cdef tuple _retain_out_idx
    cdef tuple _bw_inputs
    cdef tuple _bw_outputs

    cpdef forward(self, inputs)
    cpdef backward(self, target_input_indexes, grad_outputs)
    cdef object _backward_raw(self, tuple targets, tuple grad_outputs, tuple xs, tuple ys)
    cdef object _forward1(self, object x)
    cdef object _forward2(self, object a, object b)
    cdef bint _formula_only(self)


cpdef tuple apply(FunctionNode fn, inputs)
cpdef ndarray apply_to_device(FunctionNode fn, ndarray x, object device)
cdef ndarray apply1(FunctionNode fn, ndarray x)
cdef ndarray apply2(FunctionNode fn, ndarray a, ndarray b)
