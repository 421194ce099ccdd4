# cython: language_level=3
"""ChainerX's type promotion, decided in one place for every op.

The rules (ChainerX 7's ``PromoteTypes`` and ``ResultType``; see
docs/dtype_promotion.md, which is generated from this module):

* Kinds are ordered bool < int (signed and uint8) < float.
* Two array dtypes: bool gives way to anything; within one kind the wider
  dtype wins; a float dtype wins over any int dtype whatever their sizes
  (float16 with int64 is float16); int8 with uint8 is int16, a wider signed
  int with uint8 is the signed int.
* Python (and NumPy) scalars only count when no array has their category
  (float, or bool/int): a float scalar with bool/int arrays gives the default
  float dtype, float32; otherwise the arrays decide (uint8 + 2.5 is float32,
  int8 + 1000 is int8, float16 + 2.5 is float16, bool * 2 is bool). Without
  arrays a scalar has its kind's default dtype (bool, int32, float32).
* Math functions (exp, log, sqrt, tanh, sigmoid, relu, true division...)
  keep a float dtype and give bool and int inputs float32.

Only ChainerX's nine dtypes have these rules; other NumPy dtypes (uint16,
complex...) fall back to NumPy's promotion. Op modules use the C functions
in _dtypes.pxd (a same-dtype pair is one pointer comparison); Python code
uses ``result_type`` and ``float_result_type``.
"""

import numbers

import numpy

cimport numpy as cnp

cnp.import_array()

# ChainerX's dtypes in ChainerX's order; a code is an index into DTYPES.
DTYPES = tuple(numpy.dtype(n) for n in (
    'bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'float16', 'float32', 'float64'))
DEFAULT_INT = numpy.dtype('int32')
DEFAULT_FLOAT = numpy.dtype('float32')

cdef enum:
    N_DTYPES = 9
    BOOL = 0
    INT16 = 2
    INT32 = 3
    FLOAT32 = 7
    # NumPy type numbers below this are looked up in CODE_OF_NUM.
    N_TYPE_NUMS = 64

cdef enum Kind:
    K_BOOL, K_INT, K_UINT, K_FLOAT

cdef Kind KIND[N_DTYPES]
cdef int SIZE[N_DTYPES]
cdef long long LOW[N_DTYPES]
cdef long long HIGH[N_DTYPES]
cdef tuple _DTYPES = DTYPES
# NumPy type number -> code (-1: not one of ChainerX's dtypes). Several
# numbers can name one dtype (long and longlong are both int64 on Linux).
cdef int CODE_OF_NUM[N_TYPE_NUMS]


cdef void _init_tables():
    cdef int i, c
    for i in range(N_TYPE_NUMS):
        CODE_OF_NUM[i] = -1
    for c, d in enumerate(_DTYPES):
        KIND[c] = {'b': K_BOOL, 'i': K_INT, 'u': K_UINT, 'f': K_FLOAT}[d.kind]
        SIZE[c] = d.itemsize
        if d.kind in 'iu':
            LOW[c] = numpy.iinfo(d).min
            HIGH[c] = numpy.iinfo(d).max
    for char in numpy.typecodes['All']:
        d = numpy.dtype(char)
        for c, known in enumerate(_DTYPES):
            if d == known and d.num < N_TYPE_NUMS:
                CODE_OF_NUM[d.num] = c


_init_tables()


cdef inline int _code(object dtype):
    """The code of a NumPy dtype object, -1 if ChainerX has no such dtype."""
    cdef int num = (<cnp.dtype>dtype).type_num
    return CODE_OF_NUM[num] if 0 <= num < N_TYPE_NUMS else -1


cdef int _promote_codes(int a, int b):
    """ChainerX's PromoteTypes on two codes."""
    cdef int t
    if KIND[a] == K_BOOL:
        return b
    if KIND[b] == K_BOOL:
        return a
    if KIND[a] == KIND[b]:
        return a if SIZE[a] >= SIZE[b] else b
    if KIND[a] == K_FLOAT:
        return a
    if KIND[b] == K_FLOAT:
        return b
    if KIND[a] == K_UINT:  # one signed int and uint8 are left
        t = a
        a = b
        b = t
    return a if SIZE[a] > SIZE[b] else INT16


cdef inline int _category(int code):
    """What decides whether scalars count: 2 for floats, 1 for bool/int."""
    return 2 if KIND[code] == K_FLOAT else 1


cdef type _NPA = numpy.ndarray


cdef bint is_scalar(object v):
    """A Python or NumPy bool, int or float: promoted as a scalar, not as
    an array (NumPy 0-d arrays and xgrad arrays are arrays)."""
    cdef type t = type(v)
    if t is float or t is int or t is bool:
        return True
    if t is _NPA:
        return False
    # (an array of any kind has a dtype: asked before the abstract-class check)
    return isinstance(v, (numpy.bool_, numpy.integer, numpy.floating)) or (
        not hasattr(v, 'dtype') and isinstance(v, numbers.Real)
        and not isinstance(v, numpy.ndarray))


cdef int _scalar_code(object v):
    """The default dtype of a scalar's kind: bool, int32 or float32."""
    if isinstance(v, (bool, numpy.bool_)):
        return BOOL
    if isinstance(v, (numbers.Integral, numpy.integer)):
        return INT32
    return FLOAT32


cdef object promote_dtypes(object d1, object d2):
    """ChainerX's promotion of two array dtypes (NumPy dtype objects)."""
    if d1 is d2:
        return d1
    cdef int a = _code(d1), b = _code(d2)
    if a < 0 or b < 0:
        return numpy.promote_types(d1, d2)
    return _DTYPES[_promote_codes(a, b)]


cdef object array_scalar_dtype(object array_dtype, object scalar):
    """The result dtype of an array of ``array_dtype`` with a scalar."""
    cdef int a = _code(array_dtype)
    if a < 0:
        return numpy.result_type(array_dtype, scalar)
    if KIND[a] != K_FLOAT and _category(_scalar_code(scalar)) == 2:
        return DEFAULT_FLOAT
    return array_dtype


cdef object math_dtype(object dtype):
    """ChainerX's GetMathResultDtype: floats stay, bool and ints give float32."""
    cdef int a = _code(dtype)
    if a >= 0:
        return dtype if KIND[a] == K_FLOAT else DEFAULT_FLOAT
    return dtype if dtype.kind == 'f' else DEFAULT_FLOAT


cdef object scalar_for(object scalar, object dtype):
    """``scalar`` as the value to hand NumPy so that an op on an array of
    ``dtype`` computes in ``dtype`` on NumPy 1.x (value-based casting) and 2.x
    (weak scalars) alike: a Python float for float dtypes, a bool for bool,
    a wrapped 0-d array for ints out of the dtype's range (ChainerX casts
    the scalar to the array's dtype)."""
    cdef int c = _code(dtype)
    cdef type t = type(scalar)
    if c < 0:
        return scalar
    if KIND[c] == K_FLOAT:
        return scalar if t is float else float(scalar)
    if KIND[c] == K_BOOL:
        return numpy.bool_(scalar)
    if t is not int:
        scalar = int(scalar)
    if LOW[c] <= scalar <= HIGH[c]:
        return scalar
    return numpy.asarray(scalar).astype(dtype)


_BOOL_REFUSED = frozenset(['add', 'subtract', 'true_divide', 'divide', 'floor_divide',
                           'remainder', 'power'])
_BITWISE = frozenset(['bitwise_and', 'bitwise_or', 'bitwise_xor'])


cdef object check_inplace(str op, object out_dtype, object other):
    """ChainerX's in-place rules (``a op= other``) for the ufunc named
    ``op``; returns ``other`` ready for ``op(a, other, out=a)`` (a scalar cast
    like ``scalar_for``). DtypeError: a float operand into a non-float array,
    a bool operand in arithmetic (multiply takes bools), a non-bool operand
    into a bool array for multiply and bitwise ops, true division into a
    non-float array."""
    from xgrad._errors import DtypeError
    cdef int out = _code(out_dtype)
    if out < 0:
        return other
    scalar = is_scalar(other)
    cdef int other_code = _scalar_code(other) if scalar else _code(_dtype_of(other))
    if other_code < 0:
        return other
    cdef Kind out_kind = KIND[out], in_kind = KIND[other_code]
    reason = None
    if op in _BITWISE:
        if out_kind == K_BOOL and in_kind != K_BOOL:
            reason = 'a bool array cannot be updated with integers'
    elif op in ('true_divide', 'divide') and out_kind != K_FLOAT:
        reason = 'integer in-place division is not allowed'
    elif op in _BOOL_REFUSED and (out_kind == K_BOOL or in_kind == K_BOOL):
        reason = 'bool operands are not allowed in arithmetic'
    elif out_kind != K_FLOAT and in_kind == K_FLOAT:
        reason = 'float values cannot be assigned into a non-float array'
    elif op == 'multiply' and out_kind == K_BOOL and in_kind != K_BOOL:
        reason = 'numbers cannot be assigned into a bool array'
    if reason is not None:
        raise DtypeError('{}: in-place operation on dtypes {} and {}: {} (ChainerX)'.format(
            op, out_dtype, numpy.asarray(other).dtype if scalar else _dtype_of(other),
            reason))
    if scalar:
        return scalar_for(other, out_dtype)
    # ChainerX casts the operand to the array's dtype first (uint8 %= int16
    # computes in uint8).
    d = _dtype_of(other)
    return other if d is out_dtype or not hasattr(other, 'astype') else other.astype(out_dtype)


cdef bint inplace_casts(object out_dtype):
    """Whether ``a op= b`` casts the result into ``a``'s dtype whatever it
    is (ChainerX does: uint8 -= int8 wraps), i.e. ``casting='unsafe'`` once
    check_inplace has passed; False for dtypes outside ChainerX's."""
    return _code(out_dtype) >= 0


# ---------------------------------------------------------------------------
# The Python API

cdef object _dtype_of(object a):
    """The dtype of an array-like operand or a dtype specifier."""
    d = getattr(a, 'dtype', None)
    if d is not None and not isinstance(a, type):
        return d
    try:
        return numpy.dtype(a)
    except TypeError:
        return numpy.asarray(a).dtype


def result_type(*args):
    """The dtype ChainerX gives an op on ``args``: arrays (xgrad or NumPy),
    dtypes, and Python/NumPy scalars (bool, int, float), promoted as the
    module docstring says. ``result_type(uint8_array, 2.5)`` is float32,
    ``result_type(float16, int64)`` is float16, ``result_type(2)`` is int32.
    TypeError without arguments."""
    if not args:
        raise TypeError('result_type: at least one argument is required')
    array_dtype = None
    scalar_dtype = None
    for a in args:
        if is_scalar(a):
            d = _DTYPES[_scalar_code(a)]
            scalar_dtype = d if scalar_dtype is None else promote_dtypes(scalar_dtype, d)
        else:
            d = _dtype_of(a)
            array_dtype = d if array_dtype is None else promote_dtypes(array_dtype, d)
    if array_dtype is None:
        return scalar_dtype
    if scalar_dtype is None:
        return array_dtype
    if _code(array_dtype) < 0:
        return numpy.result_type(array_dtype, *[a for a in args if is_scalar(a)])
    if _category(_code(scalar_dtype)) > _category(_code(array_dtype)):
        return scalar_dtype
    return array_dtype


def float_result_type(*args):
    """The dtype of a math function (exp, sqrt, true division...) of
    ``args``: ``result_type(*args)`` if it is a float dtype, else float32."""
    return math_dtype(result_type(*args))


def promote_types(d1, d2):
    """ChainerX's promotion of two dtypes (both taken as array dtypes)."""
    return promote_dtypes(numpy.dtype(d1), numpy.dtype(d2))


# ---------------------------------------------------------------------------
# docs/dtype_promotion.md (tests/test_dtypes.py checks it is up to date)

RULES = {
    'result_type': 'the promoted dtype of the operands (`result_type`)',
    'float': 'the promoted dtype, float32 for bool/int (`float_result_type`)',
    'bool': 'bool',
    'int64_sum': 'int64 for bool and int inputs (ChainerX sums into int64), else the input dtype',
}




def scalar_of(scalar, dtype):
    """``scalar`` ready to meet an array of ``dtype`` in a NumPy call so
    that the result keeps ``dtype`` on NumPy 1.x and 2.x (see scalar_for)."""
    return scalar_for(scalar, numpy.dtype(dtype))


def dtype_arg(dtype, op=None):
    """A dtype argument as a NumPy dtype: what ``numpy.dtype`` takes, but not
    an array (``numpy.dtype`` reads an array's ``dtype`` attribute, so
    ``x.astype(y)`` would have cast to y's dtype where NumPy refuses).
    DtypeError naming ``op`` otherwise."""
    if isinstance(dtype, (numpy.dtype, type, str)) or not hasattr(dtype, 'shape'):
        try:
            return numpy.dtype(dtype)
        except TypeError:
            pass
    from xgrad._errors import DtypeError, describe
    raise DtypeError('{}{} is not a dtype'.format('' if op is None else op + ': ',
                                                  describe(dtype)))
