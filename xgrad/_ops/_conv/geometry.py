"""Where the windows of a convolution (or pooling) lie: the Geometry of
its parameters, output sizes, padding, the strided windows, the taps of
conv_transpose's output phases; and the checks of a convolution's shapes
and parameters, which conv, conv_transpose and xgrad.conv_algorithm share."""

import collections
import itertools

from numpy.lib.stride_tricks import as_strided

from xgrad._backend import cuda
from xgrad._errors import describe
from xgrad._ops import _args

Geometry = collections.namedtuple('Geometry', 'ksize stride pad dilate groups')
Geometry.__doc__ = """Where the windows of a convolution or pooling lie: one
entry per spatial axis (``groups``: the number of channel groups)."""


def spatial_tuple(value, n, name, op, minimum, too_small=ValueError):
    """``value`` (an int or a sequence of n ints) as a tuple of n ints, each
    at least ``minimum``. Wrong length: DimensionError; too small:
    ``too_small``; not an int: TypeError."""
    if type(value) is int and minimum <= value < 1 << 62:  # the usual case, valid as it is
        return (value,) * n
    if _args.is_int(value):
        values = (int(value),) * n
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError('{}: {} must be an int or a tuple of ints, not {}'.format(
                op, name, type(value).__name__)) from None
        for v in values:
            if not _args.is_int(v):
                raise TypeError('{}: {} must be an int or a tuple of ints, not {}'.format(
                    op, name, describe(value)))
        if len(values) != n:
            raise _args.DimensionError(
                '{}: {} {} has {} entries, but the input has {} spatial '
                'dimensions'.format(op, name, values, len(values), n))
        values = tuple(int(v) for v in values)
    for v in values:
        _args.fits_int64(v, name, op)
    if any(v < minimum for v in values):
        raise too_small('{}: {} must be {} for every axis, got {}'.format(
            op, name, 'positive' if minimum == 1 else 'non-negative', value))
    return values


def out_size(size, k, s, p, d=1, cover_all=False):
    """The output length of a window of k taps (dilation d) sliding with
    stride s over size + 2p elements (Chainer's get_conv_outsize); with
    cover_all, one more window covers a partial tail."""
    span = (k - 1) * d + 1
    return (size + 2 * p - span + (s - 1 if cover_all else 0)) // s + 1


def extent(geom, outsize):
    """How many padded elements per axis the windows of ``outsize`` outputs
    reach: (l - 1) * s + (k - 1) * d + 1."""
    return tuple((l - 1) * s + (k - 1) * d + 1 for l, k, s, d in zip(
        outsize, geom.ksize, geom.stride, geom.dilate))


def pad_input(x, geom, outsize, fill=0):
    """``x`` with ``geom.pad`` elements of ``fill`` before each spatial axis
    and enough after for every window of ``outsize`` (cover_all can reach past
    the pad). ``x`` itself when no padding is needed."""
    spatial = x.shape[2:]
    full = tuple(max(e, p + n) for e, p, n in zip(extent(geom, outsize), geom.pad, spatial))
    if full == spatial:  # no pad, no overhang
        return x
    out = _args.module_of(x).empty(x.shape[:2] + full, dtype=x.dtype)
    out[inner(geom.pad, spatial)] = x
    for axis, (p, n) in enumerate(zip(geom.pad, spatial)):  # fill the borders only
        before = (slice(None),) * (2 + axis)
        out[before + (slice(0, p),)] = fill
        out[before + (slice(p + n, None),)] = fill
    return out


def inner(pad, spatial):
    """The index of the unpadded region in a padded array."""
    return (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(pad, spatial))


def windows(xpad, geom, outsize):
    """The strided view (N, C, k_1..k_n, l_1..l_n) of every window of
    ``xpad``: element [.., k, l] is xpad[.., l * stride + k * dilate]."""
    strides = xpad.strides[2:]
    shape = xpad.shape[:2] + tuple(geom.ksize) + tuple(outsize)
    strides = (xpad.strides[:2] + tuple(t * d for t, d in zip(strides, geom.dilate))
               + tuple(t * s for t, s in zip(strides, geom.stride)))
    if cuda.on_gpu(xpad):  # CuPy's as_strided makes no read-only views
        return cuda.cupy().lib.stride_tricks.as_strided(xpad, shape, strides)
    return as_strided(xpad, shape, strides, writeable=False)


def window_offsets(geom, outsize):
    """(k, index) for each kernel tap k: ``index`` selects, in a padded array,
    the elements that tap k of every window reads (a strided slice)."""
    ranges = [range(k) for k in geom.ksize]
    for k in itertools.product(*ranges):
        yield k, (slice(None), slice(None)) + tuple(
            slice(i * d, i * d + (l - 1) * s + 1, s)
            for i, d, l, s in zip(k, geom.dilate, outsize, geom.stride))


def unpad(apad, geom, spatial):
    """The unpadded region of ``apad``, contiguous."""
    if apad.shape[2:] == tuple(spatial):
        return apad
    return apad[inner(geom.pad, spatial)].copy(order='C')


def padded_zeros(shape, geom, outsize, dtype, like):
    """Zeros shaped like ``pad_input`` pads an array of ``shape`` (on the
    device of ``like``)."""
    full = tuple(max(e, p + d) for e, p, d in zip(extent(geom, outsize), geom.pad, shape[2:]))
    return _args.module_of(like).zeros(tuple(shape[:2]) + full, dtype)


def prod(values):
    """The product of ``values`` (ints; math.prod, which Python 3.7 lacks)."""
    p = 1
    for v in values:
        p *= v
    return p


def pointwise(geom, spatial, outsize):
    """A 1x1 window, stride 1, no padding: each sample's channels are already
    a (C, positions) matrix, the GEMM's operand."""
    ones = (1,) * len(geom.ksize)
    return (geom.ksize == ones and geom.stride == ones and not any(geom.pad)
            and tuple(spatial) == tuple(outsize))


def as_2d(geom):
    """The geometry of a 1-D convolution run as a 2-D one of height 1 (a
    1-tap window, stride 1, no padding along the new axis): the host's
    native kernels and planned algorithms are 2-D."""
    return Geometry((1,) + tuple(geom.ksize), (1,) + tuple(geom.stride),
                    (0,) + tuple(geom.pad), (1,) + tuple(geom.dilate), geom.groups)


def lift_1d(shape):
    """A 1-D convolution's array shape (N, C, L) as (N, C, 1, L)."""
    return tuple(shape[:2]) + (1,) + tuple(shape[2:])


def flipped(geom):
    """With stride 1, conv_transpose is conv with the kernel flipped and in
    and out swapped, padded by span - 1 - p: that conv's geometry, or None
    (a stride above 1, or a pad past the span)."""
    if not all(s == 1 for s in geom.stride) or not all(
            p <= (k - 1) * d for k, p, d in zip(geom.ksize, geom.pad, geom.dilate)):
        return None
    return geom._replace(pad=tuple((k - 1) * d - p for k, p, d in zip(
        geom.ksize, geom.pad, geom.dilate)))


def output_phase_taps(size, out, k, s, p):
    """conv_transpose's output positions along one axis, phase by phase:
    (first position, its tap k0, taps T, left pad, positions U) for each
    position mod s. Output Y = s u + P gets x[l] w[k] for k = k0 + s t
    (k0 = (P + p) mod s) and l = u + d - t (d = (P + p) // s): a stride-1
    correlation of x with those T taps reversed, padded by T - 1 - d on the
    left. None when a left pad would be negative: pads past half the window
    or strides near the window's size (never with k >= 2 s + 1 and 2 p <=
    k - 1)."""
    phases = []
    for first in range(min(s, out)):
        k0, d = (first + p) % s, (first + p) // s
        taps = len(range(k0, k, s))
        if taps and taps - 1 - d < 0:
            return None
        phases.append((first, k0, taps, taps - 1 - d, len(range(first, out, s))))
    return phases


# ---------------------------------------------------------------------------
# Checks of shapes and parameters

def check_geometry(op, xshape, xdtype, wshape, stride, pad, dilate, groups):
    """The checked Geometry of ``op``'s parameters (padded x must fit an array)."""
    n = len(xshape) - 2
    groups = _args.int_arg(groups, 'groups', op=op)
    if groups < 1:
        raise ValueError('{}: groups must be positive, got {}'.format(op, groups))
    geom = Geometry(tuple(wshape[2:]), spatial_tuple(stride, n, 'stride', op, 1),
                    spatial_tuple(pad, n, 'pad', op, 0),
                    spatial_tuple(dilate, n, 'dilate', op, 1), int(groups))
    _args.check_result_size(tuple(xshape[:2]) + tuple(d + 2 * p for d, p in zip(
        xshape[2:], geom.pad)), xdtype, op, 'x with its padding')
    return geom


def check_bias(op, bshape, channels, wshape):
    """b must have one entry an output channel."""
    if bshape is not None and bshape != (channels,):
        raise _args.DimensionError('{}: b {} must have shape ({},) for w {}'.format(
            op, bshape, channels, wshape))


def conv_shapes(xshape, xdtype, wshape, bshape, stride, pad, dilate, groups, cover_all):
    """conv's checks on shapes and parameters: (geom, outsize)."""
    geom = check_geometry('conv', xshape, xdtype, wshape, stride, pad, dilate, groups)
    c, o, g = xshape[1], wshape[0], geom.groups
    if c % g or o % g:
        raise _args.DimensionError('conv: groups={} must divide the channels of x {} and '
                                   'the filters of w {}'.format(g, xshape, wshape))
    if wshape[1] * g != c:
        raise _args.DimensionError(
            'conv: x {} has {} channels, but w {} takes {} (w.shape[1] * groups)'.format(
                xshape, c, wshape, wshape[1] * g))
    check_bias('conv', bshape, o, wshape)
    outsize = tuple(out_size(d, k, s, p, dl, cover_all) for d, k, s, p, dl in zip(
        xshape[2:], geom.ksize, geom.stride, geom.pad, geom.dilate))
    if any(l < 1 for l in outsize):
        raise _args.DimensionError(
            'conv: the windows of w {} (dilate {}) do not fit in x {} padded by {}'.format(
                wshape, geom.dilate, xshape, geom.pad))
    return geom, outsize


def conv_transpose_shapes(xshape, xdtype, wshape, bshape, stride, pad, outsize, dilate, groups):
    """conv_transpose's checks on shapes and parameters: (geom, outsize)."""
    geom = check_geometry('conv_transpose', xshape, xdtype, wshape, stride, pad, dilate, groups)
    c, g = xshape[1], geom.groups
    if wshape[0] != c:
        raise _args.DimensionError('conv_transpose: x {} has {} channels, but w {} takes {} '
                                   '(w.shape[0])'.format(xshape, c, wshape, wshape[0]))
    if c % g:
        raise _args.DimensionError('conv_transpose: groups={} must divide the channels of '
                                   'x {}'.format(g, xshape))
    check_bias('conv_transpose', bshape, wshape[1] * g, wshape)
    spatial = tuple(xshape[2:])
    params = list(zip(geom.ksize, geom.stride, geom.pad, geom.dilate))
    if outsize is None:
        outsize = tuple(s * (d - 1) + (k - 1) * dl + 1 - 2 * p
                        for d, (k, s, p, dl) in zip(spatial, params))
        if any(l < 1 for l in outsize):
            raise _args.DimensionError(
                'conv_transpose: x {} with w {}, stride {} and pad {} gives the output '
                'size {}, which is not positive'.format(xshape, wshape, geom.stride,
                                                        geom.pad, outsize))
    else:
        # (an output shape: ChainerX's DimensionError when it is not positive)
        outsize = spatial_tuple(outsize, len(spatial), 'outsize', 'conv_transpose', 1,
                                _args.DimensionError)
        cover_all = any(out_size(l, k, s, p, dl) != d
                        for l, d, (k, s, p, dl) in zip(outsize, spatial, params))
        if any(out_size(l, k, s, p, dl, cover_all) != d
               for l, d, (k, s, p, dl) in zip(outsize, spatial, params)):
            raise _args.DimensionError(
                'conv_transpose: outsize {} does not fit x {}: conv with w {}, stride {} '
                'and pad {} maps it to another size'.format(
                    outsize, xshape, wshape, geom.stride, geom.pad))
    return geom, tuple(outsize)
