"""Numerical gradient checks: ``check_backward`` and ``check_double_backward``.

ChainerX's signatures and procedure (semantics.md section 11), with the
standard tolerance ``|b - n| <= atol + rtol * |n|`` (ChainerX swapped the two).
Numerical gradients are central differences accumulated in float64.
"""

import numpy

from xgrad import _core
from xgrad._errors import GradientCheckError, XgradError
from xgrad._ops.creation import from_numpy


def _default_bp(inputs, backprop_id):
    if backprop_id is not None:
        return backprop_id
    return inputs[0].device.context._default_id


def _leaf_copy(x, data=None):
    """A fresh leaf with ``x``'s data (or ``data``), grad-required on every
    graph ``x`` has a node on."""
    copy = from_numpy(numpy.array(x.to_numpy() if data is None else data,
                                  copy=True), x.device)
    for bp in x._backprop_ids():
        copy.require_grad(bp)
    return copy


def _as_tuple(outputs, what):
    if isinstance(outputs, _core.ndarray):
        return (outputs,)
    if not isinstance(outputs, (list, tuple)):
        raise GradientCheckError('{} must return a tuple or list of arrays, not {}'
                                 .format(what, type(outputs).__name__))
    for i, y in enumerate(outputs):
        if y is not None and not isinstance(y, _core.ndarray):
            raise GradientCheckError('{} returned a {} as output {}; outputs must '
                                     'be xgrad arrays'.format(what, type(y).__name__, i))
    return tuple(outputs)


def _check_eps(inputs, eps):
    if len(eps) != len(inputs):
        raise XgradError('Number of input arrays and eps arrays do not match: '
                         '{} inputs, {} eps'.format(len(inputs), len(eps)))
    for i, (x, e) in enumerate(zip(inputs, eps)):
        if not isinstance(e, _core.ndarray):
            raise TypeError('eps[{}] must be an xgrad.ndarray'.format(i))
        if e.shape != x.shape:
            raise XgradError('eps[{}] has shape {}, input {} has shape {}'.format(
                i, e.shape, i, x.shape))
        if e.dtype != x.dtype:
            raise XgradError('eps[{}] has dtype {}, input {} has dtype {}'.format(
                i, e.dtype, i, x.dtype))


def _backward_gradients(func, inputs, grad_outputs, bp):
    """Analytic input gradients of ``func`` (None for inputs not on ``bp``)."""
    for i, x in enumerate(inputs):
        if x.is_backprop_required(bp) and x._is_chained(bp):
            raise GradientCheckError('BackwardGradients: All inputs must be leaf '
                                     'nodes of computational graph')
    leaves = [_leaf_copy(x) for x in inputs]
    outputs = _as_tuple(func(list(leaves)), 'func')
    for i, x in enumerate(leaves):
        for j, y in enumerate(outputs):
            if y is x and x.is_backprop_required(bp):
                raise GradientCheckError('BackwardGradients: Input {} and output {} '
                                         'of the forward function are identical.'
                                         .format(i, j))
    if len(grad_outputs) != len(outputs):
        raise GradientCheckError('BackwardGradients: Size of function outputs: {} '
                                 'and size of grad outputs: {} must be same'.format(
                                     len(outputs), len(grad_outputs)))
    used = [(y, gy) for y, gy in zip(outputs, grad_outputs)
            if y is not None and gy is not None and y.is_backprop_required(bp)]
    if used:
        _core.backward([y for y, _ in used], bp,
                       grad_outputs=[gy.as_grad_stopped() for _, gy in used])
    grads = []
    n = len(leaves)
    for i, x in enumerate(leaves):
        if not x.is_backprop_required(bp):
            grads.append(None)
            continue
        g = x.get_grad(bp)
        if g is None:
            g = from_numpy(numpy.zeros(x.shape, x.dtype), x.device)
        if g.shape != x.shape or g.dtype != x.dtype:
            raise GradientCheckError(
                'Shape of input gradient {} of {} ({}, {}) does not match the '
                'input ({}, {})'.format(i, n, g.shape, g.dtype, x.shape, x.dtype))
        grads.append(g)
    return grads


def _numerical_gradients(func, inputs, grad_outputs, eps, context):
    """Central differences, one element at a time, accumulated in float64."""
    gys = [None if gy is None else gy.to_numpy().astype(numpy.float64)
           for gy in grad_outputs]
    base = [x.to_numpy() for x in inputs]

    def evaluate(i, data_i):
        xs = [_leaf_copy(x, data_i if j == i else None)
              for j, x in enumerate(inputs)]
        with _core.no_backprop_mode(context):
            ys = _as_tuple(func(xs), 'func')
        if len(ys) != len(gys):
            raise GradientCheckError('Size of function outputs: {} and size of '
                                     'grad outputs: {} must be same'.format(
                                         len(ys), len(gys)))
        return [None if y is None else y.to_numpy().astype(numpy.float64)
                for y in ys]

    grads = []
    for i, x in enumerate(inputs):
        if x.dtype.kind != 'f':
            grads.append(None)
            continue
        e = eps[i].to_numpy()
        g = numpy.zeros(x.shape, numpy.float64)
        flat = g.reshape(-1)
        for k in range(x.size):
            shifted = base[i].copy()
            index = numpy.unravel_index(k, x.shape) if x.ndim else ()
            delta = numpy.float32(e[index])
            shifted[index] = base[i][index] + delta
            plus = evaluate(i, shifted)
            shifted[index] = base[i][index] - delta
            minus = evaluate(i, shifted)
            total = 0.0
            for yp, ym, gy in zip(plus, minus, gys):
                if gy is None or yp is None:
                    continue
                total += numpy.sum((yp - ym) / (2 * float(delta)) * gy)
            flat[k] = total
        grads.append(g)
    return grads


def _compare(backward_grads, numerical_grads, eps, atol, rtol, bp, what, func=None):
    """Raise GradientCheckError when a gradient is out of tolerance. The
    message starts with what a reader needs: the function, and per failing
    input its worst element with the analytic and numerical values; the
    arrays follow (only where small enough to read)."""
    failed, summary, details = [], [], []
    for i, (b, n) in enumerate(zip(backward_grads, numerical_grads)):
        if b is None or n is None:
            continue
        bv = b.to_numpy().astype(numpy.float64)
        ok = numpy.abs(bv - n) <= atol + rtol * numpy.abs(n)
        if not numpy.all(ok) or numpy.isnan(bv).any() or numpy.isnan(n).any():
            failed.append(i)
            with numpy.errstate(invalid='ignore'):
                err = numpy.abs(bv - n)
                badness = numpy.where(numpy.isnan(err), numpy.inf,
                                      err - (atol + rtol * numpy.abs(n)))
            k = int(numpy.argmax(badness)) if err.size else 0
            index = tuple(int(j) for j in numpy.unravel_index(k, n.shape)) if n.ndim else ()
            summary.append(
                '  input {}, element {}: analytic {:.6g}, numerical {:.6g} '
                '(abs error {:.3g}; {} of {} elements out of tolerance)'.format(
                    i, index, bv.reshape(-1)[k], n.reshape(-1)[k],
                    err.reshape(-1)[k], int((~ok).sum()), n.size))
            arrays = ('\n  Backward gradients:\n{}\n  Numerical gradients:\n{}\n'
                      '  Eps:\n{}'.format(bv, n, eps[i].to_numpy())
                      if n.size <= 16 else
                      '\n  ({} elements: arrays not shown)'.format(n.size))
            details.append('Input {}:\n  Max absolute error: {}{}'.format(
                i, numpy.nanmax(err) if err.size else 0.0, arrays))
    if failed:
        name = getattr(func, '__name__', None) or type(func).__name__
        raise GradientCheckError(
            'check_{}({}): wrong gradients (atol {:g}, rtol {:g}):\n{}\n\n'
            'Numerical error in {} on inputs (out of {}): {}\nBackprop ID: {}\n'
            'Atol: {} Rtol: {}\n{}'.format(
                what.replace(' ', '_'), name, atol, rtol, '\n'.join(summary),
                what, len(backward_grads), ', '.join(map(str, failed)), bp.name,
                atol, rtol, '\n'.join(details)))


def _check_double_backprop_option(func, inputs, bp):
    """With double backprop off no input gradient may stay on the graph; with
    it on every one must (checked on the squared outputs, so that a linear
    ``func`` still has gradients that depend on the inputs)."""
    n = len(inputs)
    for double in (False, True):
        leaves = [_leaf_copy(x) for x in inputs]
        outputs = [y * y for y in _as_tuple(func(list(leaves)), 'func')
                   if y is not None and y.is_backprop_required(bp)]
        if not outputs:
            return
        _core.backward(outputs, bp, enable_double_backprop=double)
        for i, x in enumerate(leaves):
            if not x.is_backprop_required(bp):
                continue
            g = x.get_grad(bp)
            if g is None:
                continue
            if not double and g.is_backprop_required(bp):
                raise GradientCheckError(
                    "Gradient {} / {} is connected to the graph '{}' even when "
                    'double-backprop is disabled.'.format(i, n, bp.name))
            if double and not g.is_backprop_required(bp):
                raise GradientCheckError(
                    "Gradient {} / {} is not connected to the graph '{}' even when "
                    'double-backprop is enabled.'.format(i, n, bp.name))


def check_backward(func, inputs, grad_outputs, eps, atol=1e-5, rtol=1e-4,
                   backprop_id=None):
    """Check the gradients of ``func`` (a list of arrays in, a tuple out)
    against central differences; raise GradientCheckError if they differ."""
    inputs = list(inputs)
    grad_outputs = list(grad_outputs)
    eps = list(eps)
    if not inputs:
        raise XgradError('check_backward needs at least one input')
    _check_eps(inputs, eps)
    bp = _default_bp(inputs, backprop_id)
    _check_double_backprop_option(func, inputs, bp)
    backward_grads = _backward_gradients(func, inputs, grad_outputs, bp)
    numerical = _numerical_gradients(func, inputs, grad_outputs, eps,
                                     inputs[0].device.context)
    _compare(backward_grads, numerical, eps, atol, rtol, bp, 'backward', func)


def check_double_backward(func, inputs, grad_outputs, grad_grad_inputs, eps,
                          atol=1e-5, rtol=1e-4, backprop_id=None):
    """Check the second derivatives of ``func``: the gradients of its input
    gradients (seeded by ``grad_outputs``) against central differences."""
    inputs = list(inputs)
    grad_outputs = list(grad_outputs)
    grad_grad_inputs = list(grad_grad_inputs)
    eps = list(eps)
    if not inputs:
        raise XgradError('check_double_backward needs at least one input')
    bp = _default_bp(inputs, backprop_id)
    n_in, n_out = len(inputs), len(grad_outputs)
    if len(grad_grad_inputs) != n_in:
        raise XgradError('Number of input arrays and grad_grad_input arrays do '
                         'not match.')
    for i, x in enumerate(inputs):
        if not x.is_backprop_required(bp):
            raise XgradError("Input array {} / {} is not differentiable w.r.t. the "
                             "backprop ID '{}'.".format(i, n_in, bp.name))
    for i, gy in enumerate(grad_outputs):
        if gy is None or not gy.is_backprop_required(bp):
            raise XgradError("Output gradient array {} / {} is not differentiable "
                             "w.r.t. the backprop ID '{}'.".format(i, n_out, bp.name))

    def first_order(xs_and_gys):
        xs, gys = xs_and_gys[:n_in], xs_and_gys[n_in:]
        with _core.force_backprop_mode(bp):
            ys = _as_tuple(func(list(xs)), 'func')
            if len(ys) != len(gys):
                raise GradientCheckError('Size of function outputs: {} and size of '
                                         'grad outputs: {} must be same'.format(
                                             len(ys), len(gys)))
            gxs = _core.grad(list(ys), list(xs), bp, enable_double_backprop=True,
                             grad_outputs=list(gys))
            for i, g in enumerate(gxs):
                if g is None:
                    raise GradientCheckError('First-order input gradient {} / {} '
                                             'does not exist.'.format(i, n_in))
                if not g.is_backprop_required(bp):
                    raise GradientCheckError(
                        "First-order Input gradient {} / {} is not differentiable "
                        "w.r.t. the backprop ID '{}'.".format(i, n_in, bp.name))
        return tuple(gxs)

    all_inputs = inputs + grad_outputs
    _check_eps(all_inputs, eps)
    backward_grads = _backward_gradients(first_order, all_inputs, grad_grad_inputs, bp)
    numerical = _numerical_gradients(first_order, all_inputs, grad_grad_inputs, eps,
                                     inputs[0].device.context)
    _compare(backward_grads, numerical, eps, atol, rtol, bp, 'double backward', func)
