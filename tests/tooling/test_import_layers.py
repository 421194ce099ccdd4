"""xgrad's modules import one way: each module sits in a layer, and imports
(at module level or inside a function, ``import`` or ``cimport``) only reach
its own layer or lower ones, with no cycle among modules. Read from the
sources, so that a tool drawing the package's imports sees the real graph."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'xgrad'

# It reads the source tree (CI's other-Python step tests an installed xgrad
# from a copy of the checkout without xgrad/).
pytestmark = pytest.mark.skipif(not (PACKAGE / '__init__.py').exists(),
                                reason='no xgrad source tree beside the tests')

# Lowest first. A module takes the layer of the longest prefix that names it.
LAYERS = [
    ('errors', ['xgrad._errors']),
    ('process settings', ['xgrad._heap']),
    ('random state tape', ['xgrad._random_tape']),
    ('kernels and dtypes', ['xgrad._backend', 'xgrad._kernels', 'xgrad._dtypes']),
    ('devices', ['xgrad._device']),
    ('engine: debug checks', ['xgrad._debug']),
    ('engine: device cache', ['xgrad._device_cache']),
    ('engine: contexts', ['xgrad._context']),
    ('engine: graph vertices', ['xgrad._graph']),
    ('engine: arrays', ['xgrad._array']),
    ('engine: op hooks', ['xgrad._op_hooks']),
    ('engine: recording', ['xgrad._function_node']),
    ('engine: gradient accumulation', ['xgrad._grad_table']),
    ('engine: backward', ['xgrad._backward']),
    ('engine: graph walk', ['xgrad._graph_walk']),
    ('engine facade', ['xgrad._core']),
    ('op library', ['xgrad._ops']),
    ('public modules', ['xgrad.linalg', 'xgrad.random', 'xgrad._numpy_fallbacks',
                        'xgrad.functional', 'xgrad.hooks', 'xgrad.distributed',
                        'xgrad._checkpoint', 'xgrad._dtype_docs',
                        'xgrad._graph_export']),
    ('package and tools', ['xgrad', 'xgrad.testing', 'xgrad.chainerx_compat',
                           'xgrad._info', 'xgrad.__main__']),
]

_CIMPORT_FROM = re.compile(r'^\s*from\s+([\w.]+)\s+c?import\s+(\([^)]*\)|[^\n#]*)', re.M)
_CIMPORT = re.compile(r'^\s*c?import\s+([\w.]+)', re.M)


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def _modules():
    found = {}
    for path in PACKAGE.rglob('*'):
        if path.suffix in ('.py', '.pyx', '.pxd') and '__pycache__' not in path.parts:
            found.setdefault(_module_name(path), []).append(path)
    return found


def _resolve(target, names, modules):
    """The xgrad modules that ``from target import names`` loads."""
    if not target.startswith('xgrad'):
        return []
    out = []
    for name in names:
        sub = target + '.' + name
        out.append(sub if sub in modules else target)
    return out or [target]


def _imports(path, modules):
    text = path.read_text()
    found = []
    if path.suffix == '.py':
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                found += [a.name for a in node.names if a.name.startswith('xgrad')]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found += _resolve(node.module, [a.name for a in node.names], modules)
        return found
    for m in _CIMPORT_FROM.finditer(text):
        names = [n.split(' as ')[0].strip() for n in m.group(2).strip('()').split(',')]
        found += _resolve(m.group(1), [n for n in names if n], modules)
    found += [m.group(1) for m in _CIMPORT.finditer(text) if m.group(1).startswith('xgrad')]
    return found


def _layer(module):
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + '.')) and len(p) > best:
                best, rank = len(p), i
    return rank


def _graph():
    modules = _modules()
    edges = {}
    for name, paths in modules.items():
        targets = set()
        for path in paths:
            targets.update(t for t in _imports(path, modules) if t in modules and t != name)
        edges[name] = targets
    return edges


def test_every_module_has_a_layer():
    assert [m for m in _modules() if _layer(m) is None] == []


def test_imports_never_reach_a_higher_layer():
    upward = sorted('{} ({}) imports {} ({})'.format(
        m, LAYERS[_layer(m)][0], t, LAYERS[_layer(t)][0])
        for m, targets in _graph().items() for t in targets if _layer(t) > _layer(m))
    assert upward == [], 'upward imports:\n' + '\n'.join(upward)


def test_no_import_cycle():
    edges = _graph()
    # Tarjan's strongly connected components, iteratively.
    index, low, on_stack, stack, cycles, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert cycles == [], 'import cycles: {}'.format(cycles)


@pytest.mark.parametrize('module', ['xgrad._context', 'xgrad._graph', 'xgrad._array',
                                    'xgrad._function_node', 'xgrad._grad_table',
                                    'xgrad._backward'])
def test_engine_modules_are_short_and_say_what_they_own(module):
    path = PACKAGE / (module.split('.')[-1] + '.pyx')
    text = path.read_text()
    assert len(text.splitlines()) <= 1050, '{} has {} lines'.format(path.name, len(
        text.splitlines()))
    body = text.split('\n', 1)[1] if text.startswith('# cython') else text
    assert body.lstrip().startswith('"""'), '{} has no module docstring'.format(path.name)
