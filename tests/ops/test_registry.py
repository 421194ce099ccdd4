"""Tests generated from the op registry (``xgrad.registered_ops()``).

For every registered op and every declared sample:

* ``test_forward``: values, shape and dtype match the NumPy reference on each
  declared float dtype and each declared integer/bool dtype; the inputs are not
  modified; nothing is recorded without grad-required inputs.
* ``test_backward`` / ``test_double_backward`` (differentiable ops, float32 and
  float64): ``xgrad.check_backward`` / ``check_double_backward`` on inputs
  drawn from the op's declared domain.
* ``test_float16_backward`` / ``test_float16_double_backward``: float16
  analytic gradients against central differences in float64.
* ``test_not_differentiable``: outputs of non-differentiable ops never join
  a graph.
* ``test_not_twice_differentiable_raises``: double backprop through an op
  declared once-differentiable raises a GradientError naming it.

Adding an op to the registry adds its tests; nothing here names an op.
"""

import numpy
import pytest

import xgrad
from xgrad._ops.registry import F16, F32, F64, sample_seed

from ._numerics import assert_close as _assert_close
from ._numerics import numerical_vjp as _numerical_vjp

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
        expected = [numpy.asarray(e) for e in _as_tuple(info.reference(data, sample))]
        actual = _as_tuple(info(xs, sample))
    assert len(actual) == len(expected)
    for y, e in zip(actual, expected):
        assert isinstance(y, xgrad.ndarray), type(y)
        assert y.shape == e.shape, (y.shape, e.shape)
        assert y.dtype == e.dtype, (y.dtype, e.dtype)
        if e.dtype.kind == 'f':
            atol, rtol = info.forward_tolerance(e.dtype)
            numpy.testing.assert_allclose(y.to_numpy().astype(F64), e.astype(F64),
                                          atol=atol, rtol=rtol, equal_nan=True)
        else:
            numpy.testing.assert_array_equal(y.to_numpy(), e)
        assert not y.is_backprop_required(xgrad.anygraph)
    for x, a in zip(xs, data):
        numpy.testing.assert_array_equal(x.to_numpy(), a)


# ---------------------------------------------------------------------------
# Gradients

def _least_precise(dtypes):
    floats = [numpy.dtype(d) for d in dtypes if numpy.dtype(d).kind == 'f']
    return min(floats, key=lambda d: d.itemsize)


def _check_args(info, sample, dtype, purpose):
    rs = _rs(purpose, info.name, sample.name, dtype)
    data = info.sample_data(sample, dtype, rs)
    xs = _xgrad_arrays(info, sample, data, require_grad=True)
    diff = info.differentiable_inputs(sample)
    consts = {i: x for i, x in enumerate(xs) if i not in diff}

    def func(args):
        it = iter(args)
        full = [consts[i] if i in consts else next(it) for i in range(len(xs))]
        return _as_tuple(info(full, sample))

    args = [xs[i] for i in diff]
    with xgrad.no_backprop_mode():
        ys = func(args)
    work = _least_precise([x.dtype for x in args] + [y.dtype for y in ys])
    gys = [xgrad.array(rs.uniform(-1, 1, y.shape).astype(y.dtype))
           if y.dtype.kind == 'f' else None for y in ys]
    return rs, func, args, gys, work


def _eps(info, arrays, work):
    return [xgrad.full(a.shape, info.step(work), a.dtype) for a in arrays]


@pytest.mark.parametrize('info, sample, dtype', _params('grad', lambda _: (F32, F64)))
def test_backward(info, sample, dtype):
    _, func, xs, gys, work = _check_args(info, sample, dtype, 'backward')
    atol, rtol = info.tolerance(work)
    xgrad.check_backward(func, xs, gys, _eps(info, xs, work), atol=atol, rtol=rtol)


@pytest.mark.parametrize('info, sample, dtype', _params('double', lambda _: (F32, F64)))
def test_double_backward(info, sample, dtype):
    rs, func, xs, gys, work = _check_args(info, sample, dtype, 'double')
    gys = [g.require_grad() if g is not None else None for g in gys]
    ggxs = [xgrad.array(rs.uniform(-1, 1, x.shape).astype(x.dtype)) for x in xs]
    atol, rtol = info.tolerance(work)
    used = [g for g in gys if g is not None]
    xgrad.check_double_backward(
        lambda args: func(args), xs, used if len(used) == len(gys) else gys, ggxs,
        _eps(info, xs + used, work), atol=atol, rtol=rtol)


# ---------------------------------------------------------------------------
# float16: analytic gradients against float64 central differences

def _f16_setup(info, sample, purpose):
    rs, func, xs, gys, _ = _check_args(info, sample, F16, purpose)
    data = [x.to_numpy().astype(F64) for x in xs]
    gy_data = [None if g is None else g.to_numpy().astype(F64) for g in gys]

    def f64(arrays):
        with xgrad.no_backprop_mode():
            return [y.to_numpy().astype(F64) for y in func([xgrad.array(a) for a in arrays])]
    return rs, func, xs, gys, data, gy_data, f64


@pytest.mark.parametrize('info, sample, dtype', _params('grad', lambda i: (
    (F16,) if F16 in i.dtypes else ())))
def test_float16_backward(info, sample, dtype):
    rs, func, xs, gys, data, gy_data, f64 = _f16_setup(info, sample, 'f16')
    ys = func(xs)
    pairs = [(y, g) for y, g in zip(ys, gys) if g is not None]
    gxs = xgrad.grad([y for y, _ in pairs], xs, grad_outputs=[g for _, g in pairs])
    expected = _numerical_vjp(f64, data, gy_data)
    atol, rtol = info.tolerance(F16)
    for i, (x, g, e) in enumerate(zip(xs, gxs, expected)):
        assert g is not None and g.dtype == x.dtype and g.shape == x.shape
        _assert_close(g.to_numpy(), e, atol, rtol, '{} input {}'.format(info.name, i))


@pytest.mark.parametrize('info, sample, dtype', _params('double', lambda i: (
    (F16,) if F16 in i.dtypes else ())))
def test_float16_double_backward(info, sample, dtype):
    rs, func, xs, gys, data, gy_data, f64 = _f16_setup(info, sample, 'f16-double')
    pairs = [(j, g) for j, g in enumerate(gys) if g is not None]
    gys_used = [g.require_grad() for _, g in pairs]
    ggx_data = [rs.uniform(-1, 1, x.shape).astype(x.dtype).astype(F64) for x in xs]
    ggxs = [xgrad.array(g.astype(x.dtype)) for g, x in zip(ggx_data, xs)]
    ys = func(xs)
    gxs = xgrad.grad([ys[j] for j, _ in pairs], xs, grad_outputs=gys_used,
                     enable_double_backprop=True)
    ggs = xgrad.grad(list(gxs), xs + gys_used, grad_outputs=ggxs)
    analytic = [numpy.zeros(a.shape) if g is None else g.to_numpy()
                for g, a in zip(ggs, xs + gys_used)]

    def first_order(arrays):
        ins = [xgrad.array(a).require_grad() for a in arrays[:len(xs)]]
        outs = func(ins)
        gs = [xgrad.array(a.astype(outs[j].dtype))
              for (j, _), a in zip(pairs, arrays[len(xs):])]
        got = xgrad.grad([outs[j] for j, _ in pairs], ins, grad_outputs=gs)
        return [numpy.zeros(i.shape) if g is None else g.to_numpy().astype(F64)
                for g, i in zip(got, ins)]

    expected = _numerical_vjp(first_order, data + [gy_data[j] for j, _ in pairs],
                              ggx_data)
    atol, rtol = info.tolerance(F16)
    for i, (g, e) in enumerate(zip(analytic, expected)):
        _assert_close(g, e, atol, rtol, '{} input {}'.format(info.name, i))


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
    _, func, xs, gys, _ = _check_args(info, sample, F64, 'once')
    ys = func(xs)
    pairs = [(y, g) for y, g in zip(ys, gys) if g is not None]
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
