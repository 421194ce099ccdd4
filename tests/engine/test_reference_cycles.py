"""Reference cycles that users make through arrays, nodes and function
nodes are freed by the garbage collector (L1), and a collection in the middle
of graph work does not break the graph."""

import gc
import weakref

import numpy
import pytest

import xgrad


def _leaf():
    return xgrad.array(numpy.ones((3,), numpy.float32)).require_grad()


def _collected(make):
    """Run ``make`` (returns objects to watch), drop them, collect."""
    refs = [weakref.ref(o) for o in make()]
    gc.collect()
    return [r() is None for r in refs]


def test_array_that_is_its_own_gradient_is_freed():
    def make():
        a = _leaf()
        a.set_grad(a)
        return [a]
    assert _collected(make) == [True]


class KeepsOutput(xgrad.FunctionNode):
    """Stores its output on itself, as users do for later inspection."""

    def forward(self, inputs):
        return inputs[0] * 2,

    def backward(self, target_input_indexes, grad_outputs):
        return grad_outputs[0] * 2,


@pytest.mark.parametrize('backprop', [False, True])
def test_function_node_holding_its_output_is_freed(backprop):
    def make():
        x = _leaf()
        fn = KeepsOutput()
        y, = fn.apply((x,))
        fn.out = y
        if backprop:
            xgrad.sum(y * y).backward(enable_double_backprop=True)
        return [y, fn]
    assert _collected(make) == [True, True]


def test_cycles_do_not_leak_over_iterations():
    def step():
        x = _leaf()
        fn = KeepsOutput()
        y, = fn.apply((x,))
        fn.out = y
        a = _leaf()
        a.set_grad(a)
    for _ in range(5):
        step()
    gc.collect()
    before = xgrad._core._live_array_count()
    for _ in range(200):
        step()
    gc.collect()
    assert xgrad._core._live_array_count() - before <= 2


def test_collection_during_a_graph_keeps_it_intact():
    x = _leaf()
    h = xgrad.tanh(x)
    fn = KeepsOutput()
    y, = fn.apply((h,))
    fn.out = y
    del fn
    gc.collect()
    xgrad.sum(y).backward()
    t = numpy.tanh(1.0)
    numpy.testing.assert_allclose(x.grad.to_numpy(), [2 * (1 - t * t)] * 3, rtol=1e-6)
