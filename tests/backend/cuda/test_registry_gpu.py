"""Every registered op on cuda:0, generated from the registry as the native
tests are (tests/ops/test_registry.py):

* ``test_forward``: the same inputs give the same outputs on cuda:0 as on
  native:0 (shape, dtype; values within the op's forward tolerance, exact for
  integers and bools), and the outputs are device data on cuda:0; on the
  stand-in, no NumPy function reached the device data through NumPy's
  dispatch (the op library calls CuPy's namespace);
* ``test_gradients``: first and second derivatives on cuda:0 against float64
  central differences, through the driver of ``python -m xgrad check``; on
  the stand-in, neither the op's backward nor the check's own computations
  reached device data through NumPy's dispatch.

Each runs on the CPU stand-in for CuPy (our kernels under the emulator) and,
when one is present, on a real GPU.
"""

import numpy
import pytest

import xgrad
from xgrad._backend import cuda
from xgrad._ops.registry import sample_seed
from xgrad.testing import _driver

OPS = xgrad.registered_ops()


def _forward_params():
    params = []
    for info in OPS:
        for sample in info.samples:
            for dtype in info.dtypes + info.int_dtypes:
                params.append(pytest.param(info, sample, dtype, id='{}-{}-{}'.format(
                    info.name, sample.name, dtype)))
    return params


def _skip_composite_on_emulator(cuda_runtime, info, sample, order=1):
    """A composite op (made of other registered ops, see OpInfo.composite)
    on the emulator: its first sample at order 1 only."""
    if cuda_runtime == 'emulated' and info.composite and (
            order != 1 or sample is not info.samples[0]):
        pytest.skip('{} is composed of registered ops, each checked on the stand-in; '
                    'the stand-in takes its first sample at order 1 (a real GPU '
                    'takes every case)'.format(info.name))


def _outputs(ys):
    return tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)


@pytest.mark.parametrize('info, sample, dtype', _forward_params())
def test_forward(cuda_runtime, info, sample, dtype):
    _skip_composite_on_emulator(cuda_runtime, info, sample)
    rs = numpy.random.RandomState(sample_seed('gpu-forward', info.name, sample.name, dtype))
    data = info.sample_data(sample, dtype, rs)
    with numpy.errstate(all='ignore'):
        expected = _outputs(info([xgrad.array(a) for a in data], sample))
        actual = _outputs(info([xgrad.array(a, device='cuda:0') for a in data], sample))
    for y in actual:
        assert y.device.name == 'cuda:0'
        assert cuda.is_device_array(xgrad._core._raw_data(y)), type(xgrad._core._raw_data(y))
    info.assert_forward_matches(actual, expected)
    if cuda_runtime == 'emulated':  # the op called CuPy's functions, none through NumPy's
        from backend.cuda import fake_cupy
        assert fake_cupy.numpy_dispatches == []


GRADIENT_CASES = _driver.cases(devices=('cuda:0',))


@pytest.mark.parametrize('case', GRADIENT_CASES, ids=[c.name for c in GRADIENT_CASES])
def test_gradients(cuda_runtime, case):
    _skip_composite_on_emulator(cuda_runtime, case.info, case.sample, case.order)
    result = _driver.run_case(case, seed=0)
    assert result.passed, result.message
    if cuda_runtime == 'emulated':  # backward called CuPy's functions, none through NumPy's
        from backend.cuda import fake_cupy
        assert fake_cupy.numpy_dispatches == []
