"""The layers, as FunctionNodes: forward on the raw (NumPy) arrays, backward
on xgrad arrays (``self.get_retained_inputs()``)."""

import numpy

import xgrad


class Swish(xgrad.FunctionNode):
    """y = x * sigmoid(beta x); the backward is written with xgrad ops, so it
    is itself differentiable (second derivatives for free)."""

    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        return (x / (1 + numpy.exp(-self.beta * x))).astype(x.dtype),

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        s = xgrad.sigmoid(x * self.beta)
        return grad_outputs[0] * (s + x * self.beta * s * (1 - s)),


class RMSNorm(xgrad.FunctionNode):
    """y = x / sqrt(mean(x**2, axis=-1) + eps) * g."""

    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, inputs):
        x, g = inputs
        self.retain_inputs((0, 1))
        rms = numpy.sqrt(numpy.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return (x / rms * g).astype(x.dtype),

    def backward(self, target_input_indexes, grad_outputs):
        x, g = self.get_retained_inputs()
        gy, = grad_outputs
        rms = xgrad.sqrt(xgrad.mean(x * x, axis=-1, keepdims=True) + self.eps)
        # DELIBERATE BUG (the example's wrong gradient): rms depends on x, and
        # the term through it, - x * sum(gy * g * x, -1) / (n * rms**3), is
        # left out. The check catches it; see tests/test_gradients.py.
        gx = gy * g / rms
        gg = xgrad.sum((gy * x / rms).reshape((-1, x.shape[-1])), axis=0)
        return gx, gg


class LogCosh(xgrad.FunctionNode):
    """y = log(cosh(x)), computed stably; dy/dx = tanh(x), taken in NumPy on
    the raw data: a constant to the graph, so the gradient is right but
    cannot be differentiated again (declared twice_differentiable=False)."""

    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        a = numpy.abs(x)
        return (a + numpy.log1p(numpy.exp(-2 * a)) - numpy.log(2)).astype(x.dtype),

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        slope = numpy.tanh(x.to_numpy())
        return grad_outputs[0] * xgrad.array(slope, device=x.device),


def swish(x, beta=1.0):
    return Swish(beta).apply([x])[0]


def rms_norm(x, g, eps=1e-6):
    return RMSNorm(eps).apply([x, g])[0]


def log_cosh(x):
    return LogCosh().apply([x])[0]
