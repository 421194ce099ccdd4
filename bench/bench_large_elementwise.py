"""large_elementwise: memory-bound elementwise ops on a 4M-element array.

x: 4 * 1024 * 1024 float32 (16 MiB), loss = sum(tanh(x) * x + exp(-x)),
forward + backward. The floor computes, with t = tanh(x) and e = exp(-x),
    dL/dx = (1 - t*t) * x + t - e
i.e. 5 array ops forward (neg, exp, tanh, mul, add) + the sum, and 5 backward.
An engine that multiplies by the all-ones gradient of sum, or accumulates its
three contributions to dL/dx naively, does several more 16 MiB passes than
that; the target asks it to cost no more than the floor.
"""

import numpy

NAME = 'large_elementwise'
DESCRIPTION = 'x 4M float32; sum(tanh(x)*x + exp(-x)); forward + backward'
ANCHOR = 'numpy'
TARGET = 1.0  # xgrad / numpy floor
SIZE = 4 * 1024 * 1024
GRAD_NAMES = ('x',)
RTOL = 1e-3


def make_data(rng):
    return {'x': rng.standard_normal(SIZE).astype(numpy.float32)}


def build_numpy(np, data):
    x = data['x']

    def step():
        t = np.tanh(x)
        e = np.exp(-x)
        loss = np.sum(t * x + e)
        gx = (1 - t * t) * x + t - e
        return loss, [gx]

    return step


def build_xgrad(xgrad, data):
    x = xgrad.array(data['x']).require_grad()
    tanh, exp, sum_ = xgrad.tanh, xgrad.exp, xgrad.sum

    def step():
        x.cleargrad()
        loss = sum_(tanh(x) * x + exp(-x))
        loss.backward()
        return loss, [x.grad]

    return step


def build_torch(torch, data):
    x = torch.from_numpy(data['x'].copy()).requires_grad_()
    tanh, exp, sum_ = torch.tanh, torch.exp, torch.sum

    def step():
        x.grad = None
        loss = sum_(tanh(x) * x + exp(-x))
        loss.backward()
        return loss, [x.grad]

    return step


def build_autograd(autograd, data):
    anp = autograd.numpy
    x = data['x']
    loss_and_grad = autograd.value_and_grad(lambda x: anp.sum(anp.tanh(x) * x + anp.exp(-x)))

    def step():
        loss, gx = loss_and_grad(x)
        return loss, [gx]

    return step
