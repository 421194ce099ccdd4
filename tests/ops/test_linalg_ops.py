"""xgrad.linalg's solvers and decompositions beyond the registry's generated
tests: defining identities (A x = b, L L^T = A, A v = v w ...), the shapes of
every mode, gradients against closed forms, and ChainerX's errors."""

import numpy
import pytest

import xgrad
from xgrad import linalg

F64 = numpy.float64


def _rand(shape, seed=0, dtype=F64):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(dtype)


def _spd(n, seed=0):
    m = _rand((n, n), seed)
    return m @ m.T + n * numpy.eye(n)


def _grad(f, a):
    x = xgrad.array(a).require_grad()
    gx, = xgrad.grad([f(x)], [x])
    return gx.to_numpy()


# ---------------------------------------------------------------------------
# Values

def test_solve_vector_and_matrix_right_hand_sides():
    a = _spd(3)
    for b in (_rand((3,), 1), _rand((3, 2), 1)):
        x = linalg.solve(xgrad.array(a), xgrad.array(b))
        assert x.shape == b.shape
        numpy.testing.assert_allclose(a @ x.to_numpy(), b, atol=1e-12)


def test_solve_mixed_dtypes_give_float64_and_gradients_keep_input_dtypes():
    a = xgrad.array(_spd(3).astype(numpy.float32)).require_grad()
    b = xgrad.array(_rand((3,), 2)).require_grad()
    x = linalg.solve(a, b)
    assert x.dtype == F64
    ga, gb = xgrad.grad([xgrad.sum(x)], [a, b])
    assert ga.dtype == numpy.float32 and gb.dtype == F64


def test_inv_and_pinv():
    a = _spd(3)
    numpy.testing.assert_allclose(linalg.inv(xgrad.array(a)).to_numpy() @ a, numpy.eye(3),
                                  atol=1e-12)
    m = _rand((4, 2))
    p = linalg.pinv(xgrad.array(m)).to_numpy()
    # the Moore-Penrose conditions
    numpy.testing.assert_allclose(m @ p @ m, m, atol=1e-12)
    numpy.testing.assert_allclose(p @ m @ p, p, atol=1e-12)
    numpy.testing.assert_allclose((m @ p).T, m @ p, atol=1e-12)
    assert linalg.pinv(xgrad.zeros((0, 3))).shape == (3, 0)


def test_pinv_drops_small_singular_values():
    u, _ = numpy.linalg.qr(_rand((3, 3)))
    a = u @ numpy.diag([4.0, 1.0, 0.5])
    p = linalg.pinv(xgrad.array(a), rcond=0.2).to_numpy()
    numpy.testing.assert_allclose(p, numpy.diag([0.25, 1.0, 0.0]) @ u.T, atol=1e-12)


@pytest.mark.parametrize('shape', [(4, 2), (2, 3), (3, 3)])
def test_full_rank_pinv_gradients_match_numerical_ones(shape):
    """Full rank: one op with the closed-form gradient (Golub and Pereyra),
    first and second order, tall, wide and square."""
    from xgrad.testing import check_backward, check_double_backward
    rs = numpy.random.RandomState(3)
    a = xgrad.array(rs.uniform(-1, 1, shape) + numpy.eye(*shape)).require_grad()
    gy = xgrad.array(rs.uniform(-1, 1, shape[::-1]))
    check_backward(lambda xs: (linalg.pinv(xs[0]),), [a], [gy])
    check_double_backward(lambda xs: (linalg.pinv(xs[0]),), [a], [gy],
                          [xgrad.array(rs.uniform(-1, 1, shape))])


def test_full_rank_pinv_with_repeated_singular_values_has_a_gradient():
    """Its gradient needs a nonzero smallest singular value only (the
    singular vectors of a repeated one are not unique, the pseudo-inverse is)."""
    from xgrad.testing import check_backward
    q = _orthogonal(3)
    a = xgrad.array(q @ numpy.diag([1.0, 1.0, 0.5]) @ q.T).require_grad()
    check_backward(lambda xs: (linalg.pinv(xs[0]),), [a], [xgrad.array(_rand((3, 3), 5))])


def test_pinv_gradient_of_a_numerically_rank_deficient_matrix_is_a_linalg_error():
    """Kept by rcond but within the rank tolerance: LinAlgError, not a huge
    gradient."""
    q = _orthogonal(3)
    a = xgrad.array(q @ numpy.diag([1.0, 1.0, 1e-17]) @ q.T).require_grad()
    y = linalg.pinv(a, rcond=1e-20)
    with pytest.raises(linalg.LinAlgError, match='pinv: no gradient where a is rank-deficient'):
        xgrad.grad([xgrad.sum(y)], [a])


def test_cholesky_reads_the_lower_triangle():
    a = _spd(3)
    lower = linalg.cholesky(xgrad.array(a)).to_numpy()
    numpy.testing.assert_allclose(lower @ lower.T, a, atol=1e-12)
    assert numpy.all(numpy.triu(lower, 1) == 0)
    garbage_above = numpy.tril(a) + numpy.triu(numpy.full((3, 3), 7.0), 1)
    # Bit-equal on every machine: LAPACK's potrf never reads the upper
    # triangle, so both calls run one routine on identical data in one process.
    numpy.testing.assert_array_equal(linalg.cholesky(xgrad.array(garbage_above)).to_numpy(),
                                     lower)


@pytest.mark.parametrize('shape', [(3, 2), (2, 3), (3, 3), (0, 3), (3, 0)])
def test_qr_modes_shapes_and_values(shape):
    a = _rand(shape)
    m, n = shape
    k = min(m, n)
    q, r = linalg.qr(xgrad.array(a))
    assert (q.shape, r.shape) == ((m, k), (k, n))
    numpy.testing.assert_allclose(q.to_numpy() @ r.to_numpy(), a, atol=1e-12)
    q, r = linalg.qr(xgrad.array(a), mode='complete')
    assert (q.shape, r.shape) == ((m, m), (m, n))
    numpy.testing.assert_allclose(q.to_numpy() @ r.to_numpy(), a, atol=1e-12)
    r = linalg.qr(xgrad.array(a), mode='r')
    numpy.testing.assert_allclose(r.to_numpy(), numpy.linalg.qr(a, mode='r'), atol=1e-12)
    h, tau = linalg.qr(xgrad.array(a), mode='raw')
    e_h, e_tau = numpy.linalg.qr(a, mode='raw')
    assert (h.shape, tau.shape) == ((n, m), (k,))
    numpy.testing.assert_allclose(h.to_numpy(), e_h, atol=1e-12)
    numpy.testing.assert_allclose(tau.to_numpy(), e_tau, atol=1e-12)


@pytest.mark.parametrize('shape', [(3, 2), (2, 3), (2, 2)])
def test_svd_modes(shape):
    a = _rand(shape)
    m, n = shape
    k = min(m, n)
    u, s, vt = linalg.svd(xgrad.array(a))
    assert (u.shape, s.shape, vt.shape) == ((m, m), (k,), (n, n))
    numpy.testing.assert_allclose(u.to_numpy() @ u.to_numpy().T, numpy.eye(m), atol=1e-12)
    u, s, vt = linalg.svd(xgrad.array(a), full_matrices=False)
    assert (u.shape, vt.shape) == ((m, k), (k, n))
    numpy.testing.assert_allclose((u.to_numpy() * s.to_numpy()) @ vt.to_numpy(), a,
                                  atol=1e-12)
    s_only = linalg.svd(xgrad.array(a), compute_uv=False)
    numpy.testing.assert_allclose(s_only.to_numpy(), numpy.linalg.svd(a, compute_uv=False))


@pytest.mark.parametrize('uplo', ['L', 'U', 'l', 'u'])
def test_eigh_reads_the_named_triangle(uplo):
    sym = _spd(3)
    tri = numpy.tril(sym) if uplo.upper() == 'L' else numpy.triu(sym)
    w, v = linalg.eigh(xgrad.array(tri), UPLO=uplo)
    w, v = w.to_numpy(), v.to_numpy()
    numpy.testing.assert_allclose(sym @ v, v * w, atol=1e-12)
    assert numpy.all(numpy.diff(w) > 0)
    numpy.testing.assert_allclose(linalg.eigvalsh(xgrad.array(tri), UPLO=uplo).to_numpy(), w)


# ---------------------------------------------------------------------------
# Gradients against closed forms

def test_inv_gradient_of_trace():
    # d tr(A^-1) / dA = -(A^-2)^T
    a = _spd(3) + _rand((3, 3), 3)
    ai = numpy.linalg.inv(a)
    g = _grad(lambda x: xgrad.sum(linalg.inv(x) * xgrad.array(numpy.eye(3))), a)
    numpy.testing.assert_allclose(g, -(ai @ ai).T, atol=1e-10)


def test_cholesky_log_determinant_gradient_is_the_inverse():
    # log det A = 2 sum log diag(L); its gradient is A^-1 (symmetric)
    a = _spd(3)
    g = _grad(lambda x: 2 * xgrad.sum(xgrad.log(linalg.cholesky(x) *
                                                 xgrad.array(numpy.eye(3)) +
                                                 xgrad.array(1 - numpy.eye(3)))), a)
    numpy.testing.assert_allclose(g, numpy.linalg.inv(a), atol=1e-10)


def test_eigvalsh_gradients():
    a = _spd(3)
    # sum of eigenvalues = trace: gradient I
    numpy.testing.assert_allclose(_grad(lambda x: xgrad.sum(linalg.eigvalsh(x)), a),
                                  numpy.eye(3), atol=1e-10)
    # largest eigenvalue: gradient v v^T
    _, v = numpy.linalg.eigh(a)
    g = _grad(lambda x: linalg.eigvalsh(x)[2], a)
    numpy.testing.assert_allclose(g, numpy.outer(v[:, 2], v[:, 2]), atol=1e-10)


@pytest.mark.parametrize('full_matrices', [True, False])
def test_svd_nuclear_norm_gradient_is_u_vt(full_matrices):
    # d sum(s) / dA = U_k V_k^T, also with full (non-unique extra) vectors
    a = _rand((3, 2))
    u, _, vt = numpy.linalg.svd(a, full_matrices=False)
    g = _grad(lambda x: xgrad.sum(linalg.svd(x, full_matrices=full_matrices)[1]), a)
    numpy.testing.assert_allclose(g, u @ vt, atol=1e-10)
    g = _grad(lambda x: xgrad.sum(linalg.svd(x, compute_uv=False)), a)
    numpy.testing.assert_allclose(g, u @ vt, atol=1e-10)


def test_solve_gradients_closed_form():
    # x = A^-1 b, L = sum(c * x): gb = A^-T c, gA = -gb x^T
    a, b, c = _spd(3), _rand((3,), 4), _rand((3,), 5)
    ax, bx = xgrad.array(a).require_grad(), xgrad.array(b).require_grad()
    ga, gb = xgrad.grad([xgrad.sum(linalg.solve(ax, bx) * xgrad.array(c))], [ax, bx])
    e_gb = numpy.linalg.solve(a.T, c)
    numpy.testing.assert_allclose(gb.to_numpy(), e_gb, atol=1e-12)
    numpy.testing.assert_allclose(ga.to_numpy(), -numpy.outer(e_gb, numpy.linalg.solve(a, b)),
                                  atol=1e-12)


# ---------------------------------------------------------------------------
# Errors, as ChainerX's

ROUTINES = {
    'solve': lambda a: linalg.solve(a, a), 'inv': linalg.inv, 'pinv': linalg.pinv,
    'cholesky': linalg.cholesky, 'qr': linalg.qr, 'svd': linalg.svd, 'eigh': linalg.eigh,
    'eigvalsh': linalg.eigvalsh}
SQUARE_ONLY = ('solve', 'inv', 'cholesky', 'eigh', 'eigvalsh')


@pytest.mark.parametrize('name', sorted(ROUTINES))
@pytest.mark.parametrize('dtype', ['float16', 'int32', 'bool'])
def test_non_float32_64_raise_dtype_error(name, dtype):
    with pytest.raises(xgrad.DtypeError, match=name):
        ROUTINES[name](xgrad.zeros((3, 3), dtype))


@pytest.mark.parametrize('name', sorted(ROUTINES))
@pytest.mark.parametrize('shape', [(), (3,), (2, 3, 3)])
def test_non_matrices_raise_dimension_error(name, shape):
    with pytest.raises(xgrad.DimensionError, match=name):
        ROUTINES[name](xgrad.zeros(shape))


@pytest.mark.parametrize('name', SQUARE_ONLY)
def test_non_square_raises_dimension_error(name):
    with pytest.raises(xgrad.DimensionError, match='square'):
        ROUTINES[name](xgrad.zeros((2, 3)))


def test_solve_b_of_the_wrong_length():
    with pytest.raises(xgrad.DimensionError, match='b'):
        linalg.solve(xgrad.eye(3), xgrad.zeros((2,)))


@pytest.mark.parametrize('name, a', [
    ('inv', numpy.ones((3, 3))), ('solve', numpy.ones((3, 3))),
    ('cholesky', numpy.array([[1.0, -2.0], [-2.0, 1.0]]))])
def test_singular_or_indefinite_raise_linalg_error(name, a):
    with pytest.raises(linalg.LinAlgError, match=name) as info:
        ROUTINES[name](xgrad.array(a))
    assert isinstance(info.value, xgrad.XgradError)
    assert isinstance(info.value, numpy.linalg.LinAlgError)


@pytest.mark.parametrize('func', [linalg.eigh, linalg.eigvalsh])
def test_uplo_errors(func):
    a = xgrad.eye(3)
    with pytest.raises(TypeError):
        func(a, UPLO=None)
    with pytest.raises(ValueError):
        func(a, UPLO='bad')
    with pytest.raises(xgrad.XgradError):
        func(a, UPLO='A')


def test_qr_mode_is_checked_before_the_shape():
    with pytest.raises(ValueError, match='mode'):
        linalg.qr(xgrad.zeros(()), mode='bad_mode')


def test_qr_no_gradient_for_a_non_square_r_or_raw():
    x = xgrad.array(_rand((2, 3))).require_grad()
    q, r = linalg.qr(x)
    with pytest.raises(xgrad.DimensionError, match='square'):
        xgrad.grad([xgrad.sum(r)], [x])
    h, _ = linalg.qr(x, mode='raw')
    with pytest.raises(xgrad.XgradError, match='raw'):
        xgrad.grad([xgrad.sum(h)], [x])


@pytest.mark.parametrize('double', [False, True], ids=['raw', 'recorded'])
def test_qr_gradient_of_dependent_columns_is_a_linalg_error(double):
    # Every row equal: rank 1, R singular; NumPy's own LinAlgError must not
    # escape the backward pass, and the leaf keeps no gradient.
    x = xgrad.array(numpy.tile(numpy.array([[1.0, 2.0, 3.0]]), (3, 1))).require_grad()
    q, r = linalg.qr(x)
    with pytest.raises(linalg.LinAlgError, match='qr: no gradient where R is singular'):
        xgrad.grad([q, r], [x], grad_outputs=[xgrad.ones_like(q), xgrad.ones_like(r)],
                   enable_double_backprop=double)
    assert x.grad is None


def test_lapack_is_available():
    assert linalg._is_lapack_available() is True


# ---------------------------------------------------------------------------
# Singularity decided by xgrad's rank tolerance, not by what LAPACK returns
#
# The factors are built with a chosen diagonal (or chosen eigenvalues and
# singular values) and handed to the ops' gradient formulas directly, so the
# decision is tested on exactly these values whatever the BLAS would have
# rounded them to. tol = max(M, N) * eps * max|values|: 0, 1e-17 and 1e-30
# relative are singular, 1e-10 relative is not.

from xgrad._ops import decompositions as _dec, norms as _norms  # NOQA: E402
from xgrad._ops._xp import numpy_ns, xgrad_ns  # NOQA: E402

SINGULAR, REGULAR = [0.0, 1e-17, 1e-30], [1e-10]


def _orthogonal(n, seed=0):
    return numpy.linalg.qr(_rand((n, n), seed))[0]


def _triangular(d, lower=False):
    """A 3x3 triangular factor with diagonal (2, 2d, 1): d relative to the largest."""
    t = numpy.triu(_rand((3, 3), 3), 1) + numpy.diag([2.0, 2.0 * d, 1.0])
    return t.T if lower else t


def _formula_cases(d):
    """(op, message, xs, ys, gys) per gradient formula, the factor's smallest
    value (or gap) d relative to its largest."""
    q, one = _orthogonal(3), numpy.ones((3, 3))
    r, low = _triangular(d), _triangular(d, lower=True)
    a = q @ numpy.diag([2.0, 2.0 * d, 1.0]) @ _orthogonal(3, 1).T  # s_min = d * s_max
    solve = _dec.Solve()
    solve.dtypes = (F64, F64)
    w = numpy.array([-1.0, -1.0 + d, 0.5])  # the gap of the first two: d * max|w|
    s = numpy.array([1.0, 0.5, 0.5 - d])    # the gap of the last two: d * max(s)
    tall_s = numpy.array([1.0, 0.5, d])      # a 4x3 matrix of rank 2 when d == 0
    tall_u = numpy.linalg.qr(_rand((4, 3), 4))[0]
    return [
        (_dec.Qr('reduced'), 'qr: no gradient where R is singular', (q @ r,), (q, r),
         (one, one)),
        (_dec.Cholesky(), 'cholesky: no gradient where L is singular', (low @ low.T,),
         (low,), (one,)),
        (_dec.Inv(), 'inv: no gradient where a is singular', (a,), (one,), (one,)),
        (solve, 'solve: no gradient where a is singular', (a, one), (one,), (one,)),
        (_dec.Eigh('L'), 'eigh: no gradient of the eigenvectors where eigenvalues are '
         'repeated', (one,), (w, q), (None, one)),
        (_norms.Svd(), 'svd: no gradient of the singular vectors where singular values '
         'are repeated', (one,), (q, s, q.T), (one, None, one)),
        (_norms.Svd('pinv'), 'pinv: no gradient of the singular vectors', (one,),
         (q, s, q.T), (one, None, None)),
        (_norms.Svd(), 'svd: no gradient of the singular vectors where a is rank-deficient',
         (numpy.ones((4, 3)),), (tall_u, tall_s, q.T), (numpy.ones((4, 3)), None, None)),
    ]


def _run_formula(op, xs, ys, gys, recorded):
    """op's gradient formula on raw NumPy data, or on xgrad arrays through
    the recorded namespace (as in double backprop)."""
    if recorded:
        wrap = lambda vs: tuple(None if v is None else xgrad.array(v) for v in vs)  # NOQA
        return op.grads(xgrad_ns, (0,), wrap(gys), wrap(xs), wrap(ys))
    return op.grads(numpy_ns, (0,), gys, xs, ys)


CASE_IDS = ['qr', 'cholesky', 'inv', 'solve', 'eigh', 'svd', 'pinv', 'svd-rank']


@pytest.mark.parametrize('recorded', [False, True], ids=['raw', 'recorded'])
@pytest.mark.parametrize('d', SINGULAR)
@pytest.mark.parametrize('case', range(len(CASE_IDS)), ids=CASE_IDS)
def test_a_singular_factor_is_a_linalg_error(case, d, recorded):
    op, message, xs, ys, gys = _formula_cases(d)[case]
    with pytest.raises(linalg.LinAlgError, match=message) as info:
        _run_formula(op, xs, ys, gys, recorded)
    assert 'rank tolerance' in str(info.value)


@pytest.mark.parametrize('recorded', [False, True], ids=['raw', 'recorded'])
@pytest.mark.parametrize('d', REGULAR)
@pytest.mark.parametrize('case', range(len(CASE_IDS)), ids=CASE_IDS)
def test_a_nearly_singular_factor_above_the_tolerance_has_a_gradient(case, d, recorded):
    op, _, xs, ys, gys = _formula_cases(d)[case]
    g, = _run_formula(op, xs, ys, gys, recorded)
    g = g.to_numpy() if recorded else g
    assert g.shape == xs[0].shape and numpy.isfinite(g).all()


@pytest.mark.parametrize('dtype', [numpy.float32, F64])
def test_the_tolerance_scales_with_the_dtype(dtype):
    # 1e-10 relative is singular in float32 (eps 1.2e-7), not in float64.
    r = _triangular(1e-10).astype(dtype)
    q = _orthogonal(3).astype(dtype)
    run = lambda: _dec.Qr('reduced').grads(numpy_ns, (0,), (q, r), (q @ r,), (q, r))  # NOQA
    if dtype == numpy.float32:
        with pytest.raises(linalg.LinAlgError, match='qr'):
            run()
    else:
        assert numpy.isfinite(run()[0]).all()


@pytest.mark.parametrize('name', ['qr', 'inv', 'solve', 'cholesky'])
def test_well_conditioned_gradients_match_numerical_differentiation(name):
    a = _spd(3)
    funcs = {'qr': lambda xs: linalg.qr(xs[0]), 'inv': lambda xs: (linalg.inv(xs[0]),),
             'solve': lambda xs: (linalg.solve(xs[0], xgrad.array(_rand((3,), 5))),),
             'cholesky': lambda xs: (linalg.cholesky((xs[0] + xs[0].T) * 0.5),)}
    outs = funcs[name]([xgrad.array(a)])
    gys = [xgrad.array(_rand(y.shape, 6)) for y in outs]
    xgrad.check_backward(funcs[name], [xgrad.array(a).require_grad()], gys, eps=1e-6,
                         atol=1e-6, rtol=1e-5)


# -- forward comparisons up to the signs a LAPACK chooses ---------------------------

from xgrad._ops.registry import op_info  # NOQA: E402


def _flip(a, flips, axis):
    """``a`` with the vectors along ``axis`` (-2: columns, -1: rows) negated where
    ``flips`` is -1."""
    return a * (flips[None, :] if axis == -2 else flips[:, None])


@pytest.mark.parametrize('shape, full', [((3, 3), True), ((4, 2), True), ((2, 4), False)])
def test_svd_compares_up_to_paired_signs(shape, full):
    # cuSOLVER turns singular vectors differently from LAPACK (H200, 2026-12-04)
    info = op_info('linalg.svd')
    a = _rand(shape, 7)
    u, s, vh = numpy.linalg.svd(a, full_matrices=full)
    fu = numpy.where(numpy.arange(u.shape[-1]) % 2 == 0, -1.0, 1.0)
    fv = numpy.where(numpy.arange(vh.shape[-2]) % 2 == 0, -1.0, 1.0)
    turned = [xgrad.array(_flip(u, fu, -2)), xgrad.array(s), xgrad.array(_flip(vh, fv, -1))]
    info.assert_forward_matches(turned, [u, s, vh])
    # only u's first column turned: u s vh changes, which must fail
    fu[1:] = 1.0
    wrong = [xgrad.array(_flip(u, fu, -2)), xgrad.array(s), xgrad.array(vh)]
    with pytest.raises(AssertionError):
        info.assert_forward_matches(wrong, [u, s, vh])


def test_eigh_compares_up_to_signs():
    info = op_info('linalg.eigh')
    w, v = numpy.linalg.eigh(_spd(3))
    flips = numpy.array([-1.0, 1.0, -1.0])
    info.assert_forward_matches([xgrad.array(w), xgrad.array(_flip(v, flips, -2))], [w, v])
    swapped = v[:, [1, 0, 2]]  # another basis, not a sign: must fail
    with pytest.raises(AssertionError):
        info.assert_forward_matches([xgrad.array(w), xgrad.array(swapped)], [w, v])
