"""Write xgrad/__init__.pyi, the type stub of xgrad's public namespace.

xgrad/__init__.py gathers most ops with ``from xgrad._ops import *`` from
modules that build their ``__all__`` at import time, which a type checker
cannot follow: without a stub mypy sees no ``xgrad.conv``. This script
imports xgrad and writes one line per public name: the engine's names
re-exported from their typed modules (xgrad/_core.pyi, the error classes,
devices, the registry), every op as a function with its run-time signature
(parameters ``Any``; the result is the function's own return annotation
where it has one, as the ops that do not return one array do: split,
meshgrid, lstm, is_available, ...; ``ndarray`` otherwise).

Run after adding or changing a public function (tests/tooling/test_typing.py fails
until the stub is current):

    python tools/make_stubs.py
"""

import builtins
import inspect
import pathlib
import sys
import types
import typing

ROOT = pathlib.Path(__file__).resolve().parents[1]
STUB = ROOT / 'xgrad' / '__init__.pyi'

# Public names re-exported from a module whose own types mypy reads.
MODULES = ('xgrad._core', 'xgrad._errors', 'xgrad._device', 'xgrad._ops.registry',
           'xgrad.testing._checks', 'xgrad.hooks')
# The engine's modules, whose names the stub takes from xgrad._core (typed by
# xgrad/_core.pyi), as xgrad/__init__.py does.
ENGINE = ('xgrad._context', 'xgrad._graph', 'xgrad._array', 'xgrad._function_node',
          'xgrad._grad_table', 'xgrad._backward')


def _type(annotation):
    """How the stub writes a return annotation: ``xgrad._core.ndarray`` as
    ``ndarray``, typing's List/Tuple/Union by those names, NumPy's arrays
    with their parameters. TypeError for anything else (annotate with one
    of these, or teach this function the new kind)."""
    import numpy
    from xgrad import _core
    if annotation is inspect.Signature.empty or annotation is _core.ndarray:
        return 'ndarray'
    if annotation is None or annotation is type(None):
        return 'None'
    if annotation is typing.Any:  # what the function returns depends on its arguments
        return 'Any'
    if annotation in (bool, int, float, str):
        return annotation.__name__
    if annotation is numpy.ndarray:
        return 'numpy.ndarray[Any, Any]'
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    names = {list: 'List', tuple: 'Tuple', typing.Union: 'Union'}
    if origin in names:
        return '{}[{}]'.format(names[origin], ', '.join(
            '...' if a is Ellipsis else _type(a) for a in args))
    raise TypeError('make_stubs: cannot write the return annotation {!r}'.format(annotation))


def _parameters(signature):
    out, star_done = [], False
    params = list(signature.parameters.values())
    for i, p in enumerate(params):
        if p.kind == p.KEYWORD_ONLY and not star_done:
            out.append('*')
            star_done = True
        if p.kind == p.VAR_POSITIONAL:
            out.append('*{}: Any'.format(p.name))
            star_done = True
        elif p.kind == p.VAR_KEYWORD:
            out.append('**{}: Any'.format(p.name))
        else:
            out.append('{}: Any{}'.format(
                p.name, '' if p.default is p.empty else ' = ...'))
        if p.kind == p.POSITIONAL_ONLY and (
                i + 1 == len(params) or params[i + 1].kind != p.POSITIONAL_ONLY):
            out.append('/')
    return ', '.join(out)


def stub_text():
    sys.path.insert(0, str(ROOT))
    import numpy
    import xgrad
    names = sorted(n for n in vars(xgrad) if not n.startswith('_')
                   and not isinstance(getattr(xgrad, n), types.ModuleType))
    imports, functions, values = {}, [], []
    for name in names:
        obj = getattr(xgrad, name)
        home = getattr(obj, '__module__', None)
        if home in ENGINE:
            home = 'xgrad._core'
        if inspect.isclass(obj) and getattr(builtins, name, None) is obj:
            # bool, int, float: Python's (first: NumPy 1.x's numpy.bool is them too)
            imports.setdefault('builtins', []).append(name)
        elif inspect.isclass(obj) and getattr(numpy, name, None) is obj:
            # ChainerX's dtype names are NumPy's scalar types (float32, bool_),
            # and its dtype is numpy.dtype
            imports.setdefault('numpy', []).append(name)
        elif isinstance(obj, tuple):
            values.append('{}: Tuple[Type[numpy.generic], ...]'.format(name))
        elif name == '__version__':
            continue
        elif home in MODULES and (inspect.isclass(obj) or callable(obj)) \
                and getattr(sys.modules[home], name, None) is obj:
            imports.setdefault(home, []).append(name)
        elif name == 'anygraph':
            imports.setdefault('xgrad._core', []).append(name)
        elif callable(obj):
            try:
                signature = inspect.signature(obj)
            except (TypeError, ValueError):
                params, result = '*args: Any, **kwargs: Any', 'ndarray'
            else:
                params, result = _parameters(signature), _type(signature.return_annotation)
            functions.append('def {}({}) -> {}: ...'.format(name, params, result))
        else:
            values.append('{}: Any'.format(name))
    lines = [
        '# The public namespace of xgrad, for type checkers and IDEs.',
        '# Generated by tools/make_stubs.py from the run-time signatures: do not edit.',
        'from typing import Any, List, Tuple, Type, Union',
        '',
        'import numpy',
        '',
        'from xgrad import functional as functional',
        'from xgrad import linalg as linalg',
    ]
    for module in sorted(imports):
        lines.append('from {} import ('.format(module))
        lines += ['    {0} as {0},'.format(n) for n in sorted(imports[module])]
        lines.append(')')
    lines += ['', "__version__: str"] + values + [''] + functions
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    STUB.write_text(stub_text())
    print('wrote', STUB.relative_to(ROOT))
