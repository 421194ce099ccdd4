#!/usr/bin/env python
"""Compare two builds of xgrad on the small-graph benchmarks or the training
steps, in paired rounds.

    python bench/ab_builds.py BASELINE_TREE CANDIDATE_TREE [--pairs 8]
        [--only elementwise_chain,mlp_step,gradient_penalty] [--out PATH]
    python bench/ab_builds.py BASELINE_TREE CANDIDATE_TREE --suite training_steps
    python bench/ab_builds.py BASELINE_TREE CANDIDATE_TREE --suite conv_points \
        --only conv:8,16,32,56,5,2,conv_transpose:64,16,32,16,5,2 [--threads 0]

Each tree is an xgrad checkout with its extensions built in place. A pair
runs the suite once on each tree (in child processes, ``PYTHONPATH`` set to
the tree, one BLAS/OpenMP thread), the order alternating from pair to pair:
``bench/run.py --frameworks xgrad`` (suite ``small_graphs``, the default),
or ``bench/training_steps.py --threads 1`` (suite ``training_steps``: the
cnn, lstm, wgan_gp and swish_mlp steps), or ``bench/conv_sweep.py --points``
(suite ``conv_points``: the convolution steps named by ``--only``, each
OP:N,C,O,SIZE,K,S; with ``--threads 0`` the convolutions run with
default threads, the thread variables unset). Reported per benchmark: the median of the per-pair
ratios candidate/baseline of xgrad's time, and the same for xgrad's time
over the floor measured in the same process, which cancels machine-wide
drift between the two processes of a pair: NumPy's forward for the small
graphs, torch's step for the training steps and the convolutions.

It answers "what does this change cost", for a change that cannot be
switched at run time: issue 13's GC tracking (a baseline built with
``@cython.no_gc`` on ndarray and ArrayNode) is the example in
bench/results/gc_tracking_cost_ab_2026-12-01.json (in git at 9834f8a).
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL_GRAPH = 'elementwise_chain,mlp_step,gradient_penalty'
ONE_THREAD = {name: '1' for name in (
    'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS')}


def run_training_steps(tree, only, rounds):
    """xgrad's and torch's median times (us) per training step on ``tree``
    (one thread)."""
    env = dict(os.environ, PYTHONPATH=tree, **ONE_THREAD)
    cmd = [sys.executable, os.path.join(HERE, 'training_steps.py'), '--threads', '1',
           '--rounds', str(rounds), '--json-stdout']
    if only:
        cmd += ['--only', only]
    run = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True)
    if run.returncode:
        sys.exit('bench/training_steps.py failed on {}:\n{}'.format(tree, run.stderr))
    result = json.loads(run.stdout)
    return {name: (w['time_us']['xgrad'], w['time_us']['torch'])
            for name, w in result['workloads'].items()}


def conv_point_specs(only):
    """--only's conv points, 'conv:8,16,32,56,5,2,conv_transpose:...', as a
    list of OP:N,C,O,SIZE,K,S."""
    specs, current = [], None
    for part in only.split(','):
        if ':' in part:
            current = [part]
            specs.append(current)
        elif current is None:
            sys.exit('--only: conv points start with conv: or conv_transpose:, got ' + only)
        else:
            current.append(part)
    return [','.join(spec) for spec in specs]


def run_script(tree, script, args, one_thread=True):
    """The JSON that bench/``script`` writes with ``args`` + ``--out`` when
    run on ``tree`` (one thread, or with the thread variables unset)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'result.json')
        env = dict(os.environ, PYTHONPATH=tree)
        for name in ONE_THREAD:
            env.pop(name, None)
        if one_thread:
            env.update(ONE_THREAD)
        run = subprocess.run([sys.executable, os.path.join(HERE, script), '--out', out] + args,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             universal_newlines=True)
        if run.returncode:
            sys.exit('bench/{} failed on {}:\n{}'.format(script, tree, run.stderr))
        with open(out) as f:
            return json.load(f)


def run_conv_points(tree, only, rounds, threads=1):
    """xgrad's and torch's median times (us) per conv point on ``tree``
    (``threads``: 1, or 0 for the default), named 'OP N,C,O,SIZE,K,S'."""
    result = run_script(tree, 'conv_sweep.py',
                        ['--threads', str(threads), '--rounds', str(rounds),
                         '--points'] + conv_point_specs(only), one_thread=threads == 1)
    return {'{} {}'.format(r['op'], ','.join(str(r[k]) for k in (
        'batch', 'in_channels', 'out_channels', 'size', 'kernel', 'stride'))):
            (r['xgrad_us'], r['torch_us']) for r in result['conv']}


def run_once(tree, only, rounds):
    """xgrad's and NumPy's median times (us) per benchmark on ``tree``."""
    result = run_script(tree, 'run.py', ['--frameworks', 'xgrad', '--only', only,
                                         '--rounds', str(rounds)])
    location = result['xgrad_location']
    if not os.path.realpath(location).startswith(os.path.realpath(tree)):
        sys.exit('xgrad was imported from {}, not from {}'.format(location, tree))
    return {name: (b['time_us']['xgrad'], b['time_us']['numpy'])
            for name, b in result['benchmarks'].items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('baseline')
    parser.add_argument('candidate')
    parser.add_argument('--pairs', type=int, default=8)
    parser.add_argument('--rounds', type=int, default=10,
                        help='timing rounds inside each run (default 10)')
    parser.add_argument('--suite', choices=('small_graphs', 'training_steps', 'conv_points'),
                        default='small_graphs')
    parser.add_argument('--only', help='benchmarks of the suite (default: small graphs '
                        '{}; every training step; conv_points: required)'.format(SMALL_GRAPH))
    parser.add_argument('--threads', type=int, choices=(0, 1), default=1,
                        help='conv_points: 1 (default) or 0, the default threads')
    parser.add_argument('--out', help='write the per-pair times and ratios as JSON')
    args = parser.parse_args()
    if args.threads != 1 and args.suite != 'conv_points':
        parser.error('--threads 0 is for --suite conv_points (the others run one thread)')
    trees = {'baseline': os.path.abspath(args.baseline),
             'candidate': os.path.abspath(args.candidate)}
    if args.suite == 'training_steps':
        run, only = run_training_steps, args.only
    elif args.suite == 'conv_points':
        if not args.only:
            parser.error('--suite conv_points needs --only OP:N,C,O,SIZE,K,S[,OP:...]')
        run, only = functools.partial(run_conv_points, threads=args.threads), args.only
    else:
        run, only = run_once, args.only or SMALL_GRAPH
    pairs = []
    for k in range(args.pairs):
        order = ['baseline', 'candidate'] if k % 2 == 0 else ['candidate', 'baseline']
        pair = {which: run(trees[which], only, args.rounds) for which in order}
        pairs.append(pair)
        print('pair {}/{} done'.format(k + 1, args.pairs), file=sys.stderr)
    summary = {}
    for name in pairs[0]['baseline']:
        time_ratio = [p['candidate'][name][0] / p['baseline'][name][0] for p in pairs]
        floor_ratio = [(p['candidate'][name][0] / p['candidate'][name][1])
                       / (p['baseline'][name][0] / p['baseline'][name][1]) for p in pairs]
        summary[name] = {
            'baseline_us': statistics.median(p['baseline'][name][0] for p in pairs),
            'candidate_us': statistics.median(p['candidate'][name][0] for p in pairs),
            'median_pair_ratio': statistics.median(time_ratio),
            'median_pair_ratio_over_floor': statistics.median(floor_ratio),
        }
    print('{:<20} {:>12} {:>12} {:>12} {:>18}'.format(
        'benchmark', 'baseline us', 'candidate us', 'cand/base', 'cand/base vs floor'))
    # (floor: NumPy's forward for the small graphs, torch's step for the others)
    for name, s in summary.items():
        print('{:<20} {:>12.1f} {:>12.1f} {:>12.3f} {:>18.3f}'.format(
            name, s['baseline_us'], s['candidate_us'], s['median_pair_ratio'],
            s['median_pair_ratio_over_floor']))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump({'suite': args.suite, 'trees': trees, 'pairs': args.pairs,
                       'rounds': args.rounds,
                       'threads': ONE_THREAD if args.threads == 1 else 'default',
                       'summary': summary, 'runs': pairs}, f,
                      indent=1)


if __name__ == '__main__':
    main()
