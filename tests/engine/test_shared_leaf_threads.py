"""Threads that backpropagate into the same leaf lose no update (T1)."""

import sys
import threading
import time

import numpy

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# gradients that add ones, n_threads * steps of them: integers far below
# 2**24, exact in any order of accumulation between threads.


class SlowIdentity(xgrad.FunctionNode):
    """y = x, whose backward yields the GIL: another thread's pass can commit
    between this pass's contributions to the same leaf."""

    def forward(self, inputs):
        return inputs[0].copy(),

    def backward(self, target_input_indexes, grad_outputs):
        time.sleep(0.0005)
        return grad_outputs[0],


def _in_threads(n_threads, steps, step):
    """``step()`` ``steps`` times in each of ``n_threads`` threads started
    together; the errors they raised."""
    start = threading.Barrier(n_threads)
    errors = []

    def work():
        try:
            start.wait()
            for _ in range(steps):
                step()
        except BaseException as e:  # pragma: no cover - reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def test_two_threads_accumulating_into_one_leaf_lose_nothing():
    w = xgrad.array(numpy.zeros((4,), numpy.float32)).require_grad()
    n_threads, steps = 2, 100

    def step():
        s, = SlowIdentity().apply((w,))
        (xgrad.sum(w * 1) + xgrad.sum(s)).backward()

    errors = _in_threads(n_threads, steps, step)
    assert not errors, errors
    numpy.testing.assert_array_equal(w.grad.to_numpy(),
                                     numpy.full((4,), 2 * n_threads * steps, numpy.float32))


def test_two_threads_with_switches_accumulating_into_one_leaf_lose_nothing():
    w = xgrad.array(numpy.zeros((4,), numpy.float32)).require_grad()
    w.set_grad(xgrad.zeros((4,), numpy.float32))
    n_threads, steps = 2, 400
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        errors = _in_threads(n_threads, steps, lambda: xgrad.sum(w * 1).backward())
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    numpy.testing.assert_array_equal(w.grad.to_numpy(),
                                     numpy.full((4,), n_threads * steps, numpy.float32))
