# cython: language_level=3
"""The device-attribute cache: ``device.is_native`` (``_is_native``) and
``device.ns`` (``device_ns``) for the device the hot path asked about last.

Devices are singletons whose ``is_native`` and ``ns`` never change, and the
backward loop asks both of every op's device (the gradient table asks
``is_native`` of every buffer it adds into): one identity test answers
while the device is the one seen last (the common case: one device), and a
Python attribute lookup fills the cache otherwise. The module imports
nothing from xgrad; it reads the attributes of whatever device it is given.
"""

# The last device whose attributes the hot path asked for, and those
# attributes.
_known_device = None
_known_is_native = False
cdef object _known_ns = None


cdef int _learn_device(object device) except -1:
    """Fill the cache with ``device``'s attributes."""
    global _known_device, _known_is_native, _known_ns
    is_native = device.is_native
    ns = device.ns
    # (no other thread runs between these three assignments)
    _known_is_native = is_native
    _known_ns = ns
    _known_device = device
    return 0


cdef object device_ns(object device):
    """``device.ns`` (NumPy, or CuPy for a cuda device), for the last device
    asked about at C speed: the namespace of the backward fast path."""
    if device is not _known_device:
        _learn_device(device)
    return _known_ns
