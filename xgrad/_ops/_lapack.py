"""LAPACK on host matrices through NumPy's own gufuncs, for ``xgrad.linalg``.

``numpy.linalg.qr``, ``svd``, ``inv``... are Python wrappers around the
gufuncs of ``numpy.linalg._umath_linalg``: they check and convert the input,
choose the gufunc, enter an errstate and cast the result. For the small
matrices of a training step the wrapper costs far more than LAPACK does
(``numpy.linalg.qr`` of a 3x3 matrix takes about 50 us, its two gufuncs 4 us).
xgrad's ops have checked their input already (float32 or float64 matrices),
so on host data they call the gufuncs themselves, the way NumPy's wrappers
do: computed in float64 (NumPy's rule for real input), the result cast back
to the input's dtype, a failure (the gufuncs raise the invalid flag and fill
NaN) raised as xgrad's ``LinAlgError`` with NumPy's message. The results are
NumPy's, bit for bit, but for ``svd`` of a matrix with inf entries, which
never reaches LAPACK (see ``svd``).

The gufuncs are private to NumPy, and some names changed in NumPy 2.0 (the
``_m``/``_n`` variants of svd and qr became one gufunc); they are looked up
by name at import. CuPy data, other dtypes and a NumPy that lacks a name go
through ``numpy.linalg``/``cupy.linalg`` instead: slower, same results.
"""

import numpy

from xgrad._ops import _args
from xgrad._ops._singular import LinAlgError
from xgrad._ops._xp import tri_mask

try:
    from numpy.linalg import _umath_linalg as _GUFUNCS
except ImportError:  # pragma: no cover - every NumPy xgrad supports has it
    _GUFUNCS = None

_NUMPY_1 = numpy.lib.NumpyVersion(numpy.__version__) < '2.0.0'
_HOST = numpy.ndarray
_REAL = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))


def _gufunc(name):
    return getattr(_GUFUNCS, name, None)


def _sided(name):
    """NumPy 1.x splits some gufuncs by shape: ``name_m`` for m <= n and
    ``name_n`` for m > n; NumPy 2 has one ``name``. A function of (m, n)."""
    if not _NUMPY_1:
        one = _gufunc(name)
        return None if one is None else (lambda m, n: one)
    wide, tall = _gufunc(name + '_m'), _gufunc(name + '_n')
    if wide is None or tall is None:
        return None
    return lambda m, n: wide if m <= n else tall


_INV = _gufunc('inv')
_SOLVE, _SOLVE1 = _gufunc('solve'), _gufunc('solve1')
_CHOLESKY_LO = _gufunc('cholesky_lo')
_QR_R_RAW = _sided('qr_r_raw')
_QR_REDUCED, _QR_COMPLETE = _gufunc('qr_reduced'), _gufunc('qr_complete')
_SVD_VALUES, _SVD_FULL, _SVD_REDUCED = _sided('svd'), _sided('svd_f'), _sided('svd_s')
_EIGH = {'L': _gufunc('eigh_lo'), 'U': _gufunc('eigh_up')}


def _direct(gufunc, *arrays):
    """Whether ``gufunc`` serves ``arrays``: host, float32/float64, and this
    NumPy has the gufunc."""
    if gufunc is None:
        return False
    for a in arrays:
        if type(a) is not _HOST or a.dtype not in _REAL:
            return False
    return True


class _Failure:
    """NumPy's errstate for its linalg gufuncs, turning the invalid flag into
    xgrad's LinAlgError('op: message')."""

    def __init__(self, op, message):
        self.op, self.message = op, message
        self.state = numpy.errstate(invalid='raise', over='ignore', divide='ignore',
                                    under='ignore')

    def __enter__(self):
        self.state.__enter__()

    def __exit__(self, kind, value, traceback):
        self.state.__exit__(kind, value, traceback)
        if kind is FloatingPointError:
            raise LinAlgError('{}: {}'.format(self.op, self.message)) from None
        return False


def _fallback(op, compute, *arrays):
    """``compute(module.linalg, *arrays)`` with NumPy's/CuPy's LinAlgError as
    xgrad's."""
    try:
        return compute(_args.module_of(arrays[0]).linalg, *arrays)
    except numpy.linalg.LinAlgError as e:
        raise LinAlgError('{}: {}'.format(op, e)) from None


def _result_dtype(*arrays):
    """float32 if every input is float32, else float64 (NumPy's)."""
    for a in arrays:
        if a.dtype != numpy.float32:
            return numpy.float64
    return numpy.float32


def _one_matrix(op, gufunc, message, a, fallback):
    """gufunc(a) of one float matrix (signature d->d), cast back to a's dtype;
    ``fallback(linalg, a)`` where the gufunc does not serve ``a``."""
    if not _direct(gufunc, a):
        return _fallback(op, fallback, a)
    with _Failure(op, message):
        y = gufunc(a, signature='d->d')
    return y.astype(a.dtype, copy=False)


def inv(op, a):
    """The inverse of the square matrix ``a``."""
    return _one_matrix(op, _INV, 'Singular matrix', a, lambda la, m: la.inv(m))


def solve(op, a, b):
    """x with ``a @ x = b``; ``b`` a vector (n,) or a matrix (n, k)."""
    gufunc = _SOLVE1 if b.ndim == 1 else _SOLVE
    if not _direct(gufunc, a, b):
        return _fallback(op, lambda la, m, v: la.solve(m, v), a, b)
    with _Failure(op, 'Singular matrix'):
        x = gufunc(a, b, signature='dd->d')
    return x.astype(_result_dtype(a, b), copy=False)


def cholesky(op, a):
    """The lower Cholesky factor L of ``a`` (its lower triangle read)."""
    return _one_matrix(op, _CHOLESKY_LO, 'Matrix is not positive definite', a,
                       lambda la, m: la.cholesky(m))


def qr(op, a, mode):
    """NumPy's ``qr`` of the matrix ``a`` in mode 'reduced', 'complete' or
    'raw'."""
    if _QR_R_RAW is None or not _direct(_QR_REDUCED, a):
        return _fallback(op, lambda la, m: la.qr(m, mode=mode), a)
    m, n = a.shape[-2:]
    work = a.astype(numpy.float64)  # a copy: the Householder factors overwrite it
    message = 'Incorrect argument found while performing QR factorization'
    with _Failure(op, message):
        tau = _QR_R_RAW(m, n)(work, signature='d->d')
    if mode == 'raw':
        return (numpy.swapaxes(work, -1, -2).astype(a.dtype, copy=False),
                tau.astype(a.dtype, copy=False))
    if mode == 'complete' and m > n:
        columns, gufunc = m, _QR_COMPLETE
    else:
        columns, gufunc = min(m, n), _QR_REDUCED
    with _Failure(op, message):
        q = gufunc(work, tau, signature='dd->d')
    top = work[..., :columns, :]
    r = numpy.where(tri_mask(columns, n, -1), 0.0, top)  # numpy.triu, its mask kept
    return q.astype(a.dtype, copy=False), r.astype(a.dtype, copy=False)


def svd(op, a, full_matrices=True, compute_uv=True):
    """(u, s, vt) of ``a`` (u m x m and vt n x n when ``full_matrices``), or
    s alone when ``compute_uv`` is False.

    No matrix with NaN or inf entries reaches LAPACK's SVD. NumPy's raises
    'SVD did not converge' for a NaN, and so does this one on host data,
    on every LAPACK build. For an inf (and no NaN) NumPy's returns NaN
    singular values, with vectors that mean nothing, an "illegal value"
    message from DLASCL on stdout, or never returns (OpenBLAS 0.3.31: some
    3x3 matrices with one inf); here such a matrix has NaN u, s and vt. On
    CuPy data, where deciding to raise would read the device, a matrix with
    NaN entries has NaN factors too."""
    if type(a) is _HOST:
        if not numpy.isfinite(a).all():
            if numpy.isnan(a).any():
                raise LinAlgError('{}: SVD did not converge'.format(op))
            return _svd_of_finite(op, a, full_matrices, compute_uv)
    else:
        return _svd_of_finite(op, a, full_matrices, compute_uv)
    sided = (_SVD_FULL if full_matrices else _SVD_REDUCED) if compute_uv else _SVD_VALUES
    if not _direct(sided, a):
        return _fallback(op, lambda la, m: la.svd(m, full_matrices=full_matrices,
                                                  compute_uv=compute_uv), a)
    gufunc = sided(*a.shape[-2:])
    with _Failure(op, 'SVD did not converge'):
        if not compute_uv:
            return gufunc(a, signature='d->d').astype(a.dtype, copy=False)
        u, s, vt = gufunc(a, signature='d->ddd')
    return u.astype(a.dtype, copy=False), s.astype(a.dtype, copy=False), \
        vt.astype(a.dtype, copy=False)


def _svd_of_finite(op, a, full_matrices, compute_uv):
    """``svd`` with NaN factors for the matrices with NaN or inf entries
    (decomposed as zeros), decided without reading device data."""
    xp = _args.module_of(a)
    finite = xp.isfinite(a).all(axis=(-2, -1), keepdims=True)
    out = _fallback(op, lambda la, m: la.svd(m, full_matrices=full_matrices,
                                             compute_uv=compute_uv),
                    xp.where(finite, a, a.dtype.type(0)))
    nan = a.dtype.type('nan')
    if not compute_uv:
        return xp.where(finite[..., 0], out, nan)
    u, s, vt = out
    return xp.where(finite, u, nan), xp.where(finite[..., 0], s, nan), xp.where(finite, vt, nan)


def eigh(op, a, uplo):
    """(w, v): the eigenvalues (ascending) and eigenvectors of the symmetric
    ``a``, read from its ``uplo`` ('L' or 'U') triangle."""
    gufunc = _EIGH[uplo]
    if not _direct(gufunc, a):
        return _fallback(op, lambda la, m: la.eigh(m, UPLO=uplo), a)
    with _Failure(op, 'Eigenvalues did not converge'):
        w, v = gufunc(a, signature='d->dd')
    return w.astype(a.dtype, copy=False), v.astype(a.dtype, copy=False)
