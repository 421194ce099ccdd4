"""Check, once and outside timing, that every framework computed the same thing.

A benchmark is only worth its numbers if the engine gave the right answer, so
each framework's loss and gradients are compared with the hand-written NumPy
floor: same shapes, float32, and equal within the benchmark's tolerance
(``|got - ref| <= rtol * |ref| + rtol * max|ref|``, loose enough for float32
summation order, tight enough to catch a missing or wrong chain-rule term).
"""

import numpy
import numpy.testing

from _frameworks import to_numpy


class VerificationError(AssertionError):
    pass


def run_twice(step):
    """Results of the second call of ``step``: the first already left gradients
    behind, so a framework that forgets to clear them is caught too."""
    step()
    loss, grads = step()
    return to_numpy(loss), [to_numpy(g) for g in grads]


def _compare(label, got, ref, rtol):
    if got is None:
        raise VerificationError('{}: missing (None)'.format(label))
    got, ref = numpy.asarray(got), numpy.asarray(ref)
    # (what NumPy >= 1.24 checks with strict=True)
    if got.shape != ref.shape or got.dtype != ref.dtype:
        raise AssertionError('{}: shape/dtype {} {} != {} {}'.format(
            label, got.shape, got.dtype, ref.shape, ref.dtype))
    numpy.testing.assert_allclose(
        got, ref, rtol=rtol, atol=rtol * float(numpy.max(numpy.abs(ref), initial=0.0)),
        err_msg=label)


def check(bench, framework, result, reference):
    """Raise VerificationError unless ``result`` matches ``reference`` (both from run_twice)."""
    (loss, grads), (ref_loss, ref_grads) = result, reference
    names = ['loss'] + list(bench.GRAD_NAMES)
    if len(grads) != len(ref_grads):
        raise VerificationError('{} {}: {} gradients, expected {}'.format(
            bench.NAME, framework, len(grads), len(ref_grads)))
    for name, got, ref in zip(names, [loss] + grads, [ref_loss] + ref_grads):
        label = '{} {}: {}'.format(bench.NAME, framework, name)
        try:
            _compare(label, got, ref, bench.RTOL)
        except AssertionError as e:
            raise VerificationError(str(e)) from None


def check_floor(bench, reference):
    """The floor itself must produce float32 results of the declared count."""
    loss, grads = reference
    if len(grads) != len(bench.GRAD_NAMES):
        raise VerificationError('{} numpy: {} gradients for names {}'.format(
            bench.NAME, len(grads), bench.GRAD_NAMES))
    for name, value in zip(['loss'] + list(bench.GRAD_NAMES), [loss] + grads):
        if value.dtype != numpy.float32 or not numpy.all(numpy.isfinite(value)):
            raise VerificationError('{} numpy: {} is {} / not finite'.format(bench.NAME, name, value.dtype))
