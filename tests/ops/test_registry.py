"""Tests generated from the op registry (``xgrad.registered_ops()``).

For every registered op and every declared sample:

* ``test_forward``: values, shape and dtype match the NumPy reference on each
  declared float dtype and each declared integer/bool dtype; the inputs are not
  modified; nothing is recorded without grad-required inputs.
* ``test_gradients`` (differentiable ops): first and second derivatives on
  float16, float32 and float64 against float64 central differences, on
  inputs drawn from the op's declared domain, through the registry driver
  of ``python -m xgrad check`` (``xgrad/testing/_driver.py``).
* ``test_not_differentiable``: outputs of non-differentiable ops never join
  a graph.
* ``test_not_twice_differentiable_raises``: double backprop through an op
  declared once-differentiable raises a GradientError naming it.

Adding an op to the registry adds its tests; nothing here names an op.
"""

import numpy
import pytest

import xgrad
from xgrad._ops.registry import F32, F64, sample_seed

from xgrad.testing import _driver

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# inputs left unchanged by a forward pass (no arithmetic on them).

OPS = xgrad.registered_ops()


def _rs(*keys):
    return numpy.random.RandomState(sample_seed(*keys))


def _as_tuple(ys):
    return tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)


def _params(kind, dtypes_of):
    params = []
    for info in OPS:
        if kind == 'grad' and not info.differentiable:
            continue
        if kind == 'double' and not info.twice_differentiable:
            continue
        for sample in info.samples:
            for dtype in dtypes_of(info):
                params.append(pytest.param(
                    info, sample, dtype,
                    id='{}-{}-{}'.format(info.name, sample.name, dtype)))
    return params


def _data(info, sample, dtype, purpose):
    return info.sample_data(sample, dtype, _rs(purpose, info.name, sample.name, dtype))


def _xgrad_arrays(info, sample, data, require_grad=False):
    xs = [xgrad.array(a) for a in data]
    if require_grad:
        for i in info.differentiable_inputs(sample):
            xs[i].require_grad()
    return xs


# ---------------------------------------------------------------------------
# Forward against NumPy

@pytest.mark.parametrize('info, sample, dtype', _params(
    'forward', lambda info: info.dtypes + info.int_dtypes if info.ref else ()))
def test_forward(info, sample, dtype):
    data = _data(info, sample, dtype, 'forward')
    xs = _xgrad_arrays(info, sample, data)
    with numpy.errstate(all='ignore'):
        # ChainerX's result dtype (docs/dtype_promotion.md) where the op
        # declares its promotion, else the reference's.
        expected = [numpy.asarray(e) for e in _as_tuple(
            info.expected_forward(data, sample, dtype))]
        actual = _as_tuple(info(xs, sample))
    for y in actual:
        assert isinstance(y, xgrad.ndarray), type(y)
    info.assert_forward_matches(actual, expected)
    for y in actual:
        assert not y.is_backprop_required(xgrad.anygraph)
    for x, a in zip(xs, data):
        numpy.testing.assert_array_equal(x.to_numpy(), a)


# ---------------------------------------------------------------------------
# Gradients: first and second order, float16/32/64, through the registry
# driver that `python -m xgrad check` runs (float64 numerics, the dtype's
# tolerance, inputs re-drawn off non-differentiable points)

GRADIENT_CASES = _driver.cases()


@pytest.mark.parametrize('case', GRADIENT_CASES, ids=[c.name for c in GRADIENT_CASES])
def test_gradients(case):
    result = _driver.run_case(case, seed=0)
    assert result.passed, result.message


# ---------------------------------------------------------------------------
# Declared differentiability

NON_DIFF = [pytest.param(info, id=info.name) for info in OPS if not info.differentiable]
ONCE_DIFF = [pytest.param(info, id=info.name) for info in OPS
             if info.differentiable and not info.twice_differentiable] or [
    pytest.param(None, id='none', marks=pytest.mark.skip(
        reason='every registered op is twice differentiable; the once-differentiable '
               'mechanism itself is tested in test_py_op.py'))]


@pytest.mark.parametrize('info', NON_DIFF)
def test_not_differentiable(info):
    sample = info.samples[0]
    dtype = F32 if F32 in info.dtypes else info.int_dtypes[0]
    data = _data(info, sample, dtype, 'nondiff')
    xs = [xgrad.array(a) for a in data]
    for x in xs:
        if x.dtype.kind == 'f':
            x.require_grad()
    for y in _as_tuple(info(xs, sample)):
        assert not y.is_backprop_required(xgrad.anygraph)


@pytest.mark.parametrize('info', ONCE_DIFF)
def test_not_twice_differentiable_raises(info):
    sample = next(s for s in info.samples if not s.is_empty)
    case = _driver.Case(info, sample, F64, 'native:0', 2)
    rs = _rs('once', info.name, sample.name)
    setup = _driver._Setup(case, rs, info.sample_data(sample, F64, rs))
    xs = setup.inputs
    ys = setup.func(xs)
    pairs = [(y, g) for y, g in zip(ys, setup.grad_outputs) if g is not None]
    gxs = xgrad.grad([y for y, _ in pairs], xs, grad_outputs=[g for _, g in pairs],
                     enable_double_backprop=True)
    # First order works; differentiating the gradient does not.
    g = next(g for g in gxs if g is not None)
    with pytest.raises(xgrad.GradientError, match=info.name.split('.')[-1]):
        xgrad.grad([g], xs, grad_outputs=[xgrad.ones_like(g)])


def test_registry_names_are_public():
    for info in OPS:
        obj = xgrad
        for part in info.name.split('.'):
            obj = getattr(obj, part)
        assert obj is info.func or getattr(obj, '__wrapped__', None) is info.func, \
            info.name
