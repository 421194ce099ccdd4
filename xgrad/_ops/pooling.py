"""Spatial pooling: ``max_pool`` and ``average_pool`` (ChainerX's signatures
and semantics), over 1 or more spatial axes of channel-first arrays
(N, C, d_1, ..., d_n).

Windows are laid out like ``conv``'s (see convolution.py, whose geometry
helpers this module shares): ``ksize`` taps per axis, ``stride`` (None: the
window size) and ``pad``.

Each pooling is a pair of linear ops that are each other's adjoints, so every
derivative order stays in the pair:

* max: the forward gathers the window maxima and keeps their positions
  (ties go to the first in window order); its gradient ``_MaxPoolGrad``
  scatters gy to those positions (adding where windows overlap), and the
  gradient of that scatter is the gather ``_MaxPoolGather`` with the same
  positions. The positions are constant, so the second derivative in x is 0.
* average: the window sum over a count (``pad_mode`` 'ignore': the elements
  inside the input, 'zero': the whole window); its gradient spreads gy / count
  over each window, and the gradient of that is the average again.

On cuda devices with cuDNN (xgrad/_backend/cudnn.pyx), the forward and the
first gradient run cuDNN's pooling where it computes what the strided
windows do (max: padding as -inf, NaN propagated; average: cuDNN's
count-excluding-padding mode for pad_mode 'ignore', count-including for
'zero'; not with cover_all adding windows, nor with pad >= ksize, whose
windows wholly in the padding xgrad defines as 0 or nan). The max pair
keeps x and y for cuDNN's backward and finds the argmax positions only if a
second derivative asks for the gather; the pairs stay each other's adjoints,
so every derivative order is unchanged.
"""

import functools

import numpy

from xgrad._backend import cuda, cudnn, window_kernels, workspace
from xgrad._ops import _args
from xgrad._ops._linear import LinearPair, run
from xgrad._ops._op import PyOp
from xgrad._ops.convolution import (
    Geometry, _padded_zeros, _prod, col2im, out_size, pad_input,
    spatial_tuple, unpad, window_offsets)
from xgrad._ops.registry import OpInfo, Sample, distinct, register

__all__ = ['max_pool', 'average_pool']


def _geometry(op, x, ksize, stride, pad, cover_all):
    """Checked window geometry and output size for pooling ``x``."""
    _args.require_float(x, op)
    n = x.ndim - 2
    if n < 1:
        raise _args.DimensionError('{}: x {} must have a batch, a channel and at least one '
                                   'spatial axis'.format(op, x.shape))
    ksize = spatial_tuple(ksize, n, 'ksize', op, 1)
    stride = ksize if stride is None else spatial_tuple(stride, n, 'stride', op, 1)
    geom = Geometry(ksize, stride, spatial_tuple(pad, n, 'pad', op, 0), (1,) * n, 1)
    _args.check_result_size(x.shape[:2] + tuple(d + 2 * p for d, p in zip(
        x.shape[2:], geom.pad)), x.dtype, op, 'x padded by {}'.format(geom.pad))
    outsize = tuple(out_size(d, k, s, p, 1, cover_all)
                    for d, k, s, p in zip(x.shape[2:], ksize, stride, geom.pad))
    if any(l < 1 for l in outsize):
        raise _args.DimensionError('{}: windows of size {} do not fit in x {} padded by '
                                   '{}'.format(op, ksize, x.shape, geom.pad))
    return geom, outsize


def _cudnn_mode(kind, x, geom, outsize, pad_mode=None):
    """cuDNN's pooling mode for raw ``x`` when cuDNN pools it as the strided
    windows do (GPU data, cuDNN usable, the same windows), else None."""
    if not cuda.on_gpu(x) or not cudnn.use_for('pool', cuda.cupy(), x):
        return None
    if outsize != tuple(out_size(d, k, s, p) for d, k, s, p in zip(
            x.shape[2:], geom.ksize, geom.stride, geom.pad)):
        return None  # cover_all's extra windows
    if cudnn.pooling_reason(x.shape, x.dtype, geom.ksize, geom.stride, geom.pad, kind):
        return None
    return cudnn.pooling_mode(kind, pad_mode)


def _cudnn_pool(x, outsize, mode, geom):
    """cuDNN's pooling of x, or None after recording a failure (the caller
    falls back)."""
    try:
        return cudnn.pooling_forward(x, outsize, mode, geom.ksize, geom.stride, geom.pad)
    except cudnn.CudnnError as e:
        cudnn.record_failure('pool', e)
        return None


def _cudnn_pool_grad(spatial, x, y, gy, mode, geom):
    try:
        return cudnn.pooling_backward(gy.shape[:2] + tuple(spatial), x, y, gy, mode,
                                      geom.ksize, geom.stride, geom.pad)
    except cudnn.CudnnError as e:
        cudnn.record_failure('pool', e)
        return None


# ---------------------------------------------------------------------------
# Max pooling

class _Argmax:
    """Which tap of its window (0 .. prod(ksize) - 1, in window order) each
    output's maximum came from, with the pooling geometry. After cuDNN's
    forward, ``cudnn`` is (mode, x, y) for cuDNN's backward, and the taps
    are found from x only when asked for (by the gather, a second
    derivative)."""

    def __init__(self, tap, geom, outsize, spatial, cudnn=None):
        self._tap = tap
        self.geom = geom
        self.outsize = outsize
        self.spatial = spatial
        self.cudnn = cudnn

    @property
    def tap(self):
        if self._tap is None:
            self._tap = _window_max(self.cudnn[1], self.geom, self.outsize)[1]
        return self._tap

    def taps(self):
        """(mask, index) per tap: the outputs whose maximum is that tap, and
        the strided slice of the padded input that tap reads."""
        for t, (_, index) in enumerate(window_offsets(self.geom, self.outsize)):
            yield self.tap == t, index


def _native(a):
    """Whether the 2-D pooling kernels take ``a``: a NumPy float32/64 batch
    (N, C, h, w), or (N, C, w) taken as h = 1."""
    return (type(a) is numpy.ndarray and (a.ndim == 4 or a.ndim == 3)
            and a.dtype in (numpy.float32, numpy.float64))


def _as_2d(a):
    """``a`` (contiguous, NumPy) with one spatial axis as a 2-D batch of
    height 1 (a view); 2-D batches as they are."""
    return a if a.ndim == 4 else a.reshape(a.shape[:2] + (1,) + a.shape[2:])


def _geometry_2d(geom):
    """(ksize, stride, pad) for the 2-D kernels: one spatial axis becomes
    windows of height 1 over an image of height 1."""
    if len(geom.ksize) == 2:
        return geom.ksize, geom.stride, geom.pad
    return (1,) + tuple(geom.ksize), (1,) + tuple(geom.stride), (0,) + tuple(geom.pad)


def _window_max(x, geom, outsize):
    """(y, tap): each window's maximum and the tap it came from, by strided
    windows (any array module)."""
    xpad = pad_input(x, geom, outsize, fill=-numpy.inf)
    y = tap = None
    for t, (_, index) in enumerate(window_offsets(geom, outsize)):
        v = xpad[index]
        if y is None:
            y = v.copy()
            xp = _args.module_of(y)
            tap = xp.zeros(y.shape, numpy.min_scalar_type(_prod(geom.ksize)))
        else:  # strictly greater wins: ties keep the first tap
            tap = xp.where(v > y, tap.dtype.type(t), tap)
            y = xp.maximum(y, v)  # (NaN propagates to y)
    return y, tap


class _MaxPool(PyOp):
    op_name = 'max_pool'

    def __init__(self, geom, outsize):
        self.geom = geom
        self.outsize = outsize

    def forward(self, inputs):
        x = inputs[0]
        geom, outsize = self.geom, self.outsize
        if _native(x):  # one pass in C (window_kernels.pyx)
            x = numpy.ascontiguousarray(x)
            y = workspace.empty(x.shape[:2] + outsize, x.dtype)
            tap = workspace.empty(y.shape, numpy.min_scalar_type(_prod(geom.ksize)))
            if window_kernels.max_pool_2d(_as_2d(x), _as_2d(y), tap, *_geometry_2d(geom)):
                self.argmax = _Argmax(tap, geom, outsize, x.shape[2:])
                return (y,)
        mode = _cudnn_mode('max', x, geom, outsize)
        y = None if mode is None else _cudnn_pool(x, outsize, mode, geom)
        if y is not None:
            self.argmax = _Argmax(None, geom, outsize, x.shape[2:], cudnn=(mode, x, y))
            return (y,)
        y, tap = _window_max(x, geom, outsize)
        self.argmax = _Argmax(tap, geom, outsize, x.shape[2:])
        return (y,)

    def grads(self, xp, targets, gys, xs, ys):
        return (run(_MaxPoolGrad(self.argmax), gys[0]),)


class _MaxPoolGrad(LinearPair):
    """gx: gy added at the positions of the window maxima."""
    op_name = 'max_pool_grad'

    def compute(self, gy):
        a = self.plan
        if a.cudnn is not None and cuda.on_gpu(gy) and 'pool' not in cudnn.failures:
            mode, x, y = a.cudnn
            gx = _cudnn_pool_grad(a.spatial, x, y, gy.astype(x.dtype, copy=False), mode,
                                  a.geom)
            if gx is not None:
                return gx.astype(gy.dtype, copy=False)
        if _native(gy):
            gx = workspace.zeros(gy.shape[:2] + a.spatial, gy.dtype)
            if window_kernels.max_pool_2d_scatter(_as_2d(numpy.ascontiguousarray(gy)),
                                                  a.tap, _as_2d(gx), *_geometry_2d(a.geom),
                                                  False):
                return gx
        gxpad = _padded_zeros(gy.shape[:2] + a.spatial, a.geom, a.outsize, gy.dtype, gy)
        xp = _args.module_of(gy)
        for mask, index in a.taps():
            gxpad[index] += xp.where(mask, gy, gy.dtype.type(0))
        return unpad(gxpad, a.geom, a.spatial)



class _MaxPoolGather(LinearPair):
    """The adjoint of ``_MaxPoolGrad``: each window's element at its maximum."""
    op_name = 'max_pool_gather'

    def compute(self, gx):
        a = self.plan
        if _native(gx):
            out = workspace.empty(gx.shape[:2] + a.outsize, gx.dtype)
            if window_kernels.max_pool_2d_scatter(_as_2d(out), a.tap,
                                                  _as_2d(numpy.ascontiguousarray(gx)),
                                                  *_geometry_2d(a.geom), True):
                return out
        gxpad = pad_input(gx, a.geom, a.outsize)
        xp = _args.module_of(gx)
        out = xp.zeros(gx.shape[:2] + a.outsize, gx.dtype)
        for mask, index in a.taps():
            out = xp.where(mask, gxpad[index], out)
        return out



def max_pool(x, ksize, stride=None, pad=0, cover_all=False):
    """The maximum of each window of ``x`` (N, C, d_1..d_n): windows of
    ``ksize``, moved by ``stride`` (None: ``ksize``) over ``x`` padded with
    -inf by ``pad``; ``cover_all`` adds a window where a tail would be left
    out (as ``conv``). The gradient goes to the first maximum of each window."""
    x = _args.as_array(x, 'x')
    geom, outsize = _geometry('max_pool', x, ksize, stride, pad, cover_all)
    return _args.apply(_MaxPool(geom, outsize), x)


# ---------------------------------------------------------------------------
# Average pooling

@functools.lru_cache(maxsize=64)
def _inside_counts(outsize, ksize, stride, pad, spatial):
    """The elements inside the input of each window (pad_mode 'ignore'): a
    product of per-axis counts, float64 of shape (1, 1, *outsize); read-only
    and kept for the next pooling of that geometry."""
    count = numpy.ones((1, 1) + (1,) * len(outsize))
    for axis, (l, k, s, p, d) in enumerate(zip(outsize, ksize, stride, pad, spatial)):
        start = numpy.arange(l) * s
        inside = numpy.minimum(start + k, p + d) - numpy.maximum(start, p)
        # Not clamped at 0, as in ChainerX and Chainer: a window wholly in
        # the padding has a count <= 0, so its average is 0 (-0) or nan.
        shape = [1] * (2 + len(outsize))
        shape[2 + axis] = l
        count = count * inside.reshape(shape)
    count.flags.writeable = False
    return count


class _Average:
    """An average pooling's geometry and its per-output element counts."""

    def __init__(self, geom, outsize, spatial, pad_mode, cudnn_mode=None):
        self.geom = geom
        self.outsize = outsize
        self.spatial = spatial
        self.cudnn_mode = cudnn_mode  # cuDNN's mode on cuda devices, or None
        if pad_mode == 'zero':
            self.count = _prod(geom.ksize)
        else:
            self.count = _inside_counts(tuple(outsize), tuple(geom.ksize),
                                        tuple(geom.stride), tuple(geom.pad), tuple(spatial))

    def native_counts(self):
        """(counts, count) as window_kernels.average_pool_2d takes them."""
        if isinstance(self.count, numpy.ndarray):
            return numpy.ascontiguousarray(self.count, numpy.float64), 0.0
        return None, float(self.count)


class _AveragePool(LinearPair):
    op_name = 'average_pool'

    def compute(self, x):
        a = self.plan
        if a.cudnn_mode is not None and cuda.on_gpu(x) and 'pool' not in cudnn.failures:
            y = _cudnn_pool(x, a.outsize, a.cudnn_mode, a.geom)
            if y is not None:
                return y
        if _native(x):  # one pass in C (window_kernels.pyx), NumPy's sums exactly
            x = numpy.ascontiguousarray(x)
            y = workspace.empty(x.shape[:2] + a.outsize, x.dtype)
            if window_kernels.average_pool_2d(_as_2d(x), _as_2d(y), *a.native_counts(),
                                              *_geometry_2d(a.geom), False):
                return y
        xpad = pad_input(x.astype(_args.compute_dtype(x.dtype), copy=False), a.geom, a.outsize)
        y = _args.module_of(xpad).zeros(x.shape[:2] + a.outsize, xpad.dtype)
        for _, index in window_offsets(a.geom, a.outsize):
            y += xpad[index]
        with numpy.errstate(invalid='ignore', divide='ignore'):  # windows all padding
            y /= _args.on_device_of(y, a.count)
        return y.astype(x.dtype, copy=False)



class _AveragePoolGrad(LinearPair):
    """The adjoint of ``_AveragePool``: gy / count spread over each window."""
    op_name = 'average_pool_grad'

    def compute(self, gy):
        a = self.plan
        if a.cudnn_mode is not None and cuda.on_gpu(gy) and 'pool' not in cudnn.failures:
            gx = _cudnn_pool_grad(a.spatial, None, None, gy, a.cudnn_mode, a.geom)
            if gx is not None:
                return gx
        if _native(gy):
            gx = workspace.zeros(gy.shape[:2] + a.spatial, gy.dtype)
            if window_kernels.average_pool_2d(_as_2d(gx), _as_2d(numpy.ascontiguousarray(gy)),
                                              *a.native_counts(), *_geometry_2d(a.geom),
                                              True):
                return gx
        xp = _args.module_of(gy)
        with numpy.errstate(invalid='ignore', divide='ignore'):
            count = _args.on_device_of(gy, a.count)
            g = xp.divide(gy, count, dtype=_args.compute_dtype(gy.dtype))
        nk = len(a.geom.ksize)
        cols = xp.broadcast_to(g.reshape(gy.shape[:2] + (1,) * nk + a.outsize),
                               gy.shape[:2] + a.geom.ksize + a.outsize)
        return col2im(cols, a.geom, a.outsize, a.spatial).astype(gy.dtype, copy=False)


_MaxPoolGrad.adjoint, _MaxPoolGather.adjoint = _MaxPoolGather, _MaxPoolGrad
_AveragePool.adjoint, _AveragePoolGrad.adjoint = _AveragePoolGrad, _AveragePool


def average_pool(x, ksize, stride=None, pad=0, pad_mode='ignore'):
    """The mean of each window of ``x`` (N, C, d_1..d_n): windows of
    ``ksize``, moved by ``stride`` (None: ``ksize``) over ``x`` padded by
    ``pad``. ``pad_mode`` 'ignore' averages the elements inside ``x`` only,
    'zero' counts the padding as zeros (divides by the window size)."""
    x = _args.as_array(x, 'x')
    if pad_mode not in ('ignore', 'zero'):
        raise ValueError("average_pool: pad_mode must be 'ignore' or 'zero', not "
                         "{!r}".format(pad_mode))
    geom, outsize = _geometry('average_pool', x, ksize, stride, pad, False)
    mode = _cudnn_mode('average', _args.raw(x), geom, outsize, pad_mode)
    return _args.apply(_AveragePool(_Average(geom, outsize, x.shape[2:], pad_mode, mode)), x)


# ---------------------------------------------------------------------------
# Registry: naive loop references (independent of the kernels above)

def _reference_windows(x, ksize, stride, pad, cover_all, fill):
    """Yield (output index, window values (N, C, prod(ksize))) by direct loops."""
    n = x.ndim - 2
    k = (ksize,) * n if isinstance(ksize, int) else tuple(ksize)
    s = k if stride is None else (stride,) * n if isinstance(stride, int) else tuple(stride)
    p = (pad,) * n if isinstance(pad, int) else tuple(pad)
    xp = numpy.pad(x.astype(numpy.float64), [(0, 0)] * 2 + [(q, q + t) for q, t in zip(p, s)],
                   constant_values=fill)
    outs = tuple((d + 2 * q - kk + (t - 1 if cover_all else 0)) // t + 1
                 for d, kk, t, q in zip(x.shape[2:], k, s, p))
    for pos in numpy.ndindex(*outs):
        box = tuple(slice(i * t, i * t + kk) for i, t, kk in zip(pos, s, k))
        yield outs, pos, xp[(slice(None), slice(None)) + box].reshape(x.shape[:2] + (_prod(k),))


def _reference_max_pool(x, ksize, stride=None, pad=0, cover_all=False):
    y = None
    for outs, pos, window in _reference_windows(x, ksize, stride, pad, cover_all, -numpy.inf):
        if y is None:
            y = numpy.zeros(x.shape[:2] + outs)
        y[(slice(None), slice(None)) + pos] = window.max(axis=2)
    return y.astype(x.dtype)


def _reference_average_pool(x, ksize, stride=None, pad=0, pad_mode='ignore'):
    y = None
    ones = numpy.ones(x.shape[:2] + x.shape[2:])
    counts = _reference_windows(ones, ksize, stride, pad, False, 0)
    for (outs, pos, window), (_, _, inside) in zip(
            _reference_windows(x, ksize, stride, pad, False, 0), counts):
        if y is None:
            y = numpy.zeros(x.shape[:2] + outs)
        count = inside.sum(axis=2) if pad_mode == 'ignore' else window.shape[2]
        y[(slice(None), slice(None)) + pos] = window.sum(axis=2) / count
    return y.astype(x.dtype)


register(OpInfo(
    'max_pool', max_pool, ref=_reference_max_pool, domain=distinct,
    samples=[Sample((2, 3, 6), ksize=2),
             Sample((2, 2, 5, 5), ksize=3, stride=2, pad=1),
             Sample((1, 2, 4, 4), ksize=2, stride=1),
             Sample((1, 2, 5, 4), ksize=(2, 3), stride=(2, 1), cover_all=True),
             Sample((1, 2, 4, 3, 4), ksize=2, stride=(2, 1, 2), pad=(0, 1, 1)),
             Sample((0, 2, 4, 4), ksize=2)]))

register(OpInfo(
    'average_pool', average_pool, ref=_reference_average_pool,
    samples=[Sample((2, 3, 6), ksize=3, stride=1),
             Sample((2, 2, 5, 5), ksize=3, stride=2, pad=1),
             Sample((2, 2, 5, 5), ksize=3, stride=2, pad=1, pad_mode='zero'),
             Sample((1, 2, 5, 4), ksize=(2, 3)),
             Sample((1, 2, 4, 3, 4), ksize=2, stride=(2, 1, 2), pad=(0, 1, 1)),
             Sample((0, 2, 4, 4), ksize=2)]))
