"""Elementwise math beyond the Cython hot set: exponentials and logarithms,
trigonometric and hyperbolic functions, activations, rounding, and the
remaining binary arithmetic.

A unary op here is one declaration (``_unary``): the NumPy ufunc (or
function) that computes it, its derivative written against an array
namespace ``xp`` (so it is differentiable again, see ``_op.pyx``), which of
x and y the derivative reads, and its registry entry (domain away from poles
and kinks). Result dtypes follow ChainerX's rule for math functions
(xgrad/_dtypes.pyx): ``sin`` of an int64 or bool array is float32, of a
float16 array float16; ``sign`` keeps its input's dtype.
"""

import inspect
import math
import numbers

import numpy

from xgrad._backend import cuda
from xgrad._backend import native_kernels
from xgrad._ops import _args
from xgrad._ops._op import PyOp
from xgrad._ops.elementwise import relu
from xgrad._ops.registry import (
    INT_DTYPES, BOOL, OpInfo, Sample, away_from, nonzero, positive, real, register,
    within)

__all__ = ['expm1', 'exp2', 'log1p', 'log2', 'log10', 'reciprocal', 'sin', 'cos',
           'tan', 'arcsin', 'arccos', 'arctan', 'sinh', 'cosh', 'arcsinh', 'arccosh',
           'fabs', 'sign', 'ceil', 'floor', 'softplus', 'leaky_relu', 'elu',
           'clipped_relu', 'clip', 'erf', 'crelu', 'gelu']

UNARY_SAMPLES = (Sample((2, 3)), Sample(()), Sample((3, 0)))
BINARY_SAMPLES = (Sample((2, 3), (2, 3)), Sample((2, 3), (3,)),
                  Sample((2, 1), (1, 3)), Sample((), ()), Sample((0, 3), (3,)))
LN2 = math.log(2.0)
LN10 = math.log(10.0)


class _Unary(PyOp):
    """y = f(x) elementwise; ``derivative(xp, gy, x, y)`` -> gx. Float data on
    a GPU goes to our kernel of the same name, forward and fused backward
    (which reads the same ``uses``)."""
    compute = None
    derivative = None
    uses = ''  # which of 'x', 'y' the derivative reads
    promotion = 'float'  # see _unary

    def __init__(self, kwargs):
        self.kwargs = kwargs

    def forward(self, inputs):
        if 'x' in self.uses:
            self.retain_inputs((0,))
        if 'y' in self.uses:
            self.retain_outputs((0,))
        if self._our_gpu_kernel(inputs[0]):
            return (cuda.unary(self.op_name, inputs[0]),)
        y = _args.array_result(_checked(type(self).compute, self.op_name, inputs[0],
                                        **self.kwargs))
        if self.promotion == 'float' and y.dtype != inputs[0].dtype:
            # NumPy 1.x's value-based casting can widen 0-d results.
            y = y.astype(inputs[0].dtype)
        return (y,)

    def grads(self, xp, targets, gys, xs, ys):
        x = xs[0] if xs else None
        y = ys[0] if ys else None
        if xp.raw and self._our_gpu_kernel(gys[0]):
            return (xp.unary_grad(self.op_name, gys[0], x, y),)
        g = type(self).derivative(xp, gys[0], x, y, **self.kwargs)
        # NumPy 1.x's value-based casting can widen a 0-d gradient.
        return (g if g.dtype == gys[0].dtype else xp.cast(g, gys[0].dtype),)

    def _our_gpu_kernel(self, a):
        return (cuda.on_gpu(a) and a.dtype.kind == 'f' and not self.kwargs
                and self.op_name in cuda.kernels().UNARY)


def _unary(name, compute, derivative=None, uses='x', domain=real, ref=None,
           doc='', ints=True, samples=UNARY_SAMPLES, tol=None, check_float=False,
           public=None, promotion='float', **info):
    """Define and register the unary op ``name``; returns its function.
    ``derivative`` None: not differentiable (the result never joins a graph).
    ``promotion`` 'float': bool and int inputs are computed in float32 (a
    math function); 'result_type': the input's dtype is kept.
    ``public``: turns the generic ``f(x, **kwargs)`` into the public
    signature (with argument checks)."""
    cls = type(name.title().replace('_', ''), (_Unary,), {
        'op_name': name, 'compute': staticmethod(compute), 'uses': uses,
        'promotion': promotion,
        'derivative': staticmethod(derivative) if derivative else None})

    def op(x, **kwargs):
        x = _args.as_array(x, 'x')
        if check_float:
            _args.require_float(x, name)
        if promotion == 'float' and x.dtype.kind != 'f':
            x = x.astype(_args.promoted_float(x.dtype))
        if derivative is None:
            return _args.constant(x, _checked, compute, name, _args.raw(x), **kwargs)
        return _args.apply(cls(kwargs), x)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc or 'NumPy\'s ``{}``, elementwise.'.format(name)
    op.__signature__ = _signature(compute)
    if public is not None:
        op = public(op)
    register(OpInfo(name, op, ref=ref or compute, samples=samples, domain=domain,
                    int_dtypes=(() if not ints else INT_DTYPES + (BOOL,) if promotion == 'float'
                                else _accepted(compute, INT_DTYPES + (BOOL,))),
                    differentiable=derivative is not None, tol=tol or {},
                    promotion=promotion, **info))
    return op


def _signature(compute):
    """``(x, <compute's keyword parameters>)``: what ``op(x, **kwargs)``
    takes, for help() and inspect (a NumPy ufunc takes ``x`` alone)."""
    rest = []
    if inspect.isfunction(compute):
        rest = list(inspect.signature(compute).parameters.values())[1:]
    return inspect.Signature(
        [inspect.Parameter('x', inspect.Parameter.POSITIONAL_OR_KEYWORD)] + rest)


def _accepted(compute, dtypes):
    """The dtypes among ``dtypes`` that NumPy's ``compute`` takes."""
    ok = []
    for d in dtypes:
        try:
            compute(numpy.ones(1, d))
            ok.append(d)
        except TypeError:
            pass
    return tuple(ok)


def _checked(compute, name, x, **kwargs):
    """``compute`` (NumPy's function, or CuPy's for GPU data ``x``) on raw
    ``x``, a TypeError from it as a DtypeError naming the op."""
    compute = _args.in_module(compute, _args.module_of(x))
    try:
        return compute(x, **kwargs)
    except TypeError as e:
        raise _args.DtypeError('{}: {}'.format(name, e)) from None


# ---------------------------------------------------------------------------
# Exponentials and logarithms

expm1 = _unary('expm1', numpy.expm1, lambda xp, gy, x, y: gy * (y + 1), uses='y')
exp2 = _unary('exp2', numpy.exp2, lambda xp, gy, x, y: gy * y * LN2, uses='y')
log1p = _unary('log1p', numpy.log1p, lambda xp, gy, x, y: gy / (x + 1),
               domain=within(-0.5, 2))
log2 = _unary('log2', numpy.log2, lambda xp, gy, x, y: gy / (x * LN2), domain=positive)
log10 = _unary('log10', numpy.log10, lambda xp, gy, x, y: gy / (x * LN10),
               domain=positive)
reciprocal = _unary(
    'reciprocal', numpy.reciprocal, lambda xp, gy, x, y: -(gy * y * y), uses='y',
    domain=nonzero,
    doc='1 / x; bool and int arrays give float32 (ChainerX: 1 / x, a true division).')

# ---------------------------------------------------------------------------
# Trigonometric and hyperbolic

sin = _unary('sin', numpy.sin, lambda xp, gy, x, y: gy * xp.cos(x))
cos = _unary('cos', numpy.cos, lambda xp, gy, x, y: -(gy * xp.sin(x)))
tan = _unary('tan', numpy.tan, lambda xp, gy, x, y: gy * (y * y + 1), uses='y')
arcsin = _unary('arcsin', numpy.arcsin,
                lambda xp, gy, x, y: gy / xp.sqrt(1 - x * x), domain=within(-0.8, 0.8))
arccos = _unary('arccos', numpy.arccos,
                lambda xp, gy, x, y: -(gy / xp.sqrt(1 - x * x)),
                domain=within(-0.8, 0.8))
arctan = _unary('arctan', numpy.arctan, lambda xp, gy, x, y: gy / (x * x + 1))
sinh = _unary('sinh', numpy.sinh, lambda xp, gy, x, y: gy * xp.cosh(x))
cosh = _unary('cosh', numpy.cosh, lambda xp, gy, x, y: gy * xp.sinh(x))
arcsinh = _unary('arcsinh', numpy.arcsinh,
                 lambda xp, gy, x, y: gy / xp.sqrt(x * x + 1))
arccosh = _unary('arccosh', numpy.arccosh,
                 lambda xp, gy, x, y: gy / xp.sqrt(x * x - 1), domain=within(1.3, 3))


# ---------------------------------------------------------------------------
# Absolute value, sign, rounding

def _sign_grad(xp, gy, x, y):
    """gy * sign(x): on host arrays native_kernels.abs_grad's one pass."""
    if xp.raw and type(x) is numpy.ndarray and type(gy) is numpy.ndarray:
        return native_kernels.abs_grad(gy, x)
    return gy * xp.sign(x)


# fabs by NumPy's absolute (the op makes ints float first, and on floats the
# two clear the sign bit alike): NumPy's fabs calls libm once an element, 13x
# absolute's time on 512K float32.
fabs = _unary('fabs', numpy.absolute, _sign_grad, ref=numpy.fabs, domain=nonzero,
              doc='|x| as a float (NumPy\'s ``fabs``); gradient sign(x), 0 at 0.')
sign = _unary('sign', numpy.sign, promotion='result_type',
              doc='The sign of x (-1, 0 or 1) in x\'s dtype; no gradient.')
ceil = _unary('ceil', numpy.ceil, domain=within(-3, 3),
              doc='The ceiling of x; no gradient.')
floor = _unary('floor', numpy.floor, domain=within(-3, 3),
               doc='The floor of x; no gradient.')


# ---------------------------------------------------------------------------
# The error function

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf(x):
    """erf elementwise (NumPy has none): our vector kernel on the host, our
    CUDA kernel on a GPU; integer input gives a float result."""
    dtype = x.dtype if x.dtype.kind == 'f' else _args.promoted_float(x.dtype)
    x = x.astype(dtype, copy=False)
    if cuda.on_gpu(x):
        return cuda.unary('erf', x)
    y = native_kernels.erf_forward(x)
    if y is None:  # not a NumPy array of a float dtype the kernel takes
        y = numpy.frompyfunc(math.erf, 1, 1)(x)
    return numpy.asarray(y, dtype=dtype)


def _erf_grad(xp, gy, x, y):
    """gy * 2/sqrt(pi) * exp(-x^2): one fused pass on NumPy arrays, else the
    formula in ``xp`` (recorded in double backprop)."""
    if xp.raw:
        g = native_kernels.erf_grad(gy, x)  # None: not same-shape NumPy floats
        if g is not None:
            return g
    return gy * (xp.exp(-(x * x)) * _TWO_OVER_SQRT_PI)


erf = _unary('erf', _erf, _erf_grad,
             doc='The error function 2/sqrt(pi) * integral of exp(-t**2) from 0 to x.')


# ---------------------------------------------------------------------------
# Activations (ChainerX's names and arguments)

def crelu(x, axis=1):
    """Concatenated ReLU: relu(x) and relu(-x) joined along ``axis``."""
    from xgrad._ops.shaping import concatenate
    x = _args.as_array(x, 'crelu: x')
    if x.dtype.kind != 'f':  # a math function: bool and ints in float32 (ChainerX)
        x = x.astype(_args.promoted_float(x.dtype))
    axis = _args.normalize_axis(axis, x.ndim, 'crelu: axis')
    return concatenate([relu(x), relu(-x)], axis)


def _crelu_ref(x, axis=1):
    return numpy.concatenate([numpy.maximum(x, 0), numpy.maximum(-x, 0)], axis)


register(OpInfo('crelu', crelu, ref=_crelu_ref, domain=nonzero, samples=(
    Sample((2, 3)), Sample((2, 3), axis=0), Sample((2, 3, 2), axis=-1),
    Sample((0, 3), axis=1)), int_dtypes=INT_DTYPES + (BOOL,), promotion='float'))

def _number(op, name, value):
    """``value`` of a scalar parameter, checked at the call: a real number
    (a bad one would otherwise give NaN, or fail later in backward)."""
    if not isinstance(value, (numbers.Real, numpy.integer, numpy.floating, numpy.bool_)):
        raise TypeError('{}: {} must be a real number, not {}'.format(
            op, name, type(value).__name__))
    return value


def _scalar_parameter(param, default):
    """The public signature ``f(x, param=default)`` (positional as in
    ChainerX) of a unary op with one scalar parameter."""
    def public(op):
        def f(x, *args, **kwargs):
            if len(args) + len(kwargs) > 1 or (kwargs and param not in kwargs):
                raise TypeError('{}() takes x and {} (default {}), got {} more '
                                'arguments {}'.format(op.__name__, param, default,
                                                      len(args), sorted(kwargs)))
            value = args[0] if args else kwargs.get(param, default)
            return op(x, **{param: _number(op.__name__, param, value)})
        f.__name__ = f.__qualname__ = op.__name__
        f.__doc__ = '{}({}, {}={})\n\n{}'.format(op.__name__, 'x', param, default,
                                                  op.__doc__)
        f.__signature__ = inspect.Signature([
            inspect.Parameter('x', inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter(param, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=default)])
        return f
    return public


# Activations: the native vector kernels take float16/32/64 NumPy arrays
# (forward, and the gradient on raw arrays); anything else (CuPy arrays,
# xgrad arrays while double backprop records the gradient) takes the
# NumPy/array-namespace formula.

def _softplus(x, beta=1.0):
    y = native_kernels.softplus_forward(x, beta)
    if y is not None:
        return y
    bx = x * x.dtype.type(beta) if x.dtype.kind == 'f' else x * beta
    xp = _args.module_of(x)
    return xp.logaddexp(0, bx) / (x.dtype.type(beta) if x.dtype.kind == 'f' else beta)


def _softplus_grad(xp, gy, x, y, beta=1.0):
    gx = native_kernels.softplus_grad(gy, x, beta)
    if gx is not None:
        return gx
    return gy * xp.sigmoid(x * beta)


softplus = _unary(
    'softplus', _softplus, _softplus_grad, public=_scalar_parameter('beta', 1.0),
    samples=UNARY_SAMPLES + (Sample((2, 3), beta=2.0),),
    doc='log(1 + exp(beta * x)) / beta, without overflow.')


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu(x, approximate='none'):
    """x Phi(x), Phi the standard normal CDF; 'tanh': torch's approximation
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    y = native_kernels.gelu_forward(x, approximate == 'tanh')
    if y is not None:
        return y
    xp = _args.module_of(x)  # (Python floats: x's dtype is kept, NumPy or CuPy alike)
    if approximate == 'tanh':
        return 0.5 * x * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1 + _erf(x * _SQRT_HALF))


def _gelu_grad(xp, gy, x, y, approximate='none'):
    if xp.raw:
        gx = native_kernels.gelu_grad(gy, x, approximate == 'tanh')
        if gx is not None:
            return gx
    if approximate == 'tanh':
        t = xp.tanh((x + x * x * x * 0.044715) * _SQRT_2_OVER_PI)
        return gy * ((1 + t) * 0.5
                     + x * (1 - t * t) * ((x * x * 0.134145 + 1) * (0.5 * _SQRT_2_OVER_PI)))
    erf_ = _erf if xp.raw else xp.erf  # (NumPy and CuPy have no erf ufunc)
    return gy * ((1 + erf_(x * _SQRT_HALF)) * 0.5 + x * xp.exp(x * x * -0.5) * _INV_SQRT_2PI)


def _gelu_public(op):
    def gelu(x, approximate='none'):
        if approximate not in ('none', 'tanh'):
            raise ValueError("gelu: approximate must be 'none' or 'tanh', not {!r}".format(
                approximate))
        return op(x, approximate=approximate)
    gelu.__doc__ = op.__doc__
    return gelu


def _gelu_ref(x, approximate='none'):
    xd = x.astype(numpy.float64)
    if approximate == 'tanh':
        y = 0.5 * xd * (1 + numpy.tanh(_SQRT_2_OVER_PI * (xd + 0.044715 * xd ** 3)))
    else:
        y = 0.5 * xd * (1 + numpy.vectorize(math.erf, otypes=[numpy.float64])(xd * _SQRT_HALF))
    return y.astype(x.dtype if x.dtype.kind == 'f' else _args.promoted_float(x.dtype))


gelu = _unary(
    'gelu', _gelu, _gelu_grad, public=_gelu_public, ref=_gelu_ref,
    samples=UNARY_SAMPLES + (Sample((2, 3), approximate='tanh'),),
    doc="GELU, x Phi(x) (Phi: the standard normal CDF), as torch's F.gelu; "
        "approximate='tanh' is its tanh form. Not in ChainerX; one vector pass on the host.")


def _leaky_relu(x, slope=0.2):
    y = native_kernels.leaky_relu_forward(x, slope)
    if y is not None:
        return y
    return _args.module_of(x).where(x >= 0, x, x * x.dtype.type(slope))


def _leaky_relu_grad(xp, gy, x, y, slope=0.2):
    gx = native_kernels.leaky_relu_grad(gy, x, slope)
    if gx is not None:
        return gx
    if not xp.raw and not cuda.on_gpu(_args.raw(x)):
        # Recorded (double backprop): gy times a constant 1-or-slope mask,
        # one multiply instead of a comparison, a multiply and a where. The
        # mask is constant because leaky_relu's second derivative is 0.
        rx = _args.raw(x)
        one = numpy.ones((), rx.dtype)
        mask = native_kernels.leaky_relu_grad(numpy.broadcast_to(one, rx.shape), rx, slope)
        if mask is not None:
            return gy * xp.constant(mask, gy)
    return xp.where(x >= 0, gy, gy * slope)


leaky_relu = _unary(
    'leaky_relu', _leaky_relu, _leaky_relu_grad, public=_scalar_parameter('slope', 0.2),
    domain=nonzero, samples=UNARY_SAMPLES + (Sample((2, 3), slope=0.5),),
    doc='x where x >= 0, else slope * x.')


def _elu(x, alpha=1.0):
    y = native_kernels.elu_forward(x, alpha)
    if y is not None:
        return y
    xp = _args.module_of(x)
    return xp.where(x >= 0, x, xp.expm1(xp.minimum(x, 0)) * x.dtype.type(alpha))


def _elu_grad(xp, gy, x, y, alpha=1.0):
    gx = native_kernels.elu_grad(gy, x, y, alpha)
    if gx is not None:
        return gx
    return xp.where(x >= 0, gy, gy * (y + alpha))


elu = _unary('elu', _elu, _elu_grad, public=_scalar_parameter('alpha', 1.0), uses='xy',
             domain=nonzero, samples=UNARY_SAMPLES + (Sample((2, 3), alpha=0.5),),
             doc='x where x >= 0, else alpha * (exp(x) - 1).')


def _clipped_relu(x, z=20.0):
    xp = _args.module_of(x)
    return xp.minimum(xp.maximum(x, x.dtype.type(0)), x.dtype.type(z))


def _clipped_relu_grad(xp, gy, x, y, z=20.0):
    return xp.where(x > 0, xp.where(x < z, gy, 0), 0)


clipped_relu = _unary(
    'clipped_relu', _clipped_relu, _clipped_relu_grad, public=_scalar_parameter('z', 20.0),
    domain=away_from(0.0, 0.5, low=-1.5, high=1.5),
    samples=UNARY_SAMPLES + (Sample((2, 3), z=0.5),),
    doc='min(max(x, 0), z).')


def _clip(a, a_min, a_max):
    return _args.module_of(a).clip(a, a_min, a_max)


def _clip_grad(xp, gy, x, y, a_min, a_max):
    inside = gy
    if a_max is not None:
        inside = xp.where(x <= a_max, inside, 0)
    if a_min is not None:
        inside = xp.where(x >= a_min, inside, 0)
    return inside


def _clip_signature(op):
    def clip(a, a_min, a_max):
        """``a`` limited to [a_min, a_max] (either bound may be None); the
        gradient passes where a_min <= a <= a_max."""
        if a_min is None and a_max is None:
            raise ValueError('clip: a_min and a_max cannot both be None')
        for name, v in (('a_min', a_min), ('a_max', a_max)):
            if v is not None and not _args.is_scalar(v):
                raise TypeError('clip: {} must be a scalar or None, not {}'.format(
                    name, type(v).__name__))
        return op(a, a_min=a_min, a_max=a_max)
    return clip


clip = _unary(
    'clip', _clip, _clip_grad, domain=away_from(-0.5, 0.5), public=_clip_signature,
    promotion=None,
    samples=(Sample((2, 3), a_min=-0.5, a_max=0.5), Sample((), a_min=-0.5, a_max=0.5),
             Sample((2, 3), a_min=None, a_max=0.5), Sample((2, 3), a_min=-0.5, a_max=None),
             Sample((0, 3), a_min=-0.5, a_max=0.5)))
