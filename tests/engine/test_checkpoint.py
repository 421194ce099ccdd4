"""xgrad.checkpoint: the gradients are those of the function itself (first,
second and third order, several graphs, backward and grad), dropout masks
and NumPy's global generator are replayed in the recomputation without
advancing the user's generators, intermediates are freed, and bad input
raises before anything is recorded."""

import gc
import sys

import numpy
import pytest

import xgrad

DROPOUT = sys.modules['xgrad._ops.dropout']  # (xgrad._ops.dropout is the function)


def _a(values, dtype='float64'):
    return xgrad.array(numpy.asarray(values, dtype=dtype))


def _params(seed=0, width=4, blocks=3):
    rs = numpy.random.RandomState(seed)
    x = _a(rs.randn(5, width)).require_grad()
    ps = []
    for _ in range(blocks):
        ps += [_a(rs.randn(width, width) / 2).require_grad(),
               _a(rs.randn(width) / 2).require_grad()]
    return [x] + ps


def block(h, W, b):
    return xgrad.tanh(h @ W + b) + h * 0.5


def _net(arrays, use_checkpoint):
    h, ps = arrays[0], arrays[1:]
    for W, b in zip(ps[::2], ps[1::2]):
        h = xgrad.checkpoint(block, h, W, b) if use_checkpoint else block(h, W, b)
    return h


def _grads(arrays):
    out = [a.grad.to_numpy().copy() for a in arrays]
    for a in arrays:
        a.cleargrad()
    return out


def _same(got, expected):
    for g, e in zip(got, expected):
        numpy.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_first_order_equals_the_plain_gradients():
    arrays = _params()
    results = []
    for ck in (True, False):
        y = _net(arrays, ck)
        xgrad.sum(y * y).backward()
        results.append(_grads(arrays))
    _same(*results)


def test_second_and_third_order_equal_the_plain_ones():
    arrays = _params(1)
    results = []
    for ck in (True, False):
        y = _net(arrays, ck)
        gx, = xgrad.grad([xgrad.sum(y * y * y)], [arrays[0]], enable_double_backprop=True)
        ggx, = xgrad.grad([xgrad.sum(gx * gx)], [arrays[0]], enable_double_backprop=True)
        xgrad.sum(ggx * arrays[0]).backward()  # third order, into every parameter
        results.append(_grads(arrays))
    _same(*results)


def test_gradient_penalty_through_functional_vjp():
    arrays = _params(2)
    results = []
    for ck in (True, False):
        x = arrays[0]
        _, vjp_fn = xgrad.functional.vjp(lambda z: xgrad.sum(_net([z] + arrays[1:], ck)), x)
        gx, = vjp_fn(_a(1.0))
        xgrad.sum(gx * gx).backward()
        results.append([a.grad.to_numpy().copy() for a in arrays[1:]])
        for a in arrays:
            a.cleargrad()
    _same(*results)


def test_several_graphs():
    rs = numpy.random.RandomState(3)
    results = []
    for ck in (True, False):
        with xgrad.backprop_scope('outer') as outer, xgrad.backprop_scope('inner') as inner:
            w = _a(rs.randn(3, 3) if ck else w_data).require_grad(outer)
            w_data = w.to_numpy()
            v = _a(numpy.ones((2, 3))).require_grad(inner)
            b = _a(numpy.zeros(3))
            y = xgrad.checkpoint(block, v, w, b) if ck else block(v, w, b)
            xgrad.backward(xgrad.sum(y * y), inner)
            gv = v.get_grad(inner)
            assert gv.is_backprop_required(outer)  # recorded on the outer graph
            xgrad.backward(xgrad.sum(gv * gv), outer)
            results.append([gv.to_numpy(), w.get_grad(outer).to_numpy()])
    _same(*results)


def test_multiple_outputs_and_non_array_arguments():
    arrays = _params(4, blocks=1)
    x, W, b = arrays

    def two(h, W, scale, b):
        z = h @ W
        return z * scale, xgrad.sum(xgrad.tanh(z + b)), xgrad.argmax(z)

    results = []
    for ck in (True, False):
        p, q, i = xgrad.checkpoint(two, x, W, 3.0, b) if ck else two(x, W, 3.0, b)
        assert i.dtype.kind == 'i' and not i.is_backprop_required()
        xgrad.backward([xgrad.sum(p * p), q])
        results.append(_grads(arrays))
    _same(*results)
    # an output without a gradient: the others still backpropagate
    p, q, i = xgrad.checkpoint(two, x, W, 3.0, b)
    q.backward()
    assert x.grad is not None and W.grad is not None


def test_identity_function():
    x = _a([1.0, 2.0]).require_grad()
    y = xgrad.checkpoint(lambda a: a, x)
    (y * 3).backward()
    numpy.testing.assert_array_equal(x.grad.to_numpy(), [3.0, 3.0])


def test_intermediates_are_freed():
    """The engine retains data (NumPy arrays), not xgrad arrays, so memory
    is what tells: tracemalloc's count of the bytes NumPy holds after the
    forward pass, and after the backward pass."""
    import tracemalloc
    arrays = _params(5, width=64, blocks=10)
    arrays[0] = _a(numpy.random.RandomState(0).randn(256, 64)).require_grad()
    one = 256 * 64 * 8  # bytes of one activation

    def held(ck):
        gc.collect()
        tracemalloc.start()
        try:
            y = _net(arrays, ck)
            forward = tracemalloc.get_traced_memory()[0]
            xgrad.sum(y).backward()
            del y
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        for a in arrays:
            a.cleargrad()
        return forward, after

    (plain, plain_after), (checkpointed, ck_after) = held(False), held(True)
    # plain: per block, tanh's output (retained by its gradient) and the
    # block's output (retained by the next matmul): about 20 activations
    assert plain > 18 * one, plain / one
    # checkpointed: each block's output (the next one's retained input), the
    # last output: about 10 activations
    assert checkpointed < 12 * one, checkpointed / one
    # after backward only the gradients remain (x's: one; the 10 W's: 2.5)
    assert ck_after < 4 * one and plain_after < 4 * one, (ck_after / one, plain_after / one)


def test_intermediates_are_dead_by_weakref():
    import weakref
    seen = []

    def fn(h, W):
        z = h @ W
        t = xgrad.tanh(z)
        # the engine retains data, not arrays: watch the data
        seen.extend(weakref.ref(xgrad._core._raw_data(a)) for a in (z, t))
        return t * 2

    x, W = _params(8, blocks=1)[:2]
    y = xgrad.checkpoint(fn, x, W)
    gc.collect()
    assert [r() for r in seen] == [None, None]
    xgrad.sum(y).backward()  # recomputed: two more, dead after the pass too
    gc.collect()
    assert len(seen) == 4 and all(r() is None for r in seen)
    plain = fn(x, W)  # without checkpoint tanh's output data stays (retained)
    gc.collect()
    assert seen[-1]() is not None
    del plain


# ---------------------------------------------------------------------------
# Randomness

def _dropout_net(random_state):
    def fn(h, W):
        return xgrad.dropout(xgrad.tanh(h @ W), 0.5, random_state=random_state()) * 2
    return fn


@pytest.mark.parametrize('source', ['default', 'generator', 'random_state', 'seed'])
def test_dropout_mask_is_reused(source):
    rs = numpy.random.RandomState(6)
    x = _a(rs.randn(6, 8)).require_grad()
    W = _a(rs.randn(8, 8)).require_grad()
    gen = numpy.random.default_rng(11)
    legacy = numpy.random.RandomState(12)
    random_state = {'default': lambda: None, 'generator': lambda: gen,
                    'random_state': lambda: legacy, 'seed': lambda: 5}[source]
    fn = _dropout_net(random_state)
    y = xgrad.checkpoint(fn, x, W)
    kept = y.to_numpy() != 0
    assert 0 < kept.sum() < kept.size
    state = (gen.bit_generator.state, legacy.get_state()[1].copy(),
             DROPOUT._default_rng.bit_generator.state)
    gy = _a(rs.randn(6, 8))
    xgrad.backward([y], grad_outputs=[gy])
    # dy/dW with the first run's mask: x^T (gy * mask * 2 * 2 * (1 - tanh^2))
    t = numpy.tanh(x.to_numpy() @ W.to_numpy())
    expected = x.to_numpy().T @ (gy.to_numpy() * kept * 4 * (1 - t * t))
    numpy.testing.assert_allclose(W.grad.to_numpy(), expected, rtol=1e-12, atol=1e-12)
    # the backward pass did not advance the user's generators
    assert gen.bit_generator.state == state[0]
    numpy.testing.assert_array_equal(legacy.get_state()[1], state[1])
    assert DROPOUT._default_rng.bit_generator.state == state[2]


def test_dropout_mask_reused_under_double_backprop():
    rs = numpy.random.RandomState(7)
    x = _a(rs.randn(4, 5)).require_grad()
    W = _a(rs.randn(5, 5)).require_grad()
    gen = numpy.random.default_rng(3)
    fn = _dropout_net(lambda: gen)
    y = xgrad.checkpoint(fn, x, W)
    kept = (y.to_numpy() != 0).astype(float)
    gx, = xgrad.grad([xgrad.sum(y * y)], [x], enable_double_backprop=True)
    xgrad.sum(gx).backward()  # twice through the recomputation: same mask each time
    # the same with a fixed mask, without checkpointing
    x2 = _a(x.to_numpy()).require_grad()
    W2 = _a(W.to_numpy()).require_grad()
    y2 = xgrad.tanh(x2 @ W2) * _a(kept * 4)
    gx2, = xgrad.grad([xgrad.sum(y2 * y2)], [x2], enable_double_backprop=True)
    xgrad.sum(gx2).backward()
    numpy.testing.assert_allclose(gx.to_numpy(), gx2.to_numpy(), rtol=1e-12)
    numpy.testing.assert_allclose(W.grad.to_numpy(), W2.grad.to_numpy(), rtol=1e-12)


def test_numpy_global_generator_is_replayed():
    xgrad.random.seed(0)
    x = _a(numpy.ones(4)).require_grad()

    def noisy(h):
        return h * xgrad.random.normal(size=4)

    y = xgrad.checkpoint(noisy, x)
    after_forward = numpy.random.get_state()[1].copy()
    y.backward()
    numpy.testing.assert_array_equal(x.grad.to_numpy(), y.to_numpy())
    numpy.testing.assert_array_equal(numpy.random.get_state()[1], after_forward)


def test_different_dropout_calls_in_the_recomputation_raise():
    x = _a(numpy.ones((2, 3))).require_grad()
    calls = []

    def fickle(h):
        calls.append(1)
        if len(calls) == 1:
            return xgrad.dropout(h, 0.5, random_state=0)
        return xgrad.dropout(xgrad.dropout(h, 0.5, random_state=0), 0.5)

    y = xgrad.checkpoint(fickle, x)
    with pytest.raises(xgrad.XgradError, match='same dropout calls'):
        y.backward()
    assert x.grad is None  # the failed pass changed nothing


# ---------------------------------------------------------------------------
# Bad input

def _leaf():
    x = _a([1.0, 2.0, 3.0]).require_grad()
    x.set_grad(_a([7.0, 8.0, 9.0]))
    return x


@pytest.mark.parametrize('returned, message', [
    (None, r'the output of fn \(bad\) must be an xgrad.ndarray or a non-empty tuple/list '
           r'of them, not a NoneType'),
    (2.0, r'the output of fn \(bad\) .* not a float'),
    ([], r'the output of fn \(bad\) .* not an empty list'),
    ('mixed', r'the output of fn \(bad\) .* its output 1 is a float'),
])
def test_fn_returning_a_non_array(returned, message):
    x = _leaf()
    gc.collect()
    live = xgrad._core._live_array_count()

    def bad(a):
        y = xgrad.tanh(a) * 2
        return (y, 1.0) if returned == 'mixed' else returned

    with pytest.raises(TypeError, match='checkpoint: ' + message):
        xgrad.checkpoint(bad, x)
    gc.collect()
    assert xgrad._core._live_array_count() == live
    numpy.testing.assert_array_equal(x.grad.to_numpy(), [7.0, 8.0, 9.0])
    xgrad.sum(x * x).backward()
    numpy.testing.assert_array_equal(x.grad.to_numpy(), [9.0, 12.0, 15.0])


def test_closure_parameter_on_a_graph_raises():
    x = _leaf()
    W = _a(numpy.eye(3)).require_grad()
    with pytest.raises(xgrad.GradientError,
                       match=r'output 0 of fn \(<lambda>\) is on a graph \(<default>\).*'
                             r'pass every array'):
        xgrad.checkpoint(lambda a: a @ W, x)
    assert W.grad is None
    numpy.testing.assert_array_equal(x.grad.to_numpy(), [7.0, 8.0, 9.0])
    # a constant in the closure is fine
    C = _a(numpy.eye(3) * 2)
    y = xgrad.checkpoint(lambda a: a @ C, x)
    xgrad.sum(y).backward()
    numpy.testing.assert_array_equal(x.grad.to_numpy(), [9.0, 10.0, 11.0])


def test_bad_fn_and_args():
    with pytest.raises(TypeError, match='checkpoint: fn must be callable'):
        xgrad.checkpoint(3, _leaf())
    with pytest.raises(TypeError, match='checkpoint: args hold no xgrad array'):
        xgrad.checkpoint(lambda a: a, 1.0)


def test_fn_raising_records_nothing():
    x = _leaf()
    gc.collect()
    live = xgrad._core._live_array_count()

    def boom(a):
        xgrad.tanh(a)
        raise RuntimeError('boom')

    with pytest.raises(RuntimeError, match='boom'):
        xgrad.checkpoint(boom, x)
    gc.collect()
    assert xgrad._core._live_array_count() == live
    assert getattr(sys.modules['xgrad._random_tape']._local, 'tape', None) is None


def test_inside_functional_transforms():
    rs = numpy.random.RandomState(9)
    W = _a(rs.randn(3, 3))
    b = _a(rs.randn(3))
    x = _a(rs.randn(3))

    def f(ck):
        def g(v):
            return xgrad.checkpoint(block, v, W, b) if ck else block(v, W, b)
        return g

    for transform in (lambda g: xgrad.functional.jacobian(g, x),
                      lambda g: xgrad.functional.hessian(lambda v: xgrad.sum(g(v) ** 2), x),
                      lambda g: xgrad.functional.jvp(g, (x,), (b,))[1]):
        _same([transform(f(True)).to_numpy()], [transform(f(False)).to_numpy()])
