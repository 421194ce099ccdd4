"""Bad input to every registered op, generated from the registry.

For each op: an argument of the wrong type, a dtype the op does not declare,
an axis out of range (ops called with ``axis``), operands that do not
broadcast (ops declared ``broadcasting``). Each must raise the right xgrad
error naming what is at fault, and leave everything as it was: the inputs'
data and gradients untouched, and the graph they are on still correct.
"""

import inspect

import numpy
import pytest

import xgrad
from xgrad._ops.registry import ALL_DTYPES, F32, sample_seed

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# inputs left unchanged and the gradient of a sum, ones.

OPS = xgrad.registered_ops()


def _rs(*keys):
    return numpy.random.RandomState(sample_seed(*keys))


def _first_sample(info, predicate=lambda s: True):
    return next((s for s in info.samples if not s.is_empty and predicate(s)), None)


def _dtype(info):
    return F32 if F32 in info.dtypes else (info.dtypes + info.int_dtypes)[0]


class _Watched:
    """Inputs that are on a graph (through ``x * 2``), so a failed call could
    corrupt it, with what must not change."""

    def __init__(self, info, sample, dtype):
        self.data = info.sample_data(sample, dtype, _rs('bad', info.name, sample.name))
        self.leaves = [xgrad.array(a) for a in self.data]
        self.inputs = []
        for x in self.leaves:
            if x.dtype.kind == 'f':
                x.require_grad()
                self.inputs.append(x * 1)
            else:
                self.inputs.append(x)

    def assert_unchanged(self):
        for x, a in zip(self.leaves, self.data):
            numpy.testing.assert_array_equal(x.to_numpy(), a)
            assert x.dtype.kind != 'f' or x.get_grad() is None
        for x, y in zip(self.leaves, self.inputs):
            if x.dtype.kind == 'f':
                # The graph through y still gives d(sum y)/dx = 1 exactly
                # (the sum itself may be nan for domains with nan and inf).
                with numpy.errstate(invalid='ignore'):
                    y.sum().backward()
                numpy.testing.assert_array_equal(x.get_grad().to_numpy(),
                                                 numpy.ones(x.shape, x.dtype))
                x.cleargrad()


def _positional_names(info, n):
    """The names of the first ``n`` parameters of the op (its array inputs)."""
    try:
        params = list(inspect.signature(info.func).parameters)
    except (TypeError, ValueError):
        return None
    return params[:n] if len(params) >= n else None


# ---------------------------------------------------------------------------
# Wrong argument type

WRONG_TYPE = [pytest.param(info, id=info.name) for info in OPS
              if info.call.__name__ == '_call' and _first_sample(info) is not None
              and _first_sample(info).args]


@pytest.mark.parametrize('info', WRONG_TYPE)
@pytest.mark.parametrize('bad', ['a string', {'a': 1}], ids=['str', 'dict'])
def test_wrong_argument_type(info, bad):
    sample = _first_sample(info)
    w = _Watched(info, sample, _dtype(info))
    names = _positional_names(info, len(w.inputs))
    for i in range(len(w.inputs)):
        args = list(w.inputs)
        args[i] = bad
        with pytest.raises(TypeError) as e:
            info.func(*args, **sample.kwargs)
        if names is not None:
            assert names[i] in str(e.value), (names[i], str(e.value))
    w.assert_unchanged()


# ---------------------------------------------------------------------------
# Dtypes the op does not declare

def _undeclared(info):
    return [d for d in ALL_DTYPES if d not in info.dtypes and d not in info.int_dtypes]


UNDECLARED = [pytest.param(info, d, id='{}-{}'.format(info.name, d))
              for info in OPS for d in _undeclared(info)
              if _first_sample(info) is not None and any(
                  a.dtype is None for a in _first_sample(info).args)]


@pytest.mark.parametrize('info, dtype', UNDECLARED)
def test_undeclared_dtype_is_refused_or_matches_numpy(info, dtype):
    """A dtype the op does not declare: the op refuses it with a DtypeError
    naming the op or the dtype, or takes it and gives NumPy's values with
    ChainerX's result dtype where the op declares its promotion
    (docs/dtype_promotion.md; the reference's dtype where it does not);
    where NumPy refuses it, so does xgrad."""
    sample = _first_sample(info)
    w = _Watched(info, sample, _dtype(info))
    data = info.sample_data(sample, dtype, _rs('dtype', info.name, dtype))
    args = [xgrad.array(a) if s.dtype is None else x
            for a, s, x in zip(data, sample.args, w.inputs)]
    expected = numpy_error = None
    if info.ref is not None:
        ref_args = [a if s.dtype is None else x.to_numpy()
                    for a, s, x in zip(data, sample.args, w.inputs)]
        try:
            with numpy.errstate(all='ignore'):
                expected = info.expected_forward(ref_args, sample, dtype)
        except (TypeError, ValueError, numpy.linalg.LinAlgError) as e:
            # (LinAlgError is a ValueError on NumPy 2 only)
            numpy_error = e
    try:
        with numpy.errstate(all='ignore'):
            actual = info(args, sample)
    except xgrad.DtypeError as e:
        assert info.name.split('.')[-1] in str(e) or str(dtype) in str(e), str(e)
    except ValueError as e:
        # A value NumPy refuses too (e.g. integers to negative integer powers).
        assert isinstance(numpy_error, ValueError), e
    else:
        assert numpy_error is None, 'NumPy refuses {} but xgrad took it'.format(dtype)
        if expected is not None:
            actual = actual if isinstance(actual, (tuple, list)) else (actual,)
            expected = expected if isinstance(expected, (tuple, list)) else (expected,)
            assert len(actual) == len(expected)
            for y, e in zip(actual, expected):
                e = numpy.asarray(e)
                assert y.dtype == e.dtype and y.shape == e.shape
                numpy.testing.assert_allclose(y.to_numpy().astype(float),
                                              e.astype(float), rtol=1e-6, atol=1e-6,
                                              equal_nan=True)
    w.assert_unchanged()


# ---------------------------------------------------------------------------
# Axis out of range

def _has_int_axis(s):
    return isinstance(s.kwargs.get('axis'), int) and s.args and len(s.args[0].shape) > 0


AXIS = [pytest.param(info, id=info.name) for info in OPS
        if _first_sample(info, _has_int_axis) is not None]


@pytest.mark.parametrize('info', AXIS)
def test_axis_out_of_range(info):
    sample = _first_sample(info, _has_int_axis)
    w = _Watched(info, sample, _dtype(info))
    ndim = len(sample.args[0].shape)
    for axis in (ndim + 3, -ndim - 3):
        kwargs = dict(sample.kwargs, axis=axis)
        with pytest.raises(xgrad.DimensionError) as e:
            info.call(info.func, list(w.inputs), kwargs)
        assert 'axis' in str(e.value) and str(axis) in str(e.value), str(e.value)
    w.assert_unchanged()


# ---------------------------------------------------------------------------
# Operands that do not broadcast

BROADCASTING = [pytest.param(info, id=info.name) for info in OPS if info.broadcasting]


@pytest.mark.parametrize('info', BROADCASTING)
def test_shapes_that_do_not_broadcast(info):
    sample = _first_sample(info, lambda s: len(s.args) >= 2)
    w = _Watched(info, sample, _dtype(info))
    args = list(w.inputs)
    last = args[-1]
    args[-1] = xgrad.array(numpy.zeros((7, 5), dtype=last.dtype))
    with pytest.raises(xgrad.DimensionError) as e:
        info(args, sample)
    assert '(7, 5)' in str(e.value), str(e.value)
    w.assert_unchanged()


# ---------------------------------------------------------------------------
# Inputs of the wrong rank

RANKS = [pytest.param(info, id=info.name) for info in OPS if _first_sample(info) is not None
         and _first_sample(info).args]


@pytest.mark.parametrize('info', RANKS)
@pytest.mark.parametrize('shape', [(), (2,), (2, 2, 2, 2, 2)], ids=['0d', '1d', '5d'])
def test_any_rank_gives_a_result_or_an_xgrad_error(info, shape):
    """Every array input replaced by one of another rank: the op computes a
    result or refuses with an xgrad error (or TypeError/ValueError), never
    an internal failure such as a builtin IndexError or AttributeError."""
    sample = _first_sample(info)
    w = _Watched(info, sample, _dtype(info))
    args = [xgrad.array(numpy.full(shape, 0.5, x.dtype)) if x.dtype.kind == 'f'
            else xgrad.array(numpy.zeros(shape, x.dtype)) for x in w.inputs]
    try:
        with numpy.errstate(all='ignore'):
            info(args, sample)
    except (xgrad.XgradError, TypeError, ValueError):
        pass
    w.assert_unchanged()
