"""A user's optimizer step written with the supported idiom: the update goes
through ``W.as_grad_stopped()`` (a view sharing W's data, on no graph), since
``W -= lr * W.grad`` on a parameter raises even in no_backprop_mode. The
parameters after each step are compared with the same step in NumPy on the
closed-form gradient."""

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# a parameter left unchanged by a refused in-place update (no arithmetic).

X = numpy.array([[1.0, 2.0], [-1.0, 0.5], [0.3, -2.0]])
T = numpy.array([[1.0], [0.0], [-1.0]])
W0 = numpy.array([[0.5], [-0.25]])


def loss_and_grad_numpy(w):
    """mean((X w - T)**2) and its gradient 2 X^T (X w - T) / n."""
    r = X @ w - T
    return numpy.mean(r ** 2), 2 * X.T @ r / r.size


def xgrad_loss(W):
    return xgrad.mean(xgrad.square(xgrad.array(X) @ W - xgrad.array(T)))


def test_direct_inplace_update_of_a_parameter_raises_and_says_how():
    W = xgrad.array(W0).require_grad()
    xgrad_loss(W).backward()
    with xgrad.no_backprop_mode():
        with pytest.raises(xgrad.XgradError, match=r'as_grad_stopped\(\)') as e:
            W -= 0.1 * W.grad
    assert 'output array' not in str(e.value)
    numpy.testing.assert_array_equal(W.to_numpy(), W0)


@pytest.mark.parametrize('dtype', [numpy.float32, numpy.float64])
def test_sgd_steps(dtype):
    lr, w = 0.1, W0.copy()
    W = xgrad.array(W0, dtype=dtype).require_grad()
    for _ in range(5):
        loss = xgrad_loss(W)
        loss.backward()
        expected_loss, g = loss_and_grad_numpy(w)
        numpy.testing.assert_allclose(loss.item(), expected_loss, rtol=1e-5)
        p = W.as_grad_stopped()
        p -= lr * W.grad
        W.cleargrad()
        w = w - lr * g
        numpy.testing.assert_allclose(W.to_numpy(), w, rtol=1e-5, atol=1e-6)
    assert W.is_grad_required() and W.dtype == dtype


def test_adam_steps():
    lr, beta1, beta2, eps = 0.05, 0.9, 0.999, 1e-8
    W = xgrad.array(W0).require_grad()
    m, v = xgrad.zeros_like(W), xgrad.zeros_like(W)
    w, m_np, v_np = W0.copy(), numpy.zeros_like(W0), numpy.zeros_like(W0)
    for t in range(1, 6):
        xgrad_loss(W).backward()
        g = W.grad
        m *= beta1                     # m and v are on no graph: in place is fine
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        step = lr * (m / (1 - beta1 ** t)) / (xgrad.sqrt(v / (1 - beta2 ** t)) + eps)
        p = W.as_grad_stopped()
        p -= step
        W.cleargrad()

        _, g_np = loss_and_grad_numpy(w)
        m_np = beta1 * m_np + (1 - beta1) * g_np
        v_np = beta2 * v_np + (1 - beta2) * g_np ** 2
        w = w - lr * (m_np / (1 - beta1 ** t)) / (numpy.sqrt(v_np / (1 - beta2 ** t)) + eps)
        numpy.testing.assert_allclose(W.to_numpy(), w, rtol=1e-12, atol=1e-12)
    assert not numpy.allclose(w, W0)


def test_the_next_graph_sees_the_updated_values():
    """backward, step through the view, then a fresh graph: its gradient is
    the one at the new values."""
    W = xgrad.array(W0).require_grad()
    loss = xgrad_loss(W)
    loss.backward()
    p = W.as_grad_stopped()
    p -= 0.1 * W.grad
    W.cleargrad()
    xgrad_loss(W).backward()           # a fresh graph after the step
    _, g = loss_and_grad_numpy(W.to_numpy())
    numpy.testing.assert_allclose(W.grad.to_numpy(), g, rtol=1e-12)
