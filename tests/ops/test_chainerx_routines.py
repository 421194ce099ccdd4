"""Routines and signatures ChainerX has (issue 16): creation helpers,
``*_like(a, device)``, ``get_device(None)``, ``xgrad.dtype``, N-d ``dot``,
positional activation parameters checked at the call. Gradients of the
differentiable ones are checked by the registry tests (test_registry.py)."""

import math

import numpy
import pytest

import xgrad
import xgrad.testing

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# creation routines and readers (integers, copies), selections (meshgrid,
# diagflat, crelu's max with 0 and negation, nanargmax/nanargmin indices,
# repeat) and gradients of small integers. The erf gradient, through libm's
# exp, is compared with a tolerance.


def _np(a):
    return xgrad.to_numpy(a)


def test_dtype_is_numpys_dtype_class():
    assert xgrad.dtype is numpy.dtype
    assert isinstance(xgrad.zeros((1,)).dtype, xgrad.dtype)


def test_get_device_none_is_the_default_device():
    assert xgrad.get_device(None) is xgrad.get_default_device()
    with xgrad.using_device('native:1'):
        assert xgrad.get_device(None) is xgrad.get_device('native:1')


def test_like_functions_take_the_device_second():
    a = xgrad.arange(6).reshape(2, 3)
    for y in (xgrad.zeros_like(a, 'native:1'), xgrad.ones_like(a, 'native:1'),
              xgrad.empty_like(a, 'native:1'), xgrad.full_like(a, 7, 'native:1')):
        assert y.device is xgrad.get_device('native:1')
        assert y.shape == (2, 3) and y.dtype == a.dtype
    numpy.testing.assert_array_equal(_np(xgrad.full_like(a, 7, None)), numpy.full((2, 3), 7))
    assert xgrad.zeros_like(a, dtype='float16').dtype == numpy.float16
    y = xgrad.full((2,), 3, 'int8', 'native:1')
    assert y.dtype == numpy.int8 and y.device.name == 'native:1'


def test_ascontiguousarray():
    a = xgrad.arange(6.0).reshape(2, 3)
    assert xgrad.ascontiguousarray(a) is a
    t = xgrad.ascontiguousarray(a.T)
    assert t.is_contiguous
    numpy.testing.assert_array_equal(_np(t), _np(a).T)
    assert xgrad.ascontiguousarray(a, dtype='int32').dtype == numpy.int32
    assert xgrad.ascontiguousarray(xgrad.array(2.0)).shape == (1,)


def test_asanyarray_is_asarray():
    a = xgrad.arange(3)
    assert xgrad.asanyarray(a) is a
    assert xgrad.asanyarray([1, 2], 'float32', 'native:1').device.name == 'native:1'


def test_frombuffer_and_tri():
    raw = numpy.arange(5, dtype=numpy.int16)
    numpy.testing.assert_array_equal(_np(xgrad.frombuffer(raw, raw.dtype, 3, 2)),
                                     numpy.frombuffer(raw, raw.dtype, 3, 2))
    assert xgrad.frombuffer(numpy.zeros(2, numpy.float32)).dtype == numpy.float32
    # the memory is shared, as in ChainerX
    raw = numpy.arange(4, dtype=numpy.int32)
    shared = xgrad.frombuffer(raw, raw.dtype)
    raw += 10
    numpy.testing.assert_array_equal(_np(shared), [10, 11, 12, 13])
    buffer = xgrad.testing._DeviceBuffer([1, 2, 3, 4, 5, 6], (2, 3), 'int32')
    numpy.testing.assert_array_equal(_np(xgrad.frombuffer(buffer, 'int32')), [1, 2, 3, 4, 5, 6])
    numpy.testing.assert_array_equal(_np(xgrad.tri(3, 4, 1)),
                                     numpy.tri(3, 4, 1, dtype=numpy.float32))
    assert xgrad.tri(2).dtype == numpy.float32


def test_copyto_writes_into_dst():
    dst = xgrad.zeros((2, 3))
    src = xgrad.arange(3.0)
    where = xgrad.array([True, False, True])
    xgrad.copyto(dst, src, 'no', where)
    numpy.testing.assert_array_equal(_np(dst), [[0, 0, 2], [0, 0, 2]])
    with pytest.raises(xgrad.DtypeError):
        xgrad.copyto(dst, xgrad.arange(3), casting='no')
    with pytest.raises(ValueError):
        xgrad.copyto(dst, src, casting='sometimes')
    with pytest.raises(xgrad.DimensionError):
        xgrad.copyto(dst, xgrad.zeros((4,)))


def test_nanargmax_nanargmin_skip_nans():
    a = xgrad.array([[numpy.nan, 3.0, 1.0], [2.0, numpy.nan, 5.0]])
    numpy.testing.assert_array_equal(_np(xgrad.nanargmax(a, 1)), [1, 2])
    numpy.testing.assert_array_equal(_np(xgrad.nanargmin(a, 1)), [2, 0])
    assert int(xgrad.nanargmax(a)) == 5


def test_rollaxis_and_swapaxes_method():
    raw = numpy.zeros((2, 3, 4))
    a = xgrad.array(raw)
    for axis, start in ((2, 0), (0, 2), (1, 3), (-1, -2), (0, 3)):
        assert xgrad.rollaxis(a, axis, start).shape == numpy.rollaxis(raw, axis, start).shape
    assert a.swapaxes(0, 2).shape == (4, 3, 2)
    with pytest.raises(xgrad.DimensionError):
        xgrad.rollaxis(a, 3)


@pytest.mark.parametrize('indexing', ['xy', 'ij'])
def test_meshgrid_matches_numpy(indexing):
    xs = [numpy.arange(2.0), numpy.arange(3.0) + 10, numpy.arange(4.0) + 20]
    got = xgrad.meshgrid(*[xgrad.array(x) for x in xs], indexing=indexing)
    for g, e in zip(got, numpy.meshgrid(*xs, indexing=indexing)):
        numpy.testing.assert_array_equal(_np(g), e)


def test_diagflat_matches_numpy():
    v = numpy.arange(4.0).reshape(2, 2)
    numpy.testing.assert_array_equal(_np(xgrad.diagflat(xgrad.array(v), -1)),
                                     numpy.diagflat(v, -1))


def test_erf_values_and_gradient_closed_form():
    x = xgrad.array([-1.0, 0.0, 0.5], 'float64').require_grad()
    y = xgrad.erf(x)
    numpy.testing.assert_allclose(_np(y), [math.erf(v) for v in (-1.0, 0.0, 0.5)])
    xgrad.sum(y).backward()
    numpy.testing.assert_allclose(
        _np(x.grad), 2 / math.sqrt(math.pi) * numpy.exp(-numpy.array([1.0, 0.0, 0.25])))


def test_crelu_concatenates_both_halves():
    x = numpy.array([[-1.0, 2.0]], numpy.float32)
    numpy.testing.assert_array_equal(_np(xgrad.crelu(xgrad.array(x))), [[0, 2, 1, 0]])
    numpy.testing.assert_array_equal(_np(xgrad.crelu(xgrad.array(x), 0)),
                                     [[0, 2], [1, 0]])


@pytest.mark.parametrize('shapes', [((2, 2, 3), (3,)), ((2, 3), (4, 3, 2)),
                                    ((2, 1, 3), (2, 3, 2)), ((3,), (2, 3, 4))])
def test_dot_of_nd_operands_is_numpys_dot(shapes):
    rs = numpy.random.RandomState(0)
    a, b = rs.uniform(-1, 1, shapes[0]), rs.uniform(-1, 1, shapes[1])
    numpy.testing.assert_allclose(_np(xgrad.dot(xgrad.array(a, 'float64'),
                                                xgrad.array(b, 'float64'))),
                                  numpy.dot(a, b))


def test_dot_of_misaligned_nd_operands_is_a_dimension_error():
    with pytest.raises(xgrad.DimensionError):
        xgrad.dot(xgrad.zeros((2, 3, 4)), xgrad.zeros((3, 2)))


@pytest.mark.parametrize('f,value,expected', [
    (xgrad.clipped_relu, 1.0, [0.0, 0.5, 1.0]),
    (xgrad.leaky_relu, 0.5, [-0.5, 0.5, 3.0]),
    (xgrad.elu, 2.0, [2 * math.expm1(-1), 0.5, 3.0]),
    (xgrad.softplus, 2.0, [math.log1p(math.exp(-2)) / 2, math.log1p(math.e) / 2,
                           math.log1p(math.exp(6)) / 2])])
def test_activation_parameter_is_positional(f, value, expected):
    x = xgrad.array([-1.0, 0.5, 3.0], 'float64')
    numpy.testing.assert_allclose(_np(f(x, value)), expected, rtol=1e-12)


@pytest.mark.parametrize('f,param', [(xgrad.clipped_relu, 'z'), (xgrad.leaky_relu, 'slope'),
                                     (xgrad.elu, 'alpha'), (xgrad.softplus, 'beta')])
@pytest.mark.parametrize('bad', [None, 'a', [1.0], xgrad.array(1.0)])
def test_activation_parameter_must_be_a_number(f, param, bad):
    with pytest.raises(TypeError, match=param):
        f(xgrad.array([1.0]), bad)
    with pytest.raises(TypeError, match=param):
        f(xgrad.array([1.0]), **{param: bad})


def test_numpy_readers(tmp_path):
    path = tmp_path / 'data.bin'
    numpy.arange(4, dtype=numpy.int16).tofile(str(path))
    a = xgrad.fromfile(str(path), dtype='int16', count=3, device='native:1')
    numpy.testing.assert_array_equal(_np(a), [0, 1, 2])
    assert a.device.name == 'native:1'
    numpy.testing.assert_array_equal(_np(xgrad.fromstring('1 2 3', 'int32', sep=' ')),
                                     [1, 2, 3])
    numpy.testing.assert_array_equal(_np(xgrad.fromiter((i * i for i in range(4)), 'int64')),
                                     [0, 1, 4, 9])
    y = xgrad.fromfunction(lambda i, j, add: i * j + add, (2, 2), dtype='int8', add=1)
    assert y.dtype == numpy.int8
    numpy.testing.assert_array_equal(_np(y), [[1, 1], [1, 2]])
    text = tmp_path / 'data.txt'
    text.write_text('# head\n1 2\n3 4\n')
    numpy.testing.assert_array_equal(_np(xgrad.loadtxt(str(text), dtype='float32')),
                                     [[1, 2], [3, 4]])


def test_a_0d_integer_array_is_an_axis():
    a = xgrad.arange(8).reshape(2, 4)
    y = xgrad.repeat(a, numpy.array([1, 2]), numpy.array(0))
    numpy.testing.assert_array_equal(_np(y), numpy.repeat(_np(a), [1, 2], 0))
    with pytest.raises(TypeError):
        xgrad.repeat(a, 2, numpy.array([0]))


def test_transpose_of_one_int_axis():
    a = xgrad.arange(3)
    assert xgrad.transpose(a, 0).shape == (3,)
    with pytest.raises(xgrad.DimensionError):
        xgrad.transpose(xgrad.zeros((2, 3)), 0)
