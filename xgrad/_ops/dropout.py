"""Dropout: zero each element with probability ``ratio`` and scale the rest
by 1 / (1 - ratio), so the expected value is unchanged.

ChainerX has no dropout; this follows Chainer's ``dropout(x, ratio=.5)``
(training behaviour: call it only while training) and takes the random
source explicitly. The mask is drawn once, in the forward; the op is linear
in ``x`` given the mask, so every gradient (first, second, ...) is the
incoming gradient times the same mask.
"""

import numpy

from xgrad._backend import cuda
from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops.registry import OpInfo, Sample, real, register
from xgrad import _random_tape

__all__ = ['dropout']

# The random source of calls that pass none (on the host; each GPU has one
# of CuPy's, made on first use).
_default_rng = numpy.random.default_rng()
_device_rngs = {}


def _device_mask(ratio, x):
    """The mask of a GPU array drawn by its GPU's generator (nothing is
    drawn on the host nor uploaded)."""
    index = x.device.index
    with _args.scope(x):
        rng = _device_rngs.get(index)
        if rng is None:
            rng = _device_rngs[index] = cuda.cupy().random.default_rng()
        keep = rng.random(x.shape, dtype=numpy.float32) >= ratio
        return keep.astype(x.dtype) * x.dtype.type(1 / (1 - ratio))


def _uniform(random_state, shape):
    """Uniform [0, 1) float32 draws from ``random_state``: a
    numpy.random.Generator or RandomState, an int seed, or None (this
    module's Generator)."""
    if random_state is None:
        random_state = _default_rng
    elif _args.is_int(random_state):
        random_state = numpy.random.default_rng(int(random_state))
    if isinstance(random_state, numpy.random.Generator):
        return random_state.random(shape, dtype=numpy.float32)
    if isinstance(random_state, numpy.random.RandomState):
        return random_state.random_sample(shape).astype(numpy.float32)
    raise TypeError('dropout: random_state must be a numpy.random.Generator, a '
                    'numpy.random.RandomState, an int seed or None, not {}'.format(
                        type(random_state).__name__))


def _draw(ratio, random_state, x):
    if random_state is None and not x.device.is_native:
        return _device_mask(ratio, x)
    # seeded: the same mask as on the host
    return _mask(ratio, random_state, x.shape, x.dtype)


def _mask(ratio, random_state, shape, dtype):
    """1 / (1 - ratio) where the element is kept, 0 where it is dropped."""
    keep = numpy.asarray(_uniform(random_state, shape) >= ratio)
    return keep * dtype.type(1 / (1 - ratio))


class Dropout(PyOp):
    """y = x * mask; gx = gy * mask."""
    op_name = 'dropout'

    def __init__(self, mask):
        self.mask = mask  # raw, x's dtype

    def forward(self, inputs):
        self.mask = _args.on_device_of(inputs[0], self.mask)  # drawn on the host
        return (_args.array_result(inputs[0] * self.mask),)

    def grads(self, xp, targets, gys, xs, ys):
        return (gys[0] * xp.constant(self.mask, gys[0]),)


def dropout(x, ratio=0.5, random_state=None):
    """``x`` with each element zeroed with probability ``ratio`` (0 <= ratio
    < 1) and the others multiplied by 1 / (1 - ratio). ``random_state``:
    a numpy.random.Generator or RandomState, an int seed (the same seed gives
    the same mask on every device), or None for xgrad's own generator (on a
    GPU: CuPy's, drawing the mask there). Float arrays only."""
    op = 'dropout'
    x = _args.as_array(x, 'x')
    _args.require_float(x, op, 'x')
    if not _args.is_scalar(ratio) or isinstance(ratio, bool):
        raise TypeError('{}: ratio must be a number, not {}'.format(op, type(ratio).__name__))
    if not 0 <= ratio < 1:
        raise ValueError('{}: ratio must be in [0, 1), not {}'.format(op, ratio))
    tape = _random_tape.current()
    if tape is None:
        mask = _draw(float(ratio), random_state, x)
    else:  # in a checkpointed function: noted, or replayed
        mask = tape.dropout(float(ratio), random_state, x, _draw, _mask, _default_rng)
    return _args.apply(Dropout(mask), x)


# ---------------------------------------------------------------------------
# Registry: an int seed makes the mask reproducible, so the reference draws
# the same one.

def _dropout_ref(x, ratio=0.5, random_state=None):
    u = numpy.random.default_rng(random_state).random(x.shape, dtype=numpy.float32)
    return numpy.where(u >= ratio, x / x.dtype.type(1 - ratio), x.dtype.type(0))


register(OpInfo(
    'dropout', dropout, ref=_dropout_ref, domain=real,
    samples=[Sample((3, 4), random_state=0), Sample((2, 3), ratio=0.25, random_state=1),
             Sample((5,), ratio=0.0, random_state=2), Sample((), random_state=3),
             Sample((0, 3), random_state=4)]))
