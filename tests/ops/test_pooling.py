"""max_pool and average_pool: closed forms (ties, overlapping windows,
padding), agreement with PyTorch (values, first and second derivatives), and
bad input. The registry (test_registry.py) checks the declared samples
against the naive loop references and numerically."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# max pooling selects an input element (also PyTorch's), so its values are
# bits copied; its gradients add a few small integers. average pooling and
# the gradients of random data are compared with tolerances.


def _data(shape, seed, dtype=numpy.float64):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(dtype)


def _arr(shape, seed=0, dtype=numpy.float64):
    return xgrad.array(_data(shape, seed, dtype))


def _grad(f, x, gy=None):
    x = xgrad.array(x).require_grad()
    y = f(x)
    gy = xgrad.ones_like(y) if gy is None else xgrad.array(gy)
    gx, = xgrad.grad([y], [x], grad_outputs=[gy])
    return y.to_numpy(), gx.to_numpy()


# ---------------------------------------------------------------------------
# max_pool

def test_max_pool_closed_form_and_gradient():
    x = numpy.arange(16.0).reshape(1, 1, 4, 4)
    y, gx = _grad(lambda a: xgrad.max_pool(a, 2), x)
    numpy.testing.assert_array_equal(y[0, 0], [[5, 7], [13, 15]])
    expected = numpy.zeros((4, 4))
    expected[1::2, 1::2] = 1
    numpy.testing.assert_array_equal(gx[0, 0], expected)


def test_max_pool_ties_go_to_the_first_in_window_order():
    _, gx = _grad(lambda a: xgrad.max_pool(a, 2), numpy.ones((1, 1, 4, 4)))
    expected = numpy.zeros((4, 4))
    expected[::2, ::2] = 1
    numpy.testing.assert_array_equal(gx[0, 0], expected)


def test_max_pool_overlapping_windows_accumulate():
    # Increasing values: every 3-window's max is its last element.
    x = numpy.arange(6.0).reshape(1, 1, 6)
    y, gx = _grad(lambda a: xgrad.max_pool(a, 3, stride=1), x, numpy.full((1, 1, 4), 2.0))
    numpy.testing.assert_array_equal(y[0, 0], [2, 3, 4, 5])
    numpy.testing.assert_array_equal(gx[0, 0], [0, 0, 2, 2, 2, 2])
    # A peak in the middle is the max of every window that holds it.
    x = numpy.array([[[0.0, 1, 5, 1, 0]]])
    _, gx = _grad(lambda a: xgrad.max_pool(a, 3, stride=1), x)
    numpy.testing.assert_array_equal(gx[0, 0], [0, 0, 3, 0, 0])


def test_max_pool_pads_with_minus_infinity():
    x = -1 - numpy.arange(9.0).reshape(1, 1, 3, 3)  # all negative
    y, gx = _grad(lambda a: xgrad.max_pool(a, 2, stride=1, pad=1), x)
    assert y.shape == (1, 1, 4, 4)
    assert (y < 0).all()  # the padding never wins
    numpy.testing.assert_array_equal(y[0, 0, 0], [-1, -1, -2, -3])
    assert gx.sum() == 16


def test_max_pool_cover_all():
    x = _arr((1, 1, 5))
    assert xgrad.max_pool(x, 2).shape == (1, 1, 2)
    y = xgrad.max_pool(x, 2, cover_all=True)
    assert y.shape == (1, 1, 3)
    assert y.to_numpy()[0, 0, 2] == x.to_numpy()[0, 0, 4]  # the tail window


def test_max_pool_second_derivative():
    # gx = scatter(gy): linear in gy, constant in x. d<gx, v>/dgy = gather(v).
    x = xgrad.array(_data((1, 2, 4, 5), 1)).require_grad()
    gy = xgrad.array(_data((1, 2, 3, 6), 2)).require_grad()
    y = xgrad.max_pool(x, 2, stride=1, pad=(0, 1))
    gx, = xgrad.grad([y], [x], grad_outputs=[gy], enable_double_backprop=True)
    v = _arr(x.shape, 3)
    ggx, ggy = xgrad.grad([xgrad.sum(gx * v)], [x, gy])
    assert ggx is None or not ggx.to_numpy().any()
    # gather(v) at the argmax of each window = what max_pool picks from v at
    # the same positions: perturb x by t*v with t tiny and differentiate y.
    t = 1e-7
    y2 = xgrad.max_pool(xgrad.array(x.to_numpy() + t * v.to_numpy()), 2, stride=1, pad=(0, 1))
    numpy.testing.assert_allclose(ggy.to_numpy(), (y2.to_numpy() - y.to_numpy()) / t,
                                  rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------
# average_pool

def test_average_pool_pad_modes():
    ones = numpy.ones((1, 1, 3, 3))
    y, gx = _grad(lambda a: xgrad.average_pool(a, 3, stride=1, pad=1), ones)
    numpy.testing.assert_allclose(y[0, 0], numpy.ones((3, 3)))  # 'ignore' is the default
    # Each input element's gradient: the sum over its windows of 1 / count.
    corner = 1 / 4 + 1 / 6 + 1 / 6 + 1 / 9
    numpy.testing.assert_allclose(gx[0, 0, 0, 0], corner, rtol=1e-12)
    y, gx = _grad(lambda a: xgrad.average_pool(a, 3, stride=1, pad=1, pad_mode='zero'), ones)
    numpy.testing.assert_allclose(y[0, 0], [[4, 6, 4], [6, 9, 6], [4, 6, 4]] / numpy.float64(9))
    numpy.testing.assert_allclose(gx[0, 0], numpy.array(
        [[4, 6, 4], [6, 9, 6], [4, 6, 4]]) / 9, rtol=1e-12)


def test_average_pool_stride_defaults_to_ksize():
    x = numpy.arange(8.0).reshape(1, 1, 8)
    y = xgrad.average_pool(xgrad.array(x), 2).to_numpy()
    numpy.testing.assert_allclose(y[0, 0], [0.5, 2.5, 4.5, 6.5])


def test_average_pool_second_derivative_is_zero_and_grad_of_grad_is_average():
    x = xgrad.array(_data((2, 1, 5, 4), 1)).require_grad()
    y = xgrad.average_pool(x, (2, 3), stride=(2, 1), pad=(1, 1))
    gy = xgrad.array(_data(y.shape, 2)).require_grad()
    gx, = xgrad.grad([y], [x], grad_outputs=[gy], enable_double_backprop=True)
    v = _arr(x.shape, 3)
    ggx, ggy = xgrad.grad([xgrad.sum(gx * v)], [x, gy])
    assert ggx is None or not ggx.to_numpy().any()
    expected = xgrad.average_pool(v, (2, 3), stride=(2, 1), pad=(1, 1))
    numpy.testing.assert_allclose(ggy.to_numpy(), expected.to_numpy(), rtol=1e-12)


def test_pooling_keeps_float16():
    x = _arr((1, 2, 4, 4), 0, numpy.float16)
    assert xgrad.max_pool(x, 2).dtype == numpy.float16
    assert xgrad.average_pool(x, 2).dtype == numpy.float16


def test_empty_batch():
    x = xgrad.zeros((0, 2, 4, 4)).require_grad()
    for f in (lambda a: xgrad.max_pool(a, 2), lambda a: xgrad.average_pool(a, 2)):
        y = f(x)
        assert y.shape == (0, 2, 2, 2)
        gx, = xgrad.grad([y], [x], grad_outputs=[xgrad.ones_like(y)])
        assert gx.shape == x.shape


# ---------------------------------------------------------------------------
# PyTorch

torch_cases = [
    # (x shape, ksize, stride, pad)
    ((2, 3, 9), 3, 2, 1),
    ((2, 2, 7, 6), (3, 2), (2, 1), (1, 0)),
    ((1, 2, 5, 6, 4), 2, (1, 2, 2), (1, 0, 1)),
    ((2, 3, 8, 8), 2, None, 0),
]


def _torch_kwargs(ksize, stride, pad):
    return dict(kernel_size=ksize, stride=ksize if stride is None else stride, padding=pad)


@pytest.mark.parametrize('xshape, ksize, stride, pad', torch_cases)
@pytest.mark.parametrize('cover_all', [False, True])
def test_max_pool_matches_torch(xshape, ksize, stride, pad, cover_all):
    torch = pytest.importorskip('torch')
    x = numpy.random.RandomState(1).permutation(numpy.prod(xshape)).reshape(xshape) / 7.0
    n = len(xshape) - 2
    t = torch.tensor(x, requires_grad=True)
    ty = getattr(torch.nn.functional, 'max_pool{}d'.format(n))(
        t, ceil_mode=cover_all, **_torch_kwargs(ksize, stride, pad))
    xs = xgrad.array(x).require_grad()
    y = xgrad.max_pool(xs, ksize, stride, pad, cover_all)
    if cover_all and y.shape != tuple(ty.shape):
        pytest.skip('ceil_mode drops a last window that starts in the padding')
    numpy.testing.assert_array_equal(y.to_numpy(), ty.detach().numpy())
    gy = _data(y.shape, 2)
    gx, = xgrad.grad([y], [xs], grad_outputs=[xgrad.array(gy)])
    tg, = torch.autograd.grad([ty], [t], grad_outputs=[torch.tensor(gy)])
    numpy.testing.assert_allclose(gx.to_numpy(), tg.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize('xshape, ksize, stride, pad', torch_cases)
@pytest.mark.parametrize('pad_mode', ['ignore', 'zero'])
def test_average_pool_matches_torch(xshape, ksize, stride, pad, pad_mode):
    torch = pytest.importorskip('torch')
    x = _data(xshape, 1)
    n = len(xshape) - 2
    t = torch.tensor(x, requires_grad=True)
    ty = getattr(torch.nn.functional, 'avg_pool{}d'.format(n))(
        t, count_include_pad=pad_mode == 'zero', **_torch_kwargs(ksize, stride, pad))
    xs = xgrad.array(x).require_grad()
    y = xgrad.average_pool(xs, ksize, stride, pad, pad_mode)
    numpy.testing.assert_allclose(y.to_numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-15)
    gy = _data(y.shape, 2)
    gx, = xgrad.grad([y], [xs], grad_outputs=[xgrad.array(gy)])
    tg, = torch.autograd.grad([ty], [t], grad_outputs=[torch.tensor(gy)])
    numpy.testing.assert_allclose(gx.to_numpy(), tg.numpy(), rtol=1e-12, atol=1e-15)


def test_double_backward_through_pooling_matches_torch():
    # A gradient penalty through both poolings.
    torch = pytest.importorskip('torch')
    x = numpy.random.RandomState(3).permutation(2 * 2 * 6 * 6).reshape(2, 2, 6, 6) / 50.0
    xs = xgrad.array(x).require_grad()
    t = torch.tensor(x, requires_grad=True)

    def ours(a):
        h = xgrad.tanh(xgrad.max_pool(a, 3, stride=1, pad=1))
        return xgrad.sum(xgrad.average_pool(h * h, 2, pad=1, pad_mode='zero'))

    def theirs(a):
        h = torch.tanh(torch.nn.functional.max_pool2d(a, 3, stride=1, padding=1))
        return torch.nn.functional.avg_pool2d(h * h, 2, padding=1,
                                              count_include_pad=True).sum()

    g, = xgrad.grad([ours(xs)], [xs], enable_double_backprop=True)
    gg, = xgrad.grad([xgrad.sum(g * g)], [xs])
    tg, = torch.autograd.grad([theirs(t)], [t], create_graph=True)
    tgg, = torch.autograd.grad([(tg * tg).sum()], [t])
    numpy.testing.assert_allclose(gg.to_numpy(), tgg.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------
# Bad input

@pytest.mark.parametrize('f', [xgrad.max_pool, xgrad.average_pool], ids=['max', 'average'])
def test_bad_input(f):
    name = f.__name__
    x = _arr((1, 2, 5, 5))
    with pytest.raises(xgrad.DtypeError, match=name):
        f(xgrad.ones((1, 2, 5, 5), numpy.int64), 2)
    with pytest.raises(xgrad.DimensionError, match=name + r'.*\(2, 5\)'):
        f(_arr((2, 5)), 2)
    with pytest.raises(xgrad.DimensionError, match='ksize'):
        f(x, (2, 2, 2))
    with pytest.raises(xgrad.DimensionError, match='stride'):
        f(x, 2, stride=(1,))
    with pytest.raises(ValueError, match='ksize must be positive'):
        f(x, 0)
    with pytest.raises(ValueError, match='stride must be positive'):
        f(x, 2, stride=(1, 0))
    with pytest.raises(ValueError, match='pad must be non-negative'):
        f(x, 2, pad=-1)
    with pytest.raises(TypeError, match='ksize'):
        f(x, 2.0)
    with pytest.raises(xgrad.DimensionError, match='do not fit'):
        f(x, 6)
    with pytest.raises(TypeError, match='x must be'):
        f('x', 2)


def test_bad_pad_mode():
    with pytest.raises(ValueError, match="pad_mode must be 'ignore' or 'zero'"):
        xgrad.average_pool(_arr((1, 2, 5, 5)), 2, pad_mode='edge')
