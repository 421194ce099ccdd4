# The graph engine's typed declarations, shared with the op modules.
from cpython.ref cimport PyObject


cdef class Context:
    cdef public object _backends
    cdef public object _devices
    cdef Py_ssize_t _next_ordinal
    cdef dict _alive_ids
    cdef set _connections
    cdef dict _prohibited_by
    cdef readonly BackpropId _default_id

    cdef void _connect(self, BackpropId a, BackpropId b)
    cdef list _inner_connected(self, BackpropId bp)
    cdef void _check_backprop_allowed(self, BackpropId bp) except *


cdef class BackpropId:
    cdef readonly Context context
    cdef readonly Py_ssize_t ordinal
    cdef str _name
    cdef bint _released
    cdef tuple _solo

    cdef Py_ssize_t _ordinal_against(self, other) except? -1


cdef class IndexedGradient:
    cdef readonly object key
    cdef readonly object value


cdef class ArrayNode:
    cdef readonly BackpropId backprop_id
    cdef FunctionNode creator
    cdef PyObject* _array
    cdef Py_ssize_t rank
    cdef int graph_index
    cdef int out_index
    cdef bint grad_required
    cdef object shape
    cdef object dtype
    cdef object device



cdef class ndarray:
    cdef object _data
    cdef object _device
    cdef tuple _nodes
    cdef list _grads
    cdef object __weakref__

    cdef ArrayNode _node_on(self, BackpropId bp)
    cdef void _prune_released(self)
    cdef Py_ssize_t _slot_of(self, ArrayNode node)
    cdef ArrayNode _add_node(self, BackpropId bp, FunctionNode creator,
                             Py_ssize_t rank, int graph_index, int out_index,
                             ArrayNode like=*)
    cdef bint _has_enabled_node(self)
    cdef void _attach(self, ArrayNode node)
    cdef void _adopt(self, ArrayNode node)
    cdef object _grad_of(self, ArrayNode node)
    cdef void _set_grad_of(self, ArrayNode node, object grad)
    cdef BackpropId _valid_bp(self, backprop_id)
    cdef ArrayNode _constant_check(self, BackpropId bp)
    cdef void _check_inplace(self, other) except *
    cdef void _check_writable(self) except *
    cdef object _inplace(self, other, op)


cdef class FunctionNode:
    cdef tuple _graphs
    cdef Py_ssize_t _n_graphs
    cdef char* _block
    cdef PyObject** _out_nodes
    cdef PyObject** _in_nodes
    cdef Py_ssize_t* _ranks
    cdef unsigned char* _chained
    cdef Py_ssize_t _n_in
    cdef Py_ssize_t _n_out
    cdef bint _applied
    cdef tuple _retain_in_idx
    cdef tuple _retain_out_idx
    cdef tuple _retained_in_data
    cdef tuple _retained_out_data
    cdef tuple _out_dtypes
    cdef object _device
    cdef tuple _bw_inputs
    cdef tuple _bw_outputs

    cpdef forward(self, inputs)
    cpdef backward(self, target_input_indexes, grad_outputs)
    cdef object _backward_raw(self, tuple targets, tuple grad_outputs, tuple xs, tuple ys)
    cdef object _forward1(self, object x)
    cdef object _forward2(self, object a, object b)
    cdef ArrayNode _any_input_node(self, Py_ssize_t i)
    cdef int _graph_index(self, BackpropId bp)
    cdef ArrayNode _input_node(self, Py_ssize_t k, Py_ssize_t i)
    cdef void _unchain_graph(self, int k)
    cdef bint _formula_only(self)


cdef ndarray _wrap(object data, object device)
cpdef tuple apply(FunctionNode fn, inputs)
cpdef ndarray apply_to_device(FunctionNode fn, ndarray x, object device)
cdef ndarray apply1(FunctionNode fn, ndarray x)
cdef ndarray apply2(FunctionNode fn, ndarray a, ndarray b)
cdef bint is_enabled(BackpropId bp)
cdef bint raw_meta_matches(object data, ArrayNode node)
cdef object device_ns(object device)
