"""Numerical gradients: central differences evaluated in float64.

``numerical_grad(f, inputs, grad_outputs)`` is the reference that the
gradient checks compare analytic gradients with. Every float input is copied
to float64 and ``f`` is evaluated on those copies inside ``no_backprop_mode``,
so the differences are float64-accurate whatever the inputs' dtype: a float16
or float32 gradient is compared with the true gradient of the same function
at the same (exactly representable) point, not with the round-off noise of
its own precision. Non-float inputs (labels, indices) are passed unchanged.

Two modes:

* full (``direction=None``): for every element of every float input, the
  vector-Jacobian product ``sum_j <gy_j, d f_j / d x_i>``; two evaluations of
  ``f`` per element;
* directional (``direction='random'`` or one array per input): the
  derivative of ``sum_j <gy_j, f_j(x + t v)>`` at ``t = 0``; two evaluations
  in all. A check compares it with ``<analytic gradient, v>``.

Non-differentiable points (``detect_nondifferentiable=True``): ``f`` is also
evaluated at half steps and at the point itself, and for every output element
that enters the gradient the five values ``f(x + s eps)``, s in (-1, -1/2, 0,
1/2, 1), are compared with the least-squares quadratic through them. A smooth
``f`` is a quadratic to O(eps^3) there, so the RMS residual is a tiny part of
the values' range (about 1e-6 for exp, log, tanh at ordinary points with eps =
1e-3); a kink or a jump anywhere in (x - eps, x + eps), which is exactly where
it spoils the central difference, leaves several percent (5% for relu at its
kink, 11% for abs). The point is reported with
:class:`NondifferentiablePointError` when the residual exceeds ``KINK_RTOL``
(1e-3) times the range plus ``KINK_NOISE_ULPS`` (64) units of round-off of
the output's dtype, or when the values are finite at some of the five points
and not at others (a pole or the edge of the domain). That catches relu's kink
up to 0.98 eps away, and also reports smooth points where eps is too large for
the curvature (1/x for x below about 10 eps), where the central difference is
off by more than the float32 tolerance anyway. It cannot tell a kink from a
degenerate smooth point where f' and f'' both vanish within eps (x**3 at 0),
which looks the same at that scale: such points are reported too.
"""

import math
import numbers

import numpy

from xgrad import _core
from xgrad._errors import GradientCheckArgumentError, GradientCheckError
from xgrad.testing._tolerances import default_eps, least_precise

F64 = numpy.dtype('float64')

# The kink test (module docstring): residual > KINK_RTOL * range + round-off.
KINK_RTOL = 1e-3
KINK_NOISE_ULPS = 64
# Its stencil, in units of eps, and the two discrete orthogonal polynomials on
# it beyond degree 2: their components are the residual of the best quadratic.
STENCIL = (-1.0, -0.5, 0.0, 0.5, 1.0)
_CUBIC = numpy.array([-1.0, 2.0, 0.0, -2.0, 1.0])
_QUARTIC = numpy.array([1.0, -4.0, 6.0, -4.0, 1.0])

_wrap = _core._array_of


class NondifferentiablePointError(GradientCheckError):
    """The inputs sit on (within eps of) a point where the function is not
    differentiable, so central differences there mean nothing: a problem of
    the sample, not of the gradient. ``input_index`` and ``element_index``
    (a tuple; None in directional mode) say where."""

    def __init__(self, message, input_index=None, element_index=None):
        super().__init__(message)
        self.input_index = input_index
        self.element_index = element_index


def numerical_grad(f, inputs, grad_outputs, eps=None, *, direction=None,
                   detect_nondifferentiable=False, rng=None):
    """Central differences of ``f`` at ``inputs``, projected on ``grad_outputs``.

    f: ``f(list of xgrad arrays)`` returns an xgrad array or a tuple/list of
        them (None for an output without value). It is called on float64
        copies of the float inputs, inside ``no_backprop_mode``, and must not
        keep or modify the arrays it gets (they are perturbed in place).
    inputs: list of xgrad arrays (any dtype; non-float ones are constants).
    grad_outputs: list with one xgrad array (or None: the output does not
        enter) per output of ``f``.
    eps: the step: None (``default_eps`` of each input's dtype: 1e-5 for
        float64, 1e-3 for float32 and float16; or of the grad_outputs' dtype
        where that is less precise, since ``f`` then returns values that
        are only that precise even on float64 inputs), one positive float
        for all inputs, or a list with one float or array (of the input's
        shape) per input.
    direction: None for the full gradient: a list with one float64 NumPy
        array per input (None for non-float inputs). ``'random'`` (a standard
        normal draw from ``rng``, a ``numpy.random.Generator``, an int seed
        or None for seed 0, scaled to unit norm over all inputs) or a list
        with one array (or None) per input: the directional derivative along
        it, a float. The line ``x + t v`` is sampled where no element moves
        by more than its eps.
    detect_nondifferentiable: also test that ``f`` is smooth around the
        inputs (module docstring; 4 instead of 2 evaluations per element,
        plus one) and raise :class:`NondifferentiablePointError` if it is
        not.

    Raises TypeError or ValueError (never a wrong result) for arguments of
    the wrong type, length or shape, or an ``f`` that returns something
    other than xgrad arrays.
    """
    numerics = Numerics(f, inputs, grad_outputs, eps)
    if direction is None:
        return numerics.gradients(detect=detect_nondifferentiable)
    return numerics.directional(numerics.directions(direction, rng),
                                detect=detect_nondifferentiable)


# ---------------------------------------------------------------------------
# Argument checks, shared with the gradient checks

def function_name(f):
    """How messages call the function ``f``."""
    return getattr(f, '__name__', None) or repr(f)


def array_list(arrays, what, allow_none=False):
    """``arrays`` (a list or tuple of xgrad arrays) as a list."""
    if not isinstance(arrays, (list, tuple)):
        raise TypeError('{} must be a list or tuple of xgrad arrays, not {}'.format(
            what, type(arrays).__name__))
    for i, a in enumerate(arrays):
        if not (isinstance(a, _core.ndarray) or (allow_none and a is None)):
            raise TypeError('{}[{}] must be an xgrad.ndarray{}, not {}'.format(
                what, i, ' or None' if allow_none else '', type(a).__name__))
    return list(arrays)


def outputs_of(result, what):
    """What the function ``what`` returned, as a tuple of outputs."""
    if isinstance(result, _core.ndarray):
        return (result,)
    if not isinstance(result, (tuple, list)):
        raise TypeError('{}: the function must return an xgrad array or a tuple/list '
                        'of xgrad arrays (None allowed), but it returned a {}'.format(
                            what, type(result).__name__))
    for j, y in enumerate(result):
        if y is not None and not isinstance(y, _core.ndarray):
            raise TypeError('{}: the function returned a {} as output {}; outputs must '
                            'be xgrad arrays or None'.format(what, type(y).__name__, j))
    return tuple(result)


def match_grad_outputs(outputs, grad_outputs, what):
    """GradientCheckArgumentError (a ValueError) unless there is one output
    gradient of the right shape per output."""
    if len(outputs) != len(grad_outputs):
        raise GradientCheckArgumentError(
            '{}: the function returned {} output(s) but grad_outputs has {} entries (one '
            'per output, None for an output without gradient; in ChainerX\'s words: Size '
            'of function outputs: {} and size of grad outputs: {} must be same)'.format(
                what, len(outputs), len(grad_outputs), len(outputs), len(grad_outputs)))
    for j, (y, gy) in enumerate(zip(outputs, grad_outputs)):
        if y is not None and gy is not None and y.shape != gy.shape:
            raise GradientCheckArgumentError(
                '{}: grad_outputs[{}] has shape {}, but output {} has shape {}'.format(
                    what, j, gy.shape, j, y.shape))


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, numpy.bool_))


def steps(eps, inputs, grad_outputs=()):
    """One central-difference step per input (see ``numerical_grad``): None
    for non-float inputs, else a positive float or a float64 array of the
    input's shape. An eps that is an xgrad array must also have the input's
    dtype (ChainerX's rule). Bad values raise GradientCheckArgumentError (a
    ValueError and, as in ChainerX, an XgradError)."""
    outputs = [g.dtype for g in grad_outputs if g is not None]
    n = len(inputs)
    if eps is None or _is_number(eps):
        eps = [eps] * n
    elif not isinstance(eps, (list, tuple)):
        raise TypeError('eps must be None, a float or a list with one float or array '
                        'per input, not {}'.format(type(eps).__name__))
    elif len(eps) != n:
        raise GradientCheckArgumentError(
            'eps has {} entries for {} inputs (Number of input arrays and eps arrays do '
            'not match)'.format(len(eps), n))
    out = []
    for i, (x, e) in enumerate(zip(inputs, eps)):
        if isinstance(e, _core.ndarray) and e.shape == x.shape and e.dtype != x.dtype:
            raise GradientCheckArgumentError(
                'eps[{}] has dtype {}, but input {} has dtype {}'.format(
                    i, e.dtype, i, x.dtype))
        if x.dtype.kind != 'f':
            out.append(None)
            continue
        if e is None:
            e = default_eps(least_precise([x.dtype] + outputs))
        elif isinstance(e, (_core.ndarray, numpy.ndarray)):
            e = numpy.array(e.to_numpy() if isinstance(e, _core.ndarray) else e, F64)
            if e.shape != x.shape:
                raise GradientCheckArgumentError(
                    'eps[{}] has shape {}, but input {} has shape {}'.format(
                        i, e.shape, i, x.shape))
            if not numpy.all(numpy.isfinite(e) & (e > 0)):
                raise GradientCheckArgumentError(
                    'eps[{}] must be positive and finite'.format(i))
        elif _is_number(e):
            e = float(e)
            if not (math.isfinite(e) and e > 0):
                raise GradientCheckArgumentError(
                    'eps[{}] must be positive and finite, not {}'.format(i, e))
        else:
            raise TypeError('eps[{}] must be a float or an array, not {}'.format(
                i, type(e).__name__))
        out.append(e)
    return out


def as_rng(rng):
    """A NumPy random generator from ``rng`` (None: seed 0)."""
    if rng is None or (isinstance(rng, numbers.Integral) and not isinstance(rng, bool)):
        return numpy.random.default_rng(0 if rng is None else rng)
    if isinstance(rng, (numpy.random.Generator, numpy.random.RandomState)):
        return rng
    raise TypeError('rng must be a numpy.random.Generator, an int seed or None, not '
                    '{}'.format(type(rng).__name__))


# ---------------------------------------------------------------------------
# The differences

class Numerics:
    """Central differences of ``f`` around ``inputs``, projected on
    ``grad_outputs``. The float inputs are float64 copies, wrapped once
    (without copying) as the xgrad arrays ``f`` gets and perturbed in place,
    which keeps an evaluation's cost to that of ``f`` plus a few
    microseconds. ``f`` must therefore not keep or modify its arguments.

    targets: indexes of the inputs to differentiate (default: the float ones).
    what: how messages start; labels: how they call each input.
    """

    def __init__(self, f, inputs, grad_outputs, eps=None, targets=None, what=None,
                 labels=None):
        inputs = array_list(inputs, 'inputs')
        if not inputs:
            raise ValueError('numerical_grad needs at least one input')
        if not callable(f):
            raise TypeError('f must be callable, not {}'.format(type(f).__name__))
        self.f = f
        self.what = what or 'numerical_grad({!r})'.format(function_name(f))
        self.labels = labels or ['input {}'.format(i) for i in range(len(inputs))]
        grad_outputs = array_list(grad_outputs, 'grad_outputs', allow_none=True)
        self.steps = steps(eps, inputs, grad_outputs)
        self.targets = ([i for i, x in enumerate(inputs) if x.dtype.kind == 'f']
                        if targets is None else list(targets))
        self.gys = [None if g is None else numpy.array(g.to_numpy(), F64) for g in grad_outputs]
        self.context = inputs[0].device.context
        self.inputs = inputs
        self.data = [numpy.array(x.to_numpy(), F64) if x.dtype.kind == 'f' else None
                     for x in inputs]
        # On native devices the arguments wrap the float64 copies once (each
        # evaluation sees them perturbed in place); a GPU needs fresh copies.
        self.on_host = all(x.device.is_native for x in inputs)
        self.args = self._wrapped() if self.on_host else None
        self.matched = False  # whether the outputs were matched with grad_outputs
        self.round_off = None  # per output: what the kink test takes as noise

    # -- evaluations --------------------------------------------------------

    def _wrapped(self):
        return [x if d is None else _wrap(d, x.device) for x, d in zip(self.inputs, self.data)]

    def _arguments(self):
        """The inputs at the current (perturbed) data."""
        return list(self.args) if self.on_host else self._wrapped()

    def _outputs(self):
        """``f`` at the current data: the raw outputs that enter the gradient
        (None for the others), not copied."""
        ys = outputs_of(self.f(self._arguments()), self.what)
        if not self.matched or len(ys) != len(self.gys):
            match_grad_outputs(ys, self.gys, self.what)
            self.matched = True
        return [None if gy is None or y is None else y.to_numpy() for y, gy in zip(ys, self.gys)]

    def _copies(self):
        """``f`` at the current data as float64 copies (the outputs may be
        views of the data, which is perturbed next)."""
        return [None if y is None else numpy.array(y, F64) for y in self._outputs()]

    def _center(self):
        """``f`` at the inputs (copies), noting each output's round-off."""
        ys = self._outputs()
        self.round_off = [None if y is None or y.dtype.kind != 'f'
                          else KINK_NOISE_ULPS * numpy.finfo(y.dtype).eps for y in ys]
        return [None if y is None else numpy.array(y, F64) for y in ys]

    def _project(self, plus, minus):
        """``sum_j <gy_j, plus_j - minus_j>`` (``plus`` holds float64 copies)."""
        total = 0.0
        for gy, p, m in zip(self.gys, plus, minus):
            if p is not None:
                total += float(numpy.vdot(gy, p - m))
        return total

    # -- full gradients -----------------------------------------------------

    def gradients(self, detect=False, only=None):
        """The gradient of every target input (of those in ``only``), a
        float64 array each; None for the other inputs."""
        grads = [None] * len(self.data)
        with _core.no_backprop_mode(self.context):
            center = self._center() if detect else None
            for i in (self.targets if only is None else only):
                grads[i] = self._gradient(i, center)
        return grads

    def _gradient(self, i, center):
        data = self.data[i]
        flat = data.reshape(-1)  # a view: writing it perturbs the input
        step = self.steps[i]
        step = numpy.full(data.size, step) if isinstance(step, float) else step.reshape(-1)
        grad = numpy.empty(data.size)
        stencils = []  # with ``center``: the outputs at the 5 points, per element
        for k in range(data.size):
            x0, h = flat[k], step[k]
            flat[k] = x0 + h
            plus = self._copies()
            flat[k] = x0 - h
            if center is None:
                # Projected before the data is restored: outputs may view it.
                grad[k] = self._project(plus, self._outputs()) / (2 * h)
                flat[k] = x0
                continue
            minus = self._copies()
            flat[k] = x0 - h / 2
            half_minus = self._copies()
            flat[k] = x0 + h / 2
            half_plus = self._copies()
            flat[k] = x0
            stencils.append((minus, half_minus, center, half_plus, plus))
            grad[k] = self._project(plus, minus) / (2 * h)
        if stencils:
            kink = self._kink(stencils, 'x + s*eps')
            if kink is not None:
                k, why = kink
                index = _index(k, data.shape)
                raise NondifferentiablePointError(
                    '{}: {} sits on a non-differentiable point at element {} (value '
                    '{:.6g}): the function is not smooth within eps {:.3g} there: {}'.format(
                        self.what, self.labels[i], index, flat[k], step[k], why),
                    input_index=i, element_index=index)
        return grad.reshape(data.shape)

    # -- directional derivatives --------------------------------------------

    def directions(self, direction, rng=None):
        """``{input index: float64 array}``: a random unit direction over the
        targets (``'random'``) or the given one (a list, one entry per input)."""
        if isinstance(direction, str):
            if direction != 'random':
                raise ValueError("direction must be None, 'random' or a list of arrays, "
                                 "not {!r}".format(direction))
            rng = as_rng(rng)
            v = {i: rng.standard_normal(self.data[i].shape) for i in self.targets}
            norm = math.sqrt(sum(float(numpy.vdot(a, a)) for a in v.values()))
            return {i: a / norm for i, a in v.items()} if norm > 0 else v
        if not isinstance(direction, (list, tuple)):
            raise TypeError("direction must be None, 'random' or a list of arrays, not "
                            "{}".format(type(direction).__name__))
        if len(direction) != len(self.data):
            raise ValueError('direction has {} entries for {} inputs'.format(
                len(direction), len(self.data)))
        v = {}
        for i, d in enumerate(direction):
            if d is None:
                continue
            if i not in self.targets:
                raise ValueError('direction[{}] must be None: {} is not differentiated '
                                 '(dtype {})'.format(i, self.labels[i],
                                                     self.inputs[i].dtype))
            a = numpy.array(d.to_numpy() if isinstance(d, _core.ndarray) else d, F64)
            if a.shape != self.data[i].shape:
                raise ValueError('direction[{}] has shape {}, but input {} has shape '
                                 '{}'.format(i, a.shape, i, self.data[i].shape))
            v[i] = a
        return v

    def directional(self, v, detect=False):
        """``d/dt sum_j <gy_j, f_j(x + t v)>`` at ``t = 0``, a float."""
        v = {i: a for i, a in v.items() if numpy.any(a)}
        if not v:
            return 0.0
        # The largest step along the line that moves no element by more than its eps.
        t = min(float(numpy.min(numpy.divide(
            self.steps[i], numpy.abs(a), out=numpy.full(a.shape, numpy.inf),
            where=a != 0))) for i, a in v.items())
        base = {i: self.data[i].copy() for i in v}

        def move(s):  # to x + s t v
            for i, a in v.items():
                numpy.multiply(a, s * t, out=self.data[i])
                self.data[i] += base[i]

        kink = None
        try:
            with _core.no_backprop_mode(self.context):
                move(1.0)
                plus = self._copies()
                move(-1.0)
                if detect:
                    minus = self._copies()
                    samples = [minus]
                    for s in (-0.5, 0.0, 0.5):
                        move(s)
                        samples.append(self._center() if s == 0.0 else self._copies())
                    kink = self._kink([samples + [plus]], 'x + s*t*v')
                else:
                    minus = self._outputs()
                # Projected before the data is restored: outputs may view it.
                derivative = self._project(plus, minus) / (2 * t)
        finally:
            for i in v:
                self.data[i][...] = base[i]
        if kink is not None:
            culprits = list(v) if len(v) == 1 else [
                i for i in v if self._line_has_kink({i: v[i]})]
            index = culprits[0] if culprits else None
            raise NondifferentiablePointError(
                '{}: {} on a non-differentiable point along the check direction: the '
                'function is not smooth within eps there: {}'.format(
                    self.what, 'the inputs sit' if index is None else
                    self.labels[index] + ' sits', kink[1]),
                input_index=index)
        return derivative

    def _line_has_kink(self, v):
        try:
            self.directional(v, detect=True)
        except NondifferentiablePointError:
            return True
        return False

    # -- the kink test --------------------------------------------------------

    def _kink(self, stencils, points):
        """Whether the outputs at the five stencil points show that ``f`` is
        not smooth there: ``(case, why)`` for the first case that does, or
        None. ``stencils``: per case (element perturbed), the outputs (lists
        of float64 copies) at the points; ``points`` says where they are."""
        for j, noise in enumerate(self.round_off):
            if noise is None:
                continue
            shape = stencils[0][2][j].shape
            ys = numpy.array([[s[j] for s in case] for case in stencils]).reshape(
                len(stencils), len(STENCIL), -1)  # (cases, points, elements)
            finite = numpy.isfinite(ys)
            mixed = finite.any(axis=1) & ~finite.all(axis=1)
            if mixed.any():
                c, m = numpy.unravel_index(numpy.argmax(mixed), mixed.shape)
                return int(c), ('output {} element {} is finite at some of the points {}, '
                                's = -1, -1/2, 0, 1/2, 1, only: {}'.format(
                                    j, _index(m, shape), points, _values(ys[c, :, m])))
            ys = numpy.where(finite, ys, 0.0)
            residual = numpy.sqrt((numpy.tensordot(_CUBIC, ys, (0, 1)) ** 2 / 10 +
                                   numpy.tensordot(_QUARTIC, ys, (0, 1)) ** 2 / 70) / 5)
            span = ys.max(axis=1) - ys.min(axis=1)
            bad = residual > KINK_RTOL * span + noise * numpy.abs(ys).max(axis=1)
            if bad.any():
                c = int(numpy.argmax(bad.any(axis=1)))  # the first case, its worst element
                m = int(numpy.argmax(numpy.where(bad[c], residual[c] / numpy.maximum(
                    span[c], numpy.finfo(F64).tiny), 0.0)))
                return c, ('output {} element {} at {}, s = -1, -1/2, 0, 1/2, 1, is {}: '
                           'their RMS distance from the best quadratic, {:.3g}, is {:.3g}% '
                           'of their range (a smooth function stays below {:g}%)'.format(
                               j, _index(m, shape), points, _values(ys[c, :, m]),
                               residual[c, m], 100 * residual[c, m] / span[c, m],
                               100 * KINK_RTOL))
        return None


def _index(k, shape):
    """The index (a tuple of ints) of flat element ``k`` of ``shape``."""
    return tuple(int(i) for i in numpy.unravel_index(k, shape)) if shape else ()


def _values(a):
    return '[{}]'.format(', '.join('{:.6g}'.format(v) for v in a))
