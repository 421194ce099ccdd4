"""Memory robustness: no reference cycles, graphs freed at once, long chains.

xgrad's graph objects (ndarray, ArrayNode, FunctionNode) are ``no_gc`` types:
the garbage collector cannot see them, so a reference cycle through them would
never be collected. The engine avoids cycles by design (see the ownership notes
at the top of xgrad/_graph.pyx); these tests hold it to that:

* a training step (forward, backward, double backprop) leaves nothing for the
  garbage collector, and every array and op it made is gone by reference
  counting alone when its last reference is dropped (checked with weakrefs,
  because ``gc.collect()`` returning 0 proves nothing about ``no_gc`` objects);
* dropping the last reference to an output frees its graph at once;
* a backward pass without double backprop releases the arrays the ops retained;
* chains of a million ops are built, backpropagated and freed without deep
  recursion (run in a child process with a small recursion limit and a small C
  stack, so that an overflow is a test failure, not a crashed pytest).
"""

import contextlib
import gc
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
import weakref

import numpy
import pytest

import xgrad


# ---------------------------------------------------------------------------
# Helpers

@contextlib.contextmanager
def _gc_disabled():
    """Collect what earlier code left, then keep the collector off."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Tracker:
    """Weak references to every array (and op) a step made."""

    def __init__(self):
        self.refs = []

    def __call__(self, obj):
        if obj is not None:
            self.refs.append((weakref.ref(obj), '{}#{}'.format(
                type(obj).__name__, len(self.refs))))
        return obj

    def alive(self):
        return [name for ref, name in self.refs if ref() is not None]


def _run_step_without_gc(step):
    """Run ``step(track)`` twice with the collector off, once plainly and once
    under DEBUG_SAVEALL. Returns (objects gc.collect() found, descriptions of
    what DEBUG_SAVEALL kept, names of tracked objects still alive)."""
    saved_garbage = gc.garbage[:]
    saved_flags = gc.get_debug()
    with _gc_disabled():
        try:
            track = _Tracker()
            step(track)
            alive = track.alive()           # before any collection
            collected = gc.collect()

            del gc.garbage[:]
            gc.set_debug(saved_flags | gc.DEBUG_SAVEALL)
            track2 = _Tracker()
            step(track2)
            alive += track2.alive()
            gc.collect()
            garbage = [type(o).__name__ for o in gc.garbage]
        finally:
            gc.set_debug(saved_flags)
            gc.garbage[:] = saved_garbage
    return collected, garbage, alive


def _assert_leaves_nothing(step):
    collected, garbage, alive = _run_step_without_gc(step)
    assert alive == [], (
        'still alive after the step (a no_gc cycle?): {}'.format(alive))
    assert collected == 0, 'gc.collect() found {} objects'.format(collected)
    assert garbage == [], 'gc.garbage under DEBUG_SAVEALL: {}'.format(
        garbage[:30])


def _rand(rng, *shape):
    return xgrad.array(rng.standard_normal(shape).astype(numpy.float32))


class Cube(xgrad.FunctionNode):
    """y = x ** 3 with a differentiable (double-backprop-able) backward."""

    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        return (x * x * x,)

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        gy, = grad_outputs
        return (3 * x * x * gy,)


class Scale(xgrad.FunctionNode):
    """y = x * 2, retaining its output (to exercise retained outputs)."""

    def forward(self, inputs):
        self.retain_outputs((0,))
        return (inputs[0] * 2,)

    def backward(self, target_input_indexes, grad_outputs):
        y, = self.get_retained_outputs()
        assert y is not None
        return (grad_outputs[0] * 2,)


def _mlp(rng, track, with_function_node=False):
    """A two-layer MLP loss plus a tanh chain; returns (loss, params, x)."""
    x = track(_rand(rng, 8, 16).require_grad())
    w1 = track(_rand(rng, 16, 32).require_grad())
    b1 = track(_rand(rng, 32).require_grad())
    w2 = track(_rand(rng, 32, 4).require_grad())
    h = track(xgrad.relu(track(track(x @ w1) + b1)))
    if with_function_node:
        op = track(Cube())
        h, = op.apply((h,))
        track(h)
        op = track(Scale())
        h, = op.apply((h,))
        track(h)
        del op
    z = track(h @ w2)
    for _ in range(5):
        z = track(xgrad.tanh(z))
    loss = track(xgrad.sum(z))
    return loss, (w1, b1, w2), x


def _track_grads(track, arrays):
    for a in arrays:
        track(a.grad)


# ---------------------------------------------------------------------------
# No reference cycles: a training step leaves nothing behind

STEP_KINDS = [
    'backward',
    'backward_retain_grad',
    pytest.param('double_backprop_only'),
    'double_backprop_then_backward_from_gradient',
    'double_backprop_cleargrad_then_backward_from_gradient',
    'double_backprop_retain_grad_then_backward_from_gradient',
    'double_backprop_twice_accumulating',
    'grad_without_double_backprop',
    'grad_penalty',
    'function_node_backward',
    'function_node_double_backprop',
    'function_node_grad_penalty',
]


@pytest.mark.parametrize('kind', STEP_KINDS)
def test_mlp_step_leaves_no_garbage(kind):
    rng = numpy.random.default_rng(0)

    def step(track):
        loss, params, x = _mlp(
            rng, track, with_function_node=kind.startswith('function_node'))
        if kind in ('backward', 'function_node_backward'):
            loss.backward()
            _track_grads(track, params + (x,))
        elif kind == 'double_backprop_only':
            # e.g. the gradients are used for something other than another
            # backward (a Hessian-vector product with xgrad.grad, logging...)
            loss.backward(enable_double_backprop=True)
            _track_grads(track, params + (x,))
            assert params[0].grad._is_chained()
        elif kind == 'double_backprop_retain_grad_then_backward_from_gradient':
            loss.backward(enable_double_backprop=True, retain_grad=True)
            _track_grads(track, params + (x,))
            gw1 = params[0].grad
            assert gw1._is_chained()
            track(xgrad.sum(gw1 * gw1)).backward()
            del gw1
        elif kind == 'backward_retain_grad':
            loss.backward(retain_grad=True)
            _track_grads(track, params + (x,))
        elif kind in ('double_backprop_then_backward_from_gradient',
                      'double_backprop_cleargrad_then_backward_from_gradient',
                      'function_node_double_backprop'):
            loss.backward(enable_double_backprop=True)
            gw1 = track(params[0].grad)
            assert gw1._is_chained()
            penalty = track(xgrad.sum(track(gw1 * gw1)))
            del gw1
            if 'cleargrad' in kind:
                for p in params + (x,):
                    p.cleargrad()
            penalty.backward()
            _track_grads(track, params + (x,))
        elif kind == 'double_backprop_twice_accumulating':
            loss.backward(enable_double_backprop=True)
            loss.backward(enable_double_backprop=True)
            _track_grads(track, params + (x,))
            gw2 = params[2].grad
            assert gw2._is_chained()
            track(xgrad.sum(gw2)).backward()
            del gw2
        elif kind == 'grad_without_double_backprop':
            grads = xgrad.grad([loss], list(params) + [x])
            for g in grads:
                track(g)
                assert not g.is_backprop_required()
        else:  # grad penalty: loss + |d loss / d x|^2, then backward
            gx, = xgrad.grad([loss], [x], enable_double_backprop=True)
            track(gx)
            assert gx._is_chained()
            total = track(loss + track(xgrad.sum(track(gx * gx))))
            del gx
            total.backward()
            _track_grads(track, params + (x,))
            del total
        if kind != 'grad_without_double_backprop':
            for p in params:
                assert p.grad is not None
        del loss, params, x

    _assert_leaves_nothing(step)


@pytest.mark.parametrize('double', [False, True])
def test_tanh_chain_step_leaves_no_garbage(double):
    rng = numpy.random.default_rng(1)

    def step(track):
        x = track(_rand(rng, 64).require_grad())
        y = x
        for _ in range(50):
            y = track(xgrad.tanh(y))
        loss = track(xgrad.sum(y))
        loss.backward(enable_double_backprop=double)
        gx = track(x.grad)
        assert gx.is_backprop_required() == double
        if double:
            x.cleargrad()
            track(xgrad.sum(gx)).backward()
            track(x.grad)

    _assert_leaves_nothing(step)


def test_two_graph_step_leaves_no_garbage():
    """Ops recorded on two graphs at once (nested backprop scopes)."""
    rng = numpy.random.default_rng(2)

    def step(track):
        with xgrad.backprop_scope('inner') as bp:
            x = track(_rand(rng, 4, 4).require_grad().require_grad(bp))
            w = track(_rand(rng, 4, 4).require_grad().require_grad(bp))
            y = track(xgrad.sum(track(xgrad.tanh(track(x @ w)))))
            y.backward(bp, enable_double_backprop=True)
            gx = track(x.get_grad(bp))
            track(xgrad.sum(track(gx * gx))).backward()
            track(w.grad)
            del gx

    _assert_leaves_nothing(step)


def test_user_made_cycle_through_set_grad_is_collectable():
    w = xgrad.array(numpy.ones((256, 256), numpy.float32)).require_grad()
    xgrad.sum(w * w).backward()
    w.set_grad(w.grad + w * 0.01)  # Multiply retains w: w -> grad -> op -> w
    w_ref = weakref.ref(w)
    data_ref = weakref.ref(w.to_numpy())
    del w
    gc.collect()
    assert w_ref() is None
    assert data_ref() is None


# ---------------------------------------------------------------------------
# Dropping the last reference to an output frees its graph at once

def test_dropping_output_frees_graph_at_once():
    rng = numpy.random.default_rng(3)
    with _gc_disabled():
        x = _rand(rng, 512, 256).require_grad()
        w = _rand(rng, 256, 256).require_grad()
        h1 = x @ w
        h2 = xgrad.relu(h1)
        cube = Cube()
        h3, = cube.apply((h2,))
        scale = Scale()
        h4, = scale.apply((h3,))
        h5 = h4 * h4
        y = xgrad.sum(xgrad.tanh(h5))
        arrays = [h1, h2, h3, h4, h5]
        refs = [weakref.ref(a) for a in arrays]
        data_refs = [weakref.ref(a.to_numpy()) for a in arrays]
        op_refs = [weakref.ref(cube), weakref.ref(scale)]
        del arrays, h1, h2, h3, h4, h5, cube, scale
        # The graph keeps the ops, and the data they retained, alive: h2 is
        # Cube's retained input, h4 the multiply's. The array objects go (an
        # op keeps data, never arrays, so it cannot close a cycle).
        assert all(r() is not None for r in op_refs)
        assert data_refs[1]() is not None and data_refs[3]() is not None
        assert refs[1]() is None and refs[3]() is None
        del y
        # ... and dropping the output frees all of it, without the collector.
        assert [r() for r in op_refs] == [None, None]
        assert [r() for r in refs] == [None] * 5
        assert [r() for r in data_refs] == [None] * 5
        # The leaves are untouched and still usable.
        assert x.shape == (512, 256) and w.shape == (256, 256)


def test_dropping_output_frees_memory_at_once():
    """The same, measured by the bytes NumPy allocated (tracemalloc)."""
    rng = numpy.random.default_rng(4)
    with _gc_disabled():
        x = _rand(rng, 1024, 1024).require_grad()      # 4 MiB
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            y = x
            for _ in range(6):
                y = xgrad.tanh(y * 1.5)                 # retains 4 MiB per op
            loss = xgrad.sum(y)
            del y
            held = tracemalloc.get_traced_memory()[0] - base
            del loss
            left = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
    assert held > 6 * 4 * 2 ** 20
    assert left < 2 ** 20, 'still allocated after del: {} bytes'.format(left)


def test_dropping_output_of_function_node_chain_frees_ops():
    with _gc_disabled():
        x = xgrad.array(numpy.full((1000,), 0.5, numpy.float32)).require_grad()
        y = x
        op_refs = []
        array_refs = []
        for i in range(20):
            op = Cube() if i % 2 == 0 else Scale()
            y, = op.apply((y,))
            op_refs.append(weakref.ref(op))
            array_refs.append(weakref.ref(y))
            del op
        assert all(r() is not None for r in op_refs)
        del y
        assert all(r() is None for r in op_refs)
        assert all(r() is None for r in array_refs)


# ---------------------------------------------------------------------------
# Retained arrays are released by a backward pass without double backprop

def _retaining_graph(rng):
    """x -> h = tanh(x) (dropped by the user; retained by the multiply and by
    Cube) -> y = sum(h * h) + sum(Cube(h))."""
    x = _rand(rng, 1000, 100).require_grad()
    h = xgrad.tanh(x)
    cube = Cube()
    c, = cube.apply((h,))
    y = xgrad.sum(h * h) + xgrad.sum(c)
    refs = {'h': weakref.ref(h), 'h.data': weakref.ref(h.to_numpy()),
            'c': weakref.ref(c), 'cube': weakref.ref(cube)}
    return x, y, refs


def _alive(refs):
    return sorted(k for k, r in refs.items() if r() is not None)


def test_backward_releases_retained_arrays():
    rng = numpy.random.default_rng(5)
    with _gc_disabled():
        x, y, refs = _retaining_graph(rng)
        assert _alive(refs) == ['cube', 'h.data']
        y.backward()
        # The retained h (and its data) die right after backward, while the
        # output y is still alive; so does the op that retained them.
        assert _alive(refs) == []
        hx = numpy.tanh(x.to_numpy())
        assert y.item() == pytest.approx(float(numpy.sum(hx * hx + hx ** 3)),
                                         rel=1e-4)
        numpy.testing.assert_allclose(
            x.grad.to_numpy(), (2 * hx + 3 * hx ** 2) * (1 - hx ** 2),
            rtol=1e-4, atol=1e-5)


def test_grad_without_double_backprop_releases_retained_arrays():
    rng = numpy.random.default_rng(6)
    with _gc_disabled():
        x, y, refs = _retaining_graph(rng)
        gx, = xgrad.grad([y], [x])
        assert _alive(refs) == []
        hx = numpy.tanh(x.to_numpy())
        numpy.testing.assert_allclose(
            gx.to_numpy(), (2 * hx + 3 * hx ** 2) * (1 - hx ** 2),
            rtol=1e-4, atol=1e-5)


def test_double_backprop_keeps_retained_arrays_until_outputs_are_dropped():
    rng = numpy.random.default_rng(7)
    with _gc_disabled():
        x, y, refs = _retaining_graph(rng)
        y.backward(enable_double_backprop=True)
        assert _alive(refs) == ['cube', 'h.data']
        gx = x.grad
        assert gx._is_chained()
        del y
        # The output is gone; the gradient's graph may still need h's data
        # (it holds views of it), but not the forward arrays or ops.
        assert _alive(refs) in (['h.data'], [])
        x.cleargrad()
        del gx
        assert _alive(refs) == []


def test_grad_with_double_backprop_keeps_retained_arrays_until_dropped():
    rng = numpy.random.default_rng(8)
    with _gc_disabled():
        x, y, refs = _retaining_graph(rng)
        gx, = xgrad.grad([y], [x], enable_double_backprop=True)
        assert _alive(refs) == ['cube', 'h.data']
        penalty = xgrad.sum(gx * gx)
        penalty.backward()
        # The penalty's backward had no double backprop: it released what
        # it went through, but y's own graph is still alive.
        assert 'cube' in _alive(refs)
        del y, gx, penalty
        x.cleargrad()
        assert _alive(refs) == []


# ---------------------------------------------------------------------------
# Million-op chains, in a child process with a small C stack

CHAIN_SCRIPT = r'''
import json, sys, time, weakref
import numpy
import xgrad

n, kind, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.setrecursionlimit(200)
C = 1.0000001   # not exactly 1: the gradient shows every step was taken


class Scale(xgrad.FunctionNode):
    def forward(self, inputs):
        self.retain_inputs((0,))
        return (inputs[0] * numpy.float32(C),)

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        assert x.shape == (1,)
        return (grad_outputs[0] * C,)


x = xgrad.array(numpy.full((1,), 0.5, numpy.float32)).require_grad()
times = {}
t = time.perf_counter()
if kind == 'mul':                  # Multiply retains its input array
    y = x * C
    first = weakref.ref(y)
    for _ in range(n - 1):
        y = y * C
elif kind == 'mul_add':            # alternate retaining and non-retaining ops
    y = x * C
    first = weakref.ref(y)
    for i in range(n - 1):
        y = y + 0.0 if i % 2 == 0 else y * C
elif kind == 'add':
    y = x + 0.0
    first = weakref.ref(y)
    for _ in range(n - 1):
        y = y + 0.0
elif kind == 'function_node':
    op = Scale()
    y, = op.apply((x,))
    first = weakref.ref(y)
    first_op = weakref.ref(op)
    del op
    for _ in range(n - 1):
        y, = Scale().apply((y,))
elif kind == 'tanh':
    y = xgrad.tanh(x)
    first = weakref.ref(y)
    for _ in range(n - 1):
        y = xgrad.tanh(y)
times['forward'] = time.perf_counter() - t
result = {'value': float(y.item())}

t = time.perf_counter()
if mode == 'backward':
    y.backward()
    result['grad'] = float(x.grad.item())
elif mode == 'double':             # keep the graph, make a graph of the grad
    y.backward(enable_double_backprop=True)
    g = x.grad
    result['grad'] = float(g.item())
    result['grad_chained'] = g._is_chained()
    del g
times['backward'] = time.perf_counter() - t

t = time.perf_counter()
del y
x.cleargrad()
times['free'] = time.perf_counter() - t
result['first_alive'] = first() is not None
if kind == 'function_node':
    result['first_op_alive'] = first_op() is not None
result['times'] = times
print(json.dumps(result))
'''

STACK_LIMIT = 1024 * 1024     # 1 MiB of C stack (the default is 8 MiB)


def _small_stack():
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    limit = STACK_LIMIT
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_STACK, (limit, hard))


def _run_chain(n, kind, mode, timeout=300):
    root = os.path.dirname(os.path.dirname(os.path.abspath(xgrad.__file__)))
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        [root] + [p for p in [env.get('PYTHONPATH')] if p])
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, '-X', 'faulthandler', '-c', CHAIN_SCRIPT,
         str(n), kind, mode],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=root,
        preexec_fn=_small_stack)
    wall = time.perf_counter() - start
    if proc.returncode < 0:
        pytest.fail('the child crashed with signal {} (C stack overflow?)\n{}'
                    .format(-proc.returncode, proc.stderr[-3000:]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result['times']['wall'] = wall
    print('{} x {} ({}): {}'.format(n, kind, mode, {
        k: round(v, 2) for k, v in result['times'].items()}))
    return result


def _expected_product(n, start=0.5):
    """start * C**n as float32 multiplies it, one step at a time."""
    factors = numpy.full(n, 1.0000001, numpy.float32)
    return float(start * numpy.multiply.accumulate(factors)[-1])


MILLION = 1000000


def test_million_op_chain_forward_backward_free(record_property):
    result = _run_chain(MILLION, 'mul', 'backward')
    record_property('times', result['times'])
    expected = _expected_product(MILLION, start=1.0)
    assert expected > 1.1                       # the chain is not trivial
    assert result['grad'] == pytest.approx(expected, rel=1e-4)
    assert result['value'] == pytest.approx(0.5 * expected, rel=1e-4)
    assert not result['first_alive']


def test_million_op_chain_freed_without_backward(record_property):
    result = _run_chain(MILLION, 'mul_add', 'none')
    record_property('times', result['times'])
    assert result['value'] == pytest.approx(
        _expected_product(MILLION // 2), rel=1e-4)
    assert not result['first_alive']


def test_million_op_add_chain_forward_backward_free(record_property):
    result = _run_chain(MILLION, 'add', 'backward')
    record_property('times', result['times'])
    assert result['grad'] == 1.0
    assert result['value'] == 0.5
    assert not result['first_alive']


# A Python FunctionNode subclass: a million ops built and freed; 200k ops
# backpropagated (each backward step runs Python code: 1M would take ~15 s).
@pytest.mark.parametrize('n,mode', [(200000, 'backward'), (MILLION, 'none')])
def test_function_node_chain(n, mode, record_property):
    result = _run_chain(n, 'function_node', mode)
    record_property('times', result['times'])
    expected = _expected_product(n, start=1.0)
    assert result['value'] == pytest.approx(0.5 * expected, rel=1e-4)
    if mode == 'backward':
        assert result['grad'] == pytest.approx(expected, rel=1e-4)
    assert not result['first_alive']
    assert not result['first_op_alive']


def test_double_backprop_chain_freed(record_property):
    """A long chain kept for double backprop, plus its gradient's graph (as
    long again), freed when the output and the gradient are dropped."""
    n = 100000
    result = _run_chain(n, 'tanh', 'double')
    record_property('times', result['times'])
    assert result['grad_chained']
    y, g = 0.5, 1.0
    for _ in range(n):
        y = numpy.tanh(numpy.float32(y))
        g *= 1.0 - float(y) ** 2
    assert result['value'] == pytest.approx(float(y), rel=1e-3)
    assert result['grad'] == pytest.approx(g, rel=1e-2)
    assert not result['first_alive']
