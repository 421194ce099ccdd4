"""batch_norm and fixed_batch_norm beyond the registry's generated tests:
which axes are reduced, the running statistics, closed forms, PyTorch's
results (first and second order), and bad input."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# running statistics left unchanged by a failed call, or a variance of
# one sample (0 by definition).


def _arrays(*shapes, seed=0, dtype=numpy.float64):
    rs = numpy.random.RandomState(seed)
    return [rs.uniform(-1, 1, s).astype(dtype) for s in shapes]


# ---------------------------------------------------------------------------
# Values

def test_closed_form_over_batch_axis():
    x = xgrad.array([[1.0, 2.0], [3.0, 6.0]])
    y = xgrad.batch_norm(x, xgrad.array([1.0, 2.0]), xgrad.array([0.0, 10.0]), eps=0.0)
    # mean (2, 4), biased variance (1, 4): x_hat = [[-1, -1], [1, 1]]
    numpy.testing.assert_allclose(y.to_numpy(), [[-1.0, 8.0], [1.0, 12.0]])


def test_axis_none_is_the_first_axis_as_in_chainerx():
    x, = _arrays((3, 2, 4, 5))
    # ChainerX's default axis (0,): parameters of shape (C, H, W)
    y = xgrad.batch_norm(xgrad.array(x), xgrad.ones((2, 4, 5), 'float64'),
                         xgrad.zeros((2, 4, 5), 'float64'), eps=0).to_numpy()
    numpy.testing.assert_allclose(y.mean(axis=0), 0, atol=1e-12)
    numpy.testing.assert_allclose(y.var(axis=0), 1)
    # per-channel statistics name their axes (as Chainer passes them)
    y = xgrad.batch_norm(xgrad.array(x), xgrad.ones((2,), 'float64'),
                         xgrad.zeros((2,), 'float64'), eps=0, axis=(0, 2, 3)).to_numpy()
    numpy.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-12)
    numpy.testing.assert_allclose(y.var(axis=(0, 2, 3)), 1)
    # ChainerX's DimensionError: gamma (C,) does not fit the default axis
    with pytest.raises(xgrad.DimensionError, match='keeps 40 elements'):
        xgrad.batch_norm(xgrad.array(x), xgrad.ones((2,), 'float64'),
                         xgrad.zeros((2,), 'float64'))


def test_explicit_axis_and_parameter_shape():
    x, = _arrays((2, 3, 4))
    g, b = _arrays((2, 4), (8,), seed=1)
    y = xgrad.batch_norm(xgrad.array(x), xgrad.array(g), xgrad.array(b), axis=(1,), eps=0)
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    expected = (x - mean) / numpy.sqrt(var) * g[:, None, :] + b.reshape(2, 1, 4)
    numpy.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-12)


def test_float16_input_with_float32_parameters():
    x, = _arrays((4, 3), dtype=numpy.float16)
    y = xgrad.batch_norm(xgrad.array(x), xgrad.ones((3,)), xgrad.zeros((3,)))
    assert y.dtype == numpy.float16
    xd = x.astype(numpy.float64)
    expected = (xd - xd.mean(0)) / numpy.sqrt(xd.var(0) + 2e-5)
    numpy.testing.assert_allclose(y.to_numpy(), expected, atol=2e-3, rtol=2e-3)


def test_fixed_batch_norm_closed_form():
    x = xgrad.array([[1.0, 2.0], [3.0, 6.0]])
    y = xgrad.fixed_batch_norm(x, xgrad.array([2.0, 1.0]), xgrad.array([1.0, 0.0]),
                               xgrad.array([1.0, 2.0]), xgrad.array([4.0, 16.0]), eps=0.0)
    numpy.testing.assert_allclose(y.to_numpy(), [[1.0, 0.0], [3.0, 1.0]])


def test_fixed_batch_norm_with_batch_statistics_is_batch_norm():
    x, g, b = _arrays((5, 3, 2), (3,), (3,))
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    y1 = xgrad.batch_norm(*map(xgrad.array, (x, g, b)), axis=(0, 2))
    y2 = xgrad.fixed_batch_norm(*map(xgrad.array, (x, g, b, mean, var)), axis=(0, 2))
    numpy.testing.assert_allclose(y1.to_numpy(), y2.to_numpy(), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------
# Running statistics

def test_running_statistics_update_in_place():
    x, = _arrays((6, 3, 2))
    running_mean = xgrad.array([0.5, -0.5, 1.0], dtype="float64")
    running_var = xgrad.array([1.0, 2.0, 3.0], dtype="float64")
    old_mean, old_var = running_mean.to_numpy().copy(), running_var.to_numpy().copy()
    xgrad.batch_norm(xgrad.array(x), xgrad.ones((3,), 'float64'), xgrad.zeros((3,), 'float64'),
                     running_mean, running_var, decay=0.7, axis=(0, 2))
    n = 6 * 2
    mean = x.mean(axis=(0, 2))
    unbiased = x.var(axis=(0, 2)) * n / (n - 1)
    numpy.testing.assert_allclose(running_mean.to_numpy(), 0.7 * old_mean + 0.3 * mean)
    numpy.testing.assert_allclose(running_var.to_numpy(), 0.7 * old_var + 0.3 * unbiased)


def test_running_statistics_keep_their_shape_and_dtype():
    x, = _arrays((4, 2, 3), dtype=numpy.float32)
    running_mean = xgrad.zeros((1, 2, 1), 'float16')
    running_var = xgrad.ones((2,), 'float64')
    xgrad.batch_norm(xgrad.array(x), xgrad.ones((2,)), xgrad.zeros((2,)),
                     running_mean, running_var, axis=(0, 2))
    assert running_mean.shape == (1, 2, 1) and running_mean.dtype == numpy.float16
    assert running_var.dtype == numpy.float64
    numpy.testing.assert_allclose(running_mean.to_numpy().ravel(),
                                  0.1 * x.mean(axis=(0, 2)), atol=1e-3)


def test_running_statistics_of_a_single_sample_use_n_minus_one_of_at_least_one():
    running_var = xgrad.zeros((2,), 'float64')
    xgrad.batch_norm(xgrad.array([[1.0, 2.0]]), xgrad.ones((2,), 'float64'),
                     xgrad.zeros((2,), 'float64'), None, running_var)
    numpy.testing.assert_array_equal(running_var.to_numpy(), [0.0, 0.0])


def test_running_statistics_are_not_recorded():
    x = xgrad.array(_arrays((4, 3))[0]).require_grad()
    running_mean = xgrad.zeros((3,), 'float64')
    y = xgrad.batch_norm(x, xgrad.ones((3,), 'float64'), xgrad.zeros((3,), 'float64'),
                         running_mean)
    assert y.is_backprop_required()
    assert not running_mean.is_backprop_required(xgrad.anygraph)


# ---------------------------------------------------------------------------
# Against PyTorch

def _channel_axes(shape):
    """torch's batch_norm normalises over every axis but the channels (axis
    1); xgrad's default, as ChainerX's, is axis 0 alone."""
    return (0,) + tuple(range(2, len(shape)))


def _torch_batch_norm(torch, x, g, b, eps):
    xt, gt, bt = [torch.tensor(a, requires_grad=True) for a in (x, g, b)]
    y = torch.nn.functional.batch_norm(xt, None, None, gt, bt, training=True, eps=eps)
    return (xt, gt, bt), y


@pytest.mark.parametrize('shape', [(4, 3), (3, 4, 2, 5), (2, 3, 6)])
def test_matches_torch_first_and_second_order(shape):
    torch = pytest.importorskip('torch')
    c = shape[1]
    x, g, b = _arrays(shape, (c,), (c,))
    gy, ggx = _arrays(shape, shape, seed=1)
    ggg, = _arrays((c,), seed=2)
    eps = 1e-3

    ins, yt = _torch_batch_norm(torch, x, g, b, eps)
    gts = torch.autograd.grad(yt, ins, torch.tensor(gy), create_graph=True)
    second_t = torch.autograd.grad((gts[0] * torch.tensor(ggx)).sum()
                                   + (gts[1] * torch.tensor(ggg)).sum(), ins[:2])

    xs = [xgrad.array(a).require_grad() for a in (x, g, b)]
    y = xgrad.batch_norm(*xs, eps=eps, axis=_channel_axes(shape))
    gxs = xgrad.grad([y], xs, grad_outputs=[xgrad.array(gy)], enable_double_backprop=True)
    second = xgrad.grad([xgrad.sum(gxs[0] * xgrad.array(ggx))
                         + xgrad.sum(gxs[1] * xgrad.array(ggg))], xs[:2])

    numpy.testing.assert_allclose(y.to_numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    for a, e in zip(list(gxs) + list(second), list(gts) + list(second_t)):
        numpy.testing.assert_allclose(a.to_numpy(), e.detach().numpy(), rtol=1e-9, atol=1e-11)


def test_float32_large_batch_matches_torch():
    torch = pytest.importorskip('torch')
    rs = numpy.random.RandomState(0)
    x = (rs.standard_normal((16, 8, 12, 12)) * 3 + 5).astype(numpy.float32)
    gy = rs.standard_normal(x.shape).astype(numpy.float32)
    g, b = rs.uniform(0.5, 1.5, 8).astype(numpy.float32), rs.uniform(-1, 1, 8).astype(numpy.float32)
    ins, yt = _torch_batch_norm(torch, x, g, b, 2e-5)
    yt.backward(torch.tensor(gy))
    xs = [xgrad.array(a).require_grad() for a in (x, g, b)]
    y = xgrad.batch_norm(*xs, axis=_channel_axes(x.shape))
    y.backward(grad_outputs=[xgrad.array(gy)])
    numpy.testing.assert_allclose(y.to_numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    for a, t in zip(xs, ins):
        assert a.grad.dtype == numpy.float32
        numpy.testing.assert_allclose(a.grad.to_numpy(), t.grad.numpy(), rtol=1e-3, atol=1e-3)


def test_fixed_batch_norm_gradients_match_torch():
    torch = pytest.importorskip('torch')
    x, g, b, m = _arrays((4, 3, 2), (3,), (3,), (3,))
    v = numpy.array([0.5, 1.0, 2.0])
    gy, = _arrays((4, 3, 2), seed=3)
    ts = [torch.tensor(a, requires_grad=True) for a in (x, g, b, m, v)]
    yt = (ts[0] - ts[3][:, None]) / torch.sqrt(ts[4][:, None] + 2e-5) * ts[1][:, None] \
        + ts[2][:, None]
    yt.backward(torch.tensor(gy))
    xs = [xgrad.array(a).require_grad() for a in (x, g, b, m, v)]
    y = xgrad.fixed_batch_norm(*xs, axis=_channel_axes(x.shape))
    y.backward(grad_outputs=[xgrad.array(gy)])
    numpy.testing.assert_allclose(y.to_numpy(), yt.detach().numpy(), rtol=1e-12)
    for a, t in zip(xs, ts):
        numpy.testing.assert_allclose(a.grad.to_numpy(), t.grad.numpy(), rtol=1e-10,
                                      atol=1e-12)


# ---------------------------------------------------------------------------
# Bad input: raised before anything is computed or updated

def _params(c=3, dtype='float64'):
    return xgrad.ones((c,), dtype), xgrad.zeros((c,), dtype)


def test_integer_inputs_raise_dtype_error():
    g, b = _params()
    with pytest.raises(xgrad.DtypeError, match='batch_norm: x'):
        xgrad.batch_norm(xgrad.zeros((4, 3), 'int64'), g, b)
    with pytest.raises(xgrad.DtypeError, match='gamma'):
        xgrad.batch_norm(xgrad.zeros((4, 3)), xgrad.ones((3,), 'int32'), b)
    with pytest.raises(xgrad.DtypeError, match='var'):
        xgrad.fixed_batch_norm(xgrad.zeros((4, 3)), g, b, g, xgrad.ones((3,), 'int64'))


@pytest.mark.parametrize('gamma_shape, beta_shape, axis, match', [
    ((4,), (3,), None, 'gamma has shape'),
    ((3,), (2,), None, 'beta has shape'),
    ((3,), (3,), (1,), 'gamma has shape'),
    ((4, 3), (4, 3), None, r'gamma has shape \(4, 3\) \(12 elements\)'),
    ((3,), (3,), 2, 'axis 2 is out of range'),
])
def test_mismatched_parameters_raise_dimension_error(gamma_shape, beta_shape, axis, match):
    running_mean = xgrad.zeros((3,), 'float64')
    with pytest.raises(xgrad.DimensionError, match=match):
        xgrad.batch_norm(xgrad.zeros((4, 3)), xgrad.ones(gamma_shape, 'float64'),
                         xgrad.zeros(beta_shape, 'float64'), running_mean, axis=axis)
    numpy.testing.assert_array_equal(running_mean.to_numpy(), 0)


def test_axis_out_of_range_raises_dimension_error():
    g, b = _params()
    with pytest.raises(xgrad.DimensionError):
        xgrad.batch_norm(xgrad.zeros((4, 3)), g, b, axis=2)
    with pytest.raises(xgrad.DimensionError):
        xgrad.fixed_batch_norm(xgrad.zeros((4, 3)), g, b, g, g, axis=-3)


def test_bad_running_statistics_are_rejected_untouched():
    g, b = _params()
    x = xgrad.ones((4, 3), 'float64')
    running_mean = xgrad.zeros((3,), 'float64')
    with pytest.raises(xgrad.DimensionError, match='running_var'):
        xgrad.batch_norm(x, g, b, running_mean, xgrad.ones((4,), 'float64'))
    with pytest.raises(TypeError, match='running_var'):
        xgrad.batch_norm(x, g, b, running_mean, numpy.ones(3))
    with pytest.raises(xgrad.DtypeError, match='running_var'):
        xgrad.batch_norm(x, g, b, running_mean, xgrad.ones((3,), 'int64'))
    with pytest.raises(xgrad.XgradError, match='running_var'):
        xgrad.batch_norm(x, g, b, running_mean, xgrad.ones((3,), 'float64').require_grad())
    with pytest.raises(ValueError, match='read-only'):
        xgrad.batch_norm(x, g, b, running_mean,
                         xgrad.broadcast_to(xgrad.ones((1,), 'float64'), (3,)))
    numpy.testing.assert_array_equal(running_mean.to_numpy(), 0)
