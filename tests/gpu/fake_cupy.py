"""A CPU stand-in for CuPy, so that the cuda backend runs in CPU-only CI.

Arrays are NumPy arrays of a subclass that keeps CuPy's rules where they
decide whether xgrad's cuda code is right:

- host (NumPy) arrays never mix with device arrays in one operation
  (TypeError, as in CuPy): data made on the host must be transferred;
- NumPy functions reach an array only where CuPy implements them (the names
  of CuPy 14.2 in cupy_names.txt, resolved by module path as CuPy does);
- reductions and integer indexing give 0-d arrays, never NumPy scalars;
- whatever reads device data on the host (``.get()``, ``.item()``, ``bool``,
  ``float``, ``asnumpy``...) is counted in ``host_reads``, so tests can assert
  that recording and the backward loop never wait for the GPU.

Kernels are compiled and run by the emulator of tests/kernels, which counts
launches in ``emulator.launches``.
"""

import os

import numpy

from kernels import emulator

_NAMES = frozenset(
    line.strip() for line in open(os.path.join(os.path.dirname(__file__), 'cupy_names.txt'))
    if line.strip() and not line.startswith('#'))

# The ufunc methods CuPy 14.2 implements, and for which ufuncs (the others
# raise NotImplementedError there).
_UFUNC_METHODS = {
    'reduce': {'add', 'multiply'}, 'accumulate': {'add', 'multiply'}, 'reduceat': {'add'},
    'at': {'add', 'subtract', 'maximum', 'minimum', 'bitwise_and', 'bitwise_or', 'bitwise_xor'},
}

host_reads = []   # what read device data on the host, in order
uploads = []      # host -> device transfers (shapes)
cupy_calls = []   # CuPy routines run on device arrays (each at least one kernel of CuPy's)

RawModule = emulator.RawModule


class ndarray(numpy.ndarray):
    """A device array (NumPy memory, CuPy's rules)."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__ if method == '__call__' else '{}.{}'.format(ufunc.__name__, method)
        if method in _UFUNC_METHODS and ufunc.__name__ not in _UFUNC_METHODS[method]:
            raise NotImplementedError('fake CuPy: {} is not supported (CuPy 14.2 has {}.{} '
                                      'only for {})'.format(name, '<ufunc>', method,
                                                            sorted(_UFUNC_METHODS[method])))
        cupy_calls.append(name)
        inputs = _unwrap(inputs, name)
        if 'out' in kwargs:
            kwargs['out'] = _unwrap(kwargs['out'], name)
        return _wrap(getattr(ufunc, method)(*inputs, **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        path = func.__module__.split('.')[1:] + [func.__name__]
        if '.'.join(path) not in _NAMES:
            return NotImplemented  # NumPy raises TypeError, as with CuPy
        name = func.__name__
        cupy_calls.append(name)
        return _wrap(func(*_unwrap(args, name), **_unwrap(kwargs, name)))

    def __getitem__(self, key):
        return _wrap(super().__getitem__(_unwrap(key, 'getitem', allow_host=True)))

    def __setitem__(self, key, value):
        super().__setitem__(_unwrap(key, 'setitem', allow_host=True),
                            _unwrap(value, 'setitem'))

    # -- NumPy's methods give NumPy scalars for full reductions (and float16
    # means); CuPy's give 0-d arrays.

    def _reduction(name):
        def method(self, *args, **kwargs):
            cupy_calls.append(name)
            return _wrap(getattr(numpy.ndarray, name)(
                self.view(numpy.ndarray), *_unwrap(args, name), **_unwrap(kwargs, name)))
        method.__name__ = name
        return method

    for _m in ('sum', 'mean', 'var', 'std', 'prod', 'max', 'min', 'argmax', 'argmin',
               'all', 'any', 'cumsum', 'dot', 'nonzero', 'clip', 'round'):
        locals()[_m] = _reduction(_m)
    del _m, _reduction

    @property
    def device(self):
        return _Device(0)

    # -- host reads (each waits for the GPU on real CuPy) --------------------

    def get(self):
        host_reads.append('get')
        return numpy.array(self.view(numpy.ndarray))

    def item(self):
        host_reads.append('item')
        return self.view(numpy.ndarray).item()

    def tolist(self):
        host_reads.append('tolist')
        return self.view(numpy.ndarray).tolist()

    def __bool__(self):
        host_reads.append('bool')
        return bool(self.view(numpy.ndarray))

    def __float__(self):
        host_reads.append('float')
        return float(self.view(numpy.ndarray))

    def __int__(self):
        host_reads.append('int')
        return int(self.view(numpy.ndarray))

    def __index__(self):
        host_reads.append('index')
        return self.view(numpy.ndarray).__index__()

    def __repr__(self):
        return 'fake_cupy.array({})'.format(numpy.array2string(self.view(numpy.ndarray)))


def _unwrap(obj, name, allow_host=False):
    """NumPy objects for NumPy to compute on; TypeError for host arrays."""
    if type(obj) is ndarray:
        return obj.view(numpy.ndarray)
    if type(obj) is numpy.ndarray:
        if allow_host:
            return obj
        raise TypeError('Unsupported type {} in {} (fake CuPy: host arrays do not mix '
                        'with device arrays)'.format(type(obj), name))
    if isinstance(obj, tuple):
        return tuple(_unwrap(o, name, allow_host) for o in obj)
    if isinstance(obj, list):
        return [_unwrap(o, name, allow_host) for o in obj]
    if isinstance(obj, dict):
        return {k: _unwrap(v, name, allow_host) for k, v in obj.items()}
    return obj


def _wrap(obj):
    """Device arrays for NumPy results: arrays and scalars (as 0-d arrays)."""
    if type(obj) is numpy.ndarray:
        return obj.view(ndarray)
    if isinstance(obj, numpy.generic):
        return numpy.asarray(obj).view(ndarray)
    if isinstance(obj, tuple):
        return tuple(_wrap(o) for o in obj)
    if isinstance(obj, list):
        return [_wrap(o) for o in obj]
    return obj


# -- transfers ----------------------------------------------------------------

def asarray(a, dtype=None, order=None):
    if type(a) is ndarray:
        return a if dtype is None or a.dtype == dtype else a.astype(dtype)
    return array(a, dtype=dtype, copy=False)


def array(a, dtype=None, copy=True, order='K', ndmin=0):
    if type(a) is ndarray:
        return _wrap(numpy.array(a.view(numpy.ndarray), dtype=dtype, copy=True if copy else None,
                                 order=order, ndmin=ndmin))
    if isinstance(a, (list, tuple)) and any(type(o) is ndarray for o in a):
        raise TypeError('fake CuPy: array() of a list holding device arrays')
    host = numpy.array(a, dtype=dtype, order=order, ndmin=ndmin)
    uploads.append(host.shape)
    return host.view(ndarray)


def asnumpy(a, stream=None, order='C', out=None):
    if type(a) is ndarray:
        host_reads.append('asnumpy')
        return numpy.array(a.view(numpy.ndarray), order=order)
    return numpy.asarray(a, order=order)


def ascontiguousarray(a, dtype=None):
    return _wrap(numpy.ascontiguousarray(_unwrap(a, 'ascontiguousarray'), dtype=dtype))


def get_array_module(*args):
    return _this_module() if any(type(a) is ndarray for a in args) else numpy


def _this_module():
    import sys
    return sys.modules[__name__]


# -- creation: made on the device (no upload) ---------------------------------

def _creator(func):
    def create(*args, **kwargs):
        return _wrap(func(*_unwrap(args, func.__name__), **_unwrap(kwargs, func.__name__)))
    create.__name__ = func.__name__
    return create


for _name in ('empty', 'zeros', 'ones', 'full', 'arange', 'linspace', 'eye', 'identity',
              'empty_like', 'zeros_like', 'ones_like', 'full_like', 'tri'):
    globals()[_name] = _creator(getattr(numpy, _name))


def __getattr__(name):
    """NumPy's ufuncs, functions and dtypes where CuPy has them: called on
    device arrays they dispatch through the protocols above."""
    if name in _NAMES and hasattr(numpy, name):
        return getattr(numpy, name)
    raise AttributeError('fake CuPy has no {!r} (CuPy 14.2 has no such NumPy name)'.format(name))


class lib:
    class stride_tricks:
        @staticmethod
        def as_strided(x, shape=None, strides=None):
            return numpy.lib.stride_tricks.as_strided(x, shape, strides, subok=True)


class linalg:
    """The part of cupy.linalg xgrad may call (dispatching to NumPy's)."""
    norm = staticmethod(numpy.linalg.norm)
    svd = staticmethod(numpy.linalg.svd)


# -- devices ------------------------------------------------------------------

class _Device:
    current = 0

    def __init__(self, device=None):
        self.id = _Device.current if device is None else int(device)
        self._saved = []

    def __enter__(self):
        self._saved.append(_Device.current)
        _Device.current = self.id
        return self

    def __exit__(self, *exc):
        _Device.current = self._saved.pop()
        return False

    def use(self):
        _Device.current = self.id

    def synchronize(self):
        host_reads.append('synchronize')


class _Runtime:
    device_count = 1

    @classmethod
    def getDeviceCount(cls):
        return cls.device_count


class cuda:
    Device = _Device
    runtime = _Runtime


def reset_counters():
    del host_reads[:]
    del uploads[:]
    del cupy_calls[:]
    del emulator.launches[:]
