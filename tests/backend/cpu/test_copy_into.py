"""Copies between layouts on the pool (native_kernels.copy_into) and the ops
that take them (reshape of a non-contiguous array, copy, concatenate):
NumPy's copy byte for byte in any layout, split over 1, 2 or 3 threads,
and NumPy's own copy where copy_into declines."""

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels as K


@pytest.fixture(params=[1, 2, 3], ids=['1thread', '2threads', '3threads'])
def threads(request):
    before = K.max_threads()
    K.set_thread_limit(request.param)
    yield request.param
    K.set_thread_limit(before)


def _layouts(dtype):
    rng = numpy.random.RandomState(0)
    x = (rng.standard_normal((16, 24, 24, 48)) * 100).astype(dtype)
    return {
        'transposed': x.transpose(0, 2, 1, 3),
        'channels_last': x.transpose(0, 2, 3, 1),
        'sliced': x[:, 3:19, :, ::2],
        'reversed': x[::-1, :, ::-1],
        'broadcast': numpy.broadcast_to(x[:1, :, :1], (16, 24, 24, 48)),
        'byte_swapped': x.astype(numpy.dtype(dtype).newbyteorder()).transpose(1, 0, 2, 3),
        'contiguous_3d': x.reshape(16 * 24, 24, 48)[:, :, 1:],
    }


@pytest.mark.parametrize('dtype', ['float32', 'float64', 'float16', 'int8', 'int64', 'bool'])
@pytest.mark.parametrize('layout', list(_layouts('float32')))
def test_copy_into_is_numpys_copy_in_any_layout(layout, dtype, threads):
    src = _layouts(dtype)[layout]
    dst = numpy.empty(src.shape, src.dtype)
    took = K.copy_into(dst, src)
    # (every layout here is 2-D or more and large enough for two threads,
    # where the pool has two: a 1-CPU machine runs NumPy's copy)
    assert took == (K.max_threads() > 1)
    if took:
        assert dst.tobytes() == numpy.ascontiguousarray(src).tobytes()
    # into a strided destination too (a slice of a larger array, as concatenate's)
    big = numpy.zeros((src.shape[0], src.shape[1] + 5) + src.shape[2:], src.dtype)
    part = big[:, 2:2 + src.shape[1]]
    if K.copy_into(part, src):
        numpy.testing.assert_array_equal(part, src)
        assert not big[:, :2].any() and not big[:, 2 + src.shape[1]:].any()


def test_copy_into_declines_what_it_cannot_copy(threads):
    x = numpy.arange(16 * 24 * 24 * 48, dtype=numpy.float32).reshape(16, 24, 24, 48)
    assert not K.copy_into(x[:, :, :, ::-1], x)  # overlapping
    assert not K.copy_into(numpy.empty(x.shape, '>f4'), x)  # another byte order
    assert not K.copy_into(numpy.empty(x.shape, numpy.float64), x)  # another dtype
    assert not K.copy_into(numpy.empty((16, 24, 48, 24), numpy.float32), x)  # shape
    assert not K.copy_into(numpy.empty(x.size, numpy.float32), x.reshape(-1))  # one axis
    small = x[:2, :2]
    assert not K.copy_into(numpy.empty(small.shape, small.dtype), small)  # small
    read_only = numpy.empty(x.shape, x.dtype)
    read_only.flags.writeable = False
    assert not K.copy_into(read_only, x)


@pytest.mark.parametrize('dtype', ['float32', 'int32', 'float16'])
def test_ops_that_copy_give_numpys_arrays(dtype, threads):
    rng = numpy.random.RandomState(1)
    a = (rng.standard_normal((4, 128, 12, 64)) * 10).astype(dtype)
    heads = xgrad.reshape(xgrad.transpose(xgrad.array(a), (0, 2, 1, 3)), (48, 128, 64))
    numpy.testing.assert_array_equal(heads.to_numpy(),
                                     a.transpose(0, 2, 1, 3).reshape(48, 128, 64))
    # a reshape that NumPy makes a view of stays a view of the input
    t = xgrad.transpose(xgrad.asarray(a), (1, 0, 2, 3))  # (a wrapped, not copied)
    v = xgrad.reshape(t, (128, 4, 12, 8, 8))
    assert numpy.shares_memory(v.to_numpy(), a)
    numpy.testing.assert_array_equal(v.to_numpy(), a.transpose(1, 0, 2, 3).reshape(
        128, 4, 12, 8, 8))
    c = xgrad.copy(xgrad.array(a)[:, ::2, :, ::-1])
    numpy.testing.assert_array_equal(c.to_numpy(), a[:, ::2, :, ::-1])
    assert c.to_numpy().flags.c_contiguous
    b = (rng.standard_normal((4, 64, 12, 64)) * 10).astype(dtype)
    for axis in (0, 1, -1, 3):
        pieces = [a, b] if axis in (1,) else [a, a]
        got = xgrad.concatenate([xgrad.array(p) for p in pieces], axis=axis)
        numpy.testing.assert_array_equal(got.to_numpy(), numpy.concatenate(pieces, axis=axis))
    with pytest.raises(xgrad.DimensionError):
        xgrad.reshape(xgrad.transpose(xgrad.array(a), (0, 2, 1, 3)), (48, 128, 63))


def test_gradients_through_the_copies():
    rng = numpy.random.RandomState(2)
    a = rng.standard_normal((4, 128, 12, 64)).astype(numpy.float32)
    x = xgrad.array(a).require_grad()
    y = xgrad.concatenate([xgrad.reshape(xgrad.transpose(x, (0, 2, 1, 3)), (48, 128, 64)),
                           xgrad.copy(xgrad.reshape(x, (48, 128, 64)))], axis=2)
    g = rng.standard_normal(y.shape).astype(numpy.float32)
    gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.array(g)])
    want = (g[:, :, :64].reshape(4, 12, 128, 64).transpose(0, 2, 1, 3)
            + g[:, :, 64:].reshape(4, 128, 12, 64))
    numpy.testing.assert_array_equal(gx.to_numpy(), want)
