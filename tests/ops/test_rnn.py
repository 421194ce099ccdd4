"""The RNN routines beyond the registry's generated tests: the gate layouts
by closed forms, the multi-step networks against a time-major NumPy loop
written here (the registry's reference runs each sequence on its own),
variable batch sizes, bidirectional outputs, and bad input."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# rows an LSTM passes through unchanged (copied) and their gradient, 1.
# The bidirectional case is compared with a tolerance (it goes through GEMM).


def _sig(v):
    return 1 / (1 + numpy.exp(-v))


def _uniform(rs, *shapes, dtype=numpy.float64):
    return [rs.uniform(-1, 1, s).astype(dtype) for s in shapes]


def _np(arrays):
    return [a.to_numpy() for a in arrays]


# ---------------------------------------------------------------------------
# Cells

def test_lstm_closed_form_one_unit():
    # x = (a, i, f, o) = 0: tanh(0) = 0, every sigmoid 1/2.
    c, h = xgrad.lstm(xgrad.array([[1.0]]), xgrad.array([[0.0, 0.0, 0.0, 0.0]]))
    numpy.testing.assert_allclose(c.to_numpy(), [[0.5]])
    numpy.testing.assert_allclose(h.to_numpy(), [[0.5 * numpy.tanh(0.5)]])


def test_lstm_gates_are_interleaved_per_unit():
    # Two units: x = [a0, i0, f0, o0, a1, i1, f1, o1]. Unit 0 keeps its cell
    # (forget open, input closed); unit 1 takes its input (forget closed).
    big = 50.0
    x = numpy.array([[0.3, -big, big, big, 0.7, big, -big, -big]])
    c, h = xgrad.lstm(xgrad.array(numpy.array([[2.0, 5.0]])), xgrad.array(x))
    numpy.testing.assert_allclose(c.to_numpy(), [[2.0, numpy.tanh(0.7)]], atol=1e-12)
    numpy.testing.assert_allclose(h.to_numpy(), [[numpy.tanh(2.0), 0.0]], atol=1e-12)


def test_lstm_shorter_x_passes_the_rest_of_c():
    rs = numpy.random.RandomState(0)
    c, x = _uniform(rs, (4, 3), (2, 12))
    c_new, h = xgrad.lstm(xgrad.array(c), xgrad.array(x))
    assert c_new.shape == (4, 3) and h.shape == (2, 3)
    numpy.testing.assert_array_equal(c_new.to_numpy()[2:], c[2:])
    g = x.reshape(2, 3, 4)
    expected_c = numpy.tanh(g[..., 0]) * _sig(g[..., 1]) + _sig(g[..., 2]) * c[:2]
    numpy.testing.assert_allclose(c_new.to_numpy()[:2], expected_c, rtol=1e-12)
    numpy.testing.assert_allclose(h.to_numpy(), _sig(g[..., 3]) * numpy.tanh(expected_c),
                                  rtol=1e-12)


def test_lstm_gradient_of_the_passed_rows_is_identity():
    rs = numpy.random.RandomState(1)
    c, x = (xgrad.array(a).require_grad() for a in _uniform(rs, (3, 2), (1, 8)))
    c_new, _ = xgrad.lstm(c, x)
    gc, = xgrad.grad([c_new], [c], grad_outputs=[xgrad.ones_like(c_new)])
    numpy.testing.assert_array_equal(gc.to_numpy()[1:], 1.0)


def test_slstm_closed_form():
    rs = numpy.random.RandomState(2)
    c1, c2, x1, x2 = _uniform(rs, (2, 3), (2, 3), (2, 12), (2, 12))
    c, h = xgrad.slstm(*map(xgrad.array, (c1, c2, x1, x2)))
    g1, g2 = x1.reshape(2, 3, 4), x2.reshape(2, 3, 4)
    expected = (numpy.tanh(g1[..., 0]) * _sig(g1[..., 1]) + numpy.tanh(g2[..., 0])
                * _sig(g2[..., 1]) + _sig(g1[..., 2]) * c1 + _sig(g2[..., 2]) * c2)
    numpy.testing.assert_allclose(c.to_numpy(), expected, rtol=1e-12)
    numpy.testing.assert_allclose(
        h.to_numpy(), _sig(g1[..., 3] + g2[..., 3]) * numpy.tanh(expected), rtol=1e-12)


def test_tree_lstm_gates_are_blocks():
    # x = [a block | i block | o block | f1 block | f2 block], H = 2 each.
    big = 50.0
    a = [0.2, -0.4]
    x = numpy.array([a + [big, big] + [big, big] + [big, big] + [-big, -big]])
    c1, c2 = numpy.array([[1.0, 2.0]]), numpy.array([[10.0, 20.0]])
    c, h = xgrad.tree_lstm(xgrad.array(c1), xgrad.array(c2), xgrad.array(x))
    # input and f1 open, f2 closed: c = tanh(a) + c1
    expected = numpy.tanh(a) + c1
    numpy.testing.assert_allclose(c.to_numpy(), expected, atol=1e-12)
    numpy.testing.assert_allclose(h.to_numpy(), numpy.tanh(expected), atol=1e-12)


@pytest.mark.parametrize('c_shape, x_shape', [
    ((16, 20), (20, 80)),   # more rows in x than in c
    ((32, 100), (32, 150)),  # x not 4 * H wide
    ((3, 2), (3, 8, 1)),    # ranks differ
])
def test_lstm_bad_shapes_raise_dimension_error(c_shape, x_shape):
    with pytest.raises(xgrad.DimensionError, match='lstm'):
        xgrad.lstm(xgrad.zeros(c_shape), xgrad.zeros(x_shape))


@pytest.mark.parametrize('c_dtype, x_dtype', [
    ('float32', 'float16'), ('float64', 'float32'), ('int32', 'int32'), ('bool', 'bool')])
def test_lstm_bad_dtypes_raise_dtype_error(c_dtype, x_dtype):
    with pytest.raises(xgrad.DtypeError, match='lstm'):
        xgrad.lstm(xgrad.zeros((2, 3), c_dtype), xgrad.zeros((2, 12), x_dtype))


def test_tree_lstm_needs_a_child():
    with pytest.raises(TypeError, match='tree_lstm'):
        xgrad.tree_lstm(xgrad.zeros((2, 12)))


# ---------------------------------------------------------------------------
# Multi-step networks against a time-major NumPy loop

def _step(kind, x, h, c, w, b, activation):
    def lin(j, v):
        return v @ w[j].T + b[j]
    if kind == 'lstm':
        i, f = _sig(lin(0, x) + lin(4, h)), _sig(lin(1, x) + lin(5, h))
        a, o = numpy.tanh(lin(2, x) + lin(6, h)), _sig(lin(3, x) + lin(7, h))
        c = a * i + f * c
        return o * numpy.tanh(c), c
    if kind == 'gru':
        r, z = _sig(lin(0, x) + lin(3, h)), _sig(lin(1, x) + lin(4, h))
        return (1 - z) * numpy.tanh(lin(2, x) + r * lin(5, h)) + z * h, None
    v = lin(0, x) + lin(1, h)
    return (numpy.tanh(v) if activation == 'tanh' else numpy.maximum(v, 0)), None


def _numpy_n_step(kind, n_dirs, n_layers, hx, cx, ws, bs, xs, activation=None):
    """Time-major: at step t the first len(xs[t]) rows of the state move."""
    hy, cy = hx.copy(), None if cx is None else cx.copy()
    for layer in range(n_layers):
        outs = []
        for d in range(n_dirs):
            k = layer * n_dirs + d
            h, c = hx[k].copy(), None if cx is None else cx[k].copy()
            order = range(len(xs)) if d == 0 else reversed(range(len(xs)))
            ys = [None] * len(xs)
            for t in order:
                n = len(xs[t])
                h_new, c_new = _step(kind, xs[t], h[:n], None if c is None else c[:n],
                                     ws[k], bs[k], activation)
                h[:n] = h_new
                if c is not None:
                    c[:n] = c_new
                ys[t] = h_new
            hy[k] = h
            if c is not None:
                cy[k] = c
            outs.append(ys)
        xs = [numpy.concatenate(parts, axis=1) for parts in zip(*outs)]
    return hy, cy, xs


_N_WEIGHTS = {'lstm': 8, 'gru': 6, 'rnn': 2}


def _inputs(kind, n_dirs, n_layers, hidden, in_size, batches, seed=0):
    rs = numpy.random.RandomState(seed)
    n_w = _N_WEIGHTS[kind]
    hx, cx = _uniform(rs, *[(n_layers * n_dirs, batches[0], hidden)] * 2)
    xs = _uniform(rs, *[(b, in_size) for b in batches])
    ws, bs = [], []
    for layer in range(n_layers):
        for _ in range(n_dirs):
            x_in = in_size if layer == 0 else n_dirs * hidden
            ws.append(_uniform(rs, *[(hidden, x_in if j < n_w // 2 else hidden)
                                     for j in range(n_w)]))
            bs.append(_uniform(rs, *[(hidden,)] * n_w))
    return hx, (cx if kind == 'lstm' else None), ws, bs, xs


def _call(func, kind, n_layers, hx, cx, ws, bs, xs, activation=None):
    arr = xgrad.array
    args = [n_layers, arr(hx)] + ([arr(cx)] if cx is not None else [])
    args += [[list(map(arr, g)) for g in ws], [list(map(arr, g)) for g in bs],
             list(map(arr, xs))]
    out = func(*args) if activation is None else func(*args, activation)
    if cx is None:
        return out[0], None, out[1]
    return out


CASES = [
    ('n_step_lstm', 'lstm', 1, None), ('n_step_bilstm', 'lstm', 2, None),
    ('n_step_gru', 'gru', 1, None), ('n_step_bigru', 'gru', 2, None),
    ('n_step_rnn', 'rnn', 1, 'tanh'), ('n_step_rnn', 'rnn', 1, 'relu'),
    ('n_step_birnn', 'rnn', 2, 'tanh'), ('n_step_birnn', 'rnn', 2, 'relu'),
]


@pytest.mark.parametrize('name, kind, n_dirs, activation', CASES)
@pytest.mark.parametrize('n_layers, hidden, in_size, batches', [
    (1, 3, 2, (2, 2, 2)), (2, 4, 3, (4, 3, 1)), (3, 2, 5, (3, 3, 2, 1))])
def test_n_step_matches_numpy_loop(name, kind, n_dirs, activation, n_layers, hidden,
                                   in_size, batches):
    hx, cx, ws, bs, xs = _inputs(kind, n_dirs, n_layers, hidden, in_size, batches)
    hy, cy, ys = _call(getattr(xgrad, name), kind, n_layers, hx, cx, ws, bs, xs,
                       activation)
    e_hy, e_cy, e_ys = _numpy_n_step(kind, n_dirs, n_layers, hx, cx, ws, bs, xs,
                                     activation)
    assert isinstance(ys, list) and len(ys) == len(xs)
    numpy.testing.assert_allclose(hy.to_numpy(), e_hy, rtol=1e-12, atol=1e-12)
    if cy is not None:
        numpy.testing.assert_allclose(cy.to_numpy(), e_cy, rtol=1e-12, atol=1e-12)
    for y, e in zip(ys, e_ys):
        assert y.shape == (e.shape[0], n_dirs * hidden)
        numpy.testing.assert_allclose(y.to_numpy(), e, rtol=1e-12, atol=1e-12)


def test_n_step_lstm_float32_keeps_dtype():
    hx, cx, ws, bs, xs = _inputs('lstm', 1, 2, 3, 2, (2, 1))
    f32 = [numpy.float32]
    hy, cy, ys = _call(xgrad.n_step_lstm, 'lstm', 2, hx.astype(*f32), cx.astype(*f32),
                       [[w.astype(*f32) for w in g] for g in ws],
                       [[b.astype(*f32) for b in g] for g in bs],
                       [x.astype(*f32) for x in xs])
    assert {hy.dtype, cy.dtype} | {y.dtype for y in ys} == {numpy.dtype('float32')}
    e_hy, _, _ = _numpy_n_step('lstm', 1, 2, hx, cx, ws, bs, xs)
    numpy.testing.assert_allclose(hy.to_numpy(), e_hy, rtol=1e-5, atol=1e-5)


def test_bidirectional_last_output_sees_only_the_last_step_backwards():
    # The backward half of ys[-1] is the backward direction's first step: it
    # depends on xs[-1] and the initial state, not on the earlier steps.
    hx, _, ws, bs, xs = _inputs('gru', 2, 1, 3, 2, (2, 2, 2))
    _, _, ys = _call(xgrad.n_step_bigru, 'gru', 1, hx, None, ws, bs, xs)
    xs2 = [x + 1.0 for x in xs[:-1]] + [xs[-1]]
    _, _, ys2 = _call(xgrad.n_step_bigru, 'gru', 1, hx, None, ws, bs, xs2)
    # Not bit for bit: the steps go through GEMM, whose rounding may depend
    # on the BLAS, its kernel and the operands' alignment (MKL). A dependence
    # on the earlier steps (changed by 1.0) would show at 1e-2, not 8 ulps.
    a, b = ys[-1].to_numpy()[:, 3:], ys2[-1].to_numpy()[:, 3:]
    eps = numpy.finfo(a.dtype).eps
    numpy.testing.assert_allclose(a, b, rtol=8 * eps, atol=8 * eps)
    assert not numpy.allclose(ys[-1].to_numpy()[:, :3], ys2[-1].to_numpy()[:, :3])


def test_n_step_gradients_reach_every_input():
    hx, cx, ws, bs, xs = _inputs('lstm', 2, 2, 2, 3, (2, 1))
    arr = [xgrad.array(hx).require_grad(), xgrad.array(cx).require_grad()]
    wa = [[xgrad.array(w).require_grad() for w in g] for g in ws]
    ba = [[xgrad.array(b).require_grad() for b in g] for g in bs]
    xa = [xgrad.array(x).require_grad() for x in xs]
    hy, cy, ys = xgrad.n_step_bilstm(2, arr[0], arr[1], wa, ba, xa)
    loss = xgrad.sum(hy) + xgrad.sum(cy * cy) + sum(xgrad.sum(y * y) for y in ys)
    inputs = arr + [w for g in wa for w in g] + [b for g in ba for b in g] + xa
    grads = xgrad.grad([loss], inputs)
    assert all(g is not None and g.shape == x.shape for g, x in zip(grads, inputs))


def test_n_step_rnn_activation_is_positional():
    hx, _, ws, bs, xs = _inputs('rnn', 1, 1, 2, 2, (2,))
    _, _, ys = _call(xgrad.n_step_rnn, 'rnn', 1, hx, None, ws, bs, xs, 'relu')
    assert (ys[0].to_numpy() >= 0).all()


@pytest.mark.parametrize('change, error, match', [
    (lambda a: a.update(hx=numpy.zeros((3, 2, 2))), xgrad.DimensionError, 'hx'),
    (lambda a: a.update(xs=[numpy.zeros((3, 2))]), xgrad.DimensionError, r'xs\[0\]'),
    (lambda a: a['ws'][0].__setitem__(1, numpy.zeros((2, 3))), xgrad.DimensionError,
     r'ws\[0\]\[1\]'),
    (lambda a: a['bs'][0].pop(), ValueError, r'bs\[0\]'),
    (lambda a: a.update(xs=[]), ValueError, 'xs'),
    (lambda a: a.update(activation='sigmoid'), ValueError, 'activation'),
])
def test_n_step_rnn_bad_input(change, error, match):
    hx, _, ws, bs, xs = _inputs('rnn', 1, 1, 2, 2, (2,))
    args = dict(hx=hx, ws=ws, bs=bs, xs=xs, activation='tanh')
    change(args)
    with pytest.raises(error, match=match):
        xgrad.n_step_rnn(1, xgrad.array(args['hx']),
                         [[xgrad.array(w) for w in g] for g in args['ws']],
                         [[xgrad.array(b) for b in g] for g in args['bs']],
                         [xgrad.array(x) for x in args['xs']], args['activation'])
