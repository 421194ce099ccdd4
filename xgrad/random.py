"""Random sampling: ChainerX's ``chainerx.random``, on every device.

Each function takes NumPy's arguments of the same name plus ``device=``
(default: the default device) and returns an xgrad array there. As in
ChainerX, samples come from NumPy's global generator (``numpy.random``) on
native devices, so ``numpy.random.seed`` makes them reproducible; on cuda
devices they are drawn on the GPU by CuPy's generator of that device.
:func:`seed` seeds both.
"""

import numpy

from xgrad import _core
from xgrad import _random_tape

__all__ = ['normal', 'uniform', 'standard_normal', 'rand', 'randn', 'randint',
           'random_sample', 'random', 'seed']


def _draw(name, args, kwargs):
    device = _core.get_default_device() if kwargs.get('device') is None \
        else _core.get_device(kwargs['device'])
    kwargs = {k: v for k, v in kwargs.items() if k != 'device'}
    if device.is_native:
        tape = _random_tape.current()
        if tape is not None:  # in a checkpointed function: noted, or replayed
            tape.numpy_global()
        return _core._array_of(numpy.asarray(getattr(numpy.random, name)(*args, **kwargs)),
                               device)
    with device.scope():
        data = getattr(device.xp.random, name)(*args, **kwargs)
    return _core._array_of(device.xp.asarray(data), device)


def normal(*args, device=None, **kwargs):
    """normal(loc=0.0, scale=1.0, size=None, *, device=None): samples of a
    Gaussian (float64, as NumPy's)."""
    return _draw('normal', args, dict(kwargs, device=device))


def uniform(*args, device=None, **kwargs):
    """uniform(low=0.0, high=1.0, size=None, *, device=None): samples of
    the uniform distribution on ``[low, high)`` (float64)."""
    return _draw('uniform', args, dict(kwargs, device=device))


def standard_normal(*args, device=None, **kwargs):
    """standard_normal(size=None, *, device=None)."""
    return _draw('standard_normal', args, dict(kwargs, device=device))


def rand(*shape, device=None):
    """rand(d0, d1, ..., *, device=None): uniform samples on ``[0, 1)``."""
    return _draw('rand', shape, {'device': device})


def randn(*shape, device=None):
    """randn(d0, d1, ..., *, device=None): standard normal samples."""
    return _draw('randn', shape, {'device': device})


def randint(*args, device=None, **kwargs):
    """randint(low, high=None, size=None, dtype=int, *, device=None)."""
    return _draw('randint', args, dict(kwargs, device=device))


def random_sample(*args, device=None, **kwargs):
    """random_sample(size=None, *, device=None): uniform samples on ``[0, 1)``."""
    return _draw('random_sample', args, dict(kwargs, device=device))


random = random_sample


def seed(seed=None):
    """Seed the generators xgrad draws from: NumPy's global one, and CuPy's
    on each GPU when CuPy is already in use."""
    numpy.random.seed(seed)
    from xgrad._backend import cuda
    if cuda._cupy is not None:
        cp = cuda._cupy
        for index in range(cuda.device_count()):
            with cp.cuda.Device(index):
                cp.random.seed(seed)
