"""xgrad: a reverse-mode autograd core with ChainerX's Python API.

Everything public is exported here; the rest of the package is private.
"""

import numpy as _numpy

from xgrad._errors import (  # NOQA
    XgradError, ChainerxError, ContextError, BackendError, DeviceError,
    DimensionError, DtypeError, NotImplementedError, IndexError, GradientError,
    GradientCheckError, BackpropModeError)
from xgrad._core import (  # NOQA
    ndarray, Context, BackpropId, AnyGraph, anygraph, FunctionNode,
    backprop_scope, no_backprop_mode, force_backprop_mode, is_backprop_required,
    get_default_context, set_default_context, context_scope,
    get_default_device, set_default_device, using_device,
    get_device, backward, grad, _function_node_forward)
from xgrad._device import Backend, Device  # NOQA
from xgrad._ops import (  # NOQA
    array, asarray, from_numpy, to_numpy, full, zeros, ones, empty, zeros_like,
    ones_like, empty_like, full_like, arange, linspace, eye, identity,
    asanyarray, ascontiguousarray, frombuffer, tri, copyto, fromfile, fromstring,
    fromiter, fromfunction, loadtxt,
    add, subtract, multiply, divide, true_divide, power, maximum, minimum,
    negative, absolute, abs, exp, log, sqrt, square, tanh, sigmoid, relu,
    equal, not_equal, greater, greater_equal, less, less_equal,
    sum, mean, sum_to, broadcast_to, matmul, dot,
    reshape, transpose, swapaxes, squeeze, expand_dims, copy, astype, to_device)
from xgrad._ops import *  # NOQA: the op library (every module's __all__)
from xgrad._ops.registry import OpInfo, Sample, Arg, registered_ops, op_info  # NOQA
from xgrad import linalg  # NOQA
from xgrad import random  # NOQA
from xgrad import functional  # NOQA
from xgrad._checkpoint import checkpoint  # NOQA
from xgrad._graph_export import graph_to_dot  # NOQA
from xgrad._numpy_fallbacks import (  # NOQA
    copysign, fix, broadcast_arrays, is_available, _to_cupy)

__version__ = '0.1.0'

bool_ = _numpy.dtype('bool')
int8 = _numpy.dtype('int8')
int16 = _numpy.dtype('int16')
int32 = _numpy.dtype('int32')
int64 = _numpy.dtype('int64')
uint8 = _numpy.dtype('uint8')
float16 = _numpy.dtype('float16')
float32 = _numpy.dtype('float32')
float64 = _numpy.dtype('float64')
all_dtypes = (bool_, int8, int16, int32, int64, uint8, float16, float32, float64)
float_dtypes = (float16, float32, float64)


# NumPy's constants, which ChainerX re-exports (NumPy 2 dropped the aliases).
newaxis = None
pi = _numpy.pi
e = _numpy.e
euler_gamma = _numpy.euler_gamma
inf = Inf = Infinity = PINF = infty = float('inf')
NINF = float('-inf')
nan = NaN = NAN = float('nan')
PZERO = 0.0
NZERO = -0.0

# The gradient checks: one implementation, also xgrad.testing.check_backward.
from xgrad.testing._checks import check_backward, check_double_backward  # NOQA

# ChainerX's dtype is NumPy's: ``isinstance(x.dtype, xgrad.dtype)`` holds.
dtype = _numpy.dtype
