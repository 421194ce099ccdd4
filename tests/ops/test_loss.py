"""Losses and accuracy beyond the registry's generated tests: closed forms,
ignored labels, numerical stability, PyTorch's results, and bad input."""

import math

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# squared and absolute errors are one or two correctly rounded IEEE
# operations per element ((a - b) * (a - b), |a - b|), as NumPy's.


def _a(values, dtype='float64'):
    return xgrad.array(numpy.asarray(values, dtype=dtype))


def _labels(values):
    return xgrad.array(numpy.asarray(values, dtype=numpy.int64))


# ---------------------------------------------------------------------------
# softmax_cross_entropy

def test_softmax_cross_entropy_closed_form_and_ignore_label():
    x = _a([[0.0, 0.0, 0.0, 0.0], [math.log(3.0), 0.0, 0.0, 0.0], [5.0, 1.0, 2.0, 3.0]])
    loss = xgrad.softmax_cross_entropy(x, _labels([2, 0, -1]))
    assert loss.shape == (3,) and loss.dtype == numpy.float64
    numpy.testing.assert_allclose(loss.to_numpy(), [math.log(4.0), math.log(2.0), 0.0])


def test_softmax_cross_entropy_gradient_is_softmax_minus_onehot():
    x = _a([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5], [1.0, -1.0, 0.0]]).require_grad()
    gy = numpy.array([1.0, 2.0, 3.0])
    loss = xgrad.softmax_cross_entropy(x, _labels([0, 2, -1]))
    loss.backward(grad_outputs=[_a(gy)])
    xd = x.to_numpy()
    p = numpy.exp(xd) / numpy.exp(xd).sum(axis=1, keepdims=True)
    onehot = numpy.array([[1, 0, 0], [0, 0, 1], [0, 0, 0]])
    expected = (p - onehot) * (gy * [1, 1, 0])[:, None]
    numpy.testing.assert_allclose(x.grad.to_numpy(), expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize('double', [False, True])
@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
def test_softmax_cross_entropy_without_classes_has_an_empty_gradient(dtype, double):
    """(N, 0) logits, every label ignored: loss 0 and an (N, 0) gradient on
    both the raw and the recorded backward (the raw one subtracted at the
    ignored rows' stand-in label 0, a column that does not exist, and
    raised NumPy's IndexError)."""
    x = xgrad.zeros((3, 0), dtype).require_grad()
    loss = xgrad.softmax_cross_entropy(x, _labels([-1, -1, -1]))
    gx, = xgrad.grad([loss], [x], grad_outputs=[_a([1.0, 2.0, 3.0], dtype)],
                     enable_double_backprop=double)
    assert loss.to_numpy().tolist() == [0.0, 0.0, 0.0]
    assert gx.shape == (3, 0) and gx.dtype == numpy.dtype(dtype)


def test_softmax_cross_entropy_gradient_ignores_rows_wherever_they_are():
    """Ignored rows get no gradient, kept rows p - onehot, on both paths."""
    x = _a([[1.0, 2.0], [0.5, -0.5], [3.0, 1.0], [0.0, 0.0]]).require_grad()
    gy = _a([1.0, 2.0, 3.0, 4.0])
    labels = [-1, 1, -1, 0]
    xd = x.to_numpy()
    p = numpy.exp(xd) / numpy.exp(xd).sum(axis=1, keepdims=True)
    expected = (p - numpy.eye(2)[numpy.maximum(labels, 0)]) * numpy.array([0, 2.0, 0, 4.0])[:, None]
    for double in (False, True):
        loss = xgrad.softmax_cross_entropy(x, _labels(labels))
        gx, = xgrad.grad([loss], [x], grad_outputs=[gy], enable_double_backprop=double)
        numpy.testing.assert_allclose(gx.to_numpy(), expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
def test_softmax_cross_entropy_is_stable_for_large_logits(dtype):
    x = _a([[1000.0, 0.0], [-1000.0, 0.0], [60000.0, 59999.0]], dtype).require_grad()
    loss = xgrad.softmax_cross_entropy(x, _labels([0, 0, 1]))
    loss.backward(grad_outputs=[xgrad.ones_like(loss)])
    expected = [0.0, 1000.0, math.log1p(math.e)]
    if dtype == 'float16':  # 60000 and 59999 are one float16 apart: both 60000
        expected[2] = math.log(2.0)
    numpy.testing.assert_allclose(loss.to_numpy().astype(float), expected, rtol=2e-3)
    assert numpy.all(numpy.isfinite(x.grad.to_numpy()))


def test_softmax_cross_entropy_matches_torch():
    torch = pytest.importorskip('torch')
    rs = numpy.random.RandomState(0)
    x = rs.standard_normal((6, 5)) * 3
    t = numpy.array([0, 4, -1, 2, 2, 1])
    gy = rs.standard_normal(6)
    xt = torch.tensor(x, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(xt, torch.tensor(t), ignore_index=-1,
                                           reduction='none')
    lt.backward(torch.tensor(gy))
    xa = _a(x).require_grad()
    loss = xgrad.softmax_cross_entropy(xa, _labels(t))
    loss.backward(grad_outputs=[_a(gy)])
    numpy.testing.assert_allclose(loss.to_numpy(), lt.detach().numpy(), rtol=1e-12)
    numpy.testing.assert_allclose(xa.grad.to_numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_softmax_cross_entropy_bad_input():
    x = xgrad.zeros((2, 3))
    for bad in ([0, 3], [-2, 0]):
        with pytest.raises(xgrad.IndexError, match='softmax_cross_entropy: x2 holds label'):
            xgrad.softmax_cross_entropy(x, _labels(bad))
    with pytest.raises(xgrad.DtypeError, match='x1'):
        xgrad.softmax_cross_entropy(xgrad.zeros((2, 3), 'int64'), _labels([0, 1]))
    with pytest.raises(xgrad.DtypeError, match='x2'):
        xgrad.softmax_cross_entropy(x, xgrad.zeros((2,)))
    with pytest.raises(xgrad.DimensionError, match='x1 must be 2-dimensional'):
        xgrad.softmax_cross_entropy(xgrad.zeros((2, 3, 1)), _labels([0, 1]))
    with pytest.raises(xgrad.DimensionError, match='x2 must be'):
        xgrad.softmax_cross_entropy(x, _labels([0, 1, 2]))
    with pytest.raises(TypeError, match='x2'):
        xgrad.softmax_cross_entropy(x, None)


# ---------------------------------------------------------------------------
# sigmoid_cross_entropy

def test_sigmoid_cross_entropy_closed_form_and_ignore_label():
    x = _a([[0.0, 0.0, math.log(3.0)], [-800.0, 800.0, 2.0]])
    loss = xgrad.sigmoid_cross_entropy(x, _labels([[0, 1, 1], [1, 1, -1]]))
    # -log(sigmoid(x)) for label 1, -log(1 - sigmoid(x)) for label 0
    numpy.testing.assert_allclose(loss.to_numpy(),
                                  [[math.log(2), math.log(2), math.log(4 / 3)], [800.0, 0.0, 0.0]])


def test_sigmoid_cross_entropy_matches_torch():
    torch = pytest.importorskip('torch')
    rs = numpy.random.RandomState(0)
    x = rs.standard_normal((4, 5)) * 4
    t = rs.randint(-1, 2, (4, 5))
    gy = rs.standard_normal((4, 5))
    xt = torch.tensor(x, requires_grad=True)
    lt = torch.nn.functional.binary_cross_entropy_with_logits(
        xt, torch.tensor(numpy.maximum(t, 0), dtype=torch.float64), reduction='none')
    lt = lt * torch.tensor(t != -1)
    lt.backward(torch.tensor(gy))
    xa = _a(x).require_grad()
    loss = xgrad.sigmoid_cross_entropy(xa, _labels(t))
    loss.backward(grad_outputs=[_a(gy)])
    # torch computes (1 - t) x + m + log(e^-m + e^(-x-m)), m = max(-x, 0): for
    # a label 0 and x << 0 that cancels x against m, losing up to |x| eps
    # (x is up to 16 here) where ours is log1p(e^x) to an ulp: hence atol.
    numpy.testing.assert_allclose(loss.to_numpy(), lt.detach().numpy(), rtol=1e-12,
                                  atol=16 * numpy.finfo(numpy.float64).eps)
    numpy.testing.assert_allclose(xa.grad.to_numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)
    # ours against the exact log1p(e^x) - x t, where torch's cancels
    exact = numpy.where(t == -1, 0, numpy.logaddexp(0, x) - x * numpy.maximum(t, 0))
    numpy.testing.assert_allclose(loss.to_numpy(), exact, rtol=1e-14)


def test_sigmoid_cross_entropy_labels_beyond_binary_enter_linearly():
    # ChainerX (and Chainer) take any integer label: loss = log(1 + e^x) - x t.
    x = _a([[0.5, -1.5], [2.0, 0.25]]).require_grad()
    t = numpy.array([[2, -3], [-1, 5]])
    loss = xgrad.sigmoid_cross_entropy(x, _labels(t))
    xv = x.to_numpy()
    numpy.testing.assert_allclose(loss.to_numpy(), numpy.where(
        t == -1, 0, numpy.logaddexp(0, xv) - xv * t), rtol=1e-12)
    gy = _a([[1.0, 2.0], [3.0, -1.0]])
    xgrad.check_backward(lambda xs: (xgrad.sigmoid_cross_entropy(xs[0], _labels(t)),),
                         [x], [gy], [xgrad.full((2, 2), 1e-3, 'float64')])


def test_sigmoid_cross_entropy_bad_input():
    x = xgrad.zeros((2, 2))
    with pytest.raises(xgrad.DimensionError, match='x2 has shape'):
        xgrad.sigmoid_cross_entropy(x, _labels([0, 1]))
    with pytest.raises(xgrad.DtypeError, match='x1'):
        xgrad.sigmoid_cross_entropy(xgrad.zeros((2,), 'int32'), _labels([0, 1]))
    with pytest.raises(xgrad.DtypeError, match='x2'):
        xgrad.sigmoid_cross_entropy(x, xgrad.zeros((2, 2)))


# ---------------------------------------------------------------------------
# Elementwise regression losses

def test_squared_and_absolute_error():
    x1, x2 = _a([[1.0, -2.0], [3.0, 0.5]]), _a([0.0, 1.0])
    numpy.testing.assert_array_equal(xgrad.squared_error(x1, x2).to_numpy(),
                                     [[1.0, 9.0], [9.0, 0.25]])
    numpy.testing.assert_array_equal(xgrad.absolute_error(x1, x2).to_numpy(),
                                     [[1.0, 3.0], [3.0, 0.5]])
    assert xgrad.squared_error(_a([3], 'int64'), _a([1], 'int64')).dtype == numpy.int64
    assert xgrad.absolute_error(_a([1.0], 'float16'), 2.0).dtype == numpy.float16
    for f in (xgrad.squared_error, xgrad.absolute_error):
        with pytest.raises(xgrad.DimensionError, match=f.__name__):
            f(xgrad.zeros((2, 3)), xgrad.zeros((2,)))


def test_huber_loss_closed_form_and_torch():
    a = numpy.array([-3.0, -1.0, -0.25, 0.0, 0.5, 2.0])
    loss = xgrad.huber_loss(_a(a), xgrad.zeros((6,), 'float64'), delta=1.0)
    numpy.testing.assert_allclose(loss.to_numpy(), [2.5, 0.5, 0.03125, 0.0, 0.125, 1.5])
    torch = pytest.importorskip('torch')
    rs = numpy.random.RandomState(0)
    x1, x2, gy = rs.standard_normal((3, 3, 4)) * 2
    ts = [torch.tensor(v, requires_grad=True) for v in (x1, x2)]
    lt = torch.nn.functional.huber_loss(*ts, reduction='none', delta=0.7)
    lt.backward(torch.tensor(gy))
    xs = [_a(v).require_grad() for v in (x1, x2)]
    loss = xgrad.huber_loss(*xs, 0.7)
    loss.backward(grad_outputs=[_a(gy)])
    numpy.testing.assert_allclose(loss.to_numpy(), lt.detach().numpy(), rtol=1e-12)
    for x, t in zip(xs, ts):
        numpy.testing.assert_allclose(x.grad.to_numpy(), t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('delta', [1.0, 0.3, 1e-3])
@pytest.mark.parametrize('shape', [(40, 30), (600, 500)])  # (the second split over threads)
def test_huber_loss_one_pass_kernel_is_the_compositions_bits(dtype, delta, shape):
    """Plain same-shape arrays take the one-pass kernel, others ChainerX's
    composition of ops: loss and both gradients alike, bit for bit (sign of
    zero included), NaN where x1 - x2 is NaN or infinite, and a finite loss
    past float32's square."""
    rng = numpy.random.default_rng(4)
    a = (rng.standard_normal(shape) * 2).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    a[0, :8] = [numpy.nan, numpy.inf, -numpy.inf, -0.0, 0.0, delta, -delta, 1e30]
    b[0, :8] = 0
    gy = rng.standard_normal(shape).astype(dtype)
    runs = []
    for layout in (numpy.ascontiguousarray, numpy.asfortranarray):
        x1, x2 = xgrad.array(layout(a)).require_grad(), xgrad.array(layout(b)).require_grad()
        with numpy.errstate(all='ignore'):  # (the composition's inf * 0 and overflow)
            y = xgrad.huber_loss(x1, x2, delta)
            y.grad = xgrad.array(gy)
            y.backward()
        runs.append([v.to_numpy() for v in (y, x1.grad, x2.grad)])
    for fused, composed in zip(*runs):
        nan = numpy.isnan(composed)
        assert numpy.array_equal(numpy.isnan(fused), nan)
        assert numpy.array_equal(fused[~nan], composed[~nan])
        assert numpy.array_equal(numpy.signbit(fused[~nan]), numpy.signbit(composed[~nan]))
    assert numpy.isnan(runs[0][1][0, :3]).all()
    t = numpy.dtype(dtype).type  # (the loss's arithmetic is the dtype's)
    assert runs[0][0][0, 7] == (t(1e30) - t(delta / 2)) * t(delta)


def test_huber_loss_bad_input():
    x = xgrad.zeros((2,))
    with pytest.raises(ValueError, match='delta must be positive'):
        xgrad.huber_loss(x, x, 0.0)
    with pytest.raises(TypeError, match='delta'):
        xgrad.huber_loss(x, x, '1')
    with pytest.raises(xgrad.DtypeError, match='huber_loss: x2'):
        xgrad.huber_loss(x, xgrad.zeros((2,), 'int64'), 1.0)
    with pytest.raises(xgrad.DimensionError, match='huber_loss'):
        xgrad.huber_loss(x, xgrad.zeros((3,)), 1.0)


def test_gaussian_kl_divergence():
    mean, ln_var = _a([[0.0, 1.0], [2.0, 0.0]]), _a([[0.0, 0.0], [math.log(2.0), 1.0]])
    elementwise = [[0.0, 0.5], [(4 + 2 - math.log(2) - 1) / 2, (math.e - 2) / 2]]
    numpy.testing.assert_allclose(xgrad.gaussian_kl_divergence(mean, ln_var).to_numpy(),
                                  elementwise)
    total = xgrad.gaussian_kl_divergence(mean, ln_var, reduce='sum')
    assert total.shape == ()
    numpy.testing.assert_allclose(total.to_numpy(), numpy.sum(elementwise))
    numpy.testing.assert_allclose(
        xgrad.gaussian_kl_divergence(mean, ln_var, reduce='mean').to_numpy(),
        numpy.mean(elementwise))
    with pytest.raises(ValueError, match='reduce'):
        xgrad.gaussian_kl_divergence(mean, ln_var, reduce='max')
    with pytest.raises(xgrad.DtypeError, match='gaussian_kl_divergence: mean'):
        xgrad.gaussian_kl_divergence(xgrad.zeros((2,), 'int64'), xgrad.zeros((2,)))


def test_hinge_closed_form():
    x = _a([[0.5, -2.0, 0.0], [2.0, 0.3, -0.5]])
    t = _labels([0, 1])
    expected = [[0.5, 0.0, 1.0], [3.0, 0.7, 0.5]]
    numpy.testing.assert_allclose(xgrad.hinge(x, t).to_numpy(), expected)
    numpy.testing.assert_allclose(xgrad.hinge(x, t, norm=2.0).to_numpy(),
                                  numpy.square(expected))


def test_hinge_bad_input():
    x = xgrad.zeros((2, 3))
    with pytest.raises(xgrad.IndexError, match='hinge: x2 holds label -1'):
        xgrad.hinge(x, _labels([0, -1]))
    with pytest.raises(xgrad.IndexError, match='label 3'):
        xgrad.hinge(x, _labels([3, 0]))
    with pytest.raises(ValueError, match='norm must be positive'):
        xgrad.hinge(x, _labels([0, 1]), norm=0)
    with pytest.raises(xgrad.DimensionError, match='hinge'):
        xgrad.hinge(xgrad.zeros((3,)), _labels([0, 1, 2]))


# ---------------------------------------------------------------------------
# accuracy

def test_accuracy():
    y = _a([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.0, 0.0, 1.0]], 'float32')
    acc = xgrad.accuracy(y, _labels([1, 0, 0, 2]))
    assert acc.shape == () and acc.dtype == numpy.float32
    assert acc.to_numpy() == 0.75
    assert xgrad.accuracy(y, _labels([1, -1, 0, -1]), ignore_label=-1).to_numpy() == 0.5
    assert xgrad.accuracy(y, _labels([-1, -1, -1, -1]), ignore_label=-1).to_numpy() == 0.0
    # (N, C, L) scores with (N, L) labels
    y3 = _a([[[1.0, 0.0], [0.0, 1.0]]])
    assert xgrad.accuracy(y3, _labels([[0, 0]])).to_numpy() == 0.5
    # trailing singleton axes of y beyond t's (Chainer's rule)
    y5 = y.reshape((4, 3, 1, 1))
    assert xgrad.accuracy(y5, _labels([1, 0, 0, 2])).to_numpy() == 0.75
    with pytest.raises(xgrad.DimensionError, match='non-singleton'):
        xgrad.accuracy(_a(numpy.zeros((4, 3, 2))), _labels([1, 0, 0, 2]))


def test_accuracy_has_no_gradient_and_checks_input():
    y = xgrad.zeros((2, 3)).require_grad()
    assert not xgrad.accuracy(y, _labels([0, 1])).is_backprop_required(xgrad.anygraph)
    with pytest.raises(xgrad.DimensionError, match='accuracy: t has shape'):
        xgrad.accuracy(y, _labels([0, 1, 2]))
    with pytest.raises(xgrad.DtypeError, match='accuracy: t'):
        xgrad.accuracy(y, xgrad.zeros((2,)))
    with pytest.raises(xgrad.DimensionError, match='class axis'):
        xgrad.accuracy(xgrad.zeros((3,)), _labels([0, 1, 2]))
