#!/usr/bin/env python
"""CPU instructions per iteration of xgrad's small-graph benchmarks, by
valgrind's callgrind: deterministic where wall-clock time on a shared VM is
not (bench/ab_builds.py's ratios move by +-10% between runs there).

    python bench/instructions.py TREE [TREE ...] [--only elementwise_chain,...]
        [--out PATH]

For each tree (an xgrad checkout built in place) and benchmark, it runs the
benchmark's xgrad step ``LOW`` and ``HIGH`` times in a child process under
``valgrind --tool=callgrind`` (PYTHONPATH = the tree, one BLAS thread) and
reports (instructions at HIGH - instructions at LOW) / (HIGH - LOW): the
cost of one iteration with start-up and warm-up cancelled. With two trees
it also prints the change from the first to each other.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL_GRAPH = 'elementwise_chain,mlp_step,gradient_penalty'
MODULES = {'elementwise_chain': 'bench_elementwise_chain', 'mlp_step': 'bench_mlp_step',
           'gradient_penalty': 'bench_gradient_penalty'}
LOW, HIGH = 20, 120
# One BLAS thread; the hash seed pinned (set iteration order moved the MLP step's count by 3%)
ENV = {'OMP_NUM_THREADS': '1', 'OPENBLAS_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1',
       'PYTHONHASHSEED': '0'}

# The child: build the benchmark's xgrad step and run it n times.
CHILD = '''
import sys
sys.path.insert(0, {here!r})
import numpy, xgrad
bench = __import__({module!r})
step = bench.build_xgrad(xgrad, bench.make_data(numpy.random.default_rng(0)))
for _ in range({n}):
    step()
'''


def instructions(tree, benchmark, n):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'callgrind.out')
        code = CHILD.format(here=HERE, module=MODULES[benchmark], n=n)
        # In the temporary directory: ``python -c`` puts the working directory
        # first on sys.path, ahead of PYTHONPATH, so run from a checkout it
        # would import that checkout's xgrad whatever the tree.
        env = dict(os.environ, PYTHONPATH=tree, **ENV)
        subprocess.run(['valgrind', '--tool=callgrind', '--callgrind-out-file=' + out,
                        sys.executable, '-c', code], env=env, check=True, cwd=tmp,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(glob.glob(out + '*')[0]) as f:
            for line in f:
                m = re.match(r'(summary|totals): (\d+)', line)
                if m:
                    return int(m.group(2))
    raise RuntimeError('no instruction total in the callgrind output')


def per_iteration(tree, benchmark):
    return (instructions(tree, benchmark, HIGH) - instructions(tree, benchmark, LOW)) // (
        HIGH - LOW)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('trees', nargs='+')
    parser.add_argument('--only', default=SMALL_GRAPH)
    parser.add_argument('--out')
    args = parser.parse_args()
    trees = [os.path.abspath(t) for t in args.trees]
    names = args.only.split(',')
    counts = {t: {} for t in trees}
    for name in names:
        for t in trees:
            counts[t][name] = per_iteration(t, name)
            print('{:<20} {:>14,} instructions/iteration  {}'.format(
                name, counts[t][name], t), flush=True)
    changes = {}
    for t in trees[1:]:
        changes[t] = {n: '{:+.1f}%'.format(100.0 * (counts[t][n] / counts[trees[0]][n] - 1))
                      for n in names}
        print('from {} to {}: {}'.format(trees[0], t, ', '.join(
            '{} {}'.format(n, c) for n, c in changes[t].items())))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump({'what': 'CPU instructions per iteration (callgrind, ({} - {} '
                               'iterations) / {}), one BLAS thread'.format(HIGH, LOW, HIGH - LOW),
                       'python': sys.version.split()[0], 'counts': counts,
                       'changes_from_first': changes}, f, indent=1)


if __name__ == '__main__':
    main()
