"""Per-dtype defaults of the gradient checks: the tolerance and the
finite-difference step.

The numbers live in the op registry (``xgrad._ops.registry.DEFAULT_TOL`` and
``DEFAULT_EPS``), the single source that the registry's own per-op
overrides fall back to; this module looks them up by dtype. The tolerance is
the one the checks apply as ``|analytic - numerical| <= atol + rtol *
|numerical|``; it belongs to the dtype the analytic gradient is computed in
(float16 gradients are far less precise, hence much looser). The step is
used by central differences that are always evaluated in float64, so it is
chosen for truncation error, not for the dtype's round-off: float64 checks
use a small step to meet their tight tolerance, float32 and float16 checks
1e-3.
"""

import numpy

from xgrad._errors import DtypeError
from xgrad._ops.registry import DEFAULT_EPS, DEFAULT_TOL


def _float_dtype(dtype, what):
    dtype = numpy.dtype(dtype)
    if dtype not in DEFAULT_TOL:
        raise DtypeError('{}: gradients are checked for float16, float32 and float64 '
                         'arrays, not {}'.format(what, dtype))
    return dtype


def default_tolerance(dtype):
    """``(atol, rtol)`` for analytic gradients computed in ``dtype``."""
    return DEFAULT_TOL[_float_dtype(dtype, 'default_tolerance')]


def default_eps(dtype):
    """The central-difference step for an input of ``dtype`` (the
    differences themselves are computed in float64)."""
    return DEFAULT_EPS[_float_dtype(dtype, 'default_eps')]


def least_precise(dtypes):
    """The least precise float dtype among ``dtypes`` (float64 if none is a
    float): the precision a computation mixing them can be trusted to."""
    floats = [numpy.dtype(d) for d in dtypes if numpy.dtype(d).kind == 'f']
    return min(floats, key=lambda d: d.itemsize) if floats else numpy.dtype('float64')
