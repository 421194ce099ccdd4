"""The sweep of ``python -m xgrad check`` from Python, for a package's own
pytest: ``gradient_cases`` lists the cases of registered ops (xgrad's or a
user's, selected as ``--ops`` selects them) and ``check_case`` runs one,
raising ``xgrad.GradientCheckError`` with the check's message when it
fails::

    @pytest.mark.parametrize('case', gradient_cases('mypkg'), ids=str)
    def test_gradients(case):
        check_case(case)
"""

import numpy

import xgrad
from xgrad.testing import _driver, _user_ops

FLOAT_DTYPES = ('float16', 'float32', 'float64')


def gradient_cases(ops, dtypes=FLOAT_DTYPES, devices=('native:0',), orders=(1, 2),
                   layouts=()):
    """The cases (``str(case)`` is its name, for test ids) of the ops that
    ``ops`` selects: a name, package or pattern, or a list of them, as for
    ``--ops`` (``'mypkg'``, ``'mypkg::rms*'``). The user ops among them
    are called once on each sample first, so a bad declaration is an
    ``OpDeclarationError`` here, at collection, not a failed case."""
    tokens = [ops] if isinstance(ops, str) else list(ops)
    infos = _user_ops.select(tokens)
    _user_ops.check_calls(infos)
    return [_Case(c) for c in _driver.cases(
        dtypes=[numpy.dtype(d).name for d in dtypes], devices=list(devices),
        orders=list(orders), layouts=tuple(layouts), infos=infos)]


class _Case:
    """A case (``op``, ``sample``, ``dtype``, ``device``, ``order``,
    ``layout``, ``name``) whose ``str`` is its name, for pytest ids."""

    def __init__(self, case):
        self.case = case

    def __getattr__(self, name):
        return getattr(self.case, name)

    def __str__(self):
        return self.name

    def __repr__(self):
        return '<case {}>'.format(self.name)


def check_case(case, seed=0):
    """Run ``case`` (from ``gradient_cases``) as ``check`` runs it, inputs
    drawn with ``seed``: returns the result when it passes, raises
    ``xgrad.GradientCheckError`` with the check's message otherwise."""
    result = _driver.run_case(getattr(case, 'case', case), seed)
    if not result.passed:
        raise xgrad.GradientCheckError('{} {} (seed {}): {}'.format(
            result.case.name, result.status, seed, result.message))
    return result
