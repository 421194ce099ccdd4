"""Runs a Python module or script with the CPU stand-in for CuPy
(tests/backend/cuda/fake_cupy.py: two emulated devices, our kernels under the g++
emulator) serving as CuPy: the dry run of bench/gpu_check.sh on a machine
without a GPU.

    python bench/_dry_run.py -m xgrad check --device cuda:0
    python bench/_dry_run.py bench/gpu.py --quick
"""

import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def use_stand_in():
    sys.path[:0] = [ROOT, os.path.join(ROOT, 'tests')]  # this checkout's xgrad
    from backend.cuda import fake_cupy
    from xgrad._backend import cuda
    cuda.use_cupy(fake_cupy)
    return fake_cupy


def main(argv):
    use_stand_in()
    if argv[:1] == ['-m']:
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name='__main__')


if __name__ == '__main__':
    main(sys.argv[1:])
