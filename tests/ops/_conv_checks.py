"""Checks shared by the convolution tests (test_convolution, test_polyphase,
test_tap_groups): adjoint identities for the gradients and a record of which
of an algorithm's entry points a call went through (the fixture that runs a
test on a given CPU path, on_cpu_path, is in tests/conftest.py)."""

import numpy


def data(shape, seed, dtype=numpy.float64):
    return numpy.random.RandomState(seed).uniform(-1, 1, shape).astype(dtype)


def assert_adjoint_gradients(ref, x64, w64, gy, gx, gw, kw):
    """<gx, u> = <f(u, w), gy> and <gw, v> = <f(x, v), gy> for random u, v:
    f (the float64 reference ``ref`` with arguments ``kw``) is linear in
    each."""
    u, v = data(x64.shape, 4), data(w64.shape, 5)
    gy64 = gy.to_numpy().astype(float)
    numpy.testing.assert_allclose(numpy.vdot(gx.to_numpy(), u),
                                  numpy.vdot(ref(u, w64, **kw), gy64), rtol=1e-4)
    numpy.testing.assert_allclose(numpy.vdot(gw.to_numpy(), v),
                                  numpy.vdot(ref(x64, v, **kw), gy64), rtol=1e-4)


def record_calls(monkeypatch, owner, names, seen=None):
    """Wrap the methods or functions ``names`` of ``owner`` (a class or a
    module) so that each call appends its name to ``seen`` (a new list when
    not given), which is returned; they still run."""
    seen = [] if seen is None else seen
    for name in names:
        original = getattr(owner, name)

        def spy(*args, _name=name, _original=original):
            seen.append(_name)
            return _original(*args)
        monkeypatch.setattr(owner, name, spy)
    return seen


def strided_5x5_checked(transpose, xshape, wshape, outsize):
    """conv (or conv_transpose into ``outsize``) of float32 data with a 5x5
    kernel, stride 2, pad 2, its forward checked against the float64
    reference; returns (x, w, y, x64, w64, ref, kw) for the gradients."""
    import xgrad
    from xgrad._ops._conv.reference import (
        reference_conv as _reference_conv, reference_conv_transpose as _reference_conv_transpose)
    kw = dict(stride=2, pad=2, outsize=outsize) if transpose else dict(stride=2, pad=2)
    x = xgrad.array(data(xshape, 1, numpy.float32)).require_grad()
    w = xgrad.array(data(wshape, 2, numpy.float32)).require_grad()
    f, ref = ((xgrad.conv_transpose, _reference_conv_transpose) if transpose
              else (xgrad.conv, _reference_conv))
    y = f(x, w, **kw)
    x64, w64 = x.to_numpy().astype(float), w.to_numpy().astype(float)
    numpy.testing.assert_allclose(y.to_numpy(), ref(x64, w64, **kw), rtol=1e-4, atol=1e-4)
    return x, w, y, x64, w64, ref, kw
