"""The op library. Each family lives in its own module; this package gathers
them into the namespace the engine, the gradient formulas and the public API
use. A module lists its public ops in ``__all__``; ``PUBLIC`` collects them."""

from xgrad import _array, _core
from xgrad._ops import _xp, _xp_cuda  # NOQA: the raw namespaces register themselves
from xgrad._ops.creation import (  # NOQA
    array, asarray, from_numpy, to_numpy, full, zeros, ones, empty, zeros_like,
    ones_like, empty_like, full_like, arange, linspace, eye, identity,
    default_dtype, asanyarray, ascontiguousarray, frombuffer, tri, copyto, fromfile,
    fromstring, fromiter, fromfunction, loadtxt)
from xgrad._ops.elementwise import (  # NOQA
    add, subtract, multiply, divide, true_divide, power, maximum, minimum,
    negative, absolute, exp, log, sqrt, square, tanh, sigmoid, relu,
    equal, not_equal, greater, greater_equal, less, less_equal)
from xgrad._ops.reduction import sum, mean, sum_to, broadcast_to  # NOQA
from xgrad._ops.linalg import matmul  # NOQA
from xgrad._ops.manipulation import (  # NOQA
    reshape, transpose, swapaxes, squeeze, expand_dims, getitem, scatter,
    raw_index, view, copy, astype, to_device)

abs = absolute

for _name in ('sum_to', 'scatter', 'exp', 'log', 'sqrt', 'matmul', 'swapaxes',
              'transpose', 'reshape', 'broadcast_to', 'multiply', 'power',
              'to_device', 'getitem'):
    setattr(_xp._XgradNamespace, _name, staticmethod(globals()[_name]))

_array._install_ops(__import__('sys').modules[__name__])

# The plain-Python op families, each with its own __all__.
from xgrad._ops import (  # NOQA: E402
    mathematical, logic, arithmetic, statistics, contraction, norms, shaping,
    indexing, convolution, pooling, normalization, loss, dropout, rnn,
    bitwise)

PUBLIC = []
for _module in (mathematical, logic, arithmetic, statistics, contraction, shaping,
                indexing, convolution, pooling, normalization, loss, dropout, rnn,
    bitwise):
    for _name in _module.__all__:
        globals()[_name] = getattr(_module, _name)
        PUBLIC.append(_name)

__all__ = PUBLIC

# NumPy's dispatch protocols, which ndarray.__array_ufunc__/__array_function__ call.
from xgrad._ops import numpy_protocol  # NOQA: E402
from xgrad._ops.numpy_protocol import array_function, array_ufunc  # NOQA: E402
numpy_protocol.OPS = __import__('sys').modules[__name__]
