"""xgrad.check_backward and xgrad.check_double_backward (semantics.md §11).

Scenarios 27-32 of the acceptance checklist (semantics.md §16), decision 5
(the standard tolerance |b - n| <= atol + rtol * |n|) and the documented errors.
"""

import pytest

import xgrad


DTYPE = xgrad.float32


def _array(values):
    return xgrad.array(values, DTYPE)


def _eps(n=1, value=1e-3, shape=(3,)):
    return tuple(xgrad.full(shape, value, DTYPE) for _ in range(n))


def _ones():
    return xgrad.ones((3,), DTYPE)


def _square(xs):
    x, = xs
    return x * x,


def _square_stopped_plus_x(xs):
    # as_grad_stopped() makes the backward disagree with the forward.
    x, = xs
    return (x * x).as_grad_stopped() + x,


def _product(xs):
    x, y = xs
    return x * y,


def _product_stopped_plus_xy(xs):
    x, y = xs
    return (x * y).as_grad_stopped() + x + y,


def _check_backward_unary(fprop):
    xgrad.check_backward(
        fprop,
        (_array([1, 2, 1]).require_grad(),),
        (_array([0, -2, 1]),),
        _eps(1))


def _check_backward_binary(fprop):
    xgrad.check_backward(
        fprop,
        (_array([1, -2, 1]).require_grad(), _array([0, 1, 2]).require_grad()),
        (_array([1, -2, 3]),),
        _eps(2))


# 27
def test_correct_backward_unary():
    _check_backward_unary(_square)


# 28
def test_incorrect_backward_unary():
    with pytest.raises(xgrad.GradientCheckError):
        _check_backward_unary(_square_stopped_plus_x)


# 29
def test_correct_backward_binary():
    _check_backward_binary(_product)


# 30
def test_incorrect_backward_binary():
    with pytest.raises(xgrad.GradientCheckError):
        _check_backward_binary(_product_stopped_plus_xy)


# 31
def test_correct_double_backward_unary():
    xgrad.check_double_backward(
        _square,
        (_array([1, 2, 3]).require_grad(),),
        (_ones().require_grad(),),
        (_ones(),),
        _eps(2),
        atol=1e-4,
        rtol=1e-3)


# 32
def test_correct_double_backward_binary():
    xgrad.check_double_backward(
        _product,
        (_array([1, 2, 3]).require_grad(), _ones().require_grad()),
        (_ones().require_grad(),),
        (_ones(), _ones()),
        _eps(3),
        atol=1e-4,
        rtol=1e-3)


def test_check_backward_on_another_graph():
    with xgrad.backprop_scope('bp1') as bp1:
        xgrad.check_backward(
            _square,
            (_array([1, 2, 1]).require_grad(bp1),),
            (_array([0, -2, 1]),),
            _eps(1),
            backprop_id=bp1)


def test_incorrect_backward_failure_message():
    with pytest.raises(xgrad.GradientCheckError,
                       match='Numerical error in backward on inputs'):
        _check_backward_unary(_square_stopped_plus_x)


# ---------------------------------------------------------------------------
# Decision 5: the standard tolerance. _BiasedScale computes y = x / 4 and
# returns a backward that is off by `bias`: b = n + bias with n = gy / 4.
# With x = [1, 2, 3], gy = ones and eps = 2**-6 (all exact in float32) the
# numerical gradient is exactly 0.25 and the backward one 0.3.

class _BiasedScale(xgrad.FunctionNode):

    def __init__(self, bias):
        super().__init__()
        self.bias = bias

    def forward(self, inputs):
        x, = inputs
        return x * 0.25,

    def backward(self, target_input_indexes, grad_outputs):
        gy, = grad_outputs
        return tuple(gy * 0.25 + self.bias for _ in target_input_indexes)


def _check_biased_scale(bias, **tolerances):
    xgrad.check_backward(
        lambda xs: _BiasedScale(bias).apply(xs),
        (_array([1, 2, 3]).require_grad(),),
        (_ones(),),
        _eps(1, 2 ** -6),
        **tolerances)


def test_function_node_with_exact_backward_passes_default_tolerance():
    _check_biased_scale(0.0)


def test_function_node_with_wrong_backward_fails_default_tolerance():
    with pytest.raises(xgrad.GradientCheckError):
        _check_biased_scale(0.05)


def test_tolerance_atol_is_absolute():
    # |0.3 - 0.25| = 0.05 <= 0.1 + 1e-6 * 0.25 (ChainerX's swapped check,
    # 1e-6 + 0.1 * 0.25 = 0.025, would fail).
    _check_biased_scale(0.05, atol=0.1, rtol=1e-6)


def test_tolerance_rtol_is_relative():
    # 0.05 > 1e-6 + 0.1 * 0.25 = 0.025 (ChainerX's swapped check,
    # 0.1 + 1e-6 * 0.25, would pass).
    with pytest.raises(xgrad.GradientCheckError):
        _check_biased_scale(0.05, atol=1e-6, rtol=0.1)


# ---------------------------------------------------------------------------
# Errors on bad arguments

def test_check_backward_eps_of_wrong_length():
    with pytest.raises(xgrad.XgradError):
        xgrad.check_backward(
            _square,
            (_array([1, 2, 1]).require_grad(),),
            (_array([0, -2, 1]),),
            _eps(2))


def test_check_backward_eps_of_wrong_shape():
    with pytest.raises(xgrad.XgradError):
        xgrad.check_backward(
            _square,
            (_array([1, 2, 1]).require_grad(),),
            (_array([0, -2, 1]),),
            _eps(1, shape=(2,)))


def test_check_backward_grad_outputs_of_wrong_length():
    with pytest.raises(xgrad.XgradError, match='Size of function outputs'):
        xgrad.check_backward(
            _square,
            (_array([1, 2, 1]).require_grad(),),
            (_array([0, -2, 1]), _array([0, -2, 1])),
            _eps(1))


def test_check_backward_output_identical_to_input():
    with pytest.raises(xgrad.XgradError, match='are identical'):
        xgrad.check_backward(
            lambda xs: (xs[0],),
            (_array([1, 2, 1]).require_grad(),),
            (_array([0, -2, 1]),),
            _eps(1))


def test_check_double_backward_grad_grad_inputs_of_wrong_length():
    with pytest.raises(xgrad.XgradError, match='grad_grad_input'):
        xgrad.check_double_backward(
            _square,
            (_array([1, 2, 3]).require_grad(),),
            (_ones().require_grad(),),
            (_ones(), _ones()),
            _eps(2))


def test_check_double_backward_input_not_differentiable():
    with pytest.raises(xgrad.XgradError, match='not differentiable'):
        xgrad.check_double_backward(
            _square,
            (_array([1, 2, 3]),),
            (_ones().require_grad(),),
            (_ones(),),
            _eps(2))


def test_check_double_backward_grad_output_not_differentiable():
    with pytest.raises(xgrad.XgradError):
        xgrad.check_double_backward(
            _square,
            (_array([1, 2, 3]).require_grad(),),
            (_ones(),),
            (_ones(),),
            _eps(2))


def test_check_double_backward_accepts_grad_outputs_as_keywords():
    # The eps/atol/rtol keywords of ChainerX's signature.
    xgrad.check_double_backward(
        _square, (_array([1, 2, 3]).require_grad(),), (_ones().require_grad(),),
        (_ones(),), eps=_eps(2), atol=1e-4, rtol=1e-3)


def test_check_backward_eps_of_wrong_dtype():
    with pytest.raises(xgrad.XgradError, match='dtype float64, but input 0 has dtype float32'):
        xgrad.check_backward(
            _square,
            (_array([1, 2, 1]).require_grad(),),
            (_array([0, -2, 1]),),
            (xgrad.full((3,), 1e-3, xgrad.float64),))


# ---------------------------------------------------------------------------
# One implementation: xgrad.check_backward is xgrad.testing.check_backward.
# What a ChainerX-style call (eps given as one xgrad array per input) gets
# that other calls do not: ChainerX's default tolerance, its
# double-backprop-option check, and its strict check_double_backward.

def test_one_implementation():
    import xgrad.testing
    assert xgrad.check_backward is xgrad.testing.check_backward
    assert xgrad.check_double_backward is xgrad.testing.check_double_backward
    result = xgrad.check_backward(
        _square, (_array([1, 2, 1]).require_grad(),), (_array([0, -2, 1]),), _eps(1))
    assert isinstance(result, xgrad.testing.GradientCheckResult) and result.order == 1


def test_default_tolerance_chainerx_style_and_per_dtype():
    # b - n = 1e-3 with n = 0.25: out of ChainerX's default (1e-5 + 1e-4 * 0.25),
    # within float32's default_tolerance (2e-3 + 2e-3 * 0.25).
    with pytest.raises(xgrad.GradientCheckError, match=r'atol 1e-05, rtol 0\.0001'):
        _check_biased_scale(1e-3)
    result = xgrad.check_backward(
        lambda xs: _BiasedScale(1e-3).apply(xs), (_array([1, 2, 3]).require_grad(),),
        (_ones(),), 2 ** -6)
    assert result.worst_abs == pytest.approx(1e-3, rel=1e-3)


class _DetachedSquare(xgrad.FunctionNode):
    """y = x * x whose backward computes on raw NumPy data: right values,
    but a gradient that never joins the graph, even with double backprop."""

    def forward(self, inputs):
        self.retain_inputs((0,))
        x, = inputs
        return x * x,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        gy, = grad_outputs
        return xgrad.array(2 * x.to_numpy() * gy.to_numpy()),


def test_double_backprop_option_check_in_chainerx_style_call():
    x, gy = _array([1, 2, 1]).require_grad(), _array([0, -2, 1])
    with pytest.raises(xgrad.GradientCheckError,
                       match="Gradient 0 / 1 is not connected to the graph .* even when "
                             "double-backprop is enabled"):
        xgrad.check_backward(lambda xs: _DetachedSquare().apply(xs), (x,), (gy,), _eps(1),
                             1e-3, 1e-3)
    # Not a ChainerX-style call: first derivatives only (they are right).
    xgrad.check_backward(lambda xs: _DetachedSquare().apply(xs), (x,), (gy,))


def test_argument_errors_are_also_value_errors():
    with pytest.raises(ValueError, match='are identical'):
        xgrad.check_backward(lambda xs: (xs[0],), (_array([1, 2, 1]).require_grad(),),
                             (_array([0, -2, 1]),), _eps(1))
    assert issubclass(xgrad.testing.GradientCheckArgumentError, xgrad.GradientCheckError)


def test_double_backward_constants_outside_chainerx_style_calls():
    # Without eps arrays an input that does not require grad is a constant and
    # grad_outputs are differentiated whether they require grad or not.
    xgrad.check_double_backward(
        _product, (_array([1, 2, 3]).require_grad(), _ones()), (_ones(),), (_ones(), None),
        atol=1e-4, rtol=1e-3)
