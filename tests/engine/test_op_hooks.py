"""Op hooks (``xgrad.op_hooks``, ``TimerHook``, ``PrintHook``) and anomaly
detection (``xgrad.detect_anomaly``): which ops a hook sees and with what,
scoping (nesting, threads, exceptions), bad hooks, and that an anomaly
names the op, the input, the backprop ID and the forward's stack. Values
compared are closed forms."""

import io
import threading

import numpy
import pytest

import xgrad
from xgrad.hooks import OpHook, PrintHook, TimerHook
from xgrad.testing import assert_allclose


class Recorder(OpHook):
    """Logs (event, op name, inputs, outputs) for every call."""

    def __init__(self, tag=''):
        self.tag = tag
        self.log = []

    def _add(self, event, op, inputs, outputs):
        self.log.append((self.tag + event, op.name, inputs, outputs))

    def forward_preprocess(self, op, inputs, outputs):
        self._add('fpre', op, inputs, outputs)

    def forward_postprocess(self, op, inputs, outputs):
        self._add('fpost', op, inputs, outputs)

    def backward_preprocess(self, op, inputs, outputs):
        self._add('bpre', op, inputs, outputs)

    def backward_postprocess(self, op, inputs, outputs):
        self._add('bpost', op, inputs, outputs)

    def events(self):
        return [(e, name) for e, name, _, _ in self.log]


def leaf(values):
    return xgrad.array(numpy.asarray(values, dtype=numpy.float64)).require_grad()


class Cube(xgrad.FunctionNode):
    op_name = 'cube'

    def forward(self, inputs):
        self.retain_inputs((0,))
        return inputs[0] ** 3,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return 3 * x * x * grad_outputs[0],


def test_native_ops_forward_and_backward_with_their_arrays():
    x = leaf([1.0, 2.0])
    r = Recorder()
    with xgrad.op_hooks(r):
        y = x * 3.0
        s = xgrad.sum(y)
        s.backward()
    assert r.events() == [
        ('fpre', 'multiply'), ('fpost', 'multiply'), ('fpre', 'sum'), ('fpost', 'sum'),
        ('bpre', 'sum'), ('bpost', 'sum'), ('bpre', 'multiply'), ('bpost', 'multiply')]
    _, _, inputs, outputs = r.log[0]
    assert inputs[0] is x and outputs is None
    _, _, inputs, outputs = r.log[1]
    assert outputs[0] is y
    _, _, gys, grads = r.log[7]                   # multiply's backward
    assert_allclose(gys[0].to_numpy(), [1.0, 1.0])
    assert_allclose(grads[0].to_numpy(), [3.0, 3.0])
    assert_allclose(x.grad.to_numpy(), [3.0, 3.0])


def test_python_function_nodes_and_grafted_ops_are_seen():
    x = leaf([1.0, 2.0])
    r = Recorder()
    with xgrad.op_hooks(r):
        y, = Cube().apply((x,))
        z = xgrad.array(y.to_numpy() * 2.0)            # computed elsewhere...
        xgrad._function_node_forward(_Twice(), [y], [z], [], [])   # ...then grafted
        xgrad.sum(z).backward()
    names = r.events()
    assert ('fpre', 'cube') in names and ('fpost', 'cube') in names
    assert ('fpre', 'chainer_function') in names and ('bpost', 'chainer_function') in names
    assert ('bpost', 'cube') in names
    assert_allclose(x.grad.to_numpy(), 2 * 3 * numpy.array([1.0, 4.0]))


class _Twice:
    """Plays a Chainer FunctionNode grafted by _function_node_forward: y = 2x."""

    def _backward_chainerx(self, targets, grad_outputs, retained_in, retained_out):
        return [2 * grad_outputs[0]]


def test_ops_run_inside_a_recorded_backward_are_seen_in_double_backprop():
    x = leaf([1.0, 2.0])
    r = Recorder()
    with xgrad.op_hooks(r):
        y = xgrad.sum(x * x * x)
        gx, = xgrad.grad([y], [x], enable_double_backprop=True)
    # The backward of multiply ran ops (multiply) while it was being hooked.
    events = r.events()
    first_bpre = events.index(('bpre', 'sum'))
    assert ('fpre', 'multiply') in events[first_bpre:]
    assert_allclose(gx.to_numpy(), 3 * numpy.array([1.0, 4.0]))


def test_scopes_nest_outer_first_and_end_with_the_with_block():
    outer, inner = Recorder('o-'), Recorder('i-')
    log = []
    outer.log = inner.log = log
    x = leaf([1.0])
    with xgrad.op_hooks(outer):
        with xgrad.op_hooks(inner):
            x * 2.0
        x * 3.0
    x * 4.0
    assert [e for e, _, _, _ in log] == ['o-fpre', 'i-fpre', 'o-fpost', 'i-fpost',
                                         'o-fpre', 'o-fpost']


def test_with_hook_installs_it_and_an_exception_still_ends_the_scope():
    r = Recorder()
    x = leaf([1.0])
    with pytest.raises(RuntimeError):
        with r:
            x * 2.0
            raise RuntimeError('boom')
    x * 5.0
    assert r.events() == [('fpre', 'multiply'), ('fpost', 'multiply')]


def test_hooks_are_per_thread():
    r = Recorder()
    x = leaf([1.0])
    done = threading.Event()

    def other():
        x * 7.0
        done.set()

    with xgrad.op_hooks(r):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert done.is_set() and r.events() == []


def test_a_hook_with_only_some_methods_is_accepted():
    class OnlyForward:
        def __init__(self):
            self.names = []

        def forward_postprocess(self, op, inputs, outputs):
            self.names.append(op.name)

    h = OnlyForward()
    x = leaf([1.0, 2.0])
    with xgrad.op_hooks(h):
        xgrad.sum(xgrad.exp(x)).backward()
    assert h.names == ['exp', 'sum']


def test_bad_hooks_and_raising_hooks():
    with pytest.raises(TypeError, match=r'hook 1 .* has none of the methods'):
        xgrad.op_hooks(Recorder(), object())

    class FailsBefore(OpHook):
        def forward_preprocess(self, op, inputs, outputs):
            raise ValueError('no ' + op.name)

    x = leaf([1.0, 2.0])
    with xgrad.op_hooks(FailsBefore()):
        with pytest.raises(ValueError, match='no multiply'):
            x * 2.0

    class FailsInBackward(OpHook):
        def backward_postprocess(self, op, inputs, outputs):
            if op.name == 'multiply':
                raise ValueError('stop')

    y = xgrad.sum(x * 2.0)
    with xgrad.op_hooks(FailsInBackward()):
        with pytest.raises(ValueError, match='stop'):
            y.backward()
    assert x.grad is None                      # the pass rolled back
    y.backward()
    assert_allclose(x.grad.to_numpy(), [2.0, 2.0])


# -- TimerHook -----------------------------------------------------------------

def test_timer_hook_counts_and_times_forward_and_backward():
    x = leaf(numpy.ones((4, 3)))
    w = leaf(numpy.ones((3, 2)))
    hook = TimerHook()
    with hook:
        for _ in range(3):
            x.cleargrad()
            w.cleargrad()
            loss = xgrad.sum(xgrad.tanh(xgrad.dot(x, w)))
            loss.backward()
    summary = hook.summary()
    assert list(summary) == ['matmul', 'tanh', 'sum']
    for row in summary.values():
        assert row['forward_calls'] == 3 and row['backward_calls'] == 3
        assert row['occurrence'] == 6
        assert row['forward_time'] > 0 and row['backward_time'] > 0
        assert row['elapsed_time'] == pytest.approx(row['forward_time'] + row['backward_time'])
    assert len(hook.call_history) == 18
    assert hook.total_time() == pytest.approx(sum(t for _, _, t in hook.call_history))


def test_timer_hook_total_counts_outermost_calls_only():
    x = leaf([1.0, 2.0])
    hook = TimerHook()
    with hook:
        xgrad.grad([xgrad.sum(x * x)], [x], enable_double_backprop=True)
    outermost = [t for name, d, t in hook.call_history]
    # multiply's backward ran a multiply: that one is inside, not added.
    assert hook.total_time() < sum(outermost)


def test_timer_hook_report_is_a_table():
    x = leaf([1.0, 2.0])
    hook = TimerHook()
    with hook:
        xgrad.sum(x * x).backward()
    out = io.StringIO()
    hook.print_report(unit='us', file=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ['Op', 'Forward', 'Calls', 'Mean', 'Backward', 'Calls', 'Mean']
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {'multiply', 'sum'}
    assert rows['sum'][2] == '1' and rows['sum'][1].endswith('us')
    with pytest.raises(xgrad.XgradError, match='unit must be one of'):
        hook.print_report(unit='hours')


# -- PrintHook -----------------------------------------------------------------

def test_print_hook_prints_each_op_and_its_arrays():
    x = leaf([[1.0, -2.0, 3.0]])
    out = io.StringIO()
    with PrintHook(file=out):
        xgrad.sum(xgrad.relu(x)).backward()
    text = out.getvalue()
    assert text.index('forward\trelu') < text.index('forward\tsum') < \
        text.index('backward\tsum') < text.index('backward\trelu')
    assert 'shape=(1, 3) dtype=float64 device=native:0 min=-2.0 max=3.0' in text
    assert 'output gradient' in text


# -- detect_anomaly ------------------------------------------------------------

def _sqrt_of(x):
    return xgrad.sum(xgrad.sqrt(x))     # the line the anomaly points to


def test_anomaly_names_op_input_graph_and_forward_stack():
    with xgrad.backprop_scope('mygraph') as bp:
        x = xgrad.array(numpy.array([0.0, 4.0])).require_grad(bp)
        with xgrad.detect_anomaly():
            y = _sqrt_of(x)
            with pytest.raises(xgrad.AnomalyError) as info:
                y.backward(bp)
        message = str(info.value)
        assert "op sqrt on backprop ID 'mygraph' is inf" in message
        assert 'input 0' in message
        assert 'in _sqrt_of' in message and 'xgrad.sqrt(x)' in message
        assert x.get_grad(bp) is None                  # rolled back


def test_anomaly_reports_nan_and_only_where_it_starts():
    x = xgrad.array(numpy.array([-1.0, 4.0])).require_grad()
    with xgrad.detect_anomaly():
        with numpy.errstate(invalid='ignore'):
            y = xgrad.sum(xgrad.sqrt(x) * 2.0)   # sqrt(-1) is NaN already in forward
        with pytest.raises(xgrad.AnomalyError, match='op sqrt .* is NaN'):
            y.backward()


def test_no_anomaly_check_outside_the_scope_and_finite_passes_go_through():
    x = xgrad.array(numpy.array([0.0, 4.0])).require_grad()
    y = _sqrt_of(x)
    with xgrad.detect_anomaly():
        pass
    y.backward()                                   # not checked: inf stored
    assert numpy.isinf(x.grad.to_numpy()[0])
    z = xgrad.array(numpy.array([1.0, 4.0])).require_grad()
    with xgrad.detect_anomaly():
        _sqrt_of(z).backward()
    assert_allclose(z.grad.to_numpy(), [0.5, 0.25])


def test_anomaly_of_an_op_recorded_outside_the_scope_says_no_stack():
    x = xgrad.array(numpy.array([0.0, 1.0])).require_grad()
    y = _sqrt_of(x)
    with xgrad.detect_anomaly():
        with pytest.raises(xgrad.AnomalyError, match='outside detect_anomaly'):
            y.backward()
