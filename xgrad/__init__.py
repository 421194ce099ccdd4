"""xgrad: a reverse-mode autograd core with ChainerX's Python API.

Everything public is exported here; the rest of the package is private.
"""

import numpy as _numpy

from xgrad import _heap
_heap.configure()  # sets nothing unless XGRAD_HEAP_TOP_PAD asks (xgrad/_heap.py)
from xgrad._heap import keep_heap_top  # NOQA: opt-in, process-wide
from xgrad._backend.workspace import (  # NOQA: the kernels' kept blocks
    release_workspace, set_workspace_limit, workspace_limit, workspace_stats,
    cache_numpy_memory)
from xgrad._backend.cudnn import (  # NOQA: cuDNN's modes on cuda devices
    set_allow_tf32 as set_cudnn_allow_tf32, set_benchmark as set_cudnn_benchmark,
    set_deterministic as set_cudnn_deterministic)

from xgrad._errors import (  # NOQA
    XgradError, ChainerxError, ContextError, BackendError, DeviceError,
    DimensionError, DtypeError, NotImplementedError, IndexError, GradientError,
    GradientCheckError, BackpropModeError, AnomalyError, DistributedError)
from xgrad._core import (  # NOQA
    ndarray, Context, BackpropId, AnyGraph, anygraph, FunctionNode,
    backprop_scope, no_backprop_mode, force_backprop_mode, is_backprop_required,
    get_default_context, set_default_context, context_scope,
    get_global_default_context, set_global_default_context, get_backend,
    get_default_device, set_default_device, using_device,
    ContextScope, DeviceScope, BackpropScope, NoBackpropMode, ForceBackpropMode,
    get_device, backward, grad, _function_node_forward, _fromrawpointer)
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
from xgrad._ops._conv.dispatch import conv_algorithm  # NOQA: which algorithm a conv takes
from xgrad import linalg  # NOQA
from xgrad import random  # NOQA
from xgrad import functional  # NOQA
from xgrad._checkpoint import checkpoint  # NOQA
from xgrad import hooks  # NOQA
from xgrad.hooks import op_hooks, detect_anomaly  # NOQA
from xgrad._graph_export import graph_to_dot  # NOQA
from xgrad._numpy_fallbacks import (  # NOQA
    copysign, fix, broadcast_arrays, is_available, _to_cupy)

__version__ = '0.5.4'

# ChainerX's dtype names are NumPy's scalar types (``xgrad.float32 is
# numpy.float32``), and ``bool``, ``int`` and ``float`` are Python's, as
# chainerx/__init__.py imports them; every function taking a dtype takes
# these, NumPy dtypes and names alike.
from numpy import (  # NOQA
    bool_, int8, int16, int32, int64, uint8, float16, float32, float64)
from builtins import bool, int, float  # NOQA
all_dtypes = (bool_, int8, int16, int32, int64, uint8, float16, float32, float64)
float_dtypes = (float16, float32, float64)


# NumPy's constants, which ChainerX re-exports as the same objects
# (``xgrad.inf is numpy.inf``); NumPy 2 dropped the aliases, which then
# name NumPy's inf and nan.
newaxis = None
pi = _numpy.pi
e = _numpy.e
euler_gamma = _numpy.euler_gamma
inf = _numpy.inf
nan = _numpy.nan
Inf = getattr(_numpy, 'Inf', inf)
Infinity = getattr(_numpy, 'Infinity', inf)
PINF = getattr(_numpy, 'PINF', inf)
infty = getattr(_numpy, 'infty', inf)
NaN = getattr(_numpy, 'NaN', nan)
NAN = getattr(_numpy, 'NAN', nan)
NINF = getattr(_numpy, 'NINF', -inf)
PZERO = getattr(_numpy, 'PZERO', 0.0)
NZERO = getattr(_numpy, 'NZERO', -0.0)

# The gradient checks: one implementation, also xgrad.testing.check_backward.
from xgrad.testing._checks import check_backward, check_double_backward  # NOQA

# ChainerX's dtype is NumPy's: ``isinstance(x.dtype, xgrad.dtype)`` holds.
dtype = _numpy.dtype


def _is_debug():
    """Whether the core is a debug build (ChainerX's ``_is_debug``, which
    chainerx/__init__.py warns about): never for xgrad, which has no
    separate debug build."""
    return False
