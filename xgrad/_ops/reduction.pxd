cdef tuple normalize_axes(object axis, Py_ssize_t ndim, str name=*)
cdef tuple as_shape(object shape, str op, str name=*)
