#!/usr/bin/env python
"""Engine costs that grow with the graph (issue 13's figures).

    python bench/long_chain.py [--ops 1000000] [--scopes 1000] [--out PATH]

* chain: ``y = x``, then ``--ops`` times ``y = y * c`` on a (1,) float32
  leaf; the seconds to record it (forward), to run ``backward`` from it,
  and to free the graph (``del`` of the last output, then ``gc.collect()``:
  with GC-tracked arrays and nodes the collector walks whatever is alive).
* parameter after scopes: a parameter used once in each of ``--scopes``
  ``backprop_scope``s (each graph released when its scope ends), then the
  microseconds per op on it; expired graphs must not pile up on it.

xgrad is imported as Python finds it: run with ``PYTHONPATH=TREE`` to time
another build (bench/ab_builds.py's baseline, say). One BLAS thread is
irrelevant here (no BLAS calls); the figures are single-threaded.
"""

import argparse
import gc
import json
import os
import sys
import time


def chain(xgrad, n_ops):
    x = xgrad.ones((1,), 'float32').require_grad()
    c = xgrad.full((1,), 1.0000001, 'float32')
    t0 = time.perf_counter()
    y = x
    for _ in range(n_ops):
        y = y * c
    t1 = time.perf_counter()
    y.backward()
    t2 = time.perf_counter()
    del y
    gc.collect()
    t3 = time.perf_counter()
    return {'forward_s': t1 - t0, 'backward_s': t2 - t1, 'free_s': t3 - t2,
            'grad': float(x.grad.to_numpy()[0])}


def parameter_after_scopes(xgrad, n_scopes, n_ops=2000):
    w = xgrad.ones((1,), 'float32')
    for k in range(n_scopes):
        with xgrad.backprop_scope('scope{}'.format(k)) as bp:
            w.require_grad(bp)
            xgrad.backward(w * 2.0, bp)
    c = xgrad.ones((1,), 'float32')
    t0 = time.perf_counter()
    for _ in range(n_ops):
        w * c
    return {'per_op_us': (time.perf_counter() - t0) / n_ops * 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--ops', type=int, default=1_000_000)
    parser.add_argument('--scopes', type=int, default=1000)
    parser.add_argument('--out')
    args = parser.parse_args()
    import xgrad
    sys.setrecursionlimit(10000)
    result = {'xgrad_location': os.path.dirname(xgrad.__file__), 'ops': args.ops,
              'scopes': args.scopes, 'chain': chain(xgrad, args.ops),
              'parameter_after_scopes': parameter_after_scopes(xgrad, args.scopes)}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
