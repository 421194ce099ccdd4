"""Matrices laid out for the BLAS: rows padded off multiples of 1 KiB.

A GEMM operand whose rows are a multiple of 4 KiB apart (and, less so, of 1
KiB) puts the elements of a column into the same few cache sets, so the
BLAS's packing, which reads down the columns, keeps evicting what it just
read. With batches and images of powers of two, im2col's columns and
Winograd's transformed tiles nearly always have such rows, so they are
allocated with a cache line of padding after each row instead. One thread,
OpenBLAS: (32, 400) by (400, 1024) 62 -> 90 GFLOP/s, (16, 144) by (144,
4096) 42 -> 77; (400, 32) by (32, 4096) into padded rows 58 -> 95;
Winograd's 36 products (32, 16) by (16, 1024) 82 -> 102.
"""

import numpy


def row_length(n, itemsize):
    """The padded length of rows of n elements of ``itemsize`` bytes."""
    return n + 64 // itemsize if n and (n * itemsize) % 1024 == 0 else n


def padded_size(rows, n, dtype):
    """How many elements a buffer for ``padded(buffer, rows, n)`` needs."""
    return rows * row_length(n, numpy.dtype(dtype).itemsize)


def padded(flat, shape):
    """A view of the 1-D buffer ``flat`` shaped ``shape`` whose last axis is
    padded as ``row_length`` says (the rows evenly spaced, so any leading
    axes may be merged or split without a copy)."""
    *lead, n = shape
    rows = 1
    for d in lead:
        rows *= d
    ld = row_length(n, flat.itemsize)
    if ld == n:  # no padding (one view instead of two)
        return flat[:rows * n].reshape(shape)
    return flat[:rows * ld].reshape(tuple(lead) + (ld,))[..., :n]
