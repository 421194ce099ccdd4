#!/usr/bin/env python
"""Run xgrad's benchmarks side by side with NumPy, PyTorch and HIPS autograd.

    python bench/run.py [--quick] [--out PATH] [--only NAME[,NAME]]
                        [--frameworks xgrad,numpy,torch,autograd]

Every benchmark runs in this one process, its frameworks interleaved in rounds
(see _timing.py); the table gives the median time per iteration and xgrad's
ratio to each anchor, and the JSON written to --out keeps all of it with the
machine and versions. Gradients are checked against the NumPy floor before
timing (see _verify.py). See README.md for what each benchmark measures.
"""

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import time
import traceback

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if _BENCH_DIR not in sys.path:  # `python -m bench.run` or an import from elsewhere
    sys.path.insert(0, _BENCH_DIR)

import numpy  # noqa: E402

import _frameworks  # noqa: E402
import _machine  # noqa: E402
import _timing  # noqa: E402
import _verify  # noqa: E402
import bench_batch_norm  # noqa: E402
import bench_conv  # noqa: E402
import bench_elementwise_chain  # noqa: E402
import bench_gradient_penalty  # noqa: E402
import bench_large_elementwise  # noqa: E402
import bench_large_mlp  # noqa: E402
import bench_mlp_step  # noqa: E402

BENCHMARKS = [
    bench_elementwise_chain,
    bench_mlp_step,
    bench_gradient_penalty,
    bench_large_elementwise,
    bench_large_mlp,
    bench_conv,
    bench_batch_norm,
]

SETTINGS = {
    'full': {'rounds': 30, 'min_time': 0.05, 'warmup': 3, 'warmup_time': 0.2},
    'quick': {'rounds': 5, 'min_time': 0.005, 'warmup': 1, 'warmup_time': 0.02},
}
# Results are named by what they measure and when (bench/results/README.md).
DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'bench_run_{}.json'.format(
    datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d_%H%M')))
SEED = 0


def parse_args(argv):
    names = [b.NAME for b in BENCHMARKS]
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog='benchmarks: ' + ', '.join(names))
    p.add_argument('--quick', action='store_true',
                   help='few, short samples: the whole run takes well under a minute (smoke test)')
    p.add_argument('--out', metavar='PATH',
                   help='write the JSON results here (default for a full run: '
                        'bench/results/bench_run_DATE_HHMM.json, UTC; a --quick run writes nothing unless --out is given)')
    p.add_argument('--only', metavar='NAME[,NAME]', help='run only these benchmarks')
    p.add_argument('--frameworks', metavar='LIST', default=','.join(_frameworks.ALL),
                   help='comma-separated subset of %(default)s; numpy (floor and reference) always runs')
    p.add_argument('--rounds', type=int, help='timing rounds (default: 30, quick: 5)')
    p.add_argument('--min-time', type=float, metavar='S',
                   help='minimum seconds per sample (default: 0.05, quick: 0.005)')
    p.add_argument('--pause', type=float, default=0.0, metavar='S',
                   help='sleep before each sample so other frameworks\' worker threads go idle (default: 0)')
    p.add_argument('--strict', action='store_true', help='exit 1 when a target is missed')
    p.add_argument('--list', action='store_true', help='list the benchmarks and exit')
    args = p.parse_args(argv)

    if args.only:
        wanted = [n.strip() for n in args.only.split(',') if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            p.error('unknown benchmark(s) {}; choose from {}'.format(', '.join(unknown), ', '.join(names)))
        args.benchmarks = [b for b in BENCHMARKS if b.NAME in wanted]
    else:
        args.benchmarks = list(BENCHMARKS)

    wanted = {f.strip() for f in args.frameworks.split(',') if f.strip()}
    unknown = sorted(wanted - set(_frameworks.ALL))
    if unknown:
        p.error('unknown framework(s) {}; choose from {}'.format(
            ', '.join(unknown), ', '.join(_frameworks.ALL)))
    args.frameworks = [f for f in _frameworks.ALL if f in wanted or f == 'numpy']

    settings = dict(SETTINGS['quick' if args.quick else 'full'])
    if args.rounds is not None:
        settings['rounds'] = args.rounds
    if args.min_time is not None:
        settings['min_time'] = args.min_time
    settings['pause'] = args.pause
    args.settings = settings
    if args.out is None and not args.quick:
        args.out = DEFAULT_OUT
    return args


def load_frameworks(requested):
    """{name: module} of the frameworks that load, and {name: why} of those skipped.

    An anchor that is not installed is skipped; xgrad failing to load is fatal.
    """
    libs, skipped = {}, {}
    for name in requested:
        try:
            libs[name] = _frameworks.load(name)
        except Exception as e:  # noqa: BLE001  (any import failure means "not available")
            if name in _frameworks.OPTIONAL:
                skipped[name] = 'not installed ({}: {})'.format(type(e).__name__, e)
                print('note: {} skipped: {}'.format(name, skipped[name]), file=sys.stderr)
                continue
            print('error: cannot import {}: {}: {}\n'
                  '  build the engine first, or leave it out: --frameworks numpy,torch,autograd'
                  .format(name, type(e).__name__, e), file=sys.stderr)
            sys.exit(2)
    return libs, skipped


def _crash_summary(exc):
    """'Type: message', then the benchmark line that raised it and the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if os.path.dirname(os.path.abspath(f.filename)) == _BENCH_DIR]
    where = ['  at {}:{}: {}'.format(os.path.basename(f.filename), f.lineno, f.line) for f in ours[-1:]]
    if frames and (not ours or frames[-1] is not ours[-1]):
        where.append('  in {}:{}'.format(frames[-1].filename, frames[-1].lineno))
    return '\n'.join([''.join(traceback.format_exception_only(type(exc), exc)).rstrip()] + where)


def run_benchmark(bench, libs, settings):
    """Build, verify and time one benchmark; return its JSON-ready result."""
    result = {
        'description': bench.DESCRIPTION,
        'target': {'anchor': bench.ANCHOR, 'max_ratio': bench.TARGET},
        'errors': {},
    }
    data = bench.make_data(numpy.random.default_rng(SEED))

    steps = {}
    for name, lib in libs.items():
        try:
            steps[name] = getattr(bench, 'build_' + name)(lib, data)
        except Exception as e:  # noqa: BLE001
            result['errors'][name] = 'build failed: {}'.format(_crash_summary(e))

    # Verification, once, outside timing: a framework that disagrees with the floor is not timed.
    if 'numpy' in steps:
        reference = _verify.run_twice(steps['numpy'])
        try:
            _verify.check_floor(bench, reference)
        except _verify.VerificationError as e:
            result['errors']['numpy'] = str(e)
            del steps['numpy']
    for name in [n for n in steps if n != 'numpy']:
        if 'numpy' not in steps:
            break
        try:
            _verify.check(bench, name, _verify.run_twice(steps[name]), reference)
        except Exception as e:  # noqa: BLE001  (a crash inside the framework counts as a failure)
            detail = str(e) if isinstance(e, _verify.VerificationError) else _crash_summary(e)
            result['errors'][name] = 'verification failed: {}'.format(detail.strip())
            del steps[name]
    result['verified'] = sorted(steps) if 'numpy' in steps else []
    for name, error in result['errors'].items():
        lines = error.splitlines()
        more = ['  ... ({} more lines in the JSON)'.format(len(lines) - 12)] if len(lines) > 12 else []
        print('error: {} / {}: {}'.format(bench.NAME, name, '\n'.join(lines[:12] + more)), file=sys.stderr)

    timings = _timing.measure(steps, settings['rounds'], settings['min_time'], settings['warmup'],
                              settings['warmup_time'], settings['pause']) if steps else {}
    times = {name: t.median * 1e6 for name, t in timings.items()}
    result['time_us'] = times
    result['spread_us'] = {name: t.summary_us() for name, t in timings.items()}
    ops = getattr(bench, 'OPS_PER_ITER', None)
    if ops:
        result['ops_per_iter'] = ops
        result['time_per_op_us'] = {name: t / ops for name, t in times.items()}

    result['ratios'] = {'xgrad/' + a: times['xgrad'] / times[a]
                        for a in _frameworks.ANCHORS if 'xgrad' in times and a in times}
    # The same ratio per round (samples of one round are adjacent in time), median over rounds:
    # less sensitive to the machine speeding up or slowing down during the run.
    result['paired_ratios'] = {
        'xgrad/' + a: statistics.median(x / y for x, y in zip(timings['xgrad'].samples, timings[a].samples))
        for a in _frameworks.ANCHORS if 'xgrad' in timings and a in timings}
    if 'numpy' in times:
        result['vs_floor'] = {name: t / times['numpy'] for name, t in times.items()}
    key = 'xgrad/' + bench.ANCHOR
    result['target_ratio'] = bench.TARGET
    result['ratio'] = result['ratios'].get(key)
    result['met'] = None if result['ratio'] is None else bool(result['ratio'] <= bench.TARGET)
    return result


def _fmt_us(value):
    if value is None:
        return '-'
    if value >= 1000:
        return '{:,.0f}'.format(value)
    if value >= 10:
        return '{:.1f}'.format(value)
    return '{:.3f}'.format(value)


def _fmt_ratio(value):
    return '-' if value is None else '{:.3f}'.format(value)


def print_table(results, frameworks, out=sys.stdout):
    """One row per benchmark: median us/iteration per framework, ratios, target."""
    anchors = [a for a in _frameworks.ANCHORS if a in frameworks]
    if 'xgrad' in frameworks:
        ratio_cols = [('xgrad/' + a, lambda r, a=a: r['ratios'].get('xgrad/' + a)) for a in anchors]
    else:  # no engine: show how the anchors compare with the floor instead
        ratio_cols = [(a + '/numpy', lambda r, a=a: r.get('vs_floor', {}).get(a))
                      for a in anchors if a != 'numpy']
    header = (['benchmark'] + ['{} us'.format(f) for f in frameworks]
              + [c for c, _ in ratio_cols] + ['target', 'met'])
    rows = []
    for name, r in results.items():
        met = {True: 'yes', False: 'NO', None: '-'}[r['met']]
        if r['errors']:
            met = 'ERROR'
        target = '<={:g}x {}'.format(r['target']['max_ratio'], r['target']['anchor'])
        rows.append([name] + [_fmt_us(r['time_us'].get(f)) for f in frameworks]
                    + [_fmt_ratio(get(r)) for _, get in ratio_cols] + [target, met])
        if 'time_per_op_us' in r:
            rows.append(['  per op (/{})'.format(r['ops_per_iter'])]
                        + [_fmt_us(r['time_per_op_us'].get(f)) for f in frameworks]
                        + [''] * (len(ratio_cols) + 2))
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
    for row in [header] + rows:
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print('  '.join(cells).rstrip(), file=out)


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for b in BENCHMARKS:
            print('{:20s} target xgrad <= {:g}x {:6s} {}'.format(b.NAME, b.TARGET, b.ANCHOR, b.DESCRIPTION))
        return 0

    load = _machine.load_average()
    if load is not None and load > 0.5:
        print('warning: load average {} before starting: other processes compete for the CPUs, '
              'timings (torch\'s especially) will be slow and noisy'.format(load), file=sys.stderr)
    machine = _machine.machine_info()
    libs, skipped = load_frameworks(args.frameworks)
    numpy_threads = _machine.numpy_blas_threads()
    threads = {'numpy_blas': numpy_threads}
    if 'xgrad' in libs:
        from xgrad._backend import native_kernels
        # OMP_NUM_THREADS, else the cores (builds before the threads: one)
        threads['xgrad'] = getattr(native_kernels, 'max_threads', lambda: 1)()
    if 'torch' in libs:
        libs['torch'].set_num_threads(numpy_threads)
        threads['torch'] = libs['torch'].get_num_threads()
    frameworks = list(libs)
    print('frameworks: {}; threads: {}; {} rounds, >= {:g} s per sample'.format(
        ', '.join('{} {}'.format(n, _frameworks.version(n, m)) for n, m in libs.items()),
        ', '.join('{} {}'.format(k, v) for k, v in threads.items()),
        args.settings['rounds'], args.settings['min_time']), file=sys.stderr)

    results = {}
    started = time.perf_counter()
    for bench in args.benchmarks:
        t0 = time.perf_counter()
        results[bench.NAME] = run_benchmark(bench, libs, args.settings)
        gc.collect()
        print('{:20s} done in {:.1f} s'.format(bench.NAME, time.perf_counter() - t0), file=sys.stderr)
    elapsed = time.perf_counter() - started

    print()
    print_table(results, frameworks)
    print('\n(median time per iteration in microseconds, frameworks interleaved in rounds; total {:.1f} s)'
          .format(elapsed))

    report = {
        'schema': 1,
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'quick': args.quick,
        'settings': dict(args.settings, seed=SEED),
        'machine': machine,
        'threads': threads,
        'versions': dict({'python': machine['python']},
                         **{n: _frameworks.version(n, m) for n, m in libs.items()}),
        'xgrad_location': _frameworks.location(libs['xgrad']) if 'xgrad' in libs else None,
        'frameworks': frameworks,
        'skipped': skipped,
        'elapsed_s': elapsed,
        'benchmarks': results,
    }
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            json.dump(report, f, indent=2, sort_keys=False)
            f.write('\n')
        print('wrote {}'.format(args.out), file=sys.stderr)

    if any(r['errors'] for r in results.values()):
        return 1
    if args.strict and any(r['met'] is False for r in results.values()):
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
