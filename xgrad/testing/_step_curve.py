"""The error of the central difference against its step: the standard
diagnostic of a failed gradient check (the curve of the HTML report).

For a case whose comparison failed, the analytic gradient is compared with
central differences taken at the steps ``STEPS`` (1e-1 ... 1e-12) and the
step the check used, at the very inputs and seeds of the failed draw. The
error at each step is the relative error the check judges,

    max over elements of |analytic - numerical| / (|numerical| + atol/rtol),

which is at most rtol exactly where |analytic - numerical| <= atol + rtol *
|numerical|, the check's tolerance: below the line y = rtol a step passes.
(With rtol 0 it is the absolute error against atol.)

Read on a log-log plot, a right gradient gives a V: the truncation error
falls as step**2 from the right, the round-off of the function's values
grows as 1/step to the left, and the bottom lies far below the tolerance.
A wrong gradient flattens the V into a floor at the size of its error,
above the tolerance at every step. A step too large or too small shows as a
check step on one arm of the V, while another step would pass. A kink
within a step of the input gives a shelf, about flat at large steps, that
drops at once to the V once the step is smaller than the distance to the
kink. ``diagnose`` says which of these the curve looks like.
"""

import math

import numpy

from xgrad.testing import _checks
from xgrad.testing._numerical import Numerics

STEPS = tuple(10.0 ** -k for k in range(1, 13))


def measure(case, setup, eps, atol, rtol):
    """The curve of the failed ``case`` at the draw ``setup`` (a driver
    ``_Setup``), its check having used step ``eps`` and tolerance
    ``atol``, ``rtol``: a dict for the JSON report, or one with 'error'
    saying why it could not be measured."""
    try:
        problem = _problem(case, setup, atol, rtol)
        analytic = problem.analytic(problem.targets)
        steps = sorted(set(STEPS) | {float(eps)}, reverse=True)
        errors = [_error(problem, analytic, h, atol, rtol) for h in steps]
    except Exception as e:  # NOQA: the report says why, the verdict stands
        return {'error': '{}: {}'.format(type(e).__name__, e)}
    curve = {'steps': steps, 'errors': errors, 'eps': float(eps), 'atol': float(atol),
             'rtol': float(rtol), 'measure': 'relative' if rtol > 0 else 'absolute'}
    curve['diagnosis'] = diagnose(curve)
    return curve


def _problem(case, setup, atol, rtol):
    name = '{} ({})'.format(case.op, case.sample.name)
    if case.order == 1:
        return _checks.comparison(1, setup.func, setup.inputs, setup.grad_outputs,
                                  atol=atol, rtol=rtol, name=name)
    gys = [g.require_grad() if g is not None else None for g in setup.grad_outputs]
    return _checks.comparison(2, setup.func, setup.inputs, gys, setup.grad_grad_inputs,
                              atol=atol, rtol=rtol, name=name)


def _error(problem, analytic, step, atol, rtol):
    """The error (module docstring) at ``step``; None where the central
    difference is not finite (the step left the function's domain)."""
    try:
        numerical = Numerics(problem.f, problem.inputs, problem.seeds, step,
                             targets=problem.targets, what=problem.what).gradients()
    except Exception:  # NOQA: e.g. a step that leaves the domain of a log
        return None
    worst = 0.0
    for i in problem.targets:
        n = numerical[i]
        a = numpy.zeros_like(n) if analytic[i] is None else analytic[i]
        if not n.size:
            continue
        with numpy.errstate(invalid='ignore', divide='ignore'):
            err = numpy.abs(a - n)
            if rtol > 0:
                err = err / (numpy.abs(n) + atol / rtol)
        if not numpy.all(numpy.isfinite(err)):
            return None
        worst = max(worst, float(err.max()))
    return worst


def diagnose(curve):
    """One sentence on what the curve looks like (module docstring)."""
    steps, errors = curve['steps'], curve['errors']
    line = curve['rtol'] if curve['measure'] == 'relative' else curve['atol']
    points = [(h, e) for h, e in zip(steps, errors) if e is not None]
    if not points:
        return 'no step gave a finite central difference'
    best_h, best = min(points, key=lambda p: (p[1], -p[0]))
    used = dict(points).get(curve['eps'])
    if best > line:
        return ('wrong gradient: the error stays above the tolerance at every step (lowest '
                '{:.2g} at step {:.0e}), so no step makes the central difference agree: '
                'the analytic gradient is off by about that much'.format(best, best_h))
    if used is not None and used <= line:
        return ('passes at step {:.0e} on these inputs now: the failure came with other '
                'values (flaky: compare the seeds)'.format(curve['eps']))
    passing = [h for h, e in points if e <= line]
    if best_h > curve['eps']:
        return ('step too small: round-off swamps the central difference at step {:.0e}; '
                'steps {:.0e} to {:.0e} pass (set OpInfo.eps)'.format(
                    curve['eps'], min(passing), max(passing)))
    if _shelf(points, best_h):
        return ('kink: the error is flat at large steps and drops at once below a step '
                'of about {:.0e}: a point where the function is not differentiable lies '
                'that close to the input (narrow the domain, or widen its margin)'.format(
                    max(passing)))
    return ('step too large: truncation error at step {:.0e}; steps {:.0e} to {:.0e} '
            'pass (set OpInfo.eps, or a smoother domain)'.format(
                curve['eps'], min(passing), max(passing)))


def _shelf(points, best_step):
    """Whether, from the largest step down to the best one, the error first
    stays about level and then falls faster than step**2 (truncation error
    of a smooth function falls as step**2, smoothly)."""
    arm = [(h, e) for h, e in points if h >= best_step and e > 0]
    slopes = [math.log10(e0 / e1) / math.log10(h0 / h1)
              for (h0, e0), (h1, e1) in zip(arm, arm[1:])]
    return len(slopes) >= 2 and abs(slopes[0]) < 0.5 and max(slopes) > 2.5
