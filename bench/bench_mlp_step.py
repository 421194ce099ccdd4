"""mlp_step: one training step of a small MLP, where engine overhead dominates.

Batch 16, layers 32-32-32-8 (two hidden relu layers), W as (in, out) float32,
loss = mean((out - t) ** 2); one forward + backward per iteration, gradients
cleared each step. About 15 ops forward, each on arrays of a few hundred
elements, so the time is mostly per-op bookkeeping. See _mlp.py.
"""

import _mlp

NAME = 'mlp_step'
DESCRIPTION = 'MLP 32-32-32-8, batch 16, relu, mean squared error; forward + backward'
ANCHOR = 'torch'
TARGET = 0.5  # xgrad / torch
BATCH = 16
SIZES = (32, 32, 32, 8)
GRAD_NAMES = _mlp.grad_names(SIZES)
RTOL = 1e-3


def make_data(rng):
    return _mlp.make_data(rng, BATCH, SIZES)


build_numpy = _mlp.build_numpy
build_xgrad = _mlp.build_xgrad
build_torch = _mlp.build_torch
build_autograd = _mlp.build_autograd
