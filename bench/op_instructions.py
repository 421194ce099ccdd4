#!/usr/bin/env python
"""CPU instructions per call of op_overhead.py's xgrad step (the op at its
small sample, forward recorded + backward), per op and tree, by valgrind's
callgrind: the deterministic before/after for per-op overhead work, where
op_overhead.py's wall-clock ratios move by 2x on a shared VM.

    python bench/op_instructions.py TREE [TREE ...] --ops floor_divide,stack,...
        [--calls 100] [--out PATH]

One callgrind process per tree (PYTHONPATH = the tree, one BLAS thread; the
trees run two at a time). Each op's step is built by this checkout's
op_overhead.py (the same step for every tree), called 20 times to warm up,
then ``--calls`` times between two ``os.getppid()`` calls; callgrind dumps
its counters on entering ``os_getppid`` (``--dump-before``), so the dump
between the two holds exactly those calls. With two or more trees it prints
the change from the first.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = {'OMP_NUM_THREADS': '1', 'OPENBLAS_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1',
       'PYTHONHASHSEED': '0'}  # (as bench/instructions.py)

CHILD = '''
import os, sys
sys.path.insert(0, {here!r})
import numpy, op_overhead, xgrad
infos = {{o.name: o for o in xgrad.registered_ops()}}
numpy.seterr(all='ignore')
for name in {ops!r}:
    step = op_overhead.build(infos[name], xgrad, None)[0]['xgrad']
    for _ in range(20):
        step()
    os.getppid()
    for _ in range({calls}):
        step()
    os.getppid()
'''


def instructions(tree, ops, calls):
    """{op: instructions per call} for ``ops`` in ``tree``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'callgrind.out')
        # cwd: the temporary directory (``python -c`` puts the working
        # directory ahead of PYTHONPATH; see bench/instructions.py)
        subprocess.run(['valgrind', '--tool=callgrind', '--dump-before=os_getppid',
                        '--callgrind-out-file=' + out, sys.executable, '-c',
                        CHILD.format(here=HERE, ops=list(ops), calls=calls)],
                       env=dict(os.environ, PYTHONPATH=tree, **ENV), check=True, cwd=tmp,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dumps = sorted(glob.glob(out + '.*'), key=lambda f: int(f.rsplit('.', 1)[1]))
        totals = []
        for path in dumps:
            with open(path) as f:
                totals.append(next(int(m.group(2)) for m in map(
                    re.compile(r'(summary|totals): (\d+)').match, f) if m))
    # dumps: up to the first marker, op 0's calls, op 1's set-up, op 1's calls, ...
    return {op: totals[1 + 2 * i] // calls for i, op in enumerate(ops)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('trees', nargs='+')
    parser.add_argument('--ops', required=True, help='comma-separated registered op names')
    parser.add_argument('--calls', type=int, default=100)
    parser.add_argument('--out')
    args = parser.parse_args()
    trees = [os.path.abspath(t) for t in args.trees]
    ops = args.ops.split(',')
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(trees, pool.map(lambda t: instructions(t, ops, args.calls), trees)))
    changes = {}
    for op in ops:
        row = [counts[t][op] for t in trees]
        changes[op] = ['{:+.1f}%'.format(100.0 * (c / row[0] - 1)) for c in row[1:]]
        print('{:<22} '.format(op) + '  '.join('{:>10,}'.format(c) for c in row)
              + ''.join('  ' + c for c in changes[op]), flush=True)
    if args.out:
        with open(args.out, 'w') as f:
            json.dump({'what': "CPU instructions per call of op_overhead.py's xgrad step "
                               '(callgrind, {} calls after 20 warm-up calls), one BLAS '
                               'thread'.format(args.calls),
                       'python': sys.version.split()[0], 'trees': trees, 'counts': counts,
                       'changes_from_first': changes}, f, indent=1)


if __name__ == '__main__':
    main()
