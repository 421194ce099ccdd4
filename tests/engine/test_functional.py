"""xgrad.functional: closed forms, result layouts, nesting (with itself and
with the user's graphs), and bad input (the right error, nothing changed).
The numerical checks over the op registry are in test_functional_registry.py."""

import gc

import numpy
import pytest

import xgrad
from xgrad import functional as F


def _a(values, dtype='float64'):
    return xgrad.array(numpy.asarray(values, dtype=dtype))


def _np(a):
    return a.to_numpy()


def _eq(a, expected):
    numpy.testing.assert_allclose(_np(a), expected, rtol=1e-12, atol=1e-12)


X = [0.5, -1.0, 2.0]


# ---------------------------------------------------------------------------
# Closed forms

def test_vjp_closed_form():
    x = _a(X)
    out, vjp_fn = F.vjp(lambda x: x * x * x, x)
    _eq(out, numpy.array(X) ** 3)
    gx, = vjp_fn(_a([1.0, 2.0, 3.0]))
    _eq(gx, 3 * numpy.array(X) ** 2 * [1, 2, 3])
    gx2, = vjp_fn(_a([1.0, 1.0, 1.0]))  # the graph is kept for another call
    _eq(gx2, 3 * numpy.array(X) ** 2)


def test_vjp_several_primals_and_outputs():
    x, y = _a(X), _a([1.0, 2.0, 3.0])
    outs, vjp_fn = F.vjp(lambda a, b: (a * b, xgrad.sum(a)), x, y)
    assert isinstance(outs, tuple) and len(outs) == 2
    gx, gy = vjp_fn((_a([1.0, 1.0, 1.0]), _a(2.0)))
    _eq(gx, numpy.array([1.0, 2.0, 3.0]) + 2)
    _eq(gy, X)
    gx, gy = vjp_fn((None, _a(1.0)))  # an output left out
    _eq(gx, [1, 1, 1])
    _eq(gy, [0, 0, 0])  # no path: zeros, not None


def test_vjp_fn_retain_graph_false_frees_and_then_refuses():
    x = _a(X)
    _, vjp_fn = F.vjp(lambda x: xgrad.exp(x), x)
    g, = vjp_fn(_a([1.0, 1.0, 1.0]), retain_graph=False)
    _eq(g, numpy.exp(X))
    with pytest.raises(xgrad.GradientError, match='retain_graph=False'):
        vjp_fn(_a([1.0, 1.0, 1.0]))


def test_jvp_closed_form():
    x = _a(X)
    out, jv = F.jvp(lambda x: xgrad.sin(x) * x, (x,), (_a([1.0, 0.0, 2.0]),))
    xs = numpy.array(X)
    _eq(out, numpy.sin(xs) * xs)
    _eq(jv, (numpy.cos(xs) * xs + numpy.sin(xs)) * [1, 0, 2])


def test_jvp_single_arrays_and_tuple_outputs():
    x, y = _a(X), _a([1.0, 2.0, 3.0])
    out, jv = F.jvp(lambda a: a * 2, x, _a([1.0, 1.0, 1.0]))  # single arrays
    _eq(jv, [2, 2, 2])
    outs, jvs = F.jvp(lambda a, b: (a * b, xgrad.sum(b)), (x, y),
                      (_a([1.0, 0.0, 0.0]), _a([0.0, 1.0, 0.0])))
    _eq(jvs[0], [1.0, X[1], 0.0])
    _eq(jvs[1], 1.0)


def test_jvp_of_a_linear_function_and_of_a_constant():
    x = _a(X)
    _, jv = F.jvp(lambda x: -x, (x,), (_a([1.0, 2.0, 3.0]),))
    _eq(jv, [-1, -2, -3])
    _, jv = F.jvp(lambda x: x, (x,), (_a([1.0, 2.0, 3.0]),))  # identity
    _eq(jv, [1, 2, 3])
    _, jv = F.jvp(lambda x: xgrad.ones((2,), 'float64'), (x,), (_a([1.0, 2.0, 3.0]),))
    _eq(jv, [0, 0])


def test_jvp_non_float_output_is_none():
    x = _a(X)
    (y, i), (jy, ji) = F.jvp(lambda x: (x * 3, xgrad.argmax(x)), (x,), (_a([1.0, 1, 1]),))
    _eq(jy, [3, 3, 3])
    assert ji is None and int(i) == 2


def test_jacobian_layouts():
    x, y = _a(X), _a([[1.0, 2.0], [3.0, 4.0]])
    j = F.jacobian(lambda a: a * a, x)
    _eq(j, numpy.diag(2 * numpy.array(X)))
    j = F.jacobian(lambda a, b: xgrad.sum(a) * b, x, y)
    assert isinstance(j, tuple) and j[0].shape == (2, 2, 3) and j[1].shape == (2, 2, 2, 2)
    _eq(j[0], numpy.broadcast_to(numpy.array([[1.0, 2.0], [3.0, 4.0]])[:, :, None],
                                 (2, 2, 3)))
    _eq(j[1], sum(X) * numpy.eye(4).reshape(2, 2, 2, 2))
    j = F.jacobian(lambda a: (a, xgrad.sum(a)), x)
    assert isinstance(j, tuple) and j[0].shape == (3, 3) and j[1].shape == (3,)
    j = F.jacobian(lambda a, b: (a, xgrad.sum(b)), x, y)
    assert [[e.shape for e in row] for row in j] == [[(3, 3), (3, 2, 2)], [(3,), (2, 2)]]
    _eq(j[0][1], numpy.zeros((3, 2, 2)))  # no path: zeros


def test_jacobian_of_zero_size_output():
    x = _a(X)
    j = F.jacobian(lambda a: a[:0], x)
    assert j.shape == (0, 3)


def test_jacobian_of_an_mlp_matches_the_closed_form():
    rs = numpy.random.RandomState(0)
    W1, W2 = rs.randn(4, 5), rs.randn(5, 2)
    x = rs.randn(4)
    h = numpy.tanh(x @ W1)
    expected = ((W1 * (1 - h * h)) @ W2).T  # d(tanh(x W1) W2)/dx, shape (2, 4)
    j = F.jacobian(lambda x: xgrad.tanh(x @ _a(W1)) @ _a(W2), _a(x))
    numpy.testing.assert_allclose(_np(j), expected, rtol=1e-12)


def test_hessian_closed_form_and_layout():
    x = _a(X)
    h = F.hessian(lambda x: xgrad.sum(x ** 3), x)
    _eq(h, numpy.diag(6 * numpy.array(X)))
    y = _a([1.0, 2.0, 3.0])
    h = F.hessian(lambda a, b: xgrad.sum(a * a * b), x, y)
    _eq(h[0][0], numpy.diag([2.0, 4.0, 6.0]))
    _eq(h[0][1], numpy.diag(2 * numpy.array(X)))
    _eq(h[1][0], numpy.diag(2 * numpy.array(X)))
    _eq(h[1][1], numpy.zeros((3, 3)))
    # a vector output: y.shape + x.shape + x.shape
    h = F.hessian(lambda a: a * a, x)
    assert h.shape == (3, 3, 3)
    expected = numpy.zeros((3, 3, 3))
    for i in range(3):
        expected[i, i, i] = 2
    _eq(h, expected)


def test_hessian_of_quadratic_form():
    rs = numpy.random.RandomState(1)
    A = rs.randn(4, 4)
    h = F.hessian(lambda x: xgrad.sum(x * (_a(A) @ x)), _a(rs.randn(4)))
    _eq(h, A + A.T)


def test_hvp_closed_form():
    rs = numpy.random.RandomState(2)
    A = rs.randn(3, 3)
    v = rs.randn(3)
    x = _a(rs.randn(3))
    out, hv = F.hvp(lambda x: xgrad.sum(x * (_a(A) @ x)), x, _a(v))
    _eq(hv, (A + A.T) @ v)
    out, (h1, h2) = F.hvp(lambda a, b: xgrad.sum(a * a * b), (x, _a(X)),
                          (_a([1.0, 0, 0]), _a([0.0, 1, 0])))
    xs = _np(x)
    _eq(h1, [2 * X[0], 2 * xs[1], 0])
    _eq(h2, [2 * xs[0], 0, 0])


def test_float32():
    x = _a(X, 'float32')
    j = F.jacobian(lambda a: a * a, x)
    assert j.dtype == numpy.float32
    _, jv = F.jvp(lambda a: a * a, (x,), (xgrad.ones((3,), 'float32'),))
    assert jv.dtype == numpy.float32
    numpy.testing.assert_allclose(_np(jv), 2 * numpy.array(X), rtol=1e-6)


# ---------------------------------------------------------------------------
# Nesting and the user's graphs

def test_jacobian_of_a_function_that_calls_vjp():
    x = _a(X)

    def gradient(z):
        _, vjp_fn = F.vjp(lambda u: xgrad.sum(u ** 3), z)
        return vjp_fn(_a(1.0))[0]  # 3 z^2

    _eq(F.jacobian(gradient, x), numpy.diag(6 * numpy.array(X)))


def test_jvp_of_jacobian_and_hessian_of_jacobian():
    x = _a(X)
    _, jv = F.jvp(lambda z: F.jacobian(lambda u: xgrad.sum(u ** 3), z), (x,),
                  (_a([1.0, 1.0, 1.0]),))
    _eq(jv, 6 * numpy.array(X))
    h3 = F.hessian(lambda z: F.jacobian(lambda u: xgrad.sum(u ** 4), z), x)
    expected = numpy.zeros((3, 3, 3))
    for i in range(3):
        expected[i, i, i] = 24 * X[i]
    _eq(h3, expected)


def test_inside_the_users_backprop_scope():
    with xgrad.backprop_scope('mine') as bp:
        w = _a([1.0, 2.0]).require_grad(bp)
        j = F.jacobian(lambda w: w ** 3, w)  # diag 3 w^2, on the user's graph
        assert j.is_backprop_required(bp)
        xgrad.backward(xgrad.sum(j), bp)
        _eq(w.get_grad(bp), [6.0, 12.0])


def test_results_are_differentiable_on_the_default_graph():
    w = _a([1.0, 2.0]).require_grad()
    out, hv = F.hvp(lambda w: xgrad.sum(w ** 4), w, _a([1.0, 1.0]))
    assert w.grad is None  # the transform wrote no gradient
    xgrad.sum(hv).backward()  # hv = 12 w^2
    _eq(w.grad, [24.0, 48.0])
    w.cleargrad()
    _, jv = F.jvp(lambda w: w * w, (w,), (_a([1.0, 1.0]),))  # 2w
    xgrad.sum(jv * jv).backward()  # d sum 4w^2 = 8w
    _eq(w.grad, [8.0, 16.0])
    w.cleargrad()
    _, vjp_fn = F.vjp(lambda w: xgrad.exp(w), w)
    g, = vjp_fn(_a([1.0, 1.0]))
    xgrad.sum(g).backward()
    _eq(w.grad, numpy.exp([1.0, 2.0]))


def test_results_carry_no_private_graph():
    x = _a(X).require_grad()
    ids_before = x._backprop_ids()
    results = [F.jacobian(lambda a: a * a, x), F.hessian(lambda a: xgrad.sum(a ** 3), x),
               F.hvp(lambda a: xgrad.sum(a ** 3), x, _a(X))[1],
               F.jvp(lambda a: a * a, (x,), (_a(X),))[1], F.vjp(lambda a: a * a, x)[0]]
    for r in results:
        assert [repr(b) for b in r._backprop_ids()] == ['<default>'], r._backprop_ids()
    assert x._backprop_ids() == ids_before
    assert x.grad is None


def test_explicit_backprop_id():
    x = _a(X)
    with xgrad.backprop_scope('transform') as bp:
        j = F.jacobian(lambda a: a * a, x, backprop_id=bp)
        _eq(j, numpy.diag(2 * numpy.array(X)))
        assert not j.is_backprop_required(bp)
        _, jv = F.jvp(lambda a: a * a, (x,), (_a(X),), backprop_id=bp)
        _eq(jv, 2 * numpy.array(X) ** 2)
        x.require_grad(bp)  # still usable by the user afterwards
        assert x.get_grad(bp) is None


def test_private_ids_are_released():
    x = _a(X)
    _, vjp_fn = F.vjp(lambda a: a * a, x)
    bp = vjp_fn._graph.bp
    assert bp.name == 'functional.vjp'
    del vjp_fn
    gc.collect()
    assert bp.name == '<expired>'
    with xgrad.backprop_scope('probe') as probe:  # jacobian's own is gone too
        pass
    F.jacobian(lambda a: a * a, x)
    assert probe.name == '<expired>'


def test_works_inside_no_backprop_mode():
    x = _a(X)
    with xgrad.no_backprop_mode():
        j = F.jacobian(lambda a: a * a, x)
        _, jv = F.jvp(lambda a: a * a, (x,), (_a([1.0, 1.0, 1.0]),))
    _eq(j, numpy.diag(2 * numpy.array(X)))
    _eq(jv, 2 * numpy.array(X))


def test_no_leak():
    x = _a(X)
    F.hessian(lambda a: xgrad.sum(a ** 3), x)  # warm up
    gc.collect()
    before = xgrad._core._live_array_count()
    for _ in range(3):
        F.jacobian(lambda a: xgrad.tanh(a) * a, x)
        F.hessian(lambda a: xgrad.sum(a ** 3), x)
        F.jvp(lambda a: a * a, (x,), (_a(X),))
        F.hvp(lambda a: xgrad.sum(a ** 3), x, _a(X))
        out, fn = F.vjp(lambda a: a * a, x)
        fn(_a(X))
        del out, fn
    gc.collect()
    assert xgrad._core._live_array_count() == before


# ---------------------------------------------------------------------------
# Bad input: the right error, naming the argument; nothing changed

def _leaf():
    x = _a(X).require_grad()
    x.set_grad(_a([7.0, 8.0, 9.0]))
    return x


def _assert_unchanged(x):
    _eq(x.grad, [7.0, 8.0, 9.0])
    assert [repr(b) for b in x._backprop_ids()] == ['<default>']
    y = xgrad.sum(x * x)
    y.backward()  # the user's graph still works
    _eq(x.grad, [7.0 + 2 * X[0], 8.0 + 2 * X[1], 9.0 + 2 * X[2]])


@pytest.mark.parametrize('tangents, error, message', [
    ((), xgrad.GradientError, r'tangents has 0 entries for 1 primals'),
    ((_a(X), _a(X)), xgrad.GradientError, r'tangents has 2 entries for 1 primals'),
    ((_a([1.0, 2.0]),), xgrad.DimensionError, r'tangents\[0\] has shape \(2,\).*\(3,\)'),
    ((_a(X, 'float32'),), xgrad.DtypeError, r'tangents\[0\] has dtype float32.*float64'),
    (([1.0, 2.0, 3.0],), TypeError, r'tangents\[0\] must be an xgrad.ndarray, not list'),
    ('abc', TypeError, r'tangents must be an xgrad.ndarray or a tuple/list'),
])
def test_jvp_bad_tangents(tangents, error, message):
    x = _leaf()
    calls = []

    def f(a):
        calls.append(1)
        return a * a

    with pytest.raises(error, match=message):
        F.jvp(f, (x,), tangents)
    assert not calls  # f was not even run
    _assert_unchanged(x)


def test_hvp_bad_vector():
    x = _leaf()
    with pytest.raises(xgrad.DimensionError, match=r'hvp: v\[0\] has shape \(1,\)'):
        F.hvp(lambda a: xgrad.sum(a), x, _a([1.0]))
    with pytest.raises(xgrad.GradientError, match=r'hvp: v has 2 entries for 1 primals'):
        F.hvp(lambda a: xgrad.sum(a), (x,), (_a(X), _a(X)))
    with pytest.raises(xgrad.DimensionError, match='single-element array'):
        F.hvp(lambda a: a * a, x, _a(X))
    _assert_unchanged(x)


@pytest.mark.parametrize('transform', ['vjp', 'jvp', 'jacobian', 'hessian', 'hvp'])
@pytest.mark.parametrize('returned, message', [
    (None, r"the output of f \(bad\) must be an xgrad.ndarray or a non-empty tuple/list "
           r"of them, not a NoneType"),
    (1.5, r'the output of f \(bad\) .* not a float'),
    ((), r'the output of f \(bad\) .* not an empty tuple'),
    ('ndarray-and-list', r'the output of f \(bad\) .* its output 1 is a list'),
])
def test_f_returning_a_non_array(transform, returned, message):
    x = _leaf()

    def bad(a):
        y = a * a
        if returned == 'ndarray-and-list':
            return (y, [1.0])
        return returned

    args = {'vjp': (bad, x), 'jvp': (bad, (x,), (_a(X),)), 'jacobian': (bad, x),
            'hessian': (bad, x), 'hvp': (bad, x, _a(X))}[transform]
    gc.collect()
    live = xgrad._core._live_array_count()
    with pytest.raises(TypeError, match='{}: '.format(transform) + message):
        getattr(F, transform)(*args)
    gc.collect()
    assert xgrad._core._live_array_count() == live
    _assert_unchanged(x)


def test_bad_primals_and_f():
    with pytest.raises(TypeError, match=r'jacobian: inputs\[1\] must be an xgrad.ndarray, '
                                        r'not float'):
        F.jacobian(lambda a, b: a, _a(X), 1.0)
    with pytest.raises(xgrad.DtypeError, match=r'vjp: primals\[0\] has dtype int64'):
        F.vjp(lambda a: a, xgrad.arange(3, dtype='int64'))
    with pytest.raises(TypeError, match='f must be callable'):
        F.hessian(3, _a(X))
    with pytest.raises(TypeError, match='at least one primal'):
        F.jacobian(lambda: _a(X))
    with pytest.raises(xgrad.DtypeError, match=r'jacobian: output 0 of f .* int64'):
        F.jacobian(lambda a: xgrad.argmax(a), _a(X))
    with pytest.raises(TypeError, match='backprop_id must be an xgrad.BackpropId'):
        F.jacobian(lambda a: a, _a(X), backprop_id='mine')


def test_bad_cotangents():
    x = _leaf()
    _, vjp_fn = F.vjp(lambda a: (a * a, xgrad.argmax(a)), x)
    with pytest.raises(xgrad.GradientError, match='cotangents has 1 entries for 2 outputs'):
        vjp_fn((_a(X),))
    with pytest.raises(xgrad.DimensionError, match=r'cotangents\[0\] has shape \(2,\)'):
        vjp_fn((_a([1.0, 2.0]), None))
    with pytest.raises(xgrad.DtypeError, match='output 1 of f has dtype int64'):
        vjp_fn((_a(X), xgrad.array(1)))
    g, = vjp_fn((_a([1.0, 1.0, 1.0]), None))  # still usable after the failures
    _eq(g, 2 * numpy.array(X))
    _assert_unchanged(x)


def test_f_raising_releases_the_private_id():
    x = _leaf()
    seen = []

    def f(a):
        seen.append(a)
        raise RuntimeError('boom')

    with pytest.raises(RuntimeError, match='boom'):
        F.jacobian(f, x)
    with xgrad.backprop_scope('probe'):
        pass
    private = [b for b in seen[0]._backprop_ids() if repr(b) != '<default>']
    assert [b.name for b in private] == ['<expired>']
    _assert_unchanged(x)
