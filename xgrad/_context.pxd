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
    cdef Context default_context
    cdef bint has_context


cdef _ThreadState _state()
cdef void _push_mode(_ThreadState st, _ModeEntry entry)
cdef void _pop_mode(_ThreadState st, _ModeEntry entry) except *
cdef bint is_enabled(BackpropId bp)
cdef object _default_device()
cdef object _resolve_device(device)
cdef BackpropId _resolve_bp(backprop_id, Context context)
cdef bint _is_native(object device) except -1
cdef object device_ns(object device)
