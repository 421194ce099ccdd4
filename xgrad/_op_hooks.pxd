# Op hooks and anomaly mode (_op_hooks.pyx): which scopes are active, and the
# calls the engine makes around each op's forward (recording) and backward
# (the backward pass) while one is.
from xgrad._context cimport BackpropId, _ThreadState, _state
from xgrad._graph cimport OpNode


# Read by the inline function below in every module that uses it.
cdef Py_ssize_t _active_op_scopes      # op_hooks/detect_anomaly scopes, all threads


cdef inline _ThreadState _op_scope_state():
    """This thread's state when an op_hooks or detect_anomaly scope is
    active in it, else None; while none is active in any thread (the common
    case), None without looking at thread state."""
    cdef _ThreadState st
    if _active_op_scopes == 0:
        return None
    st = _state()
    if st.op_hooks or st.anomaly:
        return st
    return None


cdef void forward_hooks_pre(_ThreadState st, OpNode fn, tuple xs) except *
cdef void forward_hooks_post(_ThreadState st, OpNode fn, tuple xs, tuple outs) except *
cdef void backward_hooks_pre(_ThreadState st, OpNode fn, tuple gys) except *
cdef void backward_hooks_post(_ThreadState st, OpNode fn, BackpropId bp,
                              tuple gys, tuple grads) except *
