"""The backward pass's ownership rule, with the engine's debug checks on.

A raw gradient that an op's formula has just made may take the node's other
contributions in place (no new buffer per sum); the pass decides this by the
buffer's reference count (``_gradient_is_exclusively_ours`` in
xgrad/_backward.pyx: its own three references, nobody else's). With
``XGRAD_DEBUG=1`` (or ``xgrad._debug.set_enabled(True)``) every such question
also checks the rule's invariant (``_debug.check_gradient_ownership``): these
tests run real passes that way, so that a change to the pass which drops one
of its references fails here instead of summing into someone else's array,
and one which adds a reference fails here instead of silently never taking
a buffer.
"""

import os
import subprocess
import sys

import numpy
import pytest

import xgrad
from xgrad import _debug


@pytest.fixture
def debug_checks():
    previous = _debug.set_enabled(True)
    try:
        yield
    finally:
        _debug.set_enabled(previous)


def _exclusive_answers():
    return _debug.ownership_counts()[1]


def _array(values):
    return xgrad.array(numpy.asarray(values, dtype=numpy.float64))


def test_debug_checks_are_off_unless_asked_for():
    env = {k: v for k, v in os.environ.items() if k != 'XGRAD_DEBUG'}
    code = 'from xgrad import _debug; print(_debug.set_enabled(False))'
    for value, expected in ((None, 'False'), ('0', 'False'), ('1', 'True')):
        if value is not None:
            env['XGRAD_DEBUG'] = value
        out = subprocess.run([sys.executable, '-c', code], env=env, check=True,
                             stdout=subprocess.PIPE, universal_newlines=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                 os.path.abspath(__file__))))).stdout
        assert out.strip() == expected, (value, out)


def test_xgrad_debug_in_the_environment_checks_a_training_step():
    code = '''
import numpy, xgrad
from xgrad import _debug
rng = numpy.random.default_rng(0)
x = xgrad.array(rng.standard_normal((8, 5)).astype(numpy.float32))
w = xgrad.array(rng.standard_normal((5, 3)).astype(numpy.float32)).require_grad()
b = xgrad.array(numpy.zeros(3, numpy.float32)).require_grad()
h = xgrad.tanh(xgrad.matmul(x, w) + b)
loss = (h * h + h).sum()
loss.backward()
asked, exclusive = _debug.ownership_counts()
assert asked > 0 and exclusive > 0, (asked, exclusive)
print('ok')
'''
    env = dict(os.environ, XGRAD_DEBUG='1')
    out = subprocess.run([sys.executable, '-c', code], env=env, check=True,
                         stdout=subprocess.PIPE, universal_newlines=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__))))).stdout
    assert out.strip() == 'ok'


def test_fresh_buffers_take_the_other_contributions_in_place(debug_checks):
    # x feeds four ops: its gradient is a sum of four raw buffers made by
    # the formulas, the first taken as the table's own.
    values = numpy.linspace(-1.0, 1.5, 6)
    x = _array(values).require_grad()
    before = _exclusive_answers()
    y = (xgrad.tanh(x) * x + xgrad.exp(x) * x).sum()
    y.backward()
    assert _exclusive_answers() > before
    t = numpy.tanh(values)
    expected = (1 - t * t) * values + t + numpy.exp(values) * (1 + values)
    numpy.testing.assert_allclose(numpy.asarray(x.grad), expected, rtol=1e-12)


def test_a_buffer_held_elsewhere_is_never_summed_into(debug_checks):
    # add's formula hands the output gradient (the caller's seed) to both
    # inputs: shared with the seed and with each other, so never exclusive.
    x = _array([1.0, 2.0, 3.0]).require_grad()
    seed = _array([10.0, 20.0, 30.0])
    y = x + x
    xgrad.backward(y, grad_outputs=[seed])
    numpy.testing.assert_array_equal(numpy.asarray(seed), [10.0, 20.0, 30.0])
    numpy.testing.assert_array_equal(numpy.asarray(x.grad), [20.0, 40.0, 60.0])


def test_retained_data_is_never_summed_into(debug_checks):
    # multiply's gradient for x is gy * w: a new buffer; w's own data (which
    # the op retained) must come out of the pass untouched.
    w_values = numpy.array([2.0, 3.0, 4.0])
    x = _array([1.0, 1.0, 1.0]).require_grad()
    w = _array(w_values)
    loss = (x * w).sum() + (x * w).sum() + x.sum()
    loss.backward()
    numpy.testing.assert_array_equal(numpy.asarray(w), w_values)
    numpy.testing.assert_array_equal(numpy.asarray(x.grad), 2 * w_values + 1)


def test_gradients_agree_with_the_checks_on_and_off():
    rng = numpy.random.default_rng(1)
    xv = rng.standard_normal((4, 6))
    wv = rng.standard_normal((6, 5))

    def step():
        x = xgrad.array(xv)
        w = xgrad.array(wv).require_grad()
        h = xgrad.relu(xgrad.matmul(x, w))
        loss = (xgrad.log_softmax(h, axis=1) * h).sum() + (h * h).sum()
        loss.backward()
        return numpy.array(w.grad)

    plain = step()
    previous = _debug.set_enabled(True)
    try:
        checked = step()
    finally:
        _debug.set_enabled(previous)
    numpy.testing.assert_array_equal(plain, checked)


def test_the_check_reports_a_reference_the_pass_dropped():
    a = numpy.ones(3)
    with pytest.raises(AssertionError, match='fewer than the 3'):
        _debug.check_gradient_ownership(a, (a,), 2, 3)


def test_the_check_reports_a_holder_the_count_missed():
    a = numpy.ones(3)
    holder = [a]
    with pytest.raises(AssertionError, match='also held by .*list'):
        _debug.check_gradient_ownership(a, (a,), 3, 3)
    assert holder[0] is a
