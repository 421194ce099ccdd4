"""Central differences in float64 for the op tests that cannot use
check_backward (float16 gradients are checked against float64 numerics)."""

import numpy

F64 = numpy.dtype('float64')


def numerical_vjp(f, xs, gys, eps=1e-3):
    """sum_j <gys[j], d f_j / d xs[i]> for each input i, by central
    differences. ``f`` maps float64 NumPy arrays to float64 NumPy arrays; a
    None in ``gys`` skips that output."""
    grads = []
    for i, x in enumerate(xs):
        g = numpy.zeros(x.shape, F64)
        for k in numpy.ndindex(*x.shape):
            plus = [a.copy() for a in xs]
            minus = [a.copy() for a in xs]
            plus[i][k] += eps
            minus[i][k] -= eps
            g[k] = sum(numpy.sum((yp - ym) / (2 * eps) * gy)
                       for yp, ym, gy in zip(f(plus), f(minus), gys) if gy is not None)
        grads.append(g)
    return grads


def assert_close(actual, expected, atol, rtol, what):
    """|actual - expected| <= atol + rtol * |expected| everywhere, no NaN."""
    actual = numpy.asarray(actual, F64)
    expected = numpy.asarray(expected, F64)
    assert actual.shape == expected.shape, what
    ok = numpy.abs(actual - expected) <= atol + rtol * numpy.abs(expected)
    assert numpy.all(ok) and not numpy.isnan(actual).any(), (
        '{}:\nanalytic\n{}\nnumerical\n{}'.format(what, actual, expected))
