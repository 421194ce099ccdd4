# cython: language_level=3
"""The engine's debug checks: invariants the hot path relies on but cannot
afford to verify, verified while the checks are on (docs/architecture.md,
"Debug checks"). On when ``XGRAD_DEBUG`` is set to anything but ``0`` at
import, or by ``set_enabled(True)``; off (the default), each costs its call
site one C test of ``enabled``.

The one check so far: the ownership rule of the backward pass's raw
gradients (``_gradient_is_exclusively_ours`` in ``_backward.pyx``).
"""

import gc
import os

enabled = os.environ.get('XGRAD_DEBUG', '0') not in ('', '0')
cdef Py_ssize_t _asked = 0        # ownership questions checked
cdef Py_ssize_t _exclusive = 0    # of which, buffers taken as exclusive


def set_enabled(bint on):
    """Turn the debug checks on or off; returns the previous setting."""
    global enabled
    previous = enabled
    enabled = on
    return previous


def ownership_counts():
    """(questions, exclusive answers) of the ownership rule counted while
    the checks were on: what a test reads to see the rule at work."""
    return _asked, _exclusive


cpdef int check_gradient_ownership(object data, tuple grads, Py_ssize_t refs,
                                   Py_ssize_t ours) except -1:
    """The invariant of ``_gradient_is_exclusively_ours`` for a raw gradient
    ``data`` that an op's formula returned in ``grads``, seen with ``refs``
    references of which the backward pass counts ``ours`` as its own. An
    AssertionError when fewer than ``ours`` are there (the pass dropped one
    of its own: a shared buffer would pass as exclusive), or when a buffer
    taken as exclusive has a referrer known to the garbage collector other
    than ``grads``."""
    global _asked, _exclusive
    _asked += 1
    if refs < ours:
        raise AssertionError(
            'XGRAD_DEBUG: a raw gradient is held by {} references, fewer than the {} '
            'the backward pass counts as its own: a shared buffer would be taken '
            'as exclusive'.format(refs, ours))
    if refs == ours:
        others = [type(r).__name__ for r in gc.get_referrers(data) if r is not grads]
        if others:
            raise AssertionError('XGRAD_DEBUG: a raw gradient taken as exclusive is '
                                 'also held by {}'.format(', '.join(others)))
        _exclusive += 1
    return 0
