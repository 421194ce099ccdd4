"""The strict CPU stand-in for CuPy (fake_cupy.py) keeps CuPy's rules, and
xgrad's cuda path keeps them too: the bugs it found stay fixed.

The stand-in half runs on the stand-in only; the xgrad half runs on the
stand-in and, when present, a real GPU (two GPUs for the multi-GPU tests)."""

import numpy
import pytest

import xgrad
from xgrad._backend import cuda
from xgrad._core import _raw_data

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# small integers, and squares of 2.0 and of a denormal flushed to zero
# (exact IEEE products).


# -- the stand-in keeps CuPy's rules ---------------------------------------------

def test_a_device_array_is_not_a_numpy_array(fake):
    a = fake.zeros((2, 3), dtype=numpy.float32)
    assert not isinstance(a, numpy.ndarray)
    assert isinstance(a, fake.ndarray) and a.shape == (2, 3) and a.dtype == numpy.float32


def test_implicit_conversion_to_numpy_raises_type_error(fake):
    a = fake.arange(3)
    for convert in (numpy.asarray, numpy.array, lambda v: v.__array__(),
                    lambda v: v.__array_interface__, lambda v: numpy.zeros(3) + v):
        with pytest.raises(TypeError):
            convert(a)
    assert not hasattr(a, '__array_interface__')
    numpy.testing.assert_array_equal(a.get(), [0, 1, 2])     # the explicit way
    numpy.testing.assert_array_equal(fake.asnumpy(a), [0, 1, 2])


def test_only_cupys_functions_and_keyword_arguments(fake):
    a = fake.ones((2, 2))
    with pytest.raises(TypeError, match='like'):
        fake.full((2,), 1.0, like=a)
    with pytest.raises(TypeError):   # NumPy 2's full passes device=
        numpy.full((2,), 1.0, like=a)
    with pytest.raises(TypeError, match='where'):
        fake.add(a, a, where=True)   # CuPy's ufuncs take out, dtype, casting only
    with pytest.raises(AttributeError):
        a.flags.writeable            # CuPy's flags have no writeable
    with pytest.raises(AttributeError):
        fake.lookfor                 # not a CuPy function
    assert numpy.sum(a).shape == ()  # NumPy's function reaches CuPy's (a 0-d array)


def test_only_what_cupy_13_and_14_both_have(fake):
    """[cuda] takes CuPy 13 or 14: the stand-in offers what both have (their
    signatures read from installed packages into cupy_api.json and
    cupy13_api.json)."""
    assert fake._API['cupy_versions'] == ['14.2.0', '13.6.0']
    a = fake.ones((2, 2), dtype=numpy.float32)
    with pytest.raises(TypeError, match='copy'):      # asarray(copy=) is new in 14
        fake.asarray(a, copy=False)
    with pytest.raises(TypeError, match='copy'):
        a.reshape((4,), copy=False)
    for name in ('acos', 'concat', 'permute_dims'):   # 14's array-API aliases
        assert not hasattr(fake, name), name
    assert hasattr(fake, 'arccos') and hasattr(fake, 'concatenate')
    fake.matmul(a, a, out=fake.empty((2, 2), dtype=numpy.float32))   # 13: **kwargs


def test_common_signature_of_two_releases(fake):
    old = [['a', 'POSITIONAL_OR_KEYWORD', False], ['copy', 'KEYWORD_ONLY', True]]
    new = [['a', 'POSITIONAL_OR_KEYWORD', False], ['order', 'KEYWORD_ONLY', True]]
    assert fake._common_params(old, new) == [['a', 'POSITIONAL_OR_KEYWORD', False]]
    assert fake._common_params(old, None) == old
    anything = [['args', 'VAR_POSITIONAL', False], ['kwargs', 'VAR_KEYWORD', False]]
    assert fake._common_params(new, anything) == [['order', 'KEYWORD_ONLY', True]]


def test_erf_runs_our_kernel_on_the_gpu(fake):
    """erf is one kernel forward and one backward, with no host round trip
    (it had gone through the host: CuPy has no erf outside cupyx)."""
    x = xgrad.array(numpy.linspace(-2, 2, 7, dtype=numpy.float32), device='cuda:0')
    x.require_grad()
    fake.reset_counters()
    y = xgrad.erf(x)
    gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.ones_like(y)])
    assert fake.host_reads == [] and fake.uploads == [] and fake.numpy_dispatches == []
    import math
    host = numpy.linspace(-2, 2, 7)
    numpy.testing.assert_allclose(y.to_device('native:0').to_numpy(),
                                  [math.erf(v) for v in host], rtol=1e-6, atol=1e-7)
    numpy.testing.assert_allclose(gx.to_device('native:0').to_numpy(),
                                  2 / math.sqrt(math.pi) * numpy.exp(-host * host), rtol=1e-6)


@pytest.mark.parametrize('call', [
    lambda a, b, i, j: xgrad.greater(a, b), lambda a, b, i, j: xgrad.less_equal(a, 0.5),
    lambda a, b, i, j: xgrad.equal(a, b), lambda a, b, i, j: xgrad.logical_and(a > 0, b > 0),
    lambda a, b, i, j: xgrad.logical_not(a > 0), lambda a, b, i, j: xgrad.isnan(a),
    lambda a, b, i, j: xgrad.isfinite(a), lambda a, b, i, j: xgrad.bitwise_and(i, j),
    lambda a, b, i, j: xgrad.left_shift(i, j), lambda a, b, i, j: xgrad.floor_divide(i, 3),
    lambda a, b, i, j: xgrad.sign(a), lambda a, b, i, j: xgrad.floor(a),
    lambda a, b, i, j: xgrad.fabs(a), lambda a, b, i, j: xgrad.matmul(a, b.T),
    lambda a, b, i, j: xgrad.dot(a, b.T), lambda a, b, i, j: xgrad.amax(a, axis=1),
    lambda a, b, i, j: xgrad.argmax(a, axis=0), lambda a, b, i, j: xgrad.cumsum(a, axis=1),
    lambda a, b, i, j: xgrad.nansum(a), lambda a, b, i, j: xgrad.prod(a, axis=0),
    lambda a, b, i, j: xgrad.var(a, axis=1), lambda a, b, i, j: xgrad.std(a),
    lambda a, b, i, j: xgrad.logsumexp(a, axis=0)],
    ids=['greater', 'less_equal', 'equal', 'logical_and', 'logical_not', 'isnan',
         'isfinite', 'bitwise_and', 'left_shift', 'floor_divide', 'sign', 'floor', 'fabs',
         'matmul', 'dot', 'amax', 'argmax', 'cumsum', 'nansum', 'prod', 'var', 'std',
         'logsumexp'])
def test_ops_call_cupys_namespace_not_numpys(fake, call):
    """These ops' forwards call CuPy's functions on device data themselves:
    none reaches CuPy through NumPy's dispatch (each did;
    ``fake.numpy_dispatches``)."""
    rs = numpy.random.RandomState(0)
    a, b = (xgrad.array(rs.uniform(-1, 1, (3, 4)).astype(numpy.float32), device='cuda:0')
            for _ in range(2))
    i, j = (xgrad.array(rs.randint(1, 4, (3, 4)), device='cuda:0') for _ in range(2))
    fake.reset_counters()
    y = call(a, b, i, j)
    assert y.device.name == 'cuda:0'
    assert fake.numpy_dispatches == []


def test_two_devices_and_a_current_one(fake):
    assert fake.cuda.runtime.getDeviceCount() == 2
    assert fake.cuda.Device().id == 0
    with fake.cuda.Device(1):
        b = fake.ones((3,))
        assert fake.cuda.Device().id == 1 and b.device.id == 1
        (b + b).get()
    assert fake.cuda.Device().id == 0
    with pytest.raises(ValueError, match='same as the current device'):
        b + b
    with pytest.raises(ValueError, match='same as the current device'):
        b.sum()
    c = fake.asarray(b)  # a copy between devices is allowed
    assert c.device.id == 0


def test_float32_kernels_flush_denormals(fake):
    assert numpy.float32(1e-20) ** 2 != 0     # a float32 denormal on the host
    x = fake.array(numpy.array([1e-20, 2.0], numpy.float32))
    y = cuda.kernels().unary_forward(fake, 'square', x)           # our kernel
    numpy.testing.assert_array_equal(y.get(), [0.0, 4.0])
    numpy.testing.assert_array_equal((x * x).get(), [0.0, 4.0])   # CuPy's
    x64 = fake.array(numpy.array([1e-160, 2.0]))                  # float64: kept
    assert cuda.kernels().unary_forward(fake, 'square', x64).get()[0] > 0


def test_a_kernel_launches_only_on_its_module_device(fake):
    x = fake.ones((4,), dtype=numpy.float32)
    kernels = cuda.kernels()
    kernels.loader.clear_cache()
    kernels.unary_forward(fake, 'exp', x)       # loads the module on device 0
    function = kernels.loader.get_function(fake, 'elementwise.cu',
                                           'xgrad::unary_forward<float, xgrad::Exp>')
    with fake.cuda.Device(1):
        y = fake.empty((4,), dtype=numpy.float32)
        x1 = fake.ones((4,), dtype=numpy.float32)
        with pytest.raises(RuntimeError, match='INVALID_HANDLE'):
            function((1,), (256,), (x1, y, numpy.int64(4)))
        numpy.testing.assert_allclose(kernels.unary_forward(fake, 'exp', x1).get(),
                                      numpy.e, rtol=1e-6)


# -- what the stand-in found in xgrad --------------------------------------------

def _on(values, device='cuda:0', dtype=numpy.float32):
    return xgrad.array(numpy.asarray(values, dtype), device=device)


# CuPy's add.at takes only its atomics' dtypes (the real H200 run of
# 2026-12-04 found diag and diagflat of bools failing on that).
_ADD_AT_CASES = [('bool', [True, True, False]), ('int8', [100, 100, -7]),
                 ('uint8', [200, 100, 3]), ('int16', [30000, 30000, 1]),
                 ('int32', [5, -6, 7]), ('float16', [0.5, 0.25, 2.0]),
                 ('float32', [0.5, 0.25, 2.0]), ('float64', [0.5, 0.25, 2.0])]


@pytest.mark.parametrize('dtype', ['bool', 'int8', 'uint8', 'int16'])
def test_add_at_takes_only_cupys_dtypes(fake, dtype):
    out = fake.zeros(3, dtype=dtype)
    with pytest.raises(TypeError, match='add.at only supports'):
        fake.add.at(out, fake.asarray(numpy.array([0, 0, 1])), fake.ones(3, dtype=dtype))


@pytest.mark.parametrize('dtype, values', _ADD_AT_CASES)
def test_add_at_of_every_dtype_adds_as_numpy_does(cuda_runtime, dtype, values):
    # repeated index 0: the sums wrap in 8 and 16 bits and are True for bools
    key = numpy.array([0, 0, 2])
    values = numpy.array(values, dtype)
    expected = numpy.zeros(4, dtype)
    with numpy.errstate(over='ignore'):
        numpy.add.at(expected, key, values)
    cp = cuda.cupy()
    out = cp.zeros(4, dtype=dtype)
    cuda.add_at(out, cp.asarray(key), cp.asarray(values))
    numpy.testing.assert_array_equal(out.get(), expected)  # small ints, bools, dyadic floats


@pytest.mark.parametrize('dtype', ['bool', 'int8', 'float32'])
def test_diag_of_every_dtype_on_a_gpu(cuda_runtime, dtype):
    v = numpy.array([1, 0, 3], dtype)
    for k in (0, 1, -2):
        y = xgrad.diag(xgrad.array(v, device='cuda:0'), k)
        assert y.device.name == 'cuda:0' and y.dtype == numpy.dtype(dtype)
        numpy.testing.assert_array_equal(y.to_numpy(), numpy.diag(v, k))  # exact: a copy


def test_count_nonzero_on_a_gpu(cuda_runtime):
    a = _on([[0, 1, 2], [0, 0, 3]])
    c = xgrad.count_nonzero(a, axis=1)
    assert c.device.name == 'cuda:0' and c.dtype == numpy.int64
    numpy.testing.assert_array_equal(c.to_numpy(), [2, 1])
    assert int(xgrad.count_nonzero(a)) == 3


def test_repeat_with_counts_on_a_gpu(cuda_runtime):
    a = _on([1, 2, 3])
    counts = xgrad.array(numpy.array([2, 0, 1]), device='cuda:0')
    numpy.testing.assert_array_equal(xgrad.repeat(a, counts).to_numpy(), [1, 1, 3])
    numpy.testing.assert_array_equal(xgrad.repeat(a, 2).to_numpy(), [1, 1, 2, 2, 3, 3])


@pytest.mark.parametrize('name', ['var', 'std'])
def test_var_and_std_of_zero_size_input_on_a_gpu(cuda_runtime, name):
    a = xgrad.zeros((0, 3), device='cuda:0')
    with numpy.errstate(all='ignore'):
        y = getattr(xgrad, name)(a, axis=0)
    assert y.device.name == 'cuda:0' and y.shape == (3,)
    assert numpy.isnan(y.to_numpy()).all()


def test_accuracy_without_classes_on_a_gpu(cuda_runtime):
    y = xgrad.zeros((2, 0), device='cuda:0')
    t = xgrad.array(numpy.array([0, 1]), device='cuda:0')
    assert float(xgrad.accuracy(y, t)) == 0.0


def test_batch_norm_updates_running_statistics_on_a_gpu(cuda_runtime):
    x = _on(numpy.arange(6).reshape(3, 2))
    gamma, beta = xgrad.ones((2,), device='cuda:0'), xgrad.zeros((2,), device='cuda:0')
    mean, var = xgrad.zeros((2,), device='cuda:0'), xgrad.ones((2,), device='cuda:0')
    xgrad.batch_norm(x, gamma, beta, running_mean=mean, running_var=var, decay=0.5)
    numpy.testing.assert_allclose(mean.to_numpy(), [1.0, 1.5])


def test_the_data_address_of_a_gpu_array(cuda_runtime):
    a = xgrad.zeros((2,), device='cuda:0')
    address = a._debug_data_memory_address
    assert isinstance(address, int) and address != 0


def _raw_device(a):
    return _raw_data(a).device.id


@pytest.fixture
def two_gpus(cuda_runtime):
    if cuda.device_count() < 2:
        pytest.skip('needs two GPUs')
    return cuda_runtime


def test_ops_on_a_second_gpu_run_there(two_gpus):
    """Forward, backward and creation on cuda:1 while cuda:0 is CuPy's current
    device: kernels launch, and memory is allocated, on GPU 1."""
    cp = cuda.cupy()
    assert cp.cuda.Device().id == 0
    x = _on(numpy.linspace(-1, 1, 12).reshape(3, 4), device='cuda:1')
    w = _on(numpy.linspace(0, 1, 8).reshape(4, 2), device='cuda:1')
    x.require_grad()
    w.require_grad()
    if two_gpus == 'emulated':
        cp.reset_counters()
    y = xgrad.tanh(xgrad.matmul(x, w)) * 2 + xgrad.exp(x).sum()
    loss = (y * y).sum() + xgrad.var(x) + xgrad.count_nonzero(x) * 0
    loss.backward()
    if two_gpus == 'emulated':  # and no waiting for GPU 1 on the way
        assert cp.host_reads == [], cp.host_reads
    for a in (y, loss, x.grad, w.grad, xgrad.zeros((2,), device='cuda:1'),
              xgrad.full((2,), 3.0, device='cuda:1'), xgrad.dropout(x)):
        assert a.device.name == 'cuda:1' and _raw_device(a) == 1
    assert cp.cuda.Device().id == 0
    xh, wh = x.to_numpy().astype(numpy.float64), w.to_numpy().astype(numpy.float64)
    t = numpy.tanh(xh @ wh)
    yh = 2 * t + numpy.exp(xh).sum()
    gy = 2 * yh
    gw = xh.T @ (gy * 2 * (1 - t * t))
    numpy.testing.assert_allclose(w.grad.to_numpy(), gw, rtol=1e-4)


def test_dropout_draws_its_mask_on_the_gpu(fake):
    x = xgrad.ones((64, 32), device='cuda:0')
    x.require_grad()
    fake.reset_counters()
    y = xgrad.dropout(x, 0.25)
    y.backward()
    assert fake.uploads == [] and fake.host_reads == []
    assert 'random.Generator.random' in fake.cupy_calls
    kept = y.to_numpy() != 0
    numpy.testing.assert_allclose(x.grad.to_numpy(), kept / 0.75, rtol=1e-6)
    assert 0.6 < kept.mean() < 0.9
