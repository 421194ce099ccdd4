from xgrad._array cimport ndarray

cdef ndarray as_array(object x, str name, object like=*)
cdef object as_result(object r)
cdef bint on_gpu(object v)
cdef object raw_module(object v)
