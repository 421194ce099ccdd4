"""xgrad.functional on every registered op with second derivatives, against
float64 central differences (``xgrad.testing.numerical_grad``, the driver's
inputs, output gradients and tolerances).

For each op (its first non-empty sample, float64), f maps the differentiable
inputs to the op's outputs:

* ``vjp``: the vector-Jacobian product with the driver's random output
  gradients gy is numerical ``J^T gy``;
* ``jvp``: ``J t`` for a random tangent t, element by element, is the
  numerical derivative of each output element along t;
* ``jacobian``: contracted with gy it is numerical ``J^T gy`` again;
* ``hessian`` and ``hvp`` of the scalar ``s(x) = sum_j <gy_j, f_j(x)>``:
  ``H w`` for a random w (``hvp``, and ``hessian`` contracted with w) is the
  numerical derivative of the analytic gradient of s (computed by ``vjp``)
  projected on w (H is symmetric).

The inputs are grad-required on the default graph, as the driver makes
them: the transforms must leave their gradients alone. Nothing here names
an op: adding one to the registry adds its cases.
"""

import numpy
import pytest

import xgrad
from xgrad import functional as F
from xgrad._ops.registry import F64, sample_seed
from xgrad.testing import NondifferentiablePointError, numerical_grad
from xgrad.testing import _driver

OPS = [info for info in xgrad.registered_ops() if info.twice_differentiable]


def _sample(info):
    return next((s for s in info.samples if not s.is_empty), info.samples[0])


def _setups(info, purpose):
    """The driver's set-up of the op's first sample in float64, redrawn (at
    most ``MAX_DRAWS`` times) while the check says it sits on a kink."""
    sample = _sample(info)
    case = _driver.Case(info, sample, F64, 'native:0', 2)
    for draw in range(_driver.MAX_DRAWS):
        rs = numpy.random.RandomState(sample_seed('functional', purpose, info.name, draw))
        yield case, rs, _driver._Setup(case, rs, info.sample_data(sample, F64, rs))


def _run(info, purpose, check):
    last = None
    for case, rs, setup in _setups(info, purpose):
        try:
            return check(case, rs, setup)
        except NondifferentiablePointError as e:
            last = e
    raise last


def _tol(case, setup):
    return _driver._tolerance(case, setup)


def _eps(case, setup):
    return case.info.step(_driver._work_dtype(case, setup))


def _np(a):
    return a.to_numpy().astype(F64)


def _close(actual, expected, atol, rtol, what):
    numpy.testing.assert_allclose(actual, expected, atol=atol, rtol=rtol, err_msg=what)


def _float_outputs(setup):
    """f restricted to its outputs that have gradients (float ones), and
    their output gradients."""
    keep = [j for j, g in enumerate(setup.grad_outputs) if g is not None]

    def f(*xs):
        ys = setup.func(list(xs))
        return tuple(ys[j] for j in keep)
    return f, [setup.grad_outputs[j] for j in keep]


def _untouched(setup):
    for x in setup.inputs:
        assert x.grad is None, 'a transform wrote a gradient of its input'


@pytest.mark.parametrize('info', OPS, ids=[i.name for i in OPS])
def test_vjp_and_jacobian(info):
    def check(case, rs, setup):
        atol, rtol = _tol(case, setup)
        f, gys = _float_outputs(setup)
        numerical = numerical_grad(setup.func, setup.inputs, setup.grad_outputs,
                                   _eps(case, setup), detect_nondifferentiable=True)
        outputs, vjp_fn = F.vjp(f, *setup.inputs)
        with xgrad.no_backprop_mode():
            expected = f(*setup.inputs)
        for y, e in zip(outputs, expected):
            numpy.testing.assert_array_equal(_np(y), _np(e))
        got = vjp_fn(tuple(gys))
        for i, (g, n) in enumerate(zip(got, numerical)):
            _close(_np(g), n, atol, rtol, 'vjp, input {}'.format(i))
        jac = F.jacobian(f, *setup.inputs)
        jac = [[row] if len(setup.inputs) == 1 else list(row) for row in jac]
        for j, n in enumerate(numerical):
            contracted = sum(numpy.tensordot(_np(gy), _np(jac[i][j]), axes=gy.ndim)
                             for i, gy in enumerate(gys))
            _close(contracted, n, atol, rtol, 'jacobian contracted with gy, input {}'.format(j))
        _untouched(setup)
    _run(info, 'vjp', check)


@pytest.mark.parametrize('info', OPS, ids=[i.name for i in OPS])
def test_jvp(info):
    def check(case, rs, setup):
        atol, rtol = _tol(case, setup)
        f, gys = _float_outputs(setup)
        tangents = [xgrad.array(rs.uniform(-1, 1, x.shape)) for x in setup.inputs]
        outputs, jv = F.jvp(f, tuple(setup.inputs), tuple(tangents))
        eps = _eps(case, setup)
        for j, (y, t) in enumerate(zip(outputs, jv)):
            assert t.shape == y.shape and t.dtype == y.dtype
            expected = numpy.empty(y.shape)
            flat = expected.reshape(-1)
            for k in range(y.size):
                seed = numpy.zeros(y.size)
                seed[k] = 1
                seeds = [None] * len(gys)
                seeds[j] = xgrad.array(seed.reshape(y.shape).astype(y.dtype))
                flat[k] = numerical_grad(lambda xs: f(*xs), setup.inputs, seeds, eps,
                                         direction=tangents,
                                         detect_nondifferentiable=k == 0)
            _close(_np(t), expected, atol, rtol, 'jvp, output {}'.format(j))
        _untouched(setup)
    _run(info, 'jvp', check)


@pytest.mark.parametrize('info', OPS, ids=[i.name for i in OPS])
def test_hessian_and_hvp(info):
    def check(case, rs, setup):
        atol, rtol = _tol(case, setup)
        f, gys = _float_outputs(setup)

        def s(*xs):
            return sum(xgrad.sum(gy * y) for gy, y in zip(gys, f(*xs)))

        def gradient(xs):
            _, vjp_fn = F.vjp(s, *xs)
            ys = s(*xs)
            return vjp_fn(xgrad.ones(ys.shape, ys.dtype), retain_graph=False)

        ws = setup.grad_grad_inputs
        numerical = numerical_grad(gradient, setup.inputs, ws, _eps(case, setup),
                                   detect_nondifferentiable=True)
        single = len(setup.inputs) == 1
        _, hv = F.hvp(s, setup.inputs[0] if single else tuple(setup.inputs),
                      ws[0] if single else tuple(ws))
        hv = [hv] if single else hv
        hessian = F.hessian(s, *setup.inputs)
        hessian = [[hessian]] if single else hessian
        for j, n in enumerate(numerical):
            _close(_np(hv[j]), n, atol, rtol, 'hvp, input {}'.format(j))
            contracted = sum(numpy.tensordot(_np(hessian[j][k]), _np(w), axes=w.ndim)
                             for k, w in enumerate(ws))
            _close(contracted, n, atol, rtol, 'hessian times w, input {}'.format(j))
        _untouched(setup)
    _run(info, 'hessian', check)
