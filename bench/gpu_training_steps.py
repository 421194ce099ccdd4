#!/usr/bin/env python
"""GPU training steps and launch overhead: xgrad on cuda:0 against PyTorch CUDA.

    python bench/gpu_training_steps.py [--only cnn,resnet18] [--out PATH]
    python bench/gpu_training_steps.py --overhead [--out PATH]
    python bench/gpu_training_steps.py --dry-run [--overhead]   # CPU: checks the script

Training steps (default): bench/training_steps.py's four (cnn, lstm,
wgan_gp, swish_mlp) and a ResNet-18 CIFAR step (``resnet18``: batch 128,
3x32x32, BasicBlocks 64-128-256-512, batch norm with batch statistics, global
average pool, linear 512->10, softmax cross entropy; ``resnet18_fp16`` the
same in float16). Every framework starts from the same weights and data; the
loss and every gradient are compared with torch's before timing. Variants,
timed side by side in rounds whose first step rotates (_timing.measure;
each step ended by a device synchronize):

* ``xgrad``: as a user gets it (xgrad.conv's dispatcher; cuDNN pooling and
  batch norm where cuDNN is usable);
* ``xgrad_cudnn_conv`` (steps with convolutions, where xgrad.conv's
  dispatcher does not take cuDNN: the dry run's stand-in, or a cuDNN
  failure): the convolutions through xgrad._backend.cudnn's functions as a
  bench-local FunctionNode;
* ``xgrad_no_cudnn``: the same step with ``XGRAD_CUDNN=0`` set around each
  call (today's im2col / strided-window path);
* ``torch`` (cuDNN heuristics, no TF32: ``torch.backends.cudnn.allow_tf32 =
  False``, as xgrad's float32 runs in float32).

Per step and variant: the median time, the median of the per-round ratios to
torch (``xgrad_over_torch`` for ``xgrad``; the best cuDNN variant's too),
each framework's peak GPU memory during one step above what was allocated
before it (CuPy's pool through a counting allocator; torch's
max_memory_allocated), the convolution path, and the im2col-over-cuDNN
speedup. Written after each step (a run cut short keeps what it measured) to
``bench/results/gpu_training_steps_<gpu>_<date>.json``.

``--overhead``: bench/run.py's small graphs (elementwise_chain: 1,500 tiny
ops; mlp_step: a 32-wide MLP) on cuda:0 against torch CUDA: wall and
process CPU microseconds per iteration and per op, launched back to back
with one synchronize at the end.

``--dry-run``: on the CPU stand-in for CuPy (tests/backend/cuda/fake_cupy.py), torch
on the CPU, tiny shapes and two rounds: a test of the script, not a
measurement (tests/backend/cuda/test_gpu_bench.py runs it).
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import statistics
import sys
import time

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if _BENCH_DIR not in sys.path:
    sys.path.insert(0, _BENCH_DIR)

import numpy  # noqa: E402

import _mlp  # noqa: E402
import _timing  # noqa: E402
import bench_elementwise_chain  # noqa: E402
import bench_mlp_step  # noqa: E402
import training_steps  # noqa: E402

RESNET_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))  # (width, first stride)
RESNET_CLASSES = 10


# ---------------------------------------------------------------------------
# Frameworks on a device

class TorchOn:
    """torch whose from_numpy and zeros make tensors on ``device``, so that
    training_steps.py's builders run there unchanged."""

    def __init__(self, torch, device):
        self._torch = torch
        self._device = device

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def from_numpy(self, a):
        return self._torch.from_numpy(a).to(self._device)

    def zeros(self, *args, **kwargs):
        kwargs.setdefault('device', self._device)
        return self._torch.zeros(*args, **kwargs)


class XgradWith:
    """xgrad with ``conv`` replaced (the bench-local cuDNN convolution)."""

    def __init__(self, xgrad, conv):
        self._xgrad = xgrad
        self.conv = conv

    def __getattr__(self, name):
        return getattr(self._xgrad, name)


def cudnn_conv(xgrad):
    """conv(x, w, b=None, stride=1, pad=0) through xgrad._backend.cudnn's
    functions: a FunctionNode whose gradient is another (first order only)."""
    from xgrad._backend import cudnn

    class ConvGrad(xgrad.FunctionNode):
        def __init__(self, stride, pad, targets):
            self.stride, self.pad, self.targets = stride, pad, targets

        def forward(self, inputs):
            x, w, gy = inputs
            out = []
            if 0 in self.targets:
                out.append(cudnn.convolution_backward_data(w, gy, x.shape, self.stride,
                                                           self.pad))
            if 1 in self.targets:
                out.append(cudnn.convolution_backward_filter(x, gy, w.shape, self.stride,
                                                             self.pad))
            return tuple(out)

    class Conv(xgrad.FunctionNode):
        def __init__(self, stride, pad):
            self.stride, self.pad = stride, pad

        def forward(self, inputs):
            x, w = inputs
            self.retain_inputs((0, 1))
            return (cudnn.convolution_forward(x, w, self.stride, self.pad),)

        def backward(self, target_input_indexes, grad_outputs):
            x, w = self.get_retained_inputs()
            targets = tuple(target_input_indexes)
            grads = ConvGrad(self.stride, self.pad, targets).apply((x, w, grad_outputs[0]))
            return tuple(grads)

    def conv(x, w, b=None, stride=1, pad=0):
        n = x.ndim - 2
        s = (stride,) * n if isinstance(stride, int) else tuple(stride)
        p = (pad,) * n if isinstance(pad, int) else tuple(pad)
        y, = Conv(s, p).apply((x, w))
        if b is not None:
            y = y + xgrad.reshape(b, (1, -1) + (1,) * n)
        return y
    return conv


def emulate_cudnn_conv(xgrad, cudnn):
    """The dry run's stand-in for cuDNN's convolution functions (the CPU has
    no cuDNN): the same contracts, computed by xgrad.conv on the stand-in,
    so that the ``xgrad_cudnn_conv`` variant's code runs."""
    from xgrad._core import _raw_data

    def wrap(raw, grad=False):
        a = xgrad.array(raw, device='cuda:0')
        return a.require_grad() if grad else a

    def conv(x, w, stride, pad):
        return xgrad.conv(x, w, stride=tuple(stride), pad=tuple(pad))

    def forward(x, w, stride, pad, dilation=None, groups=1):
        return _raw_data(conv(wrap(x), wrap(w), stride, pad))

    def backward_data(w, gy, x_shape, stride, pad, dilation=None, groups=1):
        with xgrad.force_backprop_mode():  # (called inside a FunctionNode's forward)
            x = xgrad.zeros(tuple(x_shape), gy.dtype, device='cuda:0').require_grad()
            gx, = xgrad.grad([conv(x, wrap(w), stride, pad)], [x], grad_outputs=[wrap(gy)])
        return _raw_data(gx)

    def backward_filter(x, gy, w_shape, stride, pad, dilation=None, groups=1):
        with xgrad.force_backprop_mode():
            w = xgrad.zeros(tuple(w_shape), gy.dtype, device='cuda:0').require_grad()
            gw, = xgrad.grad([conv(wrap(x), w, stride, pad)], [w], grad_outputs=[wrap(gy)])
        return _raw_data(gw)
    saved = {name: getattr(cudnn, name) for name in (
        'convolution_forward', 'convolution_backward_data', 'convolution_backward_filter')}
    cudnn.convolution_forward = forward
    cudnn.convolution_backward_data = backward_data
    cudnn.convolution_backward_filter = backward_filter

    def restore():
        for name, f in saved.items():
            setattr(cudnn, name, f)
    return restore


# ---------------------------------------------------------------------------
# ResNet-18 (CIFAR)

def resnet_data(rng, batch=128, size=32, width=64, dtype='float32'):
    """Input, labels and parameters (He-initialized convolutions without
    bias, batch norm gamma 1 / beta 0, the classifier) of a ResNet-18 whose
    stages are ``width`` * (1, 2, 4, 8) wide."""
    def conv_w(o, c, k):
        return (rng.standard_normal((o, c, k, k)) * numpy.sqrt(2.0 / (c * k * k))).astype(dtype)

    def bn(c):
        return [numpy.ones(c, dtype), numpy.zeros(c, dtype)]

    params, layout = [conv_w(width, 3, 3)] + bn(width), []
    c = width
    for mult, first_stride in ((1, 1), (2, 2), (4, 2), (8, 2)):
        o = width * mult
        for stride in (first_stride, 1):
            shortcut = stride != 1 or c != o
            params += [conv_w(o, c, 3)] + bn(o) + [conv_w(o, o, 3)] + bn(o)
            if shortcut:
                params += [conv_w(o, c, 1)] + bn(o)
            layout.append((stride, shortcut))
            c = o
    params += [(rng.standard_normal((c, RESNET_CLASSES)) / numpy.sqrt(c)).astype(dtype),
               numpy.zeros(RESNET_CLASSES, dtype)]
    return {'x': rng.standard_normal((batch, 3, size, size)).astype(dtype),
            'labels': rng.integers(0, RESNET_CLASSES, batch).astype(numpy.int64),
            'params': params, 'layout': layout}


def resnet_xgrad(X, d):
    x, t = X.array(d['x']), X.array(d['labels'])
    params = [X.array(p).require_grad() for p in d['params']]

    def bn(h, g, b):
        return X.batch_norm(h, g, b, eps=1e-5, axis=(0, 2, 3))

    def step():
        for p in params:
            p.cleargrad()
        it = iter(params)
        h = X.relu(bn(X.conv(x, next(it), pad=1), next(it), next(it)))
        for stride, shortcut in d['layout']:
            w1, g1, b1, w2, g2, b2 = [next(it) for _ in range(6)]
            o = X.relu(bn(X.conv(h, w1, stride=stride, pad=1), g1, b1))
            o = bn(X.conv(o, w2, pad=1), g2, b2)
            if shortcut:
                ws, gs, bs = [next(it) for _ in range(3)]
                h = bn(X.conv(h, ws, stride=stride), gs, bs)
            h = X.relu(o + h)
        W, b = next(it), next(it)
        y = X.mean(h, axis=(2, 3)) @ W + b
        loss = X.mean(X.softmax_cross_entropy(y, t))
        loss.backward()
        return loss, [p.grad for p in params]
    return step


def resnet_torch(torch, d):
    x, t = torch.from_numpy(d['x']), torch.from_numpy(d['labels'])
    params = [torch.from_numpy(p.copy()).requires_grad_() for p in d['params']]
    F = torch.nn.functional

    def bn(h, g, b):
        return F.batch_norm(h, None, None, g, b, training=True, eps=1e-5)

    def step():
        for p in params:
            p.grad = None
        it = iter(params)
        h = F.relu(bn(F.conv2d(x, next(it), padding=1), next(it), next(it)))
        for stride, shortcut in d['layout']:
            w1, g1, b1, w2, g2, b2 = [next(it) for _ in range(6)]
            o = F.relu(bn(F.conv2d(h, w1, stride=stride, padding=1), g1, b1))
            o = bn(F.conv2d(o, w2, padding=1), g2, b2)
            if shortcut:
                ws, gs, bs = [next(it) for _ in range(3)]
                h = bn(F.conv2d(h, ws, stride=stride), gs, bs)
            h = F.relu(o + h)
        W, b = next(it), next(it)
        y = h.mean(dim=(2, 3)) @ W + b
        loss = F.cross_entropy(y, t)
        loss.backward()
        return loss, [p.grad for p in params]
    return step


# name: (data, xgrad builder, torch builder, has convolutions, tolerance (rtol, atol scale))
def _tiny_swish_data(rng):
    d = training_steps.swish_data(rng)
    return dict(d, x=d['x'][:8], t=d['t'][:8])


def _steps(tiny):
    workloads = dict(training_steps.WORKLOADS)
    if tiny:  # the dry run: the same code on small shapes (cnn's batch 64 is fixed)
        training_steps.LSTM_STEPS, training_steps.LSTM_BATCH = 3, 2
        training_steps.GAN_BATCH = 4
        make, bx, bt = workloads['swish_mlp']
        workloads['swish_mlp'] = (_tiny_swish_data, bx, bt)

        def resnet(dtype):
            return lambda rng: resnet_data(rng, batch=8, size=8, width=4, dtype=dtype)
    else:
        def resnet(dtype):
            return lambda rng: resnet_data(rng, dtype=dtype)
    steps = {name: (make, bx, bt, name == 'cnn', (training_steps.RTOL, training_steps.ATOL_SCALE))
             for name, (make, bx, bt) in workloads.items()}
    # ResNet's 20 layers of float32 reductions in other orders (cuDNN, cuBLAS,
    # torch's kernels) move gradients by more than the four small steps'.
    steps['resnet18'] = (resnet('float32'), resnet_xgrad, resnet_torch, True, (2e-3, 2e-3))
    steps['resnet18_fp16'] = (resnet('float16'), resnet_xgrad, resnet_torch, True,
                              (5e-2, 5e-2))
    return steps


# ResNet-18 first: the step the cuDNN work is for, measured even if the budget runs out
STEP_NAMES = ['resnet18', 'cnn', 'lstm', 'wgan_gp', 'swish_mlp', 'resnet18_fp16']


# ---------------------------------------------------------------------------
# Measuring

def _numpy(a):
    if hasattr(a, 'detach'):
        return a.detach().float().cpu().numpy()
    return numpy.asarray(a.to_numpy(), dtype=numpy.float32)


def compare(xgrad_step, torch_step, rtol, atol_scale):
    """The largest error of loss and gradients as a fraction of the
    tolerance (<= 1: agree); the second call of each step (the first warms)."""
    xgrad_step()
    torch_step()
    ours = xgrad_step()
    theirs = torch_step()
    ours = [_numpy(ours[0])] + [_numpy(g) for g in ours[1]]
    theirs = [_numpy(theirs[0])] + [_numpy(g) for g in theirs[1]]
    worst, where = 0.0, None
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if a.shape != b.shape:
            return float('inf'), 'shape of {}: {} vs {}'.format(k, a.shape, b.shape)
        atol = atol_scale * float(numpy.max(numpy.abs(b))) + 1e-30
        err = float(numpy.max(numpy.abs(a - b) / (atol + rtol * numpy.abs(b)))) if a.size else 0
        if err > worst:
            worst, where = err, 'loss' if k == 0 else 'gradient {}'.format(k - 1)
    return worst, where


class Device:
    """Synchronize and memory counters of both frameworks on one device (or
    the stand-in and torch on the CPU)."""

    def __init__(self, cp, torch, torch_device, real):
        self.cp, self.torch, self.torch_device, self.real = cp, torch, torch_device, real

    def sync_xgrad(self):
        self.cp.cuda.Device(0).synchronize()

    def sync_torch(self):
        if self.torch_device == 'cuda':
            self.torch.cuda.synchronize()

    def xgrad_peak(self, step):
        """Peak bytes of CuPy's pool above its use before ``step``."""
        if not self.real:
            return None
        cp = self.cp
        pool = cp.get_default_memory_pool()
        self.sync_xgrad()
        before = pool.used_bytes()
        peak = [before]

        def malloc(size):
            mem = pool.malloc(size)
            used = pool.used_bytes()
            if used > peak[0]:
                peak[0] = used
            return mem
        cp.cuda.set_allocator(malloc)
        try:
            step()
            self.sync_xgrad()
        finally:
            cp.cuda.set_allocator(pool.malloc)
        return peak[0] - before

    def torch_peak(self, step):
        if self.torch_device != 'cuda':
            return None
        torch = self.torch
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before


def _conv_path(cudnn):
    return 'cudnn' if cudnn.path('conv').startswith('cudnn') else 'im2col'


def run_step(name, spec, env, settings):
    """One training step's check, paired timing and memory; a dict."""
    import xgrad
    from xgrad._backend import cudnn
    make, build_x, build_t, has_conv, (rtol, atol_scale) = spec
    data = make(numpy.random.default_rng(0))
    dev = env.device
    usable = cudnn.device_reason(env.device.cp) is None or env.dry_run

    def xgrad_variant(module, off=False):
        with xgrad.using_device('cuda:0'):
            step = build_x(module, data)

        def call():
            with xgrad.using_device('cuda:0'), (cudnn.turned_off() if off else _nullcontext()):
                return step()
        return call

    variants = {'xgrad': xgrad_variant(xgrad)}
    dispatcher = _conv_path(cudnn)
    if has_conv and usable and dispatcher != 'cudnn':
        variants['xgrad_cudnn_conv'] = xgrad_variant(XgradWith(xgrad, cudnn_conv(xgrad)))
    if usable:
        variants['xgrad_no_cudnn'] = xgrad_variant(xgrad, off=True)
    variants['torch'] = build_t(env.torch_on, data)

    result = {'conv_path': {'xgrad': dispatcher if has_conv else None}, 'variants': {}}
    if 'xgrad_cudnn_conv' in variants:
        result['conv_path']['xgrad_cudnn_conv'] = 'cudnn (bench-local op)'
    if 'xgrad_no_cudnn' in variants:
        result['conv_path']['xgrad_no_cudnn'] = 'im2col' if has_conv else None
    checks = {}
    for v, step in variants.items():
        if v == 'torch':
            continue
        worst, where = compare(step, variants['torch'], rtol, atol_scale)
        checks[v] = {'max_error_fraction_of_tolerance': worst, 'where': where,
                     'ok': worst <= 1.0, 'rtol': rtol, 'atol_scale': atol_scale}
    result['gradients_vs_torch'] = checks

    synced = {}
    for v, step in variants.items():
        sync = dev.sync_torch if v == 'torch' else dev.sync_xgrad
        synced[v] = (lambda s, y: lambda: (s(), y()))(step, sync)
    timings = _timing.measure(synced, settings['rounds'], settings['min_time'],
                              settings['warmup'], settings['warmup_time'])
    torch_samples = timings['torch'].samples
    for v, t in timings.items():
        entry = {'median_us': t.median * 1e6, 'spread_us': t.summary_us()}
        if v != 'torch':
            entry['over_torch_paired'] = statistics.median(
                a / b for a, b in zip(t.samples, torch_samples))
        result['variants'][v] = entry
    for v, step in variants.items():
        peak = dev.torch_peak(step) if v == 'torch' else dev.xgrad_peak(step)
        result['variants'][v]['peak_gpu_bytes'] = peak
    r = result['variants']
    result['xgrad_over_torch'] = r['xgrad']['over_torch_paired']
    result['peak_gpu_bytes'] = {'xgrad': r['xgrad']['peak_gpu_bytes'],
                                'torch': r['torch']['peak_gpu_bytes']}
    cudnn_variants = [v for v in ('xgrad', 'xgrad_cudnn_conv') if v in r]
    best = min(cudnn_variants, key=lambda v: r[v]['median_us'])
    if usable:
        result['best_cudnn_variant'] = best
        result['best_cudnn_over_torch'] = r[best]['over_torch_paired']
        # paired: both in the same rounds
        off, on = timings['xgrad_no_cudnn'].samples, timings[best].samples
        result['im2col_over_cudnn_paired'] = statistics.median(
            a / b for a, b in zip(off, on))
    print('  {:14s} xgrad {:9.0f} us  torch {:9.0f} us  ratio {:.2f}{}{}'.format(
        name, r['xgrad']['median_us'], r['torch']['median_us'], result['xgrad_over_torch'],
        '  best cuDNN {} {:.2f}'.format(best, result['best_cudnn_over_torch'])
        if usable else '',
        '  im2col/cuDNN {:.2f}'.format(result['im2col_over_cudnn_paired']) if usable else ''),
        file=sys.stderr, flush=True)
    return result


@contextlib.contextmanager
def _nullcontext():
    yield


# ---------------------------------------------------------------------------
# Launch overhead

def _overhead_graphs(tiny):
    chain = bench_elementwise_chain
    mlp_batch = getattr(bench_mlp_step, 'BATCH', 64)
    return {
        'elementwise_chain': (chain.make_data, chain.build_xgrad,
                              lambda torch, d: chain.build_torch(torch, d),
                              chain.OPS_PER_ITER),
        'mlp_step': (lambda rng: _mlp.make_data(rng, mlp_batch, bench_mlp_step.SIZES),
                     _mlp.build_xgrad, None, None),
    }


def run_overhead(env, settings, tiny):
    import xgrad
    out = {}
    for name, (make, build_x, build_t, ops) in _overhead_graphs(tiny).items():
        data = make(numpy.random.default_rng(0))
        with xgrad.using_device('cuda:0'):
            xstep = build_x(xgrad, data)

        def xcall(s=xstep):
            with xgrad.using_device('cuda:0'):
                return s()
        if build_t is None:  # _mlp's builder takes the device
            tstep = _mlp.build_torch(env.torch, data, device=env.device.torch_device)
        else:
            tstep = build_t(env.torch_on, data)
        entry = {'ops_per_iteration': ops}
        iterations = settings['overhead_iterations']
        for fw, step, sync in (('xgrad', xcall, env.device.sync_xgrad),
                               ('torch', tstep, env.device.sync_torch)):
            step()
            sync()
            best_wall, best_cpu = None, None
            for _ in range(settings['overhead_repeats']):
                wall0, cpu0 = time.perf_counter(), time.process_time()
                for _ in range(iterations):
                    step()
                sync()
                wall = (time.perf_counter() - wall0) / iterations
                cpu = (time.process_time() - cpu0) / iterations
                best_wall = wall if best_wall is None else min(best_wall, wall)
                best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
            entry[fw] = {'wall_us_per_iteration': best_wall * 1e6,
                         'cpu_us_per_iteration': best_cpu * 1e6}
            if ops:
                entry[fw]['cpu_us_per_op'] = best_cpu * 1e6 / ops
        entry['xgrad_over_torch_cpu'] = (entry['xgrad']['cpu_us_per_iteration']
                                         / entry['torch']['cpu_us_per_iteration'])
        out[name] = entry
        print('  {:18s} CPU us/iteration: xgrad {:9.1f}  torch {:9.1f}  ratio {:.2f}'.format(
            name, entry['xgrad']['cpu_us_per_iteration'],
            entry['torch']['cpu_us_per_iteration'], entry['xgrad_over_torch_cpu']),
            file=sys.stderr, flush=True)
    return out


# ---------------------------------------------------------------------------
# Driver

class Env:
    pass


def _gpu_slug(name):
    for key in ('H200', 'H100', 'A100', 'L40S', 'L4', 'V100'):
        if key.lower() in name.lower():
            return key.lower()
    return re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-') or 'gpu'


def default_out(kind, gpu, dry_run, folder=None):
    date = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d')
    stem = '{}_{}_{}{}.json'.format(kind, _gpu_slug(gpu), date, '_dry_run' if dry_run else '')
    return os.path.join(folder or os.path.join(_BENCH_DIR, 'results'), stem)


def _gpu_name(cp):
    try:
        name = cp.cuda.runtime.getDeviceProperties(0)['name']
        return name.decode() if isinstance(name, bytes) else name
    except Exception:  # noqa: BLE001 (a stand-in without properties)
        return 'unknown'


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--only', default=','.join(STEP_NAMES),
                   help='comma-separated: ' + ','.join(STEP_NAMES))
    p.add_argument('--overhead', action='store_true',
                   help='the launch overhead of small graphs instead of the training steps')
    p.add_argument('--rounds', type=int, help='timing rounds (default 9; dry run 2)')
    p.add_argument('--min-time', type=float, default=0.02)
    p.add_argument('--budget', type=float, default=0,
                   help='seconds: skip the steps left once this is spent (0: no limit)')
    p.add_argument('--dry-run', action='store_true',
                   help='the CPU stand-in for CuPy, torch on the CPU, tiny shapes')
    p.add_argument('--out', help='JSON path (default bench/results/<kind>_<gpu>_<date>.json)')
    p.add_argument('--out-dir', help='the default name in this folder instead')
    args = p.parse_args(argv)
    names = [n.strip() for n in args.only.split(',') if n.strip()]
    for n in names:
        if n not in STEP_NAMES:
            p.error('unknown step {!r}; choose from {}'.format(n, ', '.join(STEP_NAMES)))
    start = time.perf_counter()
    dry_run = args.dry_run or os.environ.get('XGRAD_GPU_DRY_RUN') == '1'

    if dry_run:  # the stand-in as CuPy, unless a test has set it already
        backend = sys.modules.get('xgrad._backend.cuda')
        stand_in = sys.modules.get('gpu.fake_cupy')
        if stand_in is None or getattr(backend, '_cupy', None) is not stand_in:
            import _dry_run
            _dry_run.use_stand_in()
    from xgrad._backend import cuda, cudnn
    import torch
    import xgrad
    cp = cuda.cupy()
    xgrad.get_device('cuda:0')  # a DeviceError saying what is missing
    real = getattr(cp, '__name__', '') == 'cupy'
    torch_device = 'cuda' if (real and torch.cuda.is_available()) else 'cpu'
    if not dry_run and torch_device != 'cuda':
        raise SystemExit('torch has no CUDA here: the comparison needs it (or --dry-run)')
    if torch_device == 'cpu':  # the dry run: torch's threads would spin against the stand-in's
        torch.set_num_threads(1)
    torch.backends.cudnn.allow_tf32 = False     # float32 in float32, as xgrad's
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = bool(cudnn.config['benchmark'])
    env = Env()
    env.dry_run = dry_run
    env.torch = torch
    restore = emulate_cudnn_conv(xgrad, cudnn) if dry_run else (lambda: None)
    try:
        return _run(args, names, env, cp, cudnn, start, dry_run, real, torch_device)
    finally:
        restore()


def _run(args, names, env, cp, cudnn, start, dry_run, real, torch_device):
    torch = env.torch
    env.torch_on = TorchOn(torch, torch_device)
    env.device = Device(cp, torch, torch_device, real)
    settings = {'rounds': args.rounds or (2 if dry_run else 9),
                'min_time': 0.001 if dry_run else args.min_time,
                'warmup': 1 if dry_run else 2, 'warmup_time': 0.0 if dry_run else 0.1,
                'overhead_iterations': 1 if dry_run else 20,
                'overhead_repeats': 1 if dry_run else 3}
    gpu = _gpu_name(cp)
    kind = 'gpu_overhead' if args.overhead else 'gpu_training_steps'
    out = args.out or default_out(kind, gpu, dry_run, args.out_dir)
    report = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'dry_run': dry_run,
        'machine': {'gpu': gpu, 'python': platform.python_version(),
                    'cupy': getattr(cp, '__version__', 'stand-in'), 'numpy': numpy.__version__,
                    'torch': torch.__version__, 'torch_device': torch_device,
                    'torch_cudnn': (torch.backends.cudnn.version()
                                    if torch_device == 'cuda' else None),
                    'cpus': os.cpu_count()},
        'xgrad_cudnn': {'version': cudnn.version_string(), 'library': cudnn.library_path(),
                        'device': cudnn.device_reason(cp) or 'usable',
                        'conv': cudnn.path('conv'), 'pool': cudnn.path('pool'),
                        'batch_norm': cudnn.path('batch_norm'),
                        'benchmark': cudnn.config['benchmark'],
                        'deterministic': cudnn.config['deterministic'],
                        'allow_tf32': cudnn.config['allow_tf32']},
        'settings': settings,
        'torch_settings': {'cudnn.allow_tf32': False, 'matmul.allow_tf32': False,
                           'cudnn.benchmark': torch.backends.cudnn.benchmark},
    }

    def write():
        report['cudnn_failures'] = dict(cudnn.failures)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, 'w') as f:
            json.dump(report, f, indent=1)

    if args.overhead:
        report['overhead'] = run_overhead(env, settings, dry_run)
    else:
        report['steps'] = {}
        steps = _steps(dry_run)
        for name in names:
            if args.budget and time.perf_counter() - start > args.budget:
                report['steps'][name] = {'skipped': 'the {:.0f} s budget is spent'.format(
                    args.budget)}
                continue
            try:
                report['steps'][name] = run_step(name, steps[name], env, settings)
            except Exception as e:  # noqa: BLE001 (one step's failure must not lose the rest)
                import traceback
                traceback.print_exc()
                report['steps'][name] = {'error': '{}: {}'.format(type(e).__name__, e)}
            write()
    report['seconds'] = time.perf_counter() - start
    write()
    print('results: {}'.format(out), file=sys.stderr)
    return report


if __name__ == '__main__':
    main()
