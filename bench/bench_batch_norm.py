"""batch_norm: one batch normalization layer in training mode, forward + backward.

x: (32, 64, 32, 32) float32 (N, C, H, W; 8 MiB), gamma and beta (64,), all
requiring gradients; normalized over (0, 2, 3) with eps = 2e-5, the running
mean and variance (64,) updated in place (decay 0.9, PyTorch's momentum 0.1).
The backward is seeded with a fixed upstream gradient gy of x's shape, so the
step times exactly the layer: y, then dx, dgamma, dbeta. Memory-bound: the
floor makes about a dozen passes over 8 MiB arrays; PyTorch runs fused C++
kernels, the anchor xgrad's single fused op is held to.
"""

import numpy

NAME = 'batch_norm'
DESCRIPTION = 'batch_norm of x (32, 64, 32, 32) float32 over (0, 2, 3), running stats; forward + backward'
ANCHOR = 'torch'
TARGET = 1.5  # xgrad / torch
SHAPE = (32, 64, 32, 32)
AXES = (0, 2, 3)
EPS = 2e-5
DECAY = 0.9
GRAD_NAMES = ('x', 'gamma', 'beta')
RTOL = 1e-3


def make_data(rng):
    c = SHAPE[1]
    return {
        'x': (rng.standard_normal(SHAPE) * 2 + 0.5).astype(numpy.float32),
        'gy': rng.standard_normal(SHAPE).astype(numpy.float32),
        'gamma': (1 + 0.1 * rng.standard_normal(c)).astype(numpy.float32),
        'beta': (0.1 * rng.standard_normal(c)).astype(numpy.float32),
    }


def build_numpy(np, data):
    x, gy, gamma, beta = data['x'], data['gy'], data['gamma'], data['beta']
    c = SHAPE[1]
    g = gamma.reshape(1, c, 1, 1)
    b = beta.reshape(1, c, 1, 1)
    n = x.size // c
    running_mean = np.zeros(c, np.float32)
    running_var = np.ones(c, np.float32)

    def step():
        mean = x.mean(axis=AXES, keepdims=True)
        xc = x - mean
        var = (xc * xc).mean(axis=AXES, keepdims=True)
        inv_std = 1 / np.sqrt(var + EPS)
        x_hat = xc * inv_std
        y = x_hat * g + b
        running_mean[...] = DECAY * running_mean + (1 - DECAY) * mean.ravel()
        running_var[...] = DECAY * running_var + (1 - DECAY) * n / (n - 1) * var.ravel()

        gbeta = gy.sum(axis=AXES, keepdims=True)
        ggamma = (gy * x_hat).sum(axis=AXES, keepdims=True)
        gx = (g * inv_std) * (gy - (x_hat * ggamma + gbeta) / n)
        return y, [gx, ggamma.ravel(), gbeta.ravel()]

    return step


def build_xgrad(xgrad, data):
    x = xgrad.array(data['x']).require_grad()
    gamma = xgrad.array(data['gamma']).require_grad()
    beta = xgrad.array(data['beta']).require_grad()
    gy = xgrad.array(data['gy'])
    c = SHAPE[1]
    running_mean = xgrad.zeros((c,), xgrad.float32)
    running_var = xgrad.ones((c,), xgrad.float32)
    batch_norm = xgrad.batch_norm

    def step():
        for p in (x, gamma, beta):
            p.cleargrad()
        y = batch_norm(x, gamma, beta, running_mean, running_var, eps=EPS, decay=DECAY,
                       axis=(0, 2, 3))
        y.backward(grad_outputs=[gy])
        return y, [x.grad, gamma.grad, beta.grad]

    return step


def build_torch(torch, data):
    x = torch.from_numpy(data['x'].copy()).requires_grad_()
    gamma = torch.from_numpy(data['gamma'].copy()).requires_grad_()
    beta = torch.from_numpy(data['beta'].copy()).requires_grad_()
    gy = torch.from_numpy(data['gy'].copy())
    c = SHAPE[1]
    running_mean = torch.zeros(c)
    running_var = torch.ones(c)
    batch_norm = torch.nn.functional.batch_norm

    def step():
        for p in (x, gamma, beta):
            p.grad = None
        y = batch_norm(x, running_mean, running_var, gamma, beta, training=True,
                       momentum=1 - DECAY, eps=EPS)
        y.backward(gy)
        return y, [x.grad, gamma.grad, beta.grad]

    return step


def build_autograd(autograd, data):
    # Functional: no in-place running statistics (they do not affect the results).
    anp = autograd.numpy
    x, gy, gamma, beta = data['x'], data['gy'], data['gamma'], data['beta']
    c = SHAPE[1]

    def layer(x, gamma, beta):
        mean = anp.mean(x, axis=AXES, keepdims=True)
        xc = x - mean
        var = anp.mean(xc * xc, axis=AXES, keepdims=True)
        return xc / anp.sqrt(var + EPS) * gamma.reshape(1, c, 1, 1) + beta.reshape(1, c, 1, 1)

    vjp_maker = autograd.make_vjp(layer, argnum=(0, 1, 2))

    def step():
        vjp, y = vjp_maker(x, gamma, beta)
        return y, list(vjp(gy))

    return step
