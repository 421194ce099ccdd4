# The device-attribute cache (_device_cache.pyx): what the hot path asks of
# the device of every op, at C speed. _context.pxd re-exports these names
# (``from xgrad._context cimport device_ns, _is_native`` keeps working).

# Read by the inline function below in every module that uses it.
cdef object _known_device              # the device _learn_device saw last
cdef bint _known_is_native

cdef int _learn_device(object device) except -1
cdef object device_ns(object device)


cdef inline bint _is_native(object device) except -1:
    """``device.is_native``, for the last device asked about at C speed."""
    if device is not _known_device:
        _learn_device(device)
    return _known_is_native
