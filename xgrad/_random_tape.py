"""The random numbers of a checkpointed function, replayed when it is
recomputed (``xgrad.checkpoint``).

While the function first runs, a tape is current in the thread and notes
how each random draw was made:

- ``dropout``: the state of the generator its mask is about to come from
  (xgrad's own, or the ``numpy.random.Generator``/``RandomState`` given as
  ``random_state``, however the function reaches it), a few hundred bytes
  (an int seed needs nothing); for a mask drawn on a GPU by CuPy's
  generator, the mask itself;
- ``xgrad.random`` on native devices (NumPy's global generator): the
  global state before the function's first such draw (taken only when the
  function draws: reading MT19937's state costs about 0.2 ms).

While it is recomputed, the k-th dropout call draws from a copy of the k-th
noted state, and NumPy's global generator is set to the noted state and
restored afterwards, so the recomputation sees the same numbers and the
user's generators end as they were. Draws made otherwise (``numpy.random``
called directly, ``xgrad.random`` on a GPU) are not replayed.
"""

import threading

import numpy

from xgrad._errors import XgradError

_local = threading.local()


def current():
    """The tape of the function running in this thread, or None."""
    return getattr(_local, 'tape', None)


class _Scope:
    __slots__ = ('tape', 'replay', 'outer')

    def __init__(self, tape, replay):
        self.tape = tape
        self.replay = replay

    def __enter__(self):
        self.outer = current()
        self.tape._begin(self.replay)
        _local.tape = self.tape
        return self.tape

    def __exit__(self, *exc):
        _local.tape = self.outer
        self.tape._end()


class RandomTape:
    """The random draws of one function: ``recording()`` while it first
    runs, ``replaying()`` (any number of times) while it is recomputed."""

    def __init__(self):
        self.entries = []  # per dropout call: (ratio, shape, how to redraw)
        self.numpy_state = None  # NumPy's global state before the first draw
        self._replay = None
        self._saved = None

    def recording(self):
        return _Scope(self, False)

    def replaying(self):
        return _Scope(self, True)

    def _begin(self, replay):
        self._replay = iter(self.entries) if replay else None
        self._saved = None

    def _end(self):
        if self._saved is not None:
            numpy.random.set_state(self._saved)
            self._saved = None
        self._replay = None

    # -- NumPy's global generator (xgrad.random on native devices) ----------

    def numpy_global(self):
        """Called before each draw from NumPy's global generator."""
        if self._replay is None:
            if self.numpy_state is None:
                self.numpy_state = numpy.random.get_state()
        elif self._saved is None and self.numpy_state is not None:
            self._saved = numpy.random.get_state()
            numpy.random.set_state(self.numpy_state)

    # -- dropout ----------------------------------------------------------

    def dropout(self, ratio, random_state, x, draw, mask_from, default_rng):
        """dropout's mask: ``draw(ratio, random_state, x)`` noted, or redrawn
        by ``mask_from(ratio, source, shape, dtype)`` from the noted state."""
        if self._replay is None:
            how = _how(random_state, x, default_rng)
            mask = draw(ratio, random_state, x)
            self.entries.append((ratio, x.shape, mask if how is None else how))
            return mask
        entry = next(self._replay, None)
        if entry is None or entry[0] != ratio or entry[1] != x.shape:
            raise XgradError(
                'checkpoint: the recomputation called dropout (ratio {}, shape {}) where '
                'the first run {}; a checkpointed function must make the same dropout '
                'calls every time it runs'.format(
                    ratio, x.shape, 'made no more dropout calls' if entry is None else
                    'called it with ratio {} on shape {}'.format(entry[0], entry[1])))
        how = entry[2]
        if not isinstance(how, tuple):  # a noted GPU mask
            return how
        kind, cls, value = how
        if kind == 'generator':
            bit_generator = cls()
            bit_generator.state = value
            source = numpy.random.Generator(bit_generator)
        elif kind == 'random_state':
            source = numpy.random.RandomState()
            source.set_state(value)
        else:  # an int seed (or whatever dropout makes of it)
            source = value
        return mask_from(ratio, source, x.shape, x.dtype)


def _how(random_state, x, default_rng):
    """How to redraw what ``random_state`` is about to draw; None: keep the
    mask (CuPy's generator on a GPU)."""
    if random_state is None and not x.device.is_native:
        return None
    if random_state is None:
        random_state = default_rng
    if isinstance(random_state, numpy.random.Generator):
        bit_generator = random_state.bit_generator
        return ('generator', type(bit_generator), bit_generator.state)
    if isinstance(random_state, numpy.random.RandomState):
        return ('random_state', None, random_state.get_state())
    return ('seed', None, random_state)
