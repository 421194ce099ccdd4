"""cuDNN against xgrad's own GPU path, on a real GPU (``pytest -m cuda``;
skipped, saying why, without one or without cuDNN): the convolution
functions (forward, backward data and filter, transposed; stride, pad,
dilation, groups, 1-3 spatial axes, three dtypes; heuristic, benchmark and
deterministic choice) against xgrad.conv / conv_transpose and their
gradients on the im2col path, and pooling and batch norm with cuDNN
against XGRAD_CUDNN=0, first and second derivatives included.
"""

import numpy
import pytest

import xgrad
from xgrad._backend import cuda, cudnn

TOL = {'float16': 2e-2, 'float32': 2e-4, 'float64': 1e-10}


@pytest.fixture
def gpu(cuda_runtime, monkeypatch):
    """cuda:0 on a real GPU with cuDNN usable (skip otherwise)."""
    if cuda_runtime != 'gpu':
        pytest.skip('needs a real GPU: the stand-in has no cuDNN (test_cudnn.py emulates it)')
    why = cudnn.device_reason()
    if why:
        pytest.skip('cuDNN is not usable on cuda:0: {}'.format(why))
    saved = dict(cudnn.config)
    yield cuda.cupy()
    cudnn.config.update(saved)
    cudnn.clear_plans()
    assert not cudnn.failures, cudnn.failures


def _close(got, want, dtype, what):
    got = numpy.asarray(got, numpy.float64)
    want = numpy.asarray(want, numpy.float64)
    scale = max(1.0, float(numpy.max(numpy.abs(want))) if want.size else 1.0)
    numpy.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype] * scale,
                                  err_msg=what)


# (x shape, w shape, stride, pad, dilation, groups)
GEOMETRIES = [
    ((2, 3, 9, 9), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 10, 8), (6, 4, 3, 2), (2, 1), (1, 0), (1, 1), 1),
    ((2, 4, 11, 11), (6, 2, 3, 3), (2, 2), (2, 1), (2, 1), 2),
    ((2, 8, 7, 7), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), 8),
    ((3, 2, 13), (5, 2, 4), (3,), (2,), (1,), 1),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), (1, 2, 1), (0, 1, 1), (1, 1, 1), 1),
    ((4, 16, 8, 8), (32, 16, 1, 1), (1, 1), (0, 0), (1, 1), 1),
]
# (mode, dtype): heuristics for every dtype; timed search (every algorithm
# run: the slow one) and deterministic choice in float32
MODES = [('heuristic', 'float16'), ('heuristic', 'float32'), ('heuristic', 'float64'),
         ('benchmark', 'float32'), ('deterministic', 'float32')]


def _set_mode(mode):
    cudnn.clear_plans()
    cudnn.set_benchmark(mode == 'benchmark')
    cudnn.set_deterministic(mode == 'deterministic')


@pytest.mark.parametrize('mode,dtype', MODES)
@pytest.mark.parametrize('geometry', GEOMETRIES)
def test_convolution_matches_the_im2col_path(gpu, geometry, dtype, mode):
    x_shape, w_shape, stride, pad, dilation, groups = geometry
    _set_mode(mode)
    rs = numpy.random.RandomState(0)
    xh = rs.uniform(-1, 1, x_shape).astype(dtype)
    wh = rs.uniform(-1, 1, w_shape).astype(dtype)
    x = xgrad.array(xh, device='cuda:0').require_grad()
    w = xgrad.array(wh, device='cuda:0').require_grad()
    with cudnn.turned_off():
        y = xgrad.conv(x, w, stride=stride, pad=pad, dilate=dilation, groups=groups)
        gyh = rs.uniform(-1, 1, y.shape).astype(dtype)
        gx, gw = xgrad.grad([y], [x, w], grad_outputs=[xgrad.array(gyh, device='cuda:0')])
    cp = gpu
    xr, wr, gyr = cp.asarray(xh), cp.asarray(wh), cp.asarray(gyh)
    got = cudnn.convolution_forward(xr, wr, stride, pad, dilation, groups)
    _close(cp.asnumpy(got), y.to_numpy(), dtype, 'forward')
    got = cudnn.convolution_backward_data(wr, gyr, x_shape, stride, pad, dilation, groups)
    _close(cp.asnumpy(got), gx.to_numpy(), dtype, 'backward data')
    got = cudnn.convolution_backward_filter(xr, gyr, w_shape, stride, pad, dilation, groups)
    _close(cp.asnumpy(got), gw.to_numpy(), dtype, 'backward filter')
    chosen = list(cudnn.chosen_algorithms().values())
    assert chosen and set(chosen[0]) == set(cudnn.DIRECTIONS)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('geometry', GEOMETRIES[:5])
def test_convolution_transpose_matches_xgrads(gpu, geometry, dtype):
    x_shape, w_shape, stride, pad, dilation, groups = geometry
    rs = numpy.random.RandomState(1)
    # conv_transpose maps conv's output back to its input: x of y's shape
    y_spatial = tuple(cudnn.conv_out_size(d, k, s, p, dl) for d, k, s, p, dl in zip(
        x_shape[2:], w_shape[2:], stride, pad, dilation))
    th = rs.uniform(-1, 1, (x_shape[0], w_shape[0]) + y_spatial).astype(dtype)
    wh = rs.uniform(-1, 1, w_shape).astype(dtype)   # (C_in of the transpose, C_out / g, k)
    with cudnn.turned_off():
        want = xgrad.conv_transpose(xgrad.array(th, device='cuda:0'),
                                    xgrad.array(wh, device='cuda:0'), stride=stride, pad=pad,
                                    outsize=x_shape[2:], dilate=dilation, groups=groups)
    cp = gpu
    got = cudnn.convolution_transpose(cp.asarray(th), cp.asarray(wh), x_shape[2:], stride,
                                      pad, dilation, groups)
    _close(cp.asnumpy(got), want.to_numpy(), dtype, 'conv_transpose')


def test_convolution_runs_on_cupys_current_stream(gpu):
    cp = gpu
    rs = numpy.random.RandomState(2)
    xh = rs.standard_normal((2, 3, 8, 8)).astype(numpy.float32)
    wh = rs.standard_normal((4, 3, 3, 3)).astype(numpy.float32)
    want = cp.asnumpy(cudnn.convolution_forward(cp.asarray(xh), cp.asarray(wh), (1, 1),
                                                (1, 1)))
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        got = cudnn.convolution_forward(cp.asarray(xh), cp.asarray(wh), (1, 1), (1, 1))
        stream.synchronize()
    numpy.testing.assert_array_equal(cp.asnumpy(got), want)


def _pool_and_norm(kind, dtype, seed=0):
    rs = numpy.random.RandomState(seed)
    dev = 'cuda:0'
    if kind.startswith('max') or kind.startswith('average'):
        shape = (2, 3, 9, 8) if not kind.endswith('1d') else (2, 3, 11)
        x = xgrad.array((rs.permutation(int(numpy.prod(shape))).reshape(shape) / 10).astype(
            dtype), device=dev).require_grad()
        if kind.startswith('max'):
            y = xgrad.max_pool(x, 3, stride=2, pad=1)
        else:
            y = xgrad.average_pool(x, 3, stride=2, pad=1,
                                   pad_mode='zero' if 'zero' in kind else 'ignore')
        params = [x]
    else:
        x = xgrad.array(rs.standard_normal((8, 4, 5, 6)).astype(dtype), device=dev)
        x = x.require_grad()
        gamma = xgrad.array(rs.uniform(0.5, 1.5, 4).astype(dtype), device=dev).require_grad()
        beta = xgrad.array(rs.standard_normal(4).astype(dtype), device=dev).require_grad()
        if kind == 'batch_norm':
            y = xgrad.batch_norm(x, gamma, beta, axis=(0, 2, 3))
        else:
            mean = xgrad.array(rs.standard_normal(4).astype(dtype), device=dev)
            var = xgrad.array(rs.uniform(0.5, 2, 4).astype(dtype), device=dev)
            y = xgrad.fixed_batch_norm(x, gamma, beta, mean, var, axis=(0, 2, 3))
        params = [x, gamma, beta]
    gy = xgrad.array(rs.standard_normal(y.shape).astype(dtype), device=dev)
    first = xgrad.grad([y], params, grad_outputs=[gy])
    grads = xgrad.grad([y], params, grad_outputs=[gy], enable_double_backprop=True)
    total = sum(xgrad.sum(g * g) for g in grads)
    second = xgrad.grad([total], params)
    return [y.to_numpy()] + [g.to_numpy() for g in first] + [
        numpy.zeros(p.shape) if g is None else g.to_numpy() for p, g in zip(params, second)]


POOL_NORM = ['max', 'max_1d', 'average', 'average_zero', 'average_1d', 'batch_norm',
             'fixed_batch_norm']


@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
@pytest.mark.parametrize('kind', POOL_NORM)
def test_pooling_and_batch_norm_match_the_fallback(gpu, monkeypatch, kind, dtype):
    calls = []
    for name in ('pooling_forward', 'batch_norm_forward_training',
                 'batch_norm_forward_inference'):
        original = getattr(cudnn, name)
        monkeypatch.setattr(cudnn, name, (lambda f, n: lambda *a, **k: calls.append(n) or
                                          f(*a, **k))(original, name))
    with_cudnn = _pool_and_norm(kind, dtype)
    assert calls, 'cuDNN was not used'
    monkeypatch.setenv('XGRAD_CUDNN', '0')
    fallback = _pool_and_norm(kind, dtype)
    for i, (got, want) in enumerate(zip(with_cudnn, fallback)):
        _close(got, want, dtype if dtype != 'float16' else 'float16', '{} {}'.format(kind, i))


def test_batch_norm_running_statistics_match_the_fallback(gpu, monkeypatch):
    x = numpy.random.RandomState(3).standard_normal((16, 4, 7, 7)).astype(numpy.float32)

    def run():
        mean = xgrad.zeros((4,), 'float32', device='cuda:0')
        var = xgrad.ones((4,), 'float32', device='cuda:0')
        xgrad.batch_norm(xgrad.array(x, device='cuda:0'),
                         xgrad.ones((4,), 'float32', device='cuda:0'),
                         xgrad.zeros((4,), 'float32', device='cuda:0'),
                         running_mean=mean, running_var=var, axis=(0, 2, 3))
        return mean.to_numpy(), var.to_numpy()
    got = run()
    monkeypatch.setenv('XGRAD_CUDNN', '0')
    for g, w in zip(got, run()):
        numpy.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('transposed', [False, True])
@pytest.mark.parametrize('geometry', GEOMETRIES[:4])
def test_the_dispatcher_takes_cudnn_with_im2cols_derivatives(gpu, geometry, transposed, dtype):
    """xgrad.conv / conv_transpose through the dispatcher (cuDNN) against
    XGRAD_CUDNN=0 (im2col): values, first and second derivatives."""
    x_shape, w_shape, stride, pad, dilation, groups = geometry
    if transposed:
        x_shape = (x_shape[0], w_shape[0]) + tuple(cudnn.conv_out_size(
            d, k, s, p, dl) for d, k, s, p, dl in zip(x_shape[2:], w_shape[2:], stride, pad,
                                                      dilation))
    assert xgrad.conv_algorithm(x_shape, w_shape, stride, pad, dilation, groups,
                                transposed=transposed, device='cuda:0').algorithm == 'cudnn'

    def run():
        rs = numpy.random.RandomState(3)
        x = xgrad.array(rs.uniform(-1, 1, x_shape).astype(dtype), device='cuda:0')
        w = xgrad.array(rs.uniform(-1, 1, w_shape).astype(dtype), device='cuda:0')
        x, w = x.require_grad(), w.require_grad()
        f = xgrad.conv_transpose if transposed else xgrad.conv
        y = f(x, w, stride=stride, pad=pad, dilate=dilation, groups=groups)
        gy = xgrad.array(rs.uniform(-1, 1, y.shape).astype(dtype), device='cuda:0')
        gx, gw = xgrad.grad([y], [x, w], grad_outputs=[gy], enable_double_backprop=True)
        total = xgrad.sum(gx * gx) + xgrad.sum(gw * gw)
        hx, hw = xgrad.grad([total], [x, w])
        return [a.to_numpy() for a in (y, gx, gw, hx, hw)]
    got = run()
    with cudnn.turned_off():
        want = run()
    for i, (g, w) in enumerate(zip(got, want)):
        _close(g, w, dtype, 'output {}'.format(i))


def test_info_says_cudnn_runs_pooling_and_batch_norm(gpu):
    assert cudnn.path('conv').startswith('cudnn ')
    assert cudnn.path('pool').startswith('cudnn ')
    assert cudnn.path('batch_norm').startswith('cudnn ')
