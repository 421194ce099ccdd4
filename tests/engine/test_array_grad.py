"""The gradient side of xgrad.ndarray (semantics.md §4, §5, §13, §14).

Scenarios 34-50 of the acceptance checklist (semantics.md §16), the in-place
guards of §4 and the gradient devices of §13.
"""

import operator

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# copies and products of small integers.


FLOAT_DTYPES = [xgrad.float16, xgrad.float32, xgrad.float64]


# ---------------------------------------------------------------------------
# Helpers

def _array(values, dtype=xgrad.float32, device=None):
    return xgrad.array(values, dtype, device=device)


def _assert_values(array, values, dtype=xgrad.float32):
    expected = numpy.array(values, dtype=dtype)
    assert array.shape == expected.shape
    assert array.dtype == expected.dtype
    numpy.testing.assert_array_equal(numpy.asarray(array), expected)


def _assert_same_data(a, b):
    assert a.shape == b.shape
    assert a.dtype == b.dtype
    numpy.testing.assert_array_equal(numpy.asarray(a), numpy.asarray(b))


def _flags(array, *backprop_ids):
    """(is_grad_required, is_backprop_required) for each ID."""
    return [(array.is_grad_required(bp), array.is_backprop_required(bp))
            for bp in backprop_ids]


def _on_graphs(*backprop_ids, dtype=xgrad.float32):
    a = _array([1, 2, 3], dtype)
    for bp in backprop_ids:
        a.require_grad(bp)
    return a


# ---------------------------------------------------------------------------
# 34: views

def test_view_does_not_share_grad_flags():
    array = _array([3.0])
    view = array.view()
    assert _flags(array, None) == [(False, False)]
    assert _flags(view, None) == [(False, False)]

    array.require_grad()

    assert _flags(array, None) == [(True, True)]
    assert _flags(view, None) == [(False, False)]


# ---------------------------------------------------------------------------
# 35, 36: as_grad_stopped

def _check_grad_stopped(a, b, stopped, kept, copy):
    _assert_same_data(a, b)
    assert b.device.name == a.device.name
    if copy:
        assert b.is_contiguous
        assert b._debug_data_memory_address != a._debug_data_memory_address
    assert _flags(b, *stopped) == [(False, False)] * len(stopped)
    assert _flags(b, *kept) == [(False, True)] * len(kept)
    graphs = stopped + kept
    assert _flags(a, *graphs) == [(True, True)] * len(graphs)  # unchanged


# 35 (copy=True), 36 (copy=False): all graphs
@pytest.mark.parametrize('dtype', FLOAT_DTYPES)
@pytest.mark.parametrize('copy', [True, False])
def test_as_grad_stopped_all_graphs(dtype, copy):
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2:
        a = _on_graphs(bp1, bp2, dtype=dtype)
        b = a.as_grad_stopped(copy=copy)
        _check_grad_stopped(a, b, (bp1, bp2), (), copy)


# 35 (copy=True), 36 (copy=False): bp1 and bp2 of three graphs
@pytest.mark.parametrize('dtype', FLOAT_DTYPES)
@pytest.mark.parametrize('copy', [True, False])
def test_as_grad_stopped_some_graphs(dtype, copy):
    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2, \
            xgrad.backprop_scope('bp3') as bp3:
        a = _on_graphs(bp1, bp2, bp3, dtype=dtype)
        b = a.as_grad_stopped([bp1, bp2], copy=copy)
        _check_grad_stopped(a, b, (bp1, bp2), (bp3,), copy)


# ---------------------------------------------------------------------------
# repr lists the graphs the array has nodes on

# 37
def test_array_repr_default_backprop_id():
    array = _array([3.0]).require_grad()
    assert str(array) == (
        "array([3.], shape=(1,), dtype=float32, device='native:0', "
        "backprop_ids=['<default>'])")


# 37
def test_array_repr_expired_backprop_id():
    with xgrad.backprop_scope('bp1') as bp1:
        array = _array([3.0]).require_grad(bp1)
    assert str(array) == (
        "array([3.], shape=(1,), dtype=float32, device='native:0', "
        "backprop_ids=['<expired>'])")


def test_array_repr_several_backprop_ids():
    with xgrad.backprop_scope('bp1') as bp1:
        array = _array([3.0]).require_grad().require_grad(bp1)
        assert str(array) == (
            "array([3.], shape=(1,), dtype=float32, device='native:0', "
            "backprop_ids=['<default>', 'bp1'])")
    assert str(array) == (
        "array([3.], shape=(1,), dtype=float32, device='native:0', "
        "backprop_ids=['<default>', '<expired>'])")


def test_array_repr_without_graph():
    assert str(_array([3.0])) == (
        "array([3.], shape=(1,), dtype=float32, device='native:0')")


def test_operations_drop_expired_nodes():  # §2, changed by issue 13 (L2)
    """Unlike ChainerX, an op neither propagates the nodes of released graphs
    (they can never be backpropagated) nor keeps them on its inputs: a
    parameter used in many scopes would otherwise slow every op down."""
    with xgrad.backprop_scope('bp1') as bp1:
        x = _array([3.0]).require_grad(bp1)
    assert str(x) == (
        "array([3.], shape=(1,), dtype=float32, device='native:0', "
        "backprop_ids=['<expired>'])")
    y = x * 2
    assert str(y) == "array([6.], shape=(1,), dtype=float32, device='native:0')"
    assert str(x) == "array([3.], shape=(1,), dtype=float32, device='native:0')"


# ---------------------------------------------------------------------------
# 38, 39: require_grad

def _check_require_grad(array, call, query):
    """`call()` runs require_grad; `query` maps a method to its result."""
    assert not query(array.is_grad_required)
    assert not query(array.is_backprop_required)
    for _ in range(2):  # the second call changes nothing
        assert call() is array
        assert query(array.is_grad_required)
        assert query(array.is_backprop_required)


# 38
@pytest.mark.parametrize('backprop_args', [(None,), ()])
def test_require_grad_without_backprop_id(backprop_args):
    array = _array([1, 1, 1])
    assert not array.is_backprop_required(xgrad.anygraph)
    _check_require_grad(
        array,
        lambda: array.require_grad(*backprop_args),
        lambda method: method(*backprop_args))
    assert array.is_backprop_required(xgrad.anygraph)


# 39
def test_require_grad_with_backprop_id():
    array = _array([1, 1, 1])
    with xgrad.backprop_scope('bp1') as bp1:
        _check_require_grad(
            array,
            lambda: array.require_grad(bp1),
            lambda method: method(bp1))
    with xgrad.backprop_scope('bp2') as bp2:
        _check_require_grad(
            array,
            lambda: array.require_grad(backprop_id=bp2),
            lambda method: method(backprop_id=bp2))
        assert array.is_grad_required(bp2)
        assert not array.is_grad_required()


@pytest.mark.parametrize('dtype', [xgrad.int32, xgrad.bool_])
def test_require_grad_on_non_float_array(dtype):  # §4
    array = xgrad.zeros((2,), dtype)
    with pytest.raises(xgrad.DtypeError):
        array.require_grad()


# ---------------------------------------------------------------------------
# 40, 41: get_grad / set_grad / cleargrad / .grad

def _check_grad_api(array, grad, args, kwargs, use_property):
    with pytest.raises(xgrad.XgradError):
        array.get_grad(*args, **kwargs)
    with pytest.raises(xgrad.XgradError):
        array.set_grad(grad, *args, **kwargs)
    with pytest.raises(xgrad.XgradError):
        array.cleargrad(*args, **kwargs)

    array.require_grad(*args, **kwargs).set_grad(grad, *args, **kwargs)
    _assert_values(array.get_grad(*args, **kwargs), [0.5, 0.5, 0.5])

    array.cleargrad(*args, **kwargs)
    assert array.get_grad(*args, **kwargs) is None

    array.set_grad(grad, *args, **kwargs)
    _assert_values(array.get_grad(*args, **kwargs), [0.5, 0.5, 0.5])

    array.set_grad(None, *args, **kwargs)
    assert array.get_grad(*args, **kwargs) is None
    assert array.is_grad_required(*args, **kwargs)

    if use_property:
        array.grad = grad
        assert array.get_grad(*args, **kwargs) is array.grad
        _assert_values(array.grad, [0.5, 0.5, 0.5])

        array.grad = None
        assert array.get_grad(*args, **kwargs) is None
        assert array.grad is None


# 40
@pytest.mark.parametrize('backprop_args', [(None,), ()])
def test_grad_api_without_backprop_id(backprop_args):
    _check_grad_api(_array([1, 1, 1]), _array([0.5, 0.5, 0.5]),
                    backprop_args, {}, use_property=True)


# 41
def test_grad_api_with_backprop_id():
    array = _array([1, 1, 1])
    grad = _array([0.5, 0.5, 0.5])
    with xgrad.backprop_scope('bp1') as bp1:
        _check_grad_api(array, grad, (bp1,), {}, use_property=False)
    with xgrad.backprop_scope('bp2') as bp2:
        _check_grad_api(array, grad, (), {'backprop_id': bp2},
                        use_property=False)
    with pytest.raises(xgrad.XgradError):
        array.grad  # the property is about the default graph only


def test_grad_property_raises_when_not_grad_required():
    with pytest.raises(xgrad.XgradError):
        _array([1, 1, 1]).grad


def test_set_grad_on_op_output():  # §5
    x = _array([1, 2, 3]).require_grad()
    y = x * 2
    y.set_grad(None)
    assert not y.is_grad_required()
    y.set_grad(_array([4, 5, 6]))
    assert y.is_grad_required()
    _assert_values(y.get_grad(), [4, 5, 6])


# 42
def test_get_grad_returns_the_stored_object():
    array = _array([2, 5, 1]).require_grad()
    array.set_grad(_array([5, 7, 8]))

    grad1 = array.get_grad()
    grad2 = array.get_grad()
    grad1 *= _array([2, 2, 2])

    _assert_values(grad2, [10, 14, 16])
    _assert_values(array.get_grad(), [10, 14, 16])


# 43
def test_cleargrad_does_not_affect_fetched_grad():
    array = _array([2, 5, 1]).require_grad()
    array.set_grad(_array([5, 7, 8]))
    saved_grad = array.get_grad()

    array.cleargrad()

    assert array.get_grad() is None
    _assert_values(saved_grad, [5, 7, 8])


# 44
def test_grad_identity():
    array = _array([1, 1, 1])
    grad = _array([0.5, 0.5, 0.5])
    array.require_grad().set_grad(grad)

    assert array.get_grad() is grad
    assert array.get_grad() is grad

    grad += _array([2, 2, 2])
    _assert_values(array.get_grad(), [2.5, 2.5, 2.5])

    array_grad = array.get_grad()
    array_grad += _array([1, 1, 1])
    _assert_values(grad, [3.5, 3.5, 3.5])


# 45
def test_require_grad_multiple_graphs_forward():
    x1 = _array([1, 1, 1])
    x2 = _array([1, 1, 1])

    with xgrad.backprop_scope('bp1') as bp1, \
            xgrad.backprop_scope('bp2') as bp2, \
            xgrad.backprop_scope('bp3') as bp3:
        x1.require_grad(bp1)
        x2.require_grad(bp2)
        assert _flags(x1, bp1, bp2) == [(True, True), (False, False)]
        assert _flags(x2, bp1, bp2) == [(False, False), (True, True)]

        y = x1 * x2

        assert _flags(y, bp1, bp2) == [(False, True), (False, True)]
        assert not y.is_backprop_required(None)
        assert not y.is_backprop_required(bp3)


# 46 (the device case is also §13)
@pytest.mark.parametrize('shape,dtype,device', [
    ((3, 1), xgrad.float32, 'native:0'),
    ((2, 1), xgrad.float64, 'native:0'),
    ((3, 1), xgrad.float64, 'native:1'),
], ids=['dtype', 'shape', 'device'])
def test_invalid_grad(shape, dtype, device):
    array = xgrad.ones((3, 1), xgrad.float64, device='native:0')
    array.require_grad()
    invalid_grad = xgrad.ones(shape, dtype, device=device)

    with pytest.raises(xgrad.GradientError):
        array.set_grad(invalid_grad)
    with pytest.raises(xgrad.GradientError):
        array.grad = invalid_grad
    assert array.get_grad() is None


def test_grad_on_another_device_names_the_devices():  # §13
    array = xgrad.ones((1,), xgrad.float32, device='native:0').require_grad()
    with pytest.raises(xgrad.GradientError, match='native:1'):
        array.set_grad(xgrad.ones((1,), xgrad.float32, device='native:1'))


# 47
def test_array_backward():
    with xgrad.backprop_scope('bp1') as bp1:
        x1 = _array([1, 1, 1]).require_grad(backprop_id=bp1)
        x2 = _array([1, 1, 1]).require_grad(backprop_id=bp1)
        y = x1 * x2

        y.backward(backprop_id=bp1, enable_double_backprop=True)
        gx1 = x1.get_grad(backprop_id=bp1)
        _assert_values(gx1, [1, 1, 1])
        x1.set_grad(None, backprop_id=bp1)

        gx1.backward(backprop_id=bp1)
        _assert_values(x2.get_grad(bp1), [2, 2, 2])  # 1 from y, 1 from gx1
        assert x1.get_grad(bp1) is None
        with pytest.raises(xgrad.XgradError):
            gx1.get_grad(backprop_id=bp1)


# 48
def test_is_chained():
    array = _array([1, 2, 3])
    with pytest.raises(xgrad.XgradError):
        array._is_chained()

    array.require_grad()
    assert not array._is_chained()

    assert (2 * array)._is_chained()


def test_backward_unchains_the_graph():  # §8
    x = _array([1, 2, 3]).require_grad()
    y = x * x
    xgrad.backward(y)
    assert not y._is_chained()


# ---------------------------------------------------------------------------
# to_device

# 49
@pytest.mark.parametrize('how', ['device', 'name', 'backend_and_index'])
def test_to_device(how):
    a = xgrad.ones((2,), xgrad.float32, device='native:0')
    dst_device = xgrad.get_device('native:1')
    args = {'device': (dst_device,),
            'name': ('native:1',),
            'backend_and_index': ('native', 1)}[how]

    b = a.to_device(*args)

    assert b.device.name == 'native:1'
    _assert_same_data(a, b)


def test_to_device_backprops_the_grad_to_the_source_device():  # §13
    x = _array([1, 2, 3], device='native:0').require_grad()
    y = x.to_device('native:1')
    assert _flags(y, None) == [(False, True)]

    xgrad.backward(y * y)

    assert x.get_grad().device.name == 'native:0'
    _assert_values(x.get_grad(), [2, 4, 6])


def test_to_same_device_is_a_connected_alias():  # §4
    x = _array([1, 2, 3], device='native:0').require_grad()
    y = x.to_device('native:0')
    assert y is not x
    assert _flags(y, None) == [(False, True)]
    xgrad.backward(y * 3)
    _assert_values(x.get_grad(), [3, 3, 3])


# ---------------------------------------------------------------------------
# astype

# 50
@pytest.mark.parametrize('dtype,copy,same', [
    (xgrad.float32, False, True),
    (xgrad.float32, True, False),
    (xgrad.float64, False, False),
    (xgrad.int32, False, False),
])
def test_astype_identity(dtype, copy, same):
    a = _array([1, 2, 3])
    b = a.astype(dtype, copy=copy)
    assert (b is a) == same
    _assert_values(b, [1, 2, 3], dtype)


def test_astype_to_float_is_recorded_to_int_is_not():  # §4
    x = _array([1, 2, 3]).require_grad()
    assert _flags(x.astype(xgrad.float64), None) == [(False, True)]
    assert _flags(x.astype(xgrad.int32), None) == [(False, False)]

    xgrad.backward(x.astype(xgrad.float64) * 2)
    _assert_values(x.get_grad(), [2, 2, 2])


# ---------------------------------------------------------------------------
# §4: in-place operations

def test_inplace_on_array_with_node_raises():
    x = _array([1, 2, 3]).require_grad()
    with pytest.raises(xgrad.XgradError, match=(
            'In-place update of an array that requires grad .a leaf')):
        x += 1
    _assert_values(x, [1, 2, 3])
    y = x * 1
    with pytest.raises(xgrad.XgradError, match=(
            'In-place assignment to output array requiring grad '
            'is not allowed')):
        y += 1


@pytest.mark.parametrize('op', [
    operator.iadd, operator.isub, operator.imul, operator.itruediv])
def test_every_inplace_operator_is_guarded(op):
    x = _array([1, 2, 3]).require_grad()
    with pytest.raises(xgrad.XgradError):
        op(x, 2)
    _assert_values(x, [1, 2, 3])


def test_inplace_on_array_with_node_raises_regardless_of_mode():
    x = _array([1, 2, 3]).require_grad()
    with xgrad.no_backprop_mode():
        with pytest.raises(xgrad.XgradError):
            x *= 2


def test_inplace_on_op_output_raises():
    x = _array([1, 2, 3]).require_grad()
    y = x * 2
    with pytest.raises(xgrad.XgradError):
        y += 1


def test_inplace_with_operand_requiring_grad_raises():
    x = _array([1, 2, 3]).require_grad()
    a = _array([0, 0, 0])
    with pytest.raises(xgrad.XgradError, match=(
            'In-place assignment that involves input arrays requiring grad '
            'is not allowed')):
        a += x


def test_inplace_on_array_without_node_works():
    a = _array([1, 2, 3])
    a += 1
    a *= 2
    _assert_values(a, [4, 6, 8])


def test_inplace_on_gradient_is_visible_through_get_grad():
    x = _array([1, 2, 3]).require_grad()
    xgrad.backward(x * x)
    gx = x.get_grad()
    gx += 1
    _assert_values(x.get_grad(), [3, 5, 7])


def test_pickle_round_trip_keeps_data_dtype_and_device_but_no_graph():
    import pickle
    a = xgrad.array([[1.0, 2.0], [3.0, 4.0]], 'float32', device='native:1').require_grad()
    b = pickle.loads(pickle.dumps(a * 2))
    assert b.device.name == 'native:1'
    assert b.dtype == xgrad.float32
    numpy.testing.assert_array_equal(b.to_numpy(), [[2.0, 4.0], [6.0, 8.0]])
    assert not b.is_backprop_required()
