"""Input domains for ``xgrad.testing.OpInfo``: where a gradient check draws
an op's inputs from, away from its poles and kinks.

A domain is a function ``(rs, shape) -> float64 array`` (``rs`` a
``numpy.random.RandomState``); the data is then rounded to the dtype under
test. ``OpInfo(domain=...)`` takes one for all inputs or a tuple with one
per input, ``Arg(shape, domain=...)`` one for a single input, and
``OpInfo(gen=...)`` a joint sampler ``(rs, shapes) -> arrays`` (``untied``).
Any such function will do; these are the ones xgrad's own ops use.
"""

from xgrad._ops.registry import (  # NOQA
    away_from, distinct, integers, nonzero, positive, real, untied, within)

__all__ = ['real', 'positive', 'nonzero', 'within', 'away_from', 'distinct', 'integers',
           'untied']
