"""xgrad._ops._lapack calls NumPy's linalg gufuncs without numpy.linalg's
wrappers: its results must be numpy.linalg's bit for bit, its failures
xgrad's LinAlgError with NumPy's message (and no warning), and a NumPy that
lacks a gufunc must still work through numpy.linalg. The small-host checks
of xgrad._ops._singular must decide as the array path does."""

import warnings

import numpy
import pytest

from xgrad._ops import _lapack, _singular
from xgrad._ops._singular import LinAlgError

SHAPES = [(3, 3), (1, 1), (0, 0), (4, 2), (2, 4), (6, 6), (3, 0), (0, 3)]
DTYPES = [numpy.float32, numpy.float64]


def _same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert type(got) is numpy.ndarray
    assert got.dtype == want.dtype and got.shape == want.shape
    numpy.testing.assert_array_equal(got, want)


def _square(rs, n, dtype):
    a = rs.standard_normal((n, n)).astype(dtype)
    return a, (a @ a.T + 3 * numpy.eye(n, dtype=dtype)).astype(dtype)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', SHAPES)
def test_qr_and_svd_are_numpy_linalg_bit_for_bit(shape, dtype):
    a = numpy.random.RandomState(0).standard_normal(shape).astype(dtype)
    for mode in ('reduced', 'complete', 'raw'):
        _same(_lapack.qr('qr', a, mode), tuple(numpy.linalg.qr(a, mode=mode)))
    for full in (True, False):
        _same(_lapack.svd('svd', a, full), tuple(numpy.linalg.svd(a, full_matrices=full)))
    _same(_lapack.svd('svd', a, compute_uv=False), numpy.linalg.svd(a, compute_uv=False))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('n', [0, 1, 3, 7])
def test_square_routines_are_numpy_linalg_bit_for_bit(n, dtype):
    rs = numpy.random.RandomState(n)
    a, spd = _square(rs, n, dtype)
    _same(_lapack.inv('inv', a), numpy.linalg.inv(a))
    _same(_lapack.cholesky('cholesky', spd), numpy.linalg.cholesky(spd))
    for uplo in 'LU':
        _same(_lapack.eigh('eigh', spd, uplo), tuple(numpy.linalg.eigh(spd, UPLO=uplo)))
    for b_dtype in DTYPES:
        for b_shape in [(n,), (n, 2)]:
            b = rs.standard_normal(b_shape).astype(b_dtype)
            _same(_lapack.solve('solve', a, b), numpy.linalg.solve(a, b))


def test_a_stack_of_matrices_is_decomposed_per_matrix():
    a = numpy.random.RandomState(1).standard_normal((2, 4, 3)).astype(numpy.float32)
    _same(_lapack.svd('norm', a, full_matrices=False), tuple(numpy.linalg.svd(a, False)))


@pytest.mark.parametrize('call, message', [
    (lambda: _lapack.inv('inv', numpy.zeros((3, 3), numpy.float32)), 'inv: Singular matrix'),
    (lambda: _lapack.solve('solve', numpy.ones((2, 2)), numpy.ones(2)), 'solve: Singular matrix'),
    (lambda: _lapack.cholesky('cholesky', -numpy.eye(3)),
     'cholesky: Matrix is not positive definite'),
    (lambda: _lapack.svd('svd', numpy.full((3, 3), numpy.nan)), 'svd: SVD did not converge'),
    (lambda: _lapack.eigh('eigh', numpy.full((3, 3), numpy.nan), 'L'),
     'eigh: Eigenvalues did not converge'),
])
def test_failures_are_xgrad_linalg_errors_with_numpy_messages_and_no_warning(call, message):
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with pytest.raises(LinAlgError) as info:
            call()
    assert str(info.value) == message
    assert isinstance(info.value, numpy.linalg.LinAlgError)
    # The errstate is restored: an invalid operation warns again afterwards.
    with pytest.warns(RuntimeWarning):
        numpy.sqrt(numpy.array(-1.0))


@pytest.mark.parametrize('name', ['_INV', '_SOLVE1', '_CHOLESKY_LO', '_QR_R_RAW', '_SVD_FULL'])
def test_a_numpy_without_the_gufunc_falls_back_to_numpy_linalg(monkeypatch, name):
    monkeypatch.setattr(_lapack, name, None)
    rs = numpy.random.RandomState(2)
    a, spd = _square(rs, 3, numpy.float32)
    b = rs.standard_normal(3).astype(numpy.float32)
    _same(_lapack.inv('inv', a), numpy.linalg.inv(a))
    _same(_lapack.solve('solve', a, b), numpy.linalg.solve(a, b))
    _same(_lapack.cholesky('cholesky', spd), numpy.linalg.cholesky(spd))
    _same(_lapack.qr('qr', a, 'reduced'), tuple(numpy.linalg.qr(a)))
    _same(_lapack.svd('svd', a), tuple(numpy.linalg.svd(a)))
    with pytest.raises(LinAlgError, match='^inv: Singular matrix$'):
        _lapack.inv('inv', numpy.zeros((2, 2), numpy.float32))


def _decision(check, values, size):
    try:
        check(values, size, 'singular')
    except LinAlgError:
        return True
    return False


@pytest.mark.parametrize('dtype', DTYPES)
def test_small_host_checks_decide_as_the_array_path(monkeypatch, dtype):
    rs = numpy.random.RandomState(3)
    eps = float(numpy.finfo(dtype).eps)
    cases = [numpy.array([3.0, 1.0, 0.0]), numpy.array([2.0, 2.0, 1.0]),
             numpy.array([1.0, -1.0, 1e-300]), numpy.array([5.0, numpy.nan, 0.0]),
             numpy.array([numpy.nan, 1.0, 1.0]), numpy.array([1.0, 1.0 + 40 * eps]),
             numpy.array([1.0, 1.0 + 2 * eps, 4.0])]
    cases += [rs.standard_normal(n) * 10.0 ** rs.randint(-3, 4) for n in (1, 2, 5, 64)]
    for values in cases:
        values = values.astype(dtype)
        for check in (_singular.require_nonzero, _singular.require_distinct):
            small = _decision(check, values, 3)
            with monkeypatch.context() as m:
                m.setattr(_singular, '_SMALL', -1)  # every input takes the array path
                assert _decision(check, values, 3) == small, (check.__name__, values)
