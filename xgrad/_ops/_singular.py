"""When xgrad.linalg's gradients call a factor singular, decided by xgrad.

The gradients of ``inv``, ``solve``, ``cholesky``, ``qr``, ``eigh``, ``svd``
and ``pinv`` divide by a factor's diagonal entries, by singular values or by
gaps between eigenvalues or singular values. Whether LAPACK meets an exact
zero there depends on the CPU and the BLAS build (the R of a rank-1 matrix
has diagonal (-1.7, 0, 0) with one OpenBLAS kernel and (-1.7, -6e-17,
-2e-32) with another), so xgrad decides instead, with NumPy's
``matrix_rank`` tolerance::

    tol = max(M, N) * eps(dtype) * max(|values|)

(M x N the matrix, ``values`` the diagonal or singular values or
eigenvalues of one matrix). A value with ``|v| <= tol``, or two adjacent
sorted values whose gap is ``<= tol``, is singular: the gradient raises
``LinAlgError`` naming the op and what is singular, on every machine.

Non-finite data decides nothing: a matrix whose checked values hold a NaN
or an inf (its forward output carried them: NaN or inf in the input) is
never called singular, and its gradient is computed by the same formula,
carrying NaN and inf on as the forward did (PyTorch's behaviour; the
tolerance, inf or NaN there, would otherwise call every value singular or
none). ``xgrad.detect_anomaly()`` stops at such a gradient. The
decompositions inside these gradients keep to the same rule (see
``xgrad._ops.decompositions``): no SVD of a matrix with NaN or inf entries
(LAPACK's may never return there), and a solve that LAPACK refuses on such
a matrix gives NaN instead of LinAlgError.

On CuPy the decision is the same code on device data; raising needs one
device-to-host read (a synchronisation) of one boolean per check, in the
backward pass of these ops only.
"""

from math import isfinite

import numpy

from xgrad import _core
from xgrad._errors import XgradError
from xgrad._ops import _args


class LinAlgError(XgradError, numpy.linalg.LinAlgError):
    """LAPACK could not factor the matrix (singular, not positive definite,
    no convergence), or a gradient needs a factor that xgrad's rank
    tolerance calls singular."""


def as_raw(a):
    """The raw (NumPy or CuPy) data of an xgrad array, or raw data itself:
    the decision is a constant, never recorded."""
    return _args.raw(a) if isinstance(a, _core.ndarray) else a


def tolerance(values, size):
    """``size * eps * max|values|`` over the last axis (one per matrix), as
    numpy.linalg.matrix_rank; ``values`` raw, float."""
    xp = _args.module_of(values)
    scale = size * _eps(values.dtype)  # a Python float: no NumPy dispatch on CuPy data
    return xp.abs(values).max(axis=-1, keepdims=True) * scale


_EPS = {}


def _eps(dtype):
    eps = _EPS.get(dtype)
    if eps is None:
        eps = _EPS[dtype] = float(numpy.finfo(dtype).eps)
    return eps


def _error(message, worst, limit):
    return LinAlgError('{} ({:.3g} <= {:.3g}, the rank tolerance max(M, N) * eps * '
                       'largest magnitude)'.format(message, worst, limit))


def _raise_if_within(mags, tol, message, values):
    """LinAlgError(message) if some of the raw ``mags`` is ``<= tol``, in the
    matrices whose ``values`` (last axis) are all finite. The decision's one
    host read is ``bool(...any())`` (a synchronisation on CuPy); the
    numbers in the message are read only when raising."""
    xp = _args.module_of(mags)
    bad = xp.logical_and(mags <= tol, xp.isfinite(values).all(axis=-1, keepdims=True))
    if bool(bad.any()):
        raise _error(message, float(mags[bad].min()),
                     float(xp.broadcast_to(tol, mags.shape)[bad].max()))


# One small host matrix: its few values are decided in Python floats, where
# five NumPy calls on a 3-vector cost more than the gradient they guard.
_SMALL = 64


def _small_host(values):
    return type(values) is numpy.ndarray and values.ndim == 1 and values.shape[0] <= _SMALL


def _raise_if_within_small(mags, largest, size, dtype, message):
    """``_raise_if_within`` for a list of magnitudes of finite values."""
    tol = size * _eps(dtype) * largest
    worst = min(mags)
    if worst <= tol:
        raise _error(message, worst, tol)


def require_nonzero(values, size, message):
    """LinAlgError(message) when some ``|values|`` (the diagonal of a
    triangular factor, or singular values; last axis per matrix) is within
    the rank tolerance of a matrix whose larger side is ``size``; a matrix
    with a NaN or inf among its ``values`` decides nothing (module
    docstring)."""
    values = as_raw(values)
    if values.shape[-1] == 0:
        return
    if _small_host(values):
        listed = values.tolist()
        if not all(map(isfinite, listed)):
            return
        mags = [abs(v) for v in listed]
        _raise_if_within_small(mags, max(mags), size, values.dtype, message)
        return
    _raise_if_within(_args.module_of(values).abs(values), tolerance(values, size), message,
                     values)


def require_distinct(values, size, message):
    """LinAlgError(message) when two adjacent entries of the sorted
    ``values`` (eigenvalues, singular values; last axis per matrix) are
    within the rank tolerance of each other; a matrix with a NaN or inf
    among its ``values`` decides nothing (module docstring)."""
    values = as_raw(values)
    if values.shape[-1] < 2:
        return
    if _small_host(values):
        listed = values.tolist()
        if not all(map(isfinite, listed)):
            return
        gaps = [abs(b - a) for a, b in zip(listed, listed[1:])]
        _raise_if_within_small(gaps, max(abs(v) for v in listed), size, values.dtype, message)
        return
    with numpy.errstate(invalid='ignore'):  # inf - inf: those matrices decide nothing
        gaps = _args.module_of(values).abs(values[..., 1:] - values[..., :-1])
    _raise_if_within(gaps, tolerance(values, size), message, values)
