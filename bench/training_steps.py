#!/usr/bin/env python
"""Four practitioners' training steps, xgrad against PyTorch side by side.

    python bench/training_steps.py [--quick] [--only cnn,lstm] [--out PATH]
    python bench/training_steps.py --threads 1      # one configuration only

| name | step |
| ---- | ---- |
| ``cnn`` | 8x8 digits, batch 64: conv 3x3 1->8 pad 1, relu, max_pool 2, conv 3x3 8->16 pad 1, relu, max_pool 2, linear 64->10, softmax cross-entropy |
| ``lstm`` | char-LSTM: vocabulary 64, embedding 64, hidden 128, 64 steps, batch 32; the cell of primitives (one matmul per step for ``h``, sigmoid/tanh gates), next-character cross-entropy |
| ``wgan_gp`` | WGAN-GP critic step, batch 128: critic MLP 64-256-256-1 with leaky_relu(0.2); loss mean(D(fake)) - mean(D(real)) + 10 * mean((|dD(xhat)/dxhat| - 1)^2), the penalty by double backprop |
| ``swish_mlp`` | MLP 64-512-512-10, batch 256, with swish written as a custom ``FunctionNode`` (``torch.autograd.Function``); softmax cross-entropy |

Both frameworks start from the same float32 weights and data. Before timing,
each step runs twice in each framework and the loss and every gradient must
agree with torch's to float32 tolerance (``rtol = 1e-4``, ``atol = 1e-5 *
max|torch|``); a mismatch stops the run. Timing: the frameworks take turns,
one sample each per round (see _timing.py); the result is the ratio of the
medians and the median of the per-round (paired) ratios.

Threads: by default the run is done twice, in child processes, once with one
thread (``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS`` = 1 and
``torch.set_num_threads(1)``) and once with each framework's default threads
(the variables unset; torch's default intra-op count). Results go to
``bench/results/training_steps_DATE_HHMM.json`` (full runs) and a markdown table beside it.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
# Results are named by what they measure and when (bench/results/README.md).
DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'training_steps_{}.json'.format(
    datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d_%H%M')))
RTOL, ATOL_SCALE = 1e-4, 1e-5


# ---------------------------------------------------------------------------
# Data and initial weights (NumPy, float32, seed 0)

def _init(rng, fan_in, shape):
    return (rng.standard_normal(shape) * (1.0 / numpy.sqrt(fan_in))).astype(numpy.float32)


def _one_hot(labels, n):
    out = numpy.zeros((labels.size, n), numpy.float32)
    out[numpy.arange(labels.size), labels.ravel()] = 1
    return out


def cnn_data(rng):
    x = rng.integers(0, 17, (64, 1, 8, 8)).astype(numpy.float32) / 16  # digits' 0..16 scale
    return {
        'x': x, 't': _one_hot(rng.integers(0, 10, 64), 10),
        'params': [_init(rng, 9, (8, 1, 3, 3)), numpy.zeros(8, numpy.float32) + 0.01,
                   _init(rng, 72, (16, 8, 3, 3)), numpy.zeros(16, numpy.float32) + 0.01,
                   _init(rng, 64, (64, 10)), numpy.zeros(10, numpy.float32)],
    }


LSTM_VOCAB, LSTM_EMBED, LSTM_HIDDEN, LSTM_STEPS, LSTM_BATCH = 64, 64, 128, 64, 32


def lstm_data(rng):
    chars = rng.integers(0, LSTM_VOCAB, (LSTM_STEPS + 1, LSTM_BATCH))
    H = LSTM_HIDDEN
    b = numpy.zeros(4 * H, numpy.float32)
    b[H:2 * H] = 1  # forget-gate bias 1
    return {
        'inputs': chars[:-1].reshape(-1).astype(numpy.int64),
        't': _one_hot(chars[1:], LSTM_VOCAB),
        'params': [_init(rng, 1, (LSTM_VOCAB, LSTM_EMBED)) * 0.1,
                   _init(rng, LSTM_EMBED, (LSTM_EMBED, 4 * H)), _init(rng, H, (H, 4 * H)), b,
                   _init(rng, H, (H, LSTM_VOCAB)), numpy.zeros(LSTM_VOCAB, numpy.float32)],
    }


GAN_SIZES = (64, 256, 256, 1)
GAN_BATCH = 128


def wgan_data(rng):
    params = []
    for n_in, n_out in zip(GAN_SIZES[:-1], GAN_SIZES[1:]):
        params += [_init(rng, n_in, (n_in, n_out)), numpy.zeros(n_out, numpy.float32) + 0.01]
    return {
        'real': rng.standard_normal((GAN_BATCH, 64)).astype(numpy.float32) + 1,
        'fake': rng.standard_normal((GAN_BATCH, 64)).astype(numpy.float32),
        'eps': rng.random((GAN_BATCH, 1)).astype(numpy.float32),
        'params': params,
    }


SWISH_SIZES = (64, 512, 512, 10)


def swish_data(rng):
    params = []
    for n_in, n_out in zip(SWISH_SIZES[:-1], SWISH_SIZES[1:]):
        params += [_init(rng, n_in, (n_in, n_out)), numpy.zeros(n_out, numpy.float32) + 0.01]
    return {'x': rng.standard_normal((256, 64)).astype(numpy.float32),
            't': _one_hot(rng.integers(0, 10, 256), 10), 'params': params}


# ---------------------------------------------------------------------------
# The steps. Each builder returns step() -> (loss, [gradients of the params]).

def _xgrad_leaves(xgrad, arrays):
    return [xgrad.array(a).require_grad() for a in arrays]


def _torch_leaves(torch, arrays):
    return [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]


def cnn_xgrad(xgrad, d):
    x, t = xgrad.array(d['x']), xgrad.array(d['t'])
    params = W1, b1, W2, b2, W3, b3 = _xgrad_leaves(xgrad, d['params'])
    X = xgrad

    def step():
        for p in params:
            p.cleargrad()
        h = X.max_pool(X.relu(X.conv(x, W1, b1, pad=1)), 2)
        h = X.max_pool(X.relu(X.conv(h, W2, b2, pad=1)), 2)
        y = X.reshape(h, (64, 64)) @ W3 + b3
        loss = -X.sum(X.log_softmax(y, axis=1) * t) * (1.0 / 64)
        loss.backward()
        return loss, [p.grad for p in params]
    return step


def cnn_torch(torch, d):
    x, t = torch.from_numpy(d['x']), torch.from_numpy(d['t'])
    params = W1, b1, W2, b2, W3, b3 = _torch_leaves(torch, d['params'])
    F = torch.nn.functional

    def step():
        for p in params:
            p.grad = None
        h = F.max_pool2d(F.relu(F.conv2d(x, W1, b1, padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, W2, b2, padding=1)), 2)
        y = h.reshape(64, 64) @ W3 + b3
        loss = -torch.sum(F.log_softmax(y, dim=1) * t) * (1.0 / 64)
        loss.backward()
        return loss, [p.grad for p in params]
    return step


def lstm_xgrad(xgrad, d):
    inputs, t = xgrad.array(d['inputs']), xgrad.array(d['t'])
    params = E, Wx, Wh, b, Wy, by = _xgrad_leaves(xgrad, d['params'])
    X, H, B = xgrad, LSTM_HIDDEN, LSTM_BATCH
    h0 = xgrad.zeros((B, H), xgrad.float32)
    n = LSTM_STEPS * B

    def step():
        for p in params:
            p.cleargrad()
        xw = X.reshape(X.take(E, inputs, axis=0) @ Wx + b, (LSTM_STEPS, B, 4 * H))
        h, c, hs = h0, h0, []
        for s in range(LSTM_STEPS):
            z = xw[s] + h @ Wh
            i, f = X.sigmoid(z[:, :H]), X.sigmoid(z[:, H:2 * H])
            g, o = X.tanh(z[:, 2 * H:3 * H]), X.sigmoid(z[:, 3 * H:])
            c = f * c + i * g
            h = o * X.tanh(c)
            hs.append(h)
        y = X.reshape(X.stack(hs), (n, H)) @ Wy + by
        loss = -X.sum(X.log_softmax(y, axis=1) * t) * (1.0 / n)
        loss.backward()
        return loss, [p.grad for p in params]
    return step


def lstm_torch(torch, d):
    inputs, t = torch.from_numpy(d['inputs']), torch.from_numpy(d['t'])
    params = E, Wx, Wh, b, Wy, by = _torch_leaves(torch, d['params'])
    H, B = LSTM_HIDDEN, LSTM_BATCH
    h0 = torch.zeros((B, H))
    n = LSTM_STEPS * B
    log_softmax = torch.nn.functional.log_softmax

    def step():
        for p in params:
            p.grad = None
        xw = (torch.take_along_dim(E, inputs[:, None], dim=0) @ Wx + b).reshape(LSTM_STEPS, B, 4 * H)
        h, c, hs = h0, h0, []
        for s in range(LSTM_STEPS):
            z = xw[s] + h @ Wh
            i, f = torch.sigmoid(z[:, :H]), torch.sigmoid(z[:, H:2 * H])
            g, o = torch.tanh(z[:, 2 * H:3 * H]), torch.sigmoid(z[:, 3 * H:])
            c = f * c + i * g
            h = o * torch.tanh(c)
            hs.append(h)
        y = torch.stack(hs).reshape(n, H) @ Wy + by
        loss = -torch.sum(log_softmax(y, dim=1) * t) * (1.0 / n)
        loss.backward()
        return loss, [p.grad for p in params]
    return step


def wgan_xgrad(xgrad, d):
    real, fake, eps = (xgrad.array(d[k]) for k in ('real', 'fake', 'eps'))
    params = _xgrad_leaves(xgrad, d['params'])
    X = xgrad
    xhat_data = d['eps'] * d['real'] + (1 - d['eps']) * d['fake']

    def critic(h):
        W1, b1, W2, b2, W3, b3 = params
        h = X.leaky_relu(h @ W1 + b1, slope=0.2)
        h = X.leaky_relu(h @ W2 + b2, slope=0.2)
        return h @ W3 + b3

    def step():
        for p in params:
            p.cleargrad()
        xhat = xgrad.array(xhat_data).require_grad()
        g, = X.grad([X.sum(critic(xhat))], [xhat], enable_double_backprop=True)
        norm = X.sqrt(X.sum(g * g, axis=1) + 1e-12)
        penalty = X.mean(X.square(norm - 1))
        loss = X.mean(critic(fake)) - X.mean(critic(real)) + 10 * penalty
        loss.backward()
        return loss, [p.grad for p in params]
    return step


def wgan_torch(torch, d):
    real, fake = torch.from_numpy(d['real']), torch.from_numpy(d['fake'])
    params = _torch_leaves(torch, d['params'])
    leaky_relu = torch.nn.functional.leaky_relu
    xhat_data = torch.from_numpy(d['eps'] * d['real'] + (1 - d['eps']) * d['fake'])

    def critic(h):
        W1, b1, W2, b2, W3, b3 = params
        h = leaky_relu(h @ W1 + b1, 0.2)
        h = leaky_relu(h @ W2 + b2, 0.2)
        return h @ W3 + b3

    def step():
        for p in params:
            p.grad = None
        xhat = xhat_data.clone().requires_grad_()
        g, = torch.autograd.grad([torch.sum(critic(xhat))], [xhat], create_graph=True)
        norm = torch.sqrt(torch.sum(g * g, dim=1) + 1e-12)
        penalty = torch.mean(torch.square(norm - 1))
        loss = torch.mean(critic(fake)) - torch.mean(critic(real)) + 10 * penalty
        loss.backward()
        return loss, [p.grad for p in params]
    return step


def swish_xgrad(xgrad, d):
    x, t = xgrad.array(d['x']), xgrad.array(d['t'])
    params = W1, b1, W2, b2, W3, b3 = _xgrad_leaves(xgrad, d['params'])
    X = xgrad

    class Swish(xgrad.FunctionNode):
        """x * sigmoid(x), as a user would write it: NumPy forward, xgrad backward."""

        def forward(self, inputs):
            x, = inputs
            self.retain_inputs((0,))
            return (x / (1 + numpy.exp(-x)),)

        def backward(self, target_input_indexes, grad_outputs):
            x, = self.get_retained_inputs()
            gy, = grad_outputs
            s = X.sigmoid(x)
            return (gy * (s * (1 + x * (1 - s))),)

    def swish(h):
        return Swish().apply((h,))[0]

    def step():
        for p in params:
            p.cleargrad()
        h = swish(x @ W1 + b1)
        h = swish(h @ W2 + b2)
        y = h @ W3 + b3
        loss = -X.sum(X.log_softmax(y, axis=1) * t) * (1.0 / 256)
        loss.backward()
        return loss, [p.grad for p in params]
    return step


def swish_torch(torch, d):
    x, t = torch.from_numpy(d['x']), torch.from_numpy(d['t'])
    params = W1, b1, W2, b2, W3, b3 = _torch_leaves(torch, d['params'])
    log_softmax = torch.nn.functional.log_softmax

    class Swish(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x / (1 + torch.exp(-x))

        @staticmethod
        def backward(ctx, gy):
            x, = ctx.saved_tensors
            s = torch.sigmoid(x)
            return gy * (s * (1 + x * (1 - s)))

    def step():
        for p in params:
            p.grad = None
        h = Swish.apply(x @ W1 + b1)
        h = Swish.apply(h @ W2 + b2)
        y = h @ W3 + b3
        loss = -torch.sum(log_softmax(y, dim=1) * t) * (1.0 / 256)
        loss.backward()
        return loss, [p.grad for p in params]
    return step


WORKLOADS = {
    'cnn': (cnn_data, cnn_xgrad, cnn_torch),
    'lstm': (lstm_data, lstm_xgrad, lstm_torch),
    'wgan_gp': (wgan_data, wgan_xgrad, wgan_torch),
    'swish_mlp': (swish_data, swish_xgrad, swish_torch),
}


# ---------------------------------------------------------------------------
# Checking and timing (one configuration of threads, in this process)

def _as_numpy(a):
    if hasattr(a, 'detach'):
        return a.detach().numpy()
    return numpy.asarray(a.array if hasattr(a, 'array') else a) if not hasattr(
        a, 'to_numpy') else a.to_numpy()


def _results(step):
    step()
    loss, grads = step()
    return [_as_numpy(loss)] + [_as_numpy(g) for g in grads]


def check(name, xgrad_step, torch_step):
    """Assert that loss and gradients agree with torch's to float32 tolerance."""
    ours, theirs = _results(xgrad_step), _results(torch_step)
    assert len(ours) == len(theirs), name
    worst = 0.0
    for k, (a, b) in enumerate(zip(ours, theirs)):
        what = '{} {}'.format(name, 'loss' if k == 0 else 'gradient {}'.format(k - 1))
        assert a.shape == b.shape and a.dtype == numpy.float32, (what, a.shape, b.shape, a.dtype)
        atol = ATOL_SCALE * float(numpy.max(numpy.abs(b))) + 1e-30
        numpy.testing.assert_allclose(a, b, rtol=RTOL, atol=atol, err_msg=what)
        worst = max(worst, float(numpy.max(numpy.abs(a - b) / (atol + RTOL * numpy.abs(b)))))
    return worst  # the largest error as a fraction of the tolerance


def time_pair(steps, settings):
    """Interleaved rounds (_timing.measure); {'xgrad': Timing, 'torch': Timing}."""
    return _timing.measure(steps, settings['rounds'], settings['min_time'],
                           settings['warmup'], settings['warmup_time'])


def run_configuration(args):
    import torch
    import _frameworks
    xgrad = _frameworks.load('xgrad')
    if args.threads == 1:
        torch.set_num_threads(1)
    settings = {'rounds': args.rounds, 'min_time': args.min_time,
                'warmup': 2, 'warmup_time': 0.2 if not args.quick else 0.02}
    out = {'threads': args.threads or 'default', 'torch_threads': torch.get_num_threads(),
           'blas_threads': _machine.numpy_blas_threads(),
           'workloads': {}}
    for name in args.only:
        make_data, build_x, build_t = WORKLOADS[name]
        data = make_data(numpy.random.default_rng(0))
        steps = {'xgrad': build_x(xgrad, data), 'torch': build_t(torch, data)}
        worst = check(name, steps['xgrad'], steps['torch'])
        timings = time_pair(steps, settings)
        res = dict(_timing.versus(timings), max_error_fraction_of_tolerance=worst)
        out['workloads'][name] = res
        print('  {:10s} threads={:7s} xgrad {:9.1f} us  torch {:9.1f} us  ratio {:.2f} '
              '(paired {:.2f})'.format(name, str(out['threads']), res['time_us']['xgrad'],
                                       res['time_us']['torch'], res['ratio'], res['paired_ratio']),
              file=sys.stderr, flush=True)
    return out


# ---------------------------------------------------------------------------
# Driver: one child process per thread setting

def _child(args, threads):
    env = _machine.thread_environment(threads)
    cmd = [sys.executable, os.path.abspath(__file__), '--threads', str(threads),
           '--only', ','.join(args.only), '--rounds', str(args.rounds),
           '--min-time', str(args.min_time), '--json-stdout'] + (['--quick'] if args.quick else [])
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, check=True)
    return json.loads(proc.stdout)


def markdown(result):
    lines = ['# Training steps, xgrad / torch', '',
             'Run {}; machine: {}, {} usable CPUs, load {:.2f} at start. Python {}, '
             'numpy {}, torch {}.'.format(
                 result['date'], result['machine'].get('cpu_model'),
                 result['machine'].get('usable_cpus'),
                 result['machine'].get('load_average_1min') or 0,
                 result['versions']['python'], result['versions']['numpy'],
                 result['versions']['torch']), '',
             '| step | threads | xgrad us | torch us | ratio of medians | median paired ratio |',
             '|---|---|---|---|---|---|']
    for conf in result['configurations']:
        for name, r in conf['workloads'].items():
            lines.append('| {} | {} (torch {}) | {:.0f} | {:.0f} | {:.2f} | {:.2f} |'.format(
                name, conf['threads'], conf['torch_threads'], r['time_us']['xgrad'],
                r['time_us']['torch'], r['ratio'], r['paired_ratio']))
    return '\n'.join(lines) + '\n'


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true', help='few short rounds (smoke test); writes nothing')
    p.add_argument('--only', default=','.join(WORKLOADS), help='comma-separated: ' + ','.join(WORKLOADS))
    p.add_argument('--threads', type=int, choices=(0, 1),
                   help='one configuration only, in this process: 1 or 0 (default threads)')
    p.add_argument('--rounds', type=int)
    p.add_argument('--min-time', type=float)
    p.add_argument('--out', help='JSON path (default {} for a full run)'.format(DEFAULT_OUT))
    p.add_argument('--json-stdout', action='store_true', help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.only = [n.strip() for n in args.only.split(',') if n.strip()]
    for n in args.only:
        if n not in WORKLOADS:
            p.error('unknown workload {!r}; choose from {}'.format(n, ', '.join(WORKLOADS)))
    args.rounds = args.rounds or (5 if args.quick else 21)
    args.min_time = args.min_time or (0.005 if args.quick else 0.05)

    if args.threads is not None:
        conf = run_configuration(args)
        if args.json_stdout:
            json.dump(conf, sys.stdout)
        return 0

    import torch
    versions = {'python': sys.version.split()[0], 'numpy': numpy.__version__,
                'torch': torch.__version__}
    result = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'machine': _machine.machine_info(), 'versions': versions,
              'settings': {'rounds': args.rounds, 'min_time': args.min_time,
                           'rtol': RTOL, 'atol': 'max|torch| * {}'.format(ATOL_SCALE)},
              'configurations': [_child(args, 1), _child(args, 0)]}
    out = args.out or (None if args.quick else DEFAULT_OUT)
    print(markdown(result))
    if out:
        with open(out, 'w') as f:
            json.dump(result, f, indent=1)
        with open(os.path.splitext(out)[0] + '.md', 'w') as f:
            f.write(markdown(result))
    return 0


if _BENCH_DIR not in sys.path:
    sys.path.insert(0, _BENCH_DIR)
import numpy  # noqa: E402
import _machine  # noqa: E402
import _timing  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
