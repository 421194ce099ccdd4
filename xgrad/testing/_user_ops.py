"""Ops of other packages: how a user's package hands its ops to ``python -m
xgrad check`` (docs/user_ops.md).

A package declares its ops with ``xgrad.testing.OpInfo`` (the registry's
class) and registers them with :func:`register` in a module of its own. The
check imports that module when it is named with ``--import mypkg.gradcheck``,
or when ``--ops`` names the package and the package declares the module
under the entry point group ``xgrad.ops``::

    [project.entry-points."xgrad.ops"]
    mypkg = "mypkg.gradcheck"

The ops live here, apart from xgrad's own registry (``xgrad.registered_ops()``,
which xgrad's test suite enumerates), and are called ``package::name``: the
same name in two packages is two ops; in one package it is an error. They
are never selected with xgrad's own unless asked: ``--ops`` takes op names,
package names and patterns (``mypkg``, ``mypkg::rms*``, ``xgrad,mypkg``).

Which modules and entry points were loaded is kept (:func:`sources`), so that
``--jobs`` workers load the same ones and reports say which package
versions ran.
"""

import contextlib
import fnmatch
import importlib
import re
import sys

from xgrad._errors import XgradError
from xgrad._ops.registry import OpDeclarationError, OpInfo, registered_ops
from xgrad.testing import _declarations

ENTRY_POINT_GROUP = 'xgrad.ops'

_OPS = {}  # qualified name -> registered OpInfo
_WHERE = {}  # qualified name -> where it was registered, for duplicate errors
_SOURCES = []  # dicts: what was loaded ({'import': module} / {'entry_point': name}), in order
_LOADING = []  # the default package while a source is being loaded
_PACKAGE = re.compile(r'[A-Za-z_][A-Za-z0-9_.-]*\Z')


class OpSourceError(OpDeclarationError):
    """A module given to ``--import`` or an ``xgrad.ops`` entry point could
    not be loaded, or registered nothing."""

    def __init__(self, source, message):
        XgradError.__init__(self, '{}: {}'.format(source, message))
        self.op, self.field, self.reason = None, None, message
        self.source = source

    def __reduce__(self):
        return type(self), (self.source, self.reason)


def register(*infos, package=None):
    """Register ``infos`` (``xgrad.testing.OpInfo``) as ops of ``package``
    for ``python -m xgrad check`` and :func:`gradient_cases`. ``package``
    defaults to the entry point's name while an ``xgrad.ops`` entry point
    loads, else to the top-level package of the module that calls
    ``register`` (``mypkg`` for ``mypkg.gradcheck``). Each declaration is
    checked here (``OpDeclarationError`` naming the op and the field); the
    calls of the op on its samples are checked before a run. Returns the
    registered ``OpInfo`` copies (their ``qualified_name`` is
    ``package::name``)."""
    if package is None:
        package = _LOADING[-1] if _LOADING else _caller_package()
    if not isinstance(package, str) or not _PACKAGE.match(package) or package == 'xgrad':
        raise OpDeclarationError(
            '(package {!r})'.format(package), 'package',
            "a package must be a name of letters, digits, '_', '.' or '-' other than "
            "'xgrad' (xgrad's own ops are declared inside xgrad)")
    where = _caller_location()
    out = {}  # all checked first: a bad one registers none of them
    for info in infos:
        if not isinstance(info, OpInfo):
            raise OpDeclarationError('(package {})'.format(package), 'type',
                                     'register takes xgrad.testing.OpInfo declarations, '
                                     'not {!r}'.format(info))
        info = _declarations.declared(info, package)
        key = info.qualified_name
        if key in _OPS or key in out:
            raise OpDeclarationError(key, 'name', 'two ops of package {} are named {!r} '
                                     '(registered at {} and at {}): a name is one op'.format(
                                         package, info.name, _WHERE.get(key, where), where))
        out[key] = info
    for key, info in out.items():
        _OPS[key] = info
        _WHERE[key] = where
    return list(out.values())


def _caller_package():
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get('__name__', '').startswith('xgrad.'):
        frame = frame.f_back
    name = frame.f_globals.get('__name__', '__main__') if frame is not None else '__main__'
    return name.split('.')[0]


def _caller_location():
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get('__name__', '').startswith('xgrad.'):
        frame = frame.f_back
    if frame is None:
        return '?'
    return '{}:{}'.format(frame.f_code.co_filename, frame.f_lineno)


def user_ops(packages=None):
    """The registered ops of other packages (those in ``packages``), sorted
    by qualified name."""
    return [_OPS[k] for k in sorted(_OPS)
            if packages is None or _OPS[k].package in packages]


def user_packages():
    """The packages that registered ops."""
    return sorted({info.package for info in _OPS.values()})


@contextlib.contextmanager
def _loading(package):
    _LOADING.append(package)
    try:
        yield
    finally:
        _LOADING.pop()


# ---------------------------------------------------------------------------
# Sources: --import modules and entry points

def import_module(name):
    """Import the module ``name`` (``--import``), which registers ops;
    returns the packages whose ops it stands for: its top-level package
    (the default of ``register``) and any other it registered ops for."""
    package = name.split('.')[0]
    source = next((s for s in _SOURCES if s.get('import') == name), None)
    if source is None:
        before = set(_OPS)
        try:
            importlib.import_module(name)
        except OpDeclarationError:
            raise
        except Exception as e:
            raise OpSourceError('--import {}'.format(name), 'importing it failed: '
                                '{}: {}'.format(type(e).__name__, e)) from e
        source = {'import': name, 'package': package, 'ops': sorted(set(_OPS) - before)}
        _SOURCES.append(source)
    return sorted({package} | {_OPS[k].package for k in source['ops'] if k in _OPS})


def _entry_points():
    from importlib import metadata
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def load_entry_points(pattern):
    """Load the ``xgrad.ops`` entry points whose name matches ``pattern`` (a
    name or a glob); returns their names. An entry point names a module that
    registers its ops when imported, or a list of OpInfo (or a function
    returning one) that is registered under the entry point's name."""
    names = []
    for ep in _entry_points():
        if not fnmatch.fnmatchcase(ep.name, pattern):
            continue
        names.append(ep.name)
        if any(s.get('entry_point') == ep.name for s in _SOURCES):
            continue
        before = set(_OPS)
        what = "entry point {} = '{}' (group {})".format(ep.name, ep.value, ENTRY_POINT_GROUP)
        with _loading(ep.name):
            try:
                found = ep.load()
                if callable(found) and not isinstance(found, type(sys)):
                    found = found()
                if not isinstance(found, type(sys)) and found is not None:
                    register(*found, package=ep.name)
            except OpDeclarationError:
                raise
            except Exception as e:
                raise OpSourceError(what, 'loading it failed: {}: {}'.format(
                    type(e).__name__, e)) from e
        dist = getattr(ep, 'dist', None)
        _SOURCES.append({'entry_point': ep.name, 'value': ep.value, 'package': ep.name,
                         'distribution': getattr(dist, 'name', None),
                         'version': getattr(dist, 'version', None),
                         'ops': sorted(set(_OPS) - before)})
    return names


def sources():
    """What was loaded, in order: ``{'import': module, ...}`` or
    ``{'entry_point': name, ...}``, each with the ops it registered."""
    return [dict(s) for s in _SOURCES]


def load_sources(loaded):
    """Load what another process loaded (``sources()`` there): how --jobs
    workers find the parent's ops."""
    for s in loaded:
        if 'import' in s:
            import_module(s['import'])
        else:
            load_entry_points(s['entry_point'])


def versions(infos):
    """{package: version} of the user packages among ``infos`` (None where
    unknown): reports carry it, and --merge refuses shards whose differ."""
    out = {}
    for info in infos:
        if info.package == 'xgrad' or info.package in out:
            continue
        version = None
        for s in _SOURCES:
            if s['package'] == info.package and s.get('version'):
                version = s['version']
        if version is None:
            module = sys.modules.get(info.package)
            version = getattr(module, '__version__', None)
            if version is None:
                version = _distribution_version(info.package)
        out[info.package] = None if version is None else str(version)
    return out


def _distribution_version(top_level):
    from importlib import metadata
    try:
        for dist in metadata.packages_distributions().get(top_level, ()):
            return metadata.version(dist)
    except Exception:  # NOQA: a version is information, not a requirement
        return None
    return None


# ---------------------------------------------------------------------------
# Selection: --ops

def _is_pattern(text):
    return any(c in text for c in '*?[')


def select(tokens=None, default_packages=()):
    """The ops ``--ops`` names: xgrad's own first (by name, as
    ``xgrad.registered_ops()``), then other packages' (by qualified name).

    tokens: None (``default_packages``' ops, or xgrad's own when there are
        none) or a list of: an op of xgrad (``sin``), ``xgrad`` (all of
        them), a package (``mypkg``: all its ops), ``package::name``; any
        of them may be a glob (``linalg.*``, ``mypkg::rms*``, ``*::*``: the
        ops of every other package; a package glob leaves xgrad out). An op
        of xgrad takes precedence over a package of the same name
        (``sin::*`` is the package). A package not registered yet is looked
        for among the ``xgrad.ops`` entry points.
    Raises ValueError for a token that selects nothing.
    """
    own = registered_ops()
    if tokens is None:
        if not default_packages:
            return own
        chosen = user_ops(set(default_packages))
        if not chosen:
            raise ValueError('the modules given to --import registered no ops for {} '
                             '(register them with xgrad.testing.register)'.format(
                                 ', '.join(sorted(set(default_packages)))))
        return chosen
    own_names = [i.name for i in own]
    chosen = set()
    for token in tokens:
        package, sep, name = token.partition('::')
        if not sep:
            if token in own_names:
                chosen.add(token)
                continue
            hits = {n for n in own_names if _is_pattern(token) and fnmatch.fnmatchcase(n, token)}
            hits |= _package_ops(token)
            if not hits:
                raise ValueError('no registered op named {}{}'.format(token, _hint(token)))
        else:
            hits = {i.qualified_name for p in _packages_matching(package)
                    for i in (own if p == 'xgrad' else user_ops({p}))
                    if fnmatch.fnmatchcase(i.name, name)}
            if not hits:
                raise ValueError('no registered op matches {}{}'.format(token, _hint(package)))
        chosen |= hits
    return ([i for i in own if i.name in chosen]
            + [i for i in user_ops() if i.qualified_name in chosen])


def _packages_matching(pattern):
    """The packages whose name matches ``pattern``, after loading the entry
    points that do. xgrad's own only when named: ``*::relu`` means the
    users' relus."""
    if pattern == 'xgrad':
        return ['xgrad']
    load_entry_points(pattern)
    return [p for p in user_packages() if fnmatch.fnmatchcase(p, pattern)]


def _package_ops(pattern):
    return {i.qualified_name for p in _packages_matching(pattern)
            for i in (registered_ops() if p == 'xgrad' else user_ops({p}))}


def _hint(package):
    known = [p for p in user_packages()]
    eps = [e.name for e in _entry_points()]
    parts = []
    if known:
        parts.append('packages with registered ops: {}'.format(', '.join(known)))
    parts.append('entry points in group {}: {}'.format(ENTRY_POINT_GROUP,
                                                      ', '.join(eps) or 'none installed'))
    return ' ({})'.format('; '.join(parts))


def check_calls(infos):
    """The calls of the user ops among ``infos`` on their samples (before a
    run; ``_declarations.check_calls``)."""
    for info in infos:
        if info.package != 'xgrad':
            _declarations.check_calls(info)


def _reset():
    """Forget every user op and source (tests)."""
    _OPS.clear()
    _WHERE.clear()
    _SOURCES.clear()
