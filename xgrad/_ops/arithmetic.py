"""The binary arithmetic that is not on the hot path: floor_divide,
remainder (mod), fmod, arctan2 and squared_difference.

Operands broadcast as in NumPy and promote by ChainerX's rule
(xgrad/_dtypes.pyx): ``float16_array % 2.0`` is float16, ``uint8_array % 2.5``
float32; arctan2 of ints is float32. Bool operands are refused.
"""

import numpy

from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops.elementwise import square, subtract
from xgrad._ops.registry import (
    OpInfo, Sample, nonzero, real, register)

__all__ = ['floor_divide', 'remainder', 'mod', 'fmod', 'arctan2', 'squared_difference']

BINARY_SAMPLES = (Sample((2, 3), (2, 3)), Sample((2, 3), (3,)), Sample((2, 1), (1, 3)),
                  Sample((), ()), Sample((0, 3), (3,)))


class _Binary(PyOp):
    """y = f(a, b) with broadcasting; one operand may be a Python scalar.
    ``derivative(xp, p, gy, a, b)`` is the unreduced gradient for operand p
    (0: a, 1: b); ``grads`` sums it to the operand's shape and dtype."""

    def __init__(self, scalars):
        self.scalars = scalars  # (a or None, b or None): the scalar operand

    def forward(self, inputs):
        self.shapes = tuple(x.shape for x in inputs)
        self.dtypes = tuple(x.dtype for x in inputs)
        self.retain_inputs(tuple(range(len(inputs))))
        a, b = self._operands(inputs)
        # The operands share ChainerX's result dtype (``promoted``); NumPy
        # 1.x's value-based casting can widen a 0-d result, so keep it.
        compute = _args.in_module(type(self).compute, _args.module_of(a, b))
        return (_args.array_result(compute(a, b)).astype(
            inputs[0].dtype, copy=False),)

    def _operands(self, xs):
        it = iter(xs)
        return [next(it) if s is None else s for s in self.scalars]

    def grads(self, xp, targets, gys, xs, ys):
        a, b = self._operands(xs)
        array_sides = [p for p in (0, 1) if self.scalars[p] is None]
        out = []
        for t in targets:
            g = type(self).derivative(xp, array_sides[t], gys[0], a, b)
            if g.shape != self.shapes[t]:
                g = xp.sum_to(g, self.shapes[t])
            out.append(xp.cast(g, self.dtypes[t]))
        return tuple(out)


def _binary_op(name, compute, derivative=None, doc='', float_result=False):
    """The public function of a binary op (a PyOp when differentiable)."""
    cls = None
    if derivative is not None:
        cls = type(name.title().replace('_', ''), (_Binary,), {
            'op_name': name, 'compute': staticmethod(compute),
            'derivative': staticmethod(derivative)})

    def op(x1, x2):
        if cls is None:  # no gradient: integer and float operands of one dtype at once
            fast = _args.same_dtype_ufunc(compute, x1, x2, 'iuf')
            if fast is not None:
                return fast
        arrays, values = _args.operands(name, x1, x2)
        values = _args.promoted(name, values, float_result, takes_bool=False)
        arrays = [v for v in values if isinstance(v, _args.ndarray)]
        if cls is None or all(x.dtype.kind != 'f' for x in arrays):
            # (NumPy 1.x's value-based casting can widen 0-d results)
            return _args.constant_result(name, compute, values).astype(arrays[0].dtype,
                                                                       copy=False)
        _args.check_broadcast(name, *values)
        scalars = [None if isinstance(v, _args.ndarray) else v for v in values]
        return _args.apply(cls(scalars), *arrays)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


floor_divide = _binary_op(
    'floor_divide', numpy.floor_divide,
    doc='x1 // x2 (NumPy\'s floor_divide); no gradient (it is piecewise constant).')


def _remainder_grad(xp, p, gy, a, b):
    return gy if p == 0 else -(gy * xp.floor(a / b))


remainder = _binary_op(
    'remainder', numpy.remainder, _remainder_grad,
    doc='x1 - floor(x1 / x2) * x2, with the sign of x2 (NumPy\'s remainder).')
mod = remainder


def _fmod_grad(xp, p, gy, a, b):
    if p == 0:
        return gy
    q = a / b
    if xp.raw:  # trunc(q) in one ufunc
        return -(gy * xp.trunc(q))
    return -(gy * xp.where(q >= 0, xp.floor(q), xp.ceil(q)))


fmod = _binary_op('fmod', numpy.fmod, _fmod_grad,
                  doc='x1 - trunc(x1 / x2) * x2, with the sign of x1 (C\'s fmod).')


def _arctan2_grad(xp, p, gy, a, b):
    r2 = a * a + b * b
    return gy * b / r2 if p == 0 else -(gy * a / r2)


arctan2 = _binary_op('arctan2', numpy.arctan2, _arctan2_grad, float_result=True,
                     doc='The angle of the point (x2, x1), elementwise.')


def squared_difference(x1, x2):
    """(x1 - x2) ** 2, elementwise."""
    return square(subtract(x1, x2))


# ---------------------------------------------------------------------------
# Registry

def _good_quotients(rs, shapes):
    """Dividends and divisors (of either sign) whose quotients stay 0.15 away
    from integers, where remainder and fmod jump."""
    for _ in range(500):
        a = rs.uniform(-3, 3, shapes[0])
        b = rs.choice([-1.0, 1.0], shapes[1]) * rs.uniform(0.5, 1.5, shapes[1])
        q = a / b
        if numpy.all(numpy.abs(q - numpy.round(q)) >= 0.15):
            return [a, b]
    raise AssertionError('could not sample quotients away from integers')


register(OpInfo('floor_divide', floor_divide, ref=numpy.floor_divide,
                samples=BINARY_SAMPLES, broadcasting=True, domain=(real, nonzero), differentiable=False,
                int_dtypes=(numpy.int64, numpy.int32, numpy.int8, numpy.uint8),
                promotion='result_type'))
for _f, _ref in ((remainder, numpy.remainder), (fmod, numpy.fmod)):
    register(OpInfo(_f.__name__, _f, ref=_ref, samples=BINARY_SAMPLES, broadcasting=True,
                    gen=_good_quotients,
                    int_dtypes=(numpy.int64, numpy.int32, numpy.int8), promotion='result_type'))
register(OpInfo('arctan2', arctan2, ref=numpy.arctan2, samples=BINARY_SAMPLES, broadcasting=True,
                domain=(nonzero, nonzero), int_dtypes=(numpy.int64, numpy.int32),
                promotion='float'))
register(OpInfo('squared_difference', squared_difference,
                ref=lambda a, b: numpy.square(numpy.subtract(a, b)),
                samples=BINARY_SAMPLES, broadcasting=True, int_dtypes=(numpy.int64, numpy.int32),
                promotion='result_type'))
