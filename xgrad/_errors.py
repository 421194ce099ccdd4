"""The xgrad error classes.

ChainerX registered each error as a flat subclass of ``Exception``; xgrad gives
them one base, :class:`XgradError` (alias ``ChainerxError``), so code can catch
every xgrad failure at once while each specific class is still raised exactly
where ChainerX raises it.
"""

import builtins
import numbers
import reprlib


class XgradError(Exception):
    """Base of every error that xgrad raises on purpose."""


ChainerxError = XgradError


class ContextError(XgradError):
    """No default context, or backprop IDs of different contexts mixed."""


class BackendError(XgradError):
    """An unknown backend name."""


class DeviceError(XgradError):
    """A bad device name, or operands that live on different devices."""


class DimensionError(XgradError):
    """Shapes or numbers of dimensions that do not fit together."""


class DtypeError(XgradError):
    """A dtype that the operation or the gradient API cannot take."""


class NotImplementedError(XgradError, builtins.NotImplementedError):
    """A feature xgrad does not have (yet); also a builtin NotImplementedError."""


class IndexError(XgradError, builtins.IndexError):
    """An index or indices out of bounds; also a builtin IndexError."""


class GradientError(XgradError):
    """A gradient whose dtype, shape or device does not match its array."""


class GradientCheckError(XgradError):
    """A numerical gradient check found the analytic gradient wrong (or, as
    :class:`GradientCheckArgumentError`, could not run: see there)."""


class GradientCheckArgumentError(GradientCheckError, builtins.ValueError):
    """``check_backward`` / ``check_double_backward`` (or ``numerical_grad``)
    called with arguments that do not fit: eps, grad_outputs or
    grad_grad_inputs of the wrong length, shape or dtype, inputs that are
    not leaves, an output identical to an input, and, for a ChainerX-style
    call, inputs or grad_outputs of check_double_backward that do not
    require grad. It is no verdict on the gradients (it carries no
    ``.result``). It is a GradientCheckError, hence an XgradError, as in
    ChainerX, which raises ChainerxError or GradientCheckError for these,
    and also a ValueError, as bad arguments are in Python."""


class BackpropModeError(XgradError):
    """Misuse of backprop modes or scopes."""


class AnomalyError(XgradError):
    """Under ``detect_anomaly()``: an op's backward made NaN or inf from
    finite output gradients. The message names the op, the input, the
    backprop ID and where the op's forward was called."""


class DistributedError(XgradError):
    """Data-parallel training (``xgrad.distributed``) cannot go on: ranks that
    disagree on their parameters, a collective that did not complete in
    time (a rank died or never joined), or arguments it cannot take."""


def describe(value):
    """``value`` as an error message names it: an array by its type, shape
    and dtype (its repr can run to megabytes: conv's stride given an array
    printed 49,000 characters), anything else by a repr of at most 80."""
    shape, dtype = getattr(value, 'shape', None), getattr(value, 'dtype', None)
    if isinstance(shape, tuple) and dtype is not None and not isinstance(value, numbers.Number):
        return 'an array ({}.{}) of shape {} and dtype {}'.format(
            type(value).__module__.split('.')[0], type(value).__name__, shape, dtype)
    return _SHORT.repr(value)


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlist = _SHORT.maxtuple = 8
