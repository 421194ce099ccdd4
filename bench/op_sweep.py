#!/usr/bin/env python
"""Single ops and layers in practitioners' shapes, forward + backward, xgrad / torch.

    python bench/op_sweep.py [--threads 1|0] [--only NAME,...] [--rounds 7]
        [--json FILE]

Each case times one training-style call, ``sum(op(inputs) * g).backward()``
with fresh gradients, for both frameworks interleaved in rounds (see
_timing.py): median per call and the median of the per-round ratios. Before
timing, each case's input gradients are compared with torch's (relative
error of the whole gradient, float32). The shapes are those of common
models (transformer layers, ResNet/MobileNet convolutions, LSTM cells,
embeddings, language-model heads, a dense layer's batch norm, multi-label
and robust losses, short rows), not bench/'s other benchmarks' shapes;
layer norm and GELU run both as xgrad's ops and written from primitives (as
a user would before 0.5, or in Chainer code). ``--threads 1`` (the
default) runs both frameworks and NumPy's BLAS on one thread (the script
restarts itself with _machine.THREAD_VARS at 1); ``--threads 0`` leaves
each with its default thread count.
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _BENCH_DIR)

import numpy  # noqa: E402

import _frameworks  # noqa: E402
import _machine  # noqa: E402
import _timing  # noqa: E402


def _layer_norm(X, x, gamma, beta):
    mu = X.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = X.mean(d * d, axis=-1, keepdims=True)
    return d / X.sqrt(var + 1e-5) * gamma + beta


def _gelu(X, x):  # the tanh approximation
    return 0.5 * x * (1 + X.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _t_gelu(T, x):
    return T.nn.functional.gelu(x, approximate='tanh')


def _heads(X, y):  # (4, 128, 12 * 64) -> (4 * 12, 128, 64): a copy
    return X.reshape(X.transpose(X.reshape(y, (4, 128, 12, 64)), (0, 2, 1, 3)), (48, 128, 64))


def _t_heads(T, y):
    return y.reshape(4, 128, 12, 64).permute(0, 2, 1, 3).reshape(48, 128, 64)


# name: (float inputs {name: shape}, integer inputs {name: (shape, high)},
#        xgrad op(X, **inputs), torch op(T, **inputs))
CASES = {
    'linear_768x3072': ({'x': (512, 768), 'w': (3072, 768), 'b': (3072,)}, {},
                        lambda X, x, w, b: X.linear(x, w, b),
                        lambda T, x, w, b: T.nn.functional.linear(x, w, b)),
    'attention_scores': ({'q': (4, 12, 128, 64), 'k': (4, 12, 128, 64)}, {},
                         lambda X, q, k: X.matmul(q, X.swapaxes(k, 2, 3)),
                         lambda T, q, k: T.matmul(q, k.transpose(2, 3))),
    'softmax_attention': ({'x': (4, 12, 128, 128)}, {},
                          lambda X, x: X.softmax(x, axis=3), lambda T, x: T.softmax(x, 3)),
    'layer_norm_768': ({'x': (2048, 768), 'gamma': (768,), 'beta': (768,)}, {},
                       lambda X, x, gamma, beta: X.layer_norm(x, gamma, beta),
                       lambda T, x, gamma, beta: T.nn.functional.layer_norm(x, (768,), gamma, beta)),
    'layer_norm_composed': ({'x': (2048, 768), 'gamma': (768,), 'beta': (768,)}, {},
                            _layer_norm,
                            lambda T, x, gamma, beta: T.nn.functional.layer_norm(
                                x, (768,), gamma, beta)),
    'gelu_3072': ({'x': (512, 3072)}, {}, lambda X, x: X.gelu(x, approximate='tanh'), _t_gelu),
    'gelu_composed': ({'x': (512, 3072)}, {}, _gelu, _t_gelu),
    'heads_split': ({'y': (4, 128, 768)}, {},
                    _heads, _t_heads),
    'embedding_30k': ({'e': (30000, 256)}, {'ids': ((32, 128), 30000)},
                      lambda X, e, ids: X.take(e, ids, axis=0),
                      lambda T, e, ids: T.nn.functional.embedding(ids, e)),
    'lm_head_xent': ({'x': (256, 8000)}, {'t': ((256,), 8000)},
                     lambda X, x, t: X.softmax_cross_entropy(x, t),
                     lambda T, x, t: T.nn.functional.cross_entropy(x, t, reduction='none')),
    'log_softmax_8000': ({'x': (256, 8000)}, {},
                         lambda X, x: X.log_softmax(x, axis=1), lambda T, x: T.log_softmax(x, 1)),
    'conv3x3_64ch_28': ({'x': (8, 64, 28, 28), 'w': (64, 64, 3, 3)}, {},
                        lambda X, x, w: X.conv(x, w, None, 1, 1),
                        lambda T, x, w: T.nn.functional.conv2d(x, w, None, 1, 1)),
    'conv3x3_s2_128ch_14': ({'x': (8, 128, 28, 28), 'w': (128, 128, 3, 3)}, {},
                            lambda X, x, w: X.conv(x, w, None, 2, 1),
                            lambda T, x, w: T.nn.functional.conv2d(x, w, None, 2, 1)),
    'conv1x1_256to64': ({'x': (8, 256, 28, 28), 'w': (64, 256, 1, 1)}, {},
                        lambda X, x, w: X.conv(x, w),
                        lambda T, x, w: T.nn.functional.conv2d(x, w)),
    'conv7x7_s2_stem': ({'x': (4, 3, 112, 112), 'w': (64, 3, 7, 7)}, {},
                        lambda X, x, w: X.conv(x, w, None, 2, 3),
                        lambda T, x, w: T.nn.functional.conv2d(x, w, None, 2, 3)),
    'depthwise3x3_96ch_28': ({'x': (8, 96, 28, 28), 'w': (96, 1, 3, 3)}, {},
                             lambda X, x, w: X.conv(x, w, None, 1, 1, groups=96),
                             lambda T, x, w: T.nn.functional.conv2d(x, w, None, 1, 1, groups=96)),
    'conv1d_k5': ({'x': (16, 128, 200), 'w': (128, 128, 5)}, {},
                  lambda X, x, w: X.conv(x, w, None, 1, 2),
                  lambda T, x, w: T.nn.functional.conv1d(x, w, None, 1, 2)),
    'deconv4x4_s2': ({'x': (8, 128, 16, 16), 'w': (128, 64, 4, 4)}, {},
                     lambda X, x, w: X.conv_transpose(x, w, None, 2, 1),
                     lambda T, x, w: T.nn.functional.conv_transpose2d(x, w, None, 2, 1)),
    'max_pool3x3_s2': ({'x': (8, 64, 56, 56)}, {},
                       lambda X, x: X.max_pool(x, 3, 2, 1, cover_all=False),
                       lambda T, x: T.nn.functional.max_pool2d(x, 3, 2, 1)),
    'global_avg_pool': ({'x': (16, 512, 7, 7)}, {},
                        lambda X, x: X.mean(x, axis=(2, 3)), lambda T, x: T.mean(x, (2, 3))),
    'batch_norm_train': ({'x': (8, 64, 56, 56), 'gamma': (64,), 'beta': (64,)}, {},
                         lambda X, x, gamma, beta: X.batch_norm(
                             x, gamma, beta, X.zeros(64), X.ones(64), eps=1e-5, axis=(0, 2, 3)),
                         lambda T, x, gamma, beta: T.nn.functional.batch_norm(
                             x, T.zeros(64), T.ones(64), gamma, beta, True, 0.1, 1e-5)),
    'bias_relu_nchw': ({'x': (8, 64, 56, 56), 'b': (1, 64, 1, 1)}, {},
                       lambda X, x, b: X.relu(x + b), lambda T, x, b: T.relu(x + b)),
    'residual_add_relu': ({'x': (8, 256, 28, 28), 'y': (8, 256, 28, 28)}, {},
                          lambda X, x, y: X.relu(x + y), lambda T, x, y: T.relu(x + y)),
    'lstm_cell_512': ({'c': (64, 512), 'z': (64, 2048)}, {},
                      lambda X, c, z: X.concatenate(X.lstm(c, z), axis=1),
                      None),
    'concat_channels': ({'a': (8, 128, 28, 28), 'b': (8, 64, 28, 28)}, {},
                        lambda X, a, b: X.concatenate((a, b), axis=1),
                        lambda T, a, b: T.cat((a, b), 1)),
    'sum_rows_4096x512': ({'x': (4096, 512)}, {},
                          lambda X, x: X.sum(x, axis=0), lambda T, x: T.sum(x, 0)),
    'mean_last_axis': ({'x': (4096, 512)}, {},
                       lambda X, x: X.mean(x, axis=1), lambda T, x: T.mean(x, 1)),
    'max_last_axis': ({'x': (4096, 512)}, {},
                      lambda X, x: X.max(x, axis=1), lambda T, x: T.amax(x, 1)),
    'row_gather': ({'x': (8192, 256)}, {'i': ((4096,), 8192)},
                   lambda X, x, i: x[i], lambda T, x, i: x[i]),
    'strided_slice': ({'x': (64, 3, 224, 224)}, {},
                      lambda X, x: x[:, :, ::2, ::2], lambda T, x: x[:, :, ::2, ::2]),
    'mse_loss': ({'x': (4096, 256), 'y': (4096, 256)}, {},
                 lambda X, x, y: X.mean(X.square(x - y)),
                 lambda T, x, y: T.nn.functional.mse_loss(x, y)),
    'masked_softmax': ({'x': (4, 12, 128, 128)}, {'keep': ((1, 1, 128, 128), 2)},
                       lambda X, x, keep: X.softmax(X.where(keep > 0, x, -1e9), axis=3),
                       lambda T, x, keep: T.softmax(x.masked_fill(keep == 0, -1e9), 3)),
    'dropout_0.1': ({'x': (512, 3072)}, {},
                    lambda X, x: X.dropout(x, 0.1) * 0.0 + x,
                    lambda T, x: T.nn.functional.dropout(x, 0.1) * 0.0 + x),
    'tanh_sigmoid_gate': ({'a': (256, 2048), 'b': (256, 2048)}, {},
                          lambda X, a, b: X.tanh(a) * X.sigmoid(b),
                          lambda T, a, b: T.tanh(a) * T.sigmoid(b)),
    'batch_norm_dense': ({'x': (256, 512), 'gamma': (512,), 'beta': (512,)}, {},
                         lambda X, x, gamma, beta: X.batch_norm(
                             x, gamma, beta, X.zeros(512), X.ones(512), eps=1e-5, axis=(0,)),
                         lambda T, x, gamma, beta: T.nn.functional.batch_norm(
                             x, T.zeros(512), T.ones(512), gamma, beta, True, 0.1, 1e-5)),
    'conv3x3_groups4': ({'x': (8, 64, 20, 20), 'w': (64, 16, 3, 3)}, {},
                        lambda X, x, w: X.conv(x, w, None, 1, 1, groups=4),
                        lambda T, x, w: T.nn.functional.conv2d(x, w, None, 1, 1, groups=4)),
    'clip_grad_mask': ({'x': (1000, 500)}, {},
                       lambda X, x: X.clip(x, -0.5, 0.5), lambda T, x: T.clamp(x, -0.5, 0.5)),
    'sigmoid_xent_multilabel': ({'x': (512, 1000)}, {'t': ((512, 1000), 2)},
                                lambda X, x, t: X.sigmoid_cross_entropy(x, t),
                                lambda T, x, t: T.nn.functional.binary_cross_entropy_with_logits(
                                    x, t.float(), reduction='none')),
    'huber_loss': ({'x': (512, 1000), 'y': (512, 1000)}, {},
                   lambda X, x, y: X.huber_loss(x, y, 1.0),
                   lambda T, x, y: T.nn.functional.huber_loss(x, y, reduction='none')),
    'sum_short_rows': ({'x': (131072, 3)}, {},
                       lambda X, x: X.sum(x, axis=1), lambda T, x: T.sum(x, 1)),
    'cumsum_rows': ({'x': (256, 1000)}, {},
                    lambda X, x: X.cumsum(x, axis=1), lambda T, x: T.cumsum(x, 1)),
}


def _torch_lstm(T, c, z):  # ChainerX's cell: gates a, i, f, o interleaved per unit
    zz = z.reshape(z.shape[0], -1, 4)
    a, i, f, o = (zz[..., k] for k in range(4))
    c2 = T.tanh(a) * T.sigmoid(i) + T.sigmoid(f) * c
    return T.cat((c2, T.sigmoid(o) * T.tanh(c2)), 1)


CASES['lstm_cell_512'] = CASES['lstm_cell_512'][:3] + (_torch_lstm,)


def make_case(name, xgrad, torch, rng):
    floats, ints, fx, ft = CASES[name]
    arrays = {k: rng.standard_normal(s).astype(numpy.float32) for k, s in floats.items()}
    if name in ('batch_norm_train', 'batch_norm_dense', 'layer_norm_768', 'layer_norm_composed'):
        arrays['gamma'] = 1 + 0.1 * arrays['gamma']
    for k, s in floats.items():  # weights at He scale, so that outputs stay O(1)
        if k == 'w':
            arrays[k] *= math.sqrt(2.0 / (numpy.prod(s) / s[0]))
    indices = {k: rng.integers(0, high, s) for k, (s, high) in ints.items()}
    xs = {k: xgrad.array(a).require_grad() for k, a in arrays.items()}
    ts = {k: torch.from_numpy(a.copy()).requires_grad_() for k, a in arrays.items()}
    xs.update({k: xgrad.array(i) for k, i in indices.items()})
    ts.update({k: torch.from_numpy(i) for k, i in indices.items()})
    with torch.no_grad():
        shape = tuple(ft(torch, **ts).shape)
    g = rng.standard_normal(shape).astype(numpy.float32)
    xg, tg = xgrad.array(g), torch.from_numpy(g)

    def xgrad_step():
        for k in arrays:
            xs[k].cleargrad()
        xgrad.sum(fx(xgrad, **xs) * xg).backward()

    def torch_step():
        for k in arrays:
            ts[k].grad = None
        torch.sum(ft(torch, **ts) * tg).backward()

    def gradient_errors():
        xgrad_step()
        torch_step()
        errors = {}
        for k in arrays:
            ours = xgrad.to_numpy(xs[k].grad).astype(numpy.float64)
            theirs = ts[k].grad.numpy().astype(numpy.float64)
            errors[k] = float(numpy.linalg.norm(ours - theirs) / max(numpy.linalg.norm(theirs), 1e-30))
        return errors

    return {'xgrad': xgrad_step, 'torch': torch_step}, gradient_errors


def time_case(steps, rounds, min_time):
    names = list(steps)
    timings = {}
    for n in names:
        _timing.warm_up(steps[n], 2, 0.1)
        timings[n] = _timing.Timing(_timing.autorange(steps[n], min_time))
    ratios = []
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        sample = {}
        for n in order:
            t = timings[n]
            sample[n] = _timing._sample(steps[n], t.number) / t.number
            t.samples.append(sample[n])
        ratios.append(sample['xgrad'] / sample['torch'])
    ratios.sort()
    return ({n: t.median * 1e6 for n, t in timings.items()}, ratios[len(ratios) // 2],
            (ratios[0], ratios[-1]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--threads', type=int, default=1)
    p.add_argument('--rounds', type=int, default=7)
    p.add_argument('--min-time', type=float, default=0.05)
    p.add_argument('--only', help='comma-separated case names')
    p.add_argument('--json', help='write the results here')
    args = p.parse_args(argv)
    if args.threads not in (0, 1):
        p.error('--threads is 1 or 0 (defaults)')
    wanted = _machine.thread_environment(args.threads)
    if argv is None and any(os.environ.get(v) != wanted.get(v) for v in _machine.THREAD_VARS):
        os.execve(sys.executable, [sys.executable] + sys.argv, wanted)
    xgrad, torch = _frameworks.load('xgrad'), _frameworks.load('torch')
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.only.split(',') if args.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        p.error('unknown cases: {} (known: {})'.format(', '.join(unknown), ', '.join(CASES)))
    rng = numpy.random.default_rng(0)
    started = datetime.datetime.now(datetime.timezone.utc)
    rows = []
    print('threads: {} (torch {}); {} usable CPUs, load {:.2f}'.format(
        'one' if args.threads else 'defaults', torch.get_num_threads(),
        _machine.usable_cpus(), _machine.load_average()))
    print('| case | xgrad us | torch us | xgrad / torch (range) | max grad rel. error |')
    print('|---|---:|---:|---|---:|')
    for name in names:
        steps, gradient_errors = make_case(name, xgrad, torch, rng)
        errors = gradient_errors()
        worst = max(errors.values())
        times, ratio, (lo, hi) = time_case(steps, args.rounds, args.min_time)
        rows.append({'case': name, 'xgrad_us': times['xgrad'], 'torch_us': times['torch'],
                     'xgrad_over_torch': ratio, 'ratio_range': [lo, hi],
                     'grad_rel_error': errors})
        print('| {} | {:.0f} | {:.0f} | {:.2f} ({:.2f}-{:.2f}) | {:.1e} |'.format(
            name, times['xgrad'], times['torch'], ratio, lo, hi, worst), flush=True)
    if args.json:
        commit = subprocess.run(['git', '-C', _BENCH_DIR, 'rev-parse', '--short', 'HEAD'],
                                stdout=subprocess.PIPE, text=True).stdout.strip() or None
        with open(args.json, 'w') as f:
            json.dump({'date': started.isoformat(timespec='seconds'),
                       'command': ' '.join(['python', 'bench/op_sweep.py'] + sys.argv[1:]),
                       'machine': _machine.machine_info(),
                       'versions': {'python': sys.version.split()[0], 'numpy': numpy.__version__,
                                    'torch': torch.__version__, 'xgrad_commit': commit},
                       'torch': torch.__version__, 'numpy': numpy.__version__,
                       'threads': args.threads, 'rounds': args.rounds, 'cases': rows}, f, indent=1)


if __name__ == '__main__':
    main()
