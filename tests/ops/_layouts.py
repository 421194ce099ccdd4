"""The memory layouts a user's NumPy data comes in, for the tests of the ops
with native kernels: the same values, held in another way."""

import numpy

LAYOUTS = ('contiguous', 'transposed', 'channels_last', 'strided', 'unaligned', 'negative',
           'fortran', 'read_only', 'broadcast', 'big_endian')


def _moved(a, axis):
    """The same values stored with ``axis`` last (channels-last for axis 1)."""
    return numpy.moveaxis(numpy.ascontiguousarray(numpy.moveaxis(a, axis, -1)), -1, axis)


def _strided(a):
    """Every other element of a bigger buffer."""
    big = numpy.zeros(tuple(2 * n for n in a.shape), a.dtype)
    view = big[tuple(slice(None, None, 2) for _ in a.shape)]
    view[...] = a
    return view


def _unaligned(a):
    """One byte into a buffer: an odd address, which NumPy flags unaligned."""
    buf = numpy.zeros(a.nbytes + 1, numpy.uint8)
    view = buf[1:].view(a.dtype).reshape(a.shape)
    view[...] = a
    return view


def in_layout(a, layout):
    """``a``'s values in ``layout`` (one of LAYOUTS); 'broadcast' repeats the
    first entry along axis 0 (zero strides), so it changes the values: read
    them from what this returns."""
    if layout == 'contiguous':
        return numpy.ascontiguousarray(a)
    if a.ndim == 0:
        return _unaligned(a) if layout == 'unaligned' else a.copy()
    if layout == 'transposed':  # the last two axes swapped in memory
        return _moved(a, a.ndim - 2) if a.ndim >= 2 else _strided(a)
    if layout == 'channels_last':
        return _moved(a, 1) if a.ndim >= 3 else _strided(a)
    if layout == 'strided':
        return _strided(a)
    if layout == 'unaligned':
        return _unaligned(a)
    if layout == 'negative':
        flip = (slice(None, None, -1),) * a.ndim
        return numpy.array(a[flip], order='C')[flip]
    if layout == 'fortran':
        return numpy.asfortranarray(a)
    if layout == 'read_only':
        a = a.copy()
        a.flags.writeable = False
        return a
    if layout == 'broadcast':
        return numpy.broadcast_to(a[:1], a.shape)
    if layout == 'big_endian':
        return a.astype(a.dtype.newbyteorder('>'))
    raise ValueError(layout)
