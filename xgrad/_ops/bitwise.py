"""Bitwise and shift ops: bitwise_and/or/xor, left_shift, right_shift (the
functions behind ``&``, ``|``, ``^``, ``<<``, ``>>``).

They take integer and bool operands only (shifts: integers only, no bool),
as ChainerX does, and raise DtypeError on anything else. None of them has a
gradient. Bitwise ops give the operands' common dtype; a shift gives the
dtype of its left operand (int64 when that is a Python scalar), as in
ChainerX.
"""

import numpy

from xgrad._ops import _args
from xgrad._ops.registry import BOOL, INT_DTYPES, OpInfo, Sample, register

__all__ = ['bitwise_and', 'bitwise_or', 'bitwise_xor', 'left_shift', 'right_shift']


def _dtype_of(v):
    return v.dtype if isinstance(v, _args.ndarray) else numpy.result_type(v)


def _check_kinds(name, values, kinds, what):
    for i, v in enumerate(values):
        dtype = _dtype_of(v)
        if dtype.kind not in kinds:
            raise _args.DtypeError('{}: x{} has dtype {}; {} takes {} only'.format(
                name, i + 1, dtype, name, what))


def _bitwise(name, ufunc):
    def op(x1, x2):
        fast = _args.same_dtype_ufunc(ufunc, x1, x2, 'biu')
        if fast is not None:
            return fast
        arrays, values = _args.operands(name, x1, x2)
        _check_kinds(name, values, 'biu', 'bool and integer dtypes')
        # ChainerX's promotion; a scalar is cast to the result dtype (uint8 & -1
        # is uint8 & 255), as ChainerX does and NumPy 1.x would not.
        dtype = _args.result_dtype(*values)
        raws = [_args.raw(v) if isinstance(v, _args.ndarray) else v
                for v in _args.promoted(name, values)]
        _args.check_broadcast(name, *raws)
        # (NumPy 1.x widens a 0-d array with a scalar by value; the bits are
        # the same, so the cast back is exact.)
        result = _args.array_result(_args.in_module(ufunc, _args.module_of(*raws))(*raws))
        return _args.wrap(result.astype(dtype, copy=False), arrays[0])
    op.__name__ = op.__qualname__ = name
    op.__doc__ = 'x1 {} x2, elementwise, on bool and integer operands.'.format(
        {'bitwise_and': '&', 'bitwise_or': '|', 'bitwise_xor': '^'}[name])
    return op


bitwise_and = _bitwise('bitwise_and', numpy.bitwise_and)
bitwise_or = _bitwise('bitwise_or', numpy.bitwise_or)
bitwise_xor = _bitwise('bitwise_xor', numpy.bitwise_xor)


def _shift(name, ufunc):
    def op(x1, x2):
        arrays, values = _args.operands(name, x1, x2)
        _check_kinds(name, values, 'iu', 'integer dtypes (not bool)')
        first = values[0]
        dtype = first.dtype if isinstance(first, _args.ndarray) else numpy.dtype(numpy.int64)
        raws = [_args.raw(v) if isinstance(v, _args.ndarray) else v for v in values]
        result = _args.array_result(_args.checked_ufunc(name, ufunc, *raws))
        return _args.wrap(result.astype(dtype, copy=False), arrays[0])
    op.__name__ = op.__qualname__ = name
    op.__doc__ = 'x1 {} x2, elementwise, on integer operands; the dtype of x1.'.format(
        '<<' if name == 'left_shift' else '>>')
    return op


left_shift = _shift('left_shift', numpy.left_shift)
right_shift = _shift('right_shift', numpy.right_shift)


# ---------------------------------------------------------------------------
# Registry (forward only: no gradient, and no float dtypes)

_SAMPLES = [Sample((2, 3), (2, 3)), Sample((2, 3), (3,)), Sample((), ()),
            Sample((0, 3), (3,))]


def _small_counts(rs, shapes):
    return [rs.uniform(-9, 9, shapes[0]) / 3, rs.randint(0, 3, shapes[1]) / 3.0]


for _f in (bitwise_and, bitwise_or, bitwise_xor):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__), samples=_SAMPLES,
                    broadcasting=True, differentiable=False, dtypes=(),
                    int_dtypes=(BOOL,) + INT_DTYPES))
for _f in (left_shift, right_shift):
    register(OpInfo(_f.__name__, _f, ref=getattr(numpy, _f.__name__), samples=_SAMPLES,
                    broadcasting=True, differentiable=False, dtypes=(), gen=_small_counts,
                    int_dtypes=INT_DTYPES))
