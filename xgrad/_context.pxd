# Contexts, backprop IDs, backprop modes and the device cache (_context.pyx).
cimport cython


cdef class Context:
    cdef public object _backends
    cdef public object _devices
    cdef Py_ssize_t _next_ordinal
    cdef dict _alive_ids
    cdef set _connections
    cdef dict _prohibited_by
    cdef readonly BackpropId _default_id

    cdef void _connect(self, BackpropId a, BackpropId b)
    cdef list _inner_connected(self, BackpropId bp)
    cdef void _check_backprop_allowed(self, BackpropId bp) except *


cdef class BackpropId:
    cdef readonly Context context
    cdef readonly Py_ssize_t ordinal
    cdef str _name
    cdef bint _released
    cdef tuple _solo

    cdef Py_ssize_t _ordinal_against(self, other) except? -1


@cython.final
cdef class _ModeEntry:
    cdef bint enable
    cdef Context context
    cdef tuple ids


@cython.final
cdef class _ThreadState:
    cdef list modes
    cdef object default_device
    cdef Context default_context    # None: the global default context
    cdef tuple op_hooks    # op hooks active in this thread, outermost first
    cdef int anomaly       # depth of detect_anomaly() scopes in this thread


cdef _ThreadState _state()
cdef void _push_mode(_ThreadState st, _ModeEntry entry)
cdef void _pop_mode(_ThreadState st, _ModeEntry entry) except *
cdef bint _is_enabled_in_modes(BackpropId bp)
cdef object _default_device()
cdef object _resolve_device(device)
cdef BackpropId _resolve_bp(backprop_id, Context context)
cdef object device_ns(object device)
cdef int _learn_device(object device) except -1

# Read by the inline functions below in every module that uses them.
cdef Py_ssize_t _active_mode_entries   # mode entries pushed, all threads
cdef object _known_device              # the device _learn_device saw last
cdef bint _known_is_native
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


cdef inline bint is_enabled(BackpropId bp):
    """Whether backprop is enabled for ``bp`` in this thread (modes only);
    while no mode entry exists in any thread (the common case), True
    without looking at thread state."""
    if _active_mode_entries == 0:
        return True
    return _is_enabled_in_modes(bp)


cdef inline bint _is_native(object device) except -1:
    """``device.is_native``, for the last device asked about at C speed."""
    if device is not _known_device:
        _learn_device(device)
    return _known_is_native
