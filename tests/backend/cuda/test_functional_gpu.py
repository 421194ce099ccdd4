"""xgrad.functional and xgrad.checkpoint on cuda:0 (the CPU stand-in, or a
real GPU): the same values as on native:0, results on the device, no host
read, and checkpoint's recomputation reusing a dropout mask drawn by the
GPU's own generator (kept on the tape as the mask itself)."""

import numpy

import xgrad
from xgrad import functional as F


def _pair(data):
    return xgrad.array(data), xgrad.array(data, device='cuda:0')


def _close(gpu, cpu):
    assert gpu.device.name == 'cuda:0'
    numpy.testing.assert_allclose(gpu.to_numpy(), cpu.to_numpy(), rtol=1e-12, atol=1e-12)


def test_transforms_on_cuda(cuda_runtime):
    from backend.cuda import fake_cupy
    rs = numpy.random.RandomState(0)
    (x, xg), (w, wg), (v, vg) = (_pair(rs.randn(*s)) for s in ((3,), (3, 2), (3,)))

    def f(a, W):
        return xgrad.tanh(a @ W)

    def s(a):
        return xgrad.sum(xgrad.tanh(a) * a)

    fake_cupy.host_reads.clear()
    results = [F.jacobian(f, xg, wg), F.hessian(s, xg), F.hvp(s, xg, vg)[1],
               F.jvp(f, (xg, wg), (vg, wg))[1], F.vjp(f, xg, wg)[1](xgrad.ones(
                   (2,), 'float64', device='cuda:0'))]
    if cuda_runtime == 'emulated':
        assert fake_cupy.host_reads == []
    expected = [F.jacobian(f, x, w), F.hessian(s, x), F.hvp(s, x, v)[1],
                F.jvp(f, (x, w), (v, w))[1], F.vjp(f, x, w)[1](xgrad.ones((2,), 'float64'))]
    for got, want in zip(results, expected):
        for g, e in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            _close(g, e)


def test_checkpoint_reuses_a_gpu_drawn_mask(cuda_runtime):
    rs = numpy.random.RandomState(1)
    x = xgrad.array(rs.randn(4, 6), device='cuda:0').require_grad()
    W = xgrad.array(rs.randn(6, 6), device='cuda:0').require_grad()

    def fn(h, W):
        return xgrad.dropout(xgrad.tanh(h @ W), 0.5)  # CuPy's generator on the GPU

    y = xgrad.checkpoint(fn, x, W)
    kept = y.to_numpy() != 0
    assert 0 < kept.sum() < kept.size
    y.backward()
    t = numpy.tanh(x.to_numpy() @ W.to_numpy())
    expected = x.to_numpy().T @ (kept * 2 * (1 - t * t))
    assert W.grad.device.name == 'cuda:0'
    numpy.testing.assert_allclose(W.grad.to_numpy(), expected, rtol=1e-12, atol=1e-12)
