"""cuDNN's binding (xgrad/_backend/cudnn.pyx) without a GPU: where the
library is looked for, turning it off, the descriptors and output shapes
(the library loads without a GPU: these run where it is installed, e.g. a
venv with nvidia-cudnn-cu13, and skip saying so elsewhere), the plan cache
and algorithm choice keys, and the ops' wiring: the stand-in never reaches
cuDNN, and with cuDNN's calls emulated on the stand-in (the same math as
cuDNN's, computed by the strided-window code) pooling and batch norm give
the fallback's values, first and second derivatives included, and fall
back after a cuDNN error. Numerics against cuDNN itself: test_cudnn_gpu.py.
"""

import os
import sys
import warnings

import numpy
import pytest

import xgrad
from xgrad._backend import cudnn
from xgrad._ops import convolution, pooling

F64 = numpy.float64


@pytest.fixture
def library():
    if not cudnn.available():
        pytest.skip('the cuDNN library is not loadable here: {}'.format(cudnn.reason()))


@pytest.fixture(autouse=True)
def _fresh_modes():
    saved = dict(cudnn.config)
    failures = dict(cudnn.failures)
    yield
    cudnn.config.update(saved)
    cudnn.failures.clear()
    cudnn.failures.update(failures)
    cudnn.clear_plans()


# ---------------------------------------------------------------------------
# Finding and turning off the library

def test_library_is_looked_for_by_variable_then_wheels_then_torch_then_system(
        tmp_path, monkeypatch):
    wheel = tmp_path / 'a' / 'nvidia' / 'cudnn' / 'lib'
    torch_lib = tmp_path / 'b' / 'torch' / 'lib'
    for folder in (wheel, torch_lib):
        folder.mkdir(parents=True)
        (folder / 'libcudnn.so.9').write_bytes(b'')
    monkeypatch.setattr(sys, 'path', [str(tmp_path / 'b'), str(tmp_path / 'a'),
                                      str(tmp_path / 'none')])
    monkeypatch.setenv('XGRAD_CUDNN_LIBRARY', '/opt/cudnn/libcudnn.so.9')
    assert cudnn.candidate_paths() == [
        '/opt/cudnn/libcudnn.so.9', str(torch_lib / 'libcudnn.so.9'),
        str(wheel / 'libcudnn.so.9'), 'libcudnn.so.9']
    monkeypatch.delenv('XGRAD_CUDNN_LIBRARY')
    monkeypatch.setattr(sys, 'path', [str(tmp_path / 'a'), str(tmp_path / 'b')])
    assert cudnn.candidate_paths()[0] == str(wheel / 'libcudnn.so.9')  # (sys.path's order)


@pytest.mark.parametrize('value', ['0', 'off', 'false'])
def test_xgrad_cudnn_0_turns_it_off_and_says_so(monkeypatch, value):
    monkeypatch.setenv('XGRAD_CUDNN', value)
    assert not cudnn.available()
    assert cudnn.reason() == 'XGRAD_CUDNN=0'
    assert cudnn.version() is None
    assert cudnn.path('conv') == 'im2col: XGRAD_CUDNN=0'
    assert cudnn.path('pool') == 'strided windows: XGRAD_CUDNN=0'
    assert cudnn.path('batch_norm') == 'CuPy routines: XGRAD_CUDNN=0'
    assert cudnn.convolution_reason((1, 1, 4, 4), (1, 1, 3, 3), 'float32', (1, 1), (0, 0),
                                    (1, 1), 1) == 'XGRAD_CUDNN=0'
    assert cudnn.pooling_reason((1, 1, 4, 4), 'float32', (2, 2), (2, 2), (0, 0),
                                'max') == 'XGRAD_CUDNN=0'
    assert cudnn.use_for('pool', None, None) is False


def test_info_names_the_path_of_each_kind(monkeypatch):
    from xgrad import _info
    monkeypatch.setenv('XGRAD_CUDNN', '0')
    lines = []
    _info.cudnn_lines(lambda key, value: lines.append((key, value)), None)
    assert lines == [('cuDNN', 'not used: XGRAD_CUDNN=0'),
                     ('conv path', 'im2col (cuDNN not used)'),
                     ('pool path', 'strided windows (cuDNN not used)'),
                     ('BN path', 'CuPy routines (cuDNN not used)')]


def test_without_the_library_the_reason_says_how_to_get_it(monkeypatch):
    if cudnn.available():
        pytest.skip('the library is loaded here')
    assert 'nvidia-cudnn-cu13' in cudnn.reason()
    assert cudnn.path('pool').startswith('strided windows: libcudnn.so.9 not found')


def test_library_reports_its_version(library):
    v = cudnn.version()
    assert v >= 8000
    assert cudnn.version_string().count('.') == 2
    assert cudnn.path('pool') == 'cudnn ' + cudnn.version_string()
    assert cudnn.path('conv') == 'cudnn ' + cudnn.version_string()


# ---------------------------------------------------------------------------
# Descriptors and output shapes (the library, no GPU)

@pytest.mark.parametrize('dtype,code', [('float16', cudnn.DATA_HALF),
                                        ('float32', cudnn.DATA_FLOAT),
                                        ('float64', cudnn.DATA_DOUBLE)])
def test_tensor_descriptor_is_packed_in_c_order(library, dtype, code):
    d = cudnn.tensor_descriptor((2, 3, 5, 7), dtype)
    assert cudnn.tensor_shape(d) == (code, (2, 3, 5, 7), (105, 35, 7, 1))
    d = cudnn.tensor_descriptor((2, 3, 4, 5, 6), dtype)
    assert cudnn.tensor_shape(d)[1:] == ((2, 3, 4, 5, 6), (360, 120, 30, 6, 1))


# (x shape, w shape, stride, pad, dilation, groups)
CONV_GEOMETRIES = [
    ((2, 3, 8, 8), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 3, 9, 7), (4, 3, 3, 2), (2, 3), (1, 0), (1, 1), 1),
    ((1, 4, 10, 10), (6, 2, 3, 3), (2, 2), (2, 1), (2, 3), 2),
    ((2, 6, 7, 7), (6, 1, 3, 3), (1, 1), (1, 1), (1, 1), 6),    # depthwise
    ((3, 2, 11), (5, 2, 4), (3,), (2,), (1,), 1),               # 1-D
    ((2, 4, 9), (4, 2, 3), (1,), (0,), (2,), 2),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), (1, 2, 1), (0, 1, 1), (2, 1, 1), 1),  # 3-D
    ((1, 3, 1, 1), (2, 3, 1, 1), (1, 1), (0, 0), (1, 1), 1),
]


@pytest.mark.parametrize('geometry', CONV_GEOMETRIES)
def test_convolution_output_shape_is_xgrads(library, geometry):
    x_shape, w_shape, stride, pad, dilation, groups = geometry
    spatial = tuple(convolution.out_size(d, k, s, p, dl) for d, k, s, p, dl in zip(
        x_shape[2:], w_shape[2:], stride, pad, dilation))
    assert spatial == tuple(cudnn.conv_out_size(d, k, s, p, dl) for d, k, s, p, dl in zip(
        x_shape[2:], w_shape[2:], stride, pad, dilation))
    y_shape = (x_shape[0], w_shape[0]) + spatial
    assert cudnn.convolution_reason(x_shape, w_shape, 'float32', stride, pad, dilation,
                                    groups) is None
    plan = cudnn.ConvPlan(x_shape, w_shape, y_shape, 'float32', stride, pad, dilation, groups)
    assert plan.output_shape() == cudnn._as_2d_spatial(y_shape)


@pytest.mark.parametrize('x_shape,ksize,stride,pad', [
    ((2, 3, 7, 7), (3, 3), (2, 2), (1, 1)),
    ((2, 3, 8, 6), (2, 3), (2, 1), (0, 1)),
    ((1, 2, 9), (3,), (2,), (1,)),
    ((1, 2, 4, 6, 5), (2, 2, 3), (2, 1, 2), (1, 0, 1)),
])
@pytest.mark.parametrize('kind', ['max', 'average'])
def test_pooling_output_shape_is_xgrads(library, x_shape, ksize, stride, pad, kind):
    x = numpy.zeros(x_shape, numpy.float32)
    geom, outsize = pooling._geometry('p', xgrad.array(x), ksize, stride, pad, False)
    mode = cudnn.pooling_mode(kind, 'ignore')
    assert cudnn.pooling_reason(x_shape, 'float32', ksize, stride, pad, kind) is None
    plan = cudnn.PoolPlan(x_shape, x_shape[:2] + outsize, 'float32', mode, ksize, stride, pad)
    assert plan.output_shape() == cudnn._as_2d_spatial(x_shape[:2] + outsize)


def test_pooling_modes_match_xgrads_semantics():
    assert cudnn.pooling_mode('average', 'ignore') == cudnn.POOLING_AVERAGE_EXCLUDE_PADDING
    assert cudnn.pooling_mode('average', 'zero') == cudnn.POOLING_AVERAGE_INCLUDE_PADDING
    assert cudnn.pooling_mode('max') == cudnn.POOLING_MAX
    cudnn.set_deterministic(True)
    assert cudnn.pooling_mode('max') == cudnn.POOLING_MAX_DETERMINISTIC


@pytest.mark.parametrize('merged,reduced,mode,params', [
    ((8, 3, 16), (True, False, True), cudnn.BATCHNORM_SPATIAL, (1, 3, 1, 1)),
    ((8, 5), (True, False), cudnn.BATCHNORM_PER_ACTIVATION, (1, 5, 1, 1)),
])
@pytest.mark.parametrize('dtype,param_code', [('float16', cudnn.DATA_FLOAT),
                                              ('float32', cudnn.DATA_FLOAT),
                                              ('float64', cudnn.DATA_DOUBLE)])
def test_batch_norm_parameters_are_per_channel_in_cudnns_dtype(
        library, merged, reduced, mode, params, dtype, param_code):
    assert cudnn.batch_norm_mode(reduced) == mode
    assert cudnn.batch_norm_reason(merged, reduced, dtype, 2e-5, 8) is None
    plan = cudnn.BatchNormPlan(merged, mode, dtype)
    code, shape, _ = cudnn.tensor_shape(plan.params)
    assert (code, shape) == (param_code, params)
    assert plan.param_dtype == (F64 if dtype == 'float64' else numpy.float32)


def test_reasons_name_what_cudnn_does_not_do(library):
    geometry = ((1, 1), (0, 0), (1, 1), 1)
    assert 'spatial axes' in cudnn.convolution_reason((1, 1, 2, 2, 2, 2), (1, 1, 1, 1, 1, 1),
                                                      'float32', (1,) * 4, (0,) * 4,
                                                      (1,) * 4, 1)
    assert 'dtype' in cudnn.convolution_reason((1, 1, 4, 4), (1, 1, 3, 3), 'int32', *geometry)
    assert 'empty' in cudnn.convolution_reason((0, 1, 4, 4), (1, 1, 3, 3), 'float32',
                                               *geometry)
    assert cudnn.pooling_reason((1, 1, 4, 4), 'float32', (2, 2), (1, 1), (2, 0),
                                'average') == 'pad >= ksize'
    assert 'eps' in cudnn.batch_norm_reason((4, 3), (True, False), 'float32', 1e-6, 4)
    assert 'fewer than 2' in cudnn.batch_norm_reason((1, 3), (True, False), 'float32',
                                                     1e-3, 1)
    assert 'axes' in cudnn.batch_norm_reason((2, 3, 4), (False, True, False), 'float32',
                                             1e-3, 3)
    assert cudnn.batch_norm_mode((False, True)) is None


# ---------------------------------------------------------------------------
# Plans and the algorithm choice's keys

@pytest.mark.parametrize('dilation', [None, (2, 1)])
def test_the_convolution_entry_points_ask_for_consistent_shapes(fake, monkeypatch, dilation):
    """Each entry point plans the one convolution (x, w, y shapes, dtype,
    geometry) whatever its direction, and writes a new array of the shape
    that direction produces (cuDNN's calls themselves recorded, not run)."""
    planned, ran = [], []
    monkeypatch.setattr(cudnn, '_cupy', lambda: fake)
    monkeypatch.setattr(cudnn, '_plan', lambda *args: planned.append(args) or 'plan')
    monkeypatch.setattr(cudnn, '_run', lambda direction, plan, a, b, out, cp: ran.append(
        (direction, a.shape, b.shape, out.shape, out.dtype)) or out)
    f32 = numpy.float32
    x = fake.asarray(numpy.ones((2, 3, 9, 8), f32))
    w = fake.asarray(numpy.ones((6, 3, 3, 2), f32))
    stride, pad = (2, 1), (1, 0)
    d = dilation or (1, 1)
    y_shape = (2, 6, (9 + 2 - d[0] * 2 - 1) // 2 + 1, (8 - d[1] - 1) // 1 + 1)
    gy = fake.asarray(numpy.ones(y_shape, f32))
    assert cudnn.convolution_forward(x, w, stride, pad, dilation).shape == y_shape
    assert cudnn.convolution_backward_data(w, gy, x.shape, stride, pad, dilation).shape == x.shape
    assert cudnn.convolution_backward_filter(x, gy, w.shape, stride, pad, dilation).shape \
        == w.shape
    # conv_transpose of gy (its w (C_in, C_out, ...) is conv's): conv's backward data
    assert cudnn.convolution_transpose(gy, w, x.shape[2:], stride, pad, dilation).shape \
        == x.shape
    conv = ('conv', x.shape, w.shape, y_shape, numpy.dtype(f32), stride, pad, d, 1, 0)
    assert planned == [conv] * 4
    assert [r[0] for r in ran] == ['forward', 'backward_data', 'backward_filter',
                                   'backward_data']
    assert ran[1][3] == x.shape and ran[2][3] == w.shape and ran[0][3] == y_shape


def test_plans_are_kept_per_shape_key_and_mode(library):
    args = ((2, 3, 8, 8), (4, 3, 3, 3), (2, 4, 8, 8), 'float32', (1, 1), (1, 1), (1, 1), 1, 0)
    cudnn.clear_plans()
    plan = cudnn._plan('conv', *args)
    assert cudnn._plan('conv', *args) is plan and cudnn.plan_count() == 1
    assert cudnn._plan('conv', *args[:-1], 1) is not plan           # another device
    cudnn.set_benchmark(True)                                        # another mode
    benchmarked = cudnn._plan('conv', *args)
    assert benchmarked is not plan
    cudnn.set_benchmark(False)
    cudnn.set_deterministic(True)
    assert cudnn._plan('conv', *args) not in (plan, benchmarked)
    cudnn.set_deterministic(False)
    cudnn.set_allow_tf32(True)
    assert cudnn._plan('conv', *args) is not plan
    cudnn.set_allow_tf32(False)
    assert cudnn._plan('conv', *args) is plan
    cudnn.clear_plans()
    assert cudnn.plan_count() == 0


def test_plan_cache_drops_the_least_recently_used():
    cache = cudnn._Cache(size=2)
    cache.get('a', lambda: 1)
    cache.get('b', lambda: 2)
    cache.get('a', lambda: 0)          # a is used again: b is the oldest
    cache.get('c', lambda: 3)
    assert sorted(cache.table) == ['a', 'c']


def test_float32_runs_in_float32_unless_tf32_is_allowed(library):
    plan = cudnn.ConvPlan((1, 1, 4, 4), (1, 1, 3, 3), (1, 1, 2, 2), 'float32', (1, 1),
                          (0, 0), (1, 1), 1)
    assert cudnn._math_type(plan, cudnn.DEFAULT_MATH) == cudnn.FMA_MATH
    cudnn.set_allow_tf32(True)
    assert cudnn._math_type(plan, cudnn.DEFAULT_MATH) == cudnn.DEFAULT_MATH
    half = cudnn.ConvPlan((1, 1, 4, 4), (1, 1, 3, 3), (1, 1, 2, 2), 'float16', (1, 1),
                          (0, 0), (1, 1), 1)
    cudnn.set_allow_tf32(False)
    assert cudnn._math_type(half, cudnn.TENSOR_OP_MATH) == cudnn.TENSOR_OP_MATH


def test_modes_have_environment_variables_and_setters():
    previous = cudnn.set_benchmark(True)
    assert cudnn.config['benchmark'] is True
    assert cudnn.set_benchmark(previous) is True
    assert cudnn.set_deterministic(False) in (True, False)
    assert cudnn.config['workspace_limit'] > 0
    src = open(os.path.join(os.path.dirname(cudnn.__file__), 'cudnn.pyx')).read()
    for name in ('XGRAD_CUDNN_BENCHMARK', 'XGRAD_CUDNN_DETERMINISTIC', 'XGRAD_CUDNN_TF32',
                 'XGRAD_CUDNN_WORKSPACE_MB'):
        assert name in src


# ---------------------------------------------------------------------------
# The ops' wiring on the stand-in

def _ops_forward_and_grads(kind, seed=0):
    """(outputs, first derivatives, second derivatives) of ``kind`` on cuda:0,
    as NumPy arrays."""
    rs = numpy.random.RandomState(seed)
    dev = 'cuda:0'
    if kind in ('max', 'average', 'average_zero'):
        x = xgrad.array(rs.permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6).astype(
            numpy.float32) / 10, device=dev).require_grad()
        if kind == 'max':
            y = xgrad.max_pool(x, 3, stride=2, pad=1)
        else:
            y = xgrad.average_pool(x, 3, stride=2, pad=1,
                                   pad_mode='zero' if kind == 'average_zero' else 'ignore')
        params = [x]
    else:
        x = xgrad.array(rs.standard_normal((4, 3, 5, 4)).astype(numpy.float32),
                        device=dev).require_grad()
        gamma = xgrad.array(rs.uniform(0.5, 1.5, 3).astype(numpy.float32),
                            device=dev).require_grad()
        beta = xgrad.array(rs.standard_normal(3).astype(numpy.float32),
                           device=dev).require_grad()
        if kind == 'batch_norm':
            y = xgrad.batch_norm(x, gamma, beta, axis=(0, 2, 3))
        else:
            mean = xgrad.array(rs.standard_normal(3).astype(numpy.float32), device=dev)
            var = xgrad.array(rs.uniform(0.5, 2, 3).astype(numpy.float32), device=dev)
            y = xgrad.fixed_batch_norm(x, gamma, beta, mean, var, axis=(0, 2, 3))
        params = [x, gamma, beta]
    gy = xgrad.array(rs.standard_normal(y.shape).astype(numpy.float32), device=dev)
    grads = xgrad.grad([y], params, grad_outputs=[gy], enable_double_backprop=True)
    v = [xgrad.array(rs.standard_normal(g.shape).astype(numpy.float32), device=dev)
         for g in grads]
    total = sum(xgrad.sum(g * w) for g, w in zip(grads, v))
    second = xgrad.grad([total], params, enable_double_backprop=False)
    return ([y.to_numpy()], [g.to_numpy() for g in grads],
            [numpy.zeros(p.shape) if g is None else g.to_numpy()
             for p, g in zip(params, second)])


KINDS = ['max', 'average', 'average_zero', 'batch_norm', 'fixed_batch_norm']


def _forbid_cudnn(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError('cuDNN was called with stand-in data')
    for name in ('pooling_forward', 'pooling_backward', 'batch_norm_forward_training',
                 'batch_norm_forward_inference', 'batch_norm_backward',
                 'convolution_forward'):
        monkeypatch.setattr(cudnn, name, refuse)


@pytest.mark.parametrize('kind', KINDS)
def test_stand_in_data_never_reaches_cudnn(fake, monkeypatch, kind):
    _forbid_cudnn(monkeypatch)
    _ops_forward_and_grads(kind)
    why = cudnn.device_reason(fake)
    assert why is not None
    if cudnn.available():
        assert 'stand-in' in why


_WINDOW_MAX = pooling._window_max  # (the emulation's own, whatever a test patches)


class _EmulatedCudnn:
    """cuDNN's pooling and batch norm calls with cuDNN's contracts (shapes,
    dtypes, modes, saved statistics), computed on the stand-in by xgrad's
    own strided-window code and CuPy routines; counts the calls."""

    def __init__(self, cp):
        self.cp = cp
        self.calls = []

    def _geom(self, ksize, stride, pad):
        n = len(ksize)
        return convolution.Geometry(tuple(ksize), tuple(stride), tuple(pad), (1,) * n, 1)

    def _average(self, x_shape, outsize, mode, geom):
        pad_mode = {cudnn.POOLING_AVERAGE_EXCLUDE_PADDING: 'ignore',
                    cudnn.POOLING_AVERAGE_INCLUDE_PADDING: 'zero'}[mode]
        return pooling._Average(geom, tuple(outsize), tuple(x_shape[2:]), pad_mode)

    def pooling_forward(self, x, outsize, mode, ksize, stride, pad):
        self.calls.append('pooling_forward')
        geom = self._geom(ksize, stride, pad)
        if mode in (cudnn.POOLING_MAX, cudnn.POOLING_MAX_DETERMINISTIC):
            return _WINDOW_MAX(x, geom, tuple(outsize))[0]
        return pooling._AveragePool(self._average(x.shape, outsize, mode, geom)).compute(x)

    def pooling_backward(self, x_shape, x, y, gy, mode, ksize, stride, pad):
        self.calls.append('pooling_backward')
        geom = self._geom(ksize, stride, pad)
        outsize = tuple(gy.shape[2:])
        assert tuple(x_shape) == tuple(gy.shape[:2]) + tuple(x_shape[2:])
        if mode in (cudnn.POOLING_MAX, cudnn.POOLING_MAX_DETERMINISTIC):
            assert x.shape == tuple(x_shape) and y.shape == gy.shape
            tap = _WINDOW_MAX(x, geom, outsize)[1]
            plan = pooling._Argmax(tap, geom, outsize, tuple(x_shape[2:]))
            return pooling._MaxPoolGrad(plan).compute(gy)
        assert x is None and y is None  # (average pooling reads neither)
        return pooling._AveragePoolGrad(self._average(x_shape, outsize, mode, geom)).compute(gy)

    def _axes(self, merged, mode):
        return (0, 2) if mode == cudnn.BATCHNORM_SPATIAL else (0,)

    def _per_channel(self, a, merged, mode):
        shape = [1] * len(merged)
        shape[1] = merged[1]
        if mode == cudnn.BATCHNORM_PER_ACTIVATION:
            shape = [1] + list(merged[1:])
        return a.reshape(shape)

    def batch_norm_forward_training(self, x, gamma, beta, merged, mode, eps):
        self.calls.append('batch_norm_forward_training')
        cp, axes = self.cp, self._axes(merged, mode)
        xw = x.reshape(merged).astype(numpy.float32)
        mean = xw.mean(axis=axes)
        var = ((xw - self._per_channel(mean, merged, mode)) ** 2).mean(axis=axes)
        inv_std = 1 / cp.sqrt(var + eps)
        y = self._normalize(xw, gamma, beta, mean, inv_std, merged, mode)
        return y.astype(x.dtype), mean.reshape(-1), inv_std.reshape(-1)

    def _normalize(self, xw, gamma, beta, mean, inv_std, merged, mode):
        pc = lambda a: self._per_channel(a.astype(numpy.float32), merged, mode)  # noqa: E731
        return (xw - pc(mean)) * pc(inv_std) * pc(gamma) + pc(beta)

    def batch_norm_forward_inference(self, x, gamma, beta, mean, var, merged, mode, eps):
        self.calls.append('batch_norm_forward_inference')
        inv_std = 1 / self.cp.sqrt(var.astype(numpy.float32) + eps)
        xw = x.reshape(merged).astype(numpy.float32)
        return self._normalize(xw, gamma, beta, mean, inv_std, merged, mode).astype(x.dtype)

    def batch_norm_backward(self, x, gy, gamma, mean, inv_std, merged, mode, eps):
        self.calls.append('batch_norm_backward')
        axes = self._axes(merged, mode)
        pc = lambda a: self._per_channel(a.astype(numpy.float32), merged, mode)  # noqa: E731
        xw, gw = x.reshape(merged).astype(numpy.float32), gy.reshape(merged).astype(
            numpy.float32)
        x_hat = (xw - pc(mean)) * pc(inv_std)
        count = xw.size // mean.size
        gbeta = gw.sum(axis=axes)
        ggamma = (gw * x_hat).sum(axis=axes)
        gx = pc(gamma) * pc(inv_std) * (gw - (x_hat * pc(ggamma) + pc(gbeta)) / count)
        return gx.astype(x.dtype), ggamma.reshape(-1), gbeta.reshape(-1)


@pytest.fixture
def emulated_cudnn(fake, monkeypatch):
    """cuDNN 'usable' on the stand-in, its calls emulated (_EmulatedCudnn)."""
    emulated = _EmulatedCudnn(fake)
    monkeypatch.setattr(cudnn, 'available', lambda: True)
    monkeypatch.setattr(cudnn, 'use_for', lambda kind, cp, data: kind not in cudnn.failures)
    for name in ('pooling_forward', 'pooling_backward', 'batch_norm_forward_training',
                 'batch_norm_forward_inference', 'batch_norm_backward'):
        monkeypatch.setattr(cudnn, name, getattr(emulated, name))
    return emulated


def _close(a, b, what):
    for i, (u, v) in enumerate(zip(a, b)):
        numpy.testing.assert_allclose(u, v, rtol=2e-5, atol=2e-5, err_msg='{} {}'.format(
            what, i))


@pytest.mark.parametrize('kind', KINDS)
def test_cudnn_path_gives_the_fallbacks_values_and_derivatives(emulated_cudnn, monkeypatch,
                                                               kind):
    with_cudnn = _ops_forward_and_grads(kind)
    calls = list(emulated_cudnn.calls)
    assert calls, 'the cuDNN path was not taken'
    expected_first = {'max': 'pooling_forward', 'average': 'pooling_forward',
                      'average_zero': 'pooling_forward',
                      'batch_norm': 'batch_norm_forward_training',
                      'fixed_batch_norm': 'batch_norm_forward_inference'}[kind]
    assert calls[0] == expected_first
    if kind in ('max', 'average', 'average_zero'):
        assert calls[1] == 'pooling_backward'  # (a linear pair: recorded, still cuDNN's)
    else:  # a recorded first derivative (double backprop) is the formula
        assert 'batch_norm_backward' not in calls
    monkeypatch.setattr(cudnn, 'use_for', lambda kind, cp, data: False)
    fallback = _ops_forward_and_grads(kind)
    for got, want, what in zip(with_cudnn, fallback, ('forward', 'first', 'second')):
        _close(got, want, '{} {}'.format(kind, what))


def test_max_pool_finds_the_argmax_only_for_a_second_derivative(emulated_cudnn):
    x = xgrad.array(numpy.random.RandomState(1).permutation(64).reshape(1, 1, 8, 8).astype(
        numpy.float32), device='cuda:0').require_grad()
    found = []
    window_max = pooling._window_max
    pooling._window_max = lambda *a: found.append(1) or window_max(*a)
    try:
        y = xgrad.max_pool(x, 2)
        gx, = xgrad.grad([xgrad.sum(y * y)], [x], enable_double_backprop=True)
        assert emulated_cudnn.calls == ['pooling_forward', 'pooling_backward']
        assert found == []
        ggx, = xgrad.grad([xgrad.sum(gx * gx)], [x])      # through the gather
    finally:
        pooling._window_max = window_max
    assert found == [1]


def test_batch_norm_first_derivative_is_cudnns(emulated_cudnn, monkeypatch):
    rs = numpy.random.RandomState(4)
    x, gy = rs.standard_normal((2, 6, 5, 4)).astype(numpy.float32) * 3
    gamma, beta = rs.uniform(0.5, 2, (2, 5)).astype(numpy.float32)

    def run():
        xs = [xgrad.array(a, device='cuda:0').require_grad() for a in (x, gamma, beta)]
        y = xgrad.batch_norm(*xs, axis=(0, 2))
        grads = xgrad.grad([y], xs, grad_outputs=[xgrad.array(gy, device='cuda:0')])
        return [y.to_numpy()] + [g.to_numpy() for g in grads]
    got = run()
    assert emulated_cudnn.calls == ['batch_norm_forward_training', 'batch_norm_backward']
    monkeypatch.setattr(cudnn, 'use_for', lambda kind, cp, data: False)
    _close(got, run(), 'batch norm')


def test_batch_norm_per_activation_is_cudnns(emulated_cudnn, monkeypatch):
    rs = numpy.random.RandomState(5)
    x = rs.standard_normal((8, 5)).astype(numpy.float32)

    def run():
        xs = [xgrad.array(x, device='cuda:0').require_grad(),
              xgrad.ones((5,), 'float32', device='cuda:0').require_grad(),
              xgrad.zeros((5,), 'float32', device='cuda:0').require_grad()]
        y = xgrad.batch_norm(*xs)
        return [y.to_numpy()] + [g.to_numpy() for g in xgrad.grad([xgrad.sum(y * y)], xs)]
    got = run()
    assert emulated_cudnn.calls == ['batch_norm_forward_training', 'batch_norm_backward']
    monkeypatch.setattr(cudnn, 'use_for', lambda kind, cp, data: False)
    _close(got, run(), 'per activation')


def test_batch_norm_running_statistics_from_cudnns_saved_ones(emulated_cudnn, monkeypatch):
    rs = numpy.random.RandomState(2)
    x = rs.standard_normal((6, 3, 4, 4)).astype(numpy.float32)

    def run():
        mean = xgrad.zeros((3,), 'float32', device='cuda:0')
        var = xgrad.ones((3,), 'float32', device='cuda:0')
        xgrad.batch_norm(xgrad.array(x, device='cuda:0'), xgrad.ones((3,), 'float32',
                         device='cuda:0'), xgrad.zeros((3,), 'float32', device='cuda:0'),
                         running_mean=mean, running_var=var, axis=(0, 2, 3))
        return mean.to_numpy(), var.to_numpy()
    got = run()
    assert emulated_cudnn.calls == ['batch_norm_forward_training']
    monkeypatch.setattr(cudnn, 'use_for', lambda kind, cp, data: False)
    _close(got, run(), 'running statistics')


def test_a_cudnn_error_falls_back_and_is_recorded(emulated_cudnn, monkeypatch):
    def fail(*args, **kwargs):
        raise cudnn.CudnnError('cudnnPoolingForward', 3000)
    monkeypatch.setattr(cudnn, 'pooling_forward', fail)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with_error = _ops_forward_and_grads('max')
    assert 'pool' in cudnn.failures and 'cudnnPoolingForward' in cudnn.failures['pool']
    assert any('falling back' in str(w.message) for w in caught)
    assert cudnn.path('pool').startswith('strided windows: cuDNN failed')
    monkeypatch.setattr(cudnn, 'use_for', lambda kind, cp, data: False)
    for got, want in zip(with_error, _ops_forward_and_grads('max')):
        _close(got, want, 'after the failure')


def test_batch_norm_outside_cudnns_axes_takes_the_fallback(emulated_cudnn):
    x = xgrad.array(numpy.random.RandomState(3).standard_normal((2, 3, 4)).astype(
        numpy.float32), device='cuda:0')
    xgrad.batch_norm(x, xgrad.ones((2, 4), 'float32', device='cuda:0'),
                     xgrad.zeros((2, 4), 'float32', device='cuda:0'), axis=1)
    xgrad.batch_norm(x, xgrad.ones((3,), 'float64', device='cuda:0'),   # float64 params
                     xgrad.zeros((3,), 'float64', device='cuda:0'), axis=(0, 2))
    assert emulated_cudnn.calls == []


def test_pooling_with_cover_all_windows_takes_the_fallback(emulated_cudnn):
    x = xgrad.array(numpy.arange(50, dtype=numpy.float32).reshape(1, 2, 5, 5),
                    device='cuda:0')
    xgrad.max_pool(x, 2, stride=2, cover_all=True)       # a 3rd window per axis
    xgrad.average_pool(x, 3, stride=1, pad=3)            # pad >= ksize
    assert emulated_cudnn.calls == []
    xgrad.max_pool(x, 2, stride=3, cover_all=True)       # no extra window: cuDNN's
    assert emulated_cudnn.calls == ['pooling_forward']


def test_the_modes_are_public_names_returning_the_previous_setting():
    for public, key in ((xgrad.set_cudnn_benchmark, 'benchmark'),
                        (xgrad.set_cudnn_deterministic, 'deterministic'),
                        (xgrad.set_cudnn_allow_tf32, 'allow_tf32')):
        before = cudnn.config[key]
        assert public(not before) is before
        assert cudnn.config[key] is (not before)
        assert public(before) is (not before)
        assert cudnn.config[key] is before


def test_turned_off_sets_and_restores_xgrad_cudnn(monkeypatch):
    monkeypatch.delenv('XGRAD_CUDNN', raising=False)
    with cudnn.turned_off():
        assert cudnn.disabled_reason() == 'XGRAD_CUDNN=0' and not cudnn.available()
    assert 'XGRAD_CUDNN' not in os.environ
    monkeypatch.setenv('XGRAD_CUDNN', '1')
    with pytest.raises(KeyError), cudnn.turned_off():
        raise KeyError
    assert os.environ['XGRAD_CUDNN'] == '1'
