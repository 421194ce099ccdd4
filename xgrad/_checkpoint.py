"""``xgrad.checkpoint``: trade compute for memory (Chainer's ``F.forget``).

``checkpoint(fn, *args)`` runs ``fn`` without recording it, so none of its
intermediate arrays outlives the call, and grafts one op, ``checkpoint``,
from the array arguments to ``fn``'s outputs. When a backward pass reaches
that op it runs ``fn`` again on the (retained) arguments, on a private
backprop ID, and backpropagates the output gradients through the
recomputation on that ID. The private ID is newer (inner) than every graph
of the pass, so the recomputation and its backward pass are recorded on the
graph being backpropagated when it runs with ``enable_double_backprop=True``
and on every graph outer to it that the arguments live on: second and
higher derivatives, and gradients on several graphs, are those of ``fn``
itself.
"""

from typing import Any

from xgrad import _core
from xgrad._errors import GradientError
from xgrad._random_tape import RandomTape

__all__ = ['checkpoint']


def _fn_name(fn):
    return getattr(fn, '__name__', None) or type(fn).__name__


def _outputs(result, fn):
    if isinstance(result, _core.ndarray):
        return (result,), True
    if isinstance(result, (tuple, list)) and result:
        for j, y in enumerate(result):
            if not isinstance(y, _core.ndarray):
                raise TypeError('checkpoint: the output of fn ({}) must be an xgrad.ndarray '
                                'or a tuple/list of them, but its output {} is a {}'.format(
                                    _fn_name(fn), j, type(y).__name__))
        return tuple(result), False
    raise TypeError('checkpoint: the output of fn ({}) must be an xgrad.ndarray or a '
                    'non-empty tuple/list of them, not {}'.format(
                        _fn_name(fn), 'an empty ' + type(result).__name__
                        if isinstance(result, (tuple, list)) else
                        'a ' + type(result).__name__))


class _Checkpoint(_core.FunctionNode):
    """The grafted op: forward hands over the outputs ``fn`` computed,
    backward recomputes ``fn`` and backpropagates through it."""
    op_name = 'checkpoint'

    def __init__(self, fn, args, positions, raw_outputs, randomness):
        self.fn = fn
        self.args = args  # with None at the positions of array arguments
        self.positions = positions
        self.raw_outputs = raw_outputs
        self.randomness = randomness

    def forward(self, inputs):
        self.retain_inputs(tuple(range(len(inputs))))
        outputs, self.raw_outputs = self.raw_outputs, None
        return outputs

    def _call(self, arrays):
        args = list(self.args)
        for p, a in zip(self.positions, arrays):
            args[p] = a
        with self.randomness.replaying():
            return self.fn(*args)

    def backward(self, target_input_indexes, grad_outputs):
        xs = self.get_retained_inputs()
        context = xs[0].device.context
        bp = context.make_backprop_id('checkpoint')
        try:
            with _core.force_backprop_mode(bp):
                arrays = list(xs)
                targets = []
                for i in target_input_indexes:
                    v = xs[i].view()
                    v.require_grad(bp)
                    arrays[i] = v
                    targets.append(v)
                ys, _ = _outputs(self._call(arrays), self.fn)
                if len(ys) != len(grad_outputs):
                    raise GradientError(
                        'checkpoint: fn ({}) returned {} outputs when recomputed, {} when '
                        'first run'.format(_fn_name(self.fn), len(ys), len(grad_outputs)))
                pairs = [(y, g) for y, g in zip(ys, grad_outputs) if g is not None]
                if not pairs:
                    return (None,) * len(targets)
                gxs = _core.grad([y for y, _ in pairs], targets, bp,
                                 grad_outputs=[g for _, g in pairs])
        finally:
            context.release_backprop_id(bp)
        return tuple(gxs)


def checkpoint(fn, *args) -> Any:
    """``fn(*args)`` without keeping its intermediate arrays: they are
    recomputed when a backward pass needs them (Chainer's ``F.forget``,
    PyTorch's ``torch.utils.checkpoint``).

    fn: a function of ``args`` returning an xgrad array or a tuple/list of
        them. Gradients flow to the xgrad arrays among ``args`` only: an
        array that ``fn`` reaches otherwise (a parameter in a closure) and
        that is on a graph would lose its gradient, so that raises
        ``GradientError``; pass such arrays as arguments. Other arguments
        (numbers, flags) are passed through as they are.

    Returns what ``fn`` returns, each array an output of one recorded op
    named ``checkpoint``. Memory: only the array arguments (retained) and
    the outputs live on; during backward, one recomputation of ``fn`` at a
    time. Time: one more forward of ``fn`` per backward pass through it.

    Randomness: the recomputation sees the random numbers the first run
    saw (xgrad/_random_tape.py). ``dropout`` inside ``fn`` gets the same
    masks: while ``fn`` first runs, each dropout call notes the state of the
    generator it draws from (xgrad's own, or a ``numpy.random.Generator``/
    ``RandomState`` given as ``random_state``, however ``fn`` reaches it),
    a few hundred bytes, and the recomputation draws from copies of those
    states, in the same order (a GPU mask drawn by CuPy's generator is kept
    instead). ``xgrad.random`` on native devices (NumPy's global generator):
    its state before ``fn``'s first draw is noted, and set while ``fn`` is
    recomputed. The user's generators end as they were: a backward pass
    does not advance them. Not replayed: ``numpy.random`` called directly,
    ``xgrad.random`` on a GPU. ``fn`` must make the same dropout calls each
    time it runs (XgradError otherwise).

    Double backprop: the recomputation and its gradient are recorded on the
    graph being backpropagated when ``enable_double_backprop=True`` (and on
    outer graphs the arguments are on), so higher derivatives are those of
    ``fn``; the recorded recomputation then lives as long as the gradients
    that depend on it.

    Errors: ``fn`` returning something other than arrays is a TypeError
    naming fn's output. A failed call records nothing.
    """
    if not callable(fn):
        raise TypeError('checkpoint: fn must be callable, not {}'.format(type(fn).__name__))
    positions = [i for i, a in enumerate(args) if isinstance(a, _core.ndarray)]
    if not positions:
        raise TypeError('checkpoint: args hold no xgrad array (nothing to differentiate '
                        'with respect to); call fn directly')
    inputs = [args[p] for p in positions]
    stopped = list(args)
    for p in positions:
        stopped[p] = args[p].as_grad_stopped()
    randomness = RandomTape()
    with randomness.recording():
        result = fn(*stopped)
    ys, single = _outputs(result, fn)
    for j, y in enumerate(ys):
        if y.is_backprop_required(_core.anygraph):
            raise GradientError(
                'checkpoint: output {} of fn ({}) is on a graph ({}) through an array that '
                'is not among args (a parameter in a closure?): its gradient would be '
                'lost; pass every array fn differentiates as an argument'.format(
                    j, _fn_name(fn), ', '.join(repr(b) for b in y._backprop_ids())))
    raw = tuple(_core._raw_data(y) for y in ys)
    del result, ys, stopped
    held = list(args)
    for p in positions:
        held[p] = None
    node = _Checkpoint(fn, tuple(held), positions, raw, randomness)
    outs = node.apply(inputs)
    return outs[0] if single else outs
