"""xgrad's kernels leave the x87 unit as they found it.

x87 code runs in the same process after them: NumPy's longdouble, libm's
long double functions, OpenBLAS's LAPACK. A kernel that uses the MMX
registers and no EMMS after them leaves the x87 unit in MMX state, and that
code then computes NaN. GCC 12 did this in the SSE2 path's extremum loop
(amax over rows of 16 or more floats): a later ``norm(x, 'nuc')`` failed
with "SVD did not converge" on a finite matrix. setup.py now builds with
-mno-mmx on x86-64. Here the ops of every kernel family run on every CPU
path the machine has, then longdouble arithmetic must still be exact (small
integers and halves: exact in any precision).
"""

import numpy
import pytest

import xgrad


def _ops(dtype):
    rng = numpy.random.RandomState(0)
    x = xgrad.array(rng.standard_normal((6, 40, 37)).astype(dtype))
    g = xgrad.ones((40,), dtype)
    b = xgrad.zeros((40,), dtype)
    yield xgrad.amax(x, axis=2), xgrad.amin(x, axis=(1, 2)), xgrad.argmax(x, axis=2)
    yield xgrad.sum(x, axis=2), xgrad.sum(x, axis=(0, 2)), xgrad.mean(x), xgrad.var(x, axis=1)
    yield xgrad.softmax(x, axis=2), xgrad.log_softmax(x, axis=1), xgrad.logsumexp(x, axis=2)
    yield xgrad.tanh(x), xgrad.exp(x), xgrad.sigmoid(x), xgrad.relu(x), xgrad.clip(x, -1, 1)
    yield xgrad.where(x > 0, x, x * 2), xgrad.cumsum(x, axis=2), xgrad.absolute(x)
    yield (xgrad.batch_norm(x, g, b, axis=(0, 2)),
           xgrad.layer_norm(xgrad.transpose(x, (0, 2, 1)), g, b))
    w = xgrad.array(rng.standard_normal((8, 40, 3, 3)).astype(dtype))
    yield xgrad.conv(xgrad.reshape(x[:, :, :36], (6, 40, 6, 6)), w, pad=1),
    yield xgrad.max_pool(xgrad.reshape(x[:, :, :36], (6, 40, 6, 6)), 2, 2),


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_the_x87_unit_works_after_the_kernels_on_every_path(on_cpu_path, dtype):
    from xgrad._backend import native_kernels
    for path in native_kernels.cpu_paths():
        on_cpu_path(path)
        for results in _ops(dtype):
            for r in results:
                r.to_numpy()
        halves = numpy.array([1.5, 2.25, -0.75], dtype=numpy.longdouble)
        assert halves.sum() == 3, path
        assert numpy.longdouble(3) * numpy.longdouble(1.5) == 4.5, path
