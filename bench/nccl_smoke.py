"""NCCL smoke check of xgrad.distributed on one GPU (bench/gpu_check.sh's
``nccl`` step): a single-rank ``cupy.cuda.nccl.NcclCommunicator`` on cuda:0,
a tiny MLP, and DataParallel's averaged gradients must equal the local ones
(one rank: the average is the gradient), with every bucket all-reduced by
NCCL on the side stream.

    python bench/nccl_smoke.py

On the dry run (the CPU stand-in, which has no NCCL) it says so and exits 0:
tests/backend/cuda/test_distributed_nccl.py covers that path with a fake communicator.
"""

import importlib
import os
import sys

import numpy

import xgrad
from xgrad._backend.cuda import cupy
from xgrad.distributed import DataParallel


def main():
    cp = cupy()
    try:
        nccl = getattr(cp.cuda, 'nccl', None) or importlib.import_module('cupy.cuda.nccl')
    except ImportError:
        nccl = None
    if os.environ.get('XGRAD_GPU_DRY_RUN') == '1' or nccl is None or not nccl.available:
        print('nccl: skipped, no NCCL here (the stand-in, or CuPy without NCCL)')
        return 0
    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    rng = numpy.random.RandomState(0)
    shapes = [(32, 64), (64,), (64, 10), (10,)]
    params = [xgrad.array(rng.standard_normal(s).astype('float32'), device='cuda:0')
              .require_grad() for s in shapes]
    x = xgrad.array(rng.standard_normal((16, 32)).astype('float32'), device='cuda:0')

    def loss():
        h = xgrad.tanh(x @ params[0] + params[1])
        return xgrad.sum((h @ params[2] + params[3]) ** 2)

    loss().backward()
    local = [p.grad.to_numpy().copy() for p in params]
    for p in params:
        p.cleargrad()
    dp = DataParallel(params, comm, bucket_bytes=4096)   # several buckets
    calls = []
    start = dp._transport.allreduce
    dp._transport.allreduce = lambda s, r: calls.append(1) or start(s, r)
    loss().backward()
    for p, want in zip(params, local):
        numpy.testing.assert_allclose(p.grad.to_numpy(), want, rtol=1e-5, atol=1e-6)
    assert len(calls) == len(dp.buckets), (calls, len(dp.buckets))
    print('nccl: {} buckets all-reduced by NCCL {} on cuda:0; averaged == local gradients'
          .format(len(dp.buckets), nccl.get_version()))
    return 0


if __name__ == '__main__':
    sys.exit(main())
