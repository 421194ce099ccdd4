"""NumPy's dispatch protocols on xgrad arrays (``ndarray.__array_ufunc__`` and
``__array_function__`` in ``_array.pyx`` call the two functions here).

Without them, ``numpy.float32(0.5) * w``, ``numpy.ones(3) + a`` or
``numpy.tanh(a)`` would convert ``a`` with ``__array__`` and return a plain
NumPy array: the gradient silently lost. The rules:

- A NumPy ufunc called on xgrad arrays (``numpy.tanh(a)``, ``x + a`` with a
  NumPy array or scalar ``x`` on the left) runs the xgrad op of the same
  name, so it is recorded on the graph and returns an xgrad array. NumPy
  arrays among the operands become xgrad arrays of their own dtype first;
  NumPy bool/int/float scalars stay scalars, promoted as Python scalars are
  (ChainerX's rule, xgrad/_dtypes.pyx).
- A ufunc xgrad has no op for, or a ufunc method other than a plain call
  (``reduce``, ``accumulate``, ``at``, ``outer``), or ``out=``/``where=``
  keywords: NumPy computes it on the data and returns NumPy arrays, unless
  an operand is on a graph and the result is a float array (something a
  gradient would flow through): then a TypeError names the ufunc.
  ``numpy.signbit(a)`` is fine; ``numpy.cbrt(a)`` on a graph raises.
- A NumPy function (``numpy.concatenate``, ``numpy.sum``, ...) with an array
  on a graph runs the xgrad function of the same name when there is one;
  otherwise NumPy runs it on the data, by the same rule (``numpy.allclose``
  and ``numpy.shape`` work, a float result off the graph raises).
- ``numpy.asarray(a)`` / ``numpy.array(a)`` go through ``__array__`` and
  give the data, deliberately: that is how a framework hands data to NumPy
  (Chainer does so with ChainerX arrays); the result is not on any graph.
"""

import numpy

from xgrad import _core


# The op namespace (the package xgrad._ops), handed over by it once complete:
# the protocol looks ops up by name.
OPS = None


def _ops():
    return OPS


def _on_a_graph(values):
    for v in values:
        if isinstance(v, _core.ndarray):
            if v.is_backprop_required(_core.anygraph):
                return True
        elif isinstance(v, (list, tuple)):
            if _on_a_graph(v):
                return True
    return False


def _to_numpy(value):
    """Replace xgrad arrays by their data, inside lists and tuples too."""
    if isinstance(value, _core.ndarray):
        return numpy.asarray(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_numpy(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    return value


def _operand(value, device):
    """A NumPy array operand as an xgrad array of its own dtype on the device
    of the xgrad operands. Scalars pass: a NumPy bool, int or float scalar
    is a scalar to the op as a Python one is (``numpy.int8(1) + a`` keeps a
    uint8 ``a`` uint8, as in ChainerX); other NumPy scalars (complex...)
    become 0-d arrays."""
    if isinstance(value, numpy.ndarray) or (
            isinstance(value, numpy.generic) and value.dtype.kind not in 'biuf'):
        return _ops().array(value, dtype=value.dtype, device=device)
    return value


def array_ufunc(ufunc, method, inputs, kwargs):
    ops = _ops()
    op = getattr(ops, ufunc.__name__, None)
    if method == '__call__' and not kwargs and op is not None and \
            ufunc.__name__ in _UFUNCS_WITH_OPS:
        device = next(x.device for x in inputs if isinstance(x, _core.ndarray))
        return op(*[_operand(x, device) for x in inputs])
    result = getattr(ufunc, method)(*_to_numpy(inputs), **_to_numpy(kwargs))
    if _on_a_graph(inputs) and _could_carry_a_gradient(result):
        what = 'numpy.{}{}'.format(ufunc.__name__,
                                   '' if method == '__call__' else '.' + method)
        if kwargs:
            what += ' with {}='.format('=, '.join(sorted(kwargs)))
        raise TypeError(
            '{} on an xgrad array that is on a graph would drop its gradient '
            '(xgrad has no op for it). Use xgrad ops, or call it on '
            'a.as_grad_stopped() or a.to_numpy() to leave the graph on '
            'purpose.'.format(what))
    return result


def _could_carry_a_gradient(result):
    if isinstance(result, tuple):
        return any(_could_carry_a_gradient(r) for r in result)
    dtype = getattr(result, 'dtype', None)
    return dtype is not None and dtype.kind in 'fc'


def array_function(func, types, args, kwargs):
    on_a_graph = _on_a_graph(args) or _on_a_graph(tuple(kwargs.values()))
    if on_a_graph:
        op = getattr(_ops(), func.__name__, None)
        if op is not None and callable(op):
            return op(*args, **kwargs)
    result = func(*_to_numpy(args), **_to_numpy(kwargs))
    if on_a_graph and _could_carry_a_gradient(result):
        raise TypeError(
            'numpy.{} on an xgrad array that is on a graph would drop its '
            'gradient (xgrad has no function of that name). Use xgrad ops, or '
            'call it on a.as_grad_stopped() or a.to_numpy() to leave the graph '
            'on purpose.'.format(func.__name__))
    return result


# The NumPy ufuncs whose xgrad namesakes are the same elementwise function
# (same arguments, NumPy's values), so that dispatching them is exact.
_UFUNCS_WITH_OPS = frozenset((
    'absolute', 'add', 'arccos', 'arccosh', 'arcsin', 'arcsinh', 'arctan',
    'arctan2', 'bitwise_and', 'bitwise_or', 'bitwise_xor', 'ceil', 'cos', 'cosh', 'divide', 'equal', 'exp', 'exp2',
    'expm1', 'fabs', 'floor', 'floor_divide', 'fmod', 'greater',
    'greater_equal', 'isfinite', 'isinf', 'isnan', 'less', 'less_equal',
    'left_shift', 'log', 'log10', 'log1p', 'log2', 'logical_and', 'logical_not',
    'logical_or', 'logical_xor', 'matmul', 'maximum', 'minimum', 'multiply',
    'negative', 'not_equal', 'power', 'reciprocal', 'remainder', 'right_shift', 'sign',
    'sin', 'sinh', 'sqrt', 'square', 'subtract', 'tan', 'tanh',
    'true_divide'))
