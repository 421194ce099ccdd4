"""float32 <-> float16 casts by F16C (xgrad/_backend/half_cast.h): NumPy's
values bit for bit (rounding to nearest even at every tie, overflow to
infinity, subnormals, signed zeros), NaN for NaN, on every CPU path (the
SSE2 path keeps NumPy's own conversion), in astype and in the gradients'
casts."""

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels


def _bits_equal(got, want):
    """Equal bits, but any NaN for a NaN (F16C may keep other payload bits)."""
    nan = numpy.isnan(want)
    assert numpy.array_equal(numpy.isnan(got), nan)
    width = 'u2' if want.dtype == numpy.float16 else 'u4'
    numpy.testing.assert_array_equal(got[~nan].view(width), want[~nan].view(width))


def _hard_floats():
    """Every float16 value's neighbourhood in float32: each tie between two
    halves and the floats one ulp either side of it, the halves themselves,
    the overflow boundary, random floats of every exponent."""
    halves = numpy.arange(0, 0x7c00, dtype=numpy.uint16).view(numpy.float16).astype(numpy.float64)
    ties = (halves[:-1] + halves[1:]) / 2
    t32 = ties.astype(numpy.float32)
    near = [t32, numpy.nextafter(t32, numpy.float32(numpy.inf)),
            numpy.nextafter(t32, numpy.float32(0)), halves.astype(numpy.float32)]
    rng = numpy.random.RandomState(0)
    wide = (rng.uniform(-1, 1, 20000) * 2.0 ** rng.randint(-30, 30, 20000)).astype(numpy.float32)
    special = numpy.array([65504, 65519.99, 65520, 65536, 1e30, numpy.inf, numpy.nan, 0.0,
                           2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -26, 1e-30],
                          numpy.float32)
    x = numpy.concatenate(near + [wide, special])
    return numpy.concatenate([x, -x])


@pytest.mark.parametrize('path', ['sse2', 'avx2', 'avx512'])
def test_float32_to_float16_is_numpys_bit_for_bit(on_cpu_path, path):
    on_cpu_path(path)
    x = _hard_floats()
    with numpy.errstate(over='ignore'):  # (NumPy's cast warns of the infinities)
        want = x.astype(numpy.float16)
        _bits_equal(xgrad.array(x).astype(numpy.float16).to_numpy(), want)
        # (a length that leaves a tail of every size, and 2-D)
        for n in range(1, 17):
            _bits_equal(xgrad.array(x[:n]).astype('float16').to_numpy(), want[:n])
        _bits_equal(xgrad.array(x[:40000].reshape(200, 200)).astype('float16').to_numpy(),
                    want[:40000].reshape(200, 200))


@pytest.mark.parametrize('path', ['sse2', 'avx2', 'avx512'])
def test_float16_to_float32_is_numpys_for_every_half(on_cpu_path, path):
    on_cpu_path(path)
    every = numpy.arange(65536, dtype=numpy.uint16).view(numpy.float16)
    _bits_equal(xgrad.array(every).astype(numpy.float32).to_numpy(), every.astype(numpy.float32))


def test_only_contiguous_native_float32_and_float16_take_it():
    x = numpy.linspace(-3, 3, 64, dtype=numpy.float32)
    assert native_kernels.cast_half(x[::2], numpy.float16) is None  # strided
    assert native_kernels.cast_half(x.astype('>f4'), numpy.float16) is None  # byte-swapped
    assert native_kernels.cast_half(x, numpy.float64) is None
    assert native_kernels.cast_half(x.astype(numpy.float64), numpy.float16) is None
    for view in (x[::2], x.astype('>f4'), x.reshape(8, 8).T):
        numpy.testing.assert_array_equal(
            xgrad.asarray(view).astype(numpy.float16).to_numpy(), view.astype(numpy.float16))


def test_the_gradient_of_a_cast_is_cast_back():
    x = xgrad.array(numpy.linspace(-2, 2, 1000, dtype=numpy.float32)).require_grad()
    y = x.astype(numpy.float16)
    gy = numpy.linspace(-1, 1, 1000).astype(numpy.float16)
    gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.array(gy)])
    assert gx.dtype == numpy.float32
    numpy.testing.assert_array_equal(gx.to_numpy(), gy.astype(numpy.float32))
