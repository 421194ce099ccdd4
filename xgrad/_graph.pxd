# The graph's vertices (_graph.pyx): array nodes, op nodes, and what the rest
# of the engine and the ops ask of them.
from cpython.mem cimport PyMem_Calloc
from cpython.ref cimport PyObject
cimport cython
cimport numpy as cnp

from xgrad._context cimport BackpropId


@cython.final
cdef class ArrayNode:
    cdef readonly BackpropId backprop_id
    cdef OpNode creator
    cdef PyObject* _array
    cdef Py_ssize_t rank
    cdef int graph_index
    cdef int out_index
    cdef bint grad_required
    cdef object shape
    cdef object dtype
    cdef object device
    cdef NodeHooks hooks   # None unless a hook was registered on this node


@cython.final
cdef class NodeHooks:
    cdef list grad   # HookHandles of gradient hooks
    cdef list post   # HookHandles of post-accumulate hooks
    cdef object __weakref__


@cython.no_gc
cdef class OpNode:
    cdef tuple _graphs
    cdef Py_ssize_t _n_graphs
    # The edge block (alloc_edges lays it out; read and write its edges
    # with in_edge/out_edge/set_in_edge/set_out_edge below):
    cdef char* _block
    cdef PyObject** _out_nodes     # n_graphs * n_out output nodes (borrowed)
    cdef PyObject** _in_nodes      # n_graphs * n_in input nodes (owned)
    cdef Py_ssize_t* _ranks        # the op's rank on each graph
    cdef unsigned char* _chained   # whether graph k still needs its edges
    cdef Py_ssize_t _n_in
    cdef Py_ssize_t _n_out
    cdef object _device
    cdef tuple _retained_in_data
    cdef tuple _retained_out_data
    cdef object _forward_stack   # detect_anomaly(): where forward was called

    cdef ArrayNode _any_input_node(self, Py_ssize_t i)
    cdef int _graph_index(self, BackpropId bp)
    cdef ArrayNode _input_node(self, Py_ssize_t k, Py_ssize_t i)
    cdef void _unchain_graph(self, int k)


cdef object add_hook(ArrayNode node, object hook, bint post, BackpropId bp)

# Gradient hooks registered on leaves and not removed (all threads): while 0,
# a backward pass skips counting the consumers of hooked leaves.
cdef Py_ssize_t _leaf_grad_hooks
cdef void print_graph(ArrayNode node, BackpropId bp) except *


cdef inline bint shape_is(cnp.ndarray arr, tuple shape):
    """Whether ``arr``'s shape is ``shape`` (a tuple of ints), without
    building its shape tuple."""
    cdef Py_ssize_t i, nd = cnp.PyArray_NDIM(arr)
    if nd != len(shape):
        return False
    for i in range(nd):
        if cnp.PyArray_DIM(arr, i) != <Py_ssize_t>shape[i]:
            return False
    return True


cdef inline bint raw_meta_matches(object data, ArrayNode node):
    """Whether ``data`` is a NumPy array with the node's dtype and shape, read
    at C level; False for anything else, which the caller checks the slow way."""
    if not cnp.PyArray_CheckExact(data):
        return False
    if (<object>cnp.PyArray_DESCR(<cnp.ndarray>data) is not node.dtype
            and data.dtype != node.dtype):
        return False
    return shape_is(<cnp.ndarray>data, <tuple>node.shape)


# ---------------------------------------------------------------------------
# The edge block of an op node: one C allocation per recorded op holding, for
# each of its n_graphs graphs k, the input-node pointers (owned references),
# the output-node pointers (borrowed: an output node clears its own entry
# when it dies), a rank and a chained flag. Edge (k, i) lives at
# k * n + i of its array; these accessors are the only code that computes
# that position. Inline, so that every module that cimports them indexes
# the block directly, as a hand-written ``k * n_in + i`` did.
# ---------------------------------------------------------------------------

cdef inline int alloc_edges(OpNode op, tuple graphs, Py_ssize_t n_in,
                            Py_ssize_t n_out) except -1:
    """Give ``op`` a zeroed edge block for ``graphs``, ``n_in`` inputs and
    ``n_out`` outputs: out-node pointers, in-node pointers, ranks, chained
    flags, in that order (``OpNode.__dealloc__`` frees it)."""
    cdef Py_ssize_t n_graphs = len(graphs)
    cdef char* block = <char*>PyMem_Calloc(
        1, n_graphs * ((n_in + n_out) * sizeof(PyObject*) + sizeof(Py_ssize_t) + 1))
    if block == NULL:
        raise MemoryError()
    op._block = block
    op._out_nodes = <PyObject**>block
    op._in_nodes = op._out_nodes + n_graphs * n_out
    op._ranks = <Py_ssize_t*>(op._in_nodes + n_graphs * n_in)
    op._chained = <unsigned char*>(op._ranks + n_graphs)
    op._n_graphs = n_graphs
    op._n_in = n_in
    op._n_out = n_out
    op._graphs = graphs
    return 0


cdef inline PyObject* in_edge(OpNode op, Py_ssize_t k, Py_ssize_t i) noexcept:
    """Input ``i``'s node on graph ``k`` (NULL: no node there, or unchained)."""
    return op._in_nodes[k * op._n_in + i]


cdef inline void set_in_edge(OpNode op, Py_ssize_t k, Py_ssize_t i,
                             PyObject* node) noexcept:
    """Store input ``i``'s node on graph ``k``; the block owns the reference
    the caller hands over (or gives one up: the caller takes it when it
    clears an edge)."""
    op._in_nodes[k * op._n_in + i] = node


cdef inline PyObject* out_edge(OpNode op, Py_ssize_t k, Py_ssize_t j) noexcept:
    """Output ``j``'s node on graph ``k`` (NULL: none, or it died)."""
    return op._out_nodes[k * op._n_out + j]


cdef inline void set_out_edge(OpNode op, Py_ssize_t k, Py_ssize_t j,
                              PyObject* node) noexcept:
    """Point output ``j``'s edge on graph ``k`` at ``node`` (borrowed)."""
    op._out_nodes[k * op._n_out + j] = node
