#!/usr/bin/env python
"""xgrad's own float32 GEMM against NumPy's BLAS on convolution products.

    python bench/gemm_shapes.py [--threads 1] [--out FILE] [O,CKK,L ...]

For each (O, C*k*k, L) (output channels, window taps, output positions of
the batch) the three products of an im2col convolution step: the forward W
@ cols (O x CKK by CKK x L), the input gradient's columns W^T @ gy (CKK x O
by O x L) and the weight gradient cols @ gy^T (CKK x L by L x O). Operands
in the layouts conv uses (columns and gy in rows padded as _gemm_layout
pads them). GFLOP/s of each, the best of 7 repeats, the two alternated;
where xgrad's GEMM declines a product (gemm_kernels' rules) it says so.
"""

import argparse
import json
import os
import sys
import timeit

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _BENCH_DIR)

SHAPES = ['32,400,4096', '64,1600,2048', '16,144,4096', '128,1152,4096', '32,800,1024',
          '64,576,8192', '256,2304,256', '256,6400,64', '128,3200,784', '64,1600,256',
          '16,400,4096', '16,9,4096']


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('shapes', nargs='*', default=SHAPES, help='O,CKK,L triples')
    ap.add_argument('--threads', type=int, default=1, help='BLAS and xgrad threads (0: default)')
    ap.add_argument('--out', help='write the results as JSON')
    args = ap.parse_args(argv)
    if args.threads:
        for var in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS'):
            os.environ[var] = str(args.threads)
    import numpy
    import _machine
    from xgrad._backend import gemm_kernels
    from xgrad._ops import _gemm_layout

    def padded(rows, cols, rng):
        flat = numpy.empty(_gemm_layout.padded_size(rows, cols, numpy.float32), numpy.float32)
        m = _gemm_layout.padded(flat, (rows, cols))
        m[...] = rng.standard_normal((rows, cols), dtype=numpy.float32)
        return m

    def best(f):
        f()
        return min(timeit.repeat(f, number=3, repeat=7)) / 3

    rng = numpy.random.default_rng(0)
    rows = []
    print('cpu path {}, BLAS threads {}'.format(
        __import__('xgrad._backend.native_kernels', fromlist=['x']).cpu_path(),
        _machine.numpy_blas_threads()))
    for spec in args.shapes:
        o, ckk, length = map(int, spec.split(','))
        w = rng.standard_normal((o, ckk), dtype=numpy.float32)
        cols, gy = padded(ckk, length, rng), padded(o, length, rng)
        flops = 2.0 * o * ckk * length
        line = ['{:>16}'.format(spec)]
        for name, a, b in (('forward', w, cols), ('input grad', w.T, gy),
                           ('weight grad', cols, gy.T)):
            out_blas = numpy.empty((a.shape[0], b.shape[1]), numpy.float32)
            out_own = numpy.empty_like(out_blas)
            taken = gemm_kernels.sgemm(a, b, out_own)
            blas = best(lambda: numpy.matmul(a, b, out=out_blas))
            own = best(lambda: gemm_kernels.sgemm(a, b, out_own)) if taken else None
            rows.append({'shape': [o, ckk, length], 'product': name,
                         'blas_gflops': flops / blas / 1e9,
                         'own_gflops': flops / own / 1e9 if own else None})
            line.append('{} BLAS {:5.0f} own {}'.format(
                name, flops / blas / 1e9,
                '{:5.0f}'.format(flops / own / 1e9) if own else '(declined)'))
        print(' | '.join(line), flush=True)
    if args.out:
        with open(args.out, 'w') as f:
            json.dump({'machine': _machine.machine_info(), 'threads': args.threads,
                       'rows': rows}, f, indent=1)
        print('wrote', args.out)


if __name__ == '__main__':
    main()
