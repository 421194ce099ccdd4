cdef tuple normalize_axes(object axis, Py_ssize_t ndim, str name=*)
