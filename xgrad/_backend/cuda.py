"""The CUDA backend: arrays on ``cuda:N`` devices hold CuPy arrays.

The arithmetic runs in our kernels (``xgrad/_kernels``) where we have one,
and in CuPy's routines otherwise, called through CuPy's own namespace
(:func:`module_of`, and ``xgrad._ops._xp_cuda.cuda_ns`` in gradient
formulas). The op code is shared with the native
backend, but it never calls NumPy's functions on device data for NumPy's
dispatch to pass on to CuPy. CuPy is imported on first use of a cuda device,
never by ``import xgrad``. Tests may substitute a module with CuPy's API
(:func:`use_cupy`), e.g. a CPU stand-in that runs our kernels under an
emulator.
"""

import importlib

import numpy

from xgrad._errors import DeviceError

_cupy = None         # the cupy module (or a stand-in) once imported
_kernels = None      # xgrad._kernels, loaded with the first cuda device


def use_cupy(module):
    """Make ``module`` serve as CuPy (None: the real CuPy again). For tests."""
    global _cupy
    _cupy = module


def cupy():
    """The CuPy module; DeviceError saying how to get it when it is missing."""
    global _cupy
    if _cupy is None:
        try:
            import cupy as module
        except ImportError as e:
            raise DeviceError(
                'cuda devices need CuPy, which is not installed '
                '(pip install "xgrad[cuda]"; importing cupy said: {})'.format(e)) from None
        except Exception as e:  # a broken install: missing CUDA libraries etc.
            raise DeviceError('cuda devices need CuPy, which is installed but failed '
                              'to import: {}: {}'.format(type(e).__name__, e)) from None
        _cupy = module
    return _cupy


def kernels():
    """Our kernels' Python side (xgrad._kernels), loaded on first use."""
    global _kernels
    if _kernels is None:
        _kernels = importlib.import_module('xgrad._kernels')
    return _kernels


def device_count():
    """How many CUDA devices CuPy sees; 0 without CuPy, a driver or a GPU."""
    try:
        return _count(cupy())
    except DeviceError:
        return 0


def _count(cp):
    try:
        return cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise DeviceError('cuda devices need a CUDA GPU: CuPy is installed but '
                          'CUDA reports none ({}: {})'.format(type(e).__name__, e)) from None


def check_device(index):
    """DeviceError unless ``cuda:index`` can be used, saying what is missing:
    CuPy, a GPU (and driver), or that many GPUs."""
    try:
        count = _count(cupy())
    except DeviceError as e:
        raise DeviceError('Device cuda:{} is not available: {}'.format(index, e)) from None
    if index >= count:
        raise DeviceError('Device cuda:{} does not exist: CUDA reports {} device{}'.format(
            index, count, '' if count == 1 else 's'))


def is_device_array(data):
    """True for CuPy arrays (once CuPy is loaded)."""
    return _cupy is not None and isinstance(data, _cupy.ndarray)


def on_gpu(data):
    """True for raw GPU data (fast for NumPy arrays)."""
    return type(data) is not numpy.ndarray and is_device_array(data)


def module_of(*raw):
    """NumPy or CuPy: the array module of raw data (CuPy when one of the
    values is GPU data). The op library calls this module's functions on the
    data, never NumPy's on device data through NumPy's dispatch."""
    for r in raw:
        if on_gpu(r):
            return _cupy
    return numpy


def to_host(data):
    """A NumPy copy of a CuPy array (waits for the GPU: an explicit transfer)."""
    return _cupy.asnumpy(data)


def to_cuda(data, index):
    """A copy of ``data`` (NumPy, a NumPy scalar, or CuPy on any GPU) on GPU
    ``index``."""
    cp = cupy()
    if isinstance(data, numpy.generic):
        data = numpy.asarray(data)
    with cp.cuda.Device(index):
        return cp.array(data, copy=True)


def device_key(key):
    """An index key for GPU data: its NumPy index arrays copied to the GPU
    (tuples item by item; slices, ints, None and GPU arrays as they are)."""
    if isinstance(key, tuple):
        return tuple([device_key(k) for k in key])
    if isinstance(key, numpy.ndarray) and not is_device_array(key):
        return cupy().asarray(key)
    return key


# The dtypes cupy.add.at takes (CuPy 13-14: atomicAdd's types); the others
# accumulate in the wider type of the same kind, whose sums cast back to
# NumPy's add.at results (bools: any addend True; small ints: wrapped).
_ADD_AT_DTYPES = frozenset(numpy.dtype(t) for t in (
    'int32', 'int64', 'uint32', 'uint64', 'float16', 'float32', 'float64'))
_ADD_AT_WIDER = {'b': numpy.dtype('int32'), 'i': numpy.dtype('int32'),
                 'u': numpy.dtype('uint32')}


def add_at(out, key, values):
    """``cupy.add.at(out, key, values)`` for every xgrad dtype, not only the
    ones CuPy's atomics take."""
    cp = cupy()
    if out.dtype in _ADD_AT_DTYPES:
        cp.add.at(out, key, values)
        return
    wider = _ADD_AT_WIDER[out.dtype.kind]
    total = out.astype(wider)
    cp.add.at(total, key, cp.asarray(values).astype(wider))
    out[...] = total.astype(out.dtype)


_KERNEL_DTYPES = frozenset(numpy.dtype(t) for t in ('float16', 'float32', 'float64'))


def _kernel_float(a):
    return getattr(a, 'dtype', None) in _KERNEL_DTYPES


def unary(name, x):
    """Elementwise op ``name`` of a CuPy array: our kernel for float arrays,
    CuPy's ufunc (NumPy's dtype rules) for the others."""
    if _kernel_float(x):
        return kernels().unary_forward(cupy(), name, x)
    if name == 'relu':  # (sigmoid always gets float data: the op promotes)
        return cupy().maximum(x, 0)
    return getattr(cupy(), name)(x)


def binary(name, a, b):
    """a op b: our kernel for same-shape float operands of one dtype, CuPy's
    ufunc (broadcasting, Python scalars, mixed dtypes) otherwise."""
    if (name in _KERNEL_BINARY and _kernel_float(a) and _kernel_float(b)
            and a.dtype == b.dtype and a.shape == b.shape):
        return kernels().binary_forward(cupy(), name, a, b)
    return getattr(cupy(), _BINARY_UFUNC.get(name, name))(a, b)


_KERNEL_BINARY = frozenset(['add', 'subtract', 'multiply', 'divide', 'maximum', 'minimum'])
_BINARY_UFUNC = {'divide': 'true_divide'}  # CuPy's name where it is not the op's
