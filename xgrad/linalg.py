"""``xgrad.linalg``: the linear-algebra namespace (``chainerx.linalg``)."""

from xgrad._ops.decompositions import (  # NOQA
    LinAlgError, _is_lapack_available, cholesky, eigh, eigvalsh, inv, pinv, qr, solve,
    svd)
from xgrad._ops.norms import norm

__all__ = ['norm', 'cholesky', 'eigh', 'eigvalsh', 'inv', 'pinv', 'qr', 'solve', 'svd',
           'LinAlgError']
