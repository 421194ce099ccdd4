"""dropout beyond the registry's generated tests: how many elements it drops
and how it scales the rest, its random sources, the mask in the gradients,
and bad input."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# dropout masks (booleans) drawn from the same generator and seed, and
# ratio 0, which copies.


@pytest.mark.parametrize('ratio', [0.1, 0.5, 0.8])
def test_drop_fraction_and_scaling(ratio):
    x = xgrad.ones((200000,), 'float32')
    y = xgrad.dropout(x, ratio, random_state=0).to_numpy()
    dropped = numpy.mean(y == 0)
    # binomial standard deviation sqrt(r (1 - r) / n) < 1.2e-3: 5 sigma
    assert abs(dropped - ratio) < 6e-3
    numpy.testing.assert_allclose(y[y != 0], 1 / (1 - ratio), rtol=1e-6)
    assert abs(y.mean() - 1) < 0.03  # the expectation is kept


@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
def test_keeps_dtype_and_shape(dtype):
    y = xgrad.dropout(xgrad.ones((3, 4), dtype), 0.5, random_state=1)
    assert y.dtype == numpy.dtype(dtype) and y.shape == (3, 4)


def test_ratio_zero_is_identity():
    x = xgrad.array(numpy.arange(6.0).reshape(2, 3))
    numpy.testing.assert_array_equal(xgrad.dropout(x, 0.0).to_numpy(), x.to_numpy())


def test_random_sources():
    x = xgrad.ones((1000,), 'float64')

    def mask(**kw):
        return xgrad.dropout(x, **kw).to_numpy() != 0

    numpy.testing.assert_array_equal(mask(random_state=7), mask(random_state=7))
    assert not numpy.array_equal(mask(random_state=7), mask(random_state=8))
    numpy.testing.assert_array_equal(mask(random_state=numpy.random.default_rng(7)),
                                      mask(random_state=7))
    rs1, rs2 = numpy.random.RandomState(3), numpy.random.RandomState(3)
    numpy.testing.assert_array_equal(mask(random_state=rs1), mask(random_state=rs2))
    # A generator advances: two calls draw two masks.
    gen = numpy.random.default_rng(5)
    assert not numpy.array_equal(mask(random_state=gen), mask(random_state=gen))
    assert not numpy.array_equal(mask(), mask())


def test_gradients_use_the_forward_mask():
    x = xgrad.array(numpy.linspace(1, 2, 50)).require_grad()
    y = xgrad.dropout(x, 0.4, random_state=11)
    scaled_mask = y.to_numpy() / x.to_numpy()
    gy = xgrad.array(numpy.linspace(-1, 1, 50)).require_grad()
    gx, = xgrad.grad([y], [x], grad_outputs=[gy], enable_double_backprop=True)
    numpy.testing.assert_allclose(gx.to_numpy(), gy.to_numpy() * scaled_mask, rtol=1e-12)
    # gx is linear in gy with the same mask, and does not depend on x
    ggy, = xgrad.grad([xgrad.sum(gx)], [gy])
    numpy.testing.assert_allclose(ggy.to_numpy(), scaled_mask, rtol=1e-12)
    assert xgrad.grad([xgrad.sum(gx)], [x])[0] is None


def test_bad_input():
    x = xgrad.ones((3,))
    for ratio in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r'dropout: ratio must be in \[0, 1\)'):
            xgrad.dropout(x, ratio)
    with pytest.raises(TypeError, match='ratio'):
        xgrad.dropout(x, '0.5')
    with pytest.raises(TypeError, match='random_state'):
        xgrad.dropout(x, 0.5, random_state='seed')
    with pytest.raises(TypeError, match='random_state'):
        xgrad.dropout(x, 0.5, random_state=1.5)
    with pytest.raises(xgrad.DtypeError, match='dropout: x'):
        xgrad.dropout(xgrad.ones((3,), 'int64'))
