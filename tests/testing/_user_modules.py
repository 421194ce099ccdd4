"""Op modules of a user's package, written to a temporary directory for the
tests of ``--import``, entry points, ``--jobs`` and ``--merge``, and a
fixture that leaves xgrad's registry of user ops as it found it."""

import itertools
import sys
import textwrap

import pytest

from xgrad.testing import _user_ops

# Two ops: square (its gradient is FACTOR * x: right for 2.0) and softsign.
OPS = '''
import xgrad
from xgrad.testing import OpInfo, Sample, domains, register

__version__ = {version!r}


class Square(xgrad.FunctionNode):
    def forward(self, inputs):
        self.retain_inputs((0,))
        return inputs[0] * inputs[0],

    def backward(self, targets, gys):
        x, = self.get_retained_inputs()
        return gys[0] * x * {factor},


def square(x):
    return Square().apply([x])[0]


def softsign(x):
    return x / (1 + abs(x))


register(OpInfo('square', square, samples=[Sample((2, 3))]),
         OpInfo('softsign', softsign, samples=[Sample((4,)), Sample((2, 2))],
                domain=domains.nonzero){extra})
'''

_names = itertools.count()


@pytest.fixture
def clean_user_ops():
    """Each test starts with no user op registered and ends so."""
    saved = (dict(_user_ops._OPS), dict(_user_ops._WHERE), list(_user_ops._SOURCES))
    _user_ops._reset()
    yield
    _user_ops._reset()
    _user_ops._OPS.update(saved[0])
    _user_ops._WHERE.update(saved[1])
    _user_ops._SOURCES.extend(saved[2])


@pytest.fixture
def write_package(tmp_path, monkeypatch, clean_user_ops):
    """``write_package(factor=2.0, extra='', version='1.0')``: a fresh package
    (a unique name) whose ``gradcheck`` module registers the two ops of
    ``OPS``; returns its name. The directory is on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def write(factor=2.0, extra='', version='1.0', name=None, body=None):
        name = name or 'userpkg{}'.format(next(_names))
        pkg = tmp_path / name
        pkg.mkdir(exist_ok=True)
        (pkg / '__init__.py').write_text('__version__ = {!r}\n'.format(version))
        text = body if body is not None else OPS.format(factor=factor, extra=extra,
                                                        version=version)
        (pkg / 'gradcheck.py').write_text(textwrap.dedent(text))
        made.append(name)
        return name

    yield write
    for name in made:
        for module in [m for m in sys.modules if m == name or m.startswith(name + '.')]:
            del sys.modules[module]
