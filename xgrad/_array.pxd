# ndarray and the helpers the engine and the ops share (_array.pyx).
cimport numpy as cnp

from xgrad._context cimport BackpropId, Context
from xgrad._graph cimport ArrayNode, OpNode


cdef object _OPS   # the op library (xgrad._ops), installed by it


cdef class ndarray:
    cdef object _data
    cdef object _device
    cdef tuple _nodes
    cdef list _grads
    cdef object __weakref__

    cdef ArrayNode _node_on(self, BackpropId bp)
    cdef void _prune_released(self)
    cdef Py_ssize_t _slot_of(self, ArrayNode node)
    cdef ArrayNode _add_node(self, BackpropId bp, OpNode creator,
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


cdef ndarray _wrap(object data, object device)
cdef object _scalar_as_array(object g)


cdef inline Context _context_of(ndarray a):
    return <Context>a._device.context


cdef inline bint _has_float_data(object data):
    """Whether raw array ``data`` holds floats (C-level check for NumPy)."""
    if cnp.PyArray_CheckExact(data):
        return cnp.PyArray_ISFLOAT(<cnp.ndarray>data)
    return data.dtype.kind == 'f'


cdef inline object _as_raw_array(object g):
    """NumPy returns scalars from 0-d operations; keep arrays arrays."""
    if cnp.PyArray_CheckExact(g):
        return g
    return _scalar_as_array(g)
