"""Three custom layers written as xgrad FunctionNodes (the worked example
of xgrad's docs/user_ops.md):

- ``swish(x, beta=1.0)``: x * sigmoid(beta x), differentiable twice;
- ``rms_norm(x, g, eps=1e-6)``: x / rms(x) * g over the last axis, whose
  backward has a DELIBERATE BUG for the example: it treats rms(x) as a
  constant, so ``python -m xgrad check --ops mylayers`` fails on it;
- ``log_cosh(x)``: log(cosh(x)), whose backward computes tanh(x) in NumPy:
  right once, but not differentiable again (declared so).
"""

from mylayers.layers import log_cosh, rms_norm, swish  # NOQA

__version__ = '0.1.0'
