# The engine's debug checks (_debug.pyx): on with XGRAD_DEBUG=1 at import.

cdef bint enabled   # read by the hot path: one C test while the checks are off

cpdef int check_gradient_ownership(object data, tuple grads, Py_ssize_t refs,
                                   Py_ssize_t ours) except -1
