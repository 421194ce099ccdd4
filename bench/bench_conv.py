"""conv: one training step through two typical CNN convolution layers.

x (32, 64, 32, 32) float32 requires grad; h = tanh(conv(x, W1, b1, pad 1))
with W1 (64, 64, 3, 3); y = conv(h, W2, b2, stride 2, pad 1) with W2 the
same shape, so y is (32, 64, 16, 16); loss = mean(y * y); forward + backward
to x, W1, b1, W2, b2. tanh, not relu: with a smooth activation, frameworks
that sum in another order still agree to RTOL. About 9 GFLOP per iteration,
nearly all in the convolutions: this measures the convolution kernels
(im2col + BLAS in xgrad, oneDNN in PyTorch), not the engine. The floor is the
textbook im2col + matmul by hand (columns of the whole batch at once, kept
from the forward for the weight gradients, col2im for the input gradient);
xgrad's kernels, which build columns a few samples at a time in a cache-sized
buffer, can beat it."""

import numpy
from numpy.lib.stride_tricks import as_strided

NAME = 'conv'
DESCRIPTION = ('x (32,64,32,32); tanh(conv 3x3 pad 1, 64->64); conv 3x3 stride 2 pad 1; '
               'mean(y*y); forward + backward to x and the weights')
ANCHOR = 'torch'
TARGET = 1.5  # xgrad / torch
BATCH, CHANNELS, SIZE, K = 32, 64, 32, 3
LAYERS = ((1, 1), (2, 1))  # (stride, pad) of the two convolutions
GRAD_NAMES = ('x', 'W1', 'b1', 'W2', 'b2')
RTOL = 1e-3


def make_data(rng):
    """x and He-initialised W1, b1, W2, b2, all float32."""
    scale = numpy.sqrt(2.0 / (CHANNELS * K * K))
    params = []
    for _ in LAYERS:
        params.append((rng.standard_normal((CHANNELS, CHANNELS, K, K)) * scale)
                      .astype(numpy.float32))
        params.append((rng.standard_normal(CHANNELS) * 0.1).astype(numpy.float32))
    x = rng.standard_normal((BATCH, CHANNELS, SIZE, SIZE)).astype(numpy.float32)
    return {'x': x, 'params': params}


# ---------------------------------------------------------------------------
# The floor: im2col + matmul forward, the transposed products backward

def _out(size, stride, pad):
    return (size + 2 * pad - K) // stride + 1


def _im2col(np, x, stride, pad):
    """(N, C*K*K, L*L) columns of the padded windows of x."""
    n, c, h, _ = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    lo = _out(h, stride, pad)
    s = xp.strides
    view = as_strided(xp, (n, c, K, K, lo, lo),
                      (s[0], s[1], s[2], s[3], s[2] * stride, s[3] * stride))
    return view.reshape(n, c * K * K, lo * lo)


def _col2im(np, cols, shape, stride, pad):
    """The adjoint of _im2col: columns (N, C*K*K, L*L) added back into x's shape."""
    n, c, h, w = shape
    lo = _out(h, stride, pad)
    cols = cols.reshape(n, c, K, K, lo, lo)
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    for i in range(K):
        for j in range(K):
            xp[:, :, i:i + stride * (lo - 1) + 1:stride, j:j + stride * (lo - 1) + 1:stride] \
                += cols[:, :, i, j]
    return np.ascontiguousarray(xp[:, :, pad:pad + h, pad:pad + w])


def build_numpy(np, data):
    x = data['x']
    W1, b1, W2, b2 = data['params']

    def layer(h, W, b, stride, pad):
        cols = _im2col(np, h, stride, pad)
        lo = _out(h.shape[2], stride, pad)
        y = np.matmul(W.reshape(CHANNELS, -1), cols).reshape(h.shape[0], CHANNELS, lo, lo)
        return y + b.reshape(1, -1, 1, 1), cols

    def layer_backward(gy, h_shape, cols, W, stride, pad):
        gym = gy.reshape(gy.shape[0], CHANNELS, -1)
        gW = np.matmul(gym, cols.transpose(0, 2, 1)).sum(axis=0).reshape(W.shape)
        gb = gy.sum(axis=(0, 2, 3))
        gx = _col2im(np, np.matmul(W.reshape(CHANNELS, -1).T, gym), h_shape, stride, pad)
        return gx, gW, gb

    def step():
        (s1, p1), (s2, p2) = LAYERS
        z, cols1 = layer(x, W1, b1, s1, p1)
        h = np.tanh(z)
        y, cols2 = layer(h, W2, b2, s2, p2)
        loss = np.mean(y * y)
        gy = y * (2.0 / y.size)
        gh, gW2, gb2 = layer_backward(gy, h.shape, cols2, W2, s2, p2)
        gz = gh * (1 - h * h)
        gx, gW1, gb1 = layer_backward(gz, x.shape, cols1, W1, s1, p1)
        return loss, [gx, gW1, gb1, gW2, gb2]

    return step


# ---------------------------------------------------------------------------
# The engines

def build_xgrad(xgrad, data):
    x = xgrad.array(data['x']).require_grad()
    W1, b1, W2, b2 = params = [xgrad.array(p).require_grad() for p in data['params']]
    conv, tanh, mean = xgrad.conv, xgrad.tanh, xgrad.mean
    (s1, p1), (s2, p2) = LAYERS

    def step():
        for a in [x] + params:
            a.cleargrad()
        h = tanh(conv(x, W1, b1, stride=s1, pad=p1))
        y = conv(h, W2, b2, stride=s2, pad=p2)
        loss = mean(y * y)
        loss.backward()
        return loss, [a.grad for a in [x] + params]

    return step


def build_torch(torch, data):
    x = torch.from_numpy(data['x'].copy()).requires_grad_()
    W1, b1, W2, b2 = params = [torch.from_numpy(p.copy()).requires_grad_()
                               for p in data['params']]
    conv2d, tanh, mean = torch.nn.functional.conv2d, torch.tanh, torch.mean
    (s1, p1), (s2, p2) = LAYERS

    def step():
        for a in [x] + params:
            a.grad = None
        h = tanh(conv2d(x, W1, b1, stride=s1, padding=p1))
        y = conv2d(h, W2, b2, stride=s2, padding=p2)
        loss = mean(y * y)
        loss.backward()
        return loss, [a.grad for a in [x] + params]

    return step


def build_autograd(autograd, data):
    anp = autograd.numpy
    inputs = [data['x']] + list(data['params'])

    def conv(h, W, b, stride, pad):
        hp = anp.pad(h, ((0, 0), (0, 0), (pad, pad), (pad, pad)), 'constant')
        lo = _out(h.shape[2], stride, pad)
        end = stride * (lo - 1) + 1
        cols = anp.stack([hp[:, :, i:i + end:stride, j:j + end:stride]
                          for i in range(K) for j in range(K)], axis=2)  # (N, C, K*K, L, L)
        y = anp.tensordot(cols, anp.reshape(W, (CHANNELS, CHANNELS, K * K)),
                          axes=([1, 2], [1, 2]))  # (N, L, L, O)
        return anp.transpose(y, (0, 3, 1, 2)) + anp.reshape(b, (1, -1, 1, 1))

    def forward(args):
        x, W1, b1, W2, b2 = args
        (s1, p1), (s2, p2) = LAYERS
        h = anp.tanh(conv(x, W1, b1, s1, p1))
        y = conv(h, W2, b2, s2, p2)
        return anp.mean(y * y)

    loss_and_grad = autograd.value_and_grad(forward)

    def step():
        loss, grads = loss_and_grad(inputs)
        return loss, list(grads)

    return step


if __name__ == '__main__':
    # Quick look without run.py: median ms per step and the ratio to torch.
    import sys
    import time
    import _frameworks
    import _verify

    data = make_data(numpy.random.default_rng(0))
    names = sys.argv[1:] or ['numpy', 'xgrad', 'torch']
    libs = {n: _frameworks.load(n) for n in names}
    if 'torch' in libs:
        libs['torch'].set_num_threads(2)
    steps = {n: globals()['build_' + n](lib, data) for n, lib in libs.items()}
    reference = _verify.run_twice(steps['numpy']) if 'numpy' in steps else None
    times = {}
    for n, step in steps.items():
        if reference is not None and n != 'numpy':
            _verify.check(sys.modules[__name__], n, _verify.run_twice(step), reference)
    for _ in range(7):
        for n, step in steps.items():
            t = time.perf_counter()
            step()
            times.setdefault(n, []).append(time.perf_counter() - t)
    med = {n: sorted(t)[len(t) // 2] * 1e3 for n, t in times.items()}
    print(' '.join('{} {:.1f} ms'.format(n, t) for n, t in med.items()))
    if 'xgrad' in med and 'torch' in med:
        print('xgrad/torch {:.2f}'.format(med['xgrad'] / med['torch']))
