from xgrad._core cimport FunctionNode, ndarray


cdef class Op(FunctionNode):
    cdef tuple _grads(self, xp, tuple targets, tuple gys, tuple xs, tuple ys)


cdef class PyOp(Op):
    pass
