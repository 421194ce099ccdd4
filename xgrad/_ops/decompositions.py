"""``xgrad.linalg``'s solvers and decompositions, as ChainerX's
``chainerx.linalg``: ``solve``, ``inv``, ``pinv``, ``cholesky``, ``qr``,
``svd``, ``eigh`` and ``eigvalsh``.

ChainerX's semantics: one matrix (2-D input, DimensionError otherwise; a
square one where the routine needs it), float32 or float64 only (DtypeError
for float16, integers and bool, as ChainerX's LAPACK kernels), NumPy's
results. A matrix that LAPACK cannot factor (singular, not positive
definite) raises ``xgrad.linalg.LinAlgError``, an XgradError that is also
NumPy's ``LinAlgError``.

A gradient that needs a nonsingular factor (a for ``inv`` and ``solve``, L
for ``cholesky``, R for ``qr``) or distinct eigenvalues/singular values
(``eigh``'s eigenvectors, ``svd``'s singular vectors, ``pinv`` when
``rcond`` drops some; full-rank ``pinv``: a nonzero smallest one) raises
``LinAlgError`` when xgrad's rank tolerance calls it singular, whatever
LAPACK returned: tol = max(M, N) * eps(dtype) * the largest magnitude
(numpy.linalg.matrix_rank's), see ``xgrad._ops._singular``. On CuPy that
decision reads one boolean on the host per check (a synchronisation).

NaN and inf: the forwards are NumPy's (NaN results, or NumPy's
LinAlgError: ``cholesky`` of a non-positive pivot, and of a NaN pivot with
reference LAPACK, not OpenBLAS; ``eigh`` where LAPACK does not converge;
``svd`` of a NaN), but for ``svd`` (and ``pinv`` and the SVD norms) of a
matrix with inf entries, whose factors are NaN here (see
``xgrad._ops._lapack.svd``). A gradient never raises for non-finite data:
a factor holding NaN or inf is never called singular, the solves and
inverses inside a gradient give NaN where LAPACK refuses a matrix with NaN
or inf entries, and no SVD is taken of such a matrix. The gradient comes
out of the same formula, NaN and inf carried on as in the forward
(PyTorch's rule); ``xgrad.detect_anomaly()`` stops at it.

Gradients are ChainerX's formulas, written with matrix products over the
namespace ``xp`` so that each is differentiable again:

* ``inv``: ga = -Y^T gY Y^T; ``solve``: gb = A^-T gx, ga = -gb x^T.
* ``cholesky`` (Murray 2016) and ``eigh`` (Giles 2008) take the symmetric
  convention: the gradient is symmetrized, as if ``a`` were parametrized by
  its symmetric part (the routines read one triangle only).
* ``qr`` (reduced or complete with a square R): ga = (gQ + Q copyltu(M)) R^-T
  with M = R gR^T - gQ^T Q; no gradient for a non-square R (DimensionError
  on backward) nor for ``mode='raw'``.
* ``svd``: Townsend's formula (``xgrad._ops.norms.Svd``); it needs distinct
  nonzero singular values. With ``full_matrices=True`` and a non-square
  matrix, the singular vectors beyond min(m, n) are not unique; their output
  gradients are ignored (PyTorch's choice; ChainerX raises).

Beyond ChainerX, which has no backward there: ``eigvalsh`` (through the
eigenvectors), ``qr(mode='r')`` and ``svd(compute_uv=False)`` are
differentiable too.
"""

import functools

import numpy

from xgrad._errors import XgradError
from xgrad._ops import _args, _lapack
from xgrad._ops._singular import LinAlgError, as_raw, require_distinct, require_nonzero
from xgrad._ops._op import PyOp
from xgrad._ops._xp import tri_mask
from xgrad._ops.linalg import matmul
from xgrad._ops.manipulation import copy, swapaxes, transpose
from xgrad._ops.logic import where
from xgrad._ops.norms import Svd
from xgrad._ops.registry import F32, F64, Arg, OpInfo, Sample, register

__all__ = []

_FLOATS = (F32, F64)


# ---------------------------------------------------------------------------
# Arguments and helpers

def _matrix(op, a, name='a', square=False):
    """``a`` as an xgrad float32/float64 matrix (ChainerX's checks, rank then
    shape then dtype)."""
    a = _args.as_array(a, name, op=op)
    if a.ndim != 2:
        raise _args.DimensionError('{}: {} must be a matrix (2-D), not of shape {}; xgrad.'
                                   'linalg routines take one matrix'.format(op, name, a.shape))
    if square and a.shape[0] != a.shape[1]:
        raise _args.DimensionError('{}: {} of shape {} is not square'.format(op, name, a.shape))
    if a.dtype not in _FLOATS:
        raise _args.DtypeError('{}: {} has dtype {}; only float32 and float64 matrices are '
                               'supported'.format(op, name, a.dtype))
    return a


def _t(xp, a):
    return xp.swapaxes(a, -1, -2)


def _refused_as_nan(compute, a, shape, dtype):
    """``compute()``, a LAPACK inverse or solve of the raw matrix ``a``
    inside a gradient, or NaN of ``shape`` and ``dtype`` where LAPACK refuses
    an ``a`` with NaN or inf entries: its LU may meet an exact zero pivot
    that the forward's did not (solve's forward of a = [[1, inf], [0, 1]]
    gives NaN, the LU of a^T in its gradient a zero pivot), and the gradient
    carries NaN on instead (module docstring). A finite ``a`` that LAPACK
    calls singular still raises."""
    try:
        return compute()
    except LinAlgError:
        xp = _args.module_of(a)
        if bool(xp.isfinite(a).all()):  # (read only when LAPACK has refused)
            raise
        return xp.full(shape, numpy.nan, dtype)


def _quiet_inv(why, a):
    return _refused_as_nan(lambda: _lapack.inv(why, a), a, a.shape, a.dtype)


def _quiet_solve(why, a, b):
    return _refused_as_nan(lambda: _lapack.solve(why, a, b), a, b.shape,
                           numpy.result_type(a.dtype, b.dtype))


def _inv(xp, a, why):
    """a^-1 in a gradient formula: LinAlgError starting with ``why`` (the
    op, and what is singular) where ``a`` is finite and singular, NaN where
    LAPACK refuses an ``a`` with NaN or inf entries."""
    return _quiet_inv(why, a) if xp.raw else _args.apply(Inv(why), a)


def _solve(xp, a, b, why):
    """a^-1 b in a gradient formula, as ``_inv``."""
    return _quiet_solve(why, a, b) if xp.raw else _args.apply(Solve(why), a, b)


def _add(a, b):
    return b if a is None else a + b


def _diagonal(a):
    """The diagonal of the factor ``a`` (raw or xgrad), raw."""
    return as_raw(a).diagonal(0, -2, -1)


def _require_nonsingular(a, message):
    """LinAlgError(message) where the retained input ``a`` (raw or xgrad) of
    inv or solve is singular at the rank tolerance of its singular values.
    A host matrix with NaN or inf entries decides nothing and is not
    decomposed (``_lapack.svd`` raises for a NaN); on CuPy its singular
    values come back NaN, which decide nothing either."""
    raw = as_raw(a)
    if type(raw) is numpy.ndarray and not numpy.isfinite(raw).all():
        return
    require_nonzero(_lapack.svd('svd', raw, compute_uv=False), raw.shape[-1], message)


@functools.lru_cache(maxsize=64)
def _halved_lower(n, dtype):
    """The lower triangle of ones with halves on the diagonal: phi of
    cholesky's gradient is the lower triangle times it."""
    coef = numpy.tri(n, dtype=dtype)
    coef[numpy.diag_indices(n)] = 0.5
    coef.flags.writeable = False
    return coef


def _diag_mask(xp, n, like):
    return xp.constant(numpy.eye(n, dtype=bool), like)


# ---------------------------------------------------------------------------
# inv, solve, pinv

class Inv(PyOp):
    """Y = a^-1; ga = -Y^T gY Y^T, where a is nonsingular at the rank
    tolerance (its singular values, one SVD per backward). ``why``: the
    inverse is one inside a gradient (``_inv``)."""
    op_name = 'inv'

    def __init__(self, why=None):
        self.why = why

    def forward(self, inputs):
        a, = inputs
        self.retain_inputs((0,))
        self.retain_outputs((0,))
        return (_lapack.inv('inv', a) if self.why is None else _quiet_inv(self.why, a),)

    def grads(self, xp, targets, gys, xs, ys):
        _require_nonsingular(xs[0], 'inv: no gradient where a is singular')
        yt = _t(xp, ys[0])
        return (-xp.matmul(xp.matmul(yt, gys[0]), yt),)


def inv(a):
    """The inverse of the square matrix ``a``. Its gradient raises
    LinAlgError where ``a`` is singular at the rank tolerance (module
    docstring), even where LAPACK returned an inverse."""
    a = _matrix('inv', a, square=True)
    return _args.apply(Inv(), a)


class Solve(PyOp):
    """x = a^-1 b for b of shape (n,) or (n, k); gb = a^-T gx, ga = -gb x^T,
    where a is nonsingular at the rank tolerance (its singular values, one
    SVD per backward). ``why``: the solve is one inside a gradient
    (``_solve``)."""
    op_name = 'solve'

    def __init__(self, why=None):
        self.why = why

    def forward(self, inputs):
        a, b = inputs
        self.retain_inputs((0,))
        self.retain_outputs((0,))
        self.dtypes = (a.dtype, b.dtype)
        work = numpy.result_type(a.dtype, b.dtype)
        a, b = a.astype(work, copy=False), b.astype(work, copy=False)
        return (_lapack.solve('solve', a, b) if self.why is None else
                _quiet_solve(self.why, a, b),)

    def grads(self, xp, targets, gys, xs, ys):
        a, x = xs[0], ys[0]
        _require_nonsingular(a, 'solve: no gradient where a is singular')
        gb = _solve(xp, _t(xp, a), gys[0], 'solve: no gradient where a is singular')
        out = []
        for t in targets:
            if t == 0:
                if x.ndim == 1:
                    ga = -(xp.reshape(gb, (-1, 1)) * xp.reshape(x, (1, -1)))
                else:
                    ga = -xp.matmul(gb, _t(xp, x))
                out.append(xp.cast(ga, self.dtypes[0]))
            else:
                out.append(xp.cast(gb, self.dtypes[1]))
        return tuple(out)


def solve(a, b):
    """The solution x of ``a @ x = b``, ``a`` square, ``b`` of shape (n,) or
    (n, k); the result has the common dtype of ``a`` and ``b``. The
    gradient raises LinAlgError where ``a`` is singular at the rank
    tolerance (module docstring)."""
    op = 'solve'
    a = _matrix(op, a, square=True)
    b = _args.as_array(b, 'b', a, op)
    if b.dtype not in _FLOATS:
        raise _args.DtypeError('solve: b has dtype {}; only float32 and float64 are '
                               'supported'.format(b.dtype))
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise _args.DimensionError('solve: b must have shape ({0},) or ({0}, k) for a of '
                                   'shape {1}, not {2}'.format(a.shape[0], a.shape, b.shape))
    _args.same_device([a, b], op)
    return _args.apply(Solve(), a, b)


class Pinv(PyOp):
    """Y = a^+ of a matrix whose singular values are all kept, from its SVD
    (computed by ``pinv``). The gradient is the closed form for a matrix of
    constant rank (Golub and Pereyra 1973), here full rank:
    ga = -Y^T gY Y^T + (I - a Y) gY^T Y Y^T + Y^T Y gY^T (I - Y a), whose
    last two terms vanish for a square matrix. One op and a few products,
    where the composition through ``svd`` needs Townsend's formula and
    distinct singular values."""
    op_name = 'pinv'

    def __init__(self, u, s, vt):
        self.factors = (u, s, vt)  # raw: a's reduced SVD

    def forward(self, inputs):
        a, = inputs
        u, s, vt = self.factors
        self.retain_inputs((0,))
        self.retain_outputs((0,))
        self.dtype = a.dtype
        return (((vt.T / s) @ u.T).astype(a.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        a, y, gy = xs[0], ys[0], gys[0]
        require_nonzero(self.factors[1], max(a.shape),
                        'pinv: no gradient where a is rank-deficient')
        yt = _t(xp, y)
        ga = -xp.matmul(xp.matmul(yt, gy), yt)
        if a.shape[0] != a.shape[1]:  # (a Y and Y a are identities when a is square)
            gyt = _t(xp, gy)
            p = xp.matmul(xp.matmul(gyt, y), yt)
            q = xp.matmul(yt, xp.matmul(y, gyt))
            ga = ga + (p - xp.matmul(a, xp.matmul(y, p))) + (q - xp.matmul(xp.matmul(q, y), a))
        return (xp.cast(ga, self.dtype),)


def pinv(a, rcond=1e-15):
    """The Moore-Penrose pseudo-inverse of ``a``: v diag(1/s) u^T over the
    singular values s above ``rcond * max(s)`` (the others count as 0).
    For host data whose singular values are all kept it is one op with the
    closed-form gradient of ``Pinv`` (LinAlgError where ``a`` is
    rank-deficient at the rank tolerance). Otherwise (``rcond`` drops some,
    or GPU data, where deciding would read the device in the forward) it is
    composed of ``svd`` and products, as ChainerX's, differentiable where
    the singular values are distinct at the rank tolerance (module
    docstring; LinAlgError naming pinv otherwise, repeated dropped ones
    included)."""
    a = _matrix('pinv', a)
    if a.size == 0:
        return copy(transpose(a))
    raw = _args.raw(a)
    if type(raw) is numpy.ndarray:
        u, s, vt = _lapack.svd('pinv', raw, full_matrices=False)
        if (s > rcond * s.max()).all():
            return _args.apply(Pinv(u, s, vt), a)
    u, s, vt = _args.apply(Svd('pinv'), a)
    raw_s = _args.raw(s)
    kept = _args.wrap(raw_s > rcond * raw_s.max(), s)
    s_inv = where(kept, 1 / where(kept, s, 1), 0)
    return matmul(swapaxes(vt, 0, 1) * s_inv, swapaxes(u, 0, 1))


# ---------------------------------------------------------------------------
# cholesky

class Cholesky(PyOp):
    """L with a = L L^T, from the lower triangle of a. The gradient (Murray
    2016), symmetrized: phi = L^T gL with its upper triangle dropped and
    its diagonal halved, ga = sym(L^-T phi L^-1), where L's diagonal is
    nonzero at the rank tolerance."""
    op_name = 'cholesky'

    def forward(self, inputs):
        a, = inputs
        self.retain_outputs((0,))
        return (_lapack.cholesky('cholesky', a),)

    def grads(self, xp, targets, gys, xs, ys):
        lower = ys[0]
        p = xp.matmul(_t(xp, lower), gys[0])
        # (tril first: the upper triangle is dropped, not multiplied by 0,
        # which would turn an inf there into NaN)
        phi = xp.tril(p, 0) * xp.constant(_halved_lower(lower.shape[-1], lower.dtype), p)
        require_nonzero(_diagonal(lower), lower.shape[-1],
                        'cholesky: no gradient where L is singular (a is not numerically '
                        'positive definite)')
        l_inv = _inv(xp, lower, 'cholesky: no gradient where L is singular')
        g = xp.matmul(xp.matmul(_t(xp, l_inv), phi), l_inv)
        return ((g + _t(xp, g)) * 0.5,)


def cholesky(a):
    """The lower-triangular Cholesky factor L of the symmetric positive
    definite ``a`` (a = L L^T); only the lower triangle of ``a`` is read.
    LinAlgError if ``a`` is not positive definite."""
    return _args.apply(Cholesky(), _matrix('cholesky', a, square=True))


# ---------------------------------------------------------------------------
# qr

_QR_MODES = ('reduced', 'complete', 'r', 'raw')


class Qr(PyOp):
    """(Q, R) of mode 'reduced' or 'complete'. The gradient needs R square
    (m >= n reduced, m == n complete) and its diagonal nonzero at the rank
    tolerance, max(m, n) * eps * max|R_ii|."""
    op_name = 'qr'

    def __init__(self, mode):
        self.mode = mode

    def forward(self, inputs):
        a, = inputs
        self.retain_outputs((0, 1))
        return _lapack.qr('qr', a, self.mode)

    def grads(self, xp, targets, gys, xs, ys):
        q, r = ys
        gq, gr = gys
        if r.shape[0] != r.shape[1]:
            raise _args.DimensionError(
                'qr: no gradient where R is not square (R of shape {}, mode {!r}): Q and '
                'R do not determine a smoothly there'.format(r.shape, self.mode))
        require_nonzero(_diagonal(r), max(q.shape[-2], r.shape[-1]),
                        'qr: no gradient where R is singular (the columns of a are '
                        'linearly dependent)')
        m = None
        if gr is not None:
            m = xp.matmul(r, _t(xp, gr))
        if gq is not None:
            m = _add(m, -xp.matmul(_t(xp, gq), q))
        m_sym = xp.where(xp.constant(tri_mask(m.shape[-1]), m), m, _t(xp, m))  # copyltu(M)
        rhs = _add(gq, xp.matmul(q, m_sym))
        return (_t(xp, _solve(xp, r, _t(xp, rhs), 'qr: no gradient where R is singular')),)


class _QrRaw(PyOp):
    """NumPy's mode 'raw' (Householder reflectors h and scales tau): no
    gradient."""
    op_name = 'qr'

    def forward(self, inputs):
        a, = inputs
        return _lapack.qr('qr', a, 'raw')

    def grads(self, xp, targets, gys, xs, ys):
        raise XgradError("qr: mode='raw' has no gradient")


def qr(a, mode='reduced'):
    """The QR decomposition of ``a`` (m x n, k = min(m, n)), NumPy's modes:
    'reduced' (Q m x k, R k x n), 'complete' (Q m x m, R m x n), 'r' (R
    only, k x n) and 'raw' (h n x m, tau (k,))."""
    if mode not in _QR_MODES:
        raise ValueError("qr: mode must be 'reduced', 'complete', 'r' or 'raw', not "
                         "{!r}".format(mode))
    a = _matrix('qr', a)
    if mode == 'raw':
        return _args.apply(_QrRaw(), a)
    q, r = _args.apply(Qr('reduced' if mode == 'r' else mode), a)
    return r if mode == 'r' else (q, r)


# ---------------------------------------------------------------------------
# svd

class _FullSvd(Svd):
    """The SVD with full square u (m x m) and vt (n x n). The gradient is
    the reduced one: the output gradients of the columns of u and rows of vt
    beyond k = min(m, n), which are not unique, are dropped."""

    def forward(self, inputs):
        a, = inputs
        self.retain_outputs((0, 1, 2))
        return _lapack.svd('svd', a, full_matrices=True)

    def grads(self, xp, targets, gys, xs, ys):
        u, s, vt = ys
        gu, gs, gvt = gys
        k = s.shape[-1]
        cols, rows = (slice(None), slice(0, k)), (slice(0, k), slice(None))
        u, vt = xp.getitem(u, cols), xp.getitem(vt, rows)
        gu = None if gu is None else xp.getitem(gu, cols)
        gvt = None if gvt is None else xp.getitem(gvt, rows)
        return Svd.grads(self, xp, targets, (gu, gs, gvt), xs, (u, s, vt))


def svd(a, full_matrices=True, compute_uv=True):
    """The singular value decomposition a = u diag(s) vt; ``(u, s, vt)``, or
    ``s`` alone when ``compute_uv`` is False. ``full_matrices``: u is m x m
    and vt n x n (else m x k and k x n)."""
    a = _matrix('svd', a)
    m, n = a.shape
    if not compute_uv:
        return _args.apply(Svd(), a)[1]
    if full_matrices and m != n:
        return _args.apply(_FullSvd(), a)
    return _args.apply(Svd(), a)


# ---------------------------------------------------------------------------
# eigh, eigvalsh

def _uplo(op, UPLO):
    if not isinstance(UPLO, str):
        raise TypeError("{}: UPLO must be 'L' or 'U', not {}".format(op, type(UPLO).__name__))
    if len(UPLO) != 1:
        raise ValueError("{}: UPLO argument must be 'L' or 'U', not {!r}".format(op, UPLO))
    if UPLO.upper() not in ('L', 'U'):
        raise XgradError("{}: UPLO argument must be 'L' or 'U', not {!r}".format(op, UPLO))
    return UPLO.upper()


class Eigh(PyOp):
    """Eigenvalues w (ascending) and eigenvectors v of a symmetric matrix,
    read from one triangle. The gradient (Giles 2008), symmetrized:
    ga = sym(v (F * (v^T gv) + diag(gw)) v^T), F_ij = 1 / (w_j - w_i) off
    the diagonal; it needs distinct eigenvalues when gv is given (gaps above
    the rank tolerance, n * eps * max|w|)."""
    op_name = 'eigh'

    def __init__(self, uplo):
        self.uplo = uplo

    def forward(self, inputs):
        a, = inputs
        self.retain_outputs((0, 1))
        return _lapack.eigh('eigh', a, self.uplo)

    def grads(self, xp, targets, gys, xs, ys):
        w, v = ys
        gw, gv = gys
        n = w.shape[0]
        eye = _diag_mask(xp, n, w)
        inner = None
        if gw is not None:
            inner = xp.where(eye, xp.reshape(gw, (1, n)), 0)
        if gv is not None:
            require_distinct(w, n, 'eigh: no gradient of the eigenvectors where eigenvalues '
                                   'are repeated')
            diff = xp.reshape(w, (1, n)) - xp.reshape(w, (n, 1))
            f = xp.where(eye, 0, 1 / xp.where(eye, 1, diff))
            inner = _add(inner, f * xp.matmul(_t(xp, v), gv))
        g = xp.matmul(xp.matmul(v, inner), _t(xp, v))
        return ((g + _t(xp, g)) * 0.5,)


def eigh(a, UPLO='L'):
    """The eigenvalues (ascending) and eigenvectors ``(w, v)`` of the
    symmetric matrix ``a``, read from its lower (``UPLO='L'``) or upper
    (``'U'``) triangle."""
    uplo = _uplo('eigh', UPLO)
    return _args.apply(Eigh(uplo), _matrix('eigh', a, square=True))


def eigvalsh(a, UPLO='L'):
    """The eigenvalues (ascending) of the symmetric matrix ``a``;
    differentiable (through the eigenvectors, which it computes too)."""
    uplo = _uplo('eigvalsh', UPLO)
    return _args.apply(Eigh(uplo), _matrix('eigvalsh', a, square=True))[0]


def _is_lapack_available():
    """ChainerX's probe: xgrad always has LAPACK (NumPy's, CuPy's cuSOLVER)."""
    return True


# ---------------------------------------------------------------------------
# Registry

def _well_conditioned(rs, shape):
    """Square matrices with eigenvalues near n (far from singular)."""
    n = shape[0]
    return rs.uniform(-1, 1, shape) + n * numpy.eye(n)


def _spaced_spectrum(rs, shape):
    """U diag(s) V^T with singular values 1, 2, ..., min(m, n) (distinct,
    away from 0) and random orthogonal U, V."""
    m, n = shape
    k = min(m, n)
    u, _ = numpy.linalg.qr(rs.normal(size=(m, m)))
    v, _ = numpy.linalg.qr(rs.normal(size=(n, n)))
    s = numpy.zeros((m, n))
    s[range(k), range(k)] = numpy.arange(1, k + 1)
    return u @ s @ v.T


def _symmetric_spaced(rs, shape):
    """Q diag(w) Q^T with eigenvalues spaced 1 apart (PD when positive)."""
    n = shape[0]
    q, _ = numpy.linalg.qr(rs.normal(size=(n, n)))
    return q @ numpy.diag(numpy.arange(1, n + 1, dtype=float)) @ q.T


def _symmetrized(func, xs, kwargs):
    """Calls with the symmetric part of the matrix: cholesky and eigh read
    one triangle, and their (symmetric) gradients are those of this
    parametrization. The symmetric part keeps the input's dtype, so that
    an integer matrix reaches the routine (which refuses it, as ChainerX)
    rather than its float promotion."""
    a = xs[0]
    sym = (a + a.T) * 0.5
    return func(sym if sym.dtype == a.dtype else sym.astype(a.dtype), **kwargs)


def _lapack_ref(name):
    def ref(a, *args, **kwargs):
        out = getattr(numpy.linalg, name)(a, *args, **kwargs)
        if isinstance(out, tuple):
            return tuple(numpy.asarray(o).astype(a.dtype) for o in out)
        return numpy.asarray(out).astype(a.dtype)
    return ref


def _solve_ref(a, b):
    return numpy.linalg.solve(a, b).astype(numpy.result_type(a, b))


def _sign_to(dots):
    """-1 where ``dots`` (actual . expected per vector) is negative, else 1."""
    return numpy.where(dots < 0, -1, 1).astype(dots.dtype)


def _align_eigh(actual, expected):
    """The eigenvectors (columns) of ``actual`` turned to ``expected``'s."""
    w, v = actual
    return [w, v * _sign_to(numpy.sum(v * expected[1], axis=-2))[..., None, :]]


def _align_svd(actual, expected):
    """``actual``'s singular vectors turned to ``expected``'s: u's column j
    and vh's row j together (u s vh must not change) for the k singular
    values, the rest of u's columns or vh's rows one by one."""
    if len(actual) == 1:  # compute_uv=False
        return actual
    u, s, vh = actual
    k = s.shape[-1]
    u_dots = numpy.sum(u * expected[0], axis=-2)
    vh_dots = numpy.sum(vh * expected[2], axis=-1)
    both = u_dots[..., :k] + vh_dots[..., :k]
    u_dots[..., :k] = both
    vh_dots[..., :k] = both
    return [u * _sign_to(u_dots)[..., None, :], s, vh * _sign_to(vh_dots)[..., :, None]]


register(OpInfo(
    'linalg.inv', inv, ref=_lapack_ref('inv'), dtypes=_FLOATS,
    samples=[Sample((3, 3)), Sample((1, 1)), Sample((0, 0))],
    domain=_well_conditioned))

register(OpInfo(
    'linalg.solve', solve, ref=_solve_ref, dtypes=_FLOATS,
    samples=[Sample((3, 3), (3,)), Sample((3, 3), (3, 2)), Sample((1, 1), (1, 4)),
             Sample((0, 0), (0,)),
             Sample((3, 3), Arg((3, 2), dtype=F64), name='f64-b')],
    domain=(_well_conditioned, lambda rs, shape: rs.uniform(-1, 1, shape))))

register(OpInfo(
    'linalg.pinv', pinv, ref=lambda a, rcond=1e-15: numpy.linalg.pinv(a, rcond)
    .astype(a.dtype), dtypes=_FLOATS,
    samples=[Sample((3, 2)), Sample((2, 3)), Sample((3, 3)), Sample((0, 3)),
             # singular values 1, 2, 3: the cut at 0.4 * 3 drops 1
             Sample((3, 4), rcond=0.4)],
    domain=_spaced_spectrum))

register(OpInfo(
    'linalg.cholesky', cholesky, ref=_lapack_ref('cholesky'), dtypes=_FLOATS,
    samples=[Sample((3, 3)), Sample((1, 1)), Sample((0, 0))],
    domain=_symmetric_spaced, call=_symmetrized))

register(OpInfo(
    'linalg.qr', qr, ref=_lapack_ref('qr'), dtypes=_FLOATS,
    # the gradient needs a square R (see Qr); the other shapes and 'raw' are
    # tested in tests/ops/test_linalg_ops.py
    samples=[Sample((3, 3)), Sample((4, 2)), Sample((3, 3), mode='complete'),
             Sample((3, 2), mode='r'), Sample((1, 1))],
    domain=_spaced_spectrum))

register(OpInfo(
    'linalg.svd', svd, ref=_lapack_ref('svd'), dtypes=_FLOATS,
    samples=[Sample((3, 3)), Sample((3, 2), full_matrices=False),
             Sample((2, 3), full_matrices=False), Sample((1, 1)),
             Sample((3, 2), compute_uv=False), Sample((2, 4), compute_uv=False)],
    domain=_spaced_spectrum, align=_align_svd))

register(OpInfo(
    'linalg.eigh', eigh, ref=_lapack_ref('eigh'), dtypes=_FLOATS,
    samples=[Sample((3, 3)), Sample((3, 3), UPLO='U'), Sample((1, 1)), Sample((0, 0))],
    domain=_symmetric_spaced, call=_symmetrized, align=_align_eigh))

register(OpInfo(
    'linalg.eigvalsh', eigvalsh, ref=_lapack_ref('eigvalsh'), dtypes=_FLOATS,
    samples=[Sample((3, 3)), Sample((3, 3), UPLO='u'), Sample((1, 1)), Sample((0, 0))],
    domain=_symmetric_spaced, call=_symmetrized))
