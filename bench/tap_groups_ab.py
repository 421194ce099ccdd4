"""Per conv point: the step with the tap-group plan (xgrad/_ops/_tap_groups.py)
on and off, in one process, alternated; torch's step for scale. Off: the
CPU path's thresholds (xgrad/_ops/_conv/thresholds.py) with
tap_max_work_fraction below any plan's, or with the fields given by
``--off FIELD=VALUE`` (a Python literal; repeatable), so that any threshold
of the table is re-derived the same way: "on" is the table as it is.

    python bench/tap_groups_ab.py 0,64,64,64,8,5,2 1,64,64,64,4,3,2 ...
    python bench/tap_groups_ab.py --threads 0 POINT...   # default threads
    python bench/tap_groups_ab.py --off input_phases_min_blocks=1000 0,8,64,64,56,5,2

A point is op (0 conv, 1 conv_transpose), batch, in and out channels, image
size, kernel, stride (pad kernel // 2), as in bench/conv_sweep.py, whose
step (forward + backward to x, W and b) it times. One thread unless
``--threads 0``.
"""

import ast
import os
import sys
import time
import timeit

ONE_THREAD = sys.argv[1:3] != ['--threads', '0']
if ONE_THREAD:  # before NumPy loads its BLAS
    for _v in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS'):
        os.environ[_v] = '1'

import torch  # noqa: E402

import xgrad  # noqa: E402
from xgrad._ops._conv import dispatch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_argv, sys.argv = sys.argv, [sys.argv[0]] + ([] if ONE_THREAD else ['--threads', '0'])
from conv_sweep import conv_steps  # noqa: E402  (which pins one thread unless told)
sys.argv = _argv


def _arguments(argv):
    """(points, changes): the conv points, and the thresholds of the "off"
    side (default: no tap plan pays)."""
    points, changes = [], {}
    args = iter(argv)
    for arg in args:
        if arg == '--off':
            field, _, value = next(args).partition('=')
            changes[field] = ast.literal_eval(value)
        else:
            points.append(arg)
    return points, changes or {'tap_max_work_fraction': -1.0}


def _best_us(step):
    start = time.perf_counter()
    step()
    number = max(1, int(0.04 / (time.perf_counter() - start + 1e-9)))
    return min(timeit.repeat(step, number=number, repeat=3)) / number * 1e6


def main(argv):
    points, changes = _arguments(argv)
    if ONE_THREAD:
        torch.set_num_threads(1)
    for text in points:
        point = tuple(int(v) for v in text.split(','))
        steps = conv_steps(xgrad, torch, point[1:], point[0] == 1)
        on, off = [], []
        for _ in range(3):
            for change, times in (({}, on), (changes, off)):
                with dispatch.thresholds_replaced(**change):
                    steps['xgrad']()
                    times.append(_best_us(steps['xgrad']))
        torch_us = _best_us(steps['torch'])
        print('{:<24} on {:8.0f} off {:8.0f} on/off {:.3f} torch {:8.0f}  on/torch {:.2f} '
              'off/torch {:.2f}'.format(text, min(on), min(off), min(on) / min(off), torch_us,
                                        min(on) / torch_us, min(off) / torch_us), flush=True)


if __name__ == '__main__':
    main(sys.argv[1:] if ONE_THREAD else sys.argv[3:])
