"""Where splitting an elementwise op over threads starts to pay.

For each CPU kernel family and size, times the op on one thread and split
over every thread (the grain forced to 1, so every size splits), paired and
interleaved, and prints the ratio split / serial. The grains in
xgrad/_backend/native_kernels.pyx (GRAIN_ARITHMETIC, GRAIN_VECTOR: the
fewest elements per thread) are set from where this ratio drops below about
0.9. Run with the threads you want measured (OMP_NUM_THREADS, default: the
cores):

    python bench/threads.py [--out bench/results/thread_split_DATE.json]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from xgrad._backend import native_kernels as K  # noqa: E402

SIZES = [1 << k for k in range(12, 23)]
KERNELS = {
    'multiply (arithmetic)': lambda x, y: K.multiply(x, y),
    'tanh_grad (arithmetic)': lambda x, y: K.tanh_grad(x, y),
    'sum (arithmetic)': lambda x, y: K.sum_all(x),
    'tanh (vector)': lambda x, y: K.tanh_forward(x),
    'exp (vector)': lambda x, y: K.exp_forward(x),
}


def _best(f, x, y, seconds=0.02):
    f(x, y)
    best = float('inf')
    end = time.perf_counter() + seconds
    while True:
        t = time.perf_counter()
        f(x, y)
        best = min(best, time.perf_counter() - t)
        if t > end:
            return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', help='write the table as JSON here')
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()
    threads = K.max_threads()
    if threads < 2:
        sys.exit('only one thread (one CPU, or OMP_NUM_THREADS=1): nothing to measure')
    old = K._set_grains(1, 1)
    rng = numpy.random.default_rng(0)
    rows = []
    try:
        print(f'{threads} threads; ratio = split time / one-thread time (median of {args.rounds})')
        print(f'{"kernel":26}' + ''.join(f'{n:>9}' for n in SIZES))
        for name, f in KERNELS.items():
            ratios = []
            for n in SIZES:
                x = rng.standard_normal(n).astype(numpy.float32)
                y = rng.standard_normal(n).astype(numpy.float32)
                pairs = []
                for _ in range(args.rounds):
                    K.set_thread_limit(1)
                    serial = _best(f, x, y)
                    K.set_thread_limit(0)
                    pairs.append(_best(f, x, y) / serial)
                ratios.append(statistics.median(pairs))
            rows.append({'kernel': name, 'sizes': SIZES, 'split_over_serial': ratios})
            print(f'{name:26}' + ''.join(f'{r:9.2f}' for r in ratios))
    finally:
        K._set_grains(*old)
        K.set_thread_limit(0)
    if args.out:
        with open(args.out, 'w') as f:
            json.dump({'threads': threads, 'machine': platform.processor() or platform.machine(),
                       'float32': True, 'rows': rows}, f, indent=1)


if __name__ == '__main__':
    main()
