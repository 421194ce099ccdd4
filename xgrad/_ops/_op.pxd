from xgrad._array cimport ndarray
from xgrad._function_node cimport FunctionNode


cdef class Op(FunctionNode):
    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys)


cdef class PyOp(Op):
    pass
