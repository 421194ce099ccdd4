"""Writes cupy_api.json: the signatures of the CuPy functions, ufuncs and
ndarray methods that the strict stand-in (fake_cupy.py) offers, read from an
installed ``cupy`` package (importing it and inspecting its Python API needs
no GPU):

    python tests/backend/cuda/dump_cupy_api.py     # rewrites tests/backend/cuda/cupy_api.json
    python tests/backend/cuda/dump_cupy_api.py cupy13_api.json   # (in a venv with CuPy 13)

The stand-in keeps to what every file of its API_FILES has.

Each signature is a list of ``[name, kind, has_default]`` (kind as in
``inspect.Parameter``), or null where CuPy's own signature cannot be read
(the stand-in then accepts any arguments)."""

import inspect
import json
import os
import re
import sys

import cupy

HERE = os.path.dirname(os.path.abspath(__file__))
_DOC_SIGNATURE = re.compile(r'^[\w.]+\((.*?)\)')


def _from_signature(sig):
    return [[p.name, p.kind.name, p.default is not inspect.Parameter.empty]
            for p in sig.parameters.values()]


def _from_doc(obj, drop_self):
    """Cython methods keep their signature in the docstring's first line."""
    m = _DOC_SIGNATURE.match((obj.__doc__ or '').strip())
    if not m:
        return None
    text = m.group(1)
    try:
        ns = {}
        exec('def f({}): pass'.format(re.sub(r'=[^,*]+', '=None', text)), ns)
    except SyntaxError:
        return None
    params = _from_signature(inspect.signature(ns['f']))
    return params[1:] if drop_self and params and params[0][0] == 'self' else params


def signature(obj, drop_self=False):
    try:
        params = _from_signature(inspect.signature(obj))
    except (TypeError, ValueError):
        return _from_doc(obj, drop_self)
    return params[1:] if drop_self and params and params[0][0] == 'self' else params


def main():
    names = [line.strip() for line in open(os.path.join(HERE, 'cupy_names.txt'))
             if line.strip() and not line.startswith('#')]
    api = {'cupy_version': cupy.__version__, 'functions': {}, 'ufuncs': {}, 'methods': {}}
    for name in names:
        module, _, attr = name.rpartition('.')
        obj = getattr(getattr(cupy, module) if module else cupy, attr, None)
        if obj is None or isinstance(obj, type) or not callable(obj):
            continue
        if isinstance(obj, cupy.ufunc):
            api['ufuncs'][name] = [obj.nin, obj.nout]
        else:
            api['functions'][name] = signature(obj)
    for name in dir(cupy.ndarray):
        if name.startswith('_'):
            continue
        obj = getattr(cupy.ndarray, name)
        if callable(obj):
            api['methods'][name] = signature(obj, drop_self=True)
    out = sys.argv[1] if len(sys.argv) > 1 else 'cupy_api.json'
    with open(os.path.join(HERE, out), 'w') as f:
        f.write(_dumps(api) + '\n')


def _dumps(api):
    """JSON with one entry (a function, ufunc or method) per line."""
    parts = []
    for key in sorted(api):
        value = api[key]
        if isinstance(value, dict):
            body = ',\n'.join('  {}: {}'.format(json.dumps(k), json.dumps(v))
                              for k, v in sorted(value.items()))
            parts.append('{}: {{\n{}\n}}'.format(json.dumps(key), body))
        else:
            parts.append('{}: {}'.format(json.dumps(key), json.dumps(value)))
    return '{\n' + ',\n'.join(parts) + '\n}'


if __name__ == '__main__':
    main()
