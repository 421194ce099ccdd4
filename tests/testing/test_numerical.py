"""xgrad.testing's numerical gradients: central differences in float64, the
random-direction mode, kink detection and the errors for bad use."""

import numpy
import pytest

import xgrad
from xgrad.testing._numerical import (
    KINK_RTOL, NondifferentiablePointError, numerical_grad)
from xgrad.testing._tolerances import default_eps, default_tolerance

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# inputs left unchanged.


F16 = numpy.dtype('float16')
F32 = numpy.dtype('float32')
F64 = numpy.dtype('float64')


def _array(values, dtype=F64):
    return xgrad.array(numpy.asarray(values, dtype=dtype))


def _uniform(shape, dtype=F64, seed=0):
    return _array(numpy.random.RandomState(seed).uniform(-1, 1, shape), dtype)


class _Counted:
    """``f`` with a count of its calls."""

    def __init__(self, f):
        self.f = f
        self.calls = 0
        self.__name__ = f.__name__

    def __call__(self, xs):
        self.calls += 1
        return self.f(xs)


def _tanh_times(xs):
    x, y = xs
    return xgrad.tanh(x) * y


def _tanh_times_grads(x, y, gy):
    """Closed-form gradients of tanh(x) * y (y broadcast over x's rows)."""
    t = numpy.tanh(x)
    return (1 - t * t) * y * gy, (t * gy).sum(axis=0)


# ---------------------------------------------------------------------------
# Tolerances and steps

def test_default_tolerance_and_eps_come_from_the_registry():
    from xgrad._ops.registry import DEFAULT_EPS, DEFAULT_TOL
    for dtype in (F16, F32, F64):
        assert default_tolerance(dtype) == DEFAULT_TOL[dtype]
        assert default_eps(dtype) == DEFAULT_EPS[dtype]
    assert default_tolerance('float16') == (1e-2, 1e-2)
    assert default_tolerance(F32) == (2e-3, 2e-3)
    assert default_tolerance(F64) == (1e-6, 1e-5)
    assert default_eps(F16) == 1e-3


def test_default_tolerance_rejects_non_float_dtypes():
    with pytest.raises(xgrad.DtypeError, match='int32'):
        default_tolerance('int32')
    with pytest.raises(xgrad.DtypeError, match='bool'):
        default_eps(bool)


# ---------------------------------------------------------------------------
# Full gradients

@pytest.mark.parametrize('dtype', [F16, F32, F64])
def test_full_gradient_matches_closed_form_in_float64(dtype):
    x, y, gy = _uniform((2, 3), dtype, 1), _uniform((3,), dtype, 2), _uniform((2, 3), dtype, 3)
    seen = []

    def f(xs):
        seen.append({a.dtype for a in xs})
        return _tanh_times(xs)

    gx, gyy = numerical_grad(f, [x, y], [gy])
    assert seen and all(s == {F64} for s in seen)  # evaluated on float64 copies
    assert gx.dtype == F64 and gx.shape == (2, 3) and gyy.shape == (3,)
    # The reference: the gradient at exactly the (rounded) inputs, in float64.
    ex, ey = _tanh_times_grads(*(a.to_numpy().astype(F64) for a in (x, y, gy)))
    tol = 1e-5 if dtype != F64 else 1e-8  # truncation error eps**2 of the default step
    numpy.testing.assert_allclose(gx, ex, atol=tol, rtol=tol)
    numpy.testing.assert_allclose(gyy, ey, atol=tol, rtol=tol)


def test_full_gradient_costs_two_evaluations_per_element():
    f = _Counted(_tanh_times)
    numerical_grad(f, [_uniform((2, 3)), _uniform((3,))], [_uniform((2, 3))])
    assert f.calls == 2 * (6 + 3)


def test_multiple_outputs_with_a_none_grad_output():
    def sin_cos(xs):
        return xgrad.sin(xs[0]), xgrad.cos(xs[0])

    x, gy = _uniform((4,)), _uniform((4,), seed=1)
    g, = numerical_grad(sin_cos, [x], [None, gy])
    numpy.testing.assert_allclose(g, -numpy.sin(x.to_numpy()) * gy.to_numpy(), rtol=1e-8)
    g, = numerical_grad(lambda xs: (xgrad.sin(xs[0]), None), [x], [gy, None])
    numpy.testing.assert_allclose(g, numpy.cos(x.to_numpy()) * gy.to_numpy(), rtol=1e-8)


def test_non_float_inputs_are_constants():
    x = _uniform((3,))
    k = xgrad.array(numpy.array([1, 2, 3], numpy.int64))
    gx, gk = numerical_grad(lambda xs: xs[0] * xs[1], [x, k], [_array([1.0, 1.0, 1.0])])
    assert gk is None
    numpy.testing.assert_allclose(gx, [1, 2, 3], rtol=1e-9)


def test_zero_dim_and_empty_inputs():
    g, = numerical_grad(lambda xs: xgrad.exp(xs[0]), [_array(0.5)], [_array(2.0)])
    assert g.shape == () and abs(g - 2 * numpy.exp(0.5)) < 1e-8
    g, = numerical_grad(lambda xs: xs[0] * 2, [_array(numpy.zeros((0, 3)))],
                        [_array(numpy.zeros((0, 3)))])
    assert g.shape == (0, 3)


def test_outputs_that_view_the_inputs():
    # Identity and reshape return views of the perturbed data: still exact.
    x, gy = _uniform((2, 3)), _uniform((6,), seed=1)
    g, = numerical_grad(lambda xs: xs[0].reshape(6), [x], [gy])
    numpy.testing.assert_allclose(g, gy.to_numpy().reshape(2, 3), rtol=1e-9)
    g, = numerical_grad(lambda xs: xs[0], [x], [gy.reshape(2, 3)])
    numpy.testing.assert_allclose(g, gy.to_numpy().reshape(2, 3), rtol=1e-9)


def test_inputs_are_not_modified():
    x = _uniform((3,), F32)
    before = x.to_numpy().copy()
    numerical_grad(lambda xs: xs[0] * xs[0], [x], [_array([1.0, 1.0, 1.0])],
                   direction='random')
    numerical_grad(lambda xs: xs[0] * xs[0], [x], [_array([1.0, 1.0, 1.0])])
    numpy.testing.assert_array_equal(x.to_numpy(), before)


@pytest.mark.parametrize('dtype', [F16, F32, F64])
def test_default_eps_per_dtype(dtype):
    # The central difference of x**3 at 0 is exactly eps**2: it shows the step.
    g, = numerical_grad(lambda xs: xs[0] ** 3, [_array([0.0], dtype)], [_array([1.0])])
    assert g[0] == pytest.approx(default_eps(dtype) ** 2, rel=1e-9)


def test_default_eps_follows_less_precise_outputs():
    # f returns float32 whatever its input: a float64 input gets float32's step
    # (x**3 at 0 again shows it), as float64 steps would drown in round-off.
    g, = numerical_grad(lambda xs: (xs[0] ** 3).astype(F32), [_array([0.0])],
                        [_array([1.0], F32)])
    assert g[0] == pytest.approx(default_eps(F32) ** 2, rel=1e-5)


def test_nan_elements_that_f_ignores_have_zero_gradient():
    g, = numerical_grad(lambda xs: xgrad.nansum(xs[0]), [_array([0.5, numpy.nan])],
                        [_array(1.0)])
    numpy.testing.assert_allclose(g, [1.0, 0.0], rtol=1e-9)


def test_eps_forms():
    x, y = _array([0.0]), _array([0.0])
    gy = [_array([1.0])]

    def f(xs):
        return xs[0] ** 3 + xs[1] ** 3

    assert numerical_grad(f, [x, y], gy, 1e-2)[0][0] == pytest.approx(1e-4)
    gs = numerical_grad(f, [x, y], gy, [1e-2, 1e-1])
    assert [g[0] for g in gs] == [pytest.approx(1e-4), pytest.approx(1e-2)]
    gs = numerical_grad(f, [x, y], gy, [_array([1e-2]), numpy.array([1e-1])])
    assert [g[0] for g in gs] == [pytest.approx(1e-4), pytest.approx(1e-2)]


# ---------------------------------------------------------------------------
# Directional derivatives

def test_directional_derivative_along_a_given_direction():
    x, y, gy = _uniform((2, 3), seed=1), _uniform((3,), seed=2), _uniform((2, 3), seed=3)
    vx, vy = numpy.random.RandomState(4).normal(size=(2, 3)), numpy.array([1.0, 0.0, -2.0])
    d = numerical_grad(_tanh_times, [x, y], [gy], direction=[vx, _array(vy)])
    ex, ey = _tanh_times_grads(x.to_numpy(), y.to_numpy(), gy.to_numpy())
    assert isinstance(d, float)
    assert d == pytest.approx(numpy.vdot(ex, vx) + numpy.vdot(ey, vy), rel=1e-8)
    # A None direction leaves that input where it is.
    d = numerical_grad(_tanh_times, [x, y], [gy], direction=[None, vy])
    assert d == pytest.approx(numpy.vdot(ey, vy), rel=1e-8)


def test_random_direction_costs_two_evaluations_and_is_reproducible():
    x, y, gy = _uniform((4, 5)), _uniform((5,), seed=1), _uniform((4, 5), seed=2)
    f = _Counted(_tanh_times)
    d = numerical_grad(f, [x, y], [gy], direction='random', rng=numpy.random.default_rng(7))
    assert f.calls == 2
    assert d == numerical_grad(f, [x, y], [gy], direction='random', rng=7)
    assert numerical_grad(f, [x, y], [gy], direction='random') == numerical_grad(
        f, [x, y], [gy], direction='random', rng=0)  # default seed 0
    # It is the full gradient projected on a unit normal draw.
    rng = numpy.random.default_rng(7)
    vx, vy = rng.standard_normal((4, 5)), rng.standard_normal(5)
    norm = numpy.sqrt((vx * vx).sum() + (vy * vy).sum())
    gx, gyy = numerical_grad(_tanh_times, [x, y], [gy])
    assert d == pytest.approx((numpy.vdot(gx, vx) + numpy.vdot(gyy, vy)) / norm, rel=1e-7)


# ---------------------------------------------------------------------------
# Kinks

def _relu(xs):
    return xgrad.relu(xs[0])


def _abs(xs):
    return xgrad.abs(xs[0])


@pytest.mark.parametrize('f', [_abs, _relu])
def test_exact_kink_is_reported_with_input_and_element(f):
    x = _array([[0.5, -0.25], [0.0, 0.75]])
    gy = _array(numpy.ones((2, 2)))
    with pytest.raises(NondifferentiablePointError) as info:
        numerical_grad(lambda xs: f([xs[1]]) * xs[0], [_array([1.5]), x], [gy],
                       detect_nondifferentiable=True)
    e = info.value
    assert isinstance(e, xgrad.GradientCheckError)
    assert (e.input_index, e.element_index) == (1, (1, 0))
    assert 'input 1' in str(e) and 'element (1, 0)' in str(e)


def test_kink_within_eps_is_reported_and_one_beyond_is_not():
    # The stencil x +- eps straddles a kink 1e-9 away (the central difference
    # would be off by ~1/2); a kink 2 eps away is outside it.
    eps = default_eps(F64)
    with pytest.raises(NondifferentiablePointError):
        numerical_grad(_relu, [_array([1e-9])], [_array([1.0])],
                       detect_nondifferentiable=True)
    with pytest.raises(NondifferentiablePointError):
        numerical_grad(_relu, [_array([-0.9 * eps])], [_array([1.0])],
                       detect_nondifferentiable=True)
    g, = numerical_grad(_relu, [_array([2 * eps, -2 * eps])], [_array([1.0, 1.0])],
                        detect_nondifferentiable=True)
    numpy.testing.assert_allclose(g, [1.0, 0.0], atol=1e-9)


@pytest.mark.parametrize('f, x', [
    (lambda xs: xgrad.exp(xs[0] * 3), [0.5, -1.0, 2.0]),
    (lambda xs: xgrad.log(xs[0]), [0.05, 0.5, 3.0]),
    (lambda xs: xgrad.tanh(xs[0] * 5), [0.1, -0.3, 0.0]),
    (lambda xs: xs[0] * xs[0], [0.0, 1e-9, -0.5]),  # stationary points are smooth
    (lambda xs: xgrad.sin(xs[0]), [numpy.pi / 2, 0.0, 1.0]),
    (lambda xs: 1 / xs[0], [0.02, -0.5, 4.0]),
])
@pytest.mark.parametrize('dtype', [F32, F64])
def test_smooth_functions_are_not_reported(f, x, dtype):
    numerical_grad(f, [_array(x, dtype)], [_array(numpy.ones(3))],
                   detect_nondifferentiable=True)
    numerical_grad(f, [_array(x, dtype)], [_array(numpy.ones(3))], direction='random',
                   detect_nondifferentiable=True)


def test_threshold_is_documented_value():
    assert KINK_RTOL == 1e-3


@pytest.mark.filterwarnings('ignore::RuntimeWarning')
def test_edge_of_the_domain_is_reported():
    # log is NaN on part of the stencil: the point is not usable.
    with pytest.raises(NondifferentiablePointError, match='finite at some'):
        numerical_grad(lambda xs: xgrad.log(xs[0]), [_array([0.5, 5e-4])],
                       [_array([1.0, 1.0])], eps=1e-3, detect_nondifferentiable=True)


def test_jump_is_reported():
    def step(xs):  # 1 where x > 0: a jump at 0
        return xgrad.where(xs[0] > 0, xgrad.ones_like(xs[0]), xgrad.zeros_like(xs[0]))

    with pytest.raises(NondifferentiablePointError) as info:
        numerical_grad(step, [_array([0.3, 0.0])], [_array([1.0, 1.0])],
                       detect_nondifferentiable=True)
    assert info.value.element_index == (1,)


def test_kink_along_a_random_direction_names_the_input():
    x = _array([0.5, -0.3])
    y = _array([0.2, 0.0])  # abs at 0 in y only

    def f(xs):
        return xgrad.exp(xs[0]) + xgrad.abs(xs[1])

    with pytest.raises(NondifferentiablePointError) as info:
        numerical_grad(f, [x, y], [_array([1.0, 1.0])], direction='random',
                       detect_nondifferentiable=True)
    assert info.value.input_index == 1 and info.value.element_index is None
    assert 'input 1' in str(info.value)


def test_detection_costs_five_evaluations_per_element_plus_one():
    f = _Counted(_tanh_times)
    numerical_grad(f, [_uniform((2, 3)), _uniform((3,))], [_uniform((2, 3))],
                   detect_nondifferentiable=True)
    assert f.calls == 1 + 4 * 9


# ---------------------------------------------------------------------------
# Bad use: clear errors, never a result

def _square(xs):
    return xs[0] * xs[0]


def test_eps_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r'eps\[1\] has shape \(2,\), but input 1 has '
                                         r'shape \(3,\)'):
        numerical_grad(lambda xs: xs[0] * xs[1], [_uniform((3,)), _uniform((3,))],
                       [_uniform((3,))], [1e-3, _array([1e-3, 1e-3])])


def test_eps_list_of_the_wrong_length():
    with pytest.raises(ValueError, match='eps has 2 entries for 1 inputs'):
        numerical_grad(_square, [_uniform((3,))], [_uniform((3,))], [1e-3, 1e-3])


@pytest.mark.parametrize('eps', [0.0, -1e-3, float('nan'), [numpy.array([1e-3, 0.0, 1e-3])]])
def test_eps_must_be_positive(eps):
    with pytest.raises(ValueError, match='positive'):
        numerical_grad(_square, [_uniform((3,))], [_uniform((3,))], eps)


@pytest.mark.parametrize('eps', ['0.1', {0: 1e-3}, [True]])
def test_eps_of_the_wrong_type(eps):
    with pytest.raises(TypeError, match='eps'):
        numerical_grad(_square, [_uniform((3,))], [_uniform((3,))], eps)


@pytest.mark.parametrize('result, what', [
    (lambda xs: xs[0].to_numpy(), 'ndarray'),
    (lambda xs: {'y': xs[0]}, 'dict'),
    (lambda xs: 1.5, 'float'),
    (lambda xs: None, 'NoneType'),
])
def test_function_returning_the_wrong_type(result, what):
    with pytest.raises(TypeError, match='returned a {}'.format(what)):
        numerical_grad(result, [_uniform((3,))], [_uniform((3,))])


def test_function_returning_a_non_array_among_outputs():
    with pytest.raises(TypeError, match='returned a list as output 1'):
        numerical_grad(lambda xs: (xs[0], [1.0]), [_uniform((3,))], [_uniform((3,)), None])


def test_grad_outputs_of_the_wrong_length_or_shape():
    with pytest.raises(ValueError, match=r'returned 1 output\(s\) but grad_outputs has 2'):
        numerical_grad(_square, [_uniform((3,))], [_uniform((3,)), None])
    with pytest.raises(ValueError, match=r'grad_outputs\[0\] has shape \(2,\), but output '
                                         r'0 has shape \(3,\)'):
        numerical_grad(_square, [_uniform((3,))], [_uniform((2,))])


def test_arguments_of_the_wrong_type():
    with pytest.raises(TypeError, match='inputs must be a list'):
        numerical_grad(_square, _uniform((3,)), [_uniform((3,))])
    with pytest.raises(TypeError, match=r'inputs\[0\] must be an xgrad.ndarray'):
        numerical_grad(_square, [numpy.zeros(3)], [_uniform((3,))])
    with pytest.raises(TypeError, match=r'grad_outputs\[0\]'):
        numerical_grad(_square, [_uniform((3,))], [numpy.zeros(3)])
    with pytest.raises(ValueError, match='at least one input'):
        numerical_grad(_square, [], [_uniform((3,))])
    with pytest.raises(TypeError, match='rng'):
        numerical_grad(_square, [_uniform((3,))], [_uniform((3,))], direction='random',
                       rng='seed')


def test_directions_of_the_wrong_length_shape_or_input():
    x, gy = _uniform((3,)), [_uniform((3,))]
    with pytest.raises(ValueError, match='direction has 2 entries for 1 inputs'):
        numerical_grad(_square, [x], gy, direction=[numpy.ones(3), numpy.ones(3)])
    with pytest.raises(ValueError, match=r'direction\[0\] has shape \(2,\), but input 0'):
        numerical_grad(_square, [x], gy, direction=[numpy.ones(2)])
    with pytest.raises(ValueError, match="'random'"):
        numerical_grad(_square, [x], gy, direction='randn')
    k = xgrad.array(numpy.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r'direction\[1\] must be None: input 1 is not '
                                         r'differentiated'):
        numerical_grad(lambda xs: xs[0] * xs[1], [x, k], gy,
                       direction=[numpy.ones(3), numpy.ones(3)])
