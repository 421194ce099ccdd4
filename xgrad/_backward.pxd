# The backward pass (_backward.pyx): what the ops return to it.
cimport cython


@cython.final
cdef class IndexedGradient:
    cdef readonly object key
    cdef readonly object value
