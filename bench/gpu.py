#!/usr/bin/env python
"""xgrad on a GPU, side by side with CuPy (and PyTorch on CUDA where installed).

    python bench/gpu.py [--out bench/results/gpu-h200.json] [--elements N] [--quick]

Measures, in this one process:

* ``copy``: device-to-device copy bandwidth of a float32 array of N elements
  (read + write), the ceiling an elementwise kernel can reach;
* ``elementwise``: xgrad.tanh forward (recorded) and its backward (one fused
  kernel, gx = gy * (1 - y * y)) on the same N elements, as bandwidth (bytes
  the kernels must move / time) and as a fraction of the copy bandwidth
  (target >= 0.8), with the number of our kernel launches per call (target 1);
* ``mlp_step``: one training step of a 3-layer ReLU MLP, batch 256, 1024 wide
  (squared-error loss, as bench/_mlp.py), for xgrad on the GPU, xgrad on the
  CPU (native:0), a hand-written CuPy step (the floor) and PyTorch (target:
  xgrad <= 1.1x PyTorch).

With ``XGRAD_GPU_DRY_RUN=1`` (run it as ``python bench/_dry_run.py
bench/gpu.py``) it runs on the CPU stand-in for CuPy with small sizes: a
check of the script, not a measurement.

Every time is the median over rounds, each ended by a device synchronize.
The gradients of each framework's MLP step are compared before timing.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if _BENCH_DIR not in sys.path:
    sys.path.insert(0, _BENCH_DIR)

import numpy  # noqa: E402

import _mlp  # noqa: E402

DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'gpu-h200.json')
DEFAULT_ELEMENTS = 256 * 1024 * 1024
MLP_SIZES = (1024, 1024, 1024, 1024)  # 3 layers, 1024 wide
MLP_BATCH = 256


def _timer(cp, rounds, warmup):
    """``measure(fn, setup=None)``: the median seconds of ``fn()`` + a device
    synchronize; ``setup()`` (untimed, synchronized) runs before each call."""
    device = cp.cuda.Device()

    def measure(fn, setup=None):
        times = []
        for i in range(warmup + rounds):
            if setup is not None:
                setup()
            device.synchronize()
            start = time.perf_counter()
            fn()
            device.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - start)
        return statistics.median(times)
    return measure


class _LaunchCounter:
    """Counts the launches of our kernels (xgrad._kernels) while active."""

    def __init__(self):
        from xgrad import _kernels
        self._kernels = _kernels
        self.count = 0

    def __enter__(self):
        self._original = self._kernels._launch

        def counted(*args):
            self.count += 1
            return self._original(*args)
        self._kernels._launch = counted
        return self

    def __exit__(self, *exc):
        self._kernels._launch = self._original


def bench_elementwise(xgrad, cp, n, measure):
    x = xgrad.array(numpy.linspace(-3, 3, n, dtype=numpy.float32), device='cuda:0')
    gy = xgrad.ones((n,), 'float32', device='cuda:0')
    src = xgrad._core._raw_data(x)
    dst = cp.empty_like(src)
    nbytes = src.nbytes

    copy_s = measure(lambda: cp.copyto(dst, src))
    copy_bw = 2 * nbytes / copy_s

    xr = x.copy().require_grad()
    state = {}

    def forward():
        state['y'] = xgrad.tanh(xr)

    def backward():
        return xgrad.grad([state['y']], [xr], grad_outputs=[gy])

    fwd_s = measure(forward)
    with _LaunchCounter() as fwd_launches:
        forward()
    bwd_s = measure(backward, setup=forward)  # a graph is backpropagated once
    forward()
    with _LaunchCounter() as bwd_launches:
        gx, = backward()
    y = state['y'].to_numpy()[:1000].astype(numpy.float64)
    expected = 1 - y * y
    err = float(numpy.max(numpy.abs(gx.to_numpy()[:1000] - expected)))
    fwd_bw = 2 * nbytes / fwd_s       # read x, write y
    bwd_bw = 3 * nbytes / bwd_s       # read gy and y, write gx
    both_bw = 5 * nbytes / (fwd_s + bwd_s)
    return {
        'elements': n, 'dtype': 'float32',
        'copy': {'seconds': copy_s, 'bandwidth_GBps': copy_bw / 1e9},
        'tanh_forward': {'seconds': fwd_s, 'bandwidth_GBps': fwd_bw / 1e9,
                         'fraction_of_copy': fwd_bw / copy_bw,
                         'our_kernel_launches': fwd_launches.count},
        'tanh_backward': {'seconds': bwd_s, 'bandwidth_GBps': bwd_bw / 1e9,
                          'fraction_of_copy': bwd_bw / copy_bw,
                          'our_kernel_launches': bwd_launches.count,
                          'max_abs_error_first_1000': err},
        'forward_and_backward': {'fraction_of_copy': both_bw / copy_bw,
                                 'target': 0.8, 'met': both_bw / copy_bw >= 0.8},
    }


def _grads_close(a, b, what):
    for i, (g, h) in enumerate(zip(a, b)):
        g, h = numpy.asarray(g, numpy.float64), numpy.asarray(h, numpy.float64)
        scale = max(1e-6, float(numpy.max(numpy.abs(h))))
        err = float(numpy.max(numpy.abs(g - h))) / scale
        if err > 1e-3:
            raise AssertionError('{}: gradient {} differs from the CuPy floor by {:.2e} '
                                 '(relative to its largest entry)'.format(what, i, err))


def bench_mlp(xgrad, cp, torch, measure, batch, sizes):
    rng = numpy.random.default_rng(0)
    data = _mlp.make_data(rng, batch, sizes)
    results = {'batch': batch, 'sizes': list(sizes)}

    gpu_data = {'x': cp.asarray(data['x']), 't': cp.asarray(data['t']),
                'params': [cp.asarray(p) for p in data['params']]}
    floor = _mlp.build_numpy(cp, gpu_data)
    with xgrad.using_device('cuda:0'):
        step = _mlp.build_xgrad(xgrad, data)
    reference = [cp.asnumpy(g) for g in floor()[1]]
    _grads_close([g.to_numpy() for g in step()[1]], reference, 'xgrad')
    results['cupy_floor'] = {'seconds': measure(floor)}
    results['xgrad'] = {'seconds': measure(step)}
    with xgrad.using_device('native:0'):
        cpu_step = _mlp.build_xgrad(xgrad, data)
    _grads_close([g.to_numpy() for g in cpu_step()[1]], reference, 'xgrad on the CPU')
    results['xgrad_cpu'] = {'seconds': measure(cpu_step)}
    results['cpu_over_gpu'] = results['xgrad_cpu']['seconds'] / results['xgrad']['seconds']

    if torch is not None:
        torch_step = _mlp.build_torch(torch, data, device='cuda')
        _grads_close([g.cpu().numpy() for g in torch_step()[1]], reference, 'torch')
        results['torch'] = {'seconds': measure(lambda: (torch_step(), torch.cuda.synchronize()))}
        ratio = results['xgrad']['seconds'] / results['torch']['seconds']
        results['xgrad_over_torch'] = {'ratio': ratio, 'target': 1.1, 'met': ratio <= 1.1}
    else:
        results['torch'] = None
        results['xgrad_over_torch'] = {'ratio': None, 'target': 1.1, 'met': None,
                                       'why': 'PyTorch with CUDA is not installed here'}
    results['xgrad_over_cupy_floor'] = (results['xgrad']['seconds']
                                        / results['cupy_floor']['seconds'])
    return results


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', default=DEFAULT_OUT)
    parser.add_argument('--elements', type=int, default=DEFAULT_ELEMENTS)
    parser.add_argument('--quick', action='store_true', help='few rounds (a smoke test)')
    parser.add_argument('--mlp-batch', type=int, default=MLP_BATCH)
    parser.add_argument('--mlp-width', type=int, default=MLP_SIZES[0])
    args = parser.parse_args(argv)
    dry_run = os.environ.get('XGRAD_GPU_DRY_RUN') == '1'
    if dry_run:  # the stand-in: small sizes, few rounds
        args.elements, args.mlp_batch, args.mlp_width, args.quick = 1 << 14, 16, 32, True

    import xgrad
    from xgrad._backend import cuda
    cp = cuda.cupy()
    xgrad.get_device('cuda:0')  # a DeviceError saying what is missing
    rounds, warmup = (3, 1) if args.quick else (20, 3)
    measure = _timer(cp, rounds, warmup)
    torch = _torch()

    report = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'machine': {'python': platform.python_version(), 'platform': platform.platform(),
                    'cupy': getattr(cp, '__version__', 'stand-in'),
                    'numpy': numpy.__version__,
                    'torch': None if torch is None else torch.__version__,
                    'gpu': _gpu_name(cp)},
        'rounds': rounds,
        'dry_run': dry_run,
        'elementwise': bench_elementwise(xgrad, cp, args.elements, measure),
        'mlp_step': bench_mlp(xgrad, cp, torch, measure, args.mlp_batch,
                              (args.mlp_width,) * 4),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=2)
    _print(report)
    return report


def _gpu_name(cp):
    try:
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props['name']
        return name.decode() if isinstance(name, bytes) else name
    except Exception:  # NOQA: a stand-in has no properties
        return 'unknown'


def _print(report):
    e = report['elementwise']
    print('copy            {:8.1f} GB/s'.format(e['copy']['bandwidth_GBps']))
    for k in ('tanh_forward', 'tanh_backward'):
        print('{:15s} {:8.1f} GB/s  {:5.2f} of copy  {} launch(es)'.format(
            k, e[k]['bandwidth_GBps'], e[k]['fraction_of_copy'], e[k]['our_kernel_launches']))
    print('fwd+bwd         {:5.2f} of copy (target 0.8)'.format(
        e['forward_and_backward']['fraction_of_copy']))
    m = report['mlp_step']
    print('mlp step        xgrad {:.3f} ms (CPU {:.3f} ms), CuPy floor {:.3f} ms, '
          'torch {}'.format(
        m['xgrad']['seconds'] * 1e3, m['xgrad_cpu']['seconds'] * 1e3,
        m['cupy_floor']['seconds'] * 1e3,
        'n/a' if m['torch'] is None else '{:.3f} ms (ratio {:.2f}, target 1.1)'.format(
            m['torch']['seconds'] * 1e3, m['xgrad_over_torch']['ratio'])))


if __name__ == '__main__':
    main()
