# Contexts, backprop IDs and backprop modes (_context.pyx).
cimport cython

# The device-attribute cache has a module of its own; its names stay
# cimportable from here (the op library cimports device_ns from _context).
from xgrad._device_cache cimport device_ns, _is_native, _learn_device


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
    # Op hooks' per-thread state (read and written by _op_hooks):
    cdef tuple op_hooks    # op hooks active in this thread, outermost first
    cdef int anomaly       # depth of detect_anomaly() scopes in this thread


cdef _ThreadState _state()
cdef void _push_mode(_ThreadState st, _ModeEntry entry)
cdef void _pop_mode(_ThreadState st, _ModeEntry entry) except *
cdef bint _is_enabled_in_modes(BackpropId bp)
cdef object _default_device()
cdef object _resolve_device(device)
cdef BackpropId _resolve_bp(backprop_id, Context context)

# Read by the inline functions below in every module that uses them.
cdef Py_ssize_t _active_mode_entries   # mode entries pushed, all threads


cdef inline bint is_enabled(BackpropId bp):
    """Whether backprop is enabled for ``bp`` in this thread (modes only);
    while no mode entry exists in any thread (the common case), True
    without looking at thread state."""
    if _active_mode_entries == 0:
        return True
    return _is_enabled_in_modes(bp)
