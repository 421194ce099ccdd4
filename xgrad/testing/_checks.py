"""The gradient checks: ``check_backward`` and ``check_double_backward``,
exported both as ``xgrad.check_backward`` (ChainerX's name) and as
``xgrad.testing.check_backward`` (the same function).

ChainerX's signature and procedure for the analytic side: fresh leaf copies
of the inputs that require grad on the graphs the inputs are on; the inputs
that require grad on ``backprop_id`` are the ones checked, the others are
constants. On top of it:

* the numerical side is ``numerical_grad``: central differences in float64,
  whatever the inputs' dtype, so a float16 gradient is judged against the
  true gradient, with ``default_tolerance`` of the least precise array
  involved unless ``atol``/``rtol`` are given;
* ``mode='random'`` compares one directional derivative along a random unit
  direction (two evaluations of ``func`` instead of two per element);
* a verdict with numbers: a :class:`GradientCheckResult` when the check
  passes; otherwise ``xgrad.GradientCheckError`` whose message names the
  function, the input, the worst element, the analytic and numerical values
  and the error, with the result as its ``.result``. A gradient missing for
  an input whose numerical gradient is not zero, or one of the wrong shape
  or dtype (which the engine rejects with GradientError), is a failure too;
* ``check_double_backward`` also checks the first derivatives: the
  second-order check differentiates the op's own backward, so on its own it
  cannot see a first derivative that is wrong but consistently so;
* ``detect_nondifferentiable``, ``check_leaks`` and ``check_threads``.

Bad use (arguments of the wrong type, length or shape, a function returning
something other than xgrad arrays) raises TypeError or ValueError before
anything is compared: never a verdict. Where ChainerX raises ChainerxError
or GradientCheckError for bad arguments (eps, grad_outputs or
grad_grad_inputs that do not fit, inputs that are not leaves, an output
identical to an input), the ValueError is a GradientCheckArgumentError,
which is both.

ChainerX-style calls. ChainerX requires ``eps`` as one xgrad array per
input (per input and grad_output for check_double_backward), and callers
written for it pass it so, often with positional ``atol, rtol``. Such a call
(``eps`` a non-empty list or tuple of xgrad arrays) gets ChainerX's
contract: each eps array must have its input's shape and dtype; atol/rtol
left out are ChainerX's defaults, 1e-5 and 1e-4, not the per-dtype ones;
check_backward also runs ChainerX's double-backprop-option check (two more
evaluations of ``func`` with backward passes: gradients taken with double
backprop off must not be on the graph, with it on they must);
check_double_backward requires every input and every grad_output to require
grad on the graph ("Input array i / n is not differentiable w.r.t. the
backprop ID ..."), where otherwise inputs that do not are constants and
grad_outputs are differentiated whether they require grad or not.
"""

import dataclasses
import gc
import threading
from typing import Optional

import numpy

from xgrad import _core
from xgrad._errors import GradientCheckArgumentError, GradientCheckError, GradientError
from xgrad._ops.creation import from_numpy
from xgrad.testing._numerical import (
    F64, Numerics, NondifferentiablePointError, array_list, as_rng, function_name,
    match_grad_outputs, outputs_of, steps)
from xgrad.testing._tolerances import default_tolerance, least_precise

_raw = _core._raw_data

# ChainerX's default (atol, rtol): what a ChainerX-style call without them gets.
CHAINERX_TOLERANCE = (1e-5, 1e-4)


@dataclasses.dataclass
class GradientCheckResult:
    """What a check measured (returned when it passes; a failure carries it
    as ``error.result``).

    order: 1 (first derivatives) or 2 (second derivatives).
    worst_abs: the largest |analytic - numerical|.
    worst_rel: the largest |analytic - numerical| / |numerical| among the
        elements whose |numerical| exceeds atol (0.0 if there are none).
    worst_input: the input with the element furthest out of (or closest to)
        the tolerance; in order 2 ``len(inputs) + j`` stands for
        ``grad_outputs[j]``. None when nothing was compared.
    n_checked: how many numbers were compared (elements in full mode, one
        directional derivative in random mode).
    """
    order: int
    worst_abs: float
    worst_rel: float
    worst_input: Optional[int]
    n_checked: int


def check_backward(func, inputs, grad_outputs, eps=None, atol=None, rtol=None,
                   backprop_id=None, *, mode='full', rng=None,
                   detect_nondifferentiable=False, check_leaks=False,
                   check_threads=False, name=None):
    """Check the first derivatives of ``func`` against central differences.

    func: ``func(list of xgrad arrays)`` returns an xgrad array or a
        tuple/list of them (None allowed).
    inputs: list of xgrad arrays; those that require grad on ``backprop_id``
        (default: the default graph) are checked and must be leaves.
    grad_outputs: list with one array (or None: the output does not enter)
        per output; cast to the output's dtype for the analytic pass.
    eps: None (``default_eps`` of each input's dtype, or of the
        grad_outputs' where less precise), a float, or a list with one float
        or array (input's shape) per input. A list of xgrad arrays only (as
        ChainerX requires) makes a ChainerX-style call (module docstring).
    atol, rtol: the tolerance ``|analytic - numerical| <= atol + rtol *
        |numerical|``; None: ``default_tolerance`` of the least precise float
        array among inputs and grad_outputs, or ChainerX's 1e-5 / 1e-4 in a
        ChainerX-style call.
    mode: 'full' compares every element; 'random' one directional derivative
        along a random unit direction drawn from ``rng`` (a
        ``numpy.random.Generator``, an int seed, or None for seed 0). A
        failing random check is then localised input by input (two more
        evaluations each) to name the input.
    detect_nondifferentiable: True examines every numerical derivative for
        kinks (``numerical_grad``; 4 instead of 2 evaluations per element);
        'on_failure' only the ones that failed the comparison (free when the
        check passes, and a kink that does not spoil the comparison, such as
        abs at 0, goes unreported). A kink raises NondifferentiablePointError
        (a GradientCheckError): the sample, not the gradient, is at fault. Its
        ``.result`` is the failed comparison ('on_failure'), or None (True:
        the kink is found before anything is compared).
    check_leaks: run the check a second time and fail unless every xgrad array
        it made was freed (counted by ``xgrad._core._live_array_count()``
        after ``gc.collect()``; the first run may fill caches). The count is
        process-wide: do not create arrays in other threads meanwhile.
    check_threads: also run the whole check from two threads at once; both
        must pass.
    name: how messages call ``func`` (default: its ``__name__``).

    Returns a :class:`GradientCheckResult`; raises GradientCheckError when
    a gradient is wrong, GradientCheckArgumentError (a GradientCheckError
    and a ValueError), ValueError or TypeError for bad arguments.
    """
    return _check_backward('check_backward', func, inputs, grad_outputs, eps, atol, rtol,
                           backprop_id, mode, rng, detect_nondifferentiable, check_leaks,
                           check_threads, name)


def check_double_backward(func, inputs, grad_outputs, grad_grad_inputs, eps=None,
                          atol=None, rtol=None, backprop_id=None, *, mode='full',
                          rng=None, detect_nondifferentiable=False, check_leaks=False,
                          check_threads=False, name=None, check_first_order=True):
    """Check the second derivatives of ``func``.

    The function ``(inputs, grad_outputs) -> input gradients`` (computed with
    ``enable_double_backprop=True``) is itself checked like ``check_backward``
    checks ``func``, seeded with ``grad_grad_inputs`` (one array per input;
    None allowed for inputs that are not checked). Every non-None
    grad_output is differentiated too (it need not require grad). ``eps``,
    when a list, has one entry per input and then one per grad_output, as in
    ChainerX. With ``check_first_order`` (default) ``check_backward`` runs
    first with the same options (but for check_leaks and check_threads,
    which the second-order run covers): an op whose first derivative is
    wrong fails here too; pass False where check_backward has run already.
    The other parameters are ``check_backward``'s; the default tolerance is
    that of the least precise array among inputs, grad_outputs and
    grad_grad_inputs (ChainerX's 1e-5 / 1e-4 in a ChainerX-style call, which
    also requires every input and grad_output to require grad).
    """
    chainerx = _chainerx_style(eps)
    inputs, grad_outputs, bp, targets, what = _arguments(
        'check_double_backward', func, inputs, grad_outputs, backprop_id, name, mode,
        detect_nondifferentiable, grad_grad_inputs=grad_grad_inputs,
        require_grad=chainerx)
    n_in = len(inputs)
    ggxs = array_list(grad_grad_inputs, 'grad_grad_inputs', allow_none=True)
    for i in targets:
        if ggxs[i] is None or ggxs[i].shape != inputs[i].shape:
            raise ValueError('{}: grad_grad_inputs[{}] must be an array of input {}\'s '
                             'shape {}, not {}'.format(
                                 what, i, i, inputs[i].shape,
                                 None if ggxs[i] is None else ggxs[i].shape))
    if isinstance(eps, (list, tuple)) and len(eps) != n_in + len(grad_outputs):
        raise GradientCheckArgumentError(
            '{}: eps has {} entries for {} inputs and {} grad_outputs (Number of input '
            'arrays and eps arrays do not match)'.format(
                what, len(eps), n_in, len(grad_outputs)))
    used = [j for j, gy in enumerate(grad_outputs) if gy is not None]
    first_eps, second_eps = eps, eps
    if isinstance(eps, (list, tuple)):
        first_eps = list(eps[:n_in])
        second_eps = first_eps + [eps[n_in + j] for j in used]
    gys = [grad_outputs[j] for j in used]
    steps(second_eps, inputs + gys)
    atol, rtol = _tolerance(atol, rtol, inputs + gys + [ggxs[i] for i in targets], chainerx)
    if check_first_order:
        _check_backward('check_double_backward', func, inputs, grad_outputs, first_eps,
                        atol, rtol, bp, mode, rng, detect_nondifferentiable, False, False,
                        name)
    problem = _second_order_problem(what, func, inputs, grad_outputs, ggxs, second_eps, bp,
                                    targets, atol, rtol)
    return _run(problem, mode, as_rng(rng) if mode == 'random' else None,
                detect_nondifferentiable, check_leaks, check_threads)


def _check_backward(check, func, inputs, grad_outputs, eps, atol, rtol, backprop_id,
                    mode, rng, detect, check_leaks, check_threads, name):
    inputs, grad_outputs, bp, targets, what = _arguments(
        check, func, inputs, grad_outputs, backprop_id, name, mode, detect)
    steps(eps, inputs)  # bad eps fails now, before anything runs
    chainerx = _chainerx_style(eps)
    atol, rtol = _tolerance(atol, rtol, inputs + grad_outputs, chainerx)
    problem = _first_order_problem(what, func, inputs, grad_outputs, eps, bp, targets,
                                   atol, rtol)
    result = _run(problem, mode, as_rng(rng) if mode == 'random' else None, detect,
                  check_leaks, check_threads)
    if chainerx and check == 'check_backward':
        _check_double_backprop_option(func, inputs, bp, what)
    return result


def _first_order_problem(what, func, inputs, grad_outputs, eps, bp, targets, atol, rtol):
    return _Problem(what, 1, inputs, grad_outputs, eps, targets,
                    ['input {}'.format(i) for i in range(len(inputs))],
                    list(range(len(inputs))), atol, rtol,
                    _first_order(func, inputs, grad_outputs, bp, targets, what), func)


def _second_order_problem(what, func, inputs, grad_outputs, ggxs, eps, bp, targets, atol,
                          rtol):
    """The second-order comparison: the numerical derivatives of ``(inputs,
    used grad_outputs) -> input gradients``, seeded with ``ggxs``."""
    n_in = len(inputs)
    used = [j for j, gy in enumerate(grad_outputs) if gy is not None]
    gys = [grad_outputs[j] for j in used]
    return _Problem(
        what, 2, inputs + gys, [ggxs[i] for i in targets], eps,
        targets + [n_in + m for m, gy in enumerate(gys) if gy.dtype.kind == 'f'],
        ['input {}'.format(i) for i in range(n_in)] + [
            'grad_outputs[{}]'.format(j) for j in used],
        list(range(n_in)) + [n_in + j for j in used], atol, rtol,
        _second_order(func, inputs, grad_outputs, used, ggxs, bp, targets, what),
        _first_order_values(func, n_in, used, bp, targets, what))


def comparison(order, func, inputs, grad_outputs, grad_grad_inputs=None, *, atol, rtol,
               name=None):
    """What the check of ``order`` compares, without comparing it: a
    problem with ``analytic(targets)`` and the function ``f``, ``inputs``,
    ``seeds`` and ``targets`` whose central differences are the reference
    (``xgrad.testing._step_curve`` takes them at many steps)."""
    check = 'check_backward' if order == 1 else 'check_double_backward'
    inputs, grad_outputs, bp, targets, what = _arguments(
        check, func, inputs, grad_outputs, None, name, 'full', False,
        grad_grad_inputs=grad_grad_inputs if order == 2 else None)
    if order == 1:
        return _first_order_problem(what, func, inputs, grad_outputs, None, bp, targets,
                                    atol, rtol)
    ggxs = array_list(grad_grad_inputs, 'grad_grad_inputs', allow_none=True)
    return _second_order_problem(what, func, inputs, grad_outputs, ggxs, None, bp, targets,
                                 atol, rtol)


# ---------------------------------------------------------------------------
# Arguments

def _chainerx_style(eps):
    """Whether ``eps`` is given as ChainerX requires it: a non-empty list or
    tuple of xgrad arrays (module docstring)."""
    return (isinstance(eps, (list, tuple)) and len(eps) > 0
            and all(isinstance(e, _core.ndarray) for e in eps))


def _default_bp(inputs, backprop_id):
    if backprop_id is not None:
        return backprop_id
    return inputs[0].device.context._default_id


def _leaf_copy(x):
    """A fresh leaf with ``x``'s data, grad-required on every graph ``x``
    has a node on."""
    copy = from_numpy(numpy.array(x.to_numpy(), copy=True), x.device)
    for bp in x._backprop_ids():
        copy.require_grad(bp)
    return copy


def _arguments(check, func, inputs, grad_outputs, backprop_id, name, mode, detect,
               grad_grad_inputs=None, require_grad=False):
    """The validated common arguments and the checked inputs (``targets``).
    For check_double_backward: ``grad_grad_inputs`` is checked for length
    and, with ``require_grad`` (a ChainerX-style call), every input and
    grad_output must require grad on the graph, as in ChainerX."""
    if not callable(func):
        raise TypeError('{}: func must be callable, not {}'.format(
            check, type(func).__name__))
    what = '{}({!r})'.format(check, name or function_name(func))
    inputs = array_list(inputs, 'inputs')
    if not inputs:
        raise GradientCheckArgumentError('{} needs at least one input'.format(what))
    grad_outputs = array_list(grad_outputs, 'grad_outputs', allow_none=True)
    if mode not in ('full', 'random'):
        raise ValueError("{}: mode must be 'full' or 'random', not {!r}".format(what, mode))
    if detect not in (False, True, 'on_failure'):
        raise ValueError("{}: detect_nondifferentiable must be False, True or "
                         "'on_failure', not {!r}".format(what, detect))
    bp = _default_bp(inputs, backprop_id)
    if grad_grad_inputs is not None:
        ggxs = array_list(grad_grad_inputs, 'grad_grad_inputs', allow_none=True)
        if len(ggxs) != len(inputs):
            raise GradientCheckArgumentError(
                '{}: grad_grad_inputs has {} entries for {} inputs (Number of input arrays '
                'and grad_grad_input arrays do not match)'.format(
                    what, len(ggxs), len(inputs)))
    if require_grad:
        for arrays, kind in ((inputs, 'Input array'), (grad_outputs, 'Output gradient array')):
            for i, a in enumerate(arrays):
                if a is None or not a.is_backprop_required(bp):
                    raise GradientCheckArgumentError(
                        "{}: {} {} / {} is not differentiable w.r.t. the backprop ID "
                        "'{}'.".format(what, kind, i, len(arrays), bp.name))
    targets = [i for i, x in enumerate(inputs)
               if x.dtype.kind == 'f' and x.is_backprop_required(bp)]
    for i in targets:
        if inputs[i]._is_chained(bp):
            raise GradientCheckArgumentError(
                '{}: input {} is not a leaf of graph {!r}: pass arrays made with '
                'require_grad(), not results of ops (BackwardGradients: All inputs must '
                'be leaf nodes of computational graph)'.format(what, i, bp.name))
    if not targets:
        raise ValueError('{}: no input requires grad on graph {!r}, so there is nothing '
                         'to check: call require_grad() on the inputs to check'.format(
                             what, bp.name))
    return inputs, grad_outputs, bp, targets, what


def _tolerance(atol, rtol, arrays, chainerx=False):
    """``atol``, ``rtol``, each defaulting to the tolerance of the least
    precise float dtype among ``arrays``, or to ChainerX's (``chainerx``)."""
    default = CHAINERX_TOLERANCE if chainerx else default_tolerance(
        least_precise([a.dtype for a in arrays if a is not None]))
    return (default[0] if atol is None else atol), (default[1] if rtol is None else rtol)


def _check_double_backprop_option(func, inputs, bp, what):
    """ChainerX's double-backprop-option check: with double backprop off no
    input gradient may stay on the graph; with it on every one must (checked
    on the squared outputs, so that a linear ``func`` still has gradients
    that depend on the inputs). Fresh leaf copies, as everywhere. ChainerX
    runs it before the comparison; it runs after it here, once the gradients
    are known right (a wrong one is reported with its numbers first)."""
    n = len(inputs)
    for double in (False, True):
        leaves = [_leaf_copy(x) for x in inputs]
        with _core.force_backprop_mode(bp):
            outputs = [y * y for y in outputs_of(func(list(leaves)), what)
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
            if double != g.is_backprop_required(bp):
                error = GradientCheckError(
                    "{}: Gradient {} / {} is {} to the graph '{}' even when double-backprop "
                    "is {}.".format(what, i, n, 'not connected' if double else 'connected',
                                    bp.name, 'enabled' if double else 'disabled'))
                error.result = None
                raise error


# ---------------------------------------------------------------------------
# Analytic gradients

def _seed(gy, y):
    """An output gradient in the dtype of its output."""
    return gy if gy.dtype == y.dtype else gy.astype(y.dtype)


def _constant_copy(x):
    return _core._array_of(numpy.array(x.to_numpy()), x.device)


def _first_order(func, inputs, grad_outputs, bp, targets, what):
    """``analytic(wrt)``: the first-order input gradients of the inputs in
    ``wrt`` (float64 NumPy arrays, None where the engine gives none); the
    other targets are constants meanwhile."""
    def analytic(wrt):
        leaves = [_constant_copy(x) if i in targets and i not in wrt else _leaf_copy(x)
                  for i, x in enumerate(inputs)]
        with _core.force_backprop_mode(bp):
            ys = outputs_of(func(leaves), what)
            _check_identical(leaves, ys, bp, what)
            match_grad_outputs(ys, grad_outputs, what)
            pairs = [(y, gy) for y, gy in zip(ys, grad_outputs)
                     if y is not None and gy is not None and y.is_backprop_required(bp)]
            seeds = [_seed(gy.as_grad_stopped(), y) for y, gy in pairs]
            grads = (_core.grad([y for y, _ in pairs], [leaves[i] for i in wrt], bp,
                                grad_outputs=seeds) if pairs else [None] * len(wrt))
        return {i: None if g is None else numpy.array(g.to_numpy(), F64)
                for i, g in zip(wrt, grads)}
    return analytic


def _check_identical(leaves, outputs, bp, what):
    """ChainerX's rule: no output may be one of the (grad-requiring) inputs."""
    for i, x in enumerate(leaves):
        for j, y in enumerate(outputs):
            if y is x and x.is_backprop_required(bp):
                raise GradientCheckArgumentError(
                    '{}: BackwardGradients: Input {} and output {} of the forward function '
                    'are identical.'.format(what, i, j))


def _leaf(a, bp):
    """A leaf copy of ``a`` that requires grad on ``bp``."""
    leaf = _leaf_copy(a)
    if not leaf.is_grad_required(bp):
        leaf.require_grad(bp)
    return leaf


def _first_order_gradients(ys, xs, gys, used, bp, targets, double):
    """The gradients of the outputs ``ys`` with respect to the ``targets``
    of ``xs`` (which require grad), seeded by ``gys`` (for the outputs
    ``used``); ``double``: recorded for double backprop."""
    pairs = [(ys[j], gy) for j, gy in zip(used, gys)
             if ys[j] is not None and ys[j].is_backprop_required(bp)]
    if not pairs:
        return [None] * len(targets)
    return _core.grad([y for y, _ in pairs], [xs[i] for i in targets], bp,
                      enable_double_backprop=double,
                      grad_outputs=[_seed(gy, y) for y, gy in pairs])


def _second_order(func, inputs, grad_outputs, used, ggxs, bp, targets, what):
    """``analytic(wrt)``: the second-order gradients with respect to the
    positions ``wrt`` of ``inputs + [grad_outputs[j] for j in used]``."""
    def analytic(wrt):
        xs = [_leaf_copy(x) for x in inputs]
        gys = [_leaf(grad_outputs[j], bp) for j in used]
        with _core.force_backprop_mode(bp):
            ys = outputs_of(func(xs), what)
            match_grad_outputs(ys, grad_outputs, what)
            gxs = _first_order_gradients(ys, xs, gys, used, bp, targets, True)
            pairs = [(g, ggxs[i]) for g, i in zip(gxs, targets)
                     if g is not None and g.is_backprop_required(bp)]
            args = xs + gys
            seeds = [_seed(gg.as_grad_stopped(), g) for g, gg in pairs]
            grads = (_core.grad([g for g, _ in pairs], [args[k] for k in wrt], bp,
                                grad_outputs=seeds) if pairs else [None] * len(wrt))
        return {k: None if g is None else numpy.array(g.to_numpy(), F64)
                for k, g in zip(wrt, grads)}
    return analytic


def _first_order_values(func, n_in, used, bp, targets, what):
    """The function ``inputs + used grad_outputs -> input gradients`` whose
    numerical derivative is the second-order reference."""
    def first_order(args):
        xs = list(args[:n_in])
        with _core.force_backprop_mode(bp):
            for i in targets:  # fresh leaves on the same data
                xs[i] = _core._array_of(_raw(xs[i]), xs[i].device).require_grad(bp)
            return _first_order_gradients(outputs_of(func(xs), what), xs, args[n_in:],
                                          used, bp, targets, False)
    return first_order


# ---------------------------------------------------------------------------
# Running a check

class _Problem:
    """One order of one check: its inputs and seeds on the numerical side,
    the checked positions (``targets``), how messages call them (``labels``)
    and which index a result reports for them (``indexes``), the tolerance,
    ``analytic(wrt)`` and the function ``f`` that numerical derivatives are
    taken of."""

    def __init__(self, what, order, inputs, seeds, eps, targets, labels, indexes,
                 atol, rtol, analytic, f):
        self.what, self.order = what, order
        self.inputs, self.seeds, self.eps = inputs, seeds, eps
        self.targets, self.labels, self.indexes = targets, labels, indexes
        self.atol, self.rtol = atol, rtol
        self.analytic, self.f = analytic, f

    def numerics(self):
        return Numerics(self.f, self.inputs, self.seeds, self.eps, targets=self.targets,
                        what=self.what, labels=self.labels)

    def failure(self, message, result):
        error = GradientCheckError('{}: {}'.format(self.what, message))
        error.result = result
        return error


def _run(problem, mode, rng, detect, check_leaks, check_threads):
    result = _check_once(problem, mode, rng, detect)
    if check_leaks:
        _check_leaks(problem, mode, detect, result)
    if check_threads:
        _check_threads(problem, mode, detect, result)
    return result


def _check_once(problem, mode, rng, detect):
    analytic = _analytic(problem)
    numerics = problem.numerics()
    try:
        if mode == 'full':
            return _compare_full(problem, analytic, numerics, detect)
        return _compare_random(problem, analytic, numerics, rng, detect)
    except NondifferentiablePointError as e:
        if not hasattr(e, 'result'):
            e.result = None
        raise


def _analytic(problem):
    """The analytic gradients of the targets. The engine rejects a gradient
    of the wrong shape or dtype with GradientError; the gradients are then
    taken one input at a time to name the input(s) at fault."""
    try:
        return problem.analytic(problem.targets)
    except GradientError as error:
        culprits = {}
        for k in problem.targets:
            try:
                problem.analytic([k])
            except GradientError as e:
                culprits[k] = '{}: {}'.format(problem.labels[k], e)
        result = GradientCheckResult(problem.order, numpy.inf, numpy.inf,
                                     problem.indexes[min(culprits)] if culprits else None, 0)
        raise problem.failure('the backward pass rejected a gradient for {}'.format(
            '; '.join(culprits.values()) if culprits else
            'the inputs together (each alone passes): {}'.format(error)),
            result) from error


def _errors(analytic, numerical, atol, rtol):
    """Per element: |a - n| (NaN counts as infinite), how far it is outside
    the tolerance (> 1: out) and the relative error where |n| > atol."""
    with numpy.errstate(invalid='ignore', divide='ignore'):
        err = numpy.abs(analytic - numerical)
        err[numpy.isnan(err)] = numpy.inf
        ratio = numpy.where(err == 0, 0.0, err / (atol + rtol * numpy.abs(numerical)))
        ratio[numpy.isnan(ratio)] = numpy.inf
        significant = numpy.abs(numerical) > atol
        rel = numpy.where(significant, err / numpy.where(significant, numpy.abs(numerical),
                                                         1.0), 0.0)
    return err, ratio, rel


def _header(problem, result):
    return 'the {} are wrong (atol {:g}, rtol {:g}; worst abs error {:.3g}, worst rel ' \
           'error {:.3g})'.format(
               'first-order gradients' if problem.order == 1 else 'second-order gradients',
               problem.atol, problem.rtol, result.worst_abs, result.worst_rel)


def _compare_full(problem, analytic, numerics, detect):
    numerical = numerics.gradients(detect=detect is True)
    worst_abs = worst_rel = 0.0
    worst = (-1.0, None)
    n_checked = 0
    failing, lines = [], []
    for i in problem.targets:
        n = numerical[i].reshape(-1)
        a = numpy.zeros_like(n) if analytic[i] is None else analytic[i].reshape(-1)
        n_checked += n.size
        if not n.size:
            continue
        err, ratio, rel = _errors(a, n, problem.atol, problem.rtol)
        k = int(numpy.argmax(ratio))
        worst_abs, worst_rel = max(worst_abs, err.max()), max(worst_rel, rel.max())
        if ratio[k] > worst[0]:
            worst = (ratio[k], i)
        if ratio[k] <= 1:
            continue
        failing.append(i)
        index = _index(k, numerical[i].shape)
        out = '{} of {} elements out of tolerance'.format(int((ratio > 1).sum()), n.size)
        if analytic[i] is None:
            lines.append('{}: no gradient, but the numerical gradient is not zero: {:.6g} '
                         'at element {} ({})'.format(problem.labels[i], n[k], index, out))
        else:
            lines.append('{}: element {}: analytic {:.6g}, numerical {:.6g}: abs error '
                         '{:.3g}, rel error {:.3g} ({})'.format(
                             problem.labels[i], index, a[k], n[k], err[k], rel[k], out))
    result = GradientCheckResult(problem.order, float(worst_abs), float(worst_rel),
                                 None if worst[1] is None else problem.indexes[worst[1]],
                                 n_checked)
    if failing:
        if detect == 'on_failure':
            _raise_kink(numerics.gradients, result, detect=True, only=failing)
        raise problem.failure('{}:\n  {}\n{}'.format(
            _header(problem, result), '\n  '.join(lines), _trailer(problem, failing)), result)
    return result


def _compare_random(problem, analytic, numerics, rng, detect):
    v = numerics.directions('random', rng)

    def along(w):  # analytic and numerical derivatives along the direction w
        a = sum(float(numpy.vdot(analytic[i], d)) for i, d in w.items()
                if analytic[i] is not None)
        return a, numerics.directional(w, detect=detect is True)

    a, n = along(v)
    err, ratio, rel = (float(e[0]) for e in _errors(numpy.array([a]), numpy.array([n]),
                                                     problem.atol, problem.rtol))
    result = GradientCheckResult(problem.order, err, rel, None, 1)
    if ratio <= 1:
        return result
    lines, worst, failing = [], -1.0, []
    for i, d in v.items():  # localise: each input alone
        ai, ni = along({i: d})
        e, r, q = (float(x[0]) for x in _errors(numpy.array([ai]), numpy.array([ni]),
                                                 problem.atol, problem.rtol))
        if r > worst:
            worst, result.worst_input = r, problem.indexes[i]
        if r > 1:
            failing.append(i)
            lines.append('{}{}: analytic {:.6g}, numerical {:.6g} along its part of the '
                         'direction: abs error {:.3g}, rel error {:.3g}'.format(
                             problem.labels[i],
                             ' (no gradient)' if analytic[i] is None else '', ai, ni, e, q))
    if detect == 'on_failure':
        _raise_kink(numerics.directional, result, v, detect=True)
    raise problem.failure(
        '{}: along a random unit direction the analytic derivative is {:.6g}, the '
        'numerical one {:.6g}:\n  {}\n{}'.format(
            _header(problem, result), a, n,
            '\n  '.join(lines or ['no input alone is out of tolerance']),
            _trailer(problem, failing or list(v))), result)


def _trailer(problem, failing):
    """The last line of a failure, as ChainerX ends it: which inputs (in
    order 2: inputs, then grad_outputs) failed, out of how many."""
    return 'Numerical error in {} on inputs (out of {}): {}'.format(
        'backward' if problem.order == 1 else 'double backward', len(problem.inputs),
        ', '.join(str(problem.indexes[i]) for i in failing))


def _raise_kink(numerical, result, *args, **kwargs):
    """Re-take the failed numerical derivatives with the kink test: a kink
    explains the failure (NondifferentiablePointError carrying ``result``)."""
    try:
        numerical(*args, **kwargs)
    except NondifferentiablePointError as e:
        e.result = result
        raise


def _index(k, shape):
    return tuple(int(i) for i in numpy.unravel_index(k, shape)) if shape else ()


# ---------------------------------------------------------------------------
# Leaks and threads

def _check_leaks(problem, mode, detect, result):
    """A second run of the check must free every xgrad array it makes."""
    gc.collect()
    before = _core._live_array_count()
    _check_once(problem, mode, as_rng(1), detect)
    gc.collect()
    after = _core._live_array_count()
    if after > before:
        raise problem.failure('leaked {} xgrad array(s): {} were alive before a run of the '
                              'check and {} after it (after gc.collect())'.format(
                                  after - before, before, after), result)


def _check_threads(problem, mode, detect, result):
    """The check must also pass when run from two threads at once."""
    start = threading.Barrier(2)
    errors = [None, None]

    def work(k):
        try:
            start.wait()
            _check_once(problem, mode, as_rng(2 + k), detect)
        except BaseException as e:  # NOQA: reported below, in the caller's thread
            errors[k] = e

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, e in enumerate(errors):
        if e is not None:
            raise problem.failure('fails when run from two threads at once (thread {}): '
                                  '{}: {}'.format(k, type(e).__name__, e),
                                  getattr(e, 'result', result)) from e
