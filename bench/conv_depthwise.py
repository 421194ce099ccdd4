"""Depthwise and grouped convolutions, forward + both gradients (x, w):
xgrad's dispatcher choice ('depthwise', 'groups' or im2col), xgrad forced
to im2col + col2im (the algorithm before those) and torch, alternated in
one process, min over rounds.

    OMP_NUM_THREADS=1 python bench/conv_depthwise.py [--out FILE] [NAME_PART ...]
    python bench/conv_depthwise.py --out FILE          # default threads
    OMP_NUM_THREADS=1 python bench/conv_depthwise.py --out FILE grp   # grouped only

Writes JSON (date, machine, command, commit, threads, points) with --out.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy  # NOQA: E402
import torch  # NOQA: E402

import _machine  # NOQA: E402
import xgrad  # NOQA: E402
from xgrad.testing import force_conv_algorithm  # NOQA: E402

# (name, x shape, w shape, stride, pad, groups)
POINTS = [
    ('dw 16x64x28 k3s1', (16, 64, 28, 28), (64, 1, 3, 3), 1, 1, 64),
    ('dw 16x128x28 k3s2', (16, 128, 28, 28), (128, 1, 3, 3), 2, 1, 128),
    ('dw 8x32x112 k3s1', (8, 32, 112, 112), (32, 1, 3, 3), 1, 1, 32),
    ('dw 8x144x56 k3s2', (8, 144, 56, 56), (144, 1, 3, 3), 2, 1, 144),
    ('dw 8x576x14 k3s1', (8, 576, 14, 14), (576, 1, 3, 3), 1, 1, 576),
    ('dw 8x32x56 k3s1 M2', (8, 32, 56, 56), (64, 1, 3, 3), 1, 1, 32),
    ('dw 8x96x28 k5s1', (8, 96, 28, 28), (96, 1, 5, 5), 1, 2, 96),
    # small planes (MobileNet's last stages; CIFAR-sized nets)
    ('dw 8x512x7 k3s1', (8, 512, 7, 7), (512, 1, 3, 3), 1, 1, 512),
    ('dw 32x128x8 k3s1', (32, 128, 8, 8), (128, 1, 3, 3), 1, 1, 128),
    ('dw 32x128x8 k3s2', (32, 128, 8, 8), (128, 1, 3, 3), 2, 1, 128),
    # grouped, several channels a group ('groups': one group-1 convolution a group)
    ('grp g32 8x128x56 k3s1', (8, 128, 56, 56), (128, 4, 3, 3), 1, 1, 32),
    ('grp g4 16x64x28 k3s1', (16, 64, 28, 28), (64, 16, 3, 3), 1, 1, 4),
    ('grp g4 8x256x14 k3s1', (8, 256, 14, 14), (256, 64, 3, 3), 1, 1, 4),
    ('grp g2 8x64x56 k3s1', (8, 64, 56, 56), (64, 32, 3, 3), 1, 1, 2),
    ('grp g2 32x32x16 k3s2', (32, 32, 16, 16), (32, 16, 3, 3), 2, 1, 2),
    ('grp g2 8x96x27 k5s1', (8, 96, 27, 27), (256, 48, 5, 5), 1, 2, 2),
]


def _commit():
    try:
        return subprocess.check_output(['git', 'rev-parse', '--short', 'HEAD'], text=True,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--out')
    parser.add_argument('--rounds', type=int, default=9)
    parser.add_argument('names', nargs='*')
    args = parser.parse_args()
    threads = os.environ.get('OMP_NUM_THREADS')
    if threads:
        torch.set_num_threads(int(threads))
    F = torch.nn.functional
    rng = numpy.random.default_rng(0)
    points = []
    for name, xs, ws, s, p, g in POINTS:
        if args.names and not any(t in name for t in args.names):
            continue
        x = rng.standard_normal(xs).astype(numpy.float32)
        w = rng.standard_normal(ws).astype(numpy.float32)
        xa, wa = xgrad.array(x).require_grad(), xgrad.array(w).require_grad()
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)

        def step_xgrad():
            y = xgrad.conv(xa, wa, stride=s, pad=p, groups=g)
            xgrad.grad([y], [xa, wa], grad_outputs=[xgrad.ones_like(y)])

        def step_im2col():
            with force_conv_algorithm('im2col'):
                step_xgrad()

        def step_torch():
            y = F.conv2d(xt, wt, stride=s, padding=p, groups=g)
            torch.autograd.grad([y], [xt, wt], grad_outputs=[torch.ones_like(y)])

        sides = {'xgrad': step_xgrad, 'xgrad_im2col': step_im2col, 'torch': step_torch}
        for f in sides.values():
            f()
        t = time.perf_counter()
        step_im2col()
        n = max(1, int(0.05 / (time.perf_counter() - t)))
        times = {k: [] for k in sides}
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for k in order:
                t = time.perf_counter()
                for _ in range(n):
                    sides[k]()
                times[k].append((time.perf_counter() - t) / n * 1e3)
        best = {k: min(v) for k, v in times.items()}
        algorithm = xgrad.conv_algorithm(xs, ws, stride=s, pad=p, groups=g).algorithm
        points.append(dict(name=name, x=xs, w=ws, stride=s, pad=p, groups=g,
                           algorithm=algorithm, ms={k: round(v, 4) for k, v in best.items()}))
        print('%-22s %-10s xgrad %7.3f ms  im2col %7.3f ms  torch %7.3f ms  xgrad/torch %.2f'
              % (name, algorithm, best['xgrad'], best['xgrad_im2col'], best['torch'],
                 best['xgrad'] / best['torch']), flush=True)
    if args.out:
        record = dict(
            benchmark='conv_depthwise', date=datetime.date.today().isoformat(),
            machine=_machine.machine_info(),
            threads=threads or 'default', command='python ' + ' '.join(sys.argv),
            versions=dict(xgrad_commit=_commit(), torch=torch.__version__,
                          numpy=numpy.__version__),
            unit='ms, forward + gradients in x and w, float32, min over rounds',
            points=points)
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
