"""Threads: graphs built and backpropagated concurrently, and per-thread state.

* Several threads each run forward and backward on their own graphs (some
  inside their own backprop scope) many times, with frequent thread switches,
  and all get the closed-form gradients.
* Backprop modes are per thread: no_backprop_mode() in one thread, or the
  mode a backward pass sets up while it runs, does not stop recording in
  another (interleaved deterministically with Events).
* The default device (using_device / set_default_device) and the default
  context are per thread.
"""

import contextlib
import sys
import threading
import time
import traceback
import weakref

import numpy
import pytest

import xgrad

# Exact assertions here (issue 24's audit; the rule is in README, "Run the
# tests"): assert_array_equal and == on floats are used only where the
# value is exact on every machine, and say why:
# gradients of products of small integers.


TIMEOUT = 30  # seconds; any wait longer than this is a deadlock


@contextlib.contextmanager
def _frequent_switches(interval=1e-5):
    old = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _run_threads(*targets):
    """Run each target in its own thread; re-raise the first failure."""
    errors = []

    def wrap(target):
        def run():
            try:
                target()
            except BaseException:
                errors.append(traceback.format_exc())
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 4)
    assert not any(t.is_alive() for t in threads), 'a thread is stuck'
    assert not errors, '\n'.join(errors)


def _wait(event):
    assert event.wait(TIMEOUT), 'timed out waiting for the other thread'


# ---------------------------------------------------------------------------
# Concurrent forward/backward on separate graphs

class Cube(xgrad.FunctionNode):
    def forward(self, inputs):
        self.retain_inputs((0,))
        return (inputs[0] ** 3,)

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return (3 * x * x * grad_outputs[0],)


def _mlp_check(rng, backprop_id):
    """loss = sum(tanh(x @ w + b) ** 2) + sum(relu(x) * 2); checks dL/dx,
    dL/dw, dL/db against their closed forms."""
    xv = rng.standard_normal((5, 4))
    wv = rng.standard_normal((4, 3))
    bv = rng.standard_normal(3)
    x = xgrad.array(xv).require_grad(backprop_id)
    w = xgrad.array(wv).require_grad(backprop_id)
    b = xgrad.array(bv).require_grad(backprop_id)
    h = xgrad.tanh(x @ w + b)
    loss = xgrad.sum(h * h) + xgrad.sum(xgrad.relu(x) * 2)
    h_ref = weakref.ref(h)
    del h
    xgrad.backward(loss, backprop_id)

    hv = numpy.tanh(xv @ wv + bv)
    dz = 2 * hv * (1 - hv ** 2)
    numpy.testing.assert_allclose(
        loss.item(), numpy.sum(hv ** 2) + 2 * numpy.sum(numpy.maximum(xv, 0)),
        rtol=1e-12)
    numpy.testing.assert_allclose(w.get_grad(backprop_id).to_numpy(),
                                  xv.T @ dz, rtol=1e-10, atol=1e-12)
    numpy.testing.assert_allclose(b.get_grad(backprop_id).to_numpy(),
                                  dz.sum(0), rtol=1e-10, atol=1e-12)
    numpy.testing.assert_allclose(x.get_grad(backprop_id).to_numpy(),
                                  dz @ wv.T + 2 * (xv > 0), rtol=1e-10,
                                  atol=1e-12)
    del loss
    assert h_ref() is None       # freed at once, in this thread


def _double_backprop_check(rng, backprop_id):
    """f = sum(Cube(x)) + sum(tanh(x)); gx = f'(x) by grad() with double
    backprop; then backward of sum(gx) gives f''(x)."""
    xv = rng.uniform(-1, 1, 7)
    x = xgrad.array(xv).require_grad(backprop_id)
    c, = Cube().apply((x,))
    y = xgrad.sum(c) + xgrad.sum(xgrad.tanh(x))
    gx, = xgrad.grad([y], [x], backprop_id, enable_double_backprop=True)
    t = numpy.tanh(xv)
    numpy.testing.assert_allclose(gx.to_numpy(), 3 * xv ** 2 + 1 - t ** 2,
                                  rtol=1e-10)
    xgrad.backward(xgrad.sum(gx), backprop_id)
    numpy.testing.assert_allclose(x.get_grad(backprop_id).to_numpy(),
                                  6 * xv - 2 * t * (1 - t ** 2), rtol=1e-10,
                                  atol=1e-12)


def _tanh_chain_check(rng, backprop_id):
    xv = rng.uniform(-1, 1, 3)
    x = xgrad.array(xv).require_grad(backprop_id)
    y = x
    for _ in range(20):
        y = xgrad.tanh(y)
    xgrad.backward(xgrad.sum(y), backprop_id)
    v, g = xv, numpy.ones_like(xv)
    for _ in range(20):
        v = numpy.tanh(v)
        g = g * (1 - v ** 2)
    numpy.testing.assert_allclose(x.get_grad(backprop_id).to_numpy(), g,
                                  rtol=1e-10)


ITERATIONS = 50
N_THREADS = 4


def test_threads_get_correct_gradients_on_their_own_graphs():
    start = threading.Barrier(N_THREADS, timeout=TIMEOUT)
    done = []

    def worker(index):
        def run():
            rng = numpy.random.default_rng(index)
            start.wait()
            for i in range(ITERATIONS):
                if index % 2:     # odd threads: their own graph
                    with xgrad.backprop_scope('thread{}'.format(index)) as bp:
                        _mlp_check(rng, bp)
                        _double_backprop_check(rng, bp)
                        _tanh_chain_check(rng, bp)
                else:             # even threads: the default graph
                    _mlp_check(rng, None)
                    _double_backprop_check(rng, None)
                    _tanh_chain_check(rng, None)
                assert xgrad.is_backprop_required()
            done.append(index)
        return run

    with _frequent_switches():
        _run_threads(*[worker(i) for i in range(N_THREADS)])
    assert sorted(done) == list(range(N_THREADS))


def test_threads_share_one_scope_graph_with_their_own_arrays():
    """Four threads record on the same (non-default) graph concurrently, each
    with its own arrays: gradients do not mix."""
    start = threading.Barrier(N_THREADS, timeout=TIMEOUT)

    with xgrad.backprop_scope('shared') as bp:
        def worker(index):
            def run():
                rng = numpy.random.default_rng(100 + index)
                start.wait()
                for _ in range(ITERATIONS):
                    _mlp_check(rng, bp)
                    _tanh_chain_check(rng, bp)
            return run

        with _frequent_switches():
            _run_threads(*[worker(i) for i in range(N_THREADS)])


# ---------------------------------------------------------------------------
# Backprop modes are per thread

@pytest.mark.parametrize('which', ['default_context', 'backprop_id', 'list'])
def test_no_backprop_mode_in_one_thread_does_not_stop_another(which):
    with xgrad.backprop_scope('bp') as bp:
        arg = {'default_context': None, 'backprop_id': bp, 'list': [bp]}[which]
        target = None if which == 'default_context' else bp
        inside = threading.Event()
        checked = threading.Event()

        def quiet():
            x = xgrad.array([1.0, 2.0]).require_grad(target)
            with xgrad.no_backprop_mode(arg):
                inside.set()
                _wait(checked)
                # Still off here, whatever the other thread did meanwhile.
                assert not xgrad.is_backprop_required(target)
                assert not (x * 3).is_backprop_required(target)
            assert xgrad.is_backprop_required(target)

        def recording():
            _wait(inside)
            try:
                assert xgrad.is_backprop_required(target)
                x = xgrad.array([1.0, 2.0]).require_grad(target)
                y = x * 3
                assert y.is_backprop_required(target)
                assert y._is_chained(target)
                xgrad.backward(xgrad.sum(y * y), target)
                numpy.testing.assert_array_equal(
                    x.get_grad(target).to_numpy(), [18.0, 36.0])
                # A nested force/no mode here does not leak to the other
                # thread either.
                with xgrad.force_backprop_mode(arg):
                    assert xgrad.is_backprop_required(target)
            finally:
                checked.set()

        _run_threads(quiet, recording)
        assert xgrad.is_backprop_required(target)


def test_force_backprop_mode_in_one_thread_does_not_enable_another():
    inside = threading.Event()
    checked = threading.Event()

    def forcing():
        with xgrad.no_backprop_mode():
            with xgrad.force_backprop_mode():
                inside.set()
                _wait(checked)
                assert xgrad.is_backprop_required()

    def quiet():
        with xgrad.no_backprop_mode():
            _wait(inside)
            try:
                assert not xgrad.is_backprop_required()
                x = xgrad.array([1.0]).require_grad()
                assert not (x * 2).is_backprop_required()
            finally:
                checked.set()

    _run_threads(forcing, quiet)


class _Blocking(xgrad.FunctionNode):
    """Identity whose backward waits (with the GIL released) until told."""

    def __init__(self, entered, resume):
        self.entered = entered
        self.resume = resume

    def forward(self, inputs):
        return (inputs[0].copy(),)

    def backward(self, target_input_indexes, grad_outputs):
        # Inside a backward without double backprop the engine disables
        # recording on this graph -- for this thread only.
        assert not xgrad.is_backprop_required()
        self.entered.set()
        _wait(self.resume)
        assert not xgrad.is_backprop_required()
        return (grad_outputs[0] * 1,)


def test_mode_set_up_by_a_running_backward_is_per_thread():
    entered = threading.Event()
    resume = threading.Event()

    def backpropagating():
        x = xgrad.array([1.0, 2.0]).require_grad()
        y, = _Blocking(entered, resume).apply((x,))
        xgrad.sum(y * y).backward()
        numpy.testing.assert_array_equal(x.grad.to_numpy(), [2.0, 4.0])
        assert xgrad.is_backprop_required()

    def recording():
        _wait(entered)     # the other thread is in the middle of backward
        try:
            assert xgrad.is_backprop_required()
            x = xgrad.array([3.0]).require_grad()
            y = xgrad.exp(x) * x
            assert y._is_chained()
            y.backward(enable_double_backprop=True)
            e = numpy.exp(3.0)
            numpy.testing.assert_allclose(x.grad.to_numpy(), [4 * e])
            assert x.grad._is_chained()
            x.cleargrad()    # see test_memory: such a gradient closes a cycle
        finally:
            resume.set()

    _run_threads(backpropagating, recording)


# ---------------------------------------------------------------------------
# Default device and default context are per thread

def test_using_device_is_per_thread():
    inside = threading.Event()
    checked = threading.Event()

    def using():
        with xgrad.using_device('native:1') as scope:  # ChainerX's DeviceScope
            assert scope.device.name == 'native:1'
            inside.set()
            _wait(checked)
            assert xgrad.get_default_device().name == 'native:1'
            assert xgrad.zeros((2,)).device.name == 'native:1'
        assert xgrad.get_default_device().name == 'native:0'

    def other():
        _wait(inside)
        try:
            assert xgrad.get_default_device().name == 'native:0'
            assert xgrad.ones((2,)).device.name == 'native:0'
            with xgrad.using_device('native:2'):
                assert xgrad.zeros((1,)).device.name == 'native:2'
            assert xgrad.get_default_device().name == 'native:0'
        finally:
            checked.set()

    with xgrad.using_device('native:3'):
        _run_threads(using, other)
        assert xgrad.get_default_device().name == 'native:3'
    assert xgrad.get_default_device().name == 'native:0'


def test_set_default_device_is_per_thread():
    both_set = threading.Barrier(2, timeout=TIMEOUT)
    both_checked = threading.Barrier(2, timeout=TIMEOUT)

    def setter(index):
        def run():
            assert xgrad.get_default_device().name == 'native:0'
            xgrad.set_default_device('native:{}'.format(index))
            both_set.wait()
            assert xgrad.get_default_device().name == 'native:{}'.format(index)
            a = xgrad.arange(3, dtype=xgrad.float32).require_grad()
            assert a.device.name == 'native:{}'.format(index)
            y = xgrad.sum(a * a)
            y.backward()
            assert a.grad.device.name == 'native:{}'.format(index)
            both_checked.wait()
        return run

    _run_threads(setter(4), setter(5))
    assert xgrad.get_default_device().name == 'native:0'


def test_context_scope_is_per_thread():
    inside = threading.Event()
    checked = threading.Event()
    ctx = xgrad.Context()

    def scoped():
        with xgrad.context_scope(ctx):
            inside.set()
            _wait(checked)
            assert xgrad.get_default_context() is ctx

    def other():
        _wait(inside)
        try:
            assert xgrad.get_default_context() is not ctx
        finally:
            checked.set()

    default = xgrad.get_default_context()
    _run_threads(scoped, other)
    assert xgrad.get_default_context() is default


def _in_thread_reusing_an_ident(setup, target, attempts=20):
    """Run ``setup`` in a thread that then finishes, and ``target`` in a new
    thread, without touching xgrad from any other thread in between; retry
    until the new thread got the finished thread's ident. Returns what
    ``target`` returned, or skips when no ident was reused."""
    for _ in range(attempts):
        idents, results = [], []
        first = threading.Thread(target=lambda: idents.append(
            (threading.get_ident(), setup())))
        first.start()
        first.join(TIMEOUT)
        time.sleep(0.01)     # let the finished thread's stack be recycled
        second = threading.Thread(target=lambda: results.append(
            (threading.get_ident(), target())))
        second.start()
        second.join(TIMEOUT)
        xgrad.is_backprop_required()   # point the engine's cache back here
        if results and idents and results[0][0] == idents[0][0]:
            return results[0][1]
    pytest.skip('no thread ident was reused: nothing to check')


def test_default_device_does_not_leak_to_a_later_thread():
    def setup():
        xgrad.set_default_device('native:1')
        return xgrad.get_default_device().name

    def target():
        return xgrad.get_default_device().name, xgrad.zeros((1,)).device.name

    assert _in_thread_reusing_an_ident(setup, target) == ('native:0',
                                                          'native:0')


def test_no_backprop_mode_holds_in_a_thread_with_a_reused_ident():
    go = threading.Event()
    touched = threading.Event()

    def other():              # alive all along, so its ident is not reused
        _wait(go)
        xgrad.is_backprop_required()
        touched.set()

    helper = threading.Thread(target=other)
    helper.start()

    def target():
        seen = []
        try:
            with xgrad.no_backprop_mode():
                seen.append(xgrad.is_backprop_required())
                go.set()                  # another thread uses xgrad now
                _wait(touched)
                seen.append(xgrad.is_backprop_required())
                x = xgrad.array([1.0]).require_grad()
                seen.append((x * 2).is_backprop_required())
            seen.append(xgrad.is_backprop_required())
        except Exception as e:            # e.g. the mode's exit cannot find it
            seen.append(repr(e))
        return seen

    try:
        seen = _in_thread_reusing_an_ident(xgrad.is_backprop_required, target)
    finally:
        go.set()
        helper.join(TIMEOUT)
    assert seen == [False, False, False, True]


# ---------------------------------------------------------------------------
# Freeing in one thread is not held up by another thread's freeing

class _Identity(xgrad.FunctionNode):
    def forward(self, inputs):
        return (inputs[0].copy(),)

    def backward(self, target_input_indexes, grad_outputs):
        return (grad_outputs[0],)


def test_graph_dropped_while_another_thread_is_freeing_is_freed_at_once():
    entered = threading.Event()
    resume = threading.Event()
    result = {}

    def freeing():
        x = xgrad.array(numpy.ones(3)).require_grad()
        op = _Identity()
        h, = op.apply((x,))
        weakref.finalize(op, lambda: (entered.set(), resume.wait(TIMEOUT)))
        del op
        z = h * 2.0
        del h
        del z   # frees z's op, whose release frees the _Identity op: blocks

    def other():
        _wait(entered)
        try:
            x = xgrad.array(numpy.ones(3)).require_grad()
            h = x * 3.0
            z = h * 2.0
            h_ref = weakref.ref(h)
            del h
            del z
            result['alive'] = h_ref() is not None
        finally:
            resume.set()

    _run_threads(freeing, other)
    assert result['alive'] is False
