"""Extract the names of ChainerX's Python API from a Chainer source tree.

ChainerX's Python API is the spec of xgrad's drop-in. It is made of

* the pybind11 bindings, ``chainerx_cc/chainerx/python/*.cc``: every
  ``m.def`` / ``m.attr`` / ``py::register_exception`` (module names), every
  ``py::class_<T> c{m, "Name"}`` (a class) and its ``c.def`` /
  ``c.def_property*`` / ``c.def_readonly`` (its members, ``py::init`` as
  ``__init__``), and the ``m.def_submodule`` modules (``linalg``);
* the Python package ``chainerx/``: the names ``chainerx/__init__.py``
  binds, those ``_ndarray.populate`` and ``_fallback_workarounds.populate``
  set on ``chainerx`` and ``chainerx.ndarray``, and ``chainerx.random``.

``chainerx.testing`` (pytest helpers) and the ``_testing`` / ``_pybind_cuda``
binding submodules are left out: they are ChainerX's own test tooling and
the CuPy allocator hook, not the API Chainer calls (xgrad.testing has its
own). So are ``_set_pybind_doc``, the ``_bool``... ``_float64`` dtype
cache and ``_Scalar`` (the class through which pybind11 converts Python
scalars implicitly; no Python code uses it), which serve pybind11
internals; pickling (``py::pickle``) and the buffer protocol are
behaviour, not names.

The source is a checkout (``chainer/``) or a bare git repository (read at
HEAD with ``git show``). Writes tests/chainerx_compat/chainerx_binding_names.json:

    python tools/chainerx_binding_names.py [SOURCE] [--out PATH]

SOURCE defaults to $XGRAD_CHAINER_SOURCE, else /work/.mirror/chainer+chainer/repo.
tests/chainerx_compat/test_chainerx_api_names.py checks xgrad has every name, and that the
list is what this tool extracts from the snapshot when one is at hand.
"""

import ast
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / 'tests' / 'chainerx_compat' / 'chainerx_binding_names.json'
DEFAULT_SOURCE = '/work/.mirror/chainer+chainer/repo'
BINDINGS = 'chainerx_cc/chainerx/python'

# Binding names that are pybind11 plumbing or ChainerX's test tooling (see above).
SKIPPED_MODULE_NAMES = {'__name__', '_set_pybind_doc', '_Scalar', '_bool', '_int8', '_int16',
                        '_int32', '_int64', '_uint8', '_float16', '_float32',
                        '_float64'}
SKIPPED_SUBMODULES = {'_testing', '_pybind_cuda'}
# Private modules chainerx/__init__.py imports for its own use.
SKIPPED_PY_NAMES = {'os', 'warnings', '_build_info', '_core', '_available',
                    '_global_context', '_ndarray', '_fallback_workarounds', '_docs',
                    '_cuda', '_device', 'testing'}


class Source:
    """A Chainer checkout or bare git repository, read-only."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.bare = not (self.path / 'chainerx').is_dir()
        if self.bare and not (self.path / 'HEAD').is_file():
            raise ValueError('{} is neither a Chainer source tree nor a git '
                             'repository'.format(path))

    def _git(self, *args):
        return subprocess.run(('git', '--git-dir', str(self.path)) + args,
                              check=True, capture_output=True, text=True).stdout

    def commit(self):
        try:
            if self.bare:
                return self._git('rev-parse', 'HEAD').strip()
            return subprocess.run(('git', '-C', str(self.path), 'rev-parse', 'HEAD'),
                                  check=True, capture_output=True, text=True).stdout.strip()
        except (subprocess.CalledProcessError, OSError):
            return None

    def files(self, folder):
        if self.bare:
            return self._git('ls-tree', '-r', '--name-only', 'HEAD', folder + '/').split()
        base = self.path / folder
        return sorted(str(p.relative_to(self.path)) for p in base.rglob('*') if p.is_file())

    def read(self, name):
        if self.bare:
            return self._git('show', 'HEAD:' + name)
        return (self.path / name).read_text()


def _strip_comments(text):
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


_CLASS = re.compile(r'py::class_<([^<>{}(]*(?:<[^>]*>)?[^>{}(]*)>(&?)\s*(\w*)\s*[{(]?\s*(m\s*,\s*(?:"(\w+)"|(\w+)))?')
_DEF = re.compile(r'\b(\w+)\.(def|def_static|def_property|def_property_readonly|'
                  r'def_readonly|def_readwrite|attr)\(\s*(?:"(\w+)"|(py::init)|(\w+)\s*[,)])')
_SUBMODULE = re.compile(r'(\w+)\s*=\s*m\.def_submodule\(\s*"(\w+)"')
_EXCEPTION = re.compile(r'py::register_exception<\w+>\(\s*m\s*,\s*"(\w+)"')
_HELPER = re.compile(r'void\s+(\w+)\(\s*pybind11::module&\s*m\s*,\s*const char\*\s*(\w+)\s*,'
                     r'\s*const char\*\s*(\w+)\s*\)')
_HELPER_CALL = r'\b{}\s*<\w+>\(\s*m\s*,\s*"(\w+)"\s*,\s*"(\w+)"\s*\)'


def binding_names(source):
    """(module names, {class: members}, {submodule: names}) of the bindings."""
    module, classes, submodules = set(), {}, {}
    files = [f for f in source.files(BINDINGS) if f.endswith('.cc')
             and not f.startswith(BINDINGS + '/testing/')
             and not f.startswith(BINDINGS + '/cuda/')]
    texts = {f: _strip_comments(source.read(f)) for f in files}
    # Which C++ type each class name binds, so that a function taking
    # ``py::class_<ArrayBody, ArrayBodyPtr>& c`` is known to define ndarray's.
    type_names = {}
    for text in texts.values():
        for m in _CLASS.finditer(text):
            if m.group(5):
                type_names[m.group(1).split(',')[0].strip()] = m.group(5)
    # Helpers called with the class and function names as strings
    # (InitChainerxBackpropModeScope<...>(m, "NoBackpropMode", "no_backprop_mode")).
    helpers = {}
    for text in texts.values():
        for h in _HELPER.finditer(text):
            helpers[h.group(1)] = (h.group(2), h.group(3),
                                   [c.groups() for c in re.finditer(
                                       _HELPER_CALL.format(h.group(1)), text)])
    for text in texts.values():
        events = sorted([(m.start(), 'class', m) for m in _CLASS.finditer(text)]
                        + [(m.start(), 'def', m) for m in _DEF.finditer(text)]
                        + [(m.start(), 'sub', m) for m in _SUBMODULE.finditer(text)]
                        + [(m.start(), 'exc', m) for m in _EXCEPTION.finditer(text)]
                        + [(m.start(), 'helper', m) for m in _HELPER.finditer(text)])
        scopes = {'m': ('module', None)}
        placeholders = {}  # a helper's string parameter -> the names it is called with
        for _, kind, m in events:
            if kind == 'helper':
                cls_param, fn_param, calls = helpers[m.group(1)]
                placeholders = {cls_param: [c[0] for c in calls],
                                fn_param: [c[1] for c in calls]}
            elif kind == 'sub':
                scopes[m.group(1)] = ('submodule', m.group(2))
                submodules.setdefault(m.group(2), set())
            elif kind == 'exc':
                module.add(m.group(1))
            elif kind == 'class':
                var = m.group(3)
                if m.group(5):
                    names = [m.group(5)]
                elif m.group(6):
                    names = placeholders.get(m.group(6), [])
                else:  # a parameter: py::class_<ArrayBody, ArrayBodyPtr>& c
                    name = type_names.get(m.group(1).split(',')[0].strip())
                    names = [name] if name else []
                for name in names:
                    if m.group(4):  # a new class, also a module name
                        module.add(name)
                    classes.setdefault(name, set())
                if var:
                    scopes[var] = ('class', names)
            else:
                var, method = m.group(1), m.group(2)
                scope = scopes.get(var)
                if scope is None:
                    continue
                if m.group(3):
                    names = [m.group(3)]
                elif m.group(4):
                    names = ['__init__']
                else:
                    names = placeholders.get(m.group(5), [])
                if method == 'attr' and not text[m.end():].lstrip().startswith('='):
                    continue  # a read (m.attr("x")), not a definition
                for name in names:
                    if scope[0] == 'module':
                        module.add(name)
                    elif scope[0] == 'submodule':
                        submodules[scope[1]].add(name)
                    else:
                        for cls in scope[1]:
                            classes[cls].add(name)
    module -= SKIPPED_MODULE_NAMES
    for name in SKIPPED_MODULE_NAMES:
        classes.pop(name, None)
    for name in SKIPPED_SUBMODULES:
        submodules.pop(name, None)
    return module, classes, submodules


def _bound_names(tree):
    """The names a module's top level (and its ``if`` blocks) binds."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node in tree.body:
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom) and not _inside_function(tree, node):
            names.update(a.asname or a.name for a in node.names if a.name != '*')
        elif isinstance(node, ast.Import) and not _inside_function(tree, node):
            names.update((a.asname or a.name).split('.')[0] for a in node.names)
        elif isinstance(node, ast.Assign) and not _inside_function(tree, node):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _inside_function(tree, target):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            if any(n is target for n in ast.walk(node)):
                return True
    return False


def _populated(tree, owner):
    """Names assigned as ``chainerx.X = ...`` / ``ndarray.X = ...``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute):
                    base = t.value
                    dotted = base.id if isinstance(base, ast.Name) else (
                        base.value.id + '.' + base.attr
                        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
                        else None)
                    if dotted in owner:
                        names.add(t.attr)
    return names


def python_names(source):
    """(module names, ndarray members, {submodule: names}) of the chainerx package."""
    init = ast.parse(source.read('chainerx/__init__.py'))
    module = {n for n in _bound_names(init) if n not in SKIPPED_PY_NAMES}
    ndarray = set()
    for name in ('chainerx/_ndarray.py', 'chainerx/_fallback_workarounds.py'):
        tree = ast.parse(source.read(name))
        module |= _populated(tree, {'chainerx'})
        ndarray |= _populated(tree, {'chainerx.ndarray', 'ndarray'})
    random = _bound_names(ast.parse(source.read('chainerx/random/__init__.py')))
    return module, ndarray, {'random': random}


def extract(path):
    source = Source(path)
    module, classes, submodules = binding_names(source)
    py_module, py_ndarray, py_submodules = python_names(source)
    module |= py_module
    classes.setdefault('ndarray', set()).update(py_ndarray)
    for name, names in py_submodules.items():
        submodules.setdefault(name, set()).update(names)
    return {
        'source': 'chainer/chainer ' + BINDINGS + '/*.cc and chainerx/*.py '
                  '(tools/chainerx_binding_names.py)',
        'commit': source.commit(),
        'module': sorted(module),
        'classes': {c: sorted(v) for c, v in sorted(classes.items())},
        'submodules': {s: sorted(v) for s, v in sorted(submodules.items())},
    }


def default_source():
    path = os.environ.get('XGRAD_CHAINER_SOURCE') or DEFAULT_SOURCE
    return path if os.path.exists(path) else None


def main(argv):
    args = list(argv)
    out = OUT
    if '--out' in args:
        i = args.index('--out')
        out = pathlib.Path(args[i + 1])
        del args[i:i + 2]
    path = args[0] if args else default_source()
    if path is None:
        sys.exit('no Chainer source: give a path or set XGRAD_CHAINER_SOURCE')
    data = extract(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + '\n')
    print('wrote', out, '({} module names, {} classes, commit {})'.format(
        len(data['module']), len(data['classes']), data['commit']))


if __name__ == '__main__':
    main(sys.argv[1:])
