"""elementwise_chain: per-op overhead of a long graph of tiny elementwise ops.

x has shape (1,), so the arithmetic is nothing and the time is the engine's
bookkeeping: y = x; 500 times y = tanh(y * a + b); backward of sum(y).
That is 1500 differentiable ops forward (plus the sum) and their backwards.
a = 0.99 and b = 0.01 are not 1 and 0, so dropping either op's gradient term
changes dL/dx (about 1.7e-20, well inside float32's normal range).
"""

import numpy

NAME = 'elementwise_chain'
DESCRIPTION = 'x (1,) float32; 500 x [y = tanh(y*a + b)]; backward of sum(y)'
ANCHOR = 'torch'
TARGET = 0.5  # xgrad / torch
STEPS = 500
OPS_PER_ITER = 3 * STEPS  # per-op time = iteration time / OPS_PER_ITER
GRAD_NAMES = ('x',)
RTOL = 1e-3


def make_data(rng):
    del rng  # fixed values: the gradient's size depends on them (see module docstring)
    f32 = numpy.float32
    return {'x': numpy.array([0.5], f32), 'a': numpy.array([0.99], f32), 'b': numpy.array([0.01], f32)}


def build_numpy(np, data):
    x, a, b = data['x'], data['a'], data['b']

    def step():
        y = x
        ys = []
        for _ in range(STEPS):
            y = np.tanh(y * a + b)
            ys.append(y)
        loss = np.sum(y)
        g = np.ones_like(y)  # d loss / d y
        for t in reversed(ys):
            g = g * (1 - t * t)  # tanh
            g = g * a  # mul; add passes g through
        return loss, [g]

    return step


def build_xgrad(xgrad, data):
    x = xgrad.array(data['x']).require_grad()
    a, b = xgrad.array(data['a']), xgrad.array(data['b'])
    tanh, sum_ = xgrad.tanh, xgrad.sum

    def step():
        x.cleargrad()
        y = x
        for _ in range(STEPS):
            y = tanh(y * a + b)
        loss = sum_(y)
        loss.backward()
        return loss, [x.grad]

    return step


def build_torch(torch, data):
    x = torch.from_numpy(data['x'].copy()).requires_grad_()
    a, b = torch.from_numpy(data['a'].copy()), torch.from_numpy(data['b'].copy())
    tanh, sum_ = torch.tanh, torch.sum

    def step():
        x.grad = None
        y = x
        for _ in range(STEPS):
            y = tanh(y * a + b)
        loss = sum_(y)
        loss.backward()
        return loss, [x.grad]

    return step


def build_autograd(autograd, data):
    anp = autograd.numpy
    x, a, b = data['x'], data['a'], data['b']

    def forward(x):
        y = x
        for _ in range(STEPS):
            y = anp.tanh(y * a + b)
        return anp.sum(y)

    loss_and_grad = autograd.value_and_grad(forward)

    def step():
        loss, gx = loss_and_grad(x)
        return loss, [gx]

    return step
