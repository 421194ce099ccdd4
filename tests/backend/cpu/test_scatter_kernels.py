"""xgrad/_backend/scatter_kernels.pyx: row scatter-adds (the gradients of
take and of integer-array indexing) against NumPy's ``add.at``, which sums
the same terms in the same (index) order: the results are bit-identical,
whatever the thread count."""

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels, scatter_kernels

SHAPES = [  # (outer, rows, inner, indices taken)
    (1, 10000, 256, 2240),   # an embedding's gradient: split by columns
    (1, 5, 3, 40),           # narrow rows, many repeats
    (64, 50, 3, 300),        # narrow rows, many outer blocks: split by blocks
    (3, 7, 130, 20),
    (2, 1, 1, 9),            # one row: every index 0
    (2, 4, 5, 0),            # nothing taken
]


def _reference(out, indices, gy):
    expected = out.copy()
    numpy.add.at(expected, (slice(None), indices), gy)
    return expected


@pytest.mark.parametrize('threads', [1, 3])
@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
@pytest.mark.parametrize('outer, rows, inner, n', SHAPES)
def test_matches_add_at_bit_for_bit(outer, rows, inner, n, dtype, threads):
    rng = numpy.random.default_rng(rows + n)
    indices = rng.integers(0, rows, n).astype(numpy.intp)
    gy = rng.standard_normal((outer, n, inner)).astype(dtype)
    out = rng.standard_normal((outer, rows, inner)).astype(dtype)  # (added onto)
    expected = _reference(out, indices, gy)
    before = native_kernels.max_threads()
    native_kernels.set_thread_limit(threads)
    try:
        assert scatter_kernels.add_rows_at(out, indices, gy)
    finally:
        native_kernels.set_thread_limit(before)
    numpy.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize('change', ['float16', 'int index', 'strided out', 'strided gy',
                                    'gy rows', 'gy columns', 'read-only out', 'dtypes differ'])
def test_operands_it_does_not_take_are_refused_untouched(change):
    out = numpy.zeros((2, 6, 4), numpy.float32)
    indices = numpy.array([0, 5, 5], numpy.intp)
    gy = numpy.ones((2, 3, 4), numpy.float32)
    if change == 'float16':
        out, gy = out.astype(numpy.float16), gy.astype(numpy.float16)
    elif change == 'int index':
        indices = indices.astype(numpy.int32)
    elif change == 'strided out':
        out = numpy.zeros((2, 6, 8), numpy.float32)[:, :, ::2]
    elif change == 'strided gy':
        gy = numpy.ones((2, 3, 8), numpy.float32)[:, :, ::2]
    elif change == 'gy rows':
        gy = numpy.ones((2, 4, 4), numpy.float32)
    elif change == 'gy columns':
        gy = numpy.ones((2, 3, 5), numpy.float32)
    elif change == 'read-only out':
        out.flags.writeable = False
    elif change == 'dtypes differ':
        gy = gy.astype(numpy.float64)
    assert scatter_kernels.add_rows_at(out, indices, gy) is False
    assert not out.any()


@pytest.mark.parametrize('axis, x_shape, index_shape', [
    (0, (300, 64), (8, 35)), (1, (4, 9, 70), (50,)), (2, (3, 2, 5), (2, 3)), (0, (6,), (20,))])
def test_take_gradient_is_the_scatter_of_gy(axis, x_shape, index_shape):
    """d sum(take(x, i) * g) / dx = add.at(zeros, i, g) along the axis: the
    closed form, on the rows kernel's path."""
    rng = numpy.random.default_rng(7)
    x = xgrad.array(rng.standard_normal(x_shape).astype(numpy.float32)).require_grad()
    indices = rng.integers(0, x_shape[axis], index_shape)
    y = xgrad.take(x, indices, axis=axis)
    g = rng.standard_normal(y.shape).astype(numpy.float32)
    gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.array(g)])
    expected = numpy.zeros(x_shape, numpy.float32)
    moved = numpy.moveaxis(expected, axis, 0)  # (a view: add.at writes through it)
    g_moved = numpy.moveaxis(g.reshape(x_shape[:axis] + (indices.size,) + x_shape[axis + 1:]),
                             axis, 0)
    numpy.add.at(moved, indices.reshape(-1), g_moved)
    numpy.testing.assert_array_equal(gx.to_numpy(), expected)


@pytest.mark.parametrize('key', [
    numpy.array([3, -1, 0, 3, -10]),          # negative and repeated
    (numpy.array([[1, 2], [2, 2]]),),        # a tuple of one 2-D array
    numpy.array([], numpy.int64),
])
def test_integer_array_indexing_gradient_is_the_scatter_of_gy(key):
    rng = numpy.random.default_rng(8)
    raw = rng.standard_normal((10, 3, 4))
    x = xgrad.array(raw).require_grad()
    y = x[key]
    g = rng.standard_normal(y.shape)
    gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.array(g)])
    expected = numpy.zeros_like(raw)
    numpy.add.at(expected, key, g)
    numpy.testing.assert_array_equal(gx.to_numpy(), expected)
