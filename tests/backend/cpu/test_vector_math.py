"""Accuracy of the native vector kernels (xgrad/_backend/vector_math.h).

Each forward kernel is compared with a reference computed in a wider type
(float64 for float16/32, long double for float64) over its useful range and
at special values, in units in the last place (ULP) of the result's dtype.
The bounds stated here are what the kernels keep (glibc's libmvec is
documented at <= 4 ULP for these functions in float and double; our formulas
add at most one rounding on top):

| dtype   | bound (ULP) | measured on x86-64 with libmvec |
| ------- | ----------- | ------------------------------- |
| float16 | 1           | 0.5 (correctly rounded from float32) |
| float32 | 4           | exp 2.4, log 3.2, tanh 1.4, sigmoid 3.4, softplus 3.1, elu 2.2 |
| float64 | 6           | exp 2.7, sigmoid 3.5, softplus 3.5 (beta 2: 3.8), others <= 1.3 |

Gradients are products of such values and are checked with a relative
tolerance of a few ULP of the dtype. Every size (0, 1, around the old 4,096
threshold, not a multiple of any vector width) and non-contiguous layouts
(transposed, strided) give the same values as the contiguous path.
"""

import math

import numpy
import pytest

import xgrad
from xgrad._backend import native_kernels as K

DTYPES = (numpy.float16, numpy.float32, numpy.float64)
# Machine-dependent: the vector kernels pick AVX-512, AVX2 or SSE2 at load
# time (and libmvec's variants where used), and these bounds have been
# measured only on the path of the machine running the suite (AVX2 on the
# 2-core EPYC CI). Issue 24 item 3 (XGRAD_CPU_PATH) is to run this file once
# per path; until then a failure on another CPU is a finding, not a flake.
BOUND_ULP = {numpy.float16: 1.0, numpy.float32: 4.0, numpy.float64: 6.0}
WIDE = {numpy.float16: numpy.float64, numpy.float32: numpy.float64,
        numpy.float64: numpy.longdouble}


def _sigmoid(x):
    with numpy.errstate(over='ignore'):
        return numpy.where(x >= 0, 1 / (1 + numpy.exp(-x)), numpy.exp(x) / (1 + numpy.exp(x)))


def _softplus(beta):
    return lambda x: numpy.logaddexp(0, beta * x) / beta


def _erf(x):
    """libm's erf in double (no wider one: for float64 the bound includes its
    own < 1 ULP error)."""
    return numpy.vectorize(math.erf, otypes=[numpy.float64])(x.astype(numpy.float64))


# name: (kernel, reference on the wide type, range of x, range for float16)
FORWARD = {
    'exp': (K.exp_forward, numpy.exp, (-80, 80), (-10, 10)),
    'log': (K.log_forward, numpy.log, (1e-30, 1e30), (1e-4, 6e4)),
    'tanh': (K.tanh_forward, numpy.tanh, (-20, 20), (-8, 8)),
    'erf': (K.erf_forward, _erf, (-6, 6), (-3, 3)),
    'sigmoid': (K.sigmoid_forward, _sigmoid, (-80, 80), (-10, 10)),
    'softplus': (lambda x: K.softplus_forward(x, 1.0), _softplus(1.0), (-80, 80), (-10, 10)),
    'softplus_beta2': (lambda x: K.softplus_forward(x, 2.0), _softplus(2.0), (-40, 40),
                       (-5, 5)),
    'leaky_relu': (lambda x: K.leaky_relu_forward(x, 0.2),
                   lambda x: numpy.where(x >= 0, x, x * x.dtype.type(0.2)), (-100, 100),
                   (-100, 100)),
    'elu': (lambda x: K.elu_forward(x, 1.0),
            lambda x: numpy.where(x >= 0, x, numpy.expm1(numpy.minimum(x, 0))), (-20, 20),
            (-10, 10)),
}


def _ulps(result, reference, dtype):
    """|result - reference| in ULPs of the reference rounded to ``dtype``."""
    ref_t = reference.astype(dtype)
    spacing = numpy.spacing(numpy.abs(ref_t)).astype(numpy.longdouble)
    spacing = numpy.maximum(spacing, numpy.longdouble(numpy.finfo(dtype).smallest_subnormal))
    finite = numpy.isfinite(ref_t)
    return numpy.abs(result.astype(numpy.longdouble) - reference)[finite] / spacing[finite]


def _inputs(name, dtype, n=50000):
    rng = numpy.random.default_rng(0)
    _, _, (lo, hi), (lo16, hi16) = FORWARD[name]
    if dtype == numpy.float16:
        lo, hi = lo16, hi16
    if name == 'log':
        x = numpy.exp(rng.uniform(numpy.log(lo), numpy.log(hi), n))
    else:
        x = numpy.concatenate([rng.uniform(lo, hi, n), rng.standard_normal(n)])
    return x.astype(dtype)


@pytest.mark.parametrize('dtype', DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize('name', sorted(FORWARD))
def test_forward_within_ulp_bound(name, dtype):
    kernel, reference = FORWARD[name][:2]
    x = _inputs(name, dtype)
    y = kernel(x)
    assert y.dtype == dtype and y.shape == x.shape
    with numpy.errstate(all='ignore'):
        ref = reference(x.astype(WIDE[dtype]))
        worst = _ulps(y, ref, dtype).max()
    assert worst <= BOUND_ULP[dtype], '{} {}: {} ULP'.format(name, dtype.__name__, worst)


@pytest.mark.parametrize('dtype', DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize('name', sorted(FORWARD))
def test_forward_special_values(name, dtype):
    kernel, reference = FORWARD[name][:2]
    x = numpy.array([numpy.nan, numpy.inf, -numpy.inf, 0.0, -0.0], dtype)
    if name == 'log':
        x = numpy.array([numpy.nan, numpy.inf, 0.0, -1.0], dtype)
    with numpy.errstate(all='ignore'):
        expected = reference(x.astype(numpy.float64)).astype(dtype)
    # Exact on every machine: NaN, +-inf and +-0 map to values IEEE 754 and
    # C99's Annex F fix exactly (exp(-inf) = 0, tanh(inf) = 1, log(0) = -inf...),
    # whatever SIMD path or libm computes them.
    numpy.testing.assert_array_equal(kernel(x), expected)


@pytest.mark.parametrize('n', [0, 1, 3, 17, 4095, 4096, 4097, 33000])
def test_every_size_gives_the_elementwise_result(n):
    x = numpy.linspace(-6, 6, n, dtype=numpy.float32)
    for name, (kernel, *_rest) in FORWARD.items():
        if name == 'log':
            continue
        y = kernel(x)
        assert y.shape == (n,)
        # Each element is the same function of its x whatever n and its
        # position: the vector body and the scalar tail (libm) may differ in
        # the last bits, both within the bound.
        singles = numpy.array([kernel(x[i:i + 1])[0] for i in range(0, n, max(1, n // 37))],
                              numpy.float32)
        numpy.testing.assert_array_max_ulp(y[::max(1, n // 37)], singles, maxulp=4)


@pytest.mark.parametrize('dtype', DTYPES, ids=lambda d: d.__name__)
def test_non_contiguous_layouts(dtype):
    base = numpy.random.default_rng(1).standard_normal((40, 30)).astype(dtype)
    for view in (base.T, base[::2, 1::3], base[:, ::-1], numpy.broadcast_to(base[0], (5, 30))):
        for name, (kernel, *_rest) in FORWARD.items():
            v = numpy.abs(view) + dtype(0.5) if name == 'log' else view
            y = kernel(v)
            assert y.shape == v.shape and y.flags.c_contiguous
            # Bit-equal on every machine: a non-contiguous operand is copied
            # to a C-order array of the same shape first, so both calls run
            # the same kernel on the same values at the same positions with
            # the same thread split.
            numpy.testing.assert_array_equal(y, kernel(numpy.ascontiguousarray(v)), err_msg=name)


def _grad_cases(dtype):
    rng = numpy.random.default_rng(2)
    x = (rng.standard_normal((64, 33)) * 4).astype(dtype)
    gy = rng.standard_normal((64, 33)).astype(dtype)
    w = WIDE[dtype]
    xw, gw = x.astype(w), gy.astype(w)
    elu_y = K.elu_forward(x, 0.7)
    # the parameter in the compute type: float for float16 (computed in float)
    param = numpy.float64 if dtype == numpy.float64 else numpy.float32
    return [
        ('softplus_grad', K.softplus_grad(gy, x, 2.0), gw * _sigmoid(2 * xw)),
        ('leaky_relu_grad', K.leaky_relu_grad(gy, x, 0.1),
         numpy.where(xw >= 0, gw, gw * w(param(0.1)))),
        ('elu_grad', K.elu_grad(gy, x, elu_y, 0.7),
         numpy.where(xw >= 0, gw, gw * (elu_y.astype(w) + w(param(0.7))))),
    ]


@pytest.mark.parametrize('dtype', DTYPES, ids=lambda d: d.__name__)
def test_gradient_kernels(dtype):
    for name, got, want in _grad_cases(dtype):
        assert got.dtype == dtype, name
        # a product of two or three rounded values: a few ULP relative
        numpy.testing.assert_allclose(got.astype(numpy.float64), want.astype(numpy.float64),
                                      rtol=8 * numpy.finfo(dtype).eps,
                                      atol=numpy.finfo(dtype).tiny, err_msg=name)


@pytest.mark.parametrize('dtype', DTYPES, ids=lambda d: d.__name__)
def test_erf_gradient_kernel(dtype):
    """gy * 2/sqrt(pi) * exp(-x^2): x^2 is rounded once, and exp at -x^2 turns
    that into a relative error of up to x^2 eps, so the bound is
    (8 + x^2) eps relative (eps of the compute type: float for float16)."""
    rng = numpy.random.default_rng(2)
    x = (rng.standard_normal((64, 33)) * 4).astype(dtype)
    gy = rng.standard_normal((64, 33)).astype(dtype)
    got = K.erf_grad(gy, x)
    assert got.dtype == dtype
    w = WIDE[dtype]
    xw, gw = x.astype(w), gy.astype(w)
    want = gw * (2 / numpy.sqrt(w(numpy.pi))) * numpy.exp(-xw * xw)
    compute = numpy.float32 if dtype == numpy.float16 else dtype
    bound = ((8 + xw * xw) * w(numpy.finfo(compute).eps) * numpy.abs(want)
             + w(numpy.finfo(dtype).tiny))
    if dtype == numpy.float16:  # and one rounding to float16
        bound += numpy.abs(want) * w(numpy.finfo(numpy.float16).eps)
    excess = numpy.abs(got.astype(w) - want) - bound
    assert excess.max() <= 0, (x.flat[excess.argmax()], got.flat[excess.argmax()],
                               want.flat[excess.argmax()])


def test_gradient_kernels_refuse_mismatched_operands():
    x = numpy.ones((3, 4), numpy.float32)
    assert K.leaky_relu_grad(numpy.ones((4,), numpy.float32), x, 0.2) is None
    assert K.softplus_grad(numpy.ones((3, 4), numpy.float64), x, 1.0) is None
    assert K.elu_grad(x, x, None, 1.0) is not None


# rows shorter than the kernels' tail vector (16), a whole number of
# vectors, and longer rows with a remainder (its last 16 in one pass)
ROW_LENGTHS = [1, 5, 15, 16, 17, 37, 100, 129]


@pytest.mark.parametrize('dtype', (numpy.float32, numpy.float64), ids=lambda d: d.__name__)
@pytest.mark.parametrize('log', [False, True])
@pytest.mark.parametrize('m', ROW_LENGTHS)
def test_softmax_rows(dtype, log, m):
    rng = numpy.random.default_rng(3)
    x = (rng.standard_normal((7, 5, m)) * 10).astype(dtype)
    x[0, 0, :] = -numpy.inf
    x[1, 1, min(3, m - 1)] = numpy.inf
    x[2, 2, 0] = 1e4
    w = WIDE[dtype]
    xw = x.astype(w)
    with numpy.errstate(all='ignore'):
        m = xw.max(-1, keepdims=True)
        m = numpy.where(numpy.isfinite(m), m, 0)
        z = xw - m
        lse = numpy.log(numpy.exp(z).sum(-1, keepdims=True))
        want = z - lse if log else numpy.exp(z - lse)
    got = K.softmax_last_axis(x, log)
    finite = numpy.isfinite(want)
    numpy.testing.assert_array_equal(numpy.isnan(got), numpy.isnan(want))
    eps = numpy.finfo(dtype).eps
    with numpy.errstate(invalid='ignore'):  # inf - inf where want is not finite
        err = numpy.abs(got.astype(w) - want)
    if log:  # absolute: z - lse cancels, so relative to the row's scale
        bound = 8 * eps * numpy.maximum(numpy.abs(z).max(-1, keepdims=True), 1)
    else:  # relative: exp and the division, and the sum's rounding
        # (x - max rounds by up to half an ULP of |z|: relative |z| eps in exp)
        bound = 32 * eps * numpy.abs(want) * (1 + numpy.abs(z)) + numpy.finfo(dtype).tiny
    assert (err <= bound)[finite].all(), err[finite].max()
    gy = rng.standard_normal(x.shape).astype(dtype)
    y = K.softmax_last_axis(numpy.nan_to_num(x, posinf=50, neginf=-50), log)
    gw, yw = gy.astype(w), y.astype(w)
    want_g = gw - numpy.exp(yw) * gw.sum(-1, keepdims=True) if log else (
        yw * (gw - (gw * yw).sum(-1, keepdims=True)))
    numpy.testing.assert_allclose(K.softmax_last_axis_grad(gy, y, log).astype(numpy.float64),
                                  want_g.astype(numpy.float64),
                                  rtol=64 * numpy.finfo(dtype).eps,
                                  atol=64 * numpy.finfo(dtype).eps * numpy.abs(gy).max())


def _check_first_and_second_order(f, x, rng):
    """f's gradient and its gradient's gradient against central differences."""
    eps = [xgrad.array(numpy.full(x.shape, 1e-6))]
    out_shape = f([xgrad.array(x)])[0].shape
    gy = xgrad.array(rng.standard_normal(out_shape))
    gy_var = xgrad.array(rng.standard_normal(out_shape)).require_grad()
    ggx = xgrad.array(rng.standard_normal(x.shape))
    xgrad.check_backward(f, (xgrad.array(x).require_grad(),), (gy,), eps, atol=1e-5, rtol=1e-4)
    xgrad.check_double_backward(f, (xgrad.array(x).require_grad(),), (gy_var,), (ggx,), [eps[0], xgrad.array(numpy.full(out_shape, 1e-6))],
                                atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('op, kwargs', [
    (xgrad.softplus, {'beta': 1.5}), (xgrad.leaky_relu, {'slope': 0.3}),
    (xgrad.elu, {'alpha': 0.8}), (xgrad.sigmoid, {}), (xgrad.tanh, {}), (xgrad.exp, {}),
    (xgrad.log, {}), (xgrad.erf, {})])
def test_ops_backward_and_double_backward_through_the_kernels(op, kwargs):
    rng = numpy.random.default_rng(4)
    x = rng.standard_normal((6, 7))
    x[numpy.abs(x) < 0.1] = 0.5  # away from the kinks
    if op is xgrad.log:
        x = numpy.abs(x)
    _check_first_and_second_order(lambda xs: (op(xs[0], **kwargs),), x, rng)
    # a transposed (non-contiguous) input goes through the same kernels
    _check_first_and_second_order(lambda xs: (op(xs[0].T, **kwargs),), x.T.copy(), rng)


@pytest.mark.parametrize('op', [xgrad.softmax, xgrad.log_softmax])
def test_softmax_ops_through_the_row_kernels(op):
    rng = numpy.random.default_rng(5)
    _check_first_and_second_order(lambda xs: (op(xs[0], axis=1),),
                                  rng.standard_normal((4, 9)), rng)
    _check_first_and_second_order(lambda xs: (op(xs[0], axis=-1),),
                                  rng.standard_normal((2, 3, 5)), rng)


@pytest.mark.parametrize('dtype', (numpy.float32, numpy.float64), ids=lambda d: d.__name__)
def test_exp_where_it_underflows(dtype):
    """Under -87.3 (float) / -708.4 (double) exp's result is a denormal or
    0: within 3 units of the denormal's last place from the true value, 0
    far below and at -inf; NaN stays NaN. (These lanes are computed apart,
    XGRAD_SAFE_EXP, so that they do not send a whole vector down the vector
    library's slow path.)"""
    lo = -110.0 if dtype == numpy.float32 else -760.0
    edge = -87.0 if dtype == numpy.float32 else -708.0
    far = -200.0 if dtype == numpy.float32 else -1000.0
    with numpy.errstate(over='ignore'):
        x = numpy.concatenate([numpy.linspace(lo, edge + 2, 100003),
                               [far, -1e9, -numpy.inf, numpy.nan, -1e300]]).astype(dtype)
    got = K.exp_forward(x).astype(numpy.longdouble)
    want = numpy.exp(x.astype(numpy.longdouble))
    tiny = numpy.longdouble(numpy.finfo(dtype).smallest_subnormal)
    spacing = numpy.maximum(numpy.spacing(numpy.abs(want.astype(dtype))).astype(numpy.longdouble),
                            tiny)
    finite = ~numpy.isnan(x)
    assert (numpy.abs(got - want)[finite] / spacing[finite]).max() <= 3
    assert (got[-5:-2] == 0).all() and got[-1] == 0 and numpy.isnan(got[-2])


@pytest.mark.parametrize('dtype', (numpy.float32, numpy.float64), ids=lambda d: d.__name__)
@pytest.mark.parametrize('fill', [-1e9, -numpy.inf, 'far'])
@pytest.mark.parametrize('m', [7, 37, 64])
def test_masked_softmax_rows(dtype, fill, m):
    """Attention scores masked with a very negative number or -inf: the
    masked entries are exactly 0 (log: the fill minus the row's log-sum),
    the rest the softmax of the kept entries, and the gradients too."""
    rng = numpy.random.default_rng(1)
    x = rng.standard_normal((6, m)).astype(dtype)
    keep = rng.random((6, m)) < 0.6
    keep[:, 0] = True
    if fill == 'far':  # where exp rounds to 0: below the dtype's denormals
        fill = -200.0 if dtype == numpy.float32 else -1000.0
    xm = numpy.where(keep, x, dtype(fill))
    p = K.softmax_last_axis(xm, False)
    assert (p[~keep] == 0).all()
    e = numpy.where(keep, numpy.exp(x - x.max(axis=1, keepdims=True)), 0)
    numpy.testing.assert_allclose(p, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=0)
    gy = rng.standard_normal((6, m)).astype(dtype)
    gx = K.softmax_last_axis_grad(gy, p, False)
    want = p * (gy - (gy * p).sum(axis=1, keepdims=True))
    numpy.testing.assert_allclose(gx, want, rtol=1e-5, atol=1e-6)
    assert (gx[~keep] == 0).all()
    logp = K.softmax_last_axis(xm, True)
    gl = K.softmax_last_axis_grad(gy, logp, True)
    numpy.testing.assert_allclose(gl, gy - p * gy.sum(axis=1, keepdims=True), rtol=1e-5,
                                  atol=1e-5)
