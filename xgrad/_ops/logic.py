"""Logic and selection: logical_and/or/xor/not, isnan/isinf/isfinite, all,
any, and ``where`` (the one differentiable op here: the condition picks which
operand each gradient element goes to)."""

import numpy

from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops._xp import numpy_ns
from xgrad._ops.registry import (
    INT_DTYPES, BOOL, Arg, OpInfo, Sample, real, register)

__all__ = ['where', 'logical_and', 'logical_or', 'logical_xor', 'logical_not', 'isnan',
           'isinf', 'isfinite', 'all', 'any']


# ---------------------------------------------------------------------------
# where

class Where(PyOp):
    op_name = 'where'

    def __init__(self, condition, x_scalar, y_scalar):
        self.condition = condition  # raw bool array
        self.x_scalar = x_scalar    # Python scalar standing in for x (or None)
        self.y_scalar = y_scalar

    def forward(self, inputs):
        it = iter(inputs)
        x = next(it) if self.x_scalar is None else self.x_scalar
        y = next(it) if self.y_scalar is None else self.y_scalar
        self.shapes = tuple(a.shape for a in inputs)
        self.dtypes = tuple(a.dtype for a in inputs)
        # ChainerX's promotion of x and y (xgrad/_dtypes.pyx: int8 with 2.5 is
        # float32, float16 with int64 is float16); scalars take that dtype.
        dtype = _args.result_dtype(*[a if s is None else s for a, s in (
            (x, self.x_scalar), (y, self.y_scalar))])
        x, y = [_args.promoted_scalar('where', v, dtype) if s is not None else v
                for v, s in ((x, self.x_scalar), (y, self.y_scalar))]
        xp = _args.module_of(self.condition, x, y)
        result = (numpy_ns if xp is numpy else xp).where(self.condition, x, y)
        if result.dtype != dtype:
            result = result.astype(dtype)
        return (_args.array_result(result),)

    def grads(self, xp, targets, gys, xs, ys):
        gy = gys[0]
        cond = xp.constant(self.condition, gy)
        zero = 0  # a weak Python scalar: keeps gy's dtype
        sides = ([] if self.x_scalar is not None else [True]) + \
            ([] if self.y_scalar is not None else [False])
        out = []
        for t in targets:
            g = xp.where(cond, gy, zero) if sides[t] else xp.where(cond, zero, gy)
            if g.shape != self.shapes[t]:
                g = xp.sum_to(g, self.shapes[t])
            out.append(xp.cast(g, self.dtypes[t]))
        return tuple(out)


def where(condition, x, y):
    """Elements of ``x`` where ``condition`` holds, else of ``y`` (NumPy's
    broadcasting, ChainerX's promotion; either operand may be a scalar).
    The gradient flows to the chosen operand only."""
    like = next((a for a in (condition, x, y) if isinstance(a, _args.ndarray)), None)
    if (type(condition) is numpy.ndarray and like is not None and like.device.is_native
            and condition.dtype.kind not in 'OUSVM'):
        # A NumPy mask for native operands (tril's, triu's): its bool copy,
        # without an xgrad array around it (what as_array would make).
        cond = raw_cond = condition.astype(bool)
    else:
        cond = _args.as_array(condition, 'condition', like)
        raw_cond = None
    inputs = []
    scalars = []
    for name, v in (('x', x), ('y', y)):
        if _args.is_scalar(v):
            scalars.append(v.item() if isinstance(v, numpy.generic) else v)
        else:
            inputs.append(_args.as_array(v, name, like))
            scalars.append(None)
    if raw_cond is None:
        _args.same_device([cond] + inputs, 'where')
        with _args.scope(cond):
            raw_cond = _args.raw(cond).astype(bool, copy=False)
    else:
        _args.same_device(inputs, 'where')
    if not _args.broadcastable([cond.shape] + [a.shape for a in inputs]):
        raise _args.DimensionError(
            'where: condition, x and y with shapes {} cannot be broadcast '
            'together'.format(', '.join(str(numpy.shape(v)) for v in (condition, x, y))))
    if not inputs:  # two scalars: their kinds' default dtypes (int32, float32)
        dtype = _args.result_dtype(*scalars)
        return _args.constant(cond, _where_scalars, raw_cond, *[
            _args.promoted_scalar('where', s, dtype) for s in scalars], dtype)
    return _args.apply(Where(raw_cond, scalars[0], scalars[1]), *inputs)


def _where_scalars(condition, x, y, dtype):
    return numpy.where(condition, x, y).astype(dtype, copy=False)


def _where_ref(c, x, y):
    return numpy.where(c, x, y)


register(OpInfo(
    'where', where, ref=_where_ref, broadcasting=True,
    samples=[Sample(Arg((2, 3), dtype=BOOL), (2, 3), (2, 3)),
             Sample(Arg((3,), dtype=BOOL), (2, 3), (2, 1)),
             Sample(Arg((2, 3), dtype=BOOL), (), (2, 3)),
             Sample(Arg((0, 3), dtype=BOOL), (0, 3), (3,))],
    domain=real, int_dtypes=(numpy.int64, numpy.int32, BOOL)))


# ---------------------------------------------------------------------------
# Non-differentiable logic: bool results, NumPy's semantics

def _logic(ufunc):
    """The public function of a non-differentiable ufunc with one or two
    operands (scalars stay weak, as in NumPy)."""
    name = ufunc.__name__
    if ufunc.nin == 1:
        def op(x):
            return _args.constant_result(name, ufunc, [_args.as_array(x, 'x')])
    else:
        def op(x1, x2):
            fast = _args.same_dtype_ufunc(ufunc, x1, x2, 'biuf')
            if fast is not None:
                return fast
            return _args.constant_result(name, ufunc, _args.operands(name, x1, x2)[1])
    op.__name__ = op.__qualname__ = name
    op.__doc__ = 'NumPy\'s ``{}``, elementwise; no gradient.'.format(name)
    return op


logical_and = _logic(numpy.logical_and)
logical_or = _logic(numpy.logical_or)
logical_xor = _logic(numpy.logical_xor)
logical_not = _logic(numpy.logical_not)
isnan = _logic(numpy.isnan)
isinf = _logic(numpy.isinf)
isfinite = _logic(numpy.isfinite)

_BINARY_SAMPLES = [Sample((2, 3), (2, 3)), Sample((2, 3), (3,)), Sample((), ()),
                   Sample((0, 3), (3,))]
_UNARY_SAMPLES = [Sample((2, 3)), Sample(()), Sample((0, 2))]

for _f, _samples in ((logical_and, _BINARY_SAMPLES), (logical_or, _BINARY_SAMPLES),
                     (logical_xor, _BINARY_SAMPLES), (logical_not, _UNARY_SAMPLES)):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__), samples=_samples,
                    broadcasting=len(_samples[0].args) > 1,
                    differentiable=False, int_dtypes=(BOOL,) + INT_DTYPES))


def _special_values(rs, shape):
    """Mostly finite values with some nan, inf and -inf."""
    x = rs.uniform(-1, 1, shape)
    pick = rs.randint(0, 5, shape)
    return numpy.where(pick == 0, numpy.nan, numpy.where(
        pick == 1, numpy.inf, numpy.where(pick == 2, -numpy.inf, x)))


for _f in (isnan, isinf, isfinite):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__),
                    samples=[Sample((3, 4)), Sample(()), Sample((0,))],
                    domain=_special_values, differentiable=False,
                    int_dtypes=(numpy.int64, BOOL)))


# ---------------------------------------------------------------------------
# all / any

def _truth_reduction(name, reducer):
    def op(a, axis=None, keepdims=False):
        a = _args.as_array(a, 'a')
        if type(keepdims) is not bool:
            if not isinstance(keepdims, (numpy.bool_, int, numpy.integer)):
                raise TypeError('{}: keepdims must be a bool, not {}'.format(
                    name, type(keepdims).__name__))
            keepdims = bool(keepdims)
        raw = _args.raw(a)
        # all axes as None: the reduction's fast path
        axes = None if axis is None else _args.normalize_axes(axis, a.ndim)
        if type(raw) is numpy.ndarray:
            # what NumPy's method calls, without its Python layers
            if axes is not None and len(axes) == raw.ndim:
                axes = None
            return _args.wrap(reducer.reduce(raw, axes, numpy.bool_, None, keepdims), a)
        if axes is None:
            axes = tuple(range(raw.ndim))
        return _args.constant(a, getattr(raw, name), axis=axes, keepdims=keepdims)
    op.__name__ = name
    op.__doc__ = ('Whether {} element along ``axis`` is true (nonzero); NumPy\'s '
                  '``{}``.'.format('every' if name == 'all' else 'some', name))
    return op


all = _truth_reduction('all', numpy.logical_and)
any = _truth_reduction('any', numpy.logical_or)


def _sparse_truth(rs, shape):
    return (rs.uniform(0, 1, shape) < 0.4) * rs.uniform(0.5, 1, shape)


for _f in (all, any):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__),
                    samples=[Sample((2, 3)), Sample((2, 3), axis=1),
                             Sample((2, 3, 2), axis=(0, 2), keepdims=True),
                             Sample((2, 3), axis=-1), Sample(()), Sample((0, 3), axis=0)],
                    domain=_sparse_truth, differentiable=False,
                    int_dtypes=(BOOL, numpy.int64)))
