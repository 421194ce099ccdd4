"""The small graphs of bench/run.py, written the other ways people write them.

    python bench/graph_variants.py                # writes bench/results/graph_variants_DATE.json
    python bench/graph_variants.py --quick        # a few short rounds; writes nothing

bench/run.py's elementwise chain, MLP step and gradient penalty use the
ops its authors chose. Issue 27 measured the same graphs written as users
write them and found the engine's speed did not carry over to every op.
Each variant here is one of those graphs, written with:

| name | graph |
| ---- | ----- |
| ``chain_scalars`` | x (1,); 500 x ``y = tanh(y * 0.99 + 0.01)`` with Python scalars; loss ``(y * y).sum() / 2`` |
| ``mlp_maximum`` | mlp_step's MLP (batch 16, 32-32-32-8) with relu as ``maximum(h, 0)``, the bias a broadcast add, loss ``(d * d).sum() / n`` |
| ``mlp_methods`` | the same with array methods: ``h.dot(W)``, ``(h > 0) * h`` for relu, ``d.mean()`` of ``d ** 2`` |
| ``gp_tanh_dots`` | the gradient penalty (batch 16, 32-64-1): ``tanh`` between ``dot``s, ``grad(..., enable_double_backprop=True)``, penalty ``(g * g).sum() / n`` |

Both frameworks run the same graph from the same float32 data; the loss and
gradients must agree to float32 tolerance before timing. One thread
(OMP_NUM_THREADS and the BLAS variables set to 1 before NumPy is imported,
torch.set_num_threads(1)); paired, interleaved rounds (_timing.measure).
Issue 27's target: each variant <= 0.3x torch.
"""

import argparse
import datetime
import json
import os
import sys

for _v in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS'):
    os.environ[_v] = '1'

import numpy  # noqa: E402

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _BENCH_DIR)
import _frameworks  # noqa: E402
import _machine  # noqa: E402
import _timing  # noqa: E402

DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'graph_variants_{}.json'.format(
    datetime.date.today().isoformat()))
TARGET = 0.3


def _data(rng):
    f32 = numpy.float32

    def layer(n_in, n_out):
        return ((rng.standard_normal((n_in, n_out)) / numpy.sqrt(n_in)).astype(f32),
                (rng.standard_normal(n_out) * 0.1).astype(f32))
    return {
        'x1': numpy.array([0.5], f32),
        'x': rng.standard_normal((16, 32)).astype(f32),
        't': rng.standard_normal((16, 8)).astype(f32),
        'mlp': [layer(32, 32), layer(32, 32), layer(32, 8)],
        'gp': [layer(32, 64), layer(64, 1)],
    }


# ---------------------------------------------------------------------------
# The graphs, one function per variant for both frameworks: ``fw`` is a small
# adapter giving each framework's leaf, gradient and grad() spelling.

def chain_scalars(fw, data):
    x = fw.leaf(data['x1'])

    def step():
        fw.clear([x])
        y = x
        for _ in range(500):
            y = fw.m.tanh(y * 0.99 + 0.01)
        loss = (y * y).sum() / 2
        loss.backward()
        return loss, [fw.grad(x)]
    return step


def _mlp_step(fw, data, layer, last, loss_of):
    """The MLP step with ``layer(h, w, b)`` for the hidden layers, ``last``
    for the output layer and ``loss_of(d)`` of the error d = out - t."""
    x, t = fw.const(data['x']), fw.const(data['t'])
    layers = [(fw.leaf(w), fw.leaf(b)) for w, b in data['mlp']]
    leaves = [p for pair in layers for p in pair]

    def step():
        fw.clear(leaves)
        h = x
        for w, b in layers[:-1]:
            h = layer(h, w, b)
        loss = loss_of(last(h, *layers[-1]) - t)
        loss.backward()
        return loss, [fw.grad(p) for p in leaves]
    return step


def mlp_maximum(fw, data):
    def relu_layer(h, w, b):
        return fw.m.maximum(h @ w + b, fw.zero)
    return _mlp_step(fw, data, relu_layer, lambda h, w, b: h @ w + b,
                     lambda d: (d * d).sum() / (d.shape[0] * d.shape[1]))


def mlp_methods(fw, data):
    def relu_layer(h, w, b):
        z = fw.dot(h, w) + b
        return (z > 0) * z
    return _mlp_step(fw, data, relu_layer, lambda h, w, b: fw.dot(h, w) + b,
                     lambda d: (d ** 2).mean())


def gp_tanh_dots(fw, data):
    x = fw.leaf(data['x'])
    (w1, b1), (w2, b2) = [(fw.leaf(w), fw.leaf(b)) for w, b in data['gp']]
    leaves = [x, w1, b1, w2, b2]

    def step():
        fw.clear(leaves)
        out = fw.dot(fw.m.tanh(fw.dot(x, w1) + b1), w2) + b2
        g, = fw.grad_of(out.sum(), x)
        penalty = (g * g).sum() / g.shape[0]
        penalty.backward()
        return penalty, [fw.grad(p) for p in (w1, b1, w2, x)]
    return step


VARIANTS = {f.__name__: f for f in (chain_scalars, mlp_maximum, mlp_methods, gp_tanh_dots)}


class XgradAdapter:
    def __init__(self, xgrad):
        self.m = xgrad
        self.zero = 0

    def leaf(self, a):
        return self.m.array(a).require_grad()

    def const(self, a):
        return self.m.array(a)

    def clear(self, leaves):
        for a in leaves:
            a.cleargrad()

    def grad(self, a):
        return a.grad

    def dot(self, a, b):
        return a.dot(b)

    def grad_of(self, y, x):
        return self.m.grad([y], [x], enable_double_backprop=True)

    def numpy(self, a):
        return a.to_numpy() if hasattr(a, 'to_numpy') else numpy.asarray(a)


class TorchAdapter:
    def __init__(self, torch):
        self.m = torch
        self.zero = torch.zeros(())

    def leaf(self, a):
        return self.m.from_numpy(a.copy()).requires_grad_()

    def const(self, a):
        return self.m.from_numpy(a.copy())

    def clear(self, leaves):
        for a in leaves:
            a.grad = None

    def grad(self, a):
        return a.grad

    def dot(self, a, b):
        return a.matmul(b)

    def grad_of(self, y, x):
        return self.m.autograd.grad([y], [x], create_graph=True)

    def numpy(self, a):
        return a.detach().numpy()


def check(name, ours, theirs, xfw, tfw):
    """The loss and every gradient agree to float32 tolerance."""
    (lx, gx), (lt, gt) = ours(), theirs()
    for what, a, b in [('loss', lx, lt)] + [('grad {}'.format(i), a, b)
                                           for i, (a, b) in enumerate(zip(gx, gt))]:
        a, b = xfw.numpy(a), tfw.numpy(b)
        if not numpy.allclose(a, b, rtol=1e-4, atol=1e-5 * (numpy.abs(b).max(initial=0) + 1)):
            sys.exit('{}: xgrad and torch disagree on the {}'.format(name, what))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true', help='few short rounds; writes nothing')
    p.add_argument('--only', help='comma-separated: ' + ','.join(VARIANTS))
    p.add_argument('--rounds', type=int)
    p.add_argument('--min-time', type=float)
    p.add_argument('--out', help='JSON path (default {})'.format(DEFAULT_OUT))
    args = p.parse_args(argv)
    names = args.only.split(',') if args.only else list(VARIANTS)
    for n in names:
        if n not in VARIANTS:
            p.error('unknown variant {!r}; choose from {}'.format(n, ', '.join(VARIANTS)))
    rounds = args.rounds or (5 if args.quick else 21)
    min_time = args.min_time or (0.005 if args.quick else 0.05)

    import torch
    torch.set_num_threads(1)
    xgrad = _frameworks.load('xgrad')
    xfw, tfw = XgradAdapter(xgrad), TorchAdapter(torch)
    result = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'machine': _machine.machine_info(), 'threads': 1,
              'versions': {'numpy': numpy.__version__, 'torch': torch.__version__},
              'settings': {'rounds': rounds, 'min_time': min_time}, 'target': TARGET,
              'variants': {}}
    for name in names:
        data = _data(numpy.random.default_rng(0))
        steps = {'xgrad': VARIANTS[name](xfw, data), 'torch': VARIANTS[name](tfw, data)}
        check(name, steps['xgrad'], steps['torch'], xfw, tfw)
        timings = _timing.measure(steps, rounds, min_time, warmup=3, warmup_time=0.1)
        res = _timing.versus(timings)
        result['variants'][name] = res
        print('{:14s} xgrad {:9.1f} us  torch {:9.1f} us  ratio {:.2f} (paired {:.2f})'.format(
            name, res['time_us']['xgrad'], res['time_us']['torch'], res['ratio'],
            res['paired_ratio']), flush=True)
    result['load_average_end'] = os.getloadavg()[0]
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out:
        with open(out, 'w') as f:
            json.dump(result, f, indent=1)
        print('wrote', out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
