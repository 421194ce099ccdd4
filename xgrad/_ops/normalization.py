"""Batch normalization: ``batch_norm`` (normalizes with the statistics of the
batch and updates running averages in place) and ``fixed_batch_norm``
(normalizes with given statistics, as at inference); layer normalization:
``layer_norm`` (each sample over its trailing axes, as torch's).

Axes follow ChainerX: ``axis`` names the reduced axes, ``axis=None`` is
``(0,)`` (``x`` of shape (N, C, H, W) takes ``axis=(0, 2, 3)`` for
per-channel statistics with ``gamma`` of shape (C,); Chainer's
``batch_normalization`` derives that axis from ``gamma`` and passes it).
``gamma``, ``beta`` and the statistics must have as many elements as the
reduced ``x`` keeps (DimensionError otherwise); their own shapes are kept.

Both are one op each, differentiable twice. The kernels work on ``x``
reshaped so that neighbouring axes that are all reduced or all kept become
one axis ((N, C, H, W) over (0, 2, 3) is (N, C, H*W) over (0, 2), see
``_Layout``), so NumPy applies per-channel values to long contiguous rows.
Arithmetic is done in at least float32; the result has the dtype of ``x``.

On cuda devices with cuDNN (xgrad/_backend/cudnn.pyx), where the reduced
axes are cuDNN's ((N, C, L) over N and L: its spatial mode; (N, D) over N:
per activation), eps >= 1e-5 and the parameters are in cuDNN's dtype for
x (float32 for float16 and float32 x, float64 for float64), ``batch_norm``'s
forward and first gradient and ``fixed_batch_norm``'s forward run cuDNN's
kernels. Second derivatives are the recorded formulas, as without cuDNN.
"""

import math

import numpy

from xgrad._backend import cuda, cudnn, native_kernels, norm_kernels
from xgrad._errors import XgradError, describe
from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops._xp import numpy_ns
from xgrad._ops.registry import (
    F64, Arg, OpInfo, Sample, distinct, positive, real, register)

__all__ = ['batch_norm', 'fixed_batch_norm', 'layer_norm']


# ---------------------------------------------------------------------------
# Shapes

class _Layout:
    """How one call sees ``x``: the reduced axes, the count of elements each
    statistic is taken over, and the shapes the kernels use.

    ``merged``: neighbouring axes that are all reduced or all kept merged
    into one, ``merged_axes`` the reduced ones, ``keep`` the shape of a
    per-channel value against it. When the last merged axis is reduced, the
    NumPy kernels work on ``rows``, a 2-D view (everything else, last axis)
    with per-channel values expanded to one per row: NumPy broadcasts a
    column over long contiguous rows fast, but may iterate (N, C, L) against
    (1, C, 1) in a cache-hostile order."""

    def __init__(self, shape, axes):
        self.shape = shape
        self.axes = axes
        dims, reduced = [], []
        for i, n in enumerate(shape):
            r = i in axes
            if dims and reduced[-1] == r:
                dims[-1] *= n
            else:
                dims.append(n)
                reduced.append(r)
        self.merged = tuple(dims)
        self.merged_axes = tuple(i for i, r in enumerate(reduced) if r)
        self.keep = tuple(1 if r else n for n, r in zip(dims, reduced))
        self.channels = math.prod(self.keep)
        self.count = math.prod([shape[a] for a in axes])
        self.rows = None
        if reduced and reduced[-1]:
            self.rows = (math.prod(dims[:-1]), dims[-1])
        # The native kernels take (N, C, L) reduced over N and L; (N, D)
        # reduced over N is (N, D, 1).
        self.ncl = (self.merged if reduced == [True, False, True] else
                    self.merged + (1,) if reduced == [True, False] else None)

    def view(self, a):
        """Raw ``a`` of x's size as the kernels' elementwise view."""
        return a.reshape(self.rows or self.merged)

    def per_row(self, v):
        """Raw per-channel ``v`` (``keep`` shape) against ``view``."""
        if self.rows is None:
            return v
        return _args.module_of(v).broadcast_to(v, self.merged[:-1] + (1,)).reshape(
            self.rows[0], 1)

    def reduce(self, a):
        """sum of raw ``a`` (``view``) over the reduced axes, ``keep`` shape."""
        return a.reshape(self.merged).sum(axis=self.merged_axes, keepdims=True)

    def dot(self, a, b):
        """sum(a * b) over the reduced axes, ``keep`` shape, in one pass and
        without a temporary (einsum)."""
        letters = 'abcdefghijklmnopqrstuvwxyz'[:len(self.merged)]
        kept = ''.join(c for i, c in enumerate(letters) if i not in self.merged_axes)
        return _args.module_of(a).einsum('{0},{0}->{1}'.format(letters, kept),
                                         a.reshape(self.merged),
                                         b.reshape(self.merged)).reshape(self.keep)


def _layout(op, x, gamma, axis):
    """The ``_Layout`` of ``x`` for ``axis`` (None: derived from ``gamma``)."""
    axes = _args.normalize_axes((0,) if axis is None else axis, x.ndim,
                                '{}: axis'.format(op))
    return _Layout(x.shape, axes)


def _check_params(op, lay, params):
    """Float dtypes, and one element per channel, for each (name, array)."""
    for name, p in params:
        _args.require_float(p, op, name)
        if p.size != lay.channels:
            raise _args.DimensionError(
                '{}: {} has shape {} ({} elements), but x of shape {} reduced over axes '
                '{} keeps {} elements'.format(op, name, p.shape, p.size, lay.shape,
                                              lay.axes, lay.channels))


def _cudnn_mode(lay, x, work, eps):
    """cuDNN's batch norm mode for raw ``x`` (None: not through cuDNN): GPU
    data, cuDNN usable, its axes, eps and parameter dtype."""
    if not cuda.on_gpu(x) or not cudnn.use_for('batch_norm', cuda.cupy(), x):
        return None
    param = numpy.float64 if x.dtype == numpy.float64 else numpy.float32
    if work != param:
        return None
    reduced = [i in lay.merged_axes for i in range(len(lay.merged))]
    if cudnn.batch_norm_reason(lay.merged, reduced, x.dtype, eps, lay.count):
        return None
    return cudnn.batch_norm_mode(reduced)


def _per_channel(xp, a, lay, dtype):
    """``a`` (a parameter or statistic) shaped to broadcast against merged x."""
    return xp.reshape(xp.cast(a, dtype), lay.keep)


# ---------------------------------------------------------------------------
# batch_norm

class BatchNorm(PyOp):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, mean and var over the
    reduced axes of x. Inputs (x, gamma, beta).

    The forward keeps the centered x and the inverse standard deviation for
    the NumPy gradient, the closed form (x_hat = (x - mean) * inv_std)
        gx = gamma * inv_std * (gy - mean(gy) - x_hat * mean(gy * x_hat)).
    The recorded gradient (double backprop) evaluates the same formula with
    the statistics recomputed from the retained x by xgrad ops, so that their
    dependence on x is differentiated too.
    """
    op_name = 'batch_norm'

    def __init__(self, lay, eps):
        self.lay = lay
        self.eps = float(eps)

    def forward(self, inputs):
        x, gamma, beta = inputs
        self.retain_inputs((0, 1))
        lay = self.lay
        self.shapes = tuple(a.shape for a in inputs)
        self.dtypes = tuple(a.dtype for a in inputs)
        self.work = work = _args.compute_dtype(*self.dtypes)
        self.native = lay.ncl is not None and x.dtype == work and not cuda.on_gpu(x)
        self.cudnn_mode = _cudnn_mode(lay, x, work, self.eps)
        if self.cudnn_mode is not None:
            try:
                y, mean, inv_std = cudnn.batch_norm_forward_training(
                    x.reshape(lay.merged), gamma, beta, lay.merged, self.cudnn_mode, self.eps)
            except cudnn.CudnnError as e:
                cudnn.record_failure('batch_norm', e)
                self.cudnn_mode = None
            else:  # (the biased variance, for the running average)
                self.mean = mean.reshape(lay.keep)
                self.inv_std = inv_std.reshape(lay.keep)
                self.var = 1 / (self.inv_std * self.inv_std) - work.type(self.eps)
                return (y.reshape(lay.shape),)
        if self.native:
            # One threaded pass per step (see norm_kernels); nothing of x's
            # size is kept beyond x itself.
            y, mean, var = norm_kernels.batch_norm_forward(
                x.reshape(lay.ncl), gamma.astype(work, copy=False),
                beta.astype(work, copy=False), self.eps)
            self.mean = mean.reshape(lay.keep)
            self.var = var.reshape(lay.keep)
            self.inv_std = 1 / numpy.sqrt(self.var + work.type(self.eps))
            return (y.reshape(lay.shape),)
        xv = lay.view(x).astype(work, copy=False)
        with numpy.errstate(invalid='ignore', divide='ignore'):  # empty batch: nan, as NumPy
            self.mean = mean = lay.reduce(xv) / lay.count
            self.xc = xc = xv - lay.per_row(mean)
            self.var = var = lay.dot(xc, xc) / lay.count
        xp = _args.module_of(xc)
        self.inv_std = 1 / xp.sqrt(var + self.eps)
        self.scale = gamma.reshape(lay.keep).astype(work, copy=False) * self.inv_std
        y = xp.multiply(xc, lay.per_row(self.scale))
        y += lay.per_row(beta.reshape(lay.keep))
        return (y.reshape(lay.shape).astype(x.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        if xp is numpy_ns and self.native:
            return self._native_grads(targets, gys[0], xs[0], xs[1])
        if xp is numpy_ns:
            return self._numpy_grads(targets, gys[0])
        if self.cudnn_mode is not None and xp.raw and 'batch_norm' not in cudnn.failures:
            grads = self._cudnn_grads(targets, gys[0], xs[0], xs[1])
            if grads is not None:
                return grads
        lay = self.lay
        axes = lay.merged_axes
        gy = xp.reshape(xp.cast(gys[0], self.work), lay.merged)
        x = xp.reshape(xp.cast(xs[0], self.work), lay.merged)
        gamma = _per_channel(xp, xs[1], lay, self.work)
        xc = x - xp.mean(x, axis=axes, keepdims=True)
        inv_std = 1 / xp.sqrt(xp.mean(xc * xc, axis=axes, keepdims=True) + self.eps)
        x_hat = xc * inv_std
        gbeta = xp.sum(gy, axis=axes, keepdims=True)
        ggamma = xp.sum(gy * x_hat, axis=axes, keepdims=True)
        out = []
        for t in targets:
            if t == 0:
                g = (gamma * inv_std) * (gy - (x_hat * ggamma + gbeta) * (1.0 / lay.count))
            else:
                g = ggamma if t == 1 else gbeta
            out.append(xp.cast(xp.reshape(g, self.shapes[t]), self.dtypes[t]))
        return tuple(out)

    def _cudnn_grads(self, targets, gy, x, gamma):
        """(gx, ggamma, gbeta) by cuDNN from the saved statistics; None after
        recording a failure (the formula runs instead)."""
        lay = self.lay
        try:
            gx, ggamma, gbeta = cudnn.batch_norm_backward(
                x.reshape(lay.merged), gy.astype(x.dtype, copy=False).reshape(lay.merged),
                gamma.reshape(-1), self.mean.reshape(-1), self.inv_std.reshape(-1),
                lay.merged, self.cudnn_mode, self.eps)
        except cudnn.CudnnError as e:
            cudnn.record_failure('batch_norm', e)
            return None
        grads = {0: gx, 1: ggamma, 2: gbeta}
        return tuple(grads[t].reshape(self.shapes[t]).astype(self.dtypes[t], copy=False)
                     for t in targets)

    def _native_grads(self, targets, gy, x, gamma):
        lay = self.lay
        gx, ggamma, gbeta = norm_kernels.batch_norm_backward(
            gy.reshape(lay.ncl), x.reshape(lay.ncl), self.mean.ravel(),
            self.inv_std.ravel(), gamma.astype(self.work, copy=False),
            need_gx=0 in targets)
        grads = {0: gx, 1: ggamma, 2: gbeta}
        return tuple(grads[t].reshape(self.shapes[t]).astype(self.dtypes[t], copy=False)
                     for t in targets)

    def _numpy_grads(self, targets, gy):
        """The closed form on the kept forward values, in four passes over x
        for gx: gx = gy * scale + xc * a + b with per-channel a and b."""
        lay = self.lay
        gy = lay.view(gy).astype(self.work, copy=False)
        gbeta = lay.reduce(gy)
        dot = lay.dot(gy, self.xc)  # sum(gy * xc) = ggamma / inv_std
        out = []
        for t in targets:
            if t == 0:
                a = self.scale * self.inv_std * self.inv_std * dot / -lay.count
                g = numpy.multiply(self.xc, lay.per_row(a))
                g += lay.per_row(self.scale * gbeta / -lay.count)
                g += gy * lay.per_row(self.scale)
            else:
                g = dot * self.inv_std if t == 1 else gbeta
            out.append(g.reshape(self.shapes[t]).astype(self.dtypes[t], copy=False))
        return tuple(out)


def _check_running(op, lay, name, a):
    """A running statistic must be an xgrad float array, outside every graph
    and writable, with one element per channel: it is updated in place."""
    if not isinstance(a, _args.ndarray):
        raise TypeError('{}: {} must be an xgrad.ndarray (updated in place) or None, '
                        'not {}'.format(op, name, type(a).__name__))
    _check_params(op, lay, [(name, a)])
    if a._backprop_ids():
        raise XgradError('{}: {} is in a graph; running statistics are updated '
                         'in place and must not be'.format(op, name))
    data = _args.raw(a)  # (CuPy arrays are always writable and have no such flag)
    if not cuda.on_gpu(data) and not data.flags.writeable:
        raise ValueError('{}: {} is a read-only view; running statistics are updated '
                         'in place'.format(op, name))


def batch_norm(x, gamma, beta, running_mean=None, running_var=None, eps=2e-5,
               decay=0.9, axis=None):
    """Batch normalization with the statistics of this batch.

    Normalizes ``x`` over ``axis`` (see the module docstring for None) by its
    mean and biased variance, then scales by ``gamma`` and shifts by
    ``beta``. ``running_mean`` / ``running_var`` (xgrad arrays, or None to
    skip) are updated in place, as in ChainerX:
    ``r = decay * r + (1 - decay) * stat``, the variance unbiased by
    ``n / (n - 1)`` for the ``n`` elements each statistic is taken over.
    Differentiable (twice) in ``x``, ``gamma`` and ``beta``.
    """
    op = 'batch_norm'
    x = _args.as_array(x, 'x')
    gamma = _args.as_array(gamma, 'gamma', x)
    beta = _args.as_array(beta, 'beta', x)
    _args.require_float(x, op, 'x')
    lay = _layout(op, x, gamma, axis)
    _check_params(op, lay, [('gamma', gamma), ('beta', beta)])
    running = [(n, a) for n, a in (('running_mean', running_mean),
                                   ('running_var', running_var)) if a is not None]
    for name, a in running:
        _check_running(op, lay, name, a)
    _args.same_device([x, gamma, beta] + [a for _, a in running], op)
    node = BatchNorm(lay, eps)
    y = _args.apply(node, x, gamma, beta)
    unbiased_var = node.var * (lay.count / max(lay.count - 1, 1))
    for a, stat in ((running_mean, node.mean), (running_var, unbiased_var)):
        if a is not None:
            a *= decay
            a += _args.wrap((stat * (1 - decay)).reshape(a.shape).astype(a.dtype), a)
    return y


# ---------------------------------------------------------------------------
# fixed_batch_norm

class FixedBatchNorm(PyOp):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta with given per-channel
    mean and var. Inputs (x, gamma, beta, mean, var); linear in x, so the
    gradient is a few per-channel sums, written once for both namespaces."""
    op_name = 'fixed_batch_norm'

    def __init__(self, lay, eps):
        self.lay = lay
        self.eps = float(eps)

    def forward(self, inputs):
        x, gamma, beta, mean, var = inputs
        self.retain_inputs((0, 1, 3, 4))
        lay = self.lay
        self.shapes = tuple(a.shape for a in inputs)
        self.dtypes = tuple(a.dtype for a in inputs)
        work = self.work = _args.compute_dtype(*self.dtypes)
        mode = _cudnn_mode(lay, x, work, self.eps)
        if mode is not None:
            try:
                y = cudnn.batch_norm_forward_inference(
                    x.reshape(lay.merged), gamma.reshape(-1), beta.reshape(-1),
                    mean.reshape(-1), var.reshape(-1), lay.merged, mode, self.eps)
            except cudnn.CudnnError as e:
                cudnn.record_failure('batch_norm', e)
            else:
                return (y.reshape(lay.shape),)
        gamma, beta, mean, var = [a.reshape(lay.keep).astype(work, copy=False)
                                  for a in (gamma, beta, mean, var)]
        scale = gamma / _args.module_of(var).sqrt(var + self.eps)
        if lay.ncl is not None and type(x) is numpy.ndarray and x.dtype == work:
            # the channel scale by native_kernels' plane loops, split over the pool
            y = native_kernels.multiply(x.reshape(lay.ncl), scale.reshape(lay.ncl[1], 1))
            y += (beta - mean * scale).reshape(lay.ncl[1], 1)
            return (y.reshape(lay.shape),)
        y = lay.view(x) * lay.per_row(scale)
        y += lay.per_row(beta - mean * scale)
        return (y.reshape(lay.shape).astype(x.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        if (xp is numpy_ns and self.lay.ncl is not None and xs[0].dtype == self.work
                and self.work.char in 'fd'):
            return self._native_grads(targets, gys[0], *xs)
        lay = self.lay
        axes = lay.merged_axes
        x = xp.reshape(xp.cast(xs[0], self.work), lay.merged)
        gamma, mean, var = [_per_channel(xp, a, lay, self.work) for a in xs[1:]]
        gy = xp.reshape(xp.cast(gys[0], self.work), lay.merged)
        inv_std = 1 / xp.sqrt(var + self.eps)
        gsum = gdot = None
        if 2 in targets or 3 in targets:
            gsum = xp.sum(gy, axis=axes, keepdims=True)
        if 1 in targets or 4 in targets:
            gdot = xp.sum(gy * (x - mean), axis=axes, keepdims=True)
        return tuple(xp.cast(xp.reshape(_fixed_gradient(
            t, lambda: gy * (gamma * inv_std), gdot, gsum, gamma, inv_std), self.shapes[t]),
            self.dtypes[t]) for t in targets)


    def _native_grads(self, targets, gy, x, gamma, mean, var):
        """The per-channel sums of gy and gy * (x - mean) by batch norm's
        kernel (one pass, in double; NumPy took a temporary for each
        product and a reduce over (N, L)), gx a per-channel scale of gy."""
        lay, work = self.lay, self.work
        gamma, mean, var = [a.reshape(-1).astype(work, copy=False) for a in (gamma, mean, var)]
        inv_std = 1 / numpy.sqrt(var + work.type(self.eps))
        gy = gy.astype(work, copy=False)
        # (an inv_std of ones: the kernel's "ggamma" is then the plain sum)
        _, gdot, gsum = norm_kernels.batch_norm_backward(
            gy.reshape(lay.ncl), x.reshape(lay.ncl), mean, numpy.ones_like(mean), gamma,
            need_gx=False)
        def gx():
            return native_kernels.multiply(gy.reshape(lay.ncl),
                                           (gamma * inv_std).reshape(lay.ncl[1], 1))
        return tuple(_fixed_gradient(t, gx, gdot, gsum, gamma, inv_std).reshape(
            self.shapes[t]).astype(self.dtypes[t], copy=False) for t in targets)


def _fixed_gradient(t, gx, gdot, gsum, gamma, inv_std):
    """fixed_batch_norm's gradient to input t (x, gamma, beta, mean, var)
    from the per-channel sums gsum = sum(gy) and gdot = sum(gy (x - mean));
    ``gx`` computes x's."""
    if t == 0:
        return gx()
    if t == 1:
        return gdot * inv_std
    if t == 2:
        return gsum
    if t == 3:
        return -(gsum * gamma * inv_std)
    return gdot * gamma * (inv_std * inv_std * inv_std) * -0.5


def fixed_batch_norm(x, gamma, beta, mean, var, eps=2e-5, axis=None):
    """Batch normalization with fixed statistics ``mean`` and ``var`` (e.g.
    the running averages, at inference): ``(x - mean) / sqrt(var + eps) *
    gamma + beta`` per channel. ChainerX propagates no gradient here; xgrad
    differentiates (twice) in all five inputs, as Chainer's
    ``fixed_batch_normalization`` does."""
    op = 'fixed_batch_norm'
    x = _args.as_array(x, 'x')
    params = [(name, _args.as_array(a, name, x)) for name, a in (
        ('gamma', gamma), ('beta', beta), ('mean', mean), ('var', var))]
    _args.require_float(x, op, 'x')
    lay = _layout(op, x, params[0][1], axis)
    _check_params(op, lay, params)
    arrays = [x] + [a for _, a in params]
    _args.same_device(arrays, op)
    return _args.apply(FixedBatchNorm(lay, eps), *arrays)


# ---------------------------------------------------------------------------
# layer_norm

class LayerNorm(PyOp):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, mean and (biased) var
    of each row of x seen as (R, D), D the trailing elements gamma covers.
    Inputs (x, gamma, beta).

    On the host in float32/float64, forward and first gradient are one
    threaded pass each (norm_kernels.layer_norm_*); elsewhere (float16, GPU)
    the same closed form by ufuncs,
        gx = inv_std * (g - mean(g) - x_hat * mean(g * x_hat)),  g = gy * gamma.
    The recorded gradient (double backprop) recomputes the statistics from
    the retained x by xgrad ops, so their dependence on x is differentiated.
    """
    op_name = 'layer_norm'

    def __init__(self, rows, eps):
        self.rows = rows
        self.eps = float(eps)

    def forward(self, inputs):
        x, gamma, beta = inputs
        self.retain_inputs((0, 1))
        self.shapes = tuple(a.shape for a in inputs)
        self.dtypes = tuple(a.dtype for a in inputs)
        self.work = work = _args.compute_dtype(*self.dtypes)
        self.native = x.dtype == work and not cuda.on_gpu(x)
        rows = self.rows
        if self.native:
            y, self.mean, self.inv_std = norm_kernels.layer_norm_forward(
                x.reshape(rows), gamma.astype(work, copy=False), beta.astype(work, copy=False),
                self.eps)
            return (y.reshape(x.shape),)
        xp = _args.module_of(x)
        xv = x.reshape(rows).astype(work, copy=False)
        with numpy.errstate(invalid='ignore', divide='ignore'):  # D = 0: nan, as NumPy
            mean = xv.mean(axis=1, keepdims=True)
            xc = xv - mean
            self.inv_std = 1 / xp.sqrt((xc * xc).mean(axis=1, keepdims=True) + self.eps)
        self.mean = mean
        y = xc * self.inv_std * gamma.reshape(rows[1]).astype(work, copy=False)
        y += beta.reshape(rows[1]).astype(work, copy=False)
        return (y.reshape(x.shape).astype(x.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        if xp is numpy_ns and self.native:
            gx, ggamma, gbeta = norm_kernels.layer_norm_backward(
                gys[0].reshape(self.rows), xs[0].reshape(self.rows), self.mean,
                self.inv_std, xs[1].astype(self.work, copy=False), need_gx=0 in targets)
            grads = {0: gx, 1: ggamma, 2: gbeta}
            return tuple(grads[t].reshape(self.shapes[t]).astype(self.dtypes[t], copy=False)
                         for t in targets)
        rows = self.rows
        gy = xp.reshape(xp.cast(gys[0], self.work), rows)
        x = xp.reshape(xp.cast(xs[0], self.work), rows)
        gamma = xp.reshape(xp.cast(xs[1], self.work), (rows[1],))
        xc = x - xp.mean(x, axis=1, keepdims=True)
        inv_std = 1 / xp.sqrt(xp.mean(xc * xc, axis=1, keepdims=True) + self.eps)
        x_hat = xc * inv_std
        out = []
        for t in targets:
            if t == 0:
                g = gy * gamma
                g = inv_std * (g - xp.mean(g, axis=1, keepdims=True)
                               - x_hat * xp.mean(g * x_hat, axis=1, keepdims=True))
            else:
                g = xp.sum(gy * x_hat if t == 1 else gy, axis=0)
            out.append(xp.cast(xp.reshape(g, self.shapes[t]), self.dtypes[t]))
        return tuple(out)


def layer_norm(x, gamma, beta, eps=1e-5):
    """Layer normalization: each sample of ``x`` normalized over its trailing
    ``gamma.ndim`` axes by their mean and biased variance, then scaled by
    ``gamma`` and shifted by ``beta`` (both of shape ``x.shape[-gamma.ndim:]``),
    as ``torch.nn.functional.layer_norm(x, gamma.shape, gamma, beta, eps)``
    and Chainer's ``F.layer_normalization`` (2-D x). Differentiable (twice)
    in ``x``, ``gamma`` and ``beta``.
    """
    op = 'layer_norm'
    x = _args.as_array(x, 'x')
    gamma = _args.as_array(gamma, 'gamma', x)
    beta = _args.as_array(beta, 'beta', x)
    for name, a in (('x', x), ('gamma', gamma), ('beta', beta)):
        _args.require_float(a, op, name)
    k = gamma.ndim
    if k < 1 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != tuple(gamma.shape):
        raise _args.DimensionError(
            '{}: gamma has shape {}, which must be the trailing axes of x of shape {} '
            '(at least one axis)'.format(op, gamma.shape, x.shape))
    if beta.shape != gamma.shape:
        raise _args.DimensionError('{}: beta has shape {}, gamma {}: they must match'.format(
            op, beta.shape, gamma.shape))
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 0):
        raise ValueError('{}: eps must be a number > 0, not {}'.format(op, describe(eps)))
    _args.same_device([x, gamma, beta], op)
    d = math.prod(gamma.shape)
    r = math.prod(x.shape[:x.ndim - k])
    return _args.apply(LayerNorm((r, d), eps), x, gamma, beta)


# ---------------------------------------------------------------------------
# Registry

def _ref_layout(x, gamma, axis):
    axes = tuple(sorted(a % x.ndim for a in numpy.atleast_1d(0 if axis is None else axis)))
    keep = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    return axes, keep


def _fixed_batch_norm_ref(x, gamma, beta, mean, var, eps=2e-5, axis=None):
    _, keep = _ref_layout(x, gamma, axis)
    g, b, m, v = [a.astype(F64).reshape(keep) for a in (gamma, beta, mean, var)]
    return ((x.astype(F64) - m) / numpy.sqrt(v + eps) * g + b).astype(x.dtype)


def _batch_norm_ref(x, gamma, beta, eps=2e-5, decay=0.9, axis=None):
    axes, keep = _ref_layout(x, gamma, axis)
    xd = x.astype(F64)
    mean, var = xd.mean(axis=axes), xd.var(axis=axes)
    return _fixed_batch_norm_ref(x, gamma, beta, mean, var, eps, axis)


_NORM_SAMPLES = [
    ((4, 3), (3,), {}),                   # (N, C): over axis 0 (the default)
    ((3, 2, 2, 2), (2,), {'axis': (0, 2, 3)}),  # (N, C, H, W), per channel
    ((3, 2, 3), (2, 3), {}),              # channel shape (C, L): over axis 0
    ((2, 3, 4), (2, 4), {'axis': 1}),     # kept axes on both sides of the reduced one
    ((4, 3), (3,), {'axis': -2, 'eps': 0.5}),
    ((3, 0), (0,), {}),                   # no channels
]

register(OpInfo(
    'batch_norm', batch_norm, ref=_batch_norm_ref,
    samples=[Sample(x, g, g, **kw) for x, g, kw in _NORM_SAMPLES]
    + [Sample((4, 3), Arg((3,), dtype=F64), Arg((3,), dtype=F64), name='f64-params'),
       # rows of 16: the native kernels (float32/float64 x)
       Sample((2, 2, 4, 4), (2,), (2,), axis=(0, 2, 3), name='native-2x2x4x4')],
    # x distinct: no group of nearly equal elements, whose variance near 0
    # makes the second derivatives ill-conditioned
    domain=(distinct, real, real)))

register(OpInfo(
    'fixed_batch_norm', fixed_batch_norm, ref=_fixed_batch_norm_ref,
    samples=[Sample(x, g, g, g, g, **kw) for x, g, kw in _NORM_SAMPLES],
    domain=(real, real, real, real, positive)))


def _layer_norm_ref(x, gamma, beta, eps=1e-5):
    axes = tuple(range(x.ndim - gamma.ndim, x.ndim))
    xd = x.astype(F64)
    mean, var = xd.mean(axis=axes, keepdims=True), xd.var(axis=axes, keepdims=True)
    return ((xd - mean) / numpy.sqrt(var + eps) * gamma.astype(F64)
            + beta.astype(F64)).astype(x.dtype)


register(OpInfo(
    'layer_norm', layer_norm, ref=_layer_norm_ref,
    samples=[Sample((4, 5), (5,), (5,)),
             Sample((2, 3, 4), (3, 4), (3, 4), name='two-axes'),
             Sample((2, 3, 6), (6,), (6,), eps=0.5),
             Sample((3,), (3,), (3,), name='one-sample'),
             Sample((4, 3), Arg((3,), dtype=F64), Arg((3,), dtype=F64), name='f64-params'),
             Sample((0, 4), (4,), (4,), name='no-rows')],
    # x distinct: no row of nearly equal elements (variance near 0)
    domain=(distinct, real, real)))
