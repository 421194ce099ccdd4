"""Checking a user's op declaration before anything runs.

xgrad's own declarations are checked by its test suite; a user's are
checked here, so that a mistake is one clear ``OpDeclarationError`` naming
the op and the field, not a thousand failed cases or, worse, a setting that
is silently ignored. Two stages:

* :func:`declared` (at ``xgrad.testing.register``): the types and values of
  the fields, and domains that are empty by their own bounds
  (``within(2, 1)``, ``away_from`` with margins covering the interval);
* :func:`check_calls` (before ``python -m xgrad check`` or
  ``gradient_cases`` run a case): each sample's inputs are drawn from the
  domain (which must give finite numbers of the sample's shapes) and the op
  is called on them once, in float64 (the op must accept them and return
  xgrad arrays). Calling the op is left out of ``register``: it runs while
  the user's module is still being imported.
"""

import dataclasses
import math
import numbers

import numpy

import xgrad
from xgrad._ops.registry import F64, FLOAT_DTYPES, OpDeclarationError, Sample, sample_seed

_FLOATS = set(FLOAT_DTYPES)


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, numpy.bool_))


def _what(v):
    return '{!r} (a {})'.format(v, type(v).__name__)


def _key(k):
    return repr(k.name) if isinstance(k, numpy.dtype) else repr(k)


def declared(info, package):
    """A copy of ``info`` for ``package`` after checking every field the
    check reads; raises OpDeclarationError naming the op and the field."""
    name = info.name
    shown = '{}::{}'.format(package, name)
    if not isinstance(name, str) or not name or '::' in name \
            or any(c.isspace() or c in '[],' for c in name):
        raise OpDeclarationError('{}::{!r}'.format(package, name), 'name',
                                 "must be a non-empty str without '::', ',', brackets or "
                                 "spaces (it is part of every case's name), not {}".format(
                                     _what(name)))

    def fail(field, message):
        raise OpDeclarationError(shown, field, message)

    for field in ('func', 'call'):
        if not callable(getattr(info, field)):
            fail(field, 'must be callable, not {}'.format(_what(getattr(info, field))))
    if info.gen is not None and not callable(info.gen):
        fail('gen', 'must be None or callable (rs, shapes) -> arrays, not {}'.format(
            _what(info.gen)))
    for field in ('differentiable', 'twice_differentiable'):
        if not isinstance(getattr(info, field), (bool, numpy.bool_)):
            fail(field, 'must be True or False, not {}'.format(_what(getattr(info, field))))
    _check_samples(info, fail)
    _check_dtypes(info, fail)
    _check_domains(info, fail)
    _check_tolerances(info, fail)
    copy = dataclasses.replace(info)
    object.__setattr__(copy, 'package', package)
    return copy


def _check_samples(info, fail):
    if not info.samples:
        fail('samples', 'declares no samples: give at least one Sample(shape, ...)')
    names = {}
    for k, s in enumerate(info.samples):
        if not isinstance(s, Sample):
            fail('samples[{}]'.format(k), 'must be a Sample(shape, ..., **kwargs), not '
                 '{}'.format(_what(s)))
        if not s.args:
            fail('samples[{}]'.format(k), 'has no array inputs')
        for i, a in enumerate(s.args):
            if not all(isinstance(n, numbers.Integral) and n >= 0 for n in a.shape):
                fail('samples[{}] ({})'.format(k, s.name),
                     'input {} has shape {!r}: a shape is a tuple of non-negative '
                     'ints'.format(i, a.shape))
        if s.name in names:
            fail('samples[{}]'.format(k), 'has the name {!r} of samples[{}]: give one of '
                 'them name=... (a sample name is part of its cases\' names and of its '
                 'golden gradients\' key)'.format(s.name, names[s.name]))
        names[s.name] = k
        if info.differentiable and all(a.dtype is not None for a in s.args):
            fail('samples[{}] ({})'.format(k, s.name),
                 'every input has a fixed dtype (Arg(..., dtype=...)), so nothing is '
                 'differentiated: leave dtype out for the inputs to check')


def _check_dtypes(info, fail):
    if info.differentiable and not info.dtypes:
        fail('dtypes', 'is empty: give the float dtypes to check (float16, float32, '
             'float64)')
    for i, d in enumerate(info.dtypes):
        if d not in _FLOATS:
            fail('dtypes[{}]'.format(i), '{} is not a float dtype the check takes (float16, '
                 'float32, float64)'.format(d))


def _domains(info, sample):
    """(field, domain) of each input of ``sample``."""
    out = []
    for i, a in enumerate(sample.args):
        if a.domain is not None:
            out.append(('samples[{}].args[{}].domain'.format(
                info.samples.index(sample), i), a.domain))
        elif isinstance(info.domain, tuple):
            out.append(('domain[{}]'.format(i), info.domain[i]
                        if i < len(info.domain) else None))
        else:
            out.append(('domain', info.domain))
    return out


def _check_domains(info, fail):
    if isinstance(info.domain, list):
        fail('domain', 'must be one domain or a tuple with one per input, not a list')
    if not isinstance(info.domain, tuple) and not callable(info.domain):
        fail('domain', 'must be a function (rs, shape) -> float64 array (xgrad.testing.'
             'domains), or a tuple of them, not {}'.format(_what(info.domain)))
    if info.gen is not None:
        return
    for k, s in enumerate(info.samples):
        if isinstance(info.domain, tuple) and len(info.domain) < len(s.args) and \
                any(a.domain is None for a in s.args[len(info.domain):]):
            fail('domain', 'has {} entries, but samples[{}] ({}) has {} inputs'.format(
                len(info.domain), k, s.name, len(s.args)))
        for field, domain in _domains(info, s):
            if not callable(domain):
                fail(field, 'must be a function (rs, shape) -> float64 array, not '
                     '{}'.format(_what(domain)))
            empty = getattr(domain, 'empty', None)
            if empty:
                fail(field, '{} is empty: {}'.format(
                    getattr(domain, '__name__', 'the domain'), empty))


def _check_tolerances(info, fail):
    for field, what in (('tol', 'pair (atol, rtol) of non-negative numbers'),
                        ('eps', 'positive number (the central-difference step)'),
                        ('forward_tol', 'pair (atol, rtol) of non-negative numbers')):
        value = getattr(info, field)
        if not isinstance(value, dict):
            fail(field, 'must be a dict {{dtype: {}}}, not {}'.format(what, _what(value)))
        for k, v in value.items():
            if not isinstance(k, numpy.dtype):
                fail(field, 'has the key {!r}, which is not a dtype'.format(k))
            if k not in _FLOATS:
                fail('{}[{}]'.format(field, _key(k)), '{} is not a float dtype'.format(k))
            entry = '{}[{}]'.format(field, _key(k))
            if field == 'eps':
                if not (_is_number(v) and math.isfinite(v) and v > 0):
                    fail(entry, 'must be a {}, not {}'.format(what, _what(v)))
                continue
            if not (isinstance(v, (tuple, list)) and len(v) == 2
                    and all(_is_number(t) and math.isfinite(t) and t >= 0 for t in v)):
                fail(entry, 'must be a {}, not {}'.format(what, _what(v)))


# ---------------------------------------------------------------------------
# Calls

def _call_dtype(info):
    return F64 if F64 in info.dtypes or not info.dtypes else info.dtypes[0]


def check_calls(info):
    """Draw each sample's inputs and call the op on them once (module
    docstring); raises OpDeclarationError naming the op and the field."""
    shown = info.qualified_name
    dtype = _call_dtype(info)
    for k, sample in enumerate(info.samples):
        field = 'samples[{}] ({})'.format(k, sample.name)
        _draw(info, k, sample, numpy.random.RandomState(
            sample_seed('declaration', shown, sample.name)))
        # The inputs as a case draws them (rounded to the dtype, labels as ints).
        data = info.sample_data(sample, dtype, numpy.random.RandomState(
            sample_seed('declaration', shown, sample.name)))
        xs = [xgrad.array(d) for d in data]
        try:
            with xgrad.no_backprop_mode():
                ys = info(xs, sample)
        except Exception as e:  # NOQA: whatever the op says is the message
            raise OpDeclarationError(shown, field, 'the op refuses these inputs ({} {}{}): '
                                     '{}: {}'.format(_shapes(sample), dtype, _kwargs(sample),
                                                     type(e).__name__, e)) from e
        outs = ys if isinstance(ys, (tuple, list)) else (ys,)
        bad = [j for j, y in enumerate(outs) if y is not None and not isinstance(y, xgrad.ndarray)]
        if bad or not outs:
            raise OpDeclarationError(shown, 'func', 'must return an xgrad array or a tuple/'
                                     'list of them (None allowed), but on {} it returned '
                                     '{}'.format(field, _what(ys)))
        if info.differentiable and not any(y is not None and y.dtype.kind == 'f'
                                           for y in outs):
            raise OpDeclarationError(shown, 'differentiable', 'the op returns no float '
                                     'array on {}, so there is no gradient to check: '
                                     'declare differentiable=False'.format(field))


def _draw(info, k, sample, rs):
    """The float64 inputs of ``sample`` from the declared domains, each
    checked: the domain must not raise and must give finite numbers of the
    input's shape."""
    if info.gen is not None:
        try:
            raw = list(info.gen(rs, sample.shapes))
        except Exception as e:  # NOQA
            raise OpDeclarationError(info.qualified_name, 'gen', 'drawing the inputs of '
                                     'samples[{}] ({}) failed: {}: {}'.format(
                                         k, sample.name, type(e).__name__, e)) from e
        if len(raw) != len(sample.args):
            raise OpDeclarationError(info.qualified_name, 'gen', 'gave {} arrays for the {} '
                                     'inputs of samples[{}] ({})'.format(
                                         len(raw), len(sample.args), k, sample.name))
        fields = ['gen'] * len(raw)
    else:
        raw, fields = [], []
        for field, domain in _domains(info, sample):
            try:
                raw.append(domain(rs, sample.args[len(raw)].shape))
            except Exception as e:  # NOQA
                raise OpDeclarationError(info.qualified_name, field, 'drawing input {} of '
                                         'samples[{}] ({}) failed: the domain is empty or '
                                         'broken: {}: {}'.format(len(raw), k, sample.name,
                                                                 type(e).__name__, e)) from e
            fields.append(field)
    out = []
    for i, (d, a, field) in enumerate(zip(raw, sample.args, fields)):
        try:
            d = numpy.asarray(d, dtype=F64)
        except (TypeError, ValueError) as e:
            raise OpDeclarationError(info.qualified_name, field, 'gave {} for input {} of '
                                     'samples[{}] ({}), not numbers'.format(
                                         type(d).__name__, i, k, sample.name)) from e
        if d.shape != tuple(a.shape):
            raise OpDeclarationError(info.qualified_name, field, 'gave shape {} for input {} '
                                     'of samples[{}] ({}), which has shape {}'.format(
                                         d.shape, i, k, sample.name, tuple(a.shape)))
        if not numpy.all(numpy.isfinite(d)):
            raise OpDeclarationError(info.qualified_name, field, 'gave NaN or infinite '
                                     'values for input {} of samples[{}] ({})'.format(
                                         i, k, sample.name))
        out.append(d)
    return out


def _shapes(sample):
    return ', '.join('x'.join(map(str, a.shape)) or '0-d' for a in sample.args)


def _kwargs(sample):
    if not sample.kwargs:
        return ''
    return ', ' + ', '.join('{}={!r}'.format(k, v) for k, v in sorted(sample.kwargs.items()))

