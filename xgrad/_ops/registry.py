"""The op registry: every op of the library, declared once with what it takes
to test it.

Each op module declares its ops right after defining them::

    register(OpInfo('cos', cos, ref=numpy.cos, samples=UNARY_SAMPLES))

An ``OpInfo`` says how to call the op (``samples``: input shapes and keyword
arguments), what NumPy computes for the same call (``ref``), the dtypes it
takes, whether it is differentiable once or twice, the input domain gradient
checks sample from (away from poles and kinks), and tolerances where the
defaults do not fit. The test suite and ``python -m xgrad check`` enumerate
the registry, so adding an op is one ``register`` call (PyTorch's OpInfo idea).

``OpInfo`` is also how users declare their own ops for the check
(``xgrad.testing.OpInfo``, docs/user_ops.md): those are registered with
``xgrad.testing.register`` in a registry of their own
(``xgrad/testing/_user_ops.py``), so that nothing here, and nothing the test
suite enumerates, sees them.
"""

import dataclasses
import zlib
from typing import Any, Callable, Optional

import numpy

from xgrad import _dtypes
from xgrad._errors import XgradError


F16 = numpy.dtype('float16')
F32 = numpy.dtype('float32')
F64 = numpy.dtype('float64')
FLOAT_DTYPES = (F16, F32, F64)
SIGNED_DTYPES = tuple(numpy.dtype(d) for d in ('int8', 'int16', 'int32', 'int64'))
INT_DTYPES = SIGNED_DTYPES + (numpy.dtype('uint8'),)
BOOL = numpy.dtype('bool')
ALL_DTYPES = (BOOL,) + INT_DTYPES + FLOAT_DTYPES

# Numerical-differentiation step and the |analytic - numerical| <= atol +
# rtol * |numerical| tolerance, per working precision. float16 gradients are
# compared with float64 central differences (float16 differences are noise).
DEFAULT_EPS = {F16: 1e-3, F32: 1e-3, F64: 1e-5}
DEFAULT_TOL = {F16: (1e-2, 1e-2), F32: (2e-3, 2e-3), F64: (1e-6, 1e-5)}
# Forward results against NumPy.
FORWARD_TOL = {F16: (1e-3, 2e-3), F32: (1e-6, 1e-5), F64: (1e-12, 1e-12)}


# ---------------------------------------------------------------------------
# Input domains: (numpy.random.RandomState, shape) -> float64 data

def real(rs, shape):
    """Uniform in [-1, 1]."""
    return rs.uniform(-1, 1, shape)


def positive(rs, shape):
    """Uniform in [0.5, 2]: away from the poles of log, sqrt, 1/x at 0."""
    return rs.uniform(0.5, 2, shape)


def nonzero(rs, shape):
    """|x| in [0.3, 1.5]: away from the kinks of abs/relu/sign at 0."""
    return rs.choice([-1.0, 1.0], shape) * rs.uniform(0.3, 1.5, shape)


def within(low, high):
    """Uniform in [low, high]."""
    def domain(rs, shape):
        return rs.uniform(low, high, shape)
    domain.__name__ = 'within({}, {})'.format(low, high)
    domain.empty = _interval_empty(low, high)
    return domain


def _interval_empty(low, high):
    """Why [low, high] holds no number (None when it holds some): NumPy's
    uniform(2, 1) draws from [1, 2] without a word, so a domain checks its
    own bounds (``xgrad.testing.register`` reads ``domain.empty``)."""
    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError):
        return 'its bounds {!r}, {!r} are not numbers'.format(low, high)
    if not (numpy.isfinite(lo) and numpy.isfinite(hi)):
        return 'its bounds {}, {} are not finite'.format(low, high)
    if lo > hi:
        return 'low {} is above high {}'.format(low, high)
    return None


def away_from(*points, margin=0.2, low=-2.0, high=2.0):
    """Uniform in [low, high], at least ``margin`` from every point in
    ``points`` (the kinks of clip, huber, leaky_relu...)."""
    def domain(rs, shape):
        x = rs.uniform(low, high, shape)
        for _ in range(1000):
            bad = numpy.zeros(numpy.shape(x), bool)
            for p in points:
                bad |= numpy.abs(x - p) < margin
            if not bad.any():
                return x
            x = numpy.where(bad, rs.uniform(low, high, numpy.shape(x)), x)
        raise AssertionError('could not sample away from {}'.format(points))
    domain.__name__ = 'away_from{}'.format(points)
    domain.empty = _interval_empty(low, high) or _covered(points, margin, low, high)
    return domain


def _covered(points, margin, low, high):
    """Why no number of [low, high] is ``margin`` away from every point
    (None when some are)."""
    try:
        spans = sorted((float(p) - margin, float(p) + margin) for p in points)
    except (TypeError, ValueError):
        return 'its points {!r} or margin {!r} are not numbers'.format(points, margin)
    reach = float(low)
    for a, b in spans:
        if a > reach:
            return None  # a gap before this point's span
        reach = max(reach, b)
    if reach < high:
        return None
    return 'every number in [{}, {}] is within {} of one of {}'.format(
        low, high, margin, tuple(points))


def distinct(rs, shape):
    """Values in [-1, 1] that differ pairwise by at least 1/size (no ties for
    max, min, argmax, sort-like ops, even in float16)."""
    n = int(numpy.prod(shape, dtype=numpy.int64))
    if n == 0:
        return numpy.zeros(shape)
    grid = (numpy.arange(n) - (n - 1) / 2) * (2.0 / max(n, 2))
    return rs.permutation(grid).reshape(shape)


def integers(low, high):
    """Whole numbers in [low, high) (labels, indices, counts)."""
    def domain(rs, shape):
        return rs.randint(low, high, shape).astype(numpy.float64)
    domain.__name__ = 'integers({}, {})'.format(low, high)
    domain.empty = _interval_empty(low, high) or (
        None if numpy.ceil(low) < high else
        'there is no whole number in [{}, {})'.format(low, high))
    return domain


def untied(rs, shapes):
    """Joint sampler: two operands that differ by at least 0.2 everywhere
    (no ties for maximum/minimum, even after rounding to float16)."""
    a = rs.uniform(-1, 1, shapes[0])
    full = numpy.broadcast_shapes(*shapes)
    for _ in range(100):
        b = rs.uniform(-1, 1, shapes[1])
        if numpy.all(numpy.abs(numpy.broadcast_to(a, full)
                               - numpy.broadcast_to(b, full)) >= 0.2):
            return [a, b]
    raise AssertionError('could not draw untied operands')


# ---------------------------------------------------------------------------
# Declarations

@dataclasses.dataclass(frozen=True)
class Arg:
    """One input of a sample. ``domain`` None: the op's domain for this
    position. ``dtype`` None: the dtype under test; a fixed dtype (labels,
    indices) is never differentiated."""
    shape: tuple
    domain: Optional[Callable] = None
    dtype: Any = None


class Sample:
    """One way to call an op: its array inputs (shapes or ``Arg``) and its
    keyword arguments. ``name`` tells samples of one op apart in test ids."""

    def __init__(self, *args, name=None, **kwargs):
        self.args = tuple(a if isinstance(a, Arg) else Arg(tuple(a)) for a in args)
        self.kwargs = kwargs
        if name is None:
            parts = ['x'.join(map(str, a.shape)) or '0d' for a in self.args]
            parts += ['{}={}'.format(k, _short(v)) for k, v in sorted(kwargs.items())]
            name = '-'.join(parts)
        self.name = name

    @property
    def shapes(self):
        return tuple(a.shape for a in self.args)

    @property
    def is_empty(self):
        return any(0 in a.shape for a in self.args)

    def __repr__(self):
        return 'Sample({})'.format(self.name)


def _short(v):
    if isinstance(v, numpy.ndarray):
        return 'array{}'.format('x'.join(map(str, v.shape)))
    return str(v).replace(' ', '')


def _call(func, xs, kwargs):
    return func(*xs, **kwargs)


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """Everything the test suite and ``check`` need to know about one op.

    name: the public name (``'linalg.norm'`` for namespaced ones).
    func: the xgrad function.
    ref: the NumPy computation of the same call (same arguments, NumPy
        arrays in), or None when there is no NumPy counterpart to compare with.
    samples: the calls to test.
    domain: where the inputs are sampled from, one for all inputs or a tuple
        with one per input; ``gen`` (rs, shapes) -> arrays samples them jointly.
    dtypes: the float dtypes the op and its gradient are tested on.
    int_dtypes: integer/bool dtypes the forward is also checked on.
    promotion: how the result dtype follows from the input dtypes, by
        ChainerX's rules (xgrad/_dtypes.pyx, docs/dtype_promotion.md):
        ``'result_type'`` (the promoted dtype), ``'float'`` (the promoted
        dtype, float32 for bool/int: math functions), ``'bool'``,
        ``'int64_sum'`` (sums: int64 for bool/int), or None: the result
        dtype is the NumPy reference's (ops that do not promote: indexing,
        shaping, index results).
    differentiable / twice_differentiable: what the gradient tests check; an
        op not twice differentiable must raise when double backprop goes
        through it.
    tol / eps: per-dtype overrides of ``DEFAULT_TOL`` / ``DEFAULT_EPS``;
        ``forward_tol`` of ``FORWARD_TOL``.
    call: how to apply ``func``/``ref`` to the inputs and keyword arguments
        (for ops that take a list of arrays, like ``concatenate``).
    broadcasting: the array inputs broadcast against each other (elementwise
        ops with several inputs); shapes that do not must raise DimensionError.
    align: for results unique only up to sign (singular vectors,
        eigenvectors): ``align(actual, expected)`` (lists of NumPy arrays)
        returns ``actual`` with the signs ``expected`` chose, for the forward
        comparison; LAPACK and cuSOLVER choose differently.
    composite: computed entirely by other registered ops (the RNN family),
        so it runs no device code of its own. Where every launch is
        expensive (the CPU stand-in for CuPy) its GPU tests take its first
        sample at order 1 only: its parts are checked there in full.
    package: set by registration, not given: 'xgrad' for xgrad's own ops,
        the user's package for ops registered with ``xgrad.testing.register``
        (whose ``qualified_name`` is then ``package::name``).

    Public and stable for users' declarations (``xgrad.testing.OpInfo``,
    docs/user_ops.md): name, func, samples, domain, gen, dtypes,
    differentiable, twice_differentiable, tol, eps and call, which are all
    that ``python -m xgrad check`` reads. The other fields serve xgrad's own
    test suite (forward results against NumPy, dtype promotion).
    """
    name: str
    func: Callable
    samples: tuple
    ref: Optional[Callable] = None
    domain: Any = real
    gen: Optional[Callable] = None
    dtypes: tuple = FLOAT_DTYPES
    int_dtypes: tuple = ()
    differentiable: bool = True
    twice_differentiable: bool = True
    tol: dict = dataclasses.field(default_factory=dict)
    eps: dict = dataclasses.field(default_factory=dict)
    forward_tol: dict = dataclasses.field(default_factory=dict)
    call: Callable = _call
    broadcasting: bool = False
    promotion: Optional[str] = None
    composite: bool = False
    align: Optional[Callable] = None
    package: str = dataclasses.field(default='xgrad', init=False, repr=False)

    def __post_init__(self):
        for field in ('samples', 'dtypes', 'int_dtypes'):
            if isinstance(getattr(self, field), (str, bytes)) or \
                    not hasattr(getattr(self, field), '__iter__'):
                raise OpDeclarationError(self.name, field, 'must be a list or tuple, not '
                                         '{}'.format(_described(getattr(self, field))))
        object.__setattr__(self, 'samples', tuple(self.samples))
        object.__setattr__(self, 'dtypes', self._dtypes('dtypes'))
        object.__setattr__(self, 'int_dtypes', self._dtypes('int_dtypes'))
        for field in ('tol', 'eps', 'forward_tol'):
            value = getattr(self, field)
            # dtype names as keys ({'float32': ...}): a dict lookup by
            # numpy.dtype would not find them, and the override would be
            # silently ignored.
            if isinstance(value, dict) and not all(isinstance(k, numpy.dtype) for k in value):
                object.__setattr__(self, field, {_dtype_key(k): v for k, v in value.items()})
        if not self.differentiable:
            object.__setattr__(self, 'twice_differentiable', False)

    def _dtypes(self, field):
        out = []
        for i, d in enumerate(getattr(self, field)):
            try:
                out.append(numpy.dtype(d))
            except TypeError:
                raise OpDeclarationError(self.name, '{}[{}]'.format(field, i),
                                         '{!r} is not a dtype'.format(d)) from None
        return tuple(out)

    @property
    def qualified_name(self):
        """How reports and ``--ops`` call the op: its name for xgrad's own,
        ``package::name`` for a user's."""
        if self.package == 'xgrad':
            return self.name
        return '{}::{}'.format(self.package, self.name)

    def __repr__(self):
        return 'OpInfo({!r})'.format(self.qualified_name)

    def tolerance(self, dtype):
        dtype = numpy.dtype(dtype)
        return self.tol.get(dtype, DEFAULT_TOL.get(dtype, DEFAULT_TOL[F64]))

    def step(self, dtype):
        dtype = numpy.dtype(dtype)
        return self.eps.get(dtype, DEFAULT_EPS.get(dtype, DEFAULT_EPS[F64]))

    def forward_tolerance(self, dtype):
        dtype = numpy.dtype(dtype)
        return self.forward_tol.get(dtype, FORWARD_TOL.get(dtype, (0, 0)))

    def assert_forward_matches(self, actual, expected):
        """The forward check of every registry-driven test: ``actual``
        (xgrad arrays) has ``expected``'s (NumPy arrays, or xgrad arrays
        from another device) count, shapes and dtypes (in native byte
        order), equal values for ints and bools, and floats within the op's
        forward tolerance."""
        assert len(actual) == len(expected), (len(actual), len(expected))
        expected = [e.to_numpy() if hasattr(e, 'to_numpy') else numpy.asarray(e)
                    for e in expected]
        for y, e in zip(actual, expected):
            assert y.shape == e.shape and y.dtype == e.dtype.newbyteorder('='), (
                y.shape, y.dtype, e.shape, e.dtype)
        actual = [y.to_numpy() for y in actual]
        if self.align is not None:
            actual = self.align(actual, expected)
        for y, e in zip(actual, expected):
            if e.dtype.kind == 'f':
                atol, rtol = self.forward_tolerance(e.dtype)
                numpy.testing.assert_allclose(y.astype(F64), e.astype(F64),
                                              atol=atol, rtol=rtol, equal_nan=True)
            else:
                numpy.testing.assert_array_equal(y, e)

    def input_dtypes(self, sample, dtype):
        return tuple(numpy.dtype(dtype if a.dtype is None else a.dtype)
                     for a in sample.args)

    def differentiable_inputs(self, sample):
        """Positions of the inputs that gradient checks differentiate."""
        return tuple(i for i, a in enumerate(sample.args) if a.dtype is None)

    def sample_data(self, sample, dtype, rs):
        """The inputs of ``sample`` as NumPy arrays of their dtypes, drawn from
        the declared domains. Float data is rounded to ``dtype`` first, so
        float64 copies hold exactly the values under test."""
        dtypes = self.input_dtypes(sample, dtype)
        if self.gen is not None:
            raw = list(self.gen(rs, sample.shapes))
        else:
            raw = []
            for i, a in enumerate(sample.args):
                domain = a.domain or (self.domain[i] if isinstance(self.domain, tuple)
                                      else self.domain)
                raw.append(domain(rs, a.shape))
        out = []
        for data, d, a in zip(raw, dtypes, sample.args):
            data = numpy.asarray(data, F64)
            if d.kind in 'iub':
                data = numpy.nan_to_num(data, posinf=1, neginf=-1)
            if d.kind in 'iu' and a.dtype is None:
                data = numpy.round(data * 3)  # integers for int-dtype forward checks
                if d.kind == 'u':
                    data = numpy.abs(data)
            elif d.kind == 'b' and a.dtype is None:
                data = data > 0
            out.append(numpy.array(data, dtype=d))
        return out

    def __call__(self, xs, sample):
        return self.call(self.func, list(xs), sample.kwargs)

    def reference(self, xs, sample):
        return self.call(self.ref, list(xs), sample.kwargs)

    def result_dtype(self, sample, dtype):
        """The dtype ChainerX gives the op's (first) result for inputs of
        ``dtype`` (None: the NumPy reference's, no promotion declared)."""
        dtypes = [d for d, a in zip(self.input_dtypes(sample, dtype), sample.args)
                  if a.dtype is None]
        if self.promotion is None or not dtypes:
            return None
        if self.promotion == 'result_type':
            return _dtypes.result_type(*dtypes)
        if self.promotion == 'float':
            return _dtypes.float_result_type(*dtypes)
        if self.promotion == 'bool':
            return numpy.dtype(bool)
        if self.promotion == 'int64_sum':
            d = _dtypes.result_type(*dtypes)
            return numpy.dtype(numpy.int64) if d.kind in 'biu' else d
        raise ValueError('{}: unknown promotion {!r}'.format(self.name, self.promotion))

    def expected_forward(self, data, sample, dtype):
        """The NumPy reference on ``data`` with ChainerX's result dtype:
        the inputs under test are cast to it first where the op computes in
        it ('result_type', 'float'), and the results are cast to it."""
        rdtype = self.result_dtype(sample, dtype)
        if rdtype is None:
            return self.reference(data, sample)
        if self.promotion in ('result_type', 'float'):
            data = [numpy.asarray(x).astype(rdtype) if a.dtype is None else x
                    for x, a in zip(data, sample.args)]
        out = self.reference(data, sample)
        if isinstance(out, (tuple, list)):
            return type(out)(numpy.asarray(y).astype(rdtype) for y in out)
        return numpy.asarray(out).astype(rdtype)


def _dtype_key(key):
    try:
        return numpy.dtype(key)
    except TypeError:
        return key  # xgrad.testing.register names it


def _described(value):
    return '{!r} (a {})'.format(value, type(value).__name__)


class OpDeclarationError(XgradError, TypeError, ValueError):
    """An op declared wrong: an ``OpInfo`` field of the wrong type or value,
    an empty domain, a sample the op refuses, a name registered twice. The
    message names the op and the field (also as ``.op`` and ``.field``);
    raised when the op is declared or registered, or by ``python -m xgrad
    check`` before any case runs. A TypeError and a ValueError, as the
    field's fault is either."""

    def __init__(self, op, field, message):
        super().__init__('{}: OpInfo.{}: {}'.format(op, field, message))
        self.op, self.field, self.reason = op, field, message

    def __reduce__(self):  # --jobs workers send it back pickled
        return type(self), (self.op, self.field, self.reason)


_REGISTRY = {}


def register(info):
    """Add ``info`` to the registry (one declaration per op name)."""
    if info.name in _REGISTRY:
        raise ValueError('op {!r} is registered twice'.format(info.name))
    if not info.samples:
        raise ValueError('op {!r} declares no samples'.format(info.name))
    _REGISTRY[info.name] = info
    return info


def registered_ops():
    """Every registered op, sorted by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def op_info(name):
    """The ``OpInfo`` registered as ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError('no op named {!r} is registered'.format(name)) from None


def sample_seed(*keys):
    """A stable seed for one (op, sample, dtype, purpose) combination."""
    return zlib.crc32('/'.join(map(str, keys)).encode())
