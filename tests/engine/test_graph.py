"""Backprop IDs, scopes and connected graphs (semantics.md §2, §9, §14).

Scenario 33 of the acceptance checklist (semantics.md §16), plus the §2 rules:
outer/inner prohibition, expired IDs, releasing, backprop scopes.
"""

import re

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# a literal value stored and read back.


SHAPE = (1,)
DTYPE = xgrad.float32

parametrize_method = pytest.mark.parametrize('method', ['backward', 'grad'])


# ---------------------------------------------------------------------------
# Helpers

def _full(value):
    return xgrad.full(SHAPE, value, DTYPE)


def _assert_value(array, value):
    assert array.shape == SHAPE
    assert array.dtype == DTYPE
    numpy.testing.assert_array_equal(numpy.asarray(array), [value])


def _backprop(method, y, x, backprop_id, **kwargs):
    """Backpropagates y on `backprop_id` and returns dy/dx (or None)."""
    if method == 'backward':
        xgrad.backward(y, backprop_id, **kwargs)
        return x.get_grad(backprop_id)
    gx, = xgrad.grad([y], [x], backprop_id, **kwargs)
    return gx


def _prohibited(inner_name, outer_name):
    """pytest.raises for a backward on `inner` after the connected `outer`."""
    return pytest.raises(xgrad.XgradError, match=re.escape(
        "Cannot backward for backprop ID '{}' because an connected backprop "
        "ID '{}'".format(inner_name, outer_name)))


def _expired():
    return pytest.raises(
        xgrad.XgradError, match='Invalid backprop ID, maybe already expired')


def _connect(*backprop_ids):
    """Connects the graphs: one array gets a node on each of them."""
    a = _full(1)
    for backprop_id in backprop_ids:
        a.require_grad(backprop_id)
    return a


def _array_on_expired_graph():
    with xgrad.backprop_scope('bp') as bp:
        x = _full(2).require_grad(bp)
        y = x * x
    return bp, x, y


# ---------------------------------------------------------------------------
# 33: anygraph

def test_anygraph_exists():
    x = _full(1)
    assert not x.is_backprop_required(xgrad.anygraph)
    with xgrad.backprop_scope('bp') as bp:
        x.require_grad(bp)
        assert x.is_backprop_required(xgrad.anygraph)
        assert not x.is_backprop_required()


# ---------------------------------------------------------------------------
# Backprop IDs and scopes

def test_backprop_id_name_context_and_repr():
    with xgrad.backprop_scope('bp1') as bp1:
        assert bp1.name == 'bp1'
        assert repr(bp1) == 'bp1'
        assert bp1.context == xgrad.get_default_context()
    assert bp1.name == '<expired>'
    assert repr(bp1) == '<expired>'


def test_backprop_scope_with_context():
    context = xgrad.Context()
    with xgrad.backprop_scope('bp1', context) as bp1:
        assert bp1.context == context
        context._check_valid_backprop_id(bp1)
    with pytest.raises(xgrad.XgradError):
        context._check_valid_backprop_id(bp1)


def test_backprop_id_of_another_context_is_invalid():
    other = xgrad.Context()
    backprop_id = other.make_backprop_id('bp1')
    with pytest.raises(xgrad.XgradError):
        xgrad.get_default_context()._check_valid_backprop_id(backprop_id)


def test_release_backprop_id_twice():
    context = xgrad.Context()
    backprop_id = context.make_backprop_id('bp1')
    context.release_backprop_id(backprop_id)
    assert backprop_id.name == '<expired>'
    with pytest.raises(xgrad.XgradError, match=re.escape(
            'Invalid backprop ID, maybe already expired: <expired>')):
        context.release_backprop_id(backprop_id)


# backprop_id=None means the default ID of the context (semantics.md §2).
def test_default_backprop_id_cannot_be_released():
    context = xgrad.Context()
    with pytest.raises(xgrad.XgradError,
                       match='The default backprop ID cannot be released'):
        context.release_backprop_id(None)


def test_backprop_scope_cannot_be_nested():
    scope = xgrad.backprop_scope('bp1')
    with scope:
        with pytest.raises(xgrad.XgradError,
                           match='Backprop scope cannot be nested'):
            with scope:
                pass


def test_exited_backprop_scope_cannot_be_reused():
    scope = xgrad.backprop_scope('bp1')
    with scope:
        pass
    with pytest.raises(xgrad.XgradError,
                       match='Exited backprop scope cannot be reused'):
        with scope:
            pass


# ---------------------------------------------------------------------------
# Expired backprop IDs

def test_expired_id_raises_on_require_grad():
    bp, x, _ = _array_on_expired_graph()
    with _expired():
        x.require_grad(bp)


def test_expired_id_raises_on_is_grad_required():
    bp, x, _ = _array_on_expired_graph()
    with _expired():
        x.is_grad_required(bp)


def test_expired_id_raises_on_get_grad():
    bp, x, _ = _array_on_expired_graph()
    with _expired():
        x.get_grad(bp)


def test_expired_id_raises_on_set_grad():
    bp, x, _ = _array_on_expired_graph()
    with _expired():
        x.set_grad(_full(1), bp)


def test_expired_id_set_grad_on_array_without_node_reports_constant():
    bp, _, _ = _array_on_expired_graph()
    with pytest.raises(xgrad.XgradError, match='constant'):
        _full(3).set_grad(_full(1), bp)


def test_expired_id_raises_on_is_chained():
    bp, x, y = _array_on_expired_graph()
    with _expired():
        x._is_chained(bp)
    with _expired():
        y._is_chained(bp)


@parametrize_method
def test_expired_id_backprop_id_not_found(method):
    bp, x, y = _array_on_expired_graph()
    with pytest.raises(xgrad.XgradError, match='Backprop ID not found'):
        _backprop(method, y, x, bp)


def test_expired_id_is_accepted_where_chainerx_accepts_it():
    bp, x, _ = _array_on_expired_graph()
    x.is_backprop_required(bp)
    xgrad.is_backprop_required(bp)
    with xgrad.no_backprop_mode(bp):
        pass
    with xgrad.force_backprop_mode(bp):
        pass
    x.cleargrad(bp)


# ---------------------------------------------------------------------------
# Outer / inner graphs: a backward on a graph prohibits the connected graphs
# created after it.

@parametrize_method
def test_inner_graph_cannot_be_backpropped_after_outer(method):
    with xgrad.backprop_scope('outer') as outer, \
            xgrad.backprop_scope('inner') as inner:
        x = _full(2).require_grad(outer).require_grad(inner)
        y = x * x

        _assert_value(_backprop(method, y, x, outer), 4)

        with _prohibited('inner', 'outer'):
            xgrad.backward(y, inner)
        with _prohibited('inner', 'outer'):
            xgrad.grad([y], [x], inner)


@parametrize_method
def test_outer_graph_can_be_backpropped_after_inner(method):
    with xgrad.backprop_scope('outer') as outer, \
            xgrad.backprop_scope('inner') as inner:
        x = _full(2).require_grad(outer).require_grad(inner)
        y = x * x

        _assert_value(_backprop(method, y, x, inner), 4)
        _assert_value(_backprop(method, y, x, outer), 4)


def test_same_graph_can_be_backpropped_again():
    x = _full(2).require_grad()
    y = x * x
    xgrad.backward(y)
    xgrad.backward(y)  # no error; the graph is already cut: no new grads
    _assert_value(x.get_grad(), 4)


def test_same_graph_with_double_backprop_accumulates():
    x = _full(2).require_grad()
    y = x * x
    xgrad.backward(y, enable_double_backprop=True)
    xgrad.backward(y, enable_double_backprop=True)
    _assert_value(x.get_grad(), 8)


def test_prohibition_covers_disconnected_part_of_inner_graph():
    with xgrad.backprop_scope('outer') as outer, \
            xgrad.backprop_scope('inner') as inner:
        x = _full(2).require_grad(outer).require_grad(inner)
        xgrad.backward(x * x, outer)

        w = _full(3).require_grad(inner)
        with _prohibited('inner', 'outer'):
            xgrad.backward(w * w, inner)


def test_prohibition_is_set_even_when_backward_finds_no_node():
    with xgrad.backprop_scope('outer') as outer, \
            xgrad.backprop_scope('inner') as inner:
        _connect(outer, inner)
        v = _full(2).require_grad()  # default graph only
        xgrad.backward(v * v, outer)

        w = _full(3).require_grad(inner)
        with _prohibited('inner', 'outer'):
            xgrad.backward(w * w, inner)


def test_unconnected_inner_graph_is_not_prohibited():
    with xgrad.backprop_scope('outer') as outer, \
            xgrad.backprop_scope('inner') as inner:
        x = _full(2).require_grad(outer)
        xgrad.backward(x * x, outer)

        w = _full(3).require_grad(inner)
        xgrad.backward(w * w, inner)
        _assert_value(w.get_grad(inner), 6)


# §9: three graphs bp1 < bp2 < bp3, all on x.
def test_three_graphs_gradients_and_prohibition():
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2, \
            xgrad.backprop_scope('bp3') as bp3:
        x = _full(2).require_grad(bp1).require_grad(bp2).require_grad(bp3)
        y = x * x

        xgrad.backward(y, bp3)
        g3 = x.get_grad(bp3)
        _assert_value(g3, 4)
        assert g3.is_backprop_required(bp1)
        assert g3.is_backprop_required(bp2)
        assert not g3.is_backprop_required(bp3)
        assert not g3.is_backprop_required()

        xgrad.backward(y, bp1)
        g1 = x.get_grad(bp1)
        _assert_value(g1, 4)
        assert not g1.is_backprop_required(xgrad.anygraph)

        with _prohibited('bp2', 'bp1'):
            xgrad.backward(y, bp2)


# §9: the order of the scopes decides which graph is outer.
def test_reversed_scopes_disconnect_and_prohibit():
    with xgrad.backprop_scope('bp_x0') as bp_x0, \
            xgrad.backprop_scope('bp_x1') as bp_x1:
        x0 = _full(2).require_grad(bp_x0)
        x1 = _full(3).require_grad(bp_x1)
        h = x0 * (x0 + x1)

        xgrad.backward(h, bp_x0)
        gx0 = x0.get_grad(bp_x0)
        _assert_value(gx0, 7)
        assert not gx0.is_backprop_required(bp_x1)

        with _prohibited('bp_x1', 'bp_x0'):
            xgrad.backward(x0 * gx0 + x1, bp_x1)
