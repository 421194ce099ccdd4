"""Bitwise and shift ops and operators, and the in-place operators that
write into their array (issue 16)."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# integer and boolean results only.


def _int8(values):
    return xgrad.array(numpy.array(values, numpy.int8))


@pytest.mark.parametrize('name,op', [('bitwise_and', numpy.bitwise_and),
                                     ('bitwise_or', numpy.bitwise_or),
                                     ('bitwise_xor', numpy.bitwise_xor)])
def test_bitwise_matches_numpy_and_promotes_bool(name, op):
    a = numpy.array([[1, -2, 7]], numpy.int8)
    b = numpy.array([True, False, True])
    y = getattr(xgrad, name)(xgrad.array(a), xgrad.array(b))
    assert y.dtype == numpy.int8
    numpy.testing.assert_array_equal(xgrad.to_numpy(y), op(a, b))


def test_operators_and_reflected_forms():
    a = _int8([1, 2, 6])
    numpy.testing.assert_array_equal(xgrad.to_numpy(a & 3), [1, 2, 2])
    numpy.testing.assert_array_equal(xgrad.to_numpy(3 | a), [3, 3, 7])
    numpy.testing.assert_array_equal(xgrad.to_numpy(a ^ a), [0, 0, 0])
    numpy.testing.assert_array_equal(xgrad.to_numpy(a << 1), [2, 4, 12])
    numpy.testing.assert_array_equal(xgrad.to_numpy(a >> 1), [0, 1, 3])
    assert (a << 1).dtype == numpy.int8
    # A scalar on the left of a shift is int64, as in ChainerX.
    y = 1 << a
    assert y.dtype == numpy.int64
    numpy.testing.assert_array_equal(xgrad.to_numpy(y), [2, 4, 64])


def test_shift_takes_the_left_operands_dtype():
    a = _int8([1, 2, 3])
    b = xgrad.array(numpy.array([1, 1, 1], numpy.int64))
    assert xgrad.left_shift(a, b).dtype == numpy.int8
    assert xgrad.right_shift(b, a).dtype == numpy.int64


@pytest.mark.parametrize('f', [xgrad.bitwise_and, xgrad.bitwise_or, xgrad.bitwise_xor,
                               xgrad.left_shift, xgrad.right_shift])
def test_float_operands_are_dtype_errors(f):
    with pytest.raises(xgrad.DtypeError):
        f(xgrad.array([1.0, 2.0]), xgrad.array([1.0, 2.0]))
    with pytest.raises(xgrad.DtypeError):
        f(_int8([1, 2]), 1.5)


def test_shift_of_bool_is_a_dtype_error():
    with pytest.raises(xgrad.DtypeError):
        xgrad.array([True]) << _int8([1])
    with pytest.raises(xgrad.DtypeError):
        _int8([1]) >> xgrad.array([True])


@pytest.mark.parametrize('statement,expected', [
    ('a %= 4', [1, 2, 2]), ('a //= 2', [2, 3, 1]), ('a **= 2', [25, 36, 4]),
    ('a &= 3', [1, 2, 2]), ('a |= 1', [5, 7, 3]), ('a ^= 1', [4, 7, 3]),
    ('a <<= 1', [10, 12, 4]), ('a >>= 1', [2, 3, 1]),
    ('a += 1', [6, 7, 3]), ('a -= 1', [4, 5, 1]), ('a *= 2', [10, 12, 4])])
def test_inplace_operators_write_into_the_array(statement, expected):
    a = _int8([5, 6, 2])
    before = a
    namespace = {'a': a}
    exec(statement, namespace)
    assert namespace['a'] is before
    numpy.testing.assert_array_equal(xgrad.to_numpy(before), expected)


def test_inplace_bitwise_cannot_widen_bool():
    a = xgrad.array([True, False])
    with pytest.raises(xgrad.DtypeError):
        a &= _int8([1, 1])
    with pytest.raises(xgrad.DtypeError):
        f = _int8([1, 2])
        f <<= xgrad.array([True, True])


def test_inplace_on_float_bitwise_is_a_dtype_error():
    a = xgrad.array([1.0, 2.0])
    with pytest.raises(xgrad.DtypeError):
        a |= 1


def test_data_ptr_and_data_size():
    raw = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
    a = xgrad.from_numpy(raw)
    assert a.data_ptr == raw.ctypes.data and a.offset == 0
    assert a.data_size == raw.nbytes
    # a view: the memory's start plus its offset, as in ChainerX
    assert a[1].data_ptr == raw.ctypes.data and a[1].offset == 12
    assert xgrad.arange(6)[2:4].offset == 8  # int32
    assert a[:, 0].data_size == 3 * 4 + 4
