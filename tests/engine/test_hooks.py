"""Gradient hooks on arrays (``register_hook``) and post-accumulate hooks on
leaves (``register_post_accumulate_hook``): what they see, what a
replacement does, removal, several graphs, double backprop, loss scaling,
and that a failing hook leaves no trace. Expected gradients are closed forms."""

import numpy
import pytest

import xgrad
from xgrad.testing import assert_allclose

X = numpy.array([1.0, -2.0, 0.5])


def leaf(bp=None):
    return xgrad.array(X.copy()).require_grad(bp)


def test_hook_sees_the_gradient_flowing_into_a_leaf():
    x = leaf()
    seen = []
    x.register_hook(lambda g: seen.append(g.to_numpy().copy()))
    xgrad.sum(x * x).backward()
    assert len(seen) == 1
    assert_allclose(seen[0], 2 * X)
    assert_allclose(x.grad.to_numpy(), 2 * X)


def test_a_replacement_is_what_is_stored_and_passed_on():
    x = leaf()
    h = x * 3.0
    h.register_hook(lambda g: g * 0.5)          # dL/dh = 2h, halved
    xgrad.sum(h * h).backward()
    assert_allclose(x.grad.to_numpy(), 0.5 * 2 * (3 * X) * 3)


def test_hook_sees_this_pass_only_and_the_prior_gradient_is_added_after():
    x = leaf()
    xgrad.sum(x * x).backward()                   # x.grad = 2x
    seen = []
    x.register_hook(lambda g: seen.append(g.to_numpy().copy()) or g * 0)
    xgrad.sum(x * x).backward()                   # this pass's 2x is zeroed
    assert_allclose(seen[0], 2 * X)
    assert_allclose(x.grad.to_numpy(), 2 * X)


def test_remove_takes_the_hook_off_once():
    x = leaf()
    calls = []
    handle = x.register_hook(lambda g: calls.append(1))
    twice = x.register_hook(lambda g: calls.append(2))
    handle.remove()
    handle.remove()
    xgrad.sum(x * x).backward()
    assert calls == [2]
    twice.remove()
    x.cleargrad()
    xgrad.sum(x * x).backward()
    assert calls == [2]


def test_a_registered_hook_makes_no_reference_cycle():
    import gc
    gc.collect()
    gc.disable()
    try:
        x = leaf()
        h = x * 2.0
        h.register_hook(lambda g: g)
        x.register_post_accumulate_hook(len)
        del x, h
        assert gc.collect() == 0     # freed by reference counting alone
    finally:
        gc.enable()


def test_hooks_run_in_grad_too():
    x = leaf()
    x.register_hook(lambda g: g + 1)
    gx, = xgrad.grad([xgrad.sum(x * x)], [x])
    assert_allclose(gx.to_numpy(), 2 * X + 1)
    assert x.grad is None                         # grad() stores nothing


def test_hook_in_double_backprop_sees_and_returns_arrays_on_the_graph():
    x = leaf()
    on_graph = []

    def square(g):
        on_graph.append(g.is_backprop_required())
        return g * g

    x.register_hook(square)
    gx, = xgrad.grad([xgrad.sum(x * x * x)], [x], enable_double_backprop=True)
    assert on_graph == [True]
    assert_allclose(gx.to_numpy(), (3 * X ** 2) ** 2)
    xgrad.sum(gx).backward()
    # The recorded hook is part of gx's graph: d/dx sum(9 x^4) = 36 x^3; the
    # second pass runs the hook again on that gradient into x, squaring it.
    assert_allclose(x.grad.to_numpy(), (36 * X ** 3) ** 2)


def test_hooks_are_per_graph():
    with xgrad.backprop_scope('a') as a, xgrad.backprop_scope('b') as b:
        x = xgrad.array(X.copy()).require_grad(a).require_grad(b)
        calls = []
        x.register_hook(lambda g: calls.append('a'), a)
        xgrad.backward([xgrad.sum(x * x)], b)
        assert calls == []
        xgrad.backward([xgrad.sum(x * x)], a)
        assert calls == ['a']


def test_hook_sees_the_gradient_unscaled_under_loss_scale():
    x = leaf()
    seen = []
    x.register_hook(lambda g: seen.append(g.to_numpy().copy()) or g * 2)
    xgrad.backward([xgrad.sum(x * x)], loss_scale=1024)
    assert_allclose(seen[0], 2 * X)
    assert_allclose(x.grad.to_numpy(), 4 * X)


@pytest.mark.parametrize('bad, what', [
    (lambda g: xgrad.zeros((2,), 'float64'), 'shapes'),
    (lambda g: g.astype('float32'), 'dtypes'),
    (lambda g: g.to_numpy(), 'ndarray'),
])
def test_a_wrong_replacement_is_a_gradient_error_and_nothing_changes(bad, what):
    x = leaf()
    xgrad.sum(x * x).backward()
    before = x.grad.to_numpy().copy()
    y = xgrad.sum(x * x * x)
    handle = x.register_hook(bad)
    with pytest.raises(xgrad.GradientError, match='Gradient hook .*' + what):
        xgrad.backward([y], enable_double_backprop=False)
    assert_allclose(x.grad.to_numpy(), before)     # rolled back
    handle.remove()
    y.backward()                                   # the graph is intact
    assert_allclose(x.grad.to_numpy(), before + 3 * X ** 2)


def test_a_raising_hook_leaves_no_partial_state():
    x = leaf()
    h = x * 2.0
    h.register_hook(lambda g: 1 / 0)
    y = xgrad.sum(h * h)
    with pytest.raises(ZeroDivisionError):
        y.backward()
    assert x.grad is None


def test_bad_registrations_name_the_problem_and_change_nothing():
    x = leaf()
    with pytest.raises(TypeError, match='hook must be callable'):
        x.register_hook(5)
    with xgrad.backprop_scope('other') as other:
        with pytest.raises(xgrad.XgradError, match="not on the graph of backprop ID 'other'"):
            x.register_hook(lambda g: g, other)
    h = x * 2.0
    with pytest.raises(xgrad.XgradError, match='takes a leaf'):
        h.register_post_accumulate_hook(lambda a: None)
    with pytest.raises(TypeError, match='hook must be callable'):
        x.register_post_accumulate_hook(None)
    xgrad.sum(h).backward()
    assert_allclose(x.grad.to_numpy(), 2 * numpy.ones(3))


def test_post_accumulate_hook_runs_once_the_gradient_is_stored():
    w = leaf()
    v = xgrad.array([2.0, 3.0, 4.0]).require_grad()
    seen = []
    handle = w.register_post_accumulate_hook(
        lambda a: seen.append((a is w, a.grad.to_numpy().copy())))
    xgrad.sum(w * v + w * w).backward()          # w used twice: one call
    assert len(seen) == 1 and seen[0][0]
    assert_allclose(seen[0][1], v.to_numpy() + 2 * X)
    xgrad.sum(w * v).backward()                  # accumulates: sees the sum
    assert_allclose(seen[1][1], 2 * v.to_numpy() + 2 * X)
    xgrad.sum(v * v).backward()                  # no gradient into w: no call
    assert len(seen) == 2
    handle.remove()
    xgrad.sum(w * v).backward()
    assert len(seen) == 2


def test_post_accumulate_hook_in_grad_only_when_it_stores():
    w = leaf()
    calls = []
    w.register_post_accumulate_hook(lambda a: calls.append(a.grad.to_numpy().copy()))
    xgrad.grad([xgrad.sum(w * w)], [w])
    assert calls == []
    xgrad.grad([xgrad.sum(w * w)], [w], set_grad=True)
    assert len(calls) == 1
    assert_allclose(calls[0], 2 * X)


def test_post_accumulate_hook_is_not_called_when_the_pass_fails():
    w = leaf()
    calls = []
    w.register_post_accumulate_hook(lambda a: calls.append(1))
    h = w * 2.0
    h.register_hook(lambda g: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        xgrad.sum(h).backward()
    assert calls == [] and w.grad is None


class _Marker(xgrad.FunctionNode):
    """Identity whose backward writes 'marker' into a shared log."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def forward(self, inputs):
        return inputs[0].copy(),

    def backward(self, target_input_indexes, grad_outputs):
        self.log.append('marker')
        return grad_outputs[0],


def test_a_leaf_hook_runs_as_soon_as_its_gradient_is_complete():
    # loss = sum(w2 * marker(w1 * x)): w2's only consumer runs first, so its
    # hook runs before the marker's backward; w1's after it.
    log = []
    x = xgrad.array(X.copy())
    w1, w2 = leaf(), leaf()
    w1.register_hook(lambda g: log.append('w1'))
    w2.register_hook(lambda g: log.append(('w2', g.to_numpy().copy())))
    h, = _Marker(log).apply((w1 * x,))
    xgrad.sum(w2 * h).backward()
    assert [e if isinstance(e, str) else e[0] for e in log] == ['w2', 'marker', 'w1']
    assert_allclose(log[0][1], X * X)
    assert_allclose(w2.grad.to_numpy(), X * X)
    assert_allclose(w1.grad.to_numpy(), X * X)


def test_a_leaf_used_by_several_ops_waits_for_all_of_them():
    log = []
    w = leaf()
    w.register_hook(lambda g: log.append(('w', g.to_numpy().copy())))
    h, = _Marker(log).apply((w * 2.0,))
    xgrad.sum(w * h + w).backward()     # d/dw (2 w^2 + w) = 4w + 1
    assert [e if isinstance(e, str) else e[0] for e in log] == ['marker', 'w']
    assert_allclose(log[1][1], 4 * X + 1)
    assert_allclose(w.grad.to_numpy(), 4 * X + 1)


def test_a_leaf_hook_whose_pass_fails_later_leaves_nothing_stored():
    w1, w2 = leaf(), leaf()
    seen = []
    w2.register_hook(lambda g: seen.append(1))
    h = w1 * 2.0
    h.register_hook(lambda g: 1 / 0)    # runs after w2's hook
    with pytest.raises(ZeroDivisionError):
        xgrad.sum(w2 * h).backward()
    assert seen == [1]
    assert w1.grad is None and w2.grad is None
    xgrad.sum(w2 * w1).backward()       # the graph is intact: a new pass works
    assert_allclose(w2.grad.to_numpy(), X)


def test_a_leaf_hook_in_grad_runs_on_the_evaluated_subgraph_only():
    log = []
    w1, w2 = leaf(), leaf()
    w1.register_hook(lambda g: log.append('w1'))
    w2.register_hook(lambda g: log.append('w2'))
    y = xgrad.sum(w1 * w2)
    gw2, = xgrad.grad([y], [w2])
    assert log == ['w2']
    assert_allclose(gw2.to_numpy(), X)
