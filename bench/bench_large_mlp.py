"""large_mlp: one training step of a big MLP, where the matmuls dominate.

Batch 256, layers 256-1024-1024-1024-10 (three hidden relu layers of 1024),
float32, loss = mean((out - t) ** 2) on the 10 outputs; forward + backward.
About 3.5 GFLOP per iteration (1.2 forward, 2.3 backward), nearly all in
BLAS, so an engine's overhead should vanish: the target is within 5% of the
hand-written NumPy floor, which calls the same BLAS. See _mlp.py.
"""

import _mlp

NAME = 'large_mlp'
DESCRIPTION = 'MLP 256-1024-1024-1024-10, batch 256, relu, mean squared error; forward + backward'
ANCHOR = 'numpy'
TARGET = 1.05  # xgrad / numpy floor
BATCH = 256
SIZES = (256, 1024, 1024, 1024, 10)
GRAD_NAMES = _mlp.grad_names(SIZES)
RTOL = 1e-3


def make_data(rng):
    return _mlp.make_data(rng, BATCH, SIZES)


build_numpy = _mlp.build_numpy
build_xgrad = _mlp.build_xgrad
build_torch = _mlp.build_torch
build_autograd = _mlp.build_autograd
