# cython: language_level=3
"""Accumulation during one backward pass: ``_GradTable`` holds the gradient
that flowed into each node in this pass, and nothing else (dropping it is
the rollback); ``IndexedGradient`` is the sparse gradient a slice's raw
backward returns, added in place at its key.
"""

cimport cython
from cpython.ref cimport PyObject
from cpython.dict cimport PyDict_GetItem
cimport numpy as cnp

from xgrad._backend cimport native_kernels
from xgrad._context cimport _is_native
from xgrad._graph cimport ArrayNode
from xgrad._array cimport _OPS, ndarray, _wrap, _as_raw_array

import numpy

cnp.import_array()   # the inline checks of _array.pxd use NumPy's C API

cdef class IndexedGradient:
    """A raw-path gradient that is zero except ``value`` at ``key``: what a
    slice's backward returns instead of a full array of zeros. The pass adds
    ``value`` into the input's accumulated gradient at ``key``, in place when
    the buffer is its own, so T slices of one array (an RNN's per-step
    inputs) cost T slice-sized adds, not T full-size arrays. ``key`` must be
    a basic index (ints, slices, None, Ellipsis: no element twice)."""

    def __cinit__(self, key, value):
        self.key = key
        self.value = value


cdef class _GradTable:
    """Accumulation: the gradient that flowed into each node during one pass
    (scaled by the loss scale), and nothing else. Gradient slots of arrays are
    neither read nor written here, so dropping the table undoes it."""

    def __cinit__(self):
        self.acc = {}
        self.owned = set()

    cdef void _store(self, ArrayNode node, object g, bint owned):
        self.acc[node] = g
        if owned:
            self.owned.add(node)
        elif self.owned:
            self.owned.discard(node)

    cdef void put(self, ArrayNode node, object g, bint owned):
        self._store(node, g, owned)

    cdef object pop(self, ArrayNode node):
        """The node's gradient, removed from the table; None if none flowed in."""
        return self.acc.pop(node, None)

    cdef void _add_on_device(self, ArrayNode node, ndarray old, ndarray g) except *:
        """``add`` on a GPU: in place into a buffer this pass owns (one
        kernel), else one kernel into a new buffer the pass then owns."""
        ns = old._device.ns
        with old._device.scope():
            if (node in self.owned and old._data.shape == g._data.shape
                    and old._data.dtype == g._data.dtype and old._data.flags.c_contiguous):
                ns.accumulate(old._data, g._data)
                return
            total = ns.add(old._data, g._data)
        self._store(node, _wrap(total, old._device), True)

    cdef void add_at(self, ArrayNode node, IndexedGradient g, object device) except *:
        """Add ``g`` (zero but at its key) to the node's gradient: in place
        into a buffer this pass owns, else into a fresh buffer of zeros."""
        cdef ndarray old
        cdef PyObject* p = PyDict_GetItem(self.acc, node)
        if p != NULL:
            old = <ndarray>p
            if old._nodes is None and node in self.owned:
                old._data[g.key] += g.value
                return
        full = numpy.zeros(node.shape, node.dtype)
        full[g.key] = g.value
        self.add(node, _wrap(full, device), True)

    cdef void add(self, ArrayNode node, ndarray g, bint fresh) except *:
        """Add ``g`` to the node's gradient; in place into a buffer this pass
        owns (``fresh``: ``g`` is one) when no graph records the sum."""
        cdef ndarray old
        cdef PyObject* p = PyDict_GetItem(self.acc, node)
        if p == NULL:
            self._store(node, g, fresh and g._nodes is None)
            return
        old = <ndarray>p
        if old._nodes is None and g._nodes is None:
            if not _is_native(old._device):
                self._add_on_device(node, old, g)
                return
            if node in self.owned and native_kernels.add_into(old._data, g._data):
                return
            if fresh and native_kernels.add_into(g._data, old._data):
                self._store(node, g, True)
                return
            self._store(node, _wrap(_as_raw_array(native_kernels.add(old._data, g._data)),
                                    old._device), True)
        else:
            self._store(node, _OPS.add(old, g), False)
