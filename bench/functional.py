#!/usr/bin/env python
"""xgrad.functional against torch.func, one thread, side by side.

    python bench/functional.py [--quick] [--rounds N] [--min-time S] [--out PATH]
    python bench/functional.py --profile jacobian_mlp     # where xgrad's time goes

| name | what |
| ---- | ---- |
| ``jacobian_mlp`` | the Jacobian (10 x 16) of a small MLP 16-64-10 (tanh) at one input: ``xgrad.functional.jacobian(f, x)`` vs ``torch.func.jacrev(f)(x)`` |
| ``hvp_mlp_loss`` | a Hessian-vector product of an MLP loss (batch 32, 16-64-10, tanh, softmax cross-entropy) with respect to the first layer's weights: ``xgrad.functional.hvp(loss, W1, v)`` vs torch.func's recommended forward-over-reverse ``jvp(grad(loss), (W1,), (v,))`` |
| ``hvp_mlp_loss_reverse`` | the same, torch by reverse-over-reverse ``vjp(grad(loss), W1)`` (xgrad's method) |
| ``jvp_mlp`` | a Jacobian-vector product of the same MLP on the batch with respect to W1: ``xgrad.functional.jvp`` (double-vjp) vs ``torch.func.jvp`` (forward mode) |

float32, the same weights and data in both. Before timing, each result must
agree with torch's (``rtol 1e-4``, ``atol 1e-5 * max|torch|``). One thread:
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` are set
to 1 before NumPy and torch are imported, and ``torch.set_num_threads(1)``.
Timing: the two take turns, one sample each per round, the first alternating
(bench/_timing.py); reported are the medians, the ratio of the medians
(xgrad / torch) and the median of the per-round (paired) ratios. Results go
to ``bench/results/functional_vs_torch_func_DATE.json`` (full runs).
"""

import os

for _v in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS'):
    os.environ[_v] = '1'

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

import numpy  # noqa: E402

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_BENCH_DIR)
sys.path.insert(0, _BENCH_DIR)
sys.path.insert(0, _ROOT)  # this checkout's xgrad (an in-place build), not an installed one

import _machine  # noqa: E402
import _timing  # noqa: E402

# Named by what it measures and the day it ran (bench/results/README.md).
DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'functional_vs_torch_func_{}.json'.format(
    datetime.date.today().isoformat()))
RTOL, ATOL_SCALE = 1e-4, 1e-5


def data(rng):
    f32 = numpy.float32
    return {
        'W1': (rng.standard_normal((16, 64)) / 4).astype(f32),
        'b1': (rng.standard_normal(64) / 10).astype(f32),
        'W2': (rng.standard_normal((64, 10)) / 8).astype(f32),
        'b2': (rng.standard_normal(10) / 10).astype(f32),
        'x1': rng.standard_normal(16).astype(f32),
        'xb': rng.standard_normal((32, 16)).astype(f32),
        'labels': rng.integers(0, 10, 32),
        'v': rng.standard_normal((16, 64)).astype(f32),
    }


# ---------------------------------------------------------------------------
# The workloads: (xgrad builder, torch builder), each returning a step that
# returns the result arrays

def jacobian_xgrad(xgrad, d):
    W1, b1, W2, b2 = (xgrad.array(d[k]) for k in ('W1', 'b1', 'W2', 'b2'))
    x = xgrad.array(d['x1'])

    def f(x):
        return xgrad.tanh(x @ W1 + b1) @ W2 + b2

    return lambda: (xgrad.functional.jacobian(f, x),)


def jacobian_torch(torch, d):
    W1, b1, W2, b2 = (torch.tensor(d[k]) for k in ('W1', 'b1', 'W2', 'b2'))
    x = torch.tensor(d['x1'])

    def f(x):
        return torch.tanh(x @ W1 + b1) @ W2 + b2

    jac = torch.func.jacrev(f)
    return lambda: (jac(x),)


def _xgrad_loss(xgrad, d):
    b1, W2, b2 = (xgrad.array(d[k]) for k in ('b1', 'W2', 'b2'))
    xb = xgrad.array(d['xb'])
    labels = xgrad.array(d['labels'])

    def loss(W1):
        return xgrad.mean(xgrad.softmax_cross_entropy(
            xgrad.tanh(xb @ W1 + b1) @ W2 + b2, labels))

    def net(W1):
        return xgrad.tanh(xb @ W1 + b1) @ W2 + b2

    return loss, net


def _torch_loss(torch, d):
    b1, W2, b2 = (torch.tensor(d[k]) for k in ('b1', 'W2', 'b2'))
    xb = torch.tensor(d['xb'])
    labels = torch.tensor(d['labels'])

    def loss(W1):
        return torch.nn.functional.cross_entropy(torch.tanh(xb @ W1 + b1) @ W2 + b2, labels)

    def net(W1):
        return torch.tanh(xb @ W1 + b1) @ W2 + b2

    return loss, net


def hvp_xgrad(xgrad, d):
    loss, _ = _xgrad_loss(xgrad, d)
    W1, v = xgrad.array(d['W1']), xgrad.array(d['v'])
    return lambda: xgrad.functional.hvp(loss, W1, v)


def hvp_torch(torch, d):
    loss, _ = _torch_loss(torch, d)
    W1, v = torch.tensor(d['W1']), torch.tensor(d['v'])
    gradient = torch.func.grad(loss)

    def step():
        return loss(W1), torch.func.jvp(gradient, (W1,), (v,))[1]
    return step


def hvp_torch_reverse(torch, d):
    loss, _ = _torch_loss(torch, d)
    W1, v = torch.tensor(d['W1']), torch.tensor(d['v'])
    gradient = torch.func.grad(loss)

    def step():
        return loss(W1), torch.func.vjp(gradient, W1)[1](v)[0]
    return step


def jvp_xgrad(xgrad, d):
    _, net = _xgrad_loss(xgrad, d)
    W1, v = xgrad.array(d['W1']), xgrad.array(d['v'])
    return lambda: xgrad.functional.jvp(net, (W1,), (v,))


def jvp_torch(torch, d):
    _, net = _torch_loss(torch, d)
    W1, v = torch.tensor(d['W1']), torch.tensor(d['v'])
    return lambda: torch.func.jvp(net, (W1,), (v,))


NOTES = (
    "jacobian is reverse mode, one backward pass per output element (10 here), where "
    "torch.func.jacrev batches the 10 passes into one with vmap. What dominates xgrad's "
    "time (callgrind, bench/functional.py --profile): the 10 passes, each with "
    "enable_double_backprop=True only to keep the graph for the next one (xgrad's grad has "
    "no retain_graph): about 189k instructions per pass where a pass without double "
    "backprop costs about 97k (the forward about 58k); the rest (seeds, views, ID, stacking) "
    "is about 12%.")

WORKLOADS = {
    'jacobian_mlp': (jacobian_xgrad, jacobian_torch),
    'hvp_mlp_loss': (hvp_xgrad, hvp_torch),
    'hvp_mlp_loss_reverse': (hvp_xgrad, hvp_torch_reverse),
    'jvp_mlp': (jvp_xgrad, jvp_torch),
}


# ---------------------------------------------------------------------------

def _as_numpy(a):
    return a.detach().numpy() if hasattr(a, 'detach') else a.to_numpy()


def check(name, xgrad_step, torch_step):
    """xgrad's results agree with torch's to float32 tolerance; returns the
    largest error as a fraction of the tolerance."""
    ours = [_as_numpy(a) for a in xgrad_step()]
    theirs = [_as_numpy(a) for a in torch_step()]
    assert len(ours) == len(theirs), name
    worst = 0.0
    for k, (a, b) in enumerate(zip(ours, theirs)):
        what = '{} result {}'.format(name, k)
        assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype)
        atol = ATOL_SCALE * float(numpy.max(numpy.abs(b))) + 1e-30
        numpy.testing.assert_allclose(a, b, rtol=RTOL, atol=atol, err_msg=what)
        worst = max(worst, float(numpy.max(numpy.abs(a - b) / (atol + RTOL * numpy.abs(b)))))
    return worst


def time_pair(steps, rounds, min_time):
    names = list(steps)
    timings = {}
    for n in names:
        _timing.warm_up(steps[n], 3, 0.2)
        timings[n] = _timing.Timing(_timing.autorange(steps[n], min_time))
    for r in range(rounds):
        for n in names[r % 2:] + names[:r % 2]:
            t = timings[n]
            t.samples.append(_timing._sample(steps[n], t.number) / t.number)
    return timings


def profile(name):
    import cProfile
    import pstats
    import xgrad
    step = WORKLOADS[name][0](xgrad, data(numpy.random.default_rng(0)))
    for _ in range(20):
        step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(500):
        step()
    prof.disable()
    pstats.Stats(prof).sort_stats('tottime').print_stats(25)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true', help='few short rounds; writes nothing')
    p.add_argument('--only', default=','.join(WORKLOADS), help=','.join(WORKLOADS))
    p.add_argument('--rounds', type=int)
    p.add_argument('--min-time', type=float)
    p.add_argument('--out', help='JSON path (default {} for a full run)'.format(DEFAULT_OUT))
    p.add_argument('--profile', metavar='NAME', help="cProfile xgrad's side of one workload")
    args = p.parse_args(argv)
    if args.profile:
        profile(args.profile)
        return 0
    import torch
    import xgrad
    torch.set_num_threads(1)
    only = [n.strip() for n in args.only.split(',') if n.strip()]
    rounds = args.rounds or (5 if args.quick else 21)
    min_time = args.min_time or (0.005 if args.quick else 0.05)
    result = {
        'benchmark': 'xgrad.functional vs torch.func, float32, one thread',
        'date': datetime.datetime.now().isoformat(timespec='seconds'),
        'machine': _machine.machine_info(),
        'threads': {'torch': torch.get_num_threads(),
                    'blas': _machine.numpy_blas_threads(),
                    'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS')},
        'versions': {'python': platform.python_version(), 'numpy': numpy.__version__,
                     'torch': torch.__version__, 'xgrad_location': xgrad.__file__},
        'rounds': rounds, 'min_time_s': min_time,
        'notes': NOTES,
        'workloads': {},
    }
    for name in only:
        build_x, build_t = WORKLOADS[name]
        d = data(numpy.random.default_rng(0))
        steps = {'xgrad': build_x(xgrad, d), 'torch': build_t(torch, d)}
        worst = check(name, steps['xgrad'], steps['torch'])
        timings = time_pair(steps, rounds, min_time)
        res = dict(_timing.versus(timings), max_error_fraction_of_tolerance=worst)
        result['workloads'][name] = res
        print('{:14s} xgrad {:9.1f} us  torch {:9.1f} us  ratio {:.2f} (paired {:.2f})'.format(
            name, res['time_us']['xgrad'], res['time_us']['torch'], res['ratio'],
            res['paired_ratio']), flush=True)
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out:
        with open(out, 'w') as f:
            json.dump(result, f, indent=1)
            f.write('\n')
        print('wrote', os.path.relpath(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
