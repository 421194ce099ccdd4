# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""im2col for 2-D convolution in one pass, padding included.

Why: NumPy's im2col pads a copy of the input, then copies a 6-D strided view
of it into the column buffer; on small images (8x8 digits) that costs more
than the matmul. Here each column row is written straight from the input,
zeros where a window reaches into the padding, with contiguous runs copied
as runs.
"""

cimport numpy as cnp
from libc.string cimport memset

cnp.import_array()

ctypedef fused real:
    float
    double


cdef void _fill(const real* x, real* out, Py_ssize_t c_count, Py_ssize_t h, Py_ssize_t w,
                Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t dh, Py_ssize_t dw,
                Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t m) noexcept nogil:
    """out (C, kh, kw, m, oh, ow) from x (m, C, h, w)."""
    cdef Py_ssize_t c, i, j, s, oy, ox, iy, ix, lo, hi
    cdef const real* plane
    cdef real* row
    for c in range(c_count):
        for i in range(kh):
            for j in range(kw):
                # the output columns whose input column lies inside x
                lo = 0
                while lo < ow and lo * sw + j * dw - pw < 0:
                    lo += 1
                hi = ow
                while hi > lo and (hi - 1) * sw + j * dw - pw >= w:
                    hi -= 1
                for s in range(m):
                    plane = x + (s * c_count + c) * h * w
                    row = out + (((c * kh + i) * kw + j) * m + s) * oh * ow
                    for oy in range(oh):
                        iy = oy * sh + i * dh - ph
                        if iy < 0 or iy >= h:
                            memset(row + oy * ow, 0, ow * sizeof(real))
                            continue
                        for ox in range(lo):
                            row[oy * ow + ox] = 0
                        ix = lo * sw + j * dw - pw
                        if sw == 1:
                            for ox in range(lo, hi):
                                row[oy * ow + ox] = plane[iy * w + ix + ox - lo]
                        else:
                            for ox in range(lo, hi):
                                row[oy * ow + ox] = plane[iy * w + ix + (ox - lo) * sw]
                        for ox in range(hi, ow):
                            row[oy * ow + ox] = 0


def im2col_2d(cnp.ndarray x, cnp.ndarray out, tuple ksize, tuple stride, tuple pad,
              tuple dilate, tuple outsize):
    """Fill ``out`` (C, kh, kw, m, oh, ow), C-contiguous, with the windows of
    ``x`` (m, C, h, w), C-contiguous, of the same float32/float64 dtype.
    Returns False (and writes nothing) when the operands do not qualify."""
    cdef int t = cnp.PyArray_TYPE(x)
    if (t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE) or cnp.PyArray_TYPE(out) != t:
        return False
    if not (cnp.PyArray_IS_C_CONTIGUOUS(x) and cnp.PyArray_IS_C_CONTIGUOUS(out)
            and cnp.PyArray_ISNOTSWAPPED(x) and cnp.PyArray_ISALIGNED(x)):
        return False
    if cnp.PyArray_NDIM(x) != 4 or cnp.PyArray_NDIM(out) != 6:
        return False
    cdef Py_ssize_t m = cnp.PyArray_DIM(x, 0), c = cnp.PyArray_DIM(x, 1)
    cdef Py_ssize_t h = cnp.PyArray_DIM(x, 2), w = cnp.PyArray_DIM(x, 3)
    cdef Py_ssize_t kh = ksize[0], kw = ksize[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = pad[0], pw = pad[1], dh = dilate[0], dw = dilate[1]
    cdef Py_ssize_t oh = outsize[0], ow = outsize[1]
    cdef Py_ssize_t want[6]
    want[:] = [c, kh, kw, m, oh, ow]
    cdef int i
    for i in range(6):
        if cnp.PyArray_DIM(out, i) != want[i]:
            return False
    cdef void* px = cnp.PyArray_DATA(x)
    cdef void* po = cnp.PyArray_DATA(out)
    with nogil:
        if t == cnp.NPY_FLOAT:
            _fill[float](<float*>px, <float*>po, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw,
                         oh, ow, m)
        else:
            _fill[double](<double*>px, <double*>po, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw,
                          oh, ow, m)
    return True
