"""ChainerX's NumPy fallbacks and interop names.

ChainerX computes ``copysign``, ``fix`` and ``broadcast_arrays`` with NumPy
(native devices) or CuPy (cuda devices); so does xgrad, on the raw data, so
the results are NumPy's (dtypes included). ``broadcast_arrays`` and
``copysign`` in its first argument also take part in backprop (ChainerX's
fallbacks refuse arrays on a graph); ``fix`` has a zero gradient, so its
result is not connected.
"""

from typing import List

from xgrad import _core, _ops
from xgrad._errors import DeviceError

__all__ = ['copysign', 'fix', 'broadcast_arrays', 'is_available', '_to_cupy']


def _raw(a, device):
    """Raw data of array or scalar ``a`` for computing on ``device``."""
    if isinstance(a, _core.ndarray):
        if a.device is not device:
            raise DeviceError('Operands are on different devices: {} and {}'.format(
                device, a.device))
        return _core._raw_data(a)
    return a


def _device_of(*args):
    for a in args:
        if isinstance(a, _core.ndarray):
            return a.device
    return _core.get_default_device()


def fix(x):
    """Round toward zero, elementwise (NumPy's ``fix``)."""
    device = _device_of(x)
    with device.scope():
        result = device.xp.asarray(device.xp.trunc(_raw(x, device)))
    return _core._array_of(result, device)


def copysign(x1, x2):
    """``x1``'s magnitude with ``x2``'s sign, elementwise (NumPy's ``copysign``);
    the gradient with respect to ``x1`` is the sign flip applied."""
    device = _device_of(x1, x2)
    xp = device.xp
    with device.scope():
        raw1, raw2 = _raw(x1, device), _raw(x2, device)
        result = xp.asarray(xp.copysign(raw1, raw2))
        if not (isinstance(x1, _core.ndarray) and x1.is_backprop_required()):
            return _core._array_of(result, device)
        flip = xp.copysign(xp.ones((), result.dtype), raw1) * \
            xp.copysign(xp.ones((), result.dtype), raw2)
    return _ops.multiply(_ops.astype(x1, result.dtype) if x1.dtype != result.dtype else x1,
                         _core._array_of(xp.asarray(flip, result.dtype), device))


def broadcast_arrays(*args) -> List[_core.ndarray]:
    """The arrays broadcast to their common shape (a list, as ChainerX's)."""
    device = _device_of(*args)
    with device.scope():
        shape = device.xp.broadcast_shapes(*(a.shape for a in args)) \
            if hasattr(device.xp, 'broadcast_shapes') else \
            device.xp.broadcast(*(_raw(a, device) for a in args)).shape
    return [a if a.shape == shape else _ops.broadcast_to(a, shape) for a in args]


def is_available() -> bool:
    """Always True: ChainerX's check that its compiled core exists."""
    return True


def _to_cupy(a):
    """The CuPy array a cuda array wraps (shares its memory; no copy)."""
    if not isinstance(a, _core.ndarray) or a.device.is_native:
        raise DeviceError('_to_cupy needs an xgrad array on a cuda device, got {}'.format(
            a.device if isinstance(a, _core.ndarray) else type(a).__name__))
    return _core._raw_data(a)
