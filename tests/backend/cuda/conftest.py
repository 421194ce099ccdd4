"""Fixtures for the cuda backend's tests.

``cuda_runtime`` runs a test twice: on ``emulated``, a CPU stand-in for CuPy
(fake_cupy.py) whose kernels are ours, compiled by g++ and run by the
emulator of tests/backend/cuda/kernels, so CPU-only CI checks the whole cuda path; and on
``gpu``, real CuPy on a real GPU (skipped, saying why, without one).
"""

import shutil

import pytest

import xgrad
from xgrad._backend import cuda


def _forget_cuda_devices():
    """Drop cached cuda Device objects (they belong to the CuPy in use)."""
    devices = xgrad.get_default_context()._devices
    for key in [k for k in devices if k[0] == 'cuda']:
        del devices[key]


def _real_gpu_missing():
    try:
        cuda.check_device(0)
    except xgrad.DeviceError as e:
        return str(e)
    return None


@pytest.fixture(params=['emulated', pytest.param('gpu', marks=pytest.mark.cuda)])
def cuda_runtime(request):
    """'emulated' or 'gpu', with ``cuda:0`` usable for the test's duration."""
    if request.param == 'emulated':
        if shutil.which('g++') is None:
            pytest.skip('the kernel emulator needs g++')
        from backend.cuda import fake_cupy
        cuda.use_cupy(fake_cupy)
        fake_cupy.reset_counters()
        _forget_cuda_devices()
        try:
            yield 'emulated'
        finally:
            cuda.use_cupy(None)
            _forget_cuda_devices()
    else:
        cuda.use_cupy(None)
        missing = _real_gpu_missing()
        if missing:
            pytest.skip(missing)
        yield 'gpu'


@pytest.fixture
def fake(cuda_runtime):
    """The CPU stand-in (its counters), or skip on a real GPU."""
    if cuda_runtime != 'emulated':
        pytest.skip('counts launches and host reads in the CPU stand-in only')
    from backend.cuda import fake_cupy
    return fake_cupy
