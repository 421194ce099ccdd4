"""Serve xgrad as the module ``chainerx``, so that unmodified code written
for ChainerX (Chainer 7.8.1, ChainerX's own tests) runs on xgrad.

Explicit, before the user's code imports ``chainerx`` or ``chainer``::

    import xgrad.chainerx_compat
    xgrad.chainerx_compat.install()
    import chainer

or without touching the code, as a launcher::

    python -m xgrad.chainerx_compat train.py --device native:0
    python -m xgrad.chainerx_compat -m pytest tests/chainer_tests

``install`` registers xgrad and its submodules under the names ChainerX's
users import (``chainerx``, ``chainerx.testing``, ``chainerx.random``, ...).
It refuses to hide a real ChainerX (a ``chainerx`` package with its compiled
core) unless ``force=True``; the pure-Python ``chainerx`` stub that Chainer's
own wheel installs when built without ChainerX is not a real one.
"""

import glob
import importlib.util
import os
import runpy
import sys

_MODULES = {
    'chainerx': 'xgrad',
    'chainerx._core': 'xgrad._core',
    'chainerx.testing': 'xgrad.testing',
    'chainerx.testing.dtypes': 'xgrad.testing.dtypes',
    'chainerx.random': 'xgrad.random',
    'chainerx.linalg': 'xgrad.linalg',
}


class RealChainerxError(ImportError):
    """A real ChainerX is installed; xgrad will not shadow it silently."""


def _real_chainerx_location():
    """The directory of an importable ChainerX with a compiled core, or None."""
    present = sys.modules.get('chainerx')
    if present is not None:
        return None if present.__name__ == 'xgrad' else os.path.dirname(present.__file__)
    spec = importlib.util.find_spec('chainerx')
    if spec is None:
        return None
    for location in spec.submodule_search_locations or ():
        if glob.glob(os.path.join(location, '_core*')):
            return location
    return None


def is_installed():
    """Whether ``chainerx`` is xgrad in this process."""
    module = sys.modules.get('chainerx')
    return module is not None and module.__name__ == 'xgrad'


def install(force=False):
    """Make ``import chainerx`` (and its submodules) import xgrad.

    Raises :class:`RealChainerxError` when a real ChainerX is importable or
    already imported, unless ``force``. Idempotent.
    """
    if is_installed():
        return
    location = _real_chainerx_location()
    if location is not None and not force:
        raise RealChainerxError(
            'A real ChainerX is installed at {}; xgrad.chainerx_compat.install() '
            'would shadow it. Pass force=True to use xgrad as chainerx anyway.'.format(location))
    for name in [n for n in sys.modules if n == 'chainerx' or n.startswith('chainerx.')]:
        del sys.modules[name]
    for alias, target in _MODULES.items():
        sys.modules[alias] = importlib.import_module(target)


def uninstall():
    """Undo :func:`install` (modules that already imported chainerx keep xgrad)."""
    for alias in _MODULES:
        module = sys.modules.get(alias)
        if module is not None and module.__name__ == _MODULES[alias]:
            del sys.modules[alias]


def main(argv=None):
    """``python -m xgrad.chainerx_compat [--force] (-m module | script) args...``:
    run a script or module with xgrad installed as ``chainerx``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    force = False
    if argv[:1] == ['--force']:
        force, argv = True, argv[1:]
    usage = 'usage: python -m xgrad.chainerx_compat [--force] (-m module | script.py) [args...]'
    if not argv or argv[0] in ('-h', '--help') or (argv[0] == '-m' and len(argv) < 2):
        print(usage, file=sys.stderr)
        return 2
    install(force=force)
    if argv[0] == '-m':
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name='__main__')
    return 0


if __name__ == '__main__':
    sys.exit(main())
