#!/usr/bin/env python
"""What op hooks and anomaly detection cost when they are on: a small-graph
training step and an MLP training step, each plain, inside an empty
``op_hooks`` scope (a hook with four empty methods), under
``xgrad.hooks.TimerHook`` and under ``xgrad.detect_anomaly()``.

    python bench/hooks.py [--quick] [--rounds N] [--out PATH]

One thread (``OMP_NUM_THREADS`` etc. = 1); the variants alternate in each
round (bench/_timing.py) and each is reported as the median of its
per-round ratios to the plain step (the pair shares the round's load).
What hooks cost when *no* scope is active is not a time: it is one integer
test per op, measured as instructions by bench/instructions.py (see
docs/hooks.md). Results: ``bench/results/hook_cost_DATE.json``.
"""

import os

for _v in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS'):
    os.environ[_v] = '1'

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import numpy  # noqa: E402

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _BENCH_DIR)
sys.path.insert(0, os.path.dirname(_BENCH_DIR))  # this checkout's xgrad

import _machine  # noqa: E402
import _timing  # noqa: E402
import xgrad  # noqa: E402
from xgrad.hooks import OpHook, TimerHook  # noqa: E402

DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'hook_cost_{}.json'.format(
    datetime.date.today().isoformat()))


def small_graph(rng):
    """A scalar-ish chain: 8 elementwise ops on 16 floats, then backward."""
    x = xgrad.array(rng.standard_normal(16)).require_grad()

    def step():
        x.cleargrad()
        h = x
        for _ in range(4):
            h = xgrad.tanh(h * 1.5)
        xgrad.sum(h).backward()
    return step


def mlp_step(rng):
    """A 3-layer MLP step (64x256 float32 batch, widths 256-256-10)."""
    f32 = numpy.float32
    ws = [xgrad.array((rng.standard_normal(s) / s[0] ** 0.5).astype(f32)).require_grad()
          for s in ((256, 256), (256, 256), (256, 10))]
    x = xgrad.array(rng.standard_normal((64, 256)).astype(f32))
    t = xgrad.array(rng.integers(0, 10, 64))

    def step():
        for w in ws:
            w.cleargrad()
        h = x
        for w in ws[:-1]:
            h = xgrad.relu(h @ w)
        loss = xgrad.mean(xgrad.softmax_cross_entropy(h @ ws[-1], t))
        loss.backward()
    return step


def variants(step):
    """The step plain and inside each kind of scope."""
    empty = OpHook()

    def with_scope(make):
        def run():
            with make():
                step()
        return run
    return {
        'plain': step,
        'empty_op_hook': with_scope(lambda: xgrad.op_hooks(empty)),
        'timer_hook': with_scope(TimerHook),   # a fresh one per step: its history stays small
        'detect_anomaly': with_scope(xgrad.detect_anomaly),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true', help='few short rounds; writes nothing')
    p.add_argument('--rounds', type=int)
    p.add_argument('--out', help='JSON path (default {} for a full run)'.format(DEFAULT_OUT))
    args = p.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 15)
    min_time = 0.02 if args.quick else 0.1
    rng = numpy.random.default_rng(0)
    results = {}
    for name, make in (('small_graph', small_graph), ('mlp_step', mlp_step)):
        timings = _timing.measure(variants(make(rng)), rounds, min_time, warmup=3)
        plain = timings['plain']
        results[name] = {
            'time_us': {n: t.median * 1e6 for n, t in timings.items()},
            'paired_ratio_to_plain': {
                n: statistics.median([a / b for a, b in zip(t.samples, plain.samples)])
                for n, t in timings.items() if n != 'plain'},
        }
        print(name, ' '.join('{} {:.1f}us'.format(n, v)
                             for n, v in results[name]['time_us'].items()))
        print('   ratio to plain:', ' '.join('{} {:.2f}x'.format(n, v) for n, v in
                                             results[name]['paired_ratio_to_plain'].items()))
    result = {
        'benchmark': 'op hooks and detect_anomaly, cost when on',
        'results': results,
        'rounds': rounds,
        'threads': {'blas': _machine.numpy_blas_threads(),
                    'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS')},
        'load_average': _machine.load_average(),
        'date': datetime.datetime.now().isoformat(timespec='seconds'),
        'machine': _machine.machine_info(),
        'versions': {'python': platform.python_version(), 'numpy': numpy.__version__},
    }
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out:
        with open(out, 'w') as f:
            json.dump(result, f, indent=1)
        print('wrote', out)


if __name__ == '__main__':
    main()
