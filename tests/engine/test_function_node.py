"""Python-defined ops: xgrad.FunctionNode subclasses and the ChainerX graft hook
xgrad._function_node_forward (semantics §4, §8, §9, §10).

FunctionNode protocol (docs/api.md): ``forward`` gets NumPy arrays and returns
NumPy arrays; ``backward(target_input_indexes, grad_outputs)`` gets xgrad
arrays (None for missing output gradients) and returns one xgrad array (or
None) per target index; ``retain_inputs`` / ``retain_outputs`` in forward,
``get_retained_inputs`` / ``get_retained_outputs`` in backward.
"""

import gc
import os
import subprocess
import sys
import textwrap
import weakref

import numpy
import pytest

import xgrad


F32 = numpy.dtype('float32')
F64 = numpy.dtype('float64')


def _array(values, dtype=F64):
    return xgrad.array(numpy.asarray(values, dtype=dtype))


def _leaf(values, dtype=F64, bp=None):
    return _array(values, dtype).require_grad(bp)


def _assert_array(a, expected, dtype=None):
    assert isinstance(a, xgrad.ndarray)
    expected = numpy.asarray(expected, dtype=F64)
    assert a.shape == expected.shape
    if dtype is not None:
        assert a.dtype == dtype
    numpy.testing.assert_allclose(a.to_numpy().astype(F64), expected, rtol=1e-6,
                                  atol=1e-7)


def _eps(arrays, value=1e-5):
    return [xgrad.full(a.shape, value, a.dtype) for a in arrays]


# ---------------------------------------------------------------------------
# Python FunctionNodes

class Square(xgrad.FunctionNode):
    """y = x ** 2, backward from the retained input."""

    def forward(self, inputs):
        x, = inputs
        assert isinstance(x, numpy.ndarray)
        self.retain_inputs((0,))
        return x * x,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        gy, = grad_outputs
        assert isinstance(x, xgrad.ndarray) and isinstance(gy, xgrad.ndarray)
        return 2 * x * gy,


class Exp(xgrad.FunctionNode):
    """y = exp(x), backward from the retained output."""

    def forward(self, inputs):
        x, = inputs
        self.retain_outputs((0,))
        return numpy.exp(x),

    def backward(self, target_input_indexes, grad_outputs):
        y, = self.get_retained_outputs()
        assert isinstance(y, xgrad.ndarray)
        return grad_outputs[0] * y,


class Mul(xgrad.FunctionNode):
    """y = a * b with both inputs retained; records what backward saw."""

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        a, b = inputs
        return a * b,

    def backward(self, target_input_indexes, grad_outputs):
        self.targets = tuple(target_input_indexes)
        a, b = self.get_retained_inputs()
        gy, = grad_outputs
        return tuple(gy * (b if i == 0 else a) for i in target_input_indexes)


class Add(xgrad.FunctionNode):
    """y = a + b, retains nothing; returns gy for every target."""

    def forward(self, inputs):
        a, b = inputs
        return a + b,

    def backward(self, target_input_indexes, grad_outputs):
        gy, = grad_outputs
        return tuple(gy for _ in target_input_indexes)


class Cube(xgrad.FunctionNode):
    """y = x ** 3 with backward 3 x^2 gy written with xgrad ops; second
    derivative 6 x (a closed form for double backprop)."""

    def forward(self, inputs):
        self.retain_inputs((0,))
        return inputs[0] ** 3,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return 3 * xgrad.square(x) * grad_outputs[0],


class PowersAndSum(xgrad.FunctionNode):
    """Three outputs: (x^2, x^3, sum(x)); retains the input and output 0.
    Records the output gradients backward received."""

    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        self.retain_outputs((0,))
        return x * x, x * x * x, numpy.asarray(x.sum())

    def backward(self, target_input_indexes, grad_outputs):
        self.seen = tuple(grad_outputs)
        x, = self.get_retained_inputs()
        x2, = self.get_retained_outputs()
        g0, g1, g2 = grad_outputs
        gx = None
        if g0 is not None:
            gx = 2 * x * g0
        if g1 is not None:
            term = 3 * x2 * g1
            gx = term if gx is None else gx + term
        if g2 is not None:
            term = xgrad.broadcast_to(g2, x.shape)
            gx = term if gx is None else gx + term
        return gx,


class Take(xgrad.FunctionNode):
    """y = x[indices] for a 1-d x, with an int input (not differentiable).
    The backward is a product with a constant one-hot matrix, so repeated
    indices accumulate and double backprop works."""

    def forward(self, inputs):
        x, indices = inputs
        assert indices.dtype.kind == 'i'
        self.one_hot = (indices[:, None] == numpy.arange(x.shape[0])).astype(x.dtype)
        self.targets_seen = []
        return x[indices],

    def backward(self, target_input_indexes, grad_outputs):
        self.targets_seen.append(tuple(target_input_indexes))
        assert tuple(target_input_indexes) == (0,)
        gy, = grad_outputs
        one_hot = xgrad.from_numpy(self.one_hot, gy.device)
        return xgrad.matmul(gy, one_hot),


class ScaleBy(xgrad.FunctionNode):
    """y = x * s where s is an int array (non-differentiable second input);
    backward uses the retained int input."""

    def forward(self, inputs):
        self.retain_inputs((1,))
        x, s = inputs
        return (x * s).astype(x.dtype),

    def backward(self, target_input_indexes, grad_outputs):
        s, = self.get_retained_inputs()
        assert s.dtype.kind == 'i'
        assert not s.is_backprop_required(xgrad.anygraph)
        gy, = grad_outputs
        return tuple((gy * s).astype(gy.dtype) for _ in target_input_indexes)


def _apply(node_class):
    return lambda xs: node_class().apply(xs)


# ---------------------------------------------------------------------------
# Forward

def test_apply_returns_a_tuple_of_recorded_outputs():
    x = _leaf([1.0, 2.0, 3.0])
    node = Square()
    ys = node.apply([x])
    assert isinstance(ys, tuple) and len(ys) == 1
    y, = ys
    _assert_array(y, [1, 4, 9], F64)
    assert y.device is x.device
    assert y.is_backprop_required()
    assert not y.is_grad_required()
    assert y._is_chained()
    assert not x._is_chained()


def test_apply_without_graph_records_nothing():
    x = _array([1.0, 2.0])
    y, = Square().apply([x])
    _assert_array(y, [1, 4])
    assert not y.is_backprop_required(xgrad.anygraph)


def test_apply_under_no_backprop_mode_records_nothing():
    x = _leaf([1.0, 2.0])
    with xgrad.no_backprop_mode():
        y, = Square().apply([x])
    assert not y.is_backprop_required(xgrad.anygraph)


def test_apply_accepts_a_tuple_of_inputs():
    a = _leaf([1.0, 2.0])
    b = _leaf([3.0, 4.0])
    y, = Mul().apply((a, b))
    _assert_array(y, [3, 8])


def test_retained_accessors_outside_backward_raise():
    node = Square()
    with pytest.raises(xgrad.XgradError, match='get_retained_inputs'):
        node.get_retained_inputs()
    with pytest.raises(xgrad.XgradError, match='get_retained_outputs'):
        node.get_retained_outputs()


# ---------------------------------------------------------------------------
# First order: closed forms

def test_square_first_order():
    x = _leaf([1.0, -2.0, 3.0])
    y, = Square().apply([x])
    y.backward()
    _assert_array(x.grad, [2, -4, 6])


def test_exp_first_order_uses_retained_output():
    x = _leaf([0.0, 1.0, -1.0])
    y, = Exp().apply([x])
    xgrad.backward(y, grad_outputs=[_array([1.0, 2.0, 3.0])])
    _assert_array(x.grad, numpy.exp([0.0, 1.0, -1.0]) * [1, 2, 3])


def test_exp_retained_output_of_dead_array():
    # The retained output is rebuilt from the saved data once the array died.
    x = _leaf([0.5, 1.5])
    z = Square().apply(list(Exp().apply([x])))[0]  # exp(x) dies here
    gx, = xgrad.grad([z], [x])
    _assert_array(gx, 2 * numpy.exp(2 * numpy.array([0.5, 1.5])))


def test_mul_first_order_and_targets():
    a = _leaf([1.0, 2.0])
    b = _leaf([3.0, 5.0])
    node = Mul()
    y, = node.apply([a, b])
    y.backward()
    assert node.targets == (0, 1)
    _assert_array(a.grad, [3, 5])
    _assert_array(b.grad, [1, 2])


def test_mul_with_constant_input_gets_only_the_differentiable_target():
    a = _leaf([1.0, 2.0])
    b = _array([3.0, 5.0])  # no node
    node = Mul()
    y, = node.apply([a, b])
    y.backward()
    assert node.targets == (0,)
    _assert_array(a.grad, [3, 5])
    with pytest.raises(xgrad.XgradError):
        b.get_grad()


def test_backward_may_return_none_for_a_target():
    class FirstOnly(Mul):
        def backward(self, target_input_indexes, grad_outputs):
            grads = super().backward(target_input_indexes, grad_outputs)
            return tuple(g if i == 0 else None
                         for i, g in zip(target_input_indexes, grads))

    a = _leaf([1.0, 2.0])
    b = _leaf([3.0, 5.0])
    y, = FirstOnly().apply([a, b])
    y.backward()
    _assert_array(a.grad, [3, 5])
    assert b.grad is None


def test_float_and_int_outputs():
    class WithArgmax(xgrad.FunctionNode):
        def forward(self, inputs):
            x, = inputs
            return x * 2, numpy.asarray(numpy.argmax(x))

        def backward(self, target_input_indexes, grad_outputs):
            gy, g_index = grad_outputs
            assert g_index is None
            return gy * 2,

    x = _leaf([1.0, 5.0, 2.0])
    y, index = WithArgmax().apply([x])
    assert index.dtype.kind == 'i' and index.item() == 1
    assert not index.is_backprop_required(xgrad.anygraph)
    assert y.is_backprop_required()
    y.backward()
    _assert_array(x.grad, [2, 2, 2])


def test_same_input_twice_accumulates():
    x = _leaf([2.0, 3.0])
    y, = Mul().apply([x, x])
    y.backward()
    _assert_array(x.grad, [4, 6])


def test_composed_python_and_builtin_ops():
    x = _leaf([0.5, -1.0])
    w = _leaf([2.0, 3.0])
    h, = Mul().apply([x, w])
    y, = Exp().apply([h + 1])
    z = xgrad.sum(Square().apply([y])[0])
    z.backward()
    e = numpy.exp(numpy.array([0.5 * 2 + 1, -1.0 * 3 + 1]))
    _assert_array(x.grad, 2 * e * e * [2, 3])
    _assert_array(w.grad, 2 * e * e * [0.5, -1.0])


def test_gradient_dtype_follows_input_float32():
    x = _leaf([1.0, 2.0], F32)
    y, = Cube().apply([x])
    y.backward()
    _assert_array(x.grad, [3, 12], F32)


# ---------------------------------------------------------------------------
# First and second order with check_backward / check_double_backward

_CHECKED = [
    ('square', Square, 1, 1),
    ('exp', Exp, 1, 1),
    ('mul', Mul, 2, 1),
    ('add', Add, 2, 1),
    ('cube', Cube, 1, 1),
    ('powers_and_sum', PowersAndSum, 1, 3),
]


def _checked_args(n_in, n_out, dtype, seed):
    rs = numpy.random.RandomState(seed)
    xs = [_leaf(rs.uniform(0.5, 1.5, (2, 3)), dtype) for _ in range(n_in)]
    shapes = [(2, 3), (2, 3), ()][:n_out]
    gys = [_array(rs.uniform(-1, 1, s), dtype) for s in shapes]
    return rs, xs, gys


@pytest.mark.parametrize('dtype, eps, tol', [(F64, 1e-5, 1e-6), (F32, 1e-3, 2e-3)],
                         ids=['float64', 'float32'])
@pytest.mark.parametrize('name, cls, n_in, n_out', _CHECKED,
                         ids=[c[0] for c in _CHECKED])
def test_check_backward(name, cls, n_in, n_out, dtype, eps, tol):
    _, xs, gys = _checked_args(n_in, n_out, dtype, 1)
    xgrad.check_backward(_apply(cls), xs, gys, _eps(xs, eps), atol=tol, rtol=tol)


@pytest.mark.parametrize('dtype, eps, tol', [(F64, 1e-5, 1e-6), (F32, 1e-3, 2e-3)],
                         ids=['float64', 'float32'])
@pytest.mark.parametrize('name, cls, n_in, n_out', _CHECKED,
                         ids=[c[0] for c in _CHECKED])
def test_check_double_backward(name, cls, n_in, n_out, dtype, eps, tol):
    rs, xs, gys = _checked_args(n_in, n_out, dtype, 2)
    for gy in gys:
        gy.require_grad()
    ggxs = [_array(rs.uniform(-1, 1, x.shape), dtype) for x in xs]
    xgrad.check_double_backward(_apply(cls), xs, gys, ggxs, _eps(xs + gys, eps),
                                atol=tol, rtol=tol)


def test_check_backward_with_an_int_input():
    x = _leaf([1.0, 2.0, 3.0])
    indices = xgrad.array(numpy.array([2, 0, 2, 1]))

    def f(xs):
        return Take().apply([xs[0], indices])
    xgrad.check_backward(f, [x], [_array([1.0, -2.0, 0.5, 3.0])], _eps([x]),
                         atol=1e-6, rtol=1e-6)


def test_check_backward_with_an_int_input_among_the_inputs():
    # The int input is passed to check_backward itself (eps 0 for it): it gets
    # no gradient and is skipped.
    x = _leaf([1.0, -2.0, 3.0])
    s = xgrad.array(numpy.array([2, 3, -1], numpy.int64))
    eps = [xgrad.full((3,), 1e-5, F64), xgrad.zeros((3,), numpy.int64)]
    xgrad.check_backward(_apply(ScaleBy), [x, s], [_array([1.0, 0.5, 2.0])], eps,
                         atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------------------
# Double backprop: closed forms

def test_double_backprop_cube():
    x = _leaf([1.0, 2.0, -1.0])
    y, = Cube().apply([x])
    y.backward(enable_double_backprop=True)
    gx = x.grad
    _assert_array(gx, [3, 12, 3])
    assert gx.is_backprop_required()
    assert not gx.is_grad_required()
    x.cleargrad()
    gx.backward()
    _assert_array(x.grad, [6, 12, -6])


def test_double_backprop_square_through_retained_input():
    x = _leaf([1.0, 3.0])
    y, = Square().apply([x])
    gx, = xgrad.grad([y], [x], enable_double_backprop=True)
    _assert_array(gx, [2, 6])
    ggx, = xgrad.grad([gx], [x])
    _assert_array(ggx, [2, 2])


def test_double_backprop_exp_through_retained_output():
    x = _leaf([0.0, 1.0])
    y, = Exp().apply([x])
    gx, = xgrad.grad([y], [x], enable_double_backprop=True)
    ggx, = xgrad.grad([gx], [x])
    _assert_array(ggx, numpy.exp([0.0, 1.0]))


def test_double_backprop_mixed_partials():
    # f = a * b * b: df/da = b^2, d(df/da)/db = 2b.
    a = _leaf([2.0])
    b = _leaf([3.0])
    ab, = Mul().apply([a, b])
    f, = Mul().apply([ab, b])
    ga, gb = xgrad.grad([f], [a, b], enable_double_backprop=True)
    _assert_array(ga, [9])
    _assert_array(gb, [12])
    gab, gbb = xgrad.grad([ga], [a, b])
    assert gab is None or numpy.all(gab.to_numpy() == 0)
    _assert_array(gbb, [6])


def test_without_double_backprop_gradient_is_not_connected():
    x = _leaf([1.0, 2.0])
    y, = Cube().apply([x])
    y.backward()
    assert not x.grad.is_backprop_required()
    assert not y._is_chained()  # the graph was consumed


def test_with_double_backprop_graph_is_kept():
    x = _leaf([1.0, 2.0])
    y, = Square().apply([x])
    y.backward(enable_double_backprop=True)
    assert y._is_chained()
    y.backward(enable_double_backprop=True)  # again: gradients accumulate
    _assert_array(x.grad, [4, 8])


# ---------------------------------------------------------------------------
# Several outputs: only one used, backward gets None for the others

def test_multi_output_only_first_used():
    x = _leaf([1.0, 2.0])
    node = PowersAndSum()
    y0, y1, y2 = node.apply([x])
    _assert_array(y0, [1, 4])
    _assert_array(y1, [1, 8])
    _assert_array(y2, 3)
    del y1, y2
    y0.backward()
    g0, g1, g2 = node.seen
    _assert_array(g0, [1, 1])
    assert g1 is None
    assert g2 is None
    _assert_array(x.grad, [2, 4])


def test_multi_output_only_second_used_with_sibling_alive():
    x = _leaf([1.0, 2.0])
    node = PowersAndSum()
    y0, y1, y2 = node.apply([x])
    xgrad.backward(y1, grad_outputs=[_array([1.0, -1.0])])
    assert node.seen[0] is None
    assert node.seen[2] is None
    _assert_array(node.seen[1], [1, -1])
    _assert_array(x.grad, [3, -12])
    # The unused siblings were not given gradients.
    for y in (y0, y2):
        with pytest.raises(xgrad.XgradError):
            y.get_grad()


def test_multi_output_only_last_used_through_grad():
    x = _leaf([1.0, 2.0, 3.0])
    node = PowersAndSum()
    _, _, total = node.apply([x])
    gx, = xgrad.grad([total * 2], [x])
    assert node.seen[0] is None and node.seen[1] is None
    _assert_array(gx, [2, 2, 2])


def test_multi_output_all_used():
    x = _leaf([1.0, 2.0])
    node = PowersAndSum()
    y0, y1, y2 = node.apply([x])
    xgrad.backward([y0, y1, y2])
    assert all(g is not None for g in node.seen)
    _assert_array(x.grad, [2 + 3 + 1, 4 + 12 + 1])


def test_multi_output_one_used_double_backprop():
    x = _leaf([1.0, 2.0])
    node = PowersAndSum()
    _, y1, _ = node.apply([x])
    gx, = xgrad.grad([y1], [x], enable_double_backprop=True)
    _assert_array(gx, [3, 12])
    ggx, = xgrad.grad([gx], [x])
    _assert_array(ggx, [6, 12])


# ---------------------------------------------------------------------------
# Non-differentiable int inputs

def test_int_input_gets_no_gradient():
    x = _leaf([10.0, 20.0, 30.0])
    indices = xgrad.array(numpy.array([2, 2, 0]))
    node = Take()
    y, = node.apply([x, indices])
    _assert_array(y, [30, 30, 10])
    assert y.is_backprop_required()
    assert not indices.is_backprop_required(xgrad.anygraph)
    xgrad.backward(y, grad_outputs=[_array([1.0, 2.0, 4.0])])
    assert node.targets_seen == [(0,)]
    _assert_array(x.grad, [4, 0, 3])
    assert 'backprop_ids' not in repr(indices)


def test_int_input_retained_and_double_backprop():
    x = _leaf([1.0, 2.0])
    s = xgrad.array(numpy.array([3, -2]))
    y, = ScaleBy().apply([x, s])
    z, = Square().apply([y])
    gx, = xgrad.grad([z], [x], enable_double_backprop=True)
    _assert_array(gx, [2 * 9 * 1, 2 * 4 * 2])  # 2 s^2 x
    ggx, = xgrad.grad([gx], [x])
    _assert_array(ggx, [18, 8])


def test_only_int_inputs_records_nothing():
    i = xgrad.array(numpy.array([1, 2]))
    y, = Add().apply([i, i])
    assert y.dtype.kind == 'i'
    assert not y.is_backprop_required(xgrad.anygraph)


# ---------------------------------------------------------------------------
# One FunctionNode on two graphs at once (backprop_scope)

def test_recorded_on_two_graphs():
    with xgrad.backprop_scope('bp_a') as bp_a, xgrad.backprop_scope('bp_b') as bp_b:
        a = _leaf([2.0, 3.0], bp=bp_a)
        b = _leaf([5.0, 7.0], bp=bp_b)
        node = Mul()
        y, = node.apply([a, b])
        assert y.is_backprop_required(bp_a)
        assert y.is_backprop_required(bp_b)
        assert not y.is_backprop_required()  # not on the default graph
        assert y._is_chained(bp_a) and y._is_chained(bp_b)
        # Inner graph first (outer-after-inner is allowed).
        xgrad.backward(y, bp_b)
        assert node.targets == (1,)
        _assert_array(b.get_grad(bp_b), [2, 3])
        xgrad.backward(y, bp_a)
        assert node.targets == (0,)
        _assert_array(a.get_grad(bp_a), [5, 7])
        with pytest.raises(xgrad.XgradError):
            a.get_grad(bp_b)


def test_recorded_on_two_graphs_same_input():
    with xgrad.backprop_scope('bp1') as bp1, xgrad.backprop_scope('bp2') as bp2:
        x = _leaf([1.0, 2.0], bp=bp1)
        x.require_grad(bp2)
        y, = Cube().apply([x])
        for bp in (bp2, bp1):
            assert y.is_backprop_required(bp)
            xgrad.backward(y, bp)
            _assert_array(x.get_grad(bp), [3, 12])


def test_two_graphs_double_backprop_rule():
    # semantics §9 worked example, with Python FunctionNodes: bp_x1 outer,
    # bp_x0 inner; h = x0 * (x0 + x1).
    with xgrad.backprop_scope('bp_x1') as bp_x1, \
            xgrad.backprop_scope('bp_x0') as bp_x0:
        x0 = _leaf([2.0], bp=bp_x0)
        x1 = _leaf([3.0], bp=bp_x1)
        s, = Add().apply([x0, x1])
        h, = Mul().apply([x0, s])
        xgrad.backward(h, bp_x0)
        gx0 = x0.get_grad(bp_x0)
        _assert_array(gx0, [7])
        assert not gx0.is_backprop_required(bp_x0)
        assert gx0.is_backprop_required(bp_x1)
        z, = Mul().apply([x0, gx0])
        xgrad.backward(z, bp_x1)
        _assert_array(x1.get_grad(bp_x1), [2])
        with pytest.raises(xgrad.XgradError):
            x0.get_grad(bp_x1)


def test_two_graphs_check_backward_on_each():
    with xgrad.backprop_scope('g1') as g1, xgrad.backprop_scope('g2') as g2:
        a = _leaf([0.5, 1.5], bp=g1)
        b = _leaf([2.0, -1.0], bp=g2)
        a.require_grad(g2)
        b.require_grad(g1)
        for bp in (g2, g1):
            xgrad.check_backward(_apply(Mul), [a, b], [_array([1.0, 2.0])],
                                 _eps([a, b]), atol=1e-6, rtol=1e-6, backprop_id=bp)


# ---------------------------------------------------------------------------
# xgrad._function_node_forward: the graft hook Chainer uses (semantics §10)

class StandIn:
    """Plays chainer.FunctionNode: y = x0^2 * x2 (x1 unused, may be None),
    second output y2 = x0 + x2. Backward from retained inputs x0, x2 and
    retained output y."""

    def __init__(self):
        self.calls = []

    def _backward_chainerx(self, target_input_indexes, grad_outputs,
                           retained_inputs, retained_outputs):
        self.calls.append((list(target_input_indexes), list(grad_outputs),
                           list(retained_inputs), list(retained_outputs)))
        x0, x2 = retained_inputs
        gy, gy2 = grad_outputs
        out = []
        for i in target_input_indexes:
            if i == 0:
                g = 2 * x0 * x2 * gy if gy is not None else xgrad.zeros_like(x0)
            elif i == 2:
                g = x0 * x0 * gy if gy is not None else xgrad.zeros_like(x2)
            else:
                g = xgrad.zeros_like(x0)
            if gy2 is not None:
                g = g + gy2
            out.append(g)
        return out


def _graft(x0, x1, x2, obj=None, with_none=True):
    """Compute the outputs the way Chainer does (outside the graph), then graft."""
    obj = StandIn() if obj is None else obj
    d0, d2 = x0.to_numpy(), x2.to_numpy()
    y = xgrad.array(d0 * d0 * d2)
    y2 = xgrad.array(d0 + d2)
    assert not y.is_backprop_required(xgrad.anygraph)
    inputs = [x0, None if with_none else x1, x2]
    xgrad._function_node_forward(obj, inputs, [y, y2], [0, 2], [0])
    return obj, y, y2


def test_graft_records_outputs():
    x0 = _leaf([1.0, 2.0])
    x2 = _leaf([3.0, 4.0])
    obj, y, y2 = _graft(x0, None, x2)
    for out in (y, y2):
        assert out.is_backprop_required()
        assert out._is_chained()
        assert not out.is_grad_required()
    assert obj.calls == []


def test_graft_backward_arguments():
    x0 = _leaf([1.0, 2.0])
    x2 = _leaf([3.0, 4.0])
    obj, y, y2 = _graft(x0, None, x2)
    xgrad.backward(y, grad_outputs=[_array([1.0, 10.0])])
    assert len(obj.calls) == 1
    targets, gys, retained_in, retained_out = obj.calls[0]
    assert targets == [0, 2]  # original positions; the None input is skipped
    assert len(gys) == 2
    _assert_array(gys[0], [1, 10])
    assert gys[1] is None  # y2 got no gradient
    assert len(retained_in) == 2 and len(retained_out) == 1
    _assert_array(retained_in[0], [1, 2])
    _assert_array(retained_in[1], [3, 4])
    _assert_array(retained_out[0], [3, 16])
    for a in retained_in + retained_out:
        assert isinstance(a, xgrad.ndarray)
    _assert_array(x0.grad, [2 * 1 * 3 * 1, 2 * 2 * 4 * 10])
    _assert_array(x2.grad, [1, 40])


def test_graft_both_outputs():
    x0 = _leaf([1.0, 2.0])
    x2 = _leaf([3.0, 4.0])
    obj, y, y2 = _graft(x0, None, x2)
    xgrad.backward([y, y2])
    _, gys, _, _ = obj.calls[0]
    assert gys[0] is not None and gys[1] is not None
    _assert_array(x0.grad, [2 * 1 * 3 + 1, 2 * 2 * 4 + 1])
    _assert_array(x2.grad, [1 + 1, 4 + 1])


def test_graft_constant_input_is_not_a_target():
    x0 = _leaf([1.0, 2.0])
    x1 = _leaf([0.0, 0.0])
    x2 = _array([3.0, 4.0])  # constant
    obj, y, _ = _graft(x0, x1, x2, with_none=False)
    y.backward()
    targets = obj.calls[0][0]
    assert targets == [0, 1]
    _assert_array(x0.grad, [6, 16])
    _assert_array(x1.grad, [0, 0])


def _run_isolated(code):
    """Run ``code`` in a fresh interpreter (so that a crash of the engine
    fails one test instead of killing the test run); returns the process."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)], cwd=root,
                          capture_output=True, text=True, timeout=120)


_RETAINED_NONE_SLOTS = """
    import numpy, xgrad

    class Recorder:
        def _backward_chainerx(self, target_input_indexes, grad_outputs,
                               retained_inputs, retained_outputs):
            self.args = (list(target_input_indexes), list(grad_outputs),
                         list(retained_inputs), list(retained_outputs))
            return [grad_outputs[0] * 3 for _ in target_input_indexes]

    x0 = xgrad.array([1.0, 2.0]).require_grad()
    x2 = xgrad.array([4.0, 5.0]).require_grad()
    y = xgrad.array([3.0, 6.0])
    rec = Recorder()
    xgrad._function_node_forward(rec, [x0, None, x2], [y, None], [0, 1, 2], [0, 1])
    y.backward()
    targets, gys, retained_in, retained_out = rec.args
    assert targets == [0, 2], targets
    assert len(gys) == 2 and gys[1] is None
    assert len(retained_in) == 3 and retained_in[1] is None, retained_in
    assert retained_in[0].tolist() == [1, 2] and retained_in[2].tolist() == [4, 5]
    assert len(retained_out) == 2 and retained_out[1] is None, retained_out
    assert retained_out[0].tolist() == [3, 6]
    assert x0.grad.tolist() == [3, 3] and x2.grad.tolist() == [3, 3]
    print('OK')
"""


def test_graft_retained_none_output_slot():
    # A retained output slot that is None is passed as None (semantics §10).
    proc = _run_isolated(_RETAINED_NONE_SLOTS.replace(
        '[0, 1, 2], [0, 1])', '[0, 2], [0, 1])').replace(
        'assert len(retained_in) == 3 and retained_in[1] is None, retained_in',
        'retained_in = [retained_in[0], None, retained_in[1]]'))
    assert proc.returncode == 0 and 'OK' in proc.stdout, proc.stderr[-2000:]


def test_graft_retained_none_input_slot():
    proc = _run_isolated(_RETAINED_NONE_SLOTS)
    assert proc.returncode == 0 and 'OK' in proc.stdout, (
        proc.returncode, proc.stderr[-2000:])


def test_function_node_retained_none_input_does_not_crash():
    proc = _run_isolated("""
        import xgrad

        class Node(xgrad.FunctionNode):
            def forward(self, inputs):
                self.retain_inputs((0, 1))
                return inputs[0] * 2,

            def backward(self, target_input_indexes, grad_outputs):
                return grad_outputs[0] * 2,

        x = xgrad.array([1.0, 2.0]).require_grad()
        try:
            y, = Node().apply([x, None])
            y.backward()
            assert x.grad.tolist() == [2, 2]
        except (TypeError, xgrad.XgradError) as e:
            print('refused:', e)
        print('OK')
    """)
    assert proc.returncode == 0 and 'OK' in proc.stdout, (
        proc.returncode, proc.stderr[-2000:])


def test_graft_check_backward():
    def f(xs):
        x0, x2 = xs
        _, y, y2 = _graft(x0, None, x2)
        return y, y2
    rs = numpy.random.RandomState(3)
    xs = [_leaf(rs.uniform(0.5, 1.5, (2, 3))) for _ in range(2)]
    gys = [_array(rs.uniform(-1, 1, (2, 3))) for _ in range(2)]
    xgrad.check_backward(f, xs, gys, _eps(xs), atol=1e-6, rtol=1e-6)


def test_graft_double_backprop():
    # d/dx0 of (x0^2 x2) is 2 x0 x2, computed from the retained inputs, which
    # are connected to the graph during a double-backprop pass.
    x0 = _leaf([1.0, 2.0])
    x2 = _leaf([3.0, 5.0])
    _, y, _ = _graft(x0, None, x2)
    g0, g2 = xgrad.grad([y], [x0, x2], enable_double_backprop=True)
    _assert_array(g0, [6, 20])
    _assert_array(g2, [1, 4])
    assert g0.is_backprop_required() and g2.is_backprop_required()
    h0, h2 = xgrad.grad([g0], [x0, x2])
    _assert_array(h0, [6, 10])   # 2 x2
    _assert_array(h2, [2, 4])    # 2 x0


def test_graft_check_double_backward():
    def f(xs):
        x0, x2 = xs
        _, y, _ = _graft(x0, None, x2)
        return y,
    rs = numpy.random.RandomState(4)
    xs = [_leaf(rs.uniform(0.5, 1.5, (3,))) for _ in range(2)]
    gys = [_leaf(rs.uniform(-1, 1, (3,)))]
    ggxs = [_array(rs.uniform(-1, 1, (3,))) for _ in range(2)]
    xgrad.check_double_backward(f, xs, gys, ggxs, _eps(xs + gys), atol=1e-6,
                                rtol=1e-6)


def test_graft_on_two_graphs():
    with xgrad.backprop_scope('ga') as ga, xgrad.backprop_scope('gb') as gb:
        x0 = _leaf([1.0, 2.0], bp=ga)
        x2 = _leaf([3.0, 4.0], bp=gb)
        obj, y, _ = _graft(x0, None, x2)
        assert y.is_backprop_required(ga) and y.is_backprop_required(gb)
        assert not y.is_backprop_required()
        xgrad.backward(y, gb)
        assert obj.calls[-1][0] == [2]
        _assert_array(x2.get_grad(gb), [1, 4])
        xgrad.backward(y, ga)
        assert obj.calls[-1][0] == [0]
        _assert_array(x0.get_grad(ga), [6, 16])


def test_graft_without_graph_records_nothing():
    x0 = _array([1.0])
    x2 = _array([2.0])
    obj, y, y2 = _graft(x0, None, x2)
    assert not y.is_backprop_required(xgrad.anygraph)
    assert not y2.is_backprop_required(xgrad.anygraph)


def test_graft_keeps_the_function_object_alive_with_the_graph():
    x0 = _leaf([1.0])
    x2 = _leaf([2.0])
    obj = StandIn()
    ref = weakref.ref(obj)
    y, y2 = _graft(x0, None, x2, obj=obj)[1:]
    del obj
    gc.collect()
    assert ref() is not None
    del y, y2
    gc.collect()
    assert ref() is None


def test_graft_wrong_gradient_shape_names_the_op():
    class Bad(StandIn):
        def _backward_chainerx(self, target_input_indexes, grad_outputs,
                               retained_inputs, retained_outputs):
            return [xgrad.zeros((5,), F64) for _ in target_input_indexes]

    x0 = _leaf([1.0, 2.0])
    x2 = _leaf([3.0, 4.0])
    _, y, _ = _graft(x0, None, x2, obj=Bad())
    with pytest.raises(xgrad.GradientError, match=r'Op: chainer_function'):
        y.backward()
    assert x0.grad is None and x2.grad is None


@pytest.mark.parametrize('retain_in, retain_out', [
    ([2, 0], [0]), ([0, 0], [0]), ([0, 3], [0]), ([0], [2]), ([0], [-1])],
    ids=['decreasing', 'repeated', 'input_out_of_range', 'output_out_of_range',
         'negative'])
def test_graft_bad_retain_indexes(retain_in, retain_out):
    x0 = _leaf([1.0])
    x2 = _leaf([2.0])
    y = _array([2.0])
    y2 = _array([3.0])
    with pytest.raises(xgrad.XgradError):
        xgrad._function_node_forward(StandIn(), [x0, None, x2], [y, y2],
                                     retain_in, retain_out)
    assert not y.is_backprop_required(xgrad.anygraph)
    assert not y2.is_backprop_required(xgrad.anygraph)


def test_graft_outputs_already_in_a_graph():
    x0 = _leaf([1.0])
    x2 = _leaf([2.0])
    y = x0 * 2  # has a node
    y2 = _array([3.0])
    with pytest.raises(xgrad.XgradError, match='graph'):
        xgrad._function_node_forward(StandIn(), [x0, None, x2], [y, y2], [0, 2],
                                     [0])


# ---------------------------------------------------------------------------
# A retained input whose array died is handed to backward as a view, as
# ChainerX's GetRetainedInput does: what the backward does to that array
# (Chainer calls require_grad on every array it wraps) must not reach the
# input's node, whose gradient would then be stored and added in again by a
# later pass (Chainer's test_linear double backward with mixed dtypes).

class _SquareRequiringGrad(xgrad.FunctionNode):
    def forward(self, inputs):
        self.retain_inputs((0,))
        x, = inputs
        return x * x,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        x.require_grad()
        self.kept = x  # Chainer keeps the arrays it hands to backward, too
        return 2 * x * grad_outputs[0],


def test_second_order_through_a_dead_retained_input_that_backward_marks():
    x0 = xgrad.array(numpy.array([0.5, -1.0, 2.0])).require_grad()

    def first_order():
        h = x0 * 3.0  # an intermediate that is dead before backward runs
        y, = _SquareRequiringGrad().apply((h,))
        return y

    y = first_order()
    gx, = xgrad.grad([y], [x0], grad_outputs=[xgrad.ones_like(y)],
                     enable_double_backprop=True)
    numpy.testing.assert_allclose(gx.to_numpy(), 18 * x0.to_numpy())  # d(9 x^2)/dx
    xgrad.sum(gx).backward()
    numpy.testing.assert_allclose(x0.grad.to_numpy(), [18.0, 18.0, 18.0])
