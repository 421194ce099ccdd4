"""Devices: where an array's data lives.

``native:N`` devices hold NumPy arrays. Several native devices exist so that
code written for several devices can be tested on one machine; they share the
CPU but arrays on different devices never mix in one operation. ``cuda:N``
devices hold CuPy arrays (``xgrad/_backend/cuda.py``); asking for one without
CuPy or a GPU raises a :class:`DeviceError` that says which is missing.
"""

import contextlib
import functools

import numpy

from xgrad._errors import BackendError, DeviceError

_KNOWN_BACKENDS = ('native', 'cuda')
_NATIVE_DEVICE_COUNT = 8


# The raw-array namespaces of gradient formulas by backend name: the op
# library, above this module, registers them (xgrad._ops._xp, _xp_cuda).
_RAW_NAMESPACES = {}


def register_raw_namespace(backend_name, namespace):
    _RAW_NAMESPACES[backend_name] = namespace


def raw_namespace_of(xp):
    """The raw-array namespace for data of array module ``xp`` (NumPy's:
    native; otherwise CuPy's: cuda), for forwards that hold raw data only."""
    return _RAW_NAMESPACES['native' if xp is numpy else 'cuda']


class Backend:
    """A family of devices (``native`` or ``cuda``) within one context."""

    def __init__(self, context, name):
        self.context = context
        self.name = name

    def get_device(self, index):
        return _get_device_in_context(self.context, self.name, index)

    def get_device_count(self):
        if self.name == 'native':
            return _NATIVE_DEVICE_COUNT
        from xgrad._backend import cuda
        return cuda.device_count()

    def __repr__(self):
        return '<{} backend>'.format(self.name)


class Device:
    """One device. Compare devices with ``is`` or ``==`` (they are singletons)."""

    def __init__(self, backend, index):
        self.backend = backend
        self.index = index
        self.name = '{}:{}'.format(backend.name, index)
        self.context = backend.context
        self.is_native = backend.name == 'native'

    @property
    def xp(self):
        """The array module of this device's raw data: NumPy or CuPy."""
        if self.is_native:
            return numpy
        from xgrad._backend import cuda
        return cuda.cupy()

    @functools.cached_property
    def ns(self):
        """The raw-array namespace gradient formulas run with on this device
        (the engine's fast path); looked up once, then kept."""
        try:
            return _RAW_NAMESPACES[self.backend.name]
        except KeyError:
            raise BackendError('No raw-array namespace is registered for the {} backend '
                               '(xgrad._ops registers them)'.format(self.backend.name)) from None

    def scope(self):
        """A context manager that makes this the device CuPy computes on
        (nothing to do for native devices)."""
        if self.is_native:
            return contextlib.nullcontext()
        from xgrad._backend import cuda
        return cuda.cupy().cuda.Device(self.index)

    def synchronize(self):
        """Wait until the work queued on this device is done (ChainerX's
        ``Device.synchronize``): nothing to wait for on a native device, whose
        ops finish before they return; a cuda device's whole GPU, as CuPy's
        ``Device.synchronize``."""
        if self.is_native:
            return
        from xgrad._backend import cuda
        cuda.cupy().cuda.Device(self.index).synchronize()

    def __repr__(self):
        return 'native:{}'.format(self.index) if self.backend.name == 'native' \
            else self.name

    def __str__(self):
        return self.name

    def __reduce__(self):
        # As ChainerX: unpickled as the device of that backend and index in
        # the default context of the unpickling thread.
        return (_recover_device[0], (self.backend.name, self.index))


# What unpickles a Device: xgrad._context._recover_device (it reads the
# thread's default context), which registers itself here when imported.
_recover_device = [None]


def _get_backend(context, name):
    backends = context._backends
    backend = backends.get(name)
    if backend is None:
        if name not in _KNOWN_BACKENDS:
            raise BackendError('Backend not found: {!r}'.format(name))
        backend = backends[name] = Backend(context, name)
    return backend


def _get_device_in_context(context, backend_name, index):
    key = (backend_name, index)
    device = context._devices.get(key)
    if device is not None:
        return device
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise DeviceError('Invalid device index: {!r}'.format(index))
    backend = _get_backend(context, backend_name)
    if backend_name == 'cuda':
        from xgrad._backend import cuda
        cuda.check_device(index)
    elif index >= _NATIVE_DEVICE_COUNT:
        raise DeviceError('Device native:{} does not exist: there are {} native '
                          'devices.'.format(index, _NATIVE_DEVICE_COUNT))
    device = context._devices[key] = Device(backend, index)
    return device


def parse_device(context, device, index=None):
    """Turn a Device, a name ``'native:1'`` or ``('native', 1)`` into a Device."""
    if isinstance(device, Device):
        if index is not None:
            raise TypeError('index must not be given together with a Device')
        return device
    if not isinstance(device, str):
        raise TypeError('device must be a Device or a str such as '
                        "'native:0', not {}".format(type(device).__name__))
    if index is not None:
        backend_name = device
    else:
        backend_name, sep, index_text = device.partition(':')
        if sep:
            try:
                index = int(index_text)
            except ValueError:
                raise DeviceError('Invalid device name: {!r}'.format(device)) from None
        else:
            index = 0
    if backend_name not in _KNOWN_BACKENDS:
        raise BackendError('Backend not found: {!r} (in device {!r})'.format(
            backend_name, device))
    return _get_device_in_context(context, backend_name, index)


def transfer(data, device):
    """A copy of raw array ``data`` (NumPy or CuPy) on ``device``."""
    if device.is_native:
        return to_host(data)
    from xgrad._backend import cuda
    return cuda.to_cuda(data, device.index)


def to_host(data):
    """A NumPy copy of raw array ``data`` (NumPy or CuPy)."""
    if _is_cuda_array(data):
        from xgrad._backend import cuda
        return cuda.to_host(data)
    return numpy.array(data, copy=True)


def on_device(data, device):
    """``data`` as raw data of ``device``: as it is when it already lives
    there, else a copy moved there (host data made on the CPU for a cuda
    array, e.g. by the creation functions)."""
    on_gpu = _is_cuda_array(data)
    return data if on_gpu != device.is_native else transfer(data, device)


def is_broadcast_view(data):
    """Whether raw ``data`` repeats elements through zero strides (writing
    one element would write several)."""
    return any(s == 0 and n > 1 for s, n in zip(data.strides, data.shape))


def data_address(data):
    """The address of raw ``data``'s first element, on the host or a GPU."""
    interface = getattr(data, '__array_interface__', None)
    if interface is None:
        interface = data.__cuda_array_interface__
    return interface['data'][0]


def memory_owner(data):
    """The array (NumPy or CuPy) at the root of raw ``data``'s chain of views:
    the one whose memory ``data`` lies in."""
    owner = data
    while isinstance(owner.base, type(data)):
        owner = owner.base
    return owner


def _is_cuda_array(data):
    from xgrad._backend import cuda
    return cuda.is_device_array(data)


class _HostMemory:
    """NumPy's view of host memory at an address, kept alive by ``owner``."""

    def __init__(self, address, shape, dtype, strides, owner):
        self.__array_interface__ = {'data': (address, False), 'shape': tuple(shape),
                                    'typestr': dtype.str, 'strides': tuple(strides),
                                    'version': 3}
        self.owner = owner


def _extent(shape, strides, itemsize):
    """The bytes spanned by an array of ``shape`` and ``strides`` from its
    first element on (all strides non-negative)."""
    if any(n == 0 for n in shape):
        return 0
    return itemsize + sum((n - 1) * s for n, s in zip(shape, strides))


def from_raw_pointer(pointer, shape, dtype, strides, device, offset, owner):
    """Raw data of ``device`` viewing memory at ``pointer + offset`` (no copy),
    kept alive by ``owner``: NumPy on native devices, CuPy on cuda ones."""
    dtype = numpy.dtype(dtype)
    shape = tuple(shape)
    strides = tuple(strides) if strides is not None else tuple(
        int(s) for s in numpy.empty(0, dtype).reshape(0).strides) if not shape else \
        numpy.zeros(shape, dtype=dtype).strides
    if device.is_native:
        return numpy.asarray(_HostMemory(pointer + offset, shape, dtype, strides, owner))
    from xgrad._backend import cuda
    cp = cuda.cupy()
    memory = cp.cuda.UnownedMemory(pointer, offset + _extent(shape, strides, dtype.itemsize),
                                   owner, device.index)
    return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(memory, offset), strides)
