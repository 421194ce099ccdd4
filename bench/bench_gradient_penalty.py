"""gradient_penalty: double backprop through a small tanh MLP.

Batch 16, layers 32-32-1: out = tanh(x @ W1 + b1) @ W2 + b2.
g = d sum(out) / d x, taken with a graph (xgrad.grad(..., enable_double_backprop=True),
torch.autograd.grad(..., create_graph=True), autograd.grad); penalty = sum(g * g);
then backward of the penalty. x requires grad (g is taken with respect to it),
so the backward also gives d penalty / d x in xgrad and torch; the floor
computes it too. b2 does not reach g, so it gets no gradient and is not checked.

The floor is the hand-derived chain rule: with u = 1 - h*h,
    g = ((1 @ W2.T) * u) @ W1.T
and the second backward pushes 2g back through that expression and through
h = tanh(x @ W1 + b1), see build_numpy.
"""

import numpy

NAME = 'gradient_penalty'
DESCRIPTION = 'tanh MLP 32-32-1, batch 16; g = grad(sum(out), x) with graph; backward of sum(g*g)'
ANCHOR = 'torch'
TARGET = 0.5  # xgrad / torch
BATCH = 16
N_IN, N_HIDDEN = 32, 32
GRAD_NAMES = ('W1', 'b1', 'W2', 'x')
RTOL = 1e-3


def make_data(rng):
    f32 = numpy.float32
    return {
        'x': rng.standard_normal((BATCH, N_IN)).astype(f32),
        'W1': (rng.standard_normal((N_IN, N_HIDDEN)) / numpy.sqrt(N_IN)).astype(f32),
        'b1': (rng.standard_normal(N_HIDDEN) * 0.1).astype(f32),
        'W2': (rng.standard_normal((N_HIDDEN, 1)) / numpy.sqrt(N_HIDDEN)).astype(f32),
        'b2': (rng.standard_normal(1) * 0.1).astype(f32),
    }


def build_numpy(np, data):
    x, W1, b1, W2, b2 = (data[k] for k in ('x', 'W1', 'b1', 'W2', 'b2'))

    def step():
        # forward
        z = x @ W1 + b1
        h = np.tanh(z)
        out = h @ W2 + b2
        np.sum(out)  # the scalar whose input-gradient is taken
        # g = d sum(out) / d x, the first backward
        gout = np.ones_like(out)
        dh = gout @ W2.T
        u = 1 - h * h
        dz = dh * u
        g = dz @ W1.T
        penalty = np.sum(g * g)
        # backward of the penalty through the first backward and the forward
        gg = 2 * g
        gdz = gg @ W1
        gW1 = gg.T @ dz  # g = dz @ W1.T
        gdh = gdz * u
        gu = gdz * dh
        gW2 = gdh.T @ gout  # dh = gout @ W2.T
        gh = -2 * h * gu  # u = 1 - h*h
        gz = gh * u  # h = tanh(z)
        gW1 = gW1 + x.T @ gz
        gb1 = np.sum(gz, axis=0)
        gx = gz @ W1.T
        return penalty, [gW1, gb1, gW2, gx]

    return step


def build_xgrad(xgrad, data):
    x, W1, b1, W2, b2 = (xgrad.array(data[k]).require_grad() for k in ('x', 'W1', 'b1', 'W2', 'b2'))
    leaves = (x, W1, b1, W2, b2)
    tanh, sum_, grad = xgrad.tanh, xgrad.sum, xgrad.grad

    def step():
        for a in leaves:
            a.cleargrad()
        out = tanh(x @ W1 + b1) @ W2 + b2
        g, = grad([sum_(out)], [x], enable_double_backprop=True)
        penalty = sum_(g * g)
        penalty.backward()
        return penalty, [W1.grad, b1.grad, W2.grad, x.grad]

    return step


def build_torch(torch, data):
    x, W1, b1, W2, b2 = (torch.from_numpy(data[k].copy()).requires_grad_()
                         for k in ('x', 'W1', 'b1', 'W2', 'b2'))
    leaves = (x, W1, b1, W2, b2)
    tanh, sum_, grad = torch.tanh, torch.sum, torch.autograd.grad

    def step():
        for a in leaves:
            a.grad = None
        out = tanh(x @ W1 + b1) @ W2 + b2
        g, = grad([sum_(out)], [x], create_graph=True)
        penalty = sum_(g * g)
        penalty.backward()
        return penalty, [W1.grad, b1.grad, W2.grad, x.grad]

    return step


def build_autograd(autograd, data):
    anp = autograd.numpy
    x, W1, b1, W2, b2 = (data[k] for k in ('x', 'W1', 'b1', 'W2', 'b2'))

    def total_out(x, W1, b1, W2, b2):
        return anp.sum(anp.tanh(x @ W1 + b1) @ W2 + b2)

    d_total_out_dx = autograd.grad(total_out, 0)

    def penalty(x, W1, b1, W2, b2):
        g = d_total_out_dx(x, W1, b1, W2, b2)
        return anp.sum(g * g)

    loss_and_grads = autograd.value_and_grad(penalty, (1, 2, 3, 0))  # W1, b1, W2, x

    def step():
        p, grads = loss_and_grads(x, W1, b1, W2, b2)
        return p, list(grads)

    return step
