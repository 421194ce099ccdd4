"""xgrad.backward and xgrad.grad (semantics.md §6-§9, §13, decisions 2-4 and 7).

Scenarios 1-23 of the acceptance checklist (semantics.md §16) are marked with
their number. Unless a test says otherwise: shape (1,), float32, default graph.
"""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# gradients of small integers (ones, twos, sums of a few of them), exact in
# any order, and data left unchanged.


SHAPE = (1,)
DTYPE = xgrad.float32

parametrize_method = pytest.mark.parametrize('method', ['backward', 'grad'])


# ---------------------------------------------------------------------------
# Helpers

def _full(value, shape=SHAPE, dtype=DTYPE, device=None):
    return xgrad.full(shape, value, dtype, device=device)


def _leaf(value, backprop_id=None, shape=SHAPE):
    return _full(value, shape).require_grad(backprop_id)


def _as_expected(expected, shape=SHAPE):
    """A number becomes a float32 array of `shape`; arrays and None stay."""
    if expected is None or isinstance(expected, xgrad.ndarray):
        return expected
    return _full(expected, shape)


def _assert_array(actual, expected, shape=SHAPE):
    """Same shape, dtype and values; `expected`: None, a number or an array."""
    expected = _as_expected(expected, shape)
    if expected is None:
        assert actual is None
        return
    assert actual is not None
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    numpy.testing.assert_array_equal(
        numpy.asarray(actual), numpy.asarray(expected))


def _assert_not_grad_required(array, backprop_id=None):
    assert not array.is_grad_required(backprop_id)
    with pytest.raises(xgrad.XgradError):
        array.get_grad(backprop_id)


def _set_output_grads(ys, gys, backprop_id):
    if gys is None:
        return
    assert len(gys) == len(ys)
    for y, gy in zip(ys, gys):
        assert not y.is_grad_required(backprop_id)
        y.set_grad(_as_expected(gy), backprop_id)


def _check_output_grads(ys, gys, backprop_id):
    """Outputs given a seed hold it; the others are not grad-required."""
    if gys is None:
        gys = (None,) * len(ys)
    for y, gy in zip(ys, gys):
        if gy is None:
            _assert_not_grad_required(y, backprop_id)
        else:
            assert y.is_grad_required(backprop_id)
            _assert_array(y.get_grad(backprop_id), gy)


def _check_backward(fprop, xs, expected_gxs, gys=None, backprop_id=None):
    """backward(ys) stores the expected grads; None means get_grad raises."""
    assert len(xs) == len(expected_gxs)
    ys = fprop(*xs)
    _set_output_grads(ys, gys, backprop_id)

    xgrad.backward(ys, backprop_id)

    for x, expected_gx in zip(xs, expected_gxs):
        if expected_gx is None:
            with pytest.raises(xgrad.XgradError):
                x.get_grad(backprop_id)
        else:
            _assert_array(x.get_grad(backprop_id), expected_gx)
    _check_output_grads(ys, gys, backprop_id)


def _stored_grads(xs, backprop_id):
    """A snapshot of what each input holds: a copy of its grad's values,
    None, or XgradError if it is not grad-required."""
    def snapshot(x):
        if not x.is_grad_required(backprop_id):
            return xgrad.XgradError
        grad = x.get_grad(backprop_id)
        return None if grad is None else numpy.array(numpy.asarray(grad))
    return [snapshot(x) for x in xs]


def _check_stored_grads_unchanged(xs, stored, backprop_id):
    for x, before in zip(xs, stored):
        if before is xgrad.XgradError:
            _assert_not_grad_required(x, backprop_id)
            continue
        assert x.is_grad_required(backprop_id)
        after = x.get_grad(backprop_id)
        if before is None:
            assert after is None
        else:
            assert after is not None
            numpy.testing.assert_array_equal(numpy.asarray(after), before)


def _check_grad(fprop, xs, expected_gxs, gys=None, backprop_id=None,
                xs_indices=None, ys_indices=None):
    """grad(ys, xs) returns the expected grads (None where there is none) and
    leaves the inputs' stored grads as they were."""
    ys = fprop(*xs)
    _set_output_grads(ys, gys, backprop_id)
    stored = _stored_grads(xs, backprop_id)

    wrt = xs if xs_indices is None else [xs[i] for i in xs_indices]
    of = ys if ys_indices is None else [ys[i] for i in ys_indices]
    assert len(wrt) == len(expected_gxs)
    gxs = xgrad.grad(of, wrt, backprop_id)

    assert len(gxs) == len(expected_gxs)
    for gx, expected_gx in zip(gxs, expected_gxs):
        _assert_array(gx, expected_gx)
    _check_output_grads(ys, gys, backprop_id)
    _check_stored_grads_unchanged(xs, stored, backprop_id)


def _check_backprop(method, fprop, xs, expected_gxs, gys=None,
                    backprop_id=None):
    check = {'backward': _check_backward, 'grad': _check_grad}[method]
    check(fprop, xs, expected_gxs, gys=gys, backprop_id=backprop_id)


def _identity(x):
    return x.copy(),


def _add(x0, x1):
    return x0 + x1,


def _mul(x0, x1):
    return x0 * x1,


def _add_mul(x0, x1, x2):
    return x0 * (x1 + x2),


def _add_and_mul(x0, x1):
    return x0 + x1, x0 * x1


def _backward_with_double_backprop(x0, x1):
    assert x0.is_grad_required()
    h = x0 * (x0 + x1)
    xgrad.backward(h, enable_double_backprop=True)
    gx0 = x0.get_grad()  # 2 * x0 + x1
    x0.cleargrad()
    return gx0,


def _retain_grad_graph(x0, x1):
    """a = 2 x0, b = a + x1, c = a + b: dc/dx0 = 4, dc/db = 1, dc/da = 2."""
    a = x0 * 2
    b = a + x1
    c = a + b
    return a, b, c


# ---------------------------------------------------------------------------
# Scenarios 1-17: one graph, then several

# 1
@parametrize_method
def test_identity(method):
    _check_backprop(method, _identity, (_leaf(5),), (1,))


# 2
@parametrize_method
def test_add(method):
    _check_backprop(method, _add, (_leaf(3), _leaf(5)), (1, 1))


# 3
@parametrize_method
def test_mul(method):
    _check_backprop(method, _mul, (_leaf(3), _leaf(5)), (5, 3))


# 4
@parametrize_method
def test_add_mul(method):
    _check_backprop(
        method, _add_mul, (_leaf(2), _leaf(9), _leaf(5)), (14, 2, 2))


# 5
@parametrize_method
def test_add_mul_extra_input_without_grad(method):
    xs = (_leaf(2), _leaf(3), _full(4))
    _check_backprop(method, _add_mul, xs, (7, 2, None))


# 6
def test_backward_sole_array_node():
    x = _leaf(2)
    xgrad.backward(x)
    _assert_array(x.get_grad(), 1)


# 6
def test_grad_sole_array_node():
    x = _leaf(2)
    gxs = xgrad.grad([x], [x])
    assert len(gxs) == 1
    _assert_array(gxs[0], 1)
    assert x.get_grad() is None


# 7
@parametrize_method
def test_double_backprop(method):
    xs = (_leaf(2), _full(3))
    _check_backprop(method, _backward_with_double_backprop, xs, (2, None))


# 8
@pytest.mark.parametrize('method0', ['backward', 'grad'])
@pytest.mark.parametrize('method1', ['backward', 'grad'])
def test_multiple_graphs_double_backprop(method0, method1):
    with xgrad.backprop_scope('bp_x1') as bp_x1, \
            xgrad.backprop_scope('bp_x0') as bp_x0:
        xs = (_leaf(2, bp_x0), _leaf(3, bp_x1))

        def fprop(x0, x1):
            h = x0 * (x0 + x1)
            if method0 == 'backward':
                xgrad.backward(h, bp_x0)
                gx0 = x0.get_grad(bp_x0)
            else:
                gx0, = xgrad.grad([h], [x0], bp_x0)
            _assert_array(gx0, 7)  # 2 * x0 + x1
            assert not gx0.is_backprop_required(bp_x0)
            assert gx0.is_backprop_required(bp_x1)
            return x0 * gx0,

        _check_backprop(method1, fprop, xs, (None, 2), backprop_id=bp_x1)


# 9
@parametrize_method
def test_identical_input_to_multiple_ops(method):
    def fprop(x0, x1):
        return x0 * (x0 + x1),

    _check_backprop(method, fprop, (_leaf(2), _full(3)), (7, None))


# 10
@parametrize_method
def test_identical_inputs(method):
    def fprop(x):
        return x + x,

    _check_backprop(method, fprop, (_leaf(2),), (2,))


# 11
@parametrize_method
def test_identical_intermediate_nodes(method):
    def fprop(x):
        h = x + x
        return h + h,

    _check_backprop(method, fprop, (_leaf(2),), (4,))


# 12: backward accumulates into the given grad; grad returns 1 and leaves
# the stored 1 alone (checked by _check_grad).
@parametrize_method
def test_given_input_grad(method):
    def fprop(x):
        x.set_grad(_full(1))
        return x.copy(),

    expected = 2 if method == 'backward' else 1
    _check_backprop(method, fprop, (_leaf(1),), (expected,))


# 13
@parametrize_method
def test_given_output_grad(method):
    _check_backprop(method, _mul, (_leaf(2), _full(3)), (6, None), gys=(2,))


# 14
@parametrize_method
def test_multiple_graphs_basic(method):
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2:
        xs = (_leaf(2, bp1), _leaf(5, bp2))
        _check_backprop(method, _mul, xs, (5, None), backprop_id=bp1)


# 15
@parametrize_method
def test_graph_without_output_node_is_ignored(method):
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2:
        x0, x1 = _leaf(2, bp1), _leaf(5, bp1)
        y = x0 * x1

        if method == 'backward':
            xgrad.backward(y, bp2)
            assert x0.get_grad(bp1) is None
            assert x1.get_grad(bp1) is None
        else:
            assert xgrad.grad([y], [x0, x1], bp2) == [None, None]

        for x in (x0, x1):
            with pytest.raises(xgrad.XgradError):
                x.get_grad(bp2)


# 16
@pytest.mark.parametrize('method0', ['backward', 'grad'])
@pytest.mark.parametrize('method1', ['backward', 'grad'])
@pytest.mark.parametrize('method2', ['backward', 'grad'])
def test_multiple_graphs_reuse(method0, method1, method2):
    with xgrad.backprop_scope('bp2') as bp2, \
            xgrad.backprop_scope('bp1') as bp1:
        xs = (_leaf(2, bp1), _leaf(5, bp2))
        x1, x2 = xs

        _check_backprop(method0, _mul, xs, (5, None), backprop_id=bp1)

        x1.cleargrad(bp1)
        x2.cleargrad(bp2)
        assert x1.get_grad(bp1) is None
        assert x2.get_grad(bp2) is None

        _check_backprop(method1, _mul, xs, (None, 2), backprop_id=bp2)

        x1.cleargrad(bp1)
        x2.cleargrad(bp2)
        x1.require_grad(bp2)
        x2.require_grad(bp1)

        _check_backprop(method2, _mul, xs, (5, 2), backprop_id=bp2)

        assert x1.get_grad(bp1) is None
        assert x2.get_grad(bp1) is None


# 17
@parametrize_method
def test_multiple_outputs(method):
    _check_backprop(method, _add_and_mul, (_leaf(3), _leaf(5)), (6, 4))


# 18
def test_create_and_release_backprop_id():
    context = xgrad.Context()
    backprop_id = context.make_backprop_id('bp1')

    assert backprop_id.name == 'bp1'
    assert backprop_id.context == context

    context._check_valid_backprop_id(backprop_id)
    context.release_backprop_id(backprop_id)

    with pytest.raises(xgrad.XgradError):
        context._check_valid_backprop_id(backprop_id)


# ---------------------------------------------------------------------------
# Scenarios 19-23: xgrad.grad options

# 19: d(x0 + x1)/d(x0, x1) = (1, 1), d(x0 * x1)/d(x0, x1) = (5, 3) at (3, 5).
_PARTIALS = ((1, 1), (5, 3))
_SUBSETS = [[], [0], [1], [0, 1], [1, 0]]


@pytest.mark.parametrize('xs_indices', _SUBSETS)
@pytest.mark.parametrize('ys_indices', _SUBSETS)
def test_grad_not_all_inputs_outputs_in_graph(xs_indices, ys_indices):
    if ys_indices:
        expected = tuple(sum(_PARTIALS[j][i] for j in ys_indices)
                         for i in xs_indices)
    else:
        expected = (None,) * len(xs_indices)
    _check_grad(_add_and_mul, (_leaf(3), _leaf(5)), expected,
                xs_indices=xs_indices, ys_indices=ys_indices)


def test_grad_empty_inputs_returns_empty_list():  # 19
    x = _leaf(3)
    assert xgrad.grad([x * x], []) == []


# 20
def test_grad_with_grad_outputs():
    x0, x1 = _leaf(3), _leaf(5)
    y0, y1 = _add_and_mul(x0, x1)
    gy0, gy1 = _leaf(10), _leaf(20)

    gx0, gx1 = xgrad.grad([y0, y1], [x0, x1], grad_outputs=[gy0, gy1])

    _assert_array(gx0, 110)  # 10 * 1 + 20 * 5
    _assert_array(gx1, 70)   # 10 * 1 + 20 * 3
    for y in (y0, y1):
        _assert_not_grad_required(y)
    _assert_array(gy0, 10)
    _assert_array(gy1, 20)
    assert gy0.get_grad() is None and gy1.get_grad() is None
    assert x0.get_grad() is None and x1.get_grad() is None


# 21
def test_grad_with_grad_outputs_of_wrong_length():
    x0, x1 = _leaf(3), _leaf(5)
    y0, y1 = _add_and_mul(x0, x1)
    with pytest.raises(xgrad.GradientError):
        xgrad.grad([y0, y1], [x0, x1], grad_outputs=[_full(10)])


# 22
def test_grad_with_set_grad():
    x0, x1 = _leaf(3), _leaf(5)
    gx0, gx1 = xgrad.grad(list(_add_and_mul(x0, x1)), [x0, x1], set_grad=True)

    _assert_array(gx0, 6)
    _assert_array(gx1, 4)
    assert x0.get_grad() is gx0
    assert x1.get_grad() is gx1


# 23
def test_grad_with_retain_grad():
    x0, x1 = _leaf(3), _leaf(5)
    a, b, c = _retain_grad_graph(x0, x1)

    gx0, = xgrad.grad([c], [x0], retain_grad=True)

    _assert_array(gx0, 4)
    assert a.is_grad_required() and b.is_grad_required()
    _assert_array(b.get_grad(), 1)
    _assert_array(a.get_grad(), 2)
    assert x0.get_grad() is None


def test_grad_with_respect_to_an_intermediate():  # §7
    x0, x1 = _leaf(3), _leaf(5)
    a, b, c = _retain_grad_graph(x0, x1)
    ga, gb = xgrad.grad([c], [a, b])
    _assert_array(ga, 2)
    _assert_array(gb, 1)


# Decision 4: grad_inputs are added to the result.
def test_grad_with_grad_inputs():
    x0, x1 = _leaf(3), _leaf(5)
    gx0, gx1 = xgrad.grad(
        [x0 * x1], [x0, x1], grad_inputs=[_full(100), _full(200)])
    _assert_array(gx0, 105)
    _assert_array(gx1, 203)
    assert x0.get_grad() is None and x1.get_grad() is None


# Decision 4: a duplicated input gets its gradient at every position.
def test_grad_duplicated_input_gets_gradient_at_every_position():
    x0, x1 = _leaf(3), _leaf(5)
    gxs = xgrad.grad([x0 * x1], [x0, x1, x0])
    assert len(gxs) == 3
    _assert_array(gxs[0], 5)
    _assert_array(gxs[1], 3)
    _assert_array(gxs[2], 5)


# ---------------------------------------------------------------------------
# Decision 3: backward's arguments

def test_backward_of_empty_list_does_nothing():
    xgrad.backward([])


# seed test_backward_keyword_arguments (the first argument is positional-only)
def test_backward_keyword_arguments():
    with xgrad.backprop_scope('bp1') as bp1:
        x = _leaf(2, bp1)
        xgrad.backward(x, backprop_id=bp1)
        _assert_array(x.get_grad(bp1), 1)
        with pytest.raises(TypeError, match='incompatible function arguments'):
            xgrad.backward(body=x, backprop_id=bp1)


def test_backward_ignores_outputs_without_a_node():  # decision 2
    x = _leaf(3)
    xgrad.backward([x * x, _full(4)])
    _assert_array(x.get_grad(), 6)


def test_backward_duplicate_outputs_are_seeded_once():  # §6
    x = _leaf(3)
    y = x * x
    xgrad.backward([y, y])
    _assert_array(x.get_grad(), 6)


def test_backward_default_seed_is_ones_of_any_shape():
    x = xgrad.array([[1, 2, 3], [4, 5, 6]], DTYPE).require_grad()
    xgrad.backward(x * x)
    _assert_array(x.get_grad(), xgrad.array([[2, 4, 6], [8, 10, 12]], DTYPE))


def test_backward_with_grad_outputs():
    x0, x1 = _leaf(3), _leaf(5)
    y0, y1 = _add_and_mul(x0, x1)
    gy0, gy1 = _full(10), _full(20)

    xgrad.backward([y0, y1], grad_outputs=[gy0, gy1])

    _assert_array(x0.get_grad(), 110)  # 10 * 1 + 20 * 5
    _assert_array(x1.get_grad(), 70)   # 10 * 1 + 20 * 3
    _assert_array(gy0, 10)
    _assert_array(gy1, 20)


def test_backward_grad_outputs_are_not_stored_in_outputs():
    x0, x1 = _leaf(3), _leaf(5)
    y0, y1 = _add_and_mul(x0, x1)

    xgrad.backward([y0, y1], grad_outputs=[_full(10), _full(20)])

    for y in (y0, y1):
        _assert_not_grad_required(y)
        y.require_grad()
        assert y.get_grad() is None


def test_backward_grad_output_none_skips_that_output():
    x0, x1 = _leaf(3), _leaf(5)
    y0, y1 = _add_and_mul(x0, x1)

    xgrad.backward([y0, y1], grad_outputs=[None, _full(20)])

    _assert_array(x0.get_grad(), 100)  # 20 * 5
    _assert_array(x1.get_grad(), 60)   # 20 * 3


def test_backward_grad_output_none_uses_the_stored_grad():
    x0, x1 = _leaf(3), _leaf(5)
    y0, y1 = _add_and_mul(x0, x1)
    stored = _full(10)
    y0.set_grad(stored)

    xgrad.backward([y0, y1], grad_outputs=[None, _full(20)])

    _assert_array(x0.get_grad(), 110)
    _assert_array(x1.get_grad(), 70)
    assert y0.is_grad_required()
    assert y0.get_grad() is stored
    _assert_array(stored, 10)


def test_backward_grad_outputs_of_wrong_length():
    x0, x1 = _leaf(3), _leaf(5)
    y0, y1 = _add_and_mul(x0, x1)
    with pytest.raises(xgrad.GradientError):
        xgrad.backward([y0, y1], grad_outputs=[_full(10)])
    with pytest.raises(xgrad.GradientError):
        xgrad.backward([y0], grad_outputs=[_full(10), _full(20)])


@pytest.mark.parametrize('bad_seed', [
    lambda: _full(1, shape=(2,)),                   # shape
    lambda: _full(1, dtype=xgrad.float64),          # dtype
    lambda: _full(1, device='native:1'),            # device (§13)
], ids=['shape', 'dtype', 'device'])
def test_backward_grad_output_that_does_not_match_its_output(bad_seed):
    x = _leaf(3)
    with pytest.raises(xgrad.GradientError):
        xgrad.backward([x * x], grad_outputs=[bad_seed()])


def test_backward_non_float_output_given_a_seed():
    y = xgrad.full(SHAPE, 3, xgrad.int32)
    with pytest.raises(xgrad.DtypeError):
        xgrad.backward([y], grad_outputs=[xgrad.full(SHAPE, 1, xgrad.int32)])


def test_backward_without_retain_grad_leaves_no_grad_behind():
    x0, x1 = _leaf(3), _leaf(5)
    h = x0 * x1
    y = h + x0

    xgrad.backward(y)

    _assert_array(x0.get_grad(), 6)  # x1 + 1
    _assert_array(x1.get_grad(), 3)
    for array in (h, y):  # intermediate, and output with the default seed
        _assert_not_grad_required(array)
        array.require_grad()
        assert array.get_grad() is None


def test_backward_keeps_grad_of_grad_required_intermediate():  # §6
    x0, x1 = _leaf(3), _leaf(5)
    a, b, c = _retain_grad_graph(x0, x1)
    a.require_grad()

    xgrad.backward(c)

    _assert_array(a.get_grad(), 2)
    _assert_not_grad_required(b)


def test_backward_with_retain_grad():
    x0, x1 = _leaf(3), _leaf(5)
    a, b, c = _retain_grad_graph(x0, x1)

    xgrad.backward(c, retain_grad=True)

    _assert_array(x0.get_grad(), 4)
    _assert_array(x1.get_grad(), 1)
    assert a.is_grad_required() and b.is_grad_required()
    _assert_array(a.get_grad(), 2)
    _assert_array(b.get_grad(), 1)


# ---------------------------------------------------------------------------
# Decisions 3 and 7: loss_scale (seeds scaled, what is stored/returned not)

LOSS_SCALES = [2, 3.0, 0.5]


@pytest.mark.parametrize('loss_scale', LOSS_SCALES)
def test_backward_loss_scale_stores_unscaled_grads(loss_scale):
    x0, x1 = _leaf(3), _leaf(5)
    xgrad.backward(x0 * x1, loss_scale=loss_scale)
    _assert_array(x0.get_grad(), 5)
    _assert_array(x1.get_grad(), 3)


@pytest.mark.parametrize('loss_scale', LOSS_SCALES)
def test_grad_loss_scale_returns_unscaled_grads(loss_scale):
    x0, x1 = _leaf(3), _leaf(5)
    gx0, gx1 = xgrad.grad([x0 * x1], [x0, x1], loss_scale=loss_scale)
    _assert_array(gx0, 5)
    _assert_array(gx1, 3)
    assert x0.get_grad() is None


def test_loss_scale_does_not_rescale_previous_leaf_grad():
    x0, x1 = _leaf(3), _leaf(5)
    x0.set_grad(_full(1))
    xgrad.backward(x0 * x1, loss_scale=4)
    _assert_array(x0.get_grad(), 6)  # 1 + 5
    _assert_array(x1.get_grad(), 3)


def test_loss_scale_with_grad_outputs():
    x0, x1 = _leaf(3), _leaf(5)
    xgrad.backward([x0 * x1], grad_outputs=[_full(10)], loss_scale=2)
    _assert_array(x0.get_grad(), 50)
    _assert_array(x1.get_grad(), 30)


def test_loss_scale_with_retain_grad():
    x0, x1 = _leaf(3), _leaf(5)
    a, b, c = _retain_grad_graph(x0, x1)
    xgrad.backward(c, retain_grad=True, loss_scale=8)
    _assert_array(x0.get_grad(), 4)
    _assert_array(a.get_grad(), 2)
    _assert_array(b.get_grad(), 1)


def test_ndarray_backward_takes_the_same_keywords():
    x0, x1 = _leaf(3), _leaf(5)
    (x0 * x1).backward(loss_scale=2, retain_grad=False)
    _assert_array(x0.get_grad(), 5)
    _assert_array(x1.get_grad(), 3)


# ---------------------------------------------------------------------------
# §13: seeds are created on each output's device

@parametrize_method
def test_seed_is_created_on_the_output_device(method):
    x = _full(3, device='native:1').require_grad()
    y = x * x
    with xgrad.using_device('native:0'):
        if method == 'backward':
            xgrad.backward(y)
            gx = x.get_grad()
        else:
            gx, = xgrad.grad([y], [x])
    assert gx.device.name == 'native:1'
    _assert_array(gx, 6)


def test_changing_default_device_between_forward_and_backward():
    with xgrad.using_device('native:1'):
        x = _leaf(3)
        y = x * x
    xgrad.backward(y)
    assert x.get_grad().device.name == 'native:1'
    _assert_array(x.get_grad(), 6)


def test_accumulated_zero_d_gradients_stay_arrays():
    """Two 0-d contributions summed on the raw path hold a NumPy array, not
    a NumPy scalar (found by golden-gradient runs of 0-d samples)."""
    x = xgrad.array(numpy.float16(0.5)).require_grad()
    y = xgrad.exp(x) * x  # two paths into x
    gx, = xgrad.grad([y], [x], enable_double_backprop=True)
    ggx, = xgrad.grad([gx], [x])
    assert type(gx.to_numpy()) is numpy.ndarray
    assert type(ggx.to_numpy()) is numpy.ndarray
    assert ggx.dtype == numpy.float16


# ---------------------------------------------------------------------------
# Slices feed their gradient in at their index (IndexedGradient), not as a
# full array of zeros each: the sums must be the same.

def _slices_loss(x, n):
    y = x[0] * 3.0
    for s in range(n):
        y = y + x[s] * (s + 1.0) + x[s, 1:].sum() * 0.5
    return xgrad.sum(y * y) + xgrad.sum(x * x) + xgrad.sum(x[1:3] * x[None, 2])


def test_many_slices_of_one_array_accumulate_exactly():
    rs = numpy.random.RandomState(0)
    x = xgrad.array(rs.standard_normal((6, 4))).require_grad()
    loss = _slices_loss(x, 6)
    loss.backward()
    xgrad.check_backward(lambda xs: (_slices_loss(xs[0], 6),), [x], [xgrad.array(1.0)],
                         [xgrad.full((6, 4), 1e-4, 'float64')], atol=1e-6, rtol=1e-6)
    # the same gradient through the recorded path (double backprop on)
    x2 = xgrad.array(x.to_numpy()).require_grad()
    g, = xgrad.grad([_slices_loss(x2, 6)], [x2], enable_double_backprop=True)
    numpy.testing.assert_allclose(x.grad.to_numpy(), g.to_numpy(), rtol=1e-12)


def test_a_slice_gradient_adds_to_a_gradient_from_elsewhere_and_to_the_slot():
    x = xgrad.array(numpy.arange(6.0).reshape(3, 2)).require_grad()
    x.set_grad(xgrad.full((3, 2), 10.0, 'float64'))
    y = x * 2.0                       # a full gradient of 2 first
    (xgrad.sum(y) + xgrad.sum(x[1] * 5.0) + xgrad.sum(x[:, 0])).backward()
    numpy.testing.assert_array_equal(x.grad.to_numpy(), [[13, 12], [18, 17], [13, 12]])


def test_slice_gradients_keep_the_input_dtype():
    x = xgrad.array(numpy.ones((4, 3), numpy.float16)).require_grad()
    xgrad.sum(x[0] + x[1:3].sum(axis=0) * 2).backward()
    assert x.grad.dtype == numpy.float16
    numpy.testing.assert_array_equal(x.grad.to_numpy(), [[1] * 3, [2] * 3, [2] * 3, [0] * 3])
