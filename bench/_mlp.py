"""One training step of a ReLU MLP with squared-error loss, in every framework.

Shared by mlp_step (small: overhead-bound) and large_mlp (big: matmul-bound).
Layer i computes h @ W_i + b_i with W_i of shape (in, out); every layer but
the last is followed by relu; loss = mean((out - t) ** 2). Parameters are
created once; each step clears their gradients, runs forward and backward,
and returns (loss, [dW_1, db_1, dW_2, db_2, ...]). The input x and target t
do not require gradients, so no framework computes d loss / d x.
"""

import numpy


def grad_names(sizes):
    names = []
    for i in range(1, len(sizes)):
        names += ['W{}'.format(i), 'b{}'.format(i)]
    return tuple(names)


def make_data(rng, batch, sizes):
    """x, t and He-initialised parameters [W1, b1, W2, b2, ...], all float32."""
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        params.append((rng.standard_normal((n_in, n_out)) * numpy.sqrt(2.0 / n_in)).astype(numpy.float32))
        params.append((rng.standard_normal(n_out) * 0.1).astype(numpy.float32))
    return {
        'x': rng.standard_normal((batch, sizes[0])).astype(numpy.float32),
        't': rng.standard_normal((batch, sizes[-1])).astype(numpy.float32),
        'params': params,
    }


def build_numpy(np, data):
    x, t, params = data['x'], data['t'], data['params']
    Ws, bs = params[0::2], params[1::2]
    n_layers = len(Ws)
    scale = 2.0 / t.size  # d mean(d*d) / d d = 2 d / size

    def step():
        zs, hs = [], [x]  # pre-activations, layer inputs
        h = x
        for W, b in zip(Ws[:-1], bs[:-1]):
            z = h @ W + b
            h = np.maximum(z, 0)
            zs.append(z)
            hs.append(h)
        out = h @ Ws[-1] + bs[-1]
        d = out - t
        loss = np.mean(np.square(d))

        grads = [None] * (2 * n_layers)
        g = d * scale  # d loss / d out
        for i in range(n_layers - 1, -1, -1):
            grads[2 * i] = hs[i].T @ g
            grads[2 * i + 1] = np.sum(g, axis=0)
            if i > 0:
                g = (g @ Ws[i].T) * (zs[i - 1] > 0)  # through matmul, then relu
        return loss, grads

    return step


def build_xgrad(xgrad, data):
    x, t = xgrad.array(data['x']), xgrad.array(data['t'])
    params = [xgrad.array(p).require_grad() for p in data['params']]
    layers = list(zip(params[0::2], params[1::2]))
    hidden, (W_out, b_out) = layers[:-1], layers[-1]
    relu, mean, square = xgrad.relu, xgrad.mean, xgrad.square

    def step():
        for p in params:
            p.cleargrad()
        h = x
        for W, b in hidden:
            h = relu(h @ W + b)
        out = h @ W_out + b_out
        loss = mean(square(out - t))
        loss.backward()
        return loss, [p.grad for p in params]

    return step


def build_torch(torch, data, device='cpu'):
    def tensor(a):
        return torch.from_numpy(a.copy()).to(device)
    x, t = tensor(data['x']), tensor(data['t'])
    params = [tensor(p).requires_grad_() for p in data['params']]
    layers = list(zip(params[0::2], params[1::2]))
    hidden, (W_out, b_out) = layers[:-1], layers[-1]
    relu, mean, square = torch.relu, torch.mean, torch.square

    def step():
        for p in params:
            p.grad = None
        h = x
        for W, b in hidden:
            h = relu(h @ W + b)
        out = h @ W_out + b_out
        loss = mean(square(out - t))
        loss.backward()
        return loss, [p.grad for p in params]

    return step


def build_autograd(autograd, data):
    anp = autograd.numpy
    x, t, params = data['x'], data['t'], list(data['params'])

    def forward(params):
        h = x
        for i in range(0, len(params) - 2, 2):
            h = anp.maximum(h @ params[i] + params[i + 1], 0.0)  # relu
        out = h @ params[-2] + params[-1]
        return anp.mean(anp.square(out - t))

    loss_and_grad = autograd.value_and_grad(forward)

    def step():
        loss, grads = loss_and_grad(params)
        return loss, list(grads)

    return step
