"""NaN and inf in xgrad.linalg (docs/api.md, "Singular factors in gradients").

The rule: a gradient never raises for non-finite data. A factor holding NaN
or inf is never called singular, no SVD is taken of a matrix with NaN or inf
entries, and a solve or inverse that LAPACK refuses on such a matrix inside
a gradient gives NaN; the gradient comes out of the same formula, carrying
NaN and inf on as the forward did (PyTorch's rule), and
``xgrad.detect_anomaly()`` stops there naming the op.

The forwards are NumPy's, checked against NumPy on the same data (so on
any LAPACK build: NumPy's cholesky of a NaN pivot, for one, gives NaN with
OpenBLAS and raises with reference LAPACK), but for the SVDs (svd, pinv,
the norms 2, -2 and 'nuc'), whose rule is xgrad's own and checked as such:
LinAlgError('SVD did not converge') for a NaN, NaN factors for an inf
(NumPy's SVD returns NaN singular values there, or never returns).

Every differentiable op of xgrad.linalg is called with one NaN, +inf or
-inf in one element of one input, in float32 and float64; first-order and
second-order gradients are taken, and the first-order pass again under
``detect_anomaly()``. ``check_case`` is shared with
tests/backend/cuda/test_linalg_nonfinite_gpu.py, which runs the same cases on cuda:0
(the CPU stand-in for CuPy, and a real GPU when there is one).
"""

import re
import subprocess
import sys

import numpy
import pytest

import xgrad
from xgrad import linalg
from xgrad._ops import _lapack, _singular
from xgrad._ops import decompositions as _dec
from xgrad._ops import norms as _norms
from xgrad._ops._xp import numpy_ns, xgrad_ns

# NumPy warns of the NaN its matmul and divide make from inf in the gradients
pytestmark = pytest.mark.filterwarnings('ignore:invalid value encountered:RuntimeWarning')

NAN, INF = float('nan'), float('inf')
VALUES = [('nan', NAN), ('inf', INF), ('-inf', -INF)]
DTYPES = [numpy.float32, numpy.float64]


# ---------------------------------------------------------------------------
# The cases

def _general(rs, shape):
    """Well conditioned: uniform(-1, 1) plus max(m, n) on the diagonal."""
    return rs.uniform(-1, 1, shape) + max(shape) * numpy.eye(*shape)


def _spd(rs, shape):
    """Symmetric positive definite, eigenvalues 1, 2, ..., n."""
    n = shape[0]
    q, _ = numpy.linalg.qr(rs.normal(size=(n, n)))
    return q @ numpy.diag(numpy.arange(1.0, n + 1)) @ q.T


def _vector(rs, shape):
    """Magnitudes in [0.5, 1.5], random signs."""
    return rs.uniform(0.5, 1.5, shape) * rs.choice([-1.0, 1.0], shape)


def _lower(i, position):
    return position[0] >= position[1]


def _upper(i, position):
    return position[0] <= position[1]


def _numpy_outputs(func):
    """A NumPy reference returning a tuple of arrays."""
    def ref(*xs):
        out = func(*xs)
        return tuple(out) if isinstance(out, tuple) else (out,)
    return ref


class Case:
    """One call of a linalg op.

    ``call(*xs)``: the xgrad call; ``shapes`` and ``make``: its inputs;
    ``ref``: NumPy's call on the same data (None for the SVDs, whose rule
    is xgrad's: see the module docstring); ``reads(i, position)``: whether
    the op reads that element of input i (cholesky and eigh read one
    triangle); ``op``: the op that detect_anomaly() blames (None where
    the call is composed of several); ``finite_grads``: the inputs whose
    gradient does not depend on the non-finite entry (solve's b: gb =
    a^-T gx)."""

    def __init__(self, name, call, shapes, ref=None, make=None, reads=None, op=None,
                 finite_grads=()):
        self.name, self.call, self.shapes, self.ref = name, call, shapes, ref
        self.make = make or [_general] * len(shapes)
        self.reads = reads or (lambda i, position: True)
        self.op, self.finite_grads = op, finite_grads

    @property
    def svd(self):
        return self.ref is None

    def data(self, dtype):
        rs = numpy.random.RandomState(sum(map(ord, self.name)))
        return [make(rs, shape).astype(dtype) for make, shape in zip(self.make, self.shapes)]

    def positions(self, i):
        """The elements of input i that take the non-finite value, one at a
        time: a diagonal one, one below and one above the diagonal."""
        shape = self.shapes[i]
        if len(shape) == 1:
            return [(1,)]
        return [(0, 0), (1, 0), (0, 1)]


def _norm_case(name, shape, ord, op=None, axis=None):
    svd = len(shape) == 2 and ord in (2, -2, 'nuc')
    return Case('norm-' + name, lambda x: linalg.norm(x, ord, axis), [shape],
                ref=None if svd else _numpy_outputs(lambda x: numpy.linalg.norm(x, ord, axis)),
                make=[_vector if len(shape) == 1 else _general], op='svd' if svd else op)


CASES = [
    Case('inv', linalg.inv, [(3, 3)], _numpy_outputs(numpy.linalg.inv), op='inv'),
    Case('solve-vector', linalg.solve, [(3, 3), (3,)], _numpy_outputs(numpy.linalg.solve),
         make=[_general, _vector], op='solve', finite_grads=(1,)),
    Case('solve-matrix', linalg.solve, [(3, 3), (3, 2)], _numpy_outputs(numpy.linalg.solve),
         make=[_general, _vector], op='solve', finite_grads=(1,)),
    Case('pinv-tall', linalg.pinv, [(3, 2)]),
    Case('pinv-square', linalg.pinv, [(3, 3)]),
    Case('cholesky', linalg.cholesky, [(3, 3)], _numpy_outputs(numpy.linalg.cholesky),
         make=[_spd], reads=_lower, op='cholesky'),
    Case('qr-reduced', linalg.qr, [(3, 3)], _numpy_outputs(numpy.linalg.qr), op='qr'),
    Case('qr-tall', linalg.qr, [(4, 2)], _numpy_outputs(numpy.linalg.qr), op='qr'),
    Case('qr-complete', lambda a: linalg.qr(a, 'complete'), [(3, 3)],
         _numpy_outputs(lambda a: numpy.linalg.qr(a, 'complete')), op='qr'),
    Case('qr-r', lambda a: linalg.qr(a, 'r'), [(3, 2)],
         _numpy_outputs(lambda a: numpy.linalg.qr(a, 'r')), op='qr'),
    Case('svd', linalg.svd, [(3, 3)], op='svd'),
    Case('svd-reduced', lambda a: linalg.svd(a, full_matrices=False), [(3, 2)], op='svd'),
    Case('svd-full-wide', linalg.svd, [(2, 3)], op='svd'),
    Case('svd-values', lambda a: linalg.svd(a, compute_uv=False), [(3, 2)], op='svd'),
    Case('eigh', linalg.eigh, [(3, 3)], _numpy_outputs(numpy.linalg.eigh), make=[_spd],
         reads=_lower, op='eigh'),
    Case('eigh-upper', lambda a: linalg.eigh(a, 'U'), [(3, 3)],
         _numpy_outputs(lambda a: numpy.linalg.eigh(a, 'U')), make=[_spd], reads=_upper,
         op='eigh'),
    Case('eigvalsh', linalg.eigvalsh, [(3, 3)], _numpy_outputs(numpy.linalg.eigvalsh),
         make=[_spd], reads=_lower, op='eigh'),
    _norm_case('fro', (2, 3), None, op='norm'),
    _norm_case('1', (2, 3), 1),
    _norm_case('inf', (3, 2), INF),
    _norm_case('2', (2, 3), 2),
    _norm_case('-2', (3, 2), -2),
    _norm_case('nuc', (2, 3), 'nuc'),
    _norm_case('vector-2', (4,), 2, op='norm'),
    _norm_case('vector-1', (4,), 1),
    _norm_case('vector-inf', (4,), INF),
    _norm_case('vector--inf', (4,), -INF),
    _norm_case('vector-3', (4,), 3),
]


def case_params():
    """(case, input index, position, value) for every case."""
    params = []
    for case in CASES:
        for i in range(len(case.shapes)):
            for position in case.positions(i):
                for vname, value in VALUES:
                    params.append(pytest.param(
                        case, i, position, value, id='{}-x{}{}-{}'.format(
                            case.name, i, ''.join(map(str, position)), vname)))
    return params


# ---------------------------------------------------------------------------
# The check

def _outputs(y):
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


def _finite(a):
    return bool(numpy.isfinite(a.to_numpy()).all())


def _all_nan(a):
    return bool(numpy.isnan(a.to_numpy()).all())


def _tolerance(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == numpy.float32 else dict(rtol=1e-12,
                                                                          atol=1e-13)


def _first_order(xs, ys, **kwargs):
    gys = [xgrad.ones_like(y) for y in ys]
    grads = xgrad.grad(list(ys), xs, grad_outputs=gys, **kwargs)
    assert len(grads) == len(xs)
    for g, x in zip(grads, xs):
        assert g is not None and g.shape == x.shape and g.dtype == x.dtype
        assert g.device == x.device
    return grads


def _forward(case, data, device):
    xs = [xgrad.array(d, device=device).require_grad() for d in data]
    return xs, _outputs(case.call(*xs))


def check_case(case, i, position, value, dtype, device='native:0', like_numpy=True):
    """The checks of the module docstring for one case; ``like_numpy``:
    the device computes as NumPy does (the host, the CPU stand-in for CuPy),
    so that the forward's outcome and values are compared with NumPy's
    (a real GPU's cuSOLVER neither raises nor gives LAPACK's numbers)."""
    data = case.data(dtype)
    data[i][position] = value
    nan = value != value
    on_host = device == 'native:0'

    # The forward: NumPy's outcome, or for the SVDs xgrad's rule.
    if case.svd:
        if nan and on_host:
            with pytest.raises(linalg.LinAlgError, match='SVD did not converge'):
                _forward(case, data, device)
            return
        xs, ys = _forward(case, data, device)
        for y in ys:
            assert _all_nan(y), (case.name, y)
    else:
        with numpy.errstate(all='ignore'):
            try:
                expected = case.ref(*data)
            except numpy.linalg.LinAlgError:
                expected = None
        if expected is None and like_numpy:
            with pytest.raises(linalg.LinAlgError):
                _forward(case, data, device)
            return
        try:
            xs, ys = _forward(case, data, device)
        except linalg.LinAlgError:
            assert not like_numpy  # (a real GPU may refuse where LAPACK did not, or not)
            return
        assert len(ys) == len(expected)
        for y, e in zip(ys, expected):
            e = numpy.asarray(e).astype(y.dtype)
            assert y.shape == e.shape and y.device == xs[0].device
            if like_numpy:
                numpy.testing.assert_allclose(y.to_numpy(), e, equal_nan=True,
                                              **_tolerance(dtype))
        if nan and not case.reads(i, position):
            assert all(_finite(y) for y in ys)  # the NaN is in the triangle never read

    # First order, raw (as backward computes it) and recorded (for double
    # backprop): no error, every input's gradient, of its shape and dtype.
    raw = _first_order(xs, ys)
    xs, ys = _forward(case, data, device)
    grads = _first_order(xs, ys, enable_double_backprop=True)
    for gs in (raw, grads):
        if case.svd:
            for g in gs:  # NaN factors: NaN everywhere
                assert _all_nan(g), (case.name, g)
        elif nan and case.reads(i, position):
            # NaN in, NaN out: the gradient of the input that holds it (of a
            # for solve, whose gb = a^-T gx does not depend on b) is not all
            # finite
            for j, g in enumerate(gs):
                if j in case.finite_grads and j != i:
                    continue
                if j in case.finite_grads:
                    assert _finite(g), (case.name, j, g)
                else:
                    assert not _finite(g), (case.name, j, g)
        elif nan:
            assert all(_finite(g) for g in gs)

    # Second order, through the recorded gradient (none for the norms 1 and
    # inf, whose gradients are piecewise constant).
    total = None
    for g in grads:
        if g.is_backprop_required():
            total = xgrad.sum(g) if total is None else total + xgrad.sum(g)
    if total is not None:
        grads2 = xgrad.grad([total], xs)
        for g2, x in zip(grads2, xs):
            assert g2 is None or (g2.shape == x.shape and g2.dtype == x.dtype)

    # detect_anomaly() stops where the gradient is not finite, naming the op.
    nonfinite = not all(_finite(g) for g in raw)
    with xgrad.detect_anomaly():
        xs, ys = _forward(case, data, device)
        gys = [xgrad.ones_like(y) for y in ys]
        if nonfinite:
            with pytest.raises(xgrad.AnomalyError) as info:
                xgrad.grad(list(ys), xs, grad_outputs=gys)
            found = re.search(r'of op (\S+) on backprop ID .* is (NaN|inf) although every '
                              r'output gradient is finite', str(info.value))
            assert found, str(info.value)
            if case.op is not None:
                assert found.group(1) == case.op, str(info.value)
        elif case.op is not None:  # one op: nothing to stop at
            xgrad.grad(list(ys), xs, grad_outputs=gys)


@pytest.mark.parametrize('dtype', DTYPES, ids=['f32', 'f64'])
@pytest.mark.parametrize('case, i, position, value', case_params())
def test_non_finite_input(case, i, position, value, dtype):
    check_case(case, i, position, value, dtype)


def test_every_differentiable_linalg_op_has_a_case():
    names = {info.name for info in xgrad.registered_ops()
             if info.name.startswith('linalg.') and info.differentiable}
    covered = {'linalg.' + c.name.split('-')[0] for c in CASES}
    assert names == covered


# ---------------------------------------------------------------------------
# The example, and the cases that raised before

def test_the_solve_of_a_nan_matrix_has_nan_gradients():
    rs = numpy.random.RandomState(0)
    a = rs.rand(3, 3)
    a[0, 1] = NAN
    ax = xgrad.array(a).require_grad()
    bx = xgrad.array(rs.rand(3, 2)).require_grad()
    xgrad.backward(linalg.solve(ax, bx).sum())  # was LinAlgError: svd: SVD did not converge
    assert ax.grad.shape == (3, 3) and numpy.isnan(ax.grad.to_numpy()).any()
    # gb = a^-T 1 does not depend on b, a is NaN: NaN too
    assert bx.grad.shape == (3, 2) and numpy.isnan(bx.grad.to_numpy()).any()


@pytest.mark.parametrize('recorded', [False, True], ids=['raw', 'recorded'])
def test_a_solve_that_lapack_refuses_inside_the_gradient_gives_nan(recorded):
    """solve of a = [[1, inf], [0, 1]] gives NaN (the LU's pivot is 1); its
    gradient solves with a^T = [[1, 0], [inf, 1]], whose LU pivots on inf
    and meets an exact zero: LinAlgError from the gradient before."""
    a = numpy.array([[1.0, INF], [0.0, 1.0]])
    with numpy.errstate(all='ignore'):
        assert numpy.isnan(numpy.linalg.solve(a, numpy.ones(2))).all()
    with pytest.raises(numpy.linalg.LinAlgError):
        numpy.linalg.solve(a.T, numpy.ones(2))
    ns = xgrad_ns if recorded else numpy_ns
    wrap = xgrad.array if recorded else numpy.asarray
    gb = _dec._solve(ns, wrap(a.T), wrap(numpy.ones(2)), 'solve: no gradient')
    assert numpy.isnan(gb.to_numpy() if recorded else gb).all()
    # A finite singular matrix still raises, with the gradient's reason.
    with pytest.raises(linalg.LinAlgError, match='^solve: no gradient'):
        _dec._solve(ns, wrap(numpy.ones((2, 2))), wrap(numpy.ones(2)), 'solve: no gradient')
    with pytest.raises(linalg.LinAlgError, match='^cholesky: no gradient'):
        _dec._inv(ns, wrap(numpy.zeros((2, 2))), 'cholesky: no gradient')


def _factors(value):
    """(op, xs, ys, gys) per gradient formula, a factor holding ``value``
    on its diagonal (or among its values): each called singular before
    when ``value`` is inf (the tolerance was inf)."""
    q = numpy.linalg.qr(numpy.random.RandomState(0).normal(size=(3, 3)))[0]
    one = numpy.ones((3, 3))
    r = numpy.triu(numpy.ones((3, 3))) + numpy.diag([value, 1.0, 2.0])
    low = r.T.copy()
    a = one + numpy.diag([value, 1.0, 2.0])
    w = numpy.array([-1.0, 0.5, value])
    s = numpy.array([value, 1.0, 0.5])
    tall_u = numpy.linalg.qr(numpy.random.RandomState(1).normal(size=(4, 3)))[0]
    solve = _dec.Solve()
    solve.dtypes = (numpy.float64, numpy.float64)
    pinv = _dec.Pinv(q, s, q.T)
    pinv.dtype = numpy.float64
    return [
        ('qr', _dec.Qr('reduced'), (q @ r,), (q, r), (one, one)),
        ('cholesky', _dec.Cholesky(), (low @ low.T,), (low,), (one,)),
        ('inv', _dec.Inv(), (a,), (a,), (one,)),
        ('solve', solve, (a, one), (one,), (one,)),
        ('eigh', _dec.Eigh('L'), (one,), (w, q), (None, one)),
        ('svd', _norms.Svd(), (one,), (q, s, q.T), (one, None, one)),
        ('svd-tall', _norms.Svd(), (numpy.ones((4, 3)),), (tall_u, s, q.T),
         (numpy.ones((4, 3)), None, None)),
        ('pinv', pinv, (one,), (a,), (one,)),
    ]


FORMULAS = ['qr', 'cholesky', 'inv', 'solve', 'eigh', 'svd', 'svd-tall', 'pinv']


@pytest.mark.parametrize('recorded', [False, True], ids=['raw', 'recorded'])
@pytest.mark.parametrize('vname, value', VALUES, ids=[v for v, _ in VALUES])
@pytest.mark.parametrize('k', range(len(FORMULAS)), ids=FORMULAS)
def test_a_formula_takes_non_finite_factors(k, vname, value, recorded):
    """Each gradient formula on factors with a NaN or inf (what the forward
    of a non-finite input leaves, on the host or a GPU): no LinAlgError
    (an inf made the tolerance inf, and every value singular), and a NaN
    reaches the gradient."""
    name, op, xs, ys, gys = _factors(value)[k]
    with numpy.errstate(all='ignore'):
        if recorded:
            wrap = lambda vs: tuple(None if v is None else xgrad.array(v) for v in vs)  # NOQA
            g, = op.grads(xgrad_ns, (0,), wrap(gys), wrap(xs), wrap(ys))
            g = g.to_numpy()
        else:
            g, = op.grads(numpy_ns, (0,), gys, xs, ys)
    assert g.shape == xs[0].shape
    if value != value:
        assert not numpy.isfinite(g).all(), (name, g)


# ---------------------------------------------------------------------------
# The checks themselves

def _decides(check, values, size=3):
    try:
        check(values, size, 'singular')
    except linalg.LinAlgError as e:
        return str(e)
    return None


CHECKS = [_singular.require_nonzero, _singular.require_distinct]


@pytest.mark.parametrize('array_path', [False, True], ids=['small', 'array'])
@pytest.mark.parametrize('check', CHECKS, ids=['nonzero', 'distinct'])
@pytest.mark.parametrize('values', [
    [INF, 1.0, 0.0], [-INF, 0.0, 0.0], [INF, INF, 1.0], [1.0, 1.0, INF], [0.0, NAN],
    [NAN, 1.0, 1.0], [INF, -INF], [NAN, INF, 0.0]])
def test_a_non_finite_value_decides_nothing(monkeypatch, check, values, array_path):
    if array_path:
        monkeypatch.setattr(_singular, '_SMALL', -1)
    for dtype in DTYPES:
        with numpy.errstate(all='ignore'):
            assert _decides(check, numpy.array(values, dtype)) is None


@pytest.mark.parametrize('check', CHECKS, ids=['nonzero', 'distinct'])
def test_a_finite_singular_matrix_beside_a_non_finite_one_still_raises(check):
    """Per matrix: the non-finite one decides nothing, the other does."""
    values = numpy.array([[INF, 1.0, 1.0], [1.0, 1.0, 0.0], [NAN, 0.0, 0.0]])
    message = _decides(check, values)
    assert message is not None and 'nan' not in message and 'inf' not in message
    assert _decides(check, values[[0, 2]]) is None


# ---------------------------------------------------------------------------
# The SVD never sees an inf

def test_svd_of_a_matrix_with_an_inf_returns_nan_factors_without_lapack():
    """OpenBLAS 0.3.31's gesdd never returns on this matrix (NumPy's svd
    hangs; in a child process, so that a regression fails rather than
    hangs). Its factors are NaN, in float32 and float64."""
    code = '''if 1:
        import numpy
        from xgrad._ops import _lapack
        a = numpy.random.RandomState(0).uniform(-1, 1, (3, 3)) + 3 * numpy.eye(3)
        a[1, 0] = numpy.inf
        for dtype in (numpy.float32, numpy.float64):
            for out in (_lapack.svd('svd', a.astype(dtype)),
                        _lapack.svd('svd', a.astype(dtype), full_matrices=False),
                        (_lapack.svd('svd', a.astype(dtype), compute_uv=False),)):
                for f in out:
                    assert f.dtype == dtype and numpy.isnan(f).all(), f
        print('ok')
    '''
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == 'ok', done.stderr
    assert 'DLASCL' not in done.stdout + done.stderr  # LAPACK never called on it


def test_a_stack_of_matrices_is_decided_per_matrix():
    """norm over a stack: the matrix with an inf has a NaN norm and NaN
    gradient, the others NumPy's norm and a finite gradient; a NaN anywhere
    raises, as NumPy's svd does for the whole stack."""
    x = numpy.random.RandomState(2).uniform(-1, 1, (3, 3, 2)) + numpy.eye(3, 2)
    x[0, 1, 0] = INF
    xx = xgrad.array(x).require_grad()
    y = linalg.norm(xx, 2, axis=(1, 2))
    assert numpy.isnan(y.to_numpy()[0])
    numpy.testing.assert_allclose(y.to_numpy()[1:], numpy.linalg.norm(x[1:], 2, axis=(1, 2)),
                                  rtol=1e-12)
    g, = xgrad.grad([y], [xx], grad_outputs=[xgrad.ones_like(y)])
    assert numpy.isnan(g.to_numpy()[0]).all() and numpy.isfinite(g.to_numpy()[1:]).all()
    x[1, 0, 0] = NAN
    with pytest.raises(linalg.LinAlgError, match='SVD did not converge'):
        linalg.norm(xgrad.array(x), 2, axis=(1, 2))
    with pytest.raises(linalg.LinAlgError, match='^svd: SVD did not converge$'):
        _lapack.svd('svd', x)
