#!/usr/bin/env python
"""xgrad.checkpoint: peak memory and time of a 50-block MLP training step,
with and without checkpointing every block.

    python bench/checkpoint.py [--quick] [--blocks 50] [--rounds N] [--out PATH]

The model: ``blocks`` residual MLP blocks ``h + tanh(h @ W1 + b1) @ W2``
(width 128, hidden 512, as a transformer's MLP), batch 64, float32, then a
linear layer to 10 classes and softmax cross-entropy; a step is forward,
backward and an SGD update of every parameter. Checkpointed, each block is
``xgrad.checkpoint(block, h, W1, b1, W2)``.

Memory: Python's ``tracemalloc`` (NumPy reports its data buffers to it,
so it sees every array's data; xgrad's graph bookkeeping allocated in C++,
a few hundred bytes per op, is not counted). Reported: the peak during a
step above what was allocated before it (parameters, data, the previous
step's gradients), in MiB, for each variant, median of ``--mem-rounds``
steps. Before anything is measured, the two variants' loss and gradients
must agree (rtol 1e-5).

Time: one thread (``OMP_NUM_THREADS`` etc. = 1), the variants alternating,
one sample each per round (bench/_timing.py), tracemalloc off; the
checkpointed step's median time over the plain one's, and the median of
the per-round ratios. Results: ``bench/results/checkpoint_memory_DATE.json``.
"""

import os

for _v in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS'):
    os.environ[_v] = '1'

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tracemalloc  # noqa: E402

import numpy  # noqa: E402

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_BENCH_DIR)
sys.path.insert(0, _BENCH_DIR)
sys.path.insert(0, _ROOT)  # this checkout's xgrad (an in-place build)

import _machine  # noqa: E402
import _timing  # noqa: E402
import xgrad  # noqa: E402

# Named by what it measures and the day it ran (bench/results/README.md).
DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'checkpoint_memory_{}.json'.format(
    datetime.date.today().isoformat()))
BATCH, WIDTH, HIDDEN, CLASSES = 64, 128, 512, 10
LR = 1e-3


MEMORY_MEASURE = (
    'tracemalloc: peak traced bytes during one step above the traced bytes at its start '
    '(NumPy data buffers and Python objects; not xgrad\'s C++ graph bookkeeping); median of '
    '{} steps. Tracing starts after the parameters exist, so start_mib is the previous '
    'step\'s gradients, and the peak above it is the activations the step keeps for '
    'backward (the new gradients replace the old ones, cleared after the forward pass)')


def block(h, W1, b1, W2):
    return h + xgrad.tanh(h @ W1 + b1) @ W2


def make_model(blocks, rng):
    f32 = numpy.float32
    params = []
    for _ in range(blocks):
        params += [
            xgrad.array((rng.standard_normal((WIDTH, HIDDEN)) / WIDTH ** 0.5).astype(f32)),
            xgrad.array(numpy.zeros(HIDDEN, f32)),
            xgrad.array((rng.standard_normal((HIDDEN, WIDTH)) / HIDDEN ** 0.5 / 4).astype(f32)),
        ]
    params.append(xgrad.array((rng.standard_normal((WIDTH, CLASSES)) / 10).astype(f32)))
    for p in params:
        p.require_grad()
    x = xgrad.array(rng.standard_normal((BATCH, WIDTH)).astype(f32))
    labels = xgrad.array(rng.integers(0, CLASSES, BATCH))
    return params, x, labels


def make_step(params, x, labels, use_checkpoint, update=True):
    blocks = (len(params) - 1) // 3

    def step():
        h = x
        for i in range(blocks):
            W1, b1, W2 = params[3 * i:3 * i + 3]
            h = xgrad.checkpoint(block, h, W1, b1, W2) if use_checkpoint else block(h, W1, b1, W2)
        loss = xgrad.mean(xgrad.softmax_cross_entropy(h @ params[-1], labels))
        for p in params:
            p.cleargrad()
        loss.backward()
        if update:
            for p in params:
                q = p.as_grad_stopped()
                q -= LR * p.grad
        return loss
    return step


def check(blocks):
    rng = numpy.random.default_rng(0)
    params, x, labels = make_model(blocks, rng)
    results = []
    for ck in (False, True):
        loss = make_step(params, x, labels, ck, update=False)()
        results.append([loss.to_numpy()] + [p.grad.to_numpy().copy() for p in params])
    for a, b in zip(*results):
        numpy.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def peak_mib(step, rounds):
    """The median over ``rounds`` steps of the peak traced memory during a
    step above the memory traced when it starts, and that start, in MiB."""
    step()  # gradients exist from here on, as in training
    peaks, starts = [], []
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(rounds):
            gc.collect()
            tracemalloc.reset_peak()
            start = tracemalloc.get_traced_memory()[0]
            step()
            peak = tracemalloc.get_traced_memory()[1]
            peaks.append((peak - start) / 2 ** 20)
            starts.append(start / 2 ** 20)
    finally:
        tracemalloc.stop()
    return statistics.median(peaks), statistics.median(starts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true', help='few short rounds; writes nothing')
    p.add_argument('--blocks', type=int, default=50)
    p.add_argument('--rounds', type=int)
    p.add_argument('--mem-rounds', type=int, default=3)
    p.add_argument('--out', help='JSON path (default {} for a full run)'.format(DEFAULT_OUT))
    args = p.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 11)
    check(args.blocks)
    rng = numpy.random.default_rng(1)
    params, x, labels = make_model(args.blocks, rng)
    steps = {'plain': make_step(params, x, labels, False),
             'checkpoint': make_step(params, x, labels, True)}
    memory = {}
    for name, step in steps.items():
        peak, start = peak_mib(step, args.mem_rounds)
        memory[name] = {'peak_above_start_mib': peak, 'start_mib': start}
    activation = BATCH * WIDTH * 4 / 2 ** 20
    timings = {}
    names = list(steps)
    for n in names:
        _timing.warm_up(steps[n], 2, 0.0)
        timings[n] = _timing.Timing(1)
    for r in range(rounds):
        for n in names[r % 2:] + names[:r % 2]:
            timings[n].samples.append(_timing._sample(steps[n], 1))
    paired = [c / q for c, q in zip(timings['checkpoint'].samples, timings['plain'].samples)]
    result = {
        'benchmark': 'xgrad.checkpoint: {}-block residual MLP training step'.format(args.blocks),
        'model': {'blocks': args.blocks, 'block': 'h + tanh(h @ W1 + b1) @ W2',
                  'batch': BATCH, 'width': WIDTH, 'hidden': HIDDEN, 'dtype': 'float32',
                  'step': 'forward, softmax cross-entropy, backward, SGD update',
                  'one_activation_mib': activation,
                  'parameters_mib': sum(q.size for q in params) * 4 / 2 ** 20},
        'memory_measure': MEMORY_MEASURE.format(args.mem_rounds),
        'memory': memory,
        'memory_ratio_checkpoint_over_plain': (memory['checkpoint']['peak_above_start_mib'] /
                                               memory['plain']['peak_above_start_mib']),
        'time_ms': {n: t.median * 1e3 for n, t in timings.items()},
        'spread_ms': {n: {k: v / 1e3 for k, v in t.summary_us().items()
                          if k not in ('rounds', 'iterations_per_sample')}
                      for n, t in timings.items()},
        'time_ratio_checkpoint_over_plain': timings['checkpoint'].median / timings['plain'].median,
        'time_paired_ratio': statistics.median(paired),
        'rounds': rounds,
        'threads': {'blas': _machine.numpy_blas_threads(),
                    'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS')},
        'date': datetime.datetime.now().isoformat(timespec='seconds'),
        'machine': _machine.machine_info(),
        'versions': {'python': platform.python_version(), 'numpy': numpy.__version__,
                     'xgrad_location': xgrad.__file__},
    }
    for n in names:
        print('{:10s} peak {:7.1f} MiB above start ({:.0f} activations)  step {:7.1f} ms'.format(
            n, memory[n]['peak_above_start_mib'],
            memory[n]['peak_above_start_mib'] / activation, result['time_ms'][n]))
    print('checkpoint / plain: memory {:.2f}x, time {:.2f}x (paired {:.2f}x)'.format(
        result['memory_ratio_checkpoint_over_plain'], result['time_ratio_checkpoint_over_plain'],
        result['time_paired_ratio']))
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out:
        with open(out, 'w') as f:
            json.dump(result, f, indent=1)
            f.write('\n')
        print('wrote', os.path.relpath(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
