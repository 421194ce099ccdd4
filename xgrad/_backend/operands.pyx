# cython: language_level=3
"""Host arrays as the native kernels read them.

Every native CPU kernel (Cython, C) reads its operands as one flat block of
native-endian floats: C-contiguous, aligned to the item size, of the dtype it
computes in. A user's array can be anything NumPy allows: wrapped without a
copy by ``from_numpy`` at an odd address (a memory-mapped file, a network
buffer, a field of a structured array), transposed, channels-last, a strided
or reversed slice, Fortran-ordered, read-only, broadcast (zero strides),
big-endian. A kernel that met such an operand would refuse it (and the
refusal reached the user as an error that depended on the shape, the thread
count and the CPU path, since those decide which kernel runs).

So each op with native kernels passes its inputs, and the gradients its
backward receives, through ``kernel_operands`` where it enters its kernels,
before any algorithm is chosen: what the kernels see is always plain, and a
new algorithm behind that entry cannot forget it. A plain operand is
returned as it is (no copy); anything else is copied once, as a C-contiguous
aligned native array (NumPy aligns what it allocates). Read-only operands
stay read-only: kernels never write their inputs.

Cython: a convolution calls it on every kernel entry (forward, both
gradients), 0.4 us for three plain operands where NumPy's flags objects took 2.5.
"""

cimport numpy as cnp

import numpy

cnp.import_array()


cpdef bint is_plain(object a, object dtype):
    """Whether ``a`` (a NumPy array) is what a kernel computing in ``dtype``
    reads as it is: that dtype in native byte order, C-contiguous, aligned."""
    cdef cnp.ndarray arr
    if type(a) is not numpy.ndarray:
        return False
    arr = <cnp.ndarray>a
    return (cnp.PyArray_IS_C_CONTIGUOUS(arr) and cnp.PyArray_ISALIGNED(arr)
            and cnp.PyArray_ISNOTSWAPPED(arr)
            and cnp.PyArray_TYPE(arr) == (<cnp.dtype>numpy.dtype(dtype)).type_num)


cpdef object kernel_operand(object a, object dtype):
    """``a`` (a NumPy array; None and device arrays pass through) as a
    C-contiguous, aligned array of ``dtype`` in native byte order: ``a``
    itself when it is one, else a copy."""
    if type(a) is not numpy.ndarray or is_plain(a, dtype):
        return a
    return numpy.array(a, dtype=numpy.dtype(dtype).newbyteorder('='), order='C')


def kernel_operands(dtype, *arrays):
    """kernel_operand of each of ``arrays``, as a tuple."""
    return tuple([kernel_operand(a, dtype) for a in arrays])
