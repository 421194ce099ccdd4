"""Checks shared by the convolution tests (test_convolution, test_polyphase,
test_tap_groups): adjoint identities for the gradients, and a record of
which of an algorithm's entry points a call went through."""

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


def record_calls(monkeypatch, cls, names):
    """Wrap the methods ``names`` of ``cls`` so that each call appends its
    name to the returned list (the methods still run)."""
    seen = []
    for name in names:
        original = getattr(cls, name)

        def spy(self, *args, _name=name, _original=original):
            seen.append(_name)
            return _original(self, *args)
        monkeypatch.setattr(cls, name, spy)
    return seen
