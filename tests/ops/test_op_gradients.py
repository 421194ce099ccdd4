"""Forward values, gradients and second derivatives of every differentiable op.

Everything is driven by the table ``CASES`` below: one ``Case`` per op usage
(a function written once against an array namespace ``xp``, the input shapes
and the input domain). Adding an op is one line. For every case:

* ``test_forward``: the value, shape and dtype match NumPy (float16/32/64,
  plus int64 where the op is defined on integers; 0-d and empty variants where
  the case lists them);
* ``test_backward`` / ``test_double_backward``: ``xgrad.check_backward`` and
  ``xgrad.check_double_backward`` on float32 and float64;
* ``test_float16_backward`` / ``test_float16_double_backward``: the float16
  analytic gradients against central differences computed in float64 on
  float64 copies of the inputs (float16 finite differences are noise);
* ``test_empty_backward``: backward through the empty variants gives
  gradients of the inputs' (empty) shapes;
* ``test_zero_d_result_is_an_array``: 0-d results hold NumPy arrays (not
  NumPy scalars), so ``to_numpy()`` and in-place ops work on them;
* ``test_forward_records_on_graph``: outputs are recorded, inputs stay leaves.

Known engine bugs go in ``XFAILS`` (strict xfail), keyed by test and case.

``fn(xp, *xs)`` is called with ``xp = xgrad`` on xgrad arrays and with
``xp = NP`` (NumPy plus ``relu``/``sigmoid``) on NumPy arrays.
"""

import zlib

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# integer outputs, inputs left unchanged, and zero gradients of empty arrays.


F16 = numpy.dtype('float16')
F32 = numpy.dtype('float32')
F64 = numpy.dtype('float64')
I64 = numpy.dtype('int64')
FLOATS = (F16, F32, F64)


# ---------------------------------------------------------------------------
# The NumPy side of the table

class _NumpyOps:
    """NumPy, plus the two ops NumPy lacks."""

    def __getattr__(self, name):
        return getattr(numpy, name)

    @staticmethod
    def relu(x):
        return numpy.maximum(x, x.dtype.type(0))

    @staticmethod
    def sigmoid(x):
        x = numpy.asarray(x)
        return (1 / (1 + numpy.exp(-x.astype(F64)))).astype(x.dtype)


NP = _NumpyOps()


# ---------------------------------------------------------------------------
# Input domains: (RandomState, shape) -> float64 data (the registry's)

from xgrad._ops.registry import away_from, nonzero, positive, real, untied  # NOQA: E402
from ._numerics import assert_close as _assert_close  # NOQA: E402
from ._numerics import numerical_vjp as _numerical_vjp  # NOQA: E402


# ---------------------------------------------------------------------------
# The table

class Case:
    """One op usage.

    name: test id. fn(xp, *xs): the computation. shapes: one shape per
    input. domain: one domain for all inputs or one per input, or ``gen``
    (rs, shapes) -> list of arrays. ints: the forward is also checked on
    int64 inputs. grad: the op is differentiable. empty: shapes of an empty
    variant (forward and backward on empty arrays), or None. in_dtypes:
    dtype -> one dtype per input (default: all inputs have the test's dtype).
    """

    def __init__(self, name, fn, shapes, domain=real, gen=None, ints=False,
                 grad=True, empty=None, dtypes=FLOATS, in_dtypes=None):
        self.name = name
        self.fn = fn
        self.shapes = tuple(tuple(s) for s in shapes)
        self.domain = domain
        self.gen = gen
        self.ints = ints
        self.grad = grad
        self.empty = None if empty is None else tuple(tuple(s) for s in empty)
        self.dtypes = dtypes
        self._in_dtypes = in_dtypes

    def in_dtypes(self, dtype):
        if self._in_dtypes is None:
            return (numpy.dtype(dtype),) * len(self.shapes)
        return tuple(numpy.dtype(d) for d in self._in_dtypes(numpy.dtype(dtype)))

    def __repr__(self):
        return self.name

    def inputs(self, rs, shapes=None):
        shapes = self.shapes if shapes is None else shapes
        if self.gen is not None:
            return [numpy.asarray(a, F64) for a in self.gen(rs, shapes)]
        domains = self.domain if isinstance(self.domain, tuple) else \
            (self.domain,) * len(shapes)
        return [numpy.asarray(d(rs, s), F64) for d, s in zip(domains, shapes)]


def _other_float(dtype):
    return {F16: F32, F32: F64, F64: F32}[numpy.dtype(dtype)]


UNARY = [
    # name, fn, domain, ints
    ('negative', lambda xp, x: xp.negative(x), real, True),
    ('neg_operator', lambda xp, x: -x, real, True),
    ('absolute', lambda xp, x: xp.absolute(x), nonzero, True),
    ('abs_builtin', lambda xp, x: abs(x), nonzero, True),
    ('exp', lambda xp, x: xp.exp(x), real, False),
    ('log', lambda xp, x: xp.log(x), positive, False),
    ('sqrt', lambda xp, x: xp.sqrt(x), positive, False),
    ('square', lambda xp, x: xp.square(x), real, True),
    ('tanh', lambda xp, x: xp.tanh(x), real, False),
    ('sigmoid', lambda xp, x: xp.sigmoid(x), real, False),
    ('relu', lambda xp, x: xp.relu(x), nonzero, False),
    ('pow_scalar_int', lambda xp, x: x ** 3, real, True),
    ('pow_scalar_two', lambda xp, x: x ** 2, real, True),  # computed as square
    ('pow_scalar_two_float', lambda xp, x: xp.power(x, 2.0), real, False),
    ('pow_scalar_float', lambda xp, x: x ** 2.5, positive, False),
    ('pow_scalar_negative', lambda xp, x: xp.power(x, -1.5), positive, False),
    # (by products, a reciprocal or a square root: elementwise._power_by_products)
    ('pow_scalar_four', lambda xp, x: x ** 4, real, True),
    ('pow_scalar_three_float', lambda xp, x: xp.power(x, 3.0), real, False),
    ('pow_scalar_minus_one', lambda xp, x: x ** -1.0, nonzero, False),
    ('pow_scalar_minus_two', lambda xp, x: x ** -2.0, nonzero, False),
    ('pow_scalar_half', lambda xp, x: x ** 0.5, positive, False),
    ('rpow_scalar', lambda xp, x: 2.0 ** x, real, False),
    ('rpow_scalar_func', lambda xp, x: xp.power(1.5, x), real, False),
    ('add_scalar', lambda xp, x: x + 1.5, real, True),
    ('radd_scalar', lambda xp, x: 1.5 + x, real, True),
    ('add_scalar_func', lambda xp, x: xp.add(x, 2), real, True),
    ('sub_scalar', lambda xp, x: x - 0.5, real, True),
    ('rsub_scalar', lambda xp, x: 0.5 - x, real, True),
    ('rsub_scalar_func', lambda xp, x: xp.subtract(2, x), real, True),
    ('mul_scalar', lambda xp, x: x * 1.5, real, True),
    ('rmul_scalar', lambda xp, x: -2 * x, real, True),
    ('div_scalar', lambda xp, x: x / 4.0, real, True),
    ('rdiv_scalar', lambda xp, x: 3.0 / x, nonzero, False),
    ('true_divide_scalar', lambda xp, x: xp.true_divide(x, 2), real, True),
    ('maximum_scalar', lambda xp, x: xp.maximum(x, 0.25), away_from(0.25), True),
    ('maximum_scalar_left', lambda xp, x: xp.maximum(-0.25, x), away_from(-0.25),
     True),
    ('minimum_scalar', lambda xp, x: xp.minimum(x, 0.25), away_from(0.25), True),
    ('minimum_scalar_left', lambda xp, x: xp.minimum(-0.25, x), away_from(-0.25),
     True),
    ('copy', lambda xp, x: x.copy(), real, True),
    ('copy_func', lambda xp, x: xp.copy(x), real, True),
    ('view', lambda xp, x: x.view(), real, True),
]

CASES = []
for _name, _fn, _domain, _ints in UNARY:
    CASES.append(Case(_name, _fn, [(2, 3)], _domain, ints=_ints,
                      empty=[(2, 0)]))
    CASES.append(Case(_name + '_0d', _fn, [()], _domain, ints=_ints))

CASES += [
    Case('astype_other_float', lambda xp, x: x.astype(_other_float(x.dtype)),
         [(2, 3)], empty=[(0,)]),
    Case('astype_other_float_0d', lambda xp, x: x.astype(_other_float(x.dtype)),
         [()]),
    Case('astype_func', lambda xp, x: xgrad.astype(x, _other_float(x.dtype))
         if xp is xgrad else x.astype(_other_float(x.dtype)), [(2, 3)]),
    Case('astype_same_dtype_copy', lambda xp, x: x.astype(x.dtype), [(2, 3)]),
]

BINARY = [
    # name, fn, shapes, domain (per input), ints, empty
    ('add', lambda xp, a, b: xp.add(a, b), [(2, 3), (2, 3)], real, True,
     [(0, 3), (0, 3)]),
    ('add_operator', lambda xp, a, b: a + b, [(2, 3), (2, 3)], real, True, None),
    ('subtract', lambda xp, a, b: xp.subtract(a, b), [(2, 3), (2, 3)], real, True,
     [(0,), (0,)]),
    ('sub_operator', lambda xp, a, b: a - b, [(2, 3), (2, 3)], real, True, None),
    ('multiply', lambda xp, a, b: xp.multiply(a, b), [(2, 3), (2, 3)], real, True,
     [(2, 0), (2, 0)]),
    ('mul_operator', lambda xp, a, b: a * b, [(2, 3), (2, 3)], real, True, None),
    ('divide', lambda xp, a, b: xp.divide(a, b), [(2, 3), (2, 3)],
     (real, nonzero), False, [(0, 3), (0, 3)]),
    ('true_divide', lambda xp, a, b: xp.true_divide(a, b), [(2, 3), (2, 3)],
     (real, nonzero), False, None),
    ('div_operator', lambda xp, a, b: a / b, [(2, 3), (2, 3)], (real, nonzero),
     False, None),
    ('power', lambda xp, a, b: xp.power(a, b), [(2, 3), (2, 3)], (positive, real),
     False, [(0,), (0,)]),
    ('pow_operator', lambda xp, a, b: a ** b, [(2, 3), (2, 3)], (positive, real),
     False, None),
    # implicit broadcasting
    ('add_bcast_row', lambda xp, a, b: a + b, [(2, 3), (3,)], real, True,
     [(0, 3), (3,)]),
    ('add_bcast_left', lambda xp, a, b: a + b, [(3,), (2, 3)], real, True, None),
    ('add_bcast_0d', lambda xp, a, b: a + b, [(), (2, 3)], real, True, None),
    ('sub_bcast_col', lambda xp, a, b: a - b, [(2, 3), (2, 1)], real, True, None),
    ('mul_bcast_outer', lambda xp, a, b: a * b, [(2, 1), (1, 3)], real, True,
     [(0, 1), (1, 3)]),
    ('mul_bcast_3d', lambda xp, a, b: a * b, [(2, 1, 3), (2, 1)], real, True, None),
    ('div_bcast', lambda xp, a, b: a / b, [(2, 3), (3,)], (real, nonzero), False,
     None),
    ('rdiv_bcast', lambda xp, a, b: a / b, [(3,), (2, 3)], (real, nonzero), False,
     None),
    ('power_bcast', lambda xp, a, b: a ** b, [(2, 1), (3,)], (positive, real),
     False, None),
    ('add_0d_0d', lambda xp, a, b: a + b, [(), ()], real, True, None),
    ('mul_0d_0d', lambda xp, a, b: a * b, [(), ()], real, True, None),
    ('power_0d_0d', lambda xp, a, b: a ** b, [(), ()], (positive, real), False,
     None),
]
for _name, _fn, _shapes, _domain, _ints, _empty in BINARY:
    CASES.append(Case(_name, _fn, _shapes, _domain, ints=_ints, empty=_empty))

for _f in ('maximum', 'minimum'):
    for _suffix, _shapes, _empty in (
            ('', [(2, 3), (2, 3)], [(0, 3), (0, 3)]),
            ('_bcast', [(2, 3), (3,)], None),
            ('_bcast_outer', [(2, 1), (1, 3)], None),
            ('_0d', [(), ()], None)):
        CASES.append(Case(_f + _suffix,
                          (lambda f: lambda xp, a, b: getattr(xp, f)(a, b))(_f),
                          _shapes, gen=untied, ints=True, empty=_empty))

# Operands of two float dtypes: the result has the promoted dtype and each
# gradient is cast back to its operand's dtype.
_MIXED = lambda d: (d, _other_float(d))  # NOQA
CASES += [
    Case('add_mixed_dtypes', lambda xp, a, b: a + b, [(2, 3), (3,)],
         in_dtypes=_MIXED),
    Case('mul_mixed_dtypes', lambda xp, a, b: a * b, [(2, 3), (2, 3)],
         in_dtypes=_MIXED, empty=[(0,), (0,)]),
    Case('div_mixed_dtypes', lambda xp, a, b: a / b, [(2, 3), (2, 1)],
         (real, nonzero), in_dtypes=_MIXED),
    Case('power_mixed_dtypes', lambda xp, a, b: a ** b, [(2, 3), (2, 3)],
         (positive, real), in_dtypes=_MIXED),
    Case('maximum_mixed_dtypes', lambda xp, a, b: xp.maximum(a, b),
         [(2, 3), (2, 3)], gen=untied, in_dtypes=_MIXED),
    Case('matmul_mixed_dtypes', lambda xp, a, b: xp.matmul(a, b),
         [(2, 3), (3, 2)], in_dtypes=_MIXED),
]


def _reduction_cases():
    cases = []
    for f in ('sum', 'mean'):
        for shape, axis in (((2, 3), None), ((2, 3), 0), ((2, 3), 1),
                            ((2, 3), -1), ((2, 3), -2), ((2, 3), (0, 1)),
                            ((2, 3, 2), (0, 2)), ((2, 3, 2), (-1, 0)),
                            ((2, 3, 2), 1), ((), None)):
            for keepdims in (False, True):
                name = '{}_{}_axis{}{}'.format(
                    f, 'x'.join(map(str, shape)) or '0d',
                    str(axis).replace(' ', ''), '_keepdims' if keepdims else '')
                fn = (lambda f, axis, keepdims: lambda xp, x: getattr(xp, f)(
                    x, axis=axis, keepdims=keepdims))(f, axis, keepdims)
                # Empty variant: reduce along a non-empty axis only for mean
                # (the mean over zero elements is NaN, with a warning).
                empty = None
                if shape == (2, 3) and axis in (1, -1):
                    empty = [(0, 3)]
                elif f == 'sum' and shape == (2, 3) and axis in (None, 0):
                    empty = [(0, 3)]
                cases.append(Case(name, fn, [shape], ints=(f == 'sum'),
                                  empty=empty))
    cases.append(Case('sum_method', lambda xp, x: x.sum(axis=1), [(2, 3)],
                      ints=True))
    cases.append(Case('mean_method', lambda xp, x: x.mean(axis=0, keepdims=True),
                      [(2, 3)]))
    return cases


CASES += _reduction_cases()

MATMUL = [
    # name, shapes, empty
    ('1d_1d', [(3,), (3,)], [(0,), (0,)]),
    ('2d_1d', [(2, 3), (3,)], None),
    ('1d_2d', [(3,), (3, 2)], None),
    ('2d_2d', [(2, 3), (3, 2)], [(2, 0), (0, 2)]),
]
for _name, _shapes, _empty in MATMUL:
    CASES.append(Case('dot_' + _name, lambda xp, a, b: xp.dot(a, b), _shapes,
                      ints=True, empty=_empty))
    CASES.append(Case('matmul_' + _name, lambda xp, a, b: xp.matmul(a, b), _shapes,
                      ints=True, empty=_empty))
CASES += [
    Case('dot_method', lambda xp, a, b: a.dot(b), [(2, 3), (3, 2)]),
    Case('dot_0d', lambda xp, a, b: xp.dot(a, b), [(), (2, 3)]),
    Case('matmul_operator', lambda xp, a, b: a @ b, [(2, 3), (3, 2)], ints=True),
    Case('matmul_batched_3d_2d', lambda xp, a, b: xp.matmul(a, b),
         [(2, 2, 3), (3, 2)], ints=True, empty=[(0, 2, 3), (3, 2)]),
    Case('matmul_batched_2d_3d', lambda xp, a, b: xp.matmul(a, b),
         [(2, 3), (2, 3, 2)]),
    Case('matmul_batched_bcast', lambda xp, a, b: xp.matmul(a, b),
         [(2, 1, 2, 3), (3, 3, 2)]),
    Case('matmul_batched_3d_1d', lambda xp, a, b: xp.matmul(a, b),
         [(2, 2, 3), (3,)]),
    Case('matmul_batched_1d_3d', lambda xp, a, b: xp.matmul(a, b),
         [(3,), (2, 3, 2)]),
]

MANIPULATION = [
    # name, fn, shape, empty
    ('reshape_2d', lambda xp, x: xp.reshape(x, (3, 2)), (2, 3), None),
    ('reshape_flat', lambda xp, x: xp.reshape(x, (6,)), (2, 3), None),
    ('reshape_minus1', lambda xp, x: xp.reshape(x, (-1, 2)), (2, 3), None),
    ('reshape_int', lambda xp, x: xp.reshape(x, 6), (2, 3), None),
    ('reshape_expand', lambda xp, x: xp.reshape(x, (1, 2, 3)), (2, 3), None),
    ('reshape_0d', lambda xp, x: xp.reshape(x, (1, 1)), (), None),
    ('reshape_to_0d', lambda xp, x: xp.reshape(x, ()), (1,), None),
    ('reshape_empty', lambda xp, x: xp.reshape(x, (3, 0)), (0, 3), None),
    ('reshape_method_varargs', lambda xp, x: x.reshape(3, 2), (2, 3), None),
    ('transpose_default', lambda xp, x: xp.transpose(x), (2, 3), [(0, 3)]),
    ('transpose_3d_default', lambda xp, x: xp.transpose(x), (2, 3, 2), None),
    ('transpose_axes', lambda xp, x: xp.transpose(x, (1, 0, 2)), (2, 3, 2), None),
    ('transpose_axes_cycle', lambda xp, x: xp.transpose(x, (2, 0, 1)), (2, 3, 2),
     None),
    ('transpose_axes_negative', lambda xp, x: xp.transpose(x, (-1, 0, 1)),
     (2, 3, 2), None),
    ('transpose_0d', lambda xp, x: xp.transpose(x), (), None),
    ('transpose_T', lambda xp, x: x.T, (2, 3), None),
    ('transpose_method', lambda xp, x: x.transpose(1, 0), (2, 3), None),
    ('broadcast_to_row', lambda xp, x: xp.broadcast_to(x, (2, 3)), (3,), None),
    ('broadcast_to_col', lambda xp, x: xp.broadcast_to(x, (2, 3)), (2, 1), None),
    ('broadcast_to_0d', lambda xp, x: xp.broadcast_to(x, (2, 3)), (), None),
    ('broadcast_to_3d', lambda xp, x: xp.broadcast_to(x, (2, 2, 3)), (1, 3), None),
    ('broadcast_to_same', lambda xp, x: xp.broadcast_to(x, (2, 3)), (2, 3), None),
    ('broadcast_to_empty', lambda xp, x: xp.broadcast_to(x, (0, 3)), (3,), None),
    ('squeeze_all', lambda xp, x: xp.squeeze(x), (1, 3, 1), [(1, 0, 1)]),
    ('squeeze_axis0', lambda xp, x: xp.squeeze(x, 0), (1, 3, 1), None),
    ('squeeze_axis_negative', lambda xp, x: xp.squeeze(x, axis=-1), (1, 3, 1),
     None),
    ('squeeze_axes', lambda xp, x: xp.squeeze(x, axis=(0, 2)), (1, 3, 1), None),
    ('squeeze_to_0d', lambda xp, x: xp.squeeze(x), (1, 1), None),
    ('squeeze_method', lambda xp, x: x.squeeze(), (2, 1), None),
    ('expand_dims_0', lambda xp, x: xp.expand_dims(x, 0), (2, 3), [(0, 3)]),
    ('expand_dims_1', lambda xp, x: xp.expand_dims(x, 1), (2, 3), None),
    ('expand_dims_end', lambda xp, x: xp.expand_dims(x, 2), (2, 3), None),
    ('expand_dims_negative', lambda xp, x: xp.expand_dims(x, -1), (2, 3), None),
    ('expand_dims_negative_first', lambda xp, x: xp.expand_dims(x, -3), (2, 3),
     None),
    ('expand_dims_0d', lambda xp, x: xp.expand_dims(x, 0), (), None),
    # basic indexing
    ('index_int', lambda xp, x: x[1], (2, 3), None),
    ('index_negative_int', lambda xp, x: x[-1], (2, 3), None),
    ('index_ints_to_0d', lambda xp, x: x[0, 1], (2, 3), None),
    ('index_slice', lambda xp, x: x[:, 1:], (2, 3), [(0, 3)]),
    ('index_slice_step', lambda xp, x: x[::2, 1::2], (3, 4), None),
    ('index_negative_step', lambda xp, x: x[::-1], (2, 3), None),
    ('index_negative_step_2', lambda xp, x: x[:, ::-2], (2, 3), None),
    ('index_negative_step_bounds', lambda xp, x: x[1, 2:0:-1], (2, 3), None),
    ('index_none', lambda xp, x: x[None], (2, 3), None),
    ('index_none_middle', lambda xp, x: x[:, None, 1:], (2, 3), None),
    ('index_ellipsis', lambda xp, x: x[..., 1], (2, 3, 2), None),
    ('index_ellipsis_none', lambda xp, x: x[1, ..., None], (2, 3), None),
    ('index_ellipsis_only', lambda xp, x: x[...], (2, 3), None),
    ('index_0d_ellipsis', lambda xp, x: x[...], (), None),
    ('index_0d_none', lambda xp, x: x[None], (), None),
    ('index_empty_slice', lambda xp, x: x[1:1], (2, 3), None),
    # advanced integer-array indexing, with repeated indices
    ('index_array_repeated', lambda xp, x: x[numpy.array([0, 0, 1, 0])], (2, 3),
     None),
    ('index_list_repeated', lambda xp, x: x[[2, 0, 2]], (3, 2), None),
    ('index_array_negative', lambda xp, x: x[numpy.array([-1, 0, -1])], (3, 2),
     None),
    ('index_array_2d', lambda xp, x: x[numpy.array([[0, 1], [1, 1]])], (2, 3),
     None),
    ('index_slice_and_array', lambda xp, x: x[:, [0, 0, 2]], (2, 3), None),
    ('index_two_arrays', lambda xp, x: x[[0, 1, 1, 0], [2, 0, 2, 2]], (2, 3),
     None),
    ('index_array_bcast', lambda xp, x: x[numpy.array([[0], [1]]),
                                          numpy.array([1, 1, 2])], (2, 3), None),
    ('index_xgrad_int_array',
     lambda xp, x: x[(xgrad if xp is xgrad else numpy).array([1, 1, 0])], (2, 3),
     None),
]
for _name, _fn, _shape, _empty in MANIPULATION:
    CASES.append(Case(_name, _fn, [_shape], ints=True, empty=_empty))

# Not differentiable: checked for forward values and dtypes only.
for _f in ('equal', 'not_equal', 'greater', 'greater_equal', 'less',
           'less_equal'):
    CASES.append(Case(_f, (lambda f: lambda xp, a, b: getattr(xp, f)(a, b))(_f),
                      [(2, 3), (3,)], gen=untied, ints=True, grad=False,
                      empty=[(0, 3), (3,)]))
    CASES.append(Case(_f + '_scalar',
                      (lambda f: lambda xp, a: getattr(xp, f)(a, 0.0))(_f),
                      [(2, 3)], ints=True, grad=False))
CASES += [
    Case('operator_lt', lambda xp, a, b: a < b, [(2, 3), (2, 3)], gen=untied,
         ints=True, grad=False),
    Case('operator_ge_scalar', lambda xp, a: a >= 0.5, [(2, 3)], ints=True,
         grad=False),
]

GRAD_CASES = [c for c in CASES if c.grad]
EMPTY_CASES = [c for c in CASES if c.empty is not None]

assert len({c.name for c in CASES}) == len(CASES), 'duplicate case names'


# ---------------------------------------------------------------------------
# Helpers

# Per working precision: eps for check_*backward, and (atol, rtol).
EPS = {F32: 1e-3, F64: 1e-5}
TOL = {F16: (1e-2, 1e-2), F32: (2e-3, 2e-3), F64: (1e-6, 1e-5)}
FWD_TOL = {F16: (1e-3, 2e-3), F32: (1e-6, 1e-5), F64: (1e-12, 1e-12)}


def _rs(*keys):
    return numpy.random.RandomState(
        zlib.crc32('/'.join(map(str, keys)).encode()))


def _as_tuple(ys):
    return tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)


def _xgrad_func(case):
    return lambda xs: _as_tuple(case.fn(xgrad, *xs))


def _to_xgrad(data, dtype, require_grad=False):
    x = xgrad.array(numpy.array(data, dtype=dtype))
    assert x.dtype == dtype
    if require_grad:
        x.require_grad()
    return x


def _least_precise(dtypes):
    return min((numpy.dtype(d) for d in dtypes if numpy.dtype(d).kind == 'f'),
               key=lambda d: d.itemsize)


def _outputs_meta(case, xs):
    with xgrad.no_backprop_mode():
        return [(y.shape, y.dtype) for y in _xgrad_func(case)(xs)]


def _grads_or_zeros(grads, arrays):
    return [numpy.zeros(a.shape, F64) if g is None else g.to_numpy().astype(F64)
            for g, a in zip(grads, arrays)]


def _ids(cases):
    return [c.name for c in cases]


# Known engine bugs: (test, case name, dtype name or None) -> reason; those
# tests are marked strict xfail. (Empty: the bugs these tests found -- 0-d
# results stored as NumPy scalars, sum_to(x, ()) giving shape (1,), sigmoid of
# 0-d float16 arrays -- were fixed in the engine.)
XFAILS = {}


def _params(test, cases, dtypes=(None,)):
    """pytest params for ``test`` over cases x dtypes, with the known engine
    bugs marked strict xfail."""
    params = []
    for c in cases:
        for d in dtypes:
            reason = XFAILS.get((test, c.name, None if d is None else d.name))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            if d is None:
                params.append(pytest.param(c, marks=marks, id=c.name))
            else:
                params.append(pytest.param(c, d, marks=marks,
                                           id='{}-{}'.format(c.name, d.name)))
    return params


# ---------------------------------------------------------------------------
# Forward values and dtypes against NumPy

_NUMPY1 = int(numpy.__version__.split('.')[0]) < 2


def _without_value_based_casting(case, np_xs, expected):
    """NumPy 1.x promotes 0-d operands with Python scalars by value (0-d
    float16 + 2.5 is float64); NumPy 2 and xgrad keep float16. The reference
    dtype is then NumPy's on 1-element arrays, which NumPy 1.x also keeps."""
    try:
        ones = [numpy.asarray(y) for y in _as_tuple(case.fn(NP, *[a.reshape(1) for a in np_xs]))]
    except Exception:
        return expected
    return [e.astype(o.dtype) if o.size == 1 and e.dtype != o.dtype else e
            for e, o in zip(expected, ones)]


def _check_forward(case, dtype, shapes):
    rs = _rs('forward', case.name, dtype, shapes)
    data = case.inputs(rs, shapes)
    if dtype.kind == 'i':
        data = [numpy.round(a * 3) for a in data]
    np_xs = [numpy.array(a, dtype=d) for a, d in zip(data, case.in_dtypes(dtype))]
    xs = [xgrad.array(a) for a in np_xs]
    with numpy.errstate(all='ignore'):
        expected = [numpy.asarray(y) for y in _as_tuple(case.fn(NP, *np_xs))]
        if _NUMPY1 and np_xs and all(a.ndim == 0 for a in np_xs):
            expected = _without_value_based_casting(case, np_xs, expected)
    actual = _as_tuple(case.fn(xgrad, *xs))
    assert len(actual) == len(expected)
    for y, e in zip(actual, expected):
        if dtype.kind == 'i' and e.dtype.kind == 'f':
            # Integer arrays (no float array among the inputs) give a float
            # result in float32 by ChainerX's rule (a float scalar or a math
            # function, docs/dtype_promotion.md), where NumPy gives float64.
            e = e.astype(F32)
        assert isinstance(y, xgrad.ndarray)
        assert y.shape == e.shape
        assert y.dtype == e.dtype, (y.dtype, e.dtype)
        assert y.device is xs[0].device
        if e.dtype.kind == 'f':
            atol, rtol = FWD_TOL[e.dtype]
            numpy.testing.assert_allclose(y.to_numpy().astype(F64),
                                          e.astype(F64), atol=atol, rtol=rtol)
        else:
            numpy.testing.assert_array_equal(y.to_numpy(), e)
    # The inputs are not modified and, without require_grad, nothing is recorded.
    for x, a in zip(xs, np_xs):
        numpy.testing.assert_array_equal(x.to_numpy(), a)
        assert not x.is_backprop_required(xgrad.anygraph)
    for y in actual:
        assert not y.is_backprop_required(xgrad.anygraph)


def _forward_params():
    params = []
    for c in CASES:
        params += _params('forward', [c], list(c.dtypes) + ([I64] if c.ints else []))
    return params


@pytest.mark.parametrize('case, dtype', _forward_params())
def test_forward(case, dtype):
    _check_forward(case, dtype, case.shapes)


@pytest.mark.parametrize('case', EMPTY_CASES, ids=_ids(EMPTY_CASES))
@pytest.mark.parametrize('dtype', [F32, F64], ids=str)
def test_forward_empty(case, dtype):
    _check_forward(case, dtype, case.empty)


@pytest.mark.parametrize('case', GRAD_CASES, ids=_ids(GRAD_CASES))
def test_forward_records_on_graph(case):
    """With a grad-required input, float outputs are backprop-required but not
    grad-required, and the input stays a leaf."""
    data = case.inputs(_rs('record', case.name))
    xs = [_to_xgrad(a, d, require_grad=True)
          for a, d in zip(data, case.in_dtypes(F32))]
    for y in _as_tuple(case.fn(xgrad, *xs)):
        assert y.is_backprop_required()
        assert not y.is_grad_required()
        assert y._is_chained()
    for x in xs:
        assert not x._is_chained()
        assert x.get_grad() is None


# ---------------------------------------------------------------------------
# Gradients: float32 and float64 with xgrad.check_backward / check_double_backward

def _check_args(case, dtype, rs):
    data = case.inputs(rs)
    xs = [_to_xgrad(a, d, require_grad=True)
          for a, d in zip(data, case.in_dtypes(dtype))]
    meta = _outputs_meta(case, xs)
    work = _least_precise([x.dtype for x in xs] + [d for _, d in meta])
    gys = [_to_xgrad(rs.uniform(-1, 1, s), d) for s, d in meta]
    return xs, gys, work


def _eps_like(arrays, work):
    return [xgrad.full(a.shape, EPS[work], a.dtype) for a in arrays]


@pytest.mark.parametrize('case, dtype', _params('backward', GRAD_CASES, (F32, F64)))
def test_backward(case, dtype):
    xs, gys, work = _check_args(case, dtype, _rs('backward', case.name, dtype))
    atol, rtol = TOL[work]
    xgrad.check_backward(_xgrad_func(case), xs, gys, _eps_like(xs, work),
                         atol=atol, rtol=rtol)


@pytest.mark.parametrize('case, dtype',
                         _params('double_backward', GRAD_CASES, (F32, F64)))
def test_double_backward(case, dtype):
    rs = _rs('double', case.name, dtype)
    xs, gys, work = _check_args(case, dtype, rs)
    for gy in gys:
        gy.require_grad()
    ggxs = [_to_xgrad(rs.uniform(-1, 1, x.shape), x.dtype) for x in xs]
    atol, rtol = TOL[work]
    xgrad.check_double_backward(_xgrad_func(case), xs, gys, ggxs,
                                _eps_like(xs + gys, work), atol=atol, rtol=rtol)


# ---------------------------------------------------------------------------
# float16: analytic float16 gradients against float64 central differences

def _f64_outputs(case):
    def f(arrays):
        xs = [xgrad.array(a) for a in arrays]
        return [y.to_numpy().astype(F64) for y in _xgrad_func(case)(xs)]
    return f


def _f64_first_order(case, n_in):
    """(xs..., gys...) -> input gradients, evaluated in float64."""
    def f(arrays):
        xs = [xgrad.array(a).require_grad() for a in arrays[:n_in]]
        ys = _xgrad_func(case)(xs)
        gys = [xgrad.array(g.astype(y.dtype)) for g, y in zip(arrays[n_in:], ys)]
        gxs = xgrad.grad(list(ys), xs, grad_outputs=gys)
        return _grads_or_zeros(gxs, xs)
    return f


def _f16_args(case, rs):
    dtypes = case.in_dtypes(F16)
    data = [a.astype(d).astype(F64)  # exactly representable in the input dtype
            for a, d in zip(case.inputs(rs), dtypes)]
    xs = [_to_xgrad(a, d, require_grad=True) for a, d in zip(data, dtypes)]
    meta = _outputs_meta(case, xs)
    gy_data = [rs.uniform(-1, 1, s).astype(d).astype(F64) for s, d in meta]
    gys = [_to_xgrad(g, d) for g, (_, d) in zip(gy_data, meta)]
    return data, xs, gy_data, gys


@pytest.mark.parametrize('case', _params('float16_backward', GRAD_CASES))
def test_float16_backward(case):
    rs = _rs('f16', case.name)
    data, xs, gy_data, gys = _f16_args(case, rs)
    ys = list(_xgrad_func(case)(xs))
    gxs = xgrad.grad(ys, xs, grad_outputs=gys)
    for x, g in zip(xs, gxs):
        assert g is not None
        assert g.dtype == x.dtype and g.shape == x.shape
    expected = _numerical_vjp(_f64_outputs(case), data, gy_data)
    atol, rtol = TOL[F16]
    for i, (g, e) in enumerate(zip(gxs, expected)):
        _assert_close(g.to_numpy(), e, atol, rtol, 'input {}'.format(i))


@pytest.mark.parametrize('case', _params('float16_double_backward', GRAD_CASES))
def test_float16_double_backward(case):
    rs = _rs('f16-double', case.name)
    data, xs, gy_data, gys = _f16_args(case, rs)
    for gy in gys:
        gy.require_grad()
    ggx_data = [rs.uniform(-1, 1, x.shape).astype(x.dtype).astype(F64) for x in xs]
    ggxs = [_to_xgrad(g, x.dtype) for g, x in zip(ggx_data, xs)]
    ys = list(_xgrad_func(case)(xs))
    gxs = xgrad.grad(ys, xs, grad_outputs=gys, enable_double_backprop=True)
    for g, x in zip(gxs, xs):
        assert g is not None and g.dtype == x.dtype
        assert g.is_backprop_required()
    ggs = xgrad.grad(gxs, xs + gys, grad_outputs=ggxs)
    analytic = _grads_or_zeros(ggs, xs + gys)
    for g, a in zip(ggs, xs + gys):
        assert g is None or (g.dtype == a.dtype and g.shape == a.shape)
    expected = _numerical_vjp(_f64_first_order(case, len(xs)), data + gy_data,
                              ggx_data)
    atol, rtol = TOL[F16]
    for i, (g, e) in enumerate(zip(analytic, expected)):
        _assert_close(g, e, atol, rtol, 'input {}'.format(i))


# ---------------------------------------------------------------------------
# Backward through empty arrays

@pytest.mark.parametrize('case', [c for c in EMPTY_CASES if c.grad],
                         ids=_ids([c for c in EMPTY_CASES if c.grad]))
@pytest.mark.parametrize('dtype', [F32, F64], ids=str)
def test_empty_backward(case, dtype):
    data = case.inputs(_rs('empty', case.name), case.empty)
    xs = [_to_xgrad(a, d, require_grad=True)
          for a, d in zip(data, case.in_dtypes(dtype))]
    ys = list(_xgrad_func(case)(xs))
    xgrad.backward(ys, grad_outputs=[xgrad.ones(y.shape, y.dtype) for y in ys])
    for x in xs:
        g = x.get_grad()
        assert g is not None
        assert g.shape == x.shape and g.dtype == x.dtype
        expected = numpy.zeros(x.shape) if x.size == 0 else None
        if expected is not None:
            numpy.testing.assert_array_equal(g.to_numpy(), expected)


# ---------------------------------------------------------------------------
# 0-d results: an xgrad array of shape () holds a NumPy array (not a NumPy
# scalar), so to_numpy() gives an ndarray and in-place ops work on it (it has
# no graph node, so they are allowed).

def _zero_d_cases():
    cases = []
    for c in CASES:
        xs = [_to_xgrad(a, d) for a, d in zip(c.inputs(_rs('0d', c.name)),
                                              c.in_dtypes(F32))]
        ys = _as_tuple(c.fn(xgrad, *xs))
        if any(y.shape == () and y.dtype.kind == 'f' for y in ys):
            cases.append(c)
    return cases


ZERO_D_CASES = _zero_d_cases()


@pytest.mark.parametrize('case', _params('zero_d_result', ZERO_D_CASES))
def test_zero_d_result_is_an_array(case):
    xs = [_to_xgrad(a, d) for a, d in zip(case.inputs(_rs('0d', case.name)),
                                          case.in_dtypes(F32))]
    for y in _as_tuple(case.fn(xgrad, *xs)):
        if y.shape != ():
            continue
        assert type(y.to_numpy()) is numpy.ndarray, type(y.to_numpy())
        before = y.item()
        y += 1
        assert y.shape == ()
        assert y.item() == pytest.approx(before + 1)
        y[...] = 5
        assert y.item() == 5


# ---------------------------------------------------------------------------
# A few closed forms, to pin the conventions check_backward cannot see

def test_index_repeated_accumulates():
    x = xgrad.array([1.0, 2.0, 3.0]).require_grad()
    y = x[numpy.array([0, 2, 0, 0])]
    y.backward(grad_outputs=[xgrad.array([1.0, 10.0, 100.0, 1000.0])])
    assert x.grad.tolist() == [1101.0, 0.0, 10.0]


def test_maximum_minimum_tie_goes_to_first_operand():
    a = xgrad.array([1.0, 2.0]).require_grad()
    b = xgrad.array([1.0, 3.0]).require_grad()
    xgrad.maximum(a, b).backward()
    assert a.grad.tolist() == [1.0, 0.0]
    assert b.grad.tolist() == [0.0, 1.0]
    a.cleargrad()
    b.cleargrad()
    xgrad.minimum(a, b).backward()
    assert a.grad.tolist() == [1.0, 1.0]
    assert b.grad.tolist() == [0.0, 0.0]


def test_astype_gradient_has_input_dtype():
    x = xgrad.array([1.0, 2.0], dtype=F32).require_grad()
    y = x.astype(F64)
    y.backward(grad_outputs=[xgrad.array([0.5, 0.25], dtype=F64)])
    assert x.grad.dtype == F32
    assert x.grad.tolist() == [0.5, 0.25]


def test_broadcast_binary_gradient_is_reduced():
    a = xgrad.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).require_grad()
    b = xgrad.array([1.0, 1.0, 1.0]).require_grad()
    (a * b).backward()
    assert b.grad.shape == (3,)
    assert b.grad.tolist() == [5.0, 7.0, 9.0]


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('exponent', [2, 3, 4, -1, -2, 0.5, 3.0, -2.0])
def test_powers_by_products_are_within_two_ulps_of_pow(dtype, exponent):
    """x ** n for the exponents computed by products, a reciprocal or a
    square root: within 2 ulps of NumPy's power, and its infinities, zeros
    and NaNs (negative bases, zeros, infinities, NaN, the extremes)."""
    info = numpy.finfo(dtype)
    rng = numpy.random.RandomState(0)
    x = numpy.concatenate([rng.standard_normal(1000) * 10, rng.uniform(-2, 2, 1000),
                           [0.0, -0.0, 1.0, -1.0, numpy.inf, -numpy.inf, numpy.nan,
                            float(info.tiny), float(info.max), -float(info.max)]]).astype(dtype)
    with numpy.errstate(all='ignore'):
        got = (xgrad.array(x) ** exponent).to_numpy()
        # (x ** 0.5 is sqrt(x), as NumPy 2's power and torch: sqrt(-inf) is
        # NaN where C's pow(-inf, 0.5), NumPy 1's, is inf)
        want = numpy.sqrt(x) if exponent == 0.5 else numpy.power(x, dtype(exponent))
    assert got.dtype == dtype
    finite = numpy.isfinite(want) & (numpy.abs(want) >= info.tiny)
    ulps = numpy.abs(got[finite].astype(float) - want[finite]) / numpy.spacing(
        numpy.abs(want[finite]))
    assert ulps.max() <= 2, (exponent, ulps.max())
    # (beyond the finite normal values: the same infinities, zeros and NaNs)
    numpy.testing.assert_array_equal(got[~finite], want[~finite])
