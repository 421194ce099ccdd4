"""A strict CPU stand-in for CuPy, so that the cuda backend runs in CPU-only CI.

A device array is NOT a NumPy array: :class:`ndarray` wraps a NumPy buffer
and the id of the device it lives on, and keeps CuPy's rules where they
decide whether xgrad's cuda code is right on a real GPU:

- no implicit conversion to NumPy: ``__array__``, ``__array_interface__``
  and ``numpy.asarray(device_array)`` raise TypeError, as CuPy's do; host
  arrays never mix with device arrays in one operation (TypeError);
- only the functions, ufuncs, ndarray methods and keyword arguments that
  real CuPy 13 and 14 both have: the signatures in cupy_api.json (14.2) and
  cupy13_api.json, read from installed CuPys by dump_cupy_api.py (NumPy's
  functions reach a device array only
  through ``__array_function__``/``__array_ufunc__`` where CuPy has a
  function of that name, as in CuPy);
- two devices and a current one (``cuda.Device(n)`` as a context manager);
  memory is allocated on the current device, and a kernel (CuPy's or ours)
  that touches an array of another device raises ValueError, as CuPy does;
  kernels of a module loaded on one device do not launch on another;
- float32 kernels flush denormals to zero (CuPy compiles with -ftz=true):
  our kernels run with the CPU's FTZ/DAZ modes set, CuPy's routines flush
  their float32 results;
- reductions and integer indexing give 0-d arrays, never NumPy scalars;
- whatever reads device data on the host (``.get()``, ``.item()``, ``bool``,
  ``float``, ``asnumpy``, ``synchronize``...) is counted in ``host_reads``,
  so tests can assert that recording and the backward loop never wait for
  the GPU; host -> device copies are counted in ``uploads``.

Our kernels are compiled and run by the emulator of tests/backend/cuda/kernels, which
counts launches in ``emulator.launches``.
"""

import functools
import inspect
import json
import os
import sys
import types

import numpy

from backend.cuda.kernels import emulator

_HERE = os.path.dirname(os.path.abspath(__file__))
# The CuPy releases whose API the stand-in keeps to: what every one of them
# has (xgrad's [cuda] extra takes CuPy 13 or 14).
API_FILES = ('cupy_api.json', 'cupy13_api.json')


def _common_params(a, b):
    """The parameters two releases' signatures share (in a's order), each
    with a default only where both have one; None is "unknown" (any). A
    ``**kwargs`` on one side takes the other side's keywords."""
    if a is None or b is None:
        return b if a is None else a
    in_a = {p[0]: p for p in a}
    in_b = {p[0]: p for p in b}
    a_any = any(kind == 'VAR_KEYWORD' for _, kind, _ in a)
    b_any = any(kind == 'VAR_KEYWORD' for _, kind, _ in b)
    out = []
    for name, kind, has_default in a:
        if name in in_b:
            out.append([name, kind, has_default and in_b[name][2]])
        elif b_any and kind in ('KEYWORD_ONLY', 'POSITIONAL_OR_KEYWORD') and has_default:
            out.append([name, 'KEYWORD_ONLY', True])
    if a_any:
        out += [[name, 'KEYWORD_ONLY', True] for name, kind, has_default in b
                if name not in in_a and kind == 'KEYWORD_ONLY' and has_default]
    if a_any and b_any:
        out = [p for p in out if p[1] != 'VAR_KEYWORD'] + [['kwargs', 'VAR_KEYWORD', False]]
    return out


def _common_api(apis):
    """The functions, ufuncs and methods that every release in ``apis`` has,
    with the keyword arguments they all take."""
    out = dict(apis[0])
    out['cupy_versions'] = [api['cupy_version'] for api in apis]
    for api in apis[1:]:
        for key in ('functions', 'methods'):
            out[key] = {name: _common_params(params, api[key][name])
                        for name, params in out[key].items() if name in api[key]}
        out['ufuncs'] = {name: nio for name, nio in out['ufuncs'].items()
                         if name in api['ufuncs']}
    return out


def _load_api():
    apis = []
    for name in API_FILES:
        with open(os.path.join(_HERE, name)) as f:
            apis.append(json.load(f))
    return _common_api(apis)


_API = _load_api()
__version__ = _API['cupy_version']

DEVICE_COUNT = 2

# The ufunc methods CuPy implements, and for which ufuncs (the others raise
# NotImplementedError there).
_UFUNC_METHODS = {
    'reduce': {'add', 'multiply'}, 'accumulate': {'add', 'multiply'}, 'reduceat': {'add'},
    'at': {'add', 'subtract', 'maximum', 'minimum', 'bitwise_and', 'bitwise_or', 'bitwise_xor'},
    'outer': None,  # every ufunc
}
_UFUNC_KWARGS = frozenset(['out', 'dtype', 'casting'])
# The dtypes of CuPy's add.at (its atomicAdd: the TypeError's list on CuPy 14.2)
_ADD_AT_DTYPES = frozenset(numpy.dtype(t) for t in (
    'int32', 'int64', 'float16', 'float32', 'float64', 'uint32', 'uint64'))

# ndarray methods that only make a view (no kernel: usable from any device)
_VIEW_METHODS = frozenset(['reshape', 'transpose', 'swapaxes', 'squeeze', 'view', 'diagonal'])
_HOST_METHODS = frozenset(['get', 'item', 'tolist', 'tobytes', 'tofile', 'dump', 'dumps'])

host_reads = []   # what read device data on the host, in order
uploads = []      # host -> device transfers (shapes)
cupy_calls = []   # CuPy routines run on device arrays (each at least one kernel of CuPy's)
# NumPy functions and ufuncs called on device arrays, which reach CuPy only
# through its dispatch protocols (xgrad's op library calls CuPy's namespace)
numpy_dispatches = []


class _NoImplicitConversion(TypeError, AttributeError):
    """What CuPy raises for implicit conversion to NumPy (also an
    AttributeError, so that ``hasattr(a, '__array_interface__')`` is False
    as for a CuPy array)."""


def _implicit(what):
    return _NoImplicitConversion(
        'Implicit conversion to a NumPy array is not allowed ({}). Please use `.get()` '
        'to construct a NumPy array explicitly. (fake CuPy)'.format(what))


# -- devices ------------------------------------------------------------------

_current = [0]


def _current_device():
    return _current[0]


class Device:
    """``cupy.cuda.Device``: ``with Device(1):`` makes device 1 current."""

    def __init__(self, device=None):
        if device is None:
            device = _current[0]
        device = int(device)
        if not 0 <= device < DEVICE_COUNT:
            raise RuntimeError('cudaErrorInvalidDevice: invalid device ordinal (fake CuPy: '
                               '{} devices)'.format(DEVICE_COUNT))
        self.id = device
        self._saved = []

    def __enter__(self):
        self._saved.append(_current[0])
        _current[0] = self.id
        return self

    def __exit__(self, *exc):
        _current[0] = self._saved.pop()
        return False

    def use(self):
        _current[0] = self.id

    def synchronize(self):
        host_reads.append('synchronize')

    @property
    def compute_capability(self):
        return '90'

    def __int__(self):
        return self.id

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return '<CUDA Device {}>'.format(self.id)


def _check_device(arrays, what):
    """ValueError (CuPy's message) for an array not on the current device."""
    current = _current[0]
    for a in arrays:
        if a._dev != current:
            raise ValueError(
                'Array device must be same as the current device: array device = {} '
                'while current = {} (fake CuPy: in {})'.format(a._dev, current, what))


# -- the array ----------------------------------------------------------------

class _Flags:
    """CuPy's flags: no ``writeable`` (every device array is writeable)."""

    def __init__(self, a):
        self.c_contiguous = bool(a.flags.c_contiguous)
        self.f_contiguous = bool(a.flags.f_contiguous)
        self.owndata = bool(a.flags.owndata)

    def __getitem__(self, name):
        return {'C_CONTIGUOUS': self.c_contiguous, 'F_CONTIGUOUS': self.f_contiguous,
                'OWNDATA': self.owndata}[name]


class MemoryPointer:
    def __init__(self, a, device_id):
        self.ptr = a.__array_interface__['data'][0]
        self.device_id = device_id


def _make(a, dev=None):
    out = ndarray.__new__(ndarray)
    out._a = a
    out._dev = _current[0] if dev is None else dev
    return out


def _method(name):
    params = _API['methods'].get(name, False)
    if params is False:
        raise AttributeError(name)
    sig = _signature(params)

    def method(self, *args, **kwargs):
        what = 'ndarray.' + name
        _bind(sig, what, args, kwargs)
        if name in _HOST_METHODS:
            host_reads.append(name)
            return getattr(self._a, name)(*args, **kwargs)
        if name not in _VIEW_METHODS:
            cupy_calls.append(name)
            _check_device([self] + _device_arrays((args, kwargs)), what)
        args, kwargs = _unwrap((args, kwargs), what)
        with numpy.errstate(all='ignore'):
            return _wrap(getattr(self._a, name)(*args, **kwargs), self._dev)
    method.__name__ = name
    return method


class ndarray:
    """A device array: a NumPy buffer ``_a`` on device ``_dev``."""

    __slots__ = ('_a', '_dev', '__weakref__')
    __hash__ = None

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order='C'):
        self._a = _poisoned(numpy.empty(shape, dtype, order=order))
        self._dev = _current[0]

    # -- attributes
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    strides = property(lambda self: self._a.strides)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    flags = property(lambda self: _Flags(self._a))
    device = property(lambda self: Device(self._dev))
    data = property(lambda self: MemoryPointer(self._a, self._dev))
    T = property(lambda self: _make(self._a.T, self._dev))
    mT = property(lambda self: _make(numpy.swapaxes(self._a, -1, -2), self._dev))
    base = property(lambda self: None if self._a.base is None else _make(self._a.base, self._dev))
    real = property(lambda self: _make(self._a.real, self._dev))
    imag = property(lambda self: _make(self._a.imag, self._dev))

    @property
    def __array_interface__(self):
        raise _implicit('__array_interface__')

    @property
    def __cuda_array_interface__(self):
        return {'shape': self.shape, 'typestr': self.dtype.str, 'strides': self.strides,
                'data': (self.data.ptr, False), 'version': 3}

    def __array__(self, dtype=None, copy=None):
        raise _implicit('__array__')

    def __getattr__(self, name):
        if name in ('__array_interface__', '__array_struct__'):
            raise _implicit(name)  # (the property's error lands here)
        if name.startswith('__'):
            raise AttributeError(name)
        try:
            method = _method(name)
        except AttributeError:
            raise AttributeError("'cupy.ndarray' object has no attribute {!r} (fake CuPy: "
                                 'CuPy {} has no such method)'.format(name, __version__)) from None
        return types.MethodType(method, self)

    # -- the dispatch protocols: NumPy's functions and ufuncs on device arrays

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        numpy_dispatches.append('numpy.' + ufunc.__name__)
        cupy_ufunc = _UFUNCS.get(ufunc.__name__) or _FUNCTIONS.get(ufunc.__name__)
        if cupy_ufunc is None:  # (NumPy's matmul is a ufunc, CuPy's a gufunc)
            return NotImplemented
        if method == '__call__':
            return cupy_ufunc(*inputs, **kwargs)
        return getattr(cupy_ufunc, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        numpy_dispatches.append(func.__module__ + '.' + func.__name__)
        path = func.__module__.split('.')[1:] + [func.__name__]
        if path[:1] in (['_core'], ['core'], ['lib']) or path[:1] and path[0].startswith('_'):
            path = path[-1:]
        f = _FUNCTIONS.get('.'.join(path))
        if f is None or not all(issubclass(t, ndarray) for t in types):
            return NotImplemented  # NumPy raises TypeError, as with CuPy
        kwargs = dict(kwargs)
        kwargs.pop('like', None)
        return f(*args, **kwargs)

    # -- indexing
    def __getitem__(self, key):
        arrays = _device_arrays(key)
        if arrays or _has_host_array(key):
            cupy_calls.append('getitem')
            _check_device([self] + arrays, 'getitem')
        return _wrap(self._a[_index(key)], self._dev)

    def __setitem__(self, key, value):
        cupy_calls.append('setitem')
        _check_device([self] + _device_arrays((key, value)), 'setitem')
        self._a[_index(key)] = _unwrap(value, 'setitem')
        _flush_denormals(self._a)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        for i in range(len(self._a)):
            yield self[i]

    # -- host reads (each waits for the GPU on real CuPy)
    def get(self, stream=None, order='C', out=None, blocking=True):
        host_reads.append('get')
        return numpy.array(self._a, order=order)

    def set(self, arr, stream=None):
        if type(arr) is not numpy.ndarray:
            raise TypeError('Only numpy.ndarray can be set to cupy.ndarray')
        uploads.append(arr.shape)
        self._a[...] = arr

    def __bool__(self):
        host_reads.append('bool')
        return bool(self._a)

    def __float__(self):
        host_reads.append('float')
        return float(self._a)

    def __int__(self):
        host_reads.append('int')
        return int(self._a)

    def __complex__(self):
        host_reads.append('complex')
        return complex(self._a)

    def __index__(self):
        host_reads.append('index')
        return self._a.__index__()

    def __repr__(self):
        host_reads.append('repr')
        return 'fake_cupy.array({}, device={})'.format(numpy.array2string(self._a), self._dev)

    __str__ = __repr__

    def __reduce__(self):
        host_reads.append('pickle')
        return (_unpickle, (numpy.array(self._a), self._dev))

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()


def _unpickle(host, dev):
    with Device(dev):
        return array(host)


def _binary_dunder(ufunc_name, reflected=False, inplace=False):
    def dunder(self, other):
        if isinstance(other, numpy.ndarray) and not reflected:
            pass  # the ufunc raises the TypeError
        elif not isinstance(other, (ndarray, numpy.ndarray, numpy.generic, int, float,
                                    complex, bool)):
            return NotImplemented
        u = _UFUNCS[ufunc_name]
        if inplace:
            return u(self, other, out=self)
        return u(other, self) if reflected else u(self, other)
    return dunder


for _name, _ufunc in [('add', 'add'), ('sub', 'subtract'), ('mul', 'multiply'),
                      ('truediv', 'true_divide'), ('floordiv', 'floor_divide'),
                      ('mod', 'remainder'), ('pow', 'power'), ('and', 'bitwise_and'),
                      ('or', 'bitwise_or'), ('xor', 'bitwise_xor'),
                      ('lshift', 'left_shift'), ('rshift', 'right_shift')]:
    setattr(ndarray, '__{}__'.format(_name), _binary_dunder(_ufunc))
    setattr(ndarray, '__r{}__'.format(_name), _binary_dunder(_ufunc, reflected=True))
    setattr(ndarray, '__i{}__'.format(_name), _binary_dunder(_ufunc, inplace=True))
for _name, _ufunc in [('eq', 'equal'), ('ne', 'not_equal'), ('lt', 'less'),
                      ('le', 'less_equal'), ('gt', 'greater'), ('ge', 'greater_equal')]:
    setattr(ndarray, '__{}__'.format(_name), _binary_dunder(_ufunc))
for _name, _ufunc in [('neg', 'negative'), ('pos', 'positive'), ('abs', 'absolute'),
                      ('invert', 'invert')]:
    setattr(ndarray, '__{}__'.format(_name),
            (lambda u: lambda self: _UFUNCS[u](self))(_ufunc))
ndarray.__matmul__ = lambda self, other: _FUNCTIONS['matmul'](self, other)
ndarray.__rmatmul__ = lambda self, other: _FUNCTIONS['matmul'](other, self)
del _name, _ufunc


# -- moving between the stand-in and NumPy -----------------------------------

def _device_arrays(obj):
    """The device arrays in ``obj`` (nested tuples, lists, dicts, slices)."""
    if type(obj) is ndarray:
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [a for o in obj for a in _device_arrays(o)]
    if isinstance(obj, dict):
        return _device_arrays(list(obj.values()))
    return []


def _has_host_array(key):
    if isinstance(key, tuple):
        return any(_has_host_array(k) for k in key)
    return isinstance(key, (numpy.ndarray, list))


def _index(key):
    """An index key: device arrays unwrapped; host index arrays are copied to
    the device by CuPy (counted as uploads)."""
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    if type(key) is ndarray:
        return key._a
    if isinstance(key, numpy.ndarray):
        uploads.append(key.shape)
    return key


def _unwrap(obj, what):
    """NumPy objects for NumPy to compute on; TypeError for host arrays."""
    if type(obj) is ndarray:
        return obj._a
    if type(obj) is numpy.ndarray:
        raise TypeError('Unsupported type {} (fake CuPy: in {}; host arrays do not mix '
                        'with device arrays)'.format(type(obj), what))
    if isinstance(obj, tuple):
        return tuple(_unwrap(o, what) for o in obj)
    if isinstance(obj, list):
        return [_unwrap(o, what) for o in obj]
    if isinstance(obj, dict):
        return {k: _unwrap(v, what) for k, v in obj.items()}
    return obj


def _flush_denormals(a):
    """Float32 results with denormals flushed to zero (CuPy's -ftz=true)."""
    if isinstance(a, numpy.ndarray) and a.dtype in (numpy.float32, numpy.complex64):
        tiny = numpy.finfo(numpy.float32).tiny
        flat = a.reshape(-1) if a.flags.c_contiguous else None
        if flat is not None:
            denormal = (numpy.abs(flat) < tiny) & (flat != 0)
            if denormal.any():
                flat[denormal] = 0
    return a


def _wrap(obj, dev=None):
    """Device arrays for NumPy results: arrays and scalars (as 0-d arrays)."""
    if type(obj) is numpy.ndarray:
        return _make(_flush_denormals(obj), dev)
    if isinstance(obj, numpy.generic):
        return _make(_flush_denormals(numpy.array(obj)), dev)
    if isinstance(obj, tuple):
        return tuple(_wrap(o, dev) for o in obj)
    if isinstance(obj, list):
        return [_wrap(o, dev) for o in obj]
    return obj


def _poisoned(a):
    a.fill(numpy.nan if a.dtype.kind in 'fc' else 0x5A)
    return a


# -- signatures (CuPy's, from cupy_api.json) ----------------------------------

def _signature(params):
    if params is None:
        return None
    return inspect.Signature([
        inspect.Parameter(name, getattr(inspect.Parameter, kind),
                          default=None if has_default else inspect.Parameter.empty)
        for name, kind, has_default in params])


def _bind(sig, what, args, kwargs):
    """TypeError, as CuPy's, for arguments CuPy's ``what`` does not take."""
    if sig is None:
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError('fake CuPy {}: {} (CuPy {}: {}{})'.format(
            what, e, __version__, what, sig)) from None


class ufunc:
    """A CuPy ufunc: NumPy's, on device arrays of the current device."""

    def __init__(self, name, nin, nout):
        self.name = name
        self.__name__ = 'cupy_' + name
        self.nin, self.nout, self.nargs = nin, nout, nin + nout
        self._numpy = getattr(numpy, name)

    def __repr__(self):
        return "<ufunc '{}'>".format(self.__name__)

    def _run(self, method, args, kwargs):
        what = '{}{}'.format(self.name, '' if method == '__call__' else '.' + method)
        if method == '__call__':
            bad = set(kwargs) - _UFUNC_KWARGS
            if bad:
                raise TypeError('Wrong arguments {} (fake CuPy: {} takes only {})'.format(
                    sorted(bad), what, sorted(_UFUNC_KWARGS)))
        elif _UFUNC_METHODS[method] is not None and self.name not in _UFUNC_METHODS[method]:
            raise NotImplementedError('fake CuPy: {} is not supported (CuPy has ufunc.{} '
                                      'only for {})'.format(what, method,
                                                            sorted(_UFUNC_METHODS[method])))
        cupy_calls.append(what)
        _check_device(_device_arrays((args, kwargs)), what)
        args, kwargs = _unwrap((args, kwargs), what)
        if what == 'add.at' and args[0].dtype not in _ADD_AT_DTYPES:
            raise TypeError('cupy.add.at only supports int32, int64, float16, float32, '
                            'float64, uint32, uint64 as data type (fake CuPy)')
        with numpy.errstate(all='ignore'):
            result = getattr(self._numpy, method)(*args, **kwargs)
        if method == 'at':
            _flush_denormals(args[0])
            return None
        return _wrap(result)

    def __call__(self, *args, **kwargs):
        return self._run('__call__', args, kwargs)

    def reduce(self, *args, **kwargs):
        return self._run('reduce', args, kwargs)

    def accumulate(self, *args, **kwargs):
        return self._run('accumulate', args, kwargs)

    def reduceat(self, *args, **kwargs):
        return self._run('reduceat', args, kwargs)

    def at(self, *args, **kwargs):
        return self._run('at', args, kwargs)

    def outer(self, *args, **kwargs):
        return self._run('outer', args, kwargs)


def _numpy_function(name):
    module, _, attr = name.rpartition('.')
    owner = numpy
    for part in module.split('.') if module else ():
        owner = getattr(owner, part, None)
    return getattr(owner, attr, None)


class _Function:
    """A CuPy routine: NumPy's function of that name, with CuPy's signature,
    on device arrays of the current device; new arrays on the current device."""

    def __init__(self, name, params, impl):
        self.name = name
        self.__name__ = name.rpartition('.')[2]
        self._sig = _signature(params)
        self._impl = impl

    def __call__(self, *args, **kwargs):
        _bind(self._sig, self.name, args, kwargs)
        if self.name not in _NO_KERNEL:
            cupy_calls.append(self.name)
        _check_device(_device_arrays((args, kwargs)), self.name)
        args, kwargs = _unwrap((args, kwargs), self.name)
        with numpy.errstate(all='ignore'):
            return _wrap(self._impl(*args, **kwargs))

    def __repr__(self):
        return '<fake cupy function {}>'.format(self.name)


_NO_KERNEL = frozenset(['empty', 'empty_like'])  # allocate only
_UFUNCS = {name: ufunc(name, nin, nout) for name, (nin, nout) in _API['ufuncs'].items()
           if hasattr(numpy, name)}
_FUNCTIONS = {}
for _name, _params in _API['functions'].items():
    _impl = _numpy_function(_name)
    if _impl is not None and callable(_impl):
        _FUNCTIONS[_name] = _Function(_name, _params, _impl)
del _name, _params, _impl


# -- functions with CuPy's own behaviour ---------------------------------------

def _own(func):
    """Registers ``func`` as the routine of its name, keeping CuPy's signature."""
    params = _API['functions'][func.__name__]
    sig = _signature(params)

    @functools.wraps(func)
    def checked(*args, **kwargs):
        _bind(sig, func.__name__, args, kwargs)
        return func(*args, **kwargs)
    _FUNCTIONS[func.__name__] = checked
    return checked


@_own
def array(obj, dtype=None, copy=True, order='K', subok=False, ndmin=0, *, blocking=False):
    if type(obj) is ndarray:  # a copy on the current device (peer copy)
        return _make(numpy.array(obj._a, dtype=dtype, copy=True if copy else None,
                                 order=order, ndmin=ndmin))
    if isinstance(obj, (list, tuple)) and _device_arrays(obj):
        arrays = _device_arrays(obj)
        _check_device(arrays, 'array')
        return _make(numpy.array(_unwrap(obj, 'array'), dtype=dtype, ndmin=ndmin))
    host = numpy.array(obj, dtype=dtype, order=order, ndmin=ndmin)
    uploads.append(host.shape)
    return _make(host)


@_own
def asarray(a, dtype=None, order=None, *, copy=None, blocking=False):
    if type(a) is ndarray and a._dev == _current[0] and (dtype is None or a.dtype == dtype):
        return a
    return array(a, dtype=dtype, copy=True)


@_own
def asnumpy(a, stream=None, order='C', out=None, *, blocking=True):
    if type(a) is ndarray:
        host_reads.append('asnumpy')
        return numpy.array(a._a, order=order)
    return numpy.asarray(a, order=order)


@_own
def ascontiguousarray(a, dtype=None):
    if type(a) is ndarray and a._a.flags.c_contiguous and (dtype is None or a.dtype == dtype):
        return a  # no copy, no kernel
    return _FUNCTIONS['ascontiguousarray_'](a, dtype=dtype)


_FUNCTIONS['ascontiguousarray_'] = _Function('ascontiguousarray', None,
                                             numpy.ascontiguousarray)


@_own
def get_array_module(*args):
    return sys.modules[__name__] if _device_arrays(args) else numpy


def _poisoned_empty(shape, dtype=float, order='C'):
    return _poisoned(numpy.empty(shape, dtype, order))


def _poisoned_empty_like(prototype, dtype=None, order='K', subok=None, shape=None):
    return _poisoned(numpy.empty_like(prototype, dtype, order, shape=shape))


_FUNCTIONS['empty'] = _Function('empty', _API['functions']['empty'], _poisoned_empty)
_FUNCTIONS['empty_like'] = _Function('empty_like', _API['functions']['empty_like'],
                                     _poisoned_empty_like)


def __getattr__(name):
    """CuPy's routines, ufuncs and dtypes (NumPy's names where CuPy has them)."""
    f = _FUNCTIONS.get(name) or _UFUNCS.get(name)
    if f is not None:
        return f
    if name in _NAMES and hasattr(numpy, name) and not callable(getattr(numpy, name)) \
            or name in _NAMES and isinstance(getattr(numpy, name, None), type):
        return getattr(numpy, name)   # dtypes, constants (float32, pi, newaxis...)
    raise AttributeError('fake CuPy has no {!r} (CuPy {} has no such function or it '
                         'is not in cupy_api.json)'.format(name, __version__))


_NAMES = frozenset(
    line.strip() for line in open(os.path.join(_HERE, 'cupy_names.txt'))
    if line.strip() and not line.startswith('#'))


class _Submodule(types.ModuleType):
    def __init__(self, prefix):
        super().__init__('fake_cupy.' + prefix)
        self._prefix = prefix

    def __getattr__(self, name):
        f = _FUNCTIONS.get('{}.{}'.format(self._prefix, name))
        if f is None:
            raise AttributeError('fake CuPy has no cupy.{}.{}'.format(self._prefix, name))
        return f


linalg = _Submodule('linalg')


class lib:
    class stride_tricks:
        @staticmethod
        def as_strided(x, shape=None, strides=None):
            return _make(numpy.lib.stride_tricks.as_strided(x._a, shape, strides), x._dev)


# -- random numbers, drawn on the device (counted in cupy_calls) --------------

class _Generator:
    """``cupy.random.Generator``'s ``random``: uniform [0, 1) on the current
    device, no upload."""

    def __init__(self, seed=None):
        self._rng = numpy.random.default_rng(seed)

    def random(self, size=None, dtype=numpy.float64, out=None):
        cupy_calls.append('random.Generator.random')
        return _make(self._rng.random(size, dtype=dtype))


class random:
    Generator = _Generator

    @staticmethod
    def default_rng(seed=None):
        return _Generator(seed)


# -- our kernels: the emulator, on the current device ---------------------------

class RawModule:
    """``cupy.RawModule``: loaded on the device current when a function is
    first asked for; its kernels launch only there."""

    def __init__(self, code=None, *, path=None, options=(), backend='nvrtc',
                 translate_cucomplex=False, enable_cooperative_groups=False,
                 name_expressions=None, jitify=False):
        self._module = emulator.RawModule(
            code, path=path, options=options, backend=backend,
            translate_cucomplex=translate_cucomplex,
            enable_cooperative_groups=enable_cooperative_groups,
            name_expressions=name_expressions, jitify=jitify)
        self._device = None

    def get_function(self, name):
        if self._device is None:
            self._device = _current[0]
        return _Kernel(self._module.get_function(name), self._device)


class _Kernel:
    def __init__(self, function, device):
        self._function = function
        self._device = device
        # float32 and half kernels flush denormals (-ftz=true); double do not
        self._ftz = '<double' not in function.name

    def __call__(self, grid, block, args, *, shared_mem=0, stream=None,
                 enable_cooperative_groups=False):
        name = self._function.name
        if _current[0] != self._device:
            raise RuntimeError('CUDA_ERROR_INVALID_HANDLE: {} was loaded on device {} and '
                               'launched on device {} (fake CuPy)'.format(
                                   name, self._device, _current[0]))
        for i, a in enumerate(args):
            if type(a) is numpy.ndarray:
                raise TypeError('Unsupported type {} (fake CuPy: argument {} of kernel '
                                '{} is a host array)'.format(type(a), i, name))
        _check_device(_device_arrays(list(args)), name)
        raw = [a._a if type(a) is ndarray else a for a in args]
        self._function(grid, block, raw, shared_mem=shared_mem, ftz=self._ftz)


# -- the cuda module ------------------------------------------------------------

class _Runtime:
    @staticmethod
    def getDeviceCount():
        return DEVICE_COUNT

    @staticmethod
    def getDevice():
        return _current[0]

    @staticmethod
    def runtimeGetVersion():
        return 12090

    @staticmethod
    def driverGetVersion():
        return 12090

    @staticmethod
    def getDeviceProperties(device):
        return {'name': b'fake CuPy device (CPU)', 'totalGlobalMem': 1 << 30,
                'major': 9, 'minor': 0, 'multiProcessorCount': 2}


class _Nvrtc:
    @staticmethod
    def getVersion():
        return (12, 9)


class cuda:
    Device = Device
    runtime = _Runtime
    nvrtc = _Nvrtc

    @staticmethod
    def get_device_id():
        return _current[0]

    @staticmethod
    def is_available():
        return True


def reset_counters():
    del host_reads[:]
    del uploads[:]
    del cupy_calls[:]
    del numpy_dispatches[:]
    del emulator.launches[:]
    _current[0] = 0
