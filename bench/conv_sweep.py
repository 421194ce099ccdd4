"""Convolution and pooling sweep: xgrad against torch (oneDNN) per shape,
with GFLOP/s against this machine's own sgemm.

    python bench/conv_sweep.py                    # the full sweep, one thread; writes bench/results/conv_sweep_DATE.json
    python bench/conv_sweep.py --quick            # the issue-27 shapes and a few more (about a minute)
    python bench/conv_sweep.py --threads 0        # each framework's default threads
    python bench/conv_sweep.py --kernels 3 --strides 1 --transpose --no-pool  # a slice
    python bench/conv_sweep.py --rerun bench/results/conv_sweep_1thread_avx2_2026-12-06.json
        # again, the points of an earlier sweep that were slower than torch (--above 1.0)
    python bench/conv_sweep.py --points conv:8,16,32,56,5,2 conv_transpose:64,16,32,16,5,2
        # named points: OP:batch,in_channels,out_channels,size,kernel,stride

The sweep (issue 27): batch 1, 8, 64; channels 1->16, 16->32, 64->64,
128->128, 256->256; spatial 4, 8, 16, 32, 56; kernel 1, 3, 5 with pad
k // 2 ("same": 0, 1, 2; other pads move the cost by the border only);
stride 1 and 2. Each point is ``conv`` forward + backward to x, W and b (and,
with ``--transpose``, ``conv_transpose`` of the same weights). Pruned: points
whose kernel exceeds the padded input, and points whose estimated single
forward + backward (3 GEMM-sized products at the sgemm rate measured here)
exceeds ``--max-seconds`` (1 s). Pooling points: average_pool and max_pool,
window 2 stride 2 and window 3 stride 2 pad 1, over the same batches,
channels (the input side) and sizes, forward + backward.

Per point: xgrad and torch median microseconds of paired, interleaved rounds
(``_timing.measure``), the ratio of medians and the median paired ratio,
xgrad's GFLOP/s (2 * N * O * C/groups * k^2 * L^2 per product, 3 products),
the load average, and the sgemm GFLOP/s of numpy float32 matmul of a
comparable size (M = out channels, K = C * k^2, N = batch * L^2, capped),
measured in the same run. Gradients are compared with torch's first.
"""

import argparse
import datetime
import itertools
import json
import os
import statistics
import sys
import time


def _set_threads(argv):
    """One thread unless --threads 0: set before NumPy loads its BLAS."""
    if '--threads' in argv and argv[argv.index('--threads') + 1] == '0':
        return 0
    for v in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS'):
        os.environ[v] = '1'
    return 1


THREADS = _set_threads(sys.argv)

import numpy  # noqa: E402

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _BENCH_DIR)
import _frameworks  # noqa: E402
import _machine  # noqa: E402
import _timing  # noqa: E402

DEFAULT_OUT = os.path.join(_BENCH_DIR, 'results', 'conv_sweep_{}.json'.format(
    datetime.date.today().isoformat()))

BATCHES = (1, 8, 64)
CHANNELS = ((1, 16), (16, 32), (64, 64), (128, 128), (256, 256))
SIZES = (4, 8, 16, 32, 56)
KERNELS = (1, 3, 5)
STRIDES = (1, 2)
POOLS = (('average_pool', 2, 2, 0), ('max_pool', 2, 2, 0),
         ('average_pool', 3, 2, 1), ('max_pool', 3, 2, 1))

# --quick: issue 27's table and a few more (one of each algorithm's regimes).
QUICK_CONV = [(64, 1, 16, 8, 3, 1), (64, 16, 32, 4, 3, 1), (8, 64, 64, 32, 3, 1),
              (8, 64, 64, 16, 1, 1), (8, 64, 64, 16, 3, 2), (1, 128, 128, 16, 3, 1),
              (64, 16, 32, 8, 5, 1)]
QUICK_POOL = [('average_pool', 64, 32, 4, 2, 2, 0), ('max_pool', 64, 16, 8, 2, 2, 0),
              ('max_pool', 8, 64, 32, 3, 2, 1)]


def out_size(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def conv_flops(n, c, o, size, k, s):
    """FLOPs of one conv product (forward); backward to x and W: two more."""
    lo = out_size(size, k, s, k // 2)
    return 2 * n * o * c * k * k * lo * lo


def conv_points(args, sgemm_rate):
    if args.quick:
        return [(n, c, o, size, k, s) for n, c, o, size, k, s in QUICK_CONV], []
    kept, pruned = [], []
    for n, (c, o), size, k, s in itertools.product(BATCHES, CHANNELS, SIZES,
                                                   args.kernels or KERNELS,
                                                   args.strides or STRIDES):
        point = (n, c, o, size, k, s)
        if k > size + 2 * (k // 2) or (k == 1 and s == 2 and size < 2):
            pruned.append((point, 'kernel > padded input'))
        elif 3 * conv_flops(*point) / sgemm_rate > args.max_seconds:
            pruned.append((point, 'estimated > {} s per run'.format(args.max_seconds)))
        else:
            kept.append(point)
    return kept, pruned


def rerun_items(path, above):
    """(conv items, pool points) of the sweep result at ``path`` whose paired
    ratio was above ``above``: each conv item is (op, point) as measured."""
    with open(path) as f:
        old = json.load(f)
    conv = [(r['op'], tuple(r[k] for k in ('batch', 'in_channels', 'out_channels', 'size',
                                           'kernel', 'stride')))
            for r in old['conv'] if r['paired_ratio'] > above]
    pool = [tuple(r[k] for k in ('op', 'batch', 'channels', 'size', 'kernel', 'stride', 'pad'))
            for r in old['pool'] if r['paired_ratio'] > above]
    return conv, pool


def _ints(text):
    return tuple(int(v) for v in text.split(','))


def _point(text):
    """OP:batch,in_channels,out_channels,size,kernel,stride as (op, point)."""
    op, _, numbers = text.partition(':')
    point = _ints(numbers) if numbers else ()
    if op not in ('conv', 'conv_transpose') or len(point) != 6:
        raise argparse.ArgumentTypeError(
            'expected conv:N,C,O,SIZE,K,S or conv_transpose:N,C,O,SIZE,K,S, got {!r}'.format(text))
    return op, point


def pool_points(args):
    if args.quick:
        return QUICK_POOL
    return [(op, n, c, size, k, s, p) for (op, k, s, p), n, (c, _), size in itertools.product(
        POOLS, BATCHES, CHANNELS, SIZES) if k <= size + 2 * p]


def sgemm_gflops(m, k, n, min_time):
    """numpy float32 matmul (m, k) @ (k, n), GFLOP/s (sizes capped to keep it short)."""
    m, k, n = max(m, 16), max(k, 16), min(max(n, 16), 1 << 16)
    rng = numpy.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=numpy.float32)
    b = rng.standard_normal((k, n), dtype=numpy.float32)
    t = _timing.measure({'mm': lambda: a @ b}, 3, min_time, 2)['mm'].median
    return 2 * m * k * n / t / 1e9


def _check(ours, theirs, what):
    for a, b in zip(ours, theirs):
        a, b = a.to_numpy(), b.detach().numpy()
        atol = 1e-4 * float(numpy.abs(b).max(initial=0)) + 1e-6
        numpy.testing.assert_allclose(a, b, rtol=2e-3, atol=atol, err_msg=what)


def conv_steps(xgrad, torch, point, transpose):
    n, c, o, size, k, s = point
    p = k // 2
    rng = numpy.random.default_rng(0)
    x = rng.standard_normal((n, c, size, size), dtype=numpy.float32)
    if transpose:  # conv_transpose maps o channels back to c: W (o, c, k, k)
        lo = out_size(size, k, s, p)
        x = rng.standard_normal((n, o, lo, lo), dtype=numpy.float32)
        w = rng.standard_normal((o, c, k, k), dtype=numpy.float32) / numpy.float32(numpy.sqrt(o * k * k))
        b = rng.standard_normal(c, dtype=numpy.float32)
    else:
        w = rng.standard_normal((o, c, k, k), dtype=numpy.float32) / numpy.float32(numpy.sqrt(c * k * k))
        b = rng.standard_normal(o, dtype=numpy.float32)
    xs = [xgrad.array(a).require_grad() for a in (x, w, b)]
    ts = [torch.from_numpy(a.copy()).requires_grad_() for a in (x, w, b)]
    fx = xgrad.conv_transpose if transpose else xgrad.conv
    ft = torch.nn.functional.conv_transpose2d if transpose else torch.nn.functional.conv2d

    def xgrad_step():
        for a in xs:
            a.cleargrad()
        xgrad.sum(fx(xs[0], xs[1], xs[2], stride=s, pad=p)).backward()
        return [a.grad for a in xs]

    def torch_step():
        for a in ts:
            a.grad = None
        ft(ts[0], ts[1], ts[2], stride=s, padding=p).sum().backward()
        return [a.grad for a in ts]
    _check(xgrad_step(), torch_step(), 'conv{} {}'.format('_transpose' if transpose else '',
                                                          point))
    return {'xgrad': xgrad_step, 'torch': torch_step}


def pool_steps(xgrad, torch, point):
    op, n, c, size, k, s, p = point
    x = numpy.random.default_rng(0).standard_normal((n, c, size, size), dtype=numpy.float32)
    xx = xgrad.array(x).require_grad()
    tx = torch.from_numpy(x.copy()).requires_grad_()
    F = torch.nn.functional
    if op == 'max_pool':
        fx = lambda: xgrad.max_pool(xx, k, s, p)  # noqa: E731
        ft = lambda: F.max_pool2d(tx, k, s, p)  # noqa: E731
    else:  # ChainerX's default pad_mode 'ignore' is count_include_pad=False
        fx = lambda: xgrad.average_pool(xx, k, s, p)  # noqa: E731
        ft = lambda: F.avg_pool2d(tx, k, s, p, count_include_pad=False)  # noqa: E731
    gy = numpy.random.default_rng(1).standard_normal(
        (n, c, out_size(size, k, s, p), out_size(size, k, s, p)), dtype=numpy.float32)
    gyx, gyt = xgrad.array(gy), torch.from_numpy(gy)

    def xgrad_step():
        xx.cleargrad()
        y = fx()
        y.grad = gyx
        y.backward()
        return [xx.grad]

    def torch_step():
        tx.grad = None
        ft().backward(gyt)
        return [tx.grad]
    _check(xgrad_step(), torch_step(), '{} {}'.format(op, point))
    return {'xgrad': xgrad_step, 'torch': torch_step}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--quick', action='store_true', help='the issue-27 shapes and a few more')
    ap.add_argument('--threads', type=int, choices=(0, 1), default=1,
                    help='1 (default): one thread everywhere; 0: default threads')
    ap.add_argument('--transpose', action='store_true', help='also conv_transpose per point')
    ap.add_argument('--no-pool', action='store_true', help='convolutions only')
    ap.add_argument('--rounds', type=int)
    ap.add_argument('--min-time', type=float)
    ap.add_argument('--max-seconds', type=float, default=1.0,
                    help='prune points estimated slower than this per run (default 1)')
    ap.add_argument('--limit', type=int, help='time at most this many conv points (smoke test)')
    ap.add_argument('--kernels', type=_ints, help='only these kernel sizes, e.g. 3 or 1,3')
    ap.add_argument('--strides', type=_ints, help='only these strides, e.g. 1')
    ap.add_argument('--rerun', metavar='RESULT_JSON',
                    help='time again the points of an earlier sweep above --above '
                         '(narrowed by --kernels, --strides, --no-pool)')
    ap.add_argument('--points', type=_point, nargs='+', metavar='OP:N,C,O,SIZE,K,S',
                    help='time these conv points only (no pooling), e.g. conv:8,16,32,56,5,2')
    ap.add_argument('--above', type=float, default=1.0,
                    help="with --rerun: the earlier paired ratio to exceed (default 1.0)")
    ap.add_argument('--out', help='JSON path (default {}; --quick: none)'.format(DEFAULT_OUT))
    args = ap.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 7)
    min_time = args.min_time or (0.02 if args.quick else 0.05)
    xgrad = _frameworks.load('xgrad')
    torch = _frameworks.load('torch')
    if THREADS == 1:
        torch.set_num_threads(1)
    start = time.time()
    peak = sgemm_gflops(256, 2304, 4096, min_time)
    kinds = ['conv'] + (['conv_transpose'] if args.transpose else [])
    if args.points:
        items, pools, pruned = list(args.points), [], []
    elif args.rerun:
        items, pools = rerun_items(args.rerun, args.above)
        # --kernels, --strides and --no-pool narrow a rerun too
        items = [(op, pt) for op, pt in items
                 if (not args.kernels or pt[4] in args.kernels)
                 and (not args.strides or pt[5] in args.strides)]
        pools = [] if args.no_pool else pools
        pruned = []
    else:
        points, pruned = conv_points(args, peak * 1e9)
        items = list(itertools.product(kinds, points))
        pools = [] if args.no_pool else pool_points(args)
    if args.limit is not None:
        items = items[:args.limit]
    result = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'machine': _machine.machine_info(), 'threads': THREADS or 'default',
              'torch_threads': torch.get_num_threads(),
              'blas_threads': _machine.numpy_blas_threads(),
              'versions': {'numpy': numpy.__version__, 'torch': torch.__version__},
              'settings': {'rounds': rounds, 'min_time': min_time, 'quick': args.quick,
                           'max_seconds': args.max_seconds, 'pad': 'k // 2',
                           'kernels': args.kernels, 'strides': args.strides,
                           'rerun': args.rerun and {'of': os.path.basename(args.rerun),
                                                    'above': args.above},
                           'points': args.points and ['{}:{}'.format(op, ','.join(map(str, pt)))
                                                      for op, pt in args.points]},
              'sgemm_gflops_large': peak,
              'pruned': [{'point': list(pt), 'why': why} for pt, why in pruned],
              'conv': [], 'pool': []}
    print('sgemm (256x2304 @ 2304x4096) {:.1f} GFLOP/s; {} conv points ({} pruned)'.format(
        peak, len(items), len(pruned)), file=sys.stderr)
    for kind, point in items:
        n, c, o, size, k, s = point
        steps = conv_steps(xgrad, torch, point, kind == 'conv_transpose')
        v = _timing.versus(_timing.measure(steps, rounds, min_time, 2))
        flops = 3 * conv_flops(*point)
        lo = out_size(size, k, s, k // 2)
        gemm = sgemm_gflops(o, c * k * k, n * lo * lo, min_time / 5)
        row = {'op': kind, 'batch': n, 'in_channels': c, 'out_channels': o, 'size': size,
               'kernel': k, 'stride': s, 'pad': k // 2, 'xgrad_us': v['time_us']['xgrad'],
               'torch_us': v['time_us']['torch'], 'ratio': v['ratio'],
               'paired_ratio': v['paired_ratio'],
               'xgrad_gflops': flops / v['time_us']['xgrad'] / 1e3,
               'torch_gflops': flops / v['time_us']['torch'] / 1e3,
               'sgemm_gflops': gemm, 'load': _machine.load_average()}
        row['fraction_of_sgemm'] = row['xgrad_gflops'] / gemm
        result['conv'].append(row)
        print('{:14s} n{:<3d} {:3d}->{:<3d} {:2d}x{:<2d} k{} s{}  xgrad {:10.1f} us  torch {:10.1f}'
              ' us  ratio {:.2f} (paired {:.2f})  {:5.1f} GFLOP/s = {:.2f} sgemm  load {}'.format(
                  kind, n, c, o, size, size, k, s, row['xgrad_us'], row['torch_us'],
                  row['ratio'], row['paired_ratio'], row['xgrad_gflops'],
                  row['fraction_of_sgemm'], row['load']), file=sys.stderr, flush=True)
    for point in ([] if args.no_pool else pools):
        steps = pool_steps(xgrad, torch, point)
        v = _timing.versus(_timing.measure(steps, rounds, min_time, 2))
        op, n, c, size, k, s, p = point
        row = {'op': op, 'batch': n, 'channels': c, 'size': size, 'kernel': k, 'stride': s,
               'pad': p, 'xgrad_us': v['time_us']['xgrad'], 'torch_us': v['time_us']['torch'],
               'ratio': v['ratio'], 'paired_ratio': v['paired_ratio'],
               'load': _machine.load_average()}
        result['pool'].append(row)
        print('{:14s} n{:<3d} {:3d} {:2d}x{:<2d} k{} s{} p{}  xgrad {:10.1f} us  torch {:10.1f} us'
              '  ratio {:.2f} (paired {:.2f})  load {}'.format(
                  op, n, c, size, size, k, s, p, row['xgrad_us'], row['torch_us'],
                  row['ratio'], row['paired_ratio'], row['load']), file=sys.stderr, flush=True)
    result['summary'] = summary(result)
    result['seconds'] = round(time.time() - start, 1)
    print(json.dumps(result['summary'], indent=1))
    out = args.out or (None if args.quick or args.limit or args.rerun or args.kernels
                       or args.strides or args.points else DEFAULT_OUT)
    if out:
        with open(out, 'w') as f:
            json.dump(result, f, indent=1)
        print('wrote', out, file=sys.stderr)
    return 0


def summary(result):
    out = {}
    for key, rows in (('conv', result['conv']), ('pool', result['pool'])):
        if not rows:
            continue
        ratios = [r['ratio'] for r in rows]
        out[key] = {'points': len(rows), 'at_or_below_torch': sum(r <= 1.0 for r in ratios),
                    'median_ratio': statistics.median(ratios), 'worst_ratio': max(ratios)}
        if key == 'conv':
            out[key]['median_fraction_of_sgemm'] = statistics.median(
                r['fraction_of_sgemm'] for r in rows)
    loads = [r['load'] for r in result['conv'] + result['pool'] if r['load'] is not None]
    if loads:
        out['load'] = {'min': min(loads), 'median': statistics.median(loads), 'max': max(loads)}
    return out


if __name__ == '__main__':
    sys.exit(main())
