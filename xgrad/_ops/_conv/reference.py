"""Testing code: conv and conv_transpose by direct loops over output
positions and kernel taps, in float64, the references that the registry's
checks (``python -m xgrad check``) and the convolution tests hold every
algorithm to. No kernel calls them; they share nothing with the kernels in
xgrad/_ops/convolution.py. (Here, not in xgrad.testing, because the
registry in the op library takes them as its ``ref``, and the op library
imports nothing from the layers above it.)"""

import numpy

from xgrad import _dtypes


def _result_dtype(x, w, b):
    """ChainerX's result dtype of a convolution: x, w and b promoted."""
    return _dtypes.result_type(x, w, *(() if b is None else (b,)))


def _expand(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def reference_conv(x, w, b=None, stride=1, pad=0, cover_all=False, dilate=1, groups=1):
    """conv by direct loops over output positions and kernel taps, in float64."""
    n = x.ndim - 2
    s, p, d = _expand(stride, n), _expand(pad, n), _expand(dilate, n)
    ksize = w.shape[2:]
    dtype = _result_dtype(x, w, b)
    # s extra zeros after each axis: room for cover_all's last window.
    xp = numpy.pad(x.astype(numpy.float64), [(0, 0)] * 2 + [(q, q + t) for q, t in zip(p, s)])
    outs = tuple((size + 2 * q - (k - 1) * dd - 1 + (t - 1 if cover_all else 0)) // t + 1
                 for size, k, t, q, dd in zip(x.shape[2:], ksize, s, p, d))
    y = numpy.zeros((x.shape[0], w.shape[0]) + outs)
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    for g in range(groups):
        xs, os = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for pos in numpy.ndindex(*outs):
            for k in numpy.ndindex(*ksize):
                at = tuple(i * t + j * dd for i, t, j, dd in zip(pos, s, k, d))
                y[(slice(None), os) + pos] += _at(xp, xs, at) @ w[(os, slice(None)) + k].T
    if b is not None:
        y += b.reshape((1, -1) + (1,) * n)
    return y.astype(dtype)


def _at(a, channels, position):
    """a[:, channels, *position]: (N, len(channels))."""
    return a[(slice(None), channels) + position]


def reference_conv_transpose(x, w, b=None, stride=1, pad=0, outsize=None, dilate=1,
                              groups=1):
    """conv_transpose by scattering each input element times the kernel, in
    float64."""
    n = x.ndim - 2
    s, p, d = _expand(stride, n), _expand(pad, n), _expand(dilate, n)
    ksize = w.shape[2:]
    dtype = _result_dtype(x, w, b)
    if outsize is None:
        outsize = tuple(t * (size - 1) + (k - 1) * dd + 1 - 2 * q
                        for size, k, t, q, dd in zip(x.shape[2:], ksize, s, p, d))
    span = tuple(max(t * (size - 1) + (k - 1) * dd + 1, l + 2 * q) for size, k, t, q, dd, l
                 in zip(x.shape[2:], ksize, s, p, d, outsize))
    cg, og = x.shape[1] // groups, w.shape[1]
    x = x.astype(numpy.float64)
    y = numpy.zeros((x.shape[0], og * groups) + span)
    for g in range(groups):
        xs, os = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for pos in numpy.ndindex(*x.shape[2:]):
            for k in numpy.ndindex(*ksize):
                at = tuple(i * t + j * dd for i, t, j, dd in zip(pos, s, k, d))
                y[(slice(None), os) + at] += _at(x, xs, pos) @ w[(xs, slice(None)) + k]
    y = y[(slice(None), slice(None)) + tuple(slice(q, q + l) for q, l in zip(p, outsize))]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * n)
    return y.astype(dtype)
