"""Loss functions with ChainerX's names and arguments, and ``accuracy``.

All losses are unreduced, as in ChainerX: one value per element
(``squared_error``, ``absolute_error``, ``huber_loss``,
``gaussian_kl_divergence``, ``sigmoid_cross_entropy``), per sample
(``softmax_cross_entropy``) or per sample and class (``hinge``); take
``mean``/``sum`` of the result for a scalar loss. A label of -1 is ignored
(its loss and gradient are 0) by the two cross entropies, as in ChainerX.

The elementwise losses are compositions of xgrad ops (exact, and twice
differentiable for free). The cross entropies are single ops with a stable
forward (log1p(exp(-|x|)), log-softmax with the maximum subtracted) and
closed-form gradients written against ``xp`` (see ``_op.pyx``), so they are
differentiable again.
"""

import numpy

from xgrad._backend import cuda, native_kernels
from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops._xp import numpy_ns
from xgrad._ops.elementwise import absolute, exp, relu, square, subtract
from xgrad._ops.logic import where
from xgrad._ops.reduction import mean as _mean, sum as _sum
from xgrad._ops.statistics import softmax
from xgrad._ops.registry import (
    F64, Arg, OpInfo, Sample, away_from, distinct, integers, register, untied, within)

__all__ = ['squared_error', 'absolute_error', 'huber_loss', 'gaussian_kl_divergence',
           'sigmoid_cross_entropy', 'softmax_cross_entropy', 'hinge', 'accuracy']

I64 = numpy.dtype('int64')


# ---------------------------------------------------------------------------
# Argument checks

def _pair(op, x1, x2, float_only=False, names=('x1', 'x2')):
    """x1 and x2 checked to broadcast together (and to be floats): array
    operands as xgrad arrays, a Python scalar kept as a (weak) scalar."""
    arrays, values = _args.operands(op, x1, x2, names=names)
    _args.check_broadcast(op, *values)
    if float_only:
        for name, v in zip(names, values):
            if isinstance(v, _args.ndarray):
                _args.require_float(v, op, name)
    return values


def _labels(op, name, t, shape=None):
    """The raw values of integer labels ``t`` (of exactly ``shape`` if given)."""
    _args.require_dtype_kind(t, 'iu', op, name)
    if shape is not None and t.shape != tuple(shape):
        raise _args.DimensionError('{}: {} has shape {}, expected {}'.format(
            op, name, t.shape, tuple(shape)))
    return _args.raw(t)


def _class_labels(op, name, t, n_classes, ignore):
    """Raw class labels, each in [0, n_classes) or -1 where ``ignore``;
    xgrad.IndexError names the first one out of range. Labels on a GPU are
    not checked here (that would wait for the GPU): the op's result is NaN
    for a sample whose label is out of range."""
    if cuda.on_gpu(t):
        return t
    low = -1 if ignore else 0
    bad = (t < low) | (t >= n_classes)
    if bad.any():
        raise _args.IndexError('{}: {} holds label {}, out of range for {} classes{}'.format(
            op, name, t[bad][0], n_classes, ' (-1: ignored)' if ignore else ''))
    return t


# ---------------------------------------------------------------------------
# Elementwise regression losses (compositions)

def squared_error(x1, x2):
    """(x1 - x2) ** 2, elementwise (broadcasting as NumPy)."""
    x1, x2 = _pair('squared_error', x1, x2)
    return square(subtract(x1, x2))


def absolute_error(x1, x2):
    """|x1 - x2|, elementwise (broadcasting as NumPy). The gradient at
    x1 == x2 is 0."""
    x1, x2 = _pair('absolute_error', x1, x2)
    return absolute(subtract(x1, x2))


class HuberLoss(PyOp):
    """ChainerX's huber_loss of two host float32/float64 arrays of one shape
    and dtype in one pass each way (native_kernels.huber_forward/_grad):
    the composition's bits, without its eight forward and four backward
    passes; gx1 = gy * clip(x1 - x2, -delta, delta), gx2 = -gx1 (recorded
    from xgrad's clip and subtract for double backprop), NaN where x1 - x2
    is infinite, as the composition's."""
    op_name = 'huber_loss'

    def __init__(self, delta):
        self.delta = delta

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        return (native_kernels.huber_forward(inputs[0], inputs[1], self.delta),)

    def grads(self, xp, targets, gys, xs, ys):
        g = None
        if xp is numpy_ns:
            g = native_kernels.huber_grad(numpy.ascontiguousarray(gys[0]), xs[0], xs[1],
                                          self.delta)
        if g is None:  # (recorded, or a gy the kernel does not take)
            a = xs[0] - xs[1]
            g1 = gys[0] * xp.where(xp.isinf(a), numpy.nan, xp.clip(a, -self.delta, self.delta))
            g = (g1, -g1)
        return tuple(g[t] for t in targets)


def _one_pass_huber(x1, x2):
    """Whether HuberLoss takes x1 and x2: host float32/float64 arrays of
    one shape and dtype, C-contiguous, aligned and in native byte order."""
    if not (isinstance(x1, _args.ndarray) and isinstance(x2, _args.ndarray)):
        return False
    r1, r2 = _args.raw(x1), _args.raw(x2)
    return (type(r1) is numpy.ndarray and type(r2) is numpy.ndarray and r1.dtype == r2.dtype
            and r1.dtype.char in 'fd' and r1.shape == r2.shape
            and all(r.flags.c_contiguous and r.flags.aligned and r.dtype.isnative
                    for r in (r1, r2)))


def huber_loss(x1, x2, delta):
    """Huber loss of a = x1 - x2, elementwise: a**2 / 2 where |a| < delta,
    else delta * (|a| - delta / 2). Float arrays only; ``delta`` > 0."""
    op = 'huber_loss'
    if not _args.is_scalar(delta) or isinstance(delta, bool):
        raise TypeError('{}: delta must be a number, not {}'.format(op, type(delta).__name__))
    if not delta > 0:
        raise ValueError('{}: delta must be positive, not {}'.format(op, delta))
    x1, x2 = _pair(op, x1, x2, float_only=True)
    delta = float(delta)
    if _one_pass_huber(x1, x2):
        return _args.apply(HuberLoss(delta), x1, x2)
    a = subtract(x1, x2)
    abs_a = absolute(a)
    return where(abs_a < delta, square(a) * 0.5, (abs_a - 0.5 * delta) * delta)


_REDUCE = ('no', 'sum', 'mean')


def gaussian_kl_divergence(mean, ln_var, reduce='no'):
    """KL divergence of N(mean, exp(ln_var)) (diagonal) from N(0, I):
    (mean**2 + exp(ln_var) - ln_var - 1) / 2 per element. ``reduce``: 'no'
    (ChainerX's elementwise result, the default), or Chainer's 'sum' or
    'mean' over all elements."""
    op = 'gaussian_kl_divergence'
    if reduce not in _REDUCE:
        raise ValueError("{}: reduce must be one of {}, not {!r}".format(op, _REDUCE, reduce))
    mean, ln_var = _pair(op, mean, ln_var, float_only=True, names=('mean', 'ln_var'))
    kl = (square(mean) + exp(ln_var) - ln_var - 1) * 0.5
    if reduce == 'sum':
        return _sum(kl)
    if reduce == 'mean':
        return _mean(kl)
    return kl


# ---------------------------------------------------------------------------
# sigmoid_cross_entropy

class SigmoidCrossEntropy(PyOp):
    """loss = log(1 + exp(-|x|)) + max(x, 0) - x * t where t != -1, else 0;
    gx = gy * (sigmoid(x) - t), 0 where ignored. Any integer label other
    than -1 enters linearly, as in ChainerX and Chainer (0 and 1 are the
    binary targets). On the host the first two terms are the softplus
    kernel's and the gradient's sigmoid the sigmoid kernel's (one pass
    each instead of NumPy's four), and the ignore mask is skipped when no
    label is -1 (on the host)."""
    op_name = 'sigmoid_cross_entropy'

    def __init__(self, t):
        self.t = t  # raw int labels, -1: ignored

    def forward(self, inputs):
        x = inputs[0]
        self.retain_inputs((0,))
        self.dtype = x.dtype
        work = _args.compute_dtype(x.dtype)
        xw = x.astype(work, copy=False)
        xp = _args.module_of(xw)
        keep = self.t != -1
        # (asked on the host only: on a GPU the answer would be a device read)
        self.ignores = xp is not numpy or not keep.all()
        self.target = (self.t * keep if self.ignores else self.t).astype(work)
        self.keep = keep.astype(work)
        loss = native_kernels.softplus_forward(xw, 1.0) if xp is numpy else None
        if loss is not None:  # (the rest by the pool's loops too)
            loss = native_kernels.subtract(loss, native_kernels.multiply(xw, self.target))
        else:
            loss = xp.log1p(xp.exp(-xp.abs(xw)))
            loss += xp.maximum(xw, 0)
            loss -= xw * self.target
        if self.ignores:
            loss *= self.keep
        return (loss.astype(x.dtype, copy=False),)

    def grads(self, xp, targets, gys, xs, ys):
        if xp is numpy_ns:
            gx = self._host_grad(gys[0], xs[0])
            if gx is not None:
                return (gx,)
        x = xp.cast(xs[0], self.target.dtype)
        gy = xp.cast(gys[0], self.target.dtype)
        t = xp.constant(self.target, gy)
        keep = xp.constant(self.keep, gy)
        return (xp.cast(gy * keep * (xp.sigmoid(x) - t), self.dtype),)

    def _host_grad(self, gy, x):
        """gy * (sigmoid(x) - t) (* keep) by the sigmoid kernel and the pool's
        arithmetic; None for dtypes it does not take."""
        work = self.target.dtype
        s = native_kernels.sigmoid_forward(x.astype(work, copy=False))
        if s is None or s.dtype != work:
            return None
        s = native_kernels.multiply(native_kernels.subtract(s, self.target), gy)
        if self.ignores:
            s *= self.keep
        return s.astype(self.dtype, copy=False)


def sigmoid_cross_entropy(x1, x2):
    """Cross entropy of the sigmoid of logits ``x1`` against integer labels
    ``x2`` (same shape; -1 to ignore), elementwise:
    ``log(1 + exp(x1)) - x1 * x2``. The binary targets are 0 and 1; other
    labels enter linearly, as in ChainerX. Float logits only; the gradient
    goes to ``x1``."""
    op = 'sigmoid_cross_entropy'
    x1 = _args.as_array(x1, 'x1')
    x2 = _args.as_array(x2, 'x2', x1)
    _args.require_float(x1, op, 'x1')
    t = _labels(op, 'x2', x2, x1.shape)
    _args.same_device([x1, x2], op)
    return _args.apply(SigmoidCrossEntropy(t), x1)


# ---------------------------------------------------------------------------
# softmax_cross_entropy

class SoftmaxCrossEntropy(PyOp):
    """loss_i = logsumexp(x_i) - x_i[t_i] (0 where t_i == -1), for logits x
    of shape (N, C); gx_i = gy_i * (softmax(x_i) - onehot(t_i)).

    The forward keeps softmax(x) for the NumPy gradient; the recorded one
    recomputes it from the retained x through ``softmax``."""
    op_name = 'softmax_cross_entropy'

    def __init__(self, t):
        self.t = t  # raw int labels in [-1, C)

    def forward(self, inputs):
        x = inputs[0]
        self.retain_inputs((0,))
        self.dtype = x.dtype
        n, c = x.shape
        if cuda.on_gpu(x):
            return self._gpu_forward(x)
        work = _args.compute_dtype(x.dtype)
        rows = numpy.arange(n)
        keep = self.t != -1
        self.label = numpy.where(keep, self.t, 0)
        self.keep = keep.astype(work)
        xw = x.astype(work, copy=False)
        if c == 0:  # no classes: every label is -1 (checked), every loss 0
            self.p = numpy.zeros((n, 0), work)
            return (numpy.zeros(n, x.dtype),)
        logp = native_kernels.softmax_last_axis(xw, True)  # (vectorised rows)
        if logp is not None:
            self.p = native_kernels.exp_forward(logp)
            loss = -logp[rows, self.label] * self.keep
            return (loss.astype(x.dtype, copy=False),)
        shifted = xw - xw.max(axis=1, keepdims=True)
        p = numpy.exp(shifted)
        s = p.sum(axis=1, keepdims=True)
        p /= s
        self.p = p
        loss = (numpy.log(s[:, 0]) - shifted[rows, self.label]) * self.keep
        return (loss.astype(x.dtype, copy=False),)

    def _gpu_forward(self, x):
        """One kernel (ours); the gradient recomputes the softmax from x."""
        cp = cuda.cupy()
        work = _args.compute_dtype(x.dtype)
        n, c = x.shape
        keep = self.t != -1
        self.label = cp.where(keep, self.t, 0)
        invalid = (self.t < -1) | (self.t >= c)  # not checked on the host: NaN
        self.keep = cp.where(invalid, cp.nan, keep).astype(work)
        if c == 0:  # no classes: every label is -1 (checked), every loss 0
            self.p = cp.zeros((n, 0), work)
            return (cp.zeros(n, x.dtype),)
        self.p = None
        return (cuda.kernels().softmax_cross_entropy(cp, x, self.t),)

    def grads(self, xp, targets, gys, xs, ys):
        if self.p is None and xp.raw:  # on a GPU, nothing recorded: one kernel
            return (cuda.kernels().softmax_cross_entropy_backward(
                cuda.cupy(), gys[0], xs[0], self.t),)
        n, c = xs[0].shape
        work = _args.compute_dtype(self.dtype)
        gy = xp.cast(gys[0], work)
        if xp is numpy_ns:
            w = gy * self.keep
            gx = self.p * w[:, None]
            # Only the kept rows: an ignored row's label is a stand-in 0,
            # which is no column at all when there are no classes (C = 0).
            kept = numpy.flatnonzero(self.keep)
            gx[kept, self.label[kept]] -= w[kept]
        else:
            xpl = _args.module_of(self.label)
            onehot = (self.label[:, None] == xpl.arange(c)[None, :]).astype(work)
            p = softmax(xp.cast(xs[0], work), axis=1) if c else xp.constant(self.p, gy)
            w = xp.reshape(gy * xp.constant(self.keep, gy), (n, 1))
            gx = (p - xp.constant(onehot, gy)) * w
        return (xp.cast(gx, self.dtype),)


def _logits_and_labels(op, x, t):
    """Checked (N, C) float logits and (N,) integer labels."""
    x = _args.as_array(x, 'x1')
    t = _args.as_array(t, 'x2', x)
    _args.require_float(x, op, 'x1')
    if x.ndim != 2:
        raise _args.DimensionError('{}: x1 must be 2-dimensional (N, C), not of shape {}'
                                   .format(op, x.shape))
    if t.ndim != 1 or t.shape[0] != x.shape[0]:
        raise _args.DimensionError('{}: x2 must be 1-dimensional with x1.shape[0] = {} '
                                   'labels, not of shape {}'.format(op, x.shape[0], t.shape))
    _args.same_device([x, t], op)
    return x, _labels(op, 'x2', t)


def softmax_cross_entropy(x1, x2):
    """Cross entropy of the softmax of logits ``x1`` (N, C) against class
    labels ``x2`` (N,), one loss per sample; label -1 is ignored (loss 0).
    The gradient goes to ``x1``.

    ChainerX also gives loss 0 for other labels outside [0, C); xgrad raises
    xgrad.IndexError for them (Chainer's softmax_cross_entropy rejects them
    too), as they are nearly always a bug."""
    op = 'softmax_cross_entropy'
    x, t = _logits_and_labels(op, x1, x2)
    _class_labels(op, 'x2', t, x.shape[1], ignore=True)
    return _args.apply(SoftmaxCrossEntropy(t), x)


# ---------------------------------------------------------------------------
# hinge

def hinge(x1, x2, norm=1.0):
    """Hinge loss of scores ``x1`` (N, C) for class labels ``x2`` (N,), per
    sample and class: max(0, 1 - x) ** norm for the true class, max(0, 1 + x)
    ** norm for the others (ChainerX: unreduced, ``norm`` a positive number;
    1 and 2 are Chainer's 'L1' and 'L2')."""
    op = 'hinge'
    if not _args.is_scalar(norm) or isinstance(norm, bool):
        raise TypeError('{}: norm must be a number, not {}'.format(op, type(norm).__name__))
    if not norm > 0:
        raise ValueError('{}: norm must be positive, not {}'.format(op, norm))
    x, t = _logits_and_labels(op, x1, x2)
    n, c = x.shape
    _class_labels(op, 'x2', t, c, ignore=False)
    xp = _args.module_of(t)
    sign = xp.ones((n, c), x.dtype)
    if xp is numpy:
        sign[numpy.arange(n), t] = -1
    elif c:  # labels checked on the device: NaN rows for those out of range
        sign[xp.arange(n), xp.clip(t, 0, c - 1)] = -1
        sign = xp.where(((t < 0) | (t >= c))[:, None], xp.nan, sign).astype(x.dtype)
    margin = relu(x * _args.wrap(sign, x) + 1)
    return margin if norm == 1 else margin ** float(norm)


# ---------------------------------------------------------------------------
# accuracy (no gradient)

def accuracy(y, t, ignore_label=None):
    """The fraction of samples whose highest score in ``y`` (N, C, ...) is at
    the label in ``t`` (N, ...; y may have extra trailing axes of size 1), as a 0-d array of ``y``'s dtype; labels
    equal to ``ignore_label`` are left out (0 when all are). Chainer's
    ``accuracy``; no gradient."""
    op = 'accuracy'
    y = _args.as_array(y, 'y')
    t = _args.as_array(t, 't', y)
    _args.require_float(y, op, 'y')
    if y.ndim < 2:
        raise _args.DimensionError('{}: y must have a class axis 1, not shape {}'.format(
            op, y.shape))
    if ignore_label is not None and not isinstance(ignore_label, (int, numpy.integer)):
        raise TypeError('{}: ignore_label must be an int or None, not {}'.format(
            op, type(ignore_label).__name__))
    # y's axes after t's may only be singletons ((10, 3, 1) scores t (10,)),
    # as in Chainer and ChainerX.
    labels = _labels(op, 't', t, y.shape[:1] + y.shape[2:t.ndim + 1])
    if any(n != 1 for n in y.shape[t.ndim + 1:]):
        raise _args.DimensionError('{}: y of shape {} has non-singleton axes beyond the '
                                   'label shape {}'.format(op, y.shape, t.shape))
    _args.same_device([y, t], op)
    if y.ndim > t.ndim + 1:
        y = y.reshape(y.shape[:t.ndim + 1])
    return _args.constant(y, _accuracy, _args.raw(y), labels, ignore_label)


def _accuracy(y, t, ignore_label=None):
    pred = y.argmax(axis=1) if y.shape[1] else _args.module_of(t).full(t.shape, -1)
    hit = pred == t
    if ignore_label is None:
        return _args.array_result(hit.sum() / t.size if t.size else 0.0).astype(y.dtype)
    counted = t != ignore_label
    hit &= counted
    total = counted.sum()  # on the device: no host read
    xp = _args.module_of(total)
    return xp.where(total > 0, hit.sum() / xp.maximum(total, 1), 0.0).astype(y.dtype)


# ---------------------------------------------------------------------------
# Registry

BINARY_SAMPLES = (Sample((2, 3), (2, 3)), Sample((2, 3), (3,)), Sample((2, 1), (1, 3)),
                  Sample((), ()), Sample((0, 3), (3,)))


def _kink_free_differences(*kinks, margin=0.15):
    """Joint sampler: x1, x2 whose difference stays ``margin`` away from each
    of ``kinks`` (and their negatives) everywhere."""
    points = [p for k in kinks for p in (k, -k)]

    def gen(rs, shapes):
        full = numpy.broadcast_shapes(*shapes)
        for _ in range(1000):
            a = rs.uniform(-1.5, 1.5, shapes[0])
            b = rs.uniform(-1.5, 1.5, shapes[1])
            d = numpy.broadcast_to(a, full) - numpy.broadcast_to(b, full)
            if all(numpy.all(numpy.abs(d - p) >= margin) for p in points):
                return [a, b]
        raise AssertionError('could not draw differences away from {}'.format(points))
    return gen


def _huber_ref(x1, x2, delta):
    a = x1 - x2
    return numpy.where(numpy.abs(a) < delta, 0.5 * a * a, delta * (numpy.abs(a) - 0.5 * delta))


def _gaussian_kl_ref(mean, ln_var, reduce='no'):
    kl = (mean * mean + numpy.exp(ln_var) - ln_var - 1) * 0.5
    return kl if reduce == 'no' else getattr(numpy, reduce)(kl)


def _sigmoid_cross_entropy_ref(x, t):
    xd = x.astype(F64)
    loss = numpy.logaddexp(0, xd) - xd * t
    return numpy.where(t == -1, 0, loss).astype(x.dtype)


def _softmax_cross_entropy_ref(x, t):
    xd = x.astype(F64)
    n, c = x.shape
    if c == 0:
        return numpy.zeros(n, x.dtype)
    m = xd.max(axis=1, keepdims=True)
    log_p = xd - m - numpy.log(numpy.exp(xd - m).sum(axis=1, keepdims=True))
    loss = -log_p[numpy.arange(n), numpy.maximum(t, 0)]
    return numpy.where(t == -1, 0, loss).astype(x.dtype)


def _hinge_ref(x, t, norm=1.0):
    n, c = x.shape
    target = numpy.arange(c) == t[:, None]
    margin = numpy.maximum(0, numpy.where(target, 1 - x, 1 + x))
    # (the power in the margin's own dtype: a bool x's margin is an integer)
    return margin if norm == 1 else margin ** margin.dtype.type(norm)


def _labels_arg(shape, low, high):
    return Arg(shape, dtype=I64, domain=integers(low, high))


register(OpInfo('squared_error', squared_error, ref=lambda a, b: numpy.square(a - b),
                samples=BINARY_SAMPLES, int_dtypes=(I64, numpy.int32), promotion='result_type'))
register(OpInfo('absolute_error', absolute_error, ref=lambda a, b: numpy.abs(a - b),
                samples=BINARY_SAMPLES, gen=untied, int_dtypes=(I64, numpy.int32),
                promotion='result_type'))
register(OpInfo('huber_loss', huber_loss, ref=_huber_ref,
                samples=[Sample((2, 3), (2, 3), delta=1.0), Sample((2, 3), (3,), delta=0.5),
                         Sample((), (), delta=1.0), Sample((0, 3), (3,), delta=1.0)],
                gen=_kink_free_differences(0.5, 1.0), promotion='result_type'))
register(OpInfo('gaussian_kl_divergence', gaussian_kl_divergence, ref=_gaussian_kl_ref,
                samples=[Sample((2, 3), (2, 3)), Sample((2, 3), (2, 3), reduce='sum'),
                         Sample((2, 3), (3,), reduce='mean'), Sample((), ()),
                         Sample((0, 3), (0, 3), reduce='sum')], promotion='result_type'))
register(OpInfo('sigmoid_cross_entropy', sigmoid_cross_entropy,
                ref=_sigmoid_cross_entropy_ref,
                samples=[Sample((3, 4), _labels_arg((3, 4), -1, 2)),
                         Sample((), _labels_arg((), 0, 2)),
                         Sample((0, 3), _labels_arg((0, 3), 0, 2))],
                domain=within(-3, 3)))
register(OpInfo('softmax_cross_entropy', softmax_cross_entropy,
                ref=_softmax_cross_entropy_ref,
                samples=[Sample((4, 3), _labels_arg((4,), -1, 3)),
                         Sample((2, 5), _labels_arg((2,), 0, 5)),
                         Sample((1, 1), _labels_arg((1,), 0, 1)),
                         Sample((0, 3), _labels_arg((0,), 0, 3))],
                domain=within(-3, 3)))
register(OpInfo('hinge', hinge, ref=_hinge_ref,
                samples=[Sample((3, 4), _labels_arg((3,), 0, 4)),
                         Sample((3, 4), _labels_arg((3,), 0, 4), norm=2.0),
                         Sample((0, 4), _labels_arg((0,), 0, 4))],
                domain=away_from(-1.0, 1.0)))
register(OpInfo('accuracy', accuracy, ref=_accuracy, differentiable=False,
                samples=[Sample((5, 3), _labels_arg((5,), 0, 3)),
                         Sample((5, 3), _labels_arg((5,), -1, 3), ignore_label=-1),
                         Sample((2, 3, 2), _labels_arg((2, 2), 0, 3)),
                         Sample((0, 3), _labels_arg((0,), 0, 3))],
                domain=distinct))
