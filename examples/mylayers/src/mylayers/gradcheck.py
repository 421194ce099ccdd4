"""The declarations of mylayers' ops for ``python -m xgrad check``.

Imported by the check through the ``xgrad.ops`` entry point (pyproject.toml)
or ``--import mylayers.gradcheck``; registering makes them
``mylayers::swish``, ``mylayers::rms_norm`` and ``mylayers::log_cosh``.
"""

from xgrad.testing import OpInfo, Sample, domains, register

import mylayers

register(
    OpInfo('swish', mylayers.swish,
           samples=[Sample((3, 4)), Sample((2, 3, 5), beta=2.0)]),
    # x anywhere, the gains positive; float16's mean of squares is coarse:
    # a looser tolerance there.
    OpInfo('rms_norm', mylayers.rms_norm,
           samples=[Sample((4, 8), (8,)), Sample((2, 3, 5), (5,), eps=1e-3)],
           domain=(domains.nonzero, domains.positive),
           tol={'float16': (2e-2, 2e-2)}),
    # Its backward takes tanh in NumPy: the sweep runs no order-2 case.
    OpInfo('log_cosh', mylayers.log_cosh,
           samples=[Sample((3, 4)), Sample((6,))],
           domain=domains.within(-3, 3),
           twice_differentiable=False),
)
