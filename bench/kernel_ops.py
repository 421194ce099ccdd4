#!/usr/bin/env python
"""Per-op timings of the activation family, xgrad against PyTorch (and NumPy).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python bench/kernel_ops.py [--shape 256,512]

For each op: the forward on a float32 array of ``--shape`` (default
(256, 512)) and at n = 4,096 (the LSTM's ``tanh(c)``), and forward + backward
of ``sum(op(x) * g)`` through the public API. Frameworks are interleaved in
rounds (see _timing.py) and the median per call is shown with the ratio to
torch. torch runs on one thread unless ``--threads`` says otherwise.
"""

import argparse
import os
import sys

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _BENCH_DIR)

import numpy  # noqa: E402

import _frameworks  # noqa: E402
import _timing  # noqa: E402

OPS = {  # name: (xgrad call, torch call, NumPy formula)
    'exp': (lambda X, x: X.exp(x), lambda T, x: T.exp(x), numpy.exp),
    'log': (lambda X, x: X.log(x), lambda T, x: T.log(x), numpy.log),
    'tanh': (lambda X, x: X.tanh(x), lambda T, x: T.tanh(x), numpy.tanh),
    'sigmoid': (lambda X, x: X.sigmoid(x), lambda T, x: T.sigmoid(x),
                lambda x: 1 / (1 + numpy.exp(-x))),
    'softplus': (lambda X, x: X.softplus(x), lambda T, x: T.nn.functional.softplus(x),
                 lambda x: numpy.logaddexp(0, x)),
    'leaky_relu': (lambda X, x: X.leaky_relu(x, slope=0.2),
                   lambda T, x: T.nn.functional.leaky_relu(x, 0.2),
                   lambda x: numpy.where(x >= 0, x, x * numpy.float32(0.2))),
    'elu': (lambda X, x: X.elu(x), lambda T, x: T.nn.functional.elu(x),
            lambda x: numpy.where(x >= 0, x, numpy.expm1(numpy.minimum(x, 0)))),
    'log_softmax': (lambda X, x: X.log_softmax(x, axis=1),
                    lambda T, x: T.log_softmax(x, dim=1),
                    lambda x: x - numpy.log(numpy.exp(x - x.max(1, keepdims=True)).sum(
                        1, keepdims=True)) - x.max(1, keepdims=True)),
    'softmax': (lambda X, x: X.softmax(x, axis=1), lambda T, x: T.softmax(x, dim=1),
                lambda x: numpy.exp(x) / numpy.exp(x).sum(1, keepdims=True)),
}


def _steps(name, shape, xgrad, torch):
    fx, ft, fn = OPS[name]
    rng = numpy.random.default_rng(0)
    x = rng.standard_normal(shape).astype(numpy.float32)
    if name == 'log':
        x = numpy.abs(x) + 0.1
    g = rng.standard_normal(shape).astype(numpy.float32)
    xa, ga = xgrad.array(x), xgrad.array(g)
    xv = xgrad.array(x).require_grad()
    tx, tg = torch.from_numpy(x), torch.from_numpy(g)
    tv = torch.from_numpy(x.copy()).requires_grad_()

    def xgrad_fwd():
        return fx(xgrad, xa)

    def torch_fwd():
        with torch.no_grad():
            return ft(torch, tx)

    def xgrad_fb():
        xv.cleargrad()
        xgrad.sum(fx(xgrad, xv) * ga).backward()

    def torch_fb():
        tv.grad = None
        torch.sum(ft(torch, tv) * tg).backward()

    return ({'xgrad': xgrad_fwd, 'torch': torch_fwd, 'numpy': lambda: fn(x)},
            {'xgrad': xgrad_fb, 'torch': torch_fb})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--shape', default='256,512')
    p.add_argument('--threads', type=int, default=1, help='torch threads (default 1)')
    p.add_argument('--rounds', type=int, default=15)
    p.add_argument('--only', help='comma-separated ops')
    args = p.parse_args(argv)
    shape = tuple(int(s) for s in args.shape.split(','))
    xgrad, torch = _frameworks.load('xgrad'), _frameworks.load('torch')
    torch.set_num_threads(args.threads)
    settings = {'rounds': args.rounds, 'min_time': 0.02, 'warmup': 2, 'warmup_time': 0.05}
    names = args.only.split(',') if args.only else list(OPS)
    print('| op | what | xgrad us | torch us | numpy us | xgrad/torch |')
    print('|---|---|---|---|---|---|')
    for name in names:
        for label, sh in (('fwd {}'.format(shape), shape), ('fwd n=4096', (32, 128))):
            fwd, _ = _steps(name, sh, xgrad, torch)
            t = _time(fwd, settings)
            print('| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} |'.format(
                name, label, t['xgrad'], t['torch'], t['numpy'], t['xgrad'] / t['torch']),
                flush=True)
        _, fb = _steps(name, shape, xgrad, torch)
        t = _time(fb, settings)
        print('| {} | fwd+bwd {} | {:.1f} | {:.1f} | | {:.2f} |'.format(
            name, shape, t['xgrad'], t['torch'], t['xgrad'] / t['torch']), flush=True)


def _time(steps, settings):
    names = list(steps)
    timings = {}
    for n in names:
        _timing.warm_up(steps[n], settings['warmup'], settings['warmup_time'])
        timings[n] = _timing.Timing(_timing.autorange(steps[n], settings['min_time']))
    for r in range(settings['rounds']):
        for n in names[r % len(names):] + names[:r % len(names)]:
            t = timings[n]
            t.samples.append(_timing._sample(steps[n], t.number) / t.number)
    return {n: t.median * 1e6 for n, t in timings.items()}


if __name__ == '__main__':
    main()
