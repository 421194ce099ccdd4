"""xgrad.testing's check_backward and check_double_backward: they pass on
correct ops, fail with a message that names the op, the input and the error
on deliberately broken ones, and raise TypeError/ValueError (never a
verdict) on bad use."""

import threading

import numpy
import pytest

import xgrad
from xgrad.testing._checks import (
    GradientCheckResult, check_backward, check_double_backward)
from xgrad.testing._numerical import NondifferentiablePointError


F16 = numpy.dtype('float16')
F32 = numpy.dtype('float32')
F64 = numpy.dtype('float64')
FLOATS = [F16, F32, F64]


def _uniform(shape, dtype=F64, seed=0, low=-1.0, high=1.0):
    data = numpy.random.RandomState(seed).uniform(low, high, shape)
    return xgrad.array(data.astype(dtype))


def _leaf(shape, dtype=F64, seed=0, **kw):
    return _uniform(shape, dtype, seed, **kw).require_grad()


# ---------------------------------------------------------------------------
# Ops: forward on NumPy, backward on xgrad arrays

class Square(xgrad.FunctionNode):
    """y = x ** 2, right to every order."""

    def forward(self, inputs):
        self.retain_inputs((0,))
        x, = inputs
        return x * x,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return 2 * x * grad_outputs[0],


class SinCos(xgrad.FunctionNode):
    """(sin x, cos x): two outputs, either gradient may be None."""

    def forward(self, inputs):
        self.retain_inputs((0,))
        x, = inputs
        return numpy.sin(x), numpy.cos(x)

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        gs, gc = grad_outputs
        gx = None
        if gs is not None:
            gx = gs * xgrad.cos(x)
        if gc is not None:
            gx = -gc * xgrad.sin(x) if gx is None else gx - gc * xgrad.sin(x)
        return gx,


class WrongFirst(xgrad.FunctionNode):
    """Broken (1): y = x ** 2 with gradient 3 x gy."""

    def forward(self, inputs):
        self.retain_inputs((0,))
        x, = inputs
        return x * x,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return 3 * x * grad_outputs[0],


class WrongSecond(xgrad.FunctionNode):
    """Broken (2): y = x ** 3 with the right gradient gy * 3 x**2, but 3 x**2
    is computed in NumPy, a constant to the graph: the second derivative
    with respect to x comes out as zero."""

    def forward(self, inputs):
        self.retain_inputs((0,))
        x, = inputs
        return x ** 3,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        slope = xgrad.array(3 * x.to_numpy() ** 2)
        return grad_outputs[0] * slope,


class WrongSecondStopped(WrongSecond):
    """Broken (2), the as_grad_stopped variant."""

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return grad_outputs[0] * (3 * x * x).as_grad_stopped(),


class MissingGrad(xgrad.FunctionNode):
    """Broken (3): y = x * w without a gradient for w."""

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        x, w = inputs
        return x * w,

    def backward(self, target_input_indexes, grad_outputs):
        x, w = self.get_retained_inputs()
        return grad_outputs[0] * w, None


class WrongShape(xgrad.FunctionNode):
    """Broken (4): y = 2 x with a gradient of shape (n, 1)."""

    def forward(self, inputs):
        x, = inputs
        return 2 * x,

    def backward(self, target_input_indexes, grad_outputs):
        gy, = grad_outputs
        return xgrad.reshape(2 * gy, gy.shape + (1,)),


class WrongDtype(WrongShape):
    """Broken: y = 2 x with a float32 gradient for a float64 input."""

    def backward(self, target_input_indexes, grad_outputs):
        return (2 * grad_outputs[0]).astype(F32),


class OffByHalfPercent(Square):
    """y = x ** 2 with a gradient 0.5% too large: within float16's
    tolerance, outside float32's."""

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return 2.01 * x * grad_outputs[0],


def _op(cls):
    def func(xs):
        return cls().apply(xs)
    func.__name__ = cls.__name__
    return func


def _fails(check, *args, **kwargs):
    """The GradientCheckError that ``check`` raises (a failing verdict)."""
    with pytest.raises(xgrad.GradientCheckError) as info:
        check(*args, **kwargs)
    assert not isinstance(info.value, NondifferentiablePointError)
    assert isinstance(info.value.result, GradientCheckResult)
    return info.value


# ---------------------------------------------------------------------------
# Correct ops pass

def _tanh_times(xs):
    x, y = xs
    return xgrad.tanh(x) * y


def _row_norms(xs):
    return xgrad.sum(xs[0] * xs[0], axis=1)


def _matmul_exp(xs):
    return xgrad.exp(xgrad.matmul(xs[0], xs[1]) * 0.5)


CORRECT = [
    (_op(Square), [(3, 2)], [(3, 2)]),
    (_tanh_times, [(2, 3), (3,)], [(2, 3)]),  # broadcasting
    (_row_norms, [(3, 4)], [(3,)]),
    (_matmul_exp, [(2, 3), (3, 2)], [(2, 2)]),
    (_op(SinCos), [(4,)], [(4,), None]),  # multiple outputs, a None grad_output
    (_op(SinCos), [(4,)], [None, (4,)]),
    (_op(SinCos), [(4,)], [(4,), (4,)]),
]


def _case(shapes, gy_shapes, dtype):
    xs = [_leaf(s, dtype, seed=i) for i, s in enumerate(shapes)]
    gys = [None if s is None else _uniform(s, dtype, seed=10 + j)
           for j, s in enumerate(gy_shapes)]
    ggxs = [_uniform(s, dtype, seed=20 + i) for i, s in enumerate(shapes)]
    return xs, gys, ggxs


@pytest.mark.parametrize('dtype', FLOATS)
@pytest.mark.parametrize('func, shapes, gy_shapes', CORRECT)
@pytest.mark.parametrize('mode', ['full', 'random'])
def test_correct_ops_pass(func, shapes, gy_shapes, dtype, mode):
    xs, gys, ggxs = _case(shapes, gy_shapes, dtype)
    result = check_backward(func, xs, gys, mode=mode)
    assert result.order == 1
    assert result.n_checked == (sum(x.size for x in xs) if mode == 'full' else 1)
    result = check_double_backward(func, xs, gys, ggxs, mode=mode)
    assert result.order == 2
    used = sum(g.size for g in gys if g is not None)
    assert result.n_checked == (sum(x.size for x in xs) + used if mode == 'full' else 1)


def test_result_reports_the_worst_element():
    xs, gys, _ = _case([(2, 3), (3,)], [(2, 3)], F64)
    result = check_backward(_tanh_times, xs, gys)
    assert result.worst_input in (0, 1)
    assert 0 < result.worst_abs < 1e-8 and 0 < result.worst_rel < 1e-6


def test_chainerx_style_call():
    # Positional eps arrays and tolerances, tuples, grad_outputs that require grad.
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    eps = (xgrad.full((3,), 1e-5, F64),)
    check_backward(_op(Square), (x,), (gy,), eps, 1e-6, 1e-5)
    check_double_backward(_op(Square), (x,), (gy.copy().require_grad(),),
                          (_uniform((3,), seed=2),), eps + (xgrad.full((3,), 1e-5, F64),),
                          1e-6, 1e-5)


def test_outputs_less_precise_than_inputs():
    # astype to float32: the defaults take float32's step and tolerance from
    # grad_outputs, since f's values are only float32-precise.
    x = _leaf((2, 3))
    gy, ggx = _uniform((2, 3), F32, seed=1), _uniform((2, 3), seed=2)
    check_backward(lambda xs: xs[0].astype(F32), [x], [gy])
    check_double_backward(lambda xs: xs[0].astype(F32) * xs[0].astype(F32), [x], [gy], [ggx])


def test_constant_inputs_are_not_checked():
    # An integer input and a float input that does not require grad are constants.
    x = _leaf((3,))
    k = xgrad.array(numpy.array([1, 2, 3]))
    c = _uniform((3,), seed=1)
    result = check_backward(lambda xs: xs[0] * xs[1] + xs[2] * xs[0], [x, k, c],
                            [_uniform((3,), seed=2)])
    assert result.n_checked == 3 and result.worst_input == 0
    check_double_backward(lambda xs: xs[0] * xs[0] * xs[1] + xs[2], [x, k, c],
                          [_uniform((3,), seed=2)], [_uniform((3,), seed=3), None, None])


def test_other_graph():
    with xgrad.backprop_scope('check') as bp:
        x = _uniform((3,)).require_grad(bp)
        gy = _uniform((3,), seed=1)
        check_backward(_op(Square), [x], [gy], backprop_id=bp)
        check_double_backward(_op(Square), [x], [gy], [_uniform((3,), seed=2)],
                              backprop_id=bp)
        _fails(check_backward, _op(WrongFirst), [x], [gy], backprop_id=bp)


# ---------------------------------------------------------------------------
# Broken ops fail, naming the op, the input and the error

def test_wrong_first_derivative_fails_check_backward():
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    e = _fails(check_backward, _op(WrongFirst), [x], [gy])
    message = str(e)
    assert "check_backward('WrongFirst')" in message
    assert 'first-order gradients are wrong' in message
    assert 'input 0: element' in message and 'abs error' in message and 'rel error 0.5' in message
    assert e.result.worst_input == 0 and e.result.worst_rel == pytest.approx(0.5)
    assert e.result.n_checked == 3
    assert 'WrongFirst' in str(_fails(check_backward, _op(WrongFirst), [x], [gy],
                                      mode='random'))


def test_wrong_first_derivative_fails_check_double_backward():
    x, gy, ggx = _leaf((3,)), _uniform((3,), seed=1), _uniform((3,), seed=2)
    message = str(_fails(check_double_backward, _op(WrongFirst), [x], [gy], [ggx]))
    assert "check_double_backward('WrongFirst')" in message
    assert 'first-order gradients are wrong' in message and 'input 0' in message
    # The second-order check alone differentiates the op's own (wrong but
    # consistent) backward: it cannot see this bug.
    check_double_backward(_op(WrongFirst), [x], [gy], [ggx], check_first_order=False)


@pytest.mark.parametrize('cls', [WrongSecond, WrongSecondStopped])
def test_wrong_second_derivative_fails_only_check_double_backward(cls):
    x, gy, ggx = _leaf((3,), low=0.5), _uniform((3,), seed=1), _uniform((3,), seed=2)
    check_backward(_op(cls), [x], [gy])
    e = _fails(check_double_backward, _op(cls), [x], [gy], [ggx])
    message = str(e)
    assert "check_double_backward('{}')".format(cls.__name__) in message
    assert 'second-order gradients are wrong' in message
    assert 'input 0: no gradient, but the numerical gradient is not zero' in message
    assert 'grad_outputs[0]' not in message  # d/dgy of gy * 3x^2 is right
    assert e.result.order == 2 and e.result.worst_input == 0
    assert e.result.worst_abs > 0.1
    e = _fails(check_double_backward, _op(cls), [x], [gy], [ggx], mode='random')
    assert 'input 0 (no gradient)' in str(e)


def test_missing_gradient_fails():
    x, w, gy = _leaf((3,)), _leaf((3,), seed=1), _uniform((3,), seed=2)
    e = _fails(check_backward, _op(MissingGrad), [x, w], [gy])
    message = str(e)
    assert "check_backward('MissingGrad')" in message
    assert 'input 1: no gradient, but the numerical gradient is not zero' in message
    assert 'input 0' not in message
    assert e.result.worst_input == 1 and e.result.worst_rel == pytest.approx(1.0)
    e = _fails(check_backward, _op(MissingGrad), [x, w], [gy], mode='random', rng=3)
    assert 'input 1 (no gradient)' in str(e) and e.result.worst_input == 1


def test_missing_gradient_of_zero_is_fine():
    # No gradient where the numerical one is zero (the input does not matter).
    x, w = _leaf((3,)), _leaf((3,), seed=1)
    check_backward(lambda xs: xs[0] * 2, [x, w], [_uniform((3,), seed=2)])


def test_wrong_shape_fails():
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    e = _fails(check_backward, _op(WrongShape), [x], [gy])
    message = str(e)
    assert "check_backward('WrongShape')" in message
    assert 'input 0: Gradient shapes do not match' in message
    assert '(3,)' in message and '(3, 1)' in message
    assert e.result.worst_input == 0 and e.result.n_checked == 0


def test_wrong_shape_names_the_input_among_several():
    def func(xs):
        return xs[0] * 3 + WrongShape().apply([xs[1]])[0]

    x, y, gy = _leaf((3,)), _leaf((3,), seed=1), _uniform((3,), seed=2)
    message = str(_fails(check_backward, func, [x, y], [gy], name='sum'))
    assert 'input 1: Gradient shapes' in message and 'input 0' not in message


def test_wrong_dtype_fails():
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    message = str(_fails(check_backward, _op(WrongDtype), [x], [gy]))
    assert 'input 0: Gradient dtypes do not match' in message and 'float32' in message


def test_wrong_double_backward_shape_fails():
    class WrongShapeTwice(Square):
        def backward(self, target_input_indexes, grad_outputs):
            return WrongShape().apply([self.get_retained_inputs()[0]])[0] * \
                grad_outputs[0],

    x, gy, ggx = _leaf((3,)), _uniform((3,), seed=1), _uniform((3,), seed=2)
    check_backward(lambda xs: xs[0] * xs[0], [x], [gy])
    message = str(_fails(check_double_backward, _op(WrongShapeTwice), [x], [gy], [ggx],
                         check_first_order=False))
    assert 'input 0: Gradient shapes do not match' in message


@pytest.mark.parametrize('dtype, passes', [(F16, True), (F32, False), (F64, False)])
def test_default_tolerance_follows_the_dtype(dtype, passes):
    x, gy = _leaf((4,), dtype, low=0.5), _uniform((4,), dtype, seed=1, low=0.5)
    if passes:
        check_backward(_op(OffByHalfPercent), [x], [gy])
    else:
        assert 'rel error 0.005' in str(_fails(check_backward, _op(OffByHalfPercent),
                                               [x], [gy]))
    # An explicit tolerance wins.
    check_backward(_op(OffByHalfPercent), [x], [gy], atol=1e-2, rtol=1e-2)


# ---------------------------------------------------------------------------
# Random-direction mode

class _Counted:
    def __init__(self, f):
        self.f, self.calls, self.__name__ = f, 0, f.__name__

    def __call__(self, xs):
        self.calls += 1
        return self.f(xs)


def test_random_mode_costs_two_evaluations():
    xs, gys, _ = _case([(4, 5), (5,)], [(4, 5)], F64)
    f = _Counted(_tanh_times)
    check_backward(f, xs, gys, mode='random', rng=numpy.random.default_rng(1))
    assert f.calls == 1 + 2  # the analytic pass, then two evaluations
    f.calls = 0
    check_backward(f, xs, gys)
    assert f.calls == 1 + 2 * 25


def test_random_mode_catches_a_wrong_first_derivative_deterministically():
    x, gy = _leaf((5,)), _uniform((5,), seed=1)
    messages = {str(_fails(check_backward, _op(WrongFirst), [x], [gy], mode='random',
                           rng=numpy.random.default_rng(42))) for _ in range(2)}
    assert len(messages) == 1
    message, = messages
    assert 'along a random unit direction' in message and 'input 0: analytic' in message


# ---------------------------------------------------------------------------
# Kinks

def test_kink_is_reported_when_detection_is_on():
    x = xgrad.array(numpy.array([0.5, 0.0, -0.3])).require_grad()
    gy = _uniform((3,), seed=1)
    with pytest.raises(NondifferentiablePointError) as info:
        check_backward(lambda xs: xgrad.abs(xs[0]), [x], [gy], name='abs',
                       detect_nondifferentiable=True)
    e = info.value
    assert (e.input_index, e.element_index) == (0, (1,))
    assert "check_backward('abs'): input 0 sits on a non-differentiable point at " \
           "element (1,)" in str(e)
    # abs at 0: the central difference (0) agrees with the analytic gradient
    # (0), so without detection, or with detection on failure only, it passes.
    check_backward(lambda xs: xgrad.abs(xs[0]), [x], [gy])
    check_backward(lambda xs: xgrad.abs(xs[0]), [x], [gy],
                   detect_nondifferentiable='on_failure')


@pytest.mark.parametrize('mode', ['full', 'random'])
def test_kink_explains_a_failure(mode):
    # relu at 0: central difference 1/2, analytic 0.
    x = xgrad.array(numpy.array([0.5, 0.0, -0.3])).require_grad()
    gy = xgrad.array(numpy.ones(3))
    _fails(check_backward, lambda xs: xgrad.relu(xs[0]), [x], [gy], mode=mode)
    with pytest.raises(NondifferentiablePointError) as info:
        check_backward(lambda xs: xgrad.relu(xs[0]), [x], [gy], mode=mode,
                       detect_nondifferentiable='on_failure')
    assert info.value.input_index == 0
    assert info.value.element_index == ((1,) if mode == 'full' else None)
    assert isinstance(info.value.result, GradientCheckResult)


def test_kink_in_double_backward():
    x = xgrad.array(numpy.array([0.5, 0.0])).require_grad()
    with pytest.raises(NondifferentiablePointError) as info:
        check_double_backward(lambda xs: xgrad.abs(xs[0]) * xs[0], [x],
                              [_uniform((2,), seed=1)], [_uniform((2,), seed=2)],
                              detect_nondifferentiable=True)
    assert info.value.element_index == (1,)


# ---------------------------------------------------------------------------
# Leaks and threads

@pytest.mark.parametrize('func', [_op(Square), _op(SinCos), _tanh_times])
def test_no_leaks_and_thread_safe(func):
    n_in = 2 if func is _tanh_times else 1
    xs = [_leaf((3,), seed=i) for i in range(n_in)]
    gys = [_uniform((3,), seed=5)] + ([None] if func.__name__ == 'SinCos' else [])
    check_backward(func, xs, gys, check_leaks=True, check_threads=True)
    check_double_backward(func, xs, gys, [_uniform((3,), seed=6 + i) for i in range(n_in)],
                          check_leaks=True, check_threads=True)
    check_backward(func, xs, gys, mode='random', check_leaks=True, check_threads=True)


def test_leak_is_reported_with_its_count():
    kept = []

    def stash(xs):
        y = xgrad.tanh(xs[0])
        kept.append(y)
        return y

    e = _fails(check_backward, stash, [_leaf((3,))], [_uniform((3,), seed=1)],
               check_leaks=True)
    # One array per call: the analytic pass and two evaluations per element.
    assert "check_backward('stash'): leaked 7 xgrad array(s)" in str(e)


def test_thread_failure_is_reported():
    def main_thread_only(xs):
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError('not thread-safe')
        return xs[0] * 2

    e = _fails(check_backward, main_thread_only, [_leaf((3,))], [_uniform((3,), seed=1)],
               check_threads=True)
    assert 'fails when run from two threads at once' in str(e)
    assert 'RuntimeError: not thread-safe' in str(e)


# ---------------------------------------------------------------------------
# Bad use: TypeError or ValueError, never a verdict

def _square(xs):
    return xs[0] * xs[0]


def test_eps_of_the_wrong_shape():
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    with pytest.raises(ValueError, match=r'eps\[0\] has shape \(2,\), but input 0 has '
                                         r'shape \(3,\)'):
        check_backward(_square, [x], [gy], [xgrad.full((2,), 1e-3, F64)])
    with pytest.raises(ValueError, match=r'eps\[1\] has shape \(2,\)'):
        check_double_backward(_square, [x], [gy], [gy], [1e-3, xgrad.full((2,), 1e-3, F64)])


def test_eps_list_of_the_wrong_length():
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    with pytest.raises(ValueError, match='eps has 2 entries for 1 inputs'):
        check_backward(_square, [x], [gy], [1e-3, 1e-3])
    with pytest.raises(ValueError, match='eps has 1 entries for 1 inputs and 1 '
                                         'grad_outputs'):
        check_double_backward(_square, [x], [gy], [gy], [1e-3])


def test_outputs_and_grad_outputs_of_different_lengths():
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    with pytest.raises(ValueError, match=r"check_backward\('_square'\): the function "
                                         r"returned 1 output\(s\) but grad_outputs has 2"):
        check_backward(_square, [x], [gy, gy])
    with pytest.raises(ValueError, match=r'returned 2 output\(s\) but grad_outputs has 1'):
        check_double_backward(_op(SinCos), [x], [gy], [gy])
    with pytest.raises(ValueError, match=r'grad_outputs\[0\] has shape \(2,\), but output '
                                         r'0 has shape \(3,\)'):
        check_backward(_square, [x], [_uniform((2,))])


@pytest.mark.parametrize('check', ['backward', 'double'])
@pytest.mark.parametrize('func, what', [
    (lambda xs: xs[0].to_numpy(), 'ndarray'),
    (lambda xs: {'y': xs[0]}, 'dict'),
    (lambda xs: 0.0, 'float'),
])
def test_function_returning_the_wrong_type(func, what, check):
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    with pytest.raises(TypeError, match='returned a {}'.format(what)):
        if check == 'backward':
            check_backward(func, [x], [gy])
        else:
            check_double_backward(func, [x], [gy], [gy], check_first_order=False)


def test_grad_grad_inputs_of_the_wrong_length_or_shape():
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    with pytest.raises(ValueError, match='grad_grad_inputs has 2 entries for 1 inputs'):
        check_double_backward(_square, [x], [gy], [gy, gy])
    with pytest.raises(ValueError, match=r"grad_grad_inputs\[0\] must be an array of "
                                         r"input 0's shape \(3,\), not \(2,\)"):
        check_double_backward(_square, [x], [gy], [_uniform((2,))])
    with pytest.raises(ValueError, match=r"grad_grad_inputs\[0\] must be .* not None"):
        check_double_backward(_square, [x], [gy], [None])


def test_inputs_that_cannot_be_checked():
    gy = _uniform((3,), seed=1)
    with pytest.raises(ValueError, match='no input requires grad'):
        check_backward(_square, [_uniform((3,))], [gy])
    with pytest.raises(ValueError, match='input 0 is not a leaf'):
        check_backward(_square, [_leaf((3,)) * 2], [gy])
    with pytest.raises(ValueError, match='at least one input'):
        check_backward(_square, [], [gy])
    with pytest.raises(TypeError, match=r'inputs\[0\] must be an xgrad.ndarray'):
        check_backward(_square, [numpy.zeros(3)], [gy])
    with pytest.raises(TypeError, match='grad_outputs must be a list'):
        check_backward(_square, [_leaf((3,))], gy)
    with pytest.raises(TypeError, match='func must be callable'):
        check_backward('square', [_leaf((3,))], [gy])


def test_bad_options():
    x, gy = _leaf((3,)), _uniform((3,), seed=1)
    with pytest.raises(ValueError, match="mode must be 'full' or 'random'"):
        check_backward(_square, [x], [gy], mode='fast')
    with pytest.raises(ValueError, match='detect_nondifferentiable'):
        check_backward(_square, [x], [gy], detect_nondifferentiable='yes')
    with pytest.raises(TypeError, match='rng'):
        check_backward(_square, [x], [gy], mode='random', rng=1.5)
