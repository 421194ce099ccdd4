"""NaN and inf in xgrad.linalg on cuda:0: the cases and checks of
tests/ops/test_linalg_nonfinite.py, on the CPU stand-in for CuPy and, when
one is present, a real GPU.

On cuda:0 an SVD of a matrix with NaN entries gives NaN factors, as one
with inf does (the host raises NumPy's LinAlgError for a NaN: deciding to
raise would read the device). The other forwards are CuPy's: on the
stand-in, NumPy's (compared with NumPy as on the host); on a real GPU
cuSOLVER's, whose outcome is not compared (CuPy does not raise for a
singular or indefinite matrix). Gradients never raise for non-finite data
on either.
"""

import numpy
import pytest

import xgrad
from xgrad import linalg
from ops.test_linalg_nonfinite import DTYPES, case_params, check_case


@pytest.mark.parametrize('dtype', DTYPES, ids=['f32', 'f64'])
@pytest.mark.parametrize('case, i, position, value', case_params())
def test_non_finite_input_on_cuda(cuda_runtime, case, i, position, value, dtype):
    check_case(case, i, position, value, dtype, device='cuda:0',
               like_numpy=cuda_runtime == 'emulated')
    if cuda_runtime == 'emulated':  # CuPy's functions only, none through NumPy's
        from backend.cuda import fake_cupy
        assert fake_cupy.numpy_dispatches == []


@pytest.mark.parametrize('value', [numpy.nan, numpy.inf], ids=['nan', 'inf'])
def test_the_svd_of_a_non_finite_matrix_reads_nothing_on_the_host(fake, value):
    """The NaN factors are decided on the device: the forward reads nothing,
    the backward one boolean per singularity check (docs/gpu.md)."""
    a = numpy.random.RandomState(0).uniform(-1, 1, (3, 3)) + 3 * numpy.eye(3)
    a[1, 0] = value
    x = xgrad.array(a, device='cuda:0').require_grad()
    fake.reset_counters()
    u, s, vt = linalg.svd(x)
    assert fake.host_reads == []
    gx, = xgrad.grad([u, s, vt], [x], grad_outputs=[xgrad.ones_like(t) for t in (u, s, vt)])
    assert set(fake.host_reads) <= {'bool'}
    for t in (u, s, vt, gx):
        assert numpy.isnan(t.to_numpy()).all()
