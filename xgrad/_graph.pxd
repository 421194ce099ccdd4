# The graph's vertices (_graph.pyx): array nodes, op nodes, and what the rest
# of the engine and the ops ask of them.
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
    cdef char* _block
    cdef PyObject** _out_nodes
    cdef PyObject** _in_nodes
    cdef Py_ssize_t* _ranks
    cdef unsigned char* _chained
    cdef Py_ssize_t _n_in
    cdef Py_ssize_t _n_out
    cdef object _device
    cdef tuple _retained_in_data
    cdef tuple _retained_out_data

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
