"""The frameworks a benchmark compares, and how each is loaded and read back.

- ``xgrad``: the engine under test (public API of docs/api.md only).
- ``numpy``: the floor, forward and backward written by hand; always run, it
  is also the reference every other framework's gradients are checked against.
- ``torch``: PyTorch on CPU, the anchor of the small-graph benchmarks.
- ``autograd``: HIPS autograd, a pure-Python tape for comparison.

Each benchmark module has one ``build_<framework>(lib, data)`` per framework;
``lib`` is the module that :func:`load` returns.
"""

import os
import sys

import numpy

ALL = ('xgrad', 'numpy', 'torch', 'autograd')
ANCHORS = ('numpy', 'torch', 'autograd')
OPTIONAL = ('torch', 'autograd')  # skipped with a note when not installed

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
    """Import framework ``name`` and return the module its builders get.

    Raises ImportError when it is not installed (or, for xgrad, not built).
    """
    if name == 'numpy':
        return numpy
    if name == 'torch':
        import torch
        return torch
    if name == 'autograd':
        import autograd
        import autograd.numpy  # noqa: F401  (builders use autograd.numpy)
        return autograd
    if name == 'xgrad':
        # An installed xgrad wins; otherwise use the in-place build in the
        # repository (`python bench/run.py` puts bench/, not the root, on the path).
        if _REPO_ROOT not in sys.path:
            sys.path.append(_REPO_ROOT)
        import xgrad
        if not hasattr(xgrad, 'ndarray'):  # e.g. the bare source folder, as a namespace package
            raise ImportError('xgrad at {} is not built (it has no xgrad.ndarray)'.format(
                list(getattr(xgrad, '__path__', [])) or xgrad.__file__))
        return xgrad
    raise ValueError('unknown framework {!r}'.format(name))


def version(name, lib):
    if name == 'autograd':
        from importlib import metadata
        try:
            return metadata.version('autograd')
        except metadata.PackageNotFoundError:
            return 'unknown'
    return str(getattr(lib, '__version__', 'unknown'))


def location(lib):
    return os.path.dirname(os.path.abspath(lib.__file__)) if getattr(lib, '__file__', None) else None


def to_numpy(value):
    """A fresh NumPy copy of a loss or gradient from any framework (None stays None)."""
    if value is None:
        return None
    if hasattr(value, 'detach'):  # torch.Tensor
        value = value.detach().cpu().numpy()
    elif hasattr(value, 'to_numpy'):  # xgrad.ndarray
        value = value.to_numpy()
    return numpy.array(value, copy=True)
