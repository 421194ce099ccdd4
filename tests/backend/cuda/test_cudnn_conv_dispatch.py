"""cuDNN's convolution as the conv dispatcher's first choice on cuda devices
(xgrad/_ops/_conv/dispatch.py DEVICE_RULES), on the CPU stand-in with
cuDNN's three convolution calls emulated by the host's reference
convolution: the dispatcher takes it where cuDNN can run the shape, the
values and the first and second derivatives are the im2col path's, a cuDNN
error falls back, and XGRAD_CUDNN=0 between calls takes im2col."""

import warnings

import numpy
import pytest

import xgrad
from xgrad._backend import cudnn
from xgrad._ops._conv import dispatch
from xgrad._ops._conv.geometry import Geometry
from xgrad._ops._conv.reference import reference_conv

DEV = 'cuda:0'


def _host(a):
    return numpy.asarray(a.get() if hasattr(a, 'get') else a)


class _EmulatedConvolution:
    """convolution_forward / _backward_data / _backward_filter with cuDNN's
    contracts, computed on the host in float64 (the closed form: the
    reference convolution and its adjoints by xgrad on NumPy); counts calls."""

    def __init__(self, cp):
        self.cp = cp
        self.calls = []

    def _conv(self, x, w, stride, pad, dilation, groups):
        return reference_conv(x, w, None, tuple(stride), tuple(pad), False,
                              tuple(dilation or (1,) * (x.ndim - 2)), groups)

    def convolution_forward(self, x, w, stride, pad, dilation=None, groups=1):
        self.calls.append('forward')
        y = self._conv(_host(x).astype(numpy.float64), _host(w).astype(numpy.float64), stride,
                       pad, dilation, groups)
        return self.cp.asarray(y.astype(x.dtype))

    def _adjoint(self, x, w, gy, stride, pad, dilation, groups, wrt):
        xa = xgrad.array(x).require_grad()
        wa = xgrad.array(w).require_grad()
        y = xgrad.conv(xa, wa, stride=tuple(stride), pad=tuple(pad),
                       dilate=tuple(dilation or (1,) * (x.ndim - 2)), groups=groups)
        g, = xgrad.grad([y], [xa if wrt == 'x' else wa], grad_outputs=[xgrad.array(gy)])
        return g.to_numpy()

    def convolution_backward_data(self, w, gy, x_shape, stride, pad, dilation=None, groups=1):
        self.calls.append('backward_data')
        x = numpy.zeros(tuple(x_shape))
        g = self._adjoint(x, _host(w).astype(numpy.float64), _host(gy).astype(numpy.float64),
                          stride, pad, dilation, groups, 'x')
        return self.cp.asarray(g.astype(gy.dtype))

    def convolution_backward_filter(self, x, gy, w_shape, stride, pad, dilation=None,
                                    groups=1):
        self.calls.append('backward_filter')
        w = numpy.zeros(tuple(w_shape))
        g = self._adjoint(_host(x).astype(numpy.float64), w, _host(gy).astype(numpy.float64),
                          stride, pad, dilation, groups, 'w')
        return self.cp.asarray(g.astype(x.dtype))

    def convolution_transpose(self, x, w, outsize, stride, pad, dilation=None, groups=1):
        return self.convolution_backward_data(
            w, x, (x.shape[0], w.shape[1] * groups) + tuple(outsize), stride, pad, dilation,
            groups)


@pytest.fixture
def emulated(fake, monkeypatch):
    conv = _EmulatedConvolution(fake)
    failures = dict(cudnn.failures)
    monkeypatch.setattr(cudnn, 'device_reason', lambda cp=None: None)
    monkeypatch.setattr(cudnn, 'convolution_reason', lambda *args: None)
    for name in ('convolution_forward', 'convolution_backward_data',
                 'convolution_backward_filter', 'convolution_transpose'):
        monkeypatch.setattr(cudnn, name, getattr(conv, name))
    dispatch.clear_choices()
    yield conv
    cudnn.failures.clear()
    cudnn.failures.update(failures)
    dispatch.clear_choices()


def _without_cudnn(monkeypatch):
    monkeypatch.setattr(cudnn, 'device_reason', lambda cp=None: 'off for the comparison')
    dispatch.clear_choices()


CASES = [  # (transposed, x shape, w shape, stride, pad, dilate, groups)
    (False, (2, 3, 7, 6), (4, 3, 3, 3), 1, 1, 1, 1),
    (False, (2, 4, 9, 8), (6, 2, 3, 3), 2, 1, 1, 2),
    (False, (1, 2, 8, 8), (3, 2, 3, 3), 1, 2, 2, 1),
    (False, (2, 3, 5, 5), (4, 3, 1, 1), 1, 0, 1, 1),
    (True, (2, 4, 4, 5), (4, 3, 3, 3), 2, 1, 1, 1),
    (True, (2, 3, 6, 6), (3, 2, 3, 3), 1, 1, 1, 1),
]


def _forward_and_grads(transposed, xs, ws, stride, pad, dilate, groups, seed=0):
    rs = numpy.random.RandomState(seed)
    x = xgrad.array(rs.standard_normal(xs).astype(numpy.float32), device=DEV).require_grad()
    w = xgrad.array(rs.standard_normal(ws).astype(numpy.float32), device=DEV).require_grad()
    o = ws[1] * groups if transposed else ws[0]
    b = xgrad.array(rs.standard_normal(o).astype(numpy.float32), device=DEV).require_grad()
    if transposed:
        y = xgrad.conv_transpose(x, w, b, stride=stride, pad=pad, dilate=dilate, groups=groups)
    else:
        y = xgrad.conv(x, w, b, stride=stride, pad=pad, dilate=dilate, groups=groups)
    params = [x, w, b]
    gy = xgrad.array(rs.standard_normal(y.shape).astype(numpy.float32), device=DEV)
    grads = xgrad.grad([y], params, grad_outputs=[gy], enable_double_backprop=True)
    v = [xgrad.array(rs.standard_normal(g.shape).astype(numpy.float32), device=DEV)
         for g in grads]
    total = sum(xgrad.sum(g * u) for g, u in zip(grads, v))
    second = xgrad.grad([total], params[:2])
    return [y.to_numpy()] + [g.to_numpy() for g in grads] + [
        numpy.zeros(p.shape) if g is None else g.to_numpy() for g, p in zip(second, params)]


@pytest.mark.parametrize('case', CASES)
def test_cudnn_gives_im2cols_values_and_derivatives(emulated, monkeypatch, case):
    transposed, xs, ws, stride, pad, dilate, groups = case
    kernel = 'conv_transpose' if transposed else 'conv'
    assert xgrad.conv_algorithm(xs, ws, stride, pad, dilate, groups, transposed=transposed,
                                device=DEV).algorithm == 'cudnn'
    with_cudnn = _forward_and_grads(*case)
    first = {'conv': 'forward', 'conv_transpose': 'backward_data'}[kernel]
    assert emulated.calls[0] == first
    assert {'forward', 'backward_data', 'backward_filter'} <= set(emulated.calls)
    _without_cudnn(monkeypatch)
    assert xgrad.conv_algorithm(xs, ws, stride, pad, dilate, groups, transposed=transposed,
                                device=DEV).algorithm != 'cudnn'
    calls = len(emulated.calls)
    fallback = _forward_and_grads(*case)
    assert len(emulated.calls) == calls
    for i, (got, want) in enumerate(zip(with_cudnn, fallback)):
        numpy.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * abs(want).max(),
                                      err_msg='{} output {}'.format(case, i))


def test_cover_all_keeps_im2col(emulated):
    found = dispatch.decide('conv', False, (1, 2, 8, 8), (3, 2, 3, 3),
                            Geometry((3, 3), (2, 2), (0, 0), (1, 1), 1),
                            (4, 4), numpy.dtype(numpy.float32))
    assert found.algorithm == 'im2col'  # (8 - 3) // 2 + 1 = 3 positions, not cover_all's 4
    assert 'cover_all' in dispatch.cudnn_reason(
        (1, 2, 8, 8), (3, 2, 3, 3), (4, 4),
        Geometry((3, 3), (2, 2), (0, 0), (1, 1), 1), numpy.float32)


def test_a_cudnn_error_falls_back_to_im2col_and_is_recorded(emulated, monkeypatch):
    def fail(*args, **kwargs):
        raise cudnn.CudnnError('cudnnConvolutionForward', 3000)
    monkeypatch.setattr(cudnn, 'convolution_forward', fail)
    case = CASES[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with_error = _forward_and_grads(*case)
    assert 'conv' in cudnn.failures and 'cudnnConvolutionForward' in cudnn.failures['conv']
    assert any('falling back' in str(w.message) for w in caught)
    assert cudnn.path('conv').startswith('im2col: cuDNN failed')
    assert xgrad.conv_algorithm(case[1], case[2], 1, 1, device=DEV).algorithm == 'im2col'
    _without_cudnn(monkeypatch)
    for got, want in zip(with_error, _forward_and_grads(*case)):
        numpy.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * abs(want).max())


def test_xgrad_cudnn_0_between_calls_takes_im2col(emulated, monkeypatch):
    case = CASES[0]
    _forward_and_grads(*case)
    assert emulated.calls
    del emulated.calls[:]
    monkeypatch.setenv('XGRAD_CUDNN', '0')
    monkeypatch.setattr(cudnn, 'device_reason', lambda cp=None: cudnn.disabled_reason())
    _forward_and_grads(*case)
    assert emulated.calls == []
