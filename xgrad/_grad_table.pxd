# Accumulation during one backward pass (_grad_table.pyx).
cimport cython

from xgrad._graph cimport ArrayNode
from xgrad._array cimport ndarray


@cython.final
cdef class IndexedGradient:
    cdef readonly object key
    cdef readonly object value


@cython.final
cdef class _GradTable:
    cdef dict acc           # ArrayNode -> this pass's gradient
    # Nodes whose buffer in ``acc`` is ours to add into in place. Membership
    # counts only while the node is in ``acc``: every store sets or clears it,
    # and ``pop`` leaves it (a set's deletions leave dummies that make it
    # resize every few adds).
    cdef set owned

    cdef void _store(self, ArrayNode node, object g, bint owned)
    cdef void put(self, ArrayNode node, object g, bint owned)
    cdef object pop(self, ArrayNode node)
    cdef void _add_on_device(self, ArrayNode node, ndarray old, ndarray g) except *
    cdef void add_at(self, ArrayNode node, IndexedGradient g, object device) except *
    cdef void add(self, ArrayNode node, ndarray g, bint fresh) except *
