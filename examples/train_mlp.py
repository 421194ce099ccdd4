"""Train a small MLP on a toy regression task with xgrad, then check its
gradients numerically and take one gradient-penalty (double backprop) step.

Run: python examples/train_mlp.py
"""

import numpy

import xgrad


def init_params(rng, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w = rng.standard_normal((fan_in, fan_out)).astype(numpy.float32)
        w *= numpy.sqrt(2.0 / fan_in)
        params.append(xgrad.from_numpy(w).require_grad())
        params.append(xgrad.zeros((fan_out,), xgrad.float32).require_grad())
    return params


def mlp(params, x):
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = xgrad.tanh(h)
    return h


def main():
    rng = numpy.random.default_rng(0)
    x_data = rng.uniform(-2, 2, (256, 1)).astype(numpy.float32)
    t_data = numpy.sin(2 * x_data) + 0.1 * x_data ** 2
    x = xgrad.from_numpy(x_data)
    t = xgrad.from_numpy(t_data.astype(numpy.float32))
    params = init_params(rng, [1, 32, 32, 1])

    # Full-batch gradient descent with a step small enough that the loss
    # falls at every step (0.05 overshoots and the loss goes up and down).
    lr = 0.02
    for step in range(301):
        loss = xgrad.mean(xgrad.square(mlp(params, x) - t))
        loss.backward()
        for p in params:
            # Arrays in a graph refuse in-place updates; a grad-stopped view
            # shares their memory and takes them (as Chainer's optimizers do).
            data = p.as_grad_stopped()
            data -= lr * p.grad
            p.cleargrad()
        if step % 50 == 0:
            print('step {:3d}  loss {:.5f}'.format(step, float(loss.item())))

    # The analytic gradients agree with central differences (float64 copy).
    params64 = [p.astype(xgrad.float64).as_grad_stopped().require_grad()
                for p in params]
    x64 = x.astype(xgrad.float64)[:8]
    t64 = t.astype(xgrad.float64)[:8]
    xgrad.check_backward(
        lambda ps: (xgrad.mean(xgrad.square(mlp(ps, x64) - t64)),),
        params64, [xgrad.ones((), xgrad.float64)],
        [xgrad.full(p.shape, 1e-6, xgrad.float64) for p in params64],
        atol=1e-6, rtol=1e-4)
    print('check_backward: analytic gradients match numerical ones')

    # Double backprop: the gradient of a gradient penalty.
    xin = x[:16].as_grad_stopped().require_grad()
    gx, = xgrad.grad([xgrad.sum(mlp(params, xin))], [xin],
                     enable_double_backprop=True)
    penalty = xgrad.sum(gx * gx)
    penalty.backward()
    print('gradient penalty {:.5f}, |d penalty / d W1| = {:.5f}'.format(
        float(penalty.item()),
        float(numpy.abs(params[0].grad.to_numpy()).sum())))


if __name__ == '__main__':
    main()
