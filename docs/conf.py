"""Sphinx configuration of xgrad's documentation.

    pip install -e ".[docs]"
    sphinx-build -W --keep-going -b html docs /tmp/xgrad-docs

The pages are Markdown (MyST) but for the API reference, reStructuredText
(what autodoc emits), generated from the
docstrings of the installed (or in-place built) package: every public name
of ``xgrad`` and of ``xgrad.testing`` is listed here, grouped by the module
that defines it (``_reference_text``), so a new public name is documented
without editing a page; the submodules with an ``__all__`` go through
``automodule``. CI's ``docs`` step (.ci/run) builds with warnings as errors.
"""

import inspect
import os
import re
import sys
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
if ROOT not in sys.path:  # the checkout's xgrad (built in place) over any other
    sys.path.insert(0, ROOT)

import xgrad  # noqa: E402
import xgrad.testing  # noqa: E402

project = 'xgrad'
author = 'the xgrad authors'
copyright = '2026, ' + author
release = version = xgrad.__version__

extensions = ['myst_parser', 'sphinx.ext.autodoc', 'sphinx.ext.napoleon']
source_suffix = {'.md': 'markdown', '.rst': 'restructuredtext'}
root_doc = 'index'
exclude_patterns = ['_build', 'Thumbs.db', '.DS_Store']
myst_enable_extensions = ['colon_fence', 'deflist']
myst_heading_anchors = 3
# The fences of docs/*.md name their language for tests/tooling/test_readme.py;
# ``text`` and ``sh`` are Pygments lexers, ``yaml`` too.
highlight_language = 'python'

html_theme = 'alabaster'
html_title = 'xgrad ' + release
html_theme_options = {
    'description': 'Reverse-mode autograd with ChainerX\'s Python API',
    'fixed_sidebar': True,
    'page_width': '1160px',
    'sidebar_width': '250px',
    'show_relbars': True,
}
html_sidebars = {'**': ['about.html', 'navigation.html', 'relations.html', 'searchbox.html']}
html_static_path = []

autodoc_member_order = 'bysource'
# Cython's embedsignature puts the signature on the docstring's first line.
autodoc_docstring_signature = True
napoleon_google_docstring = False
napoleon_numpy_docstring = False
# Links from the Markdown pages to files of the repository (bench/, tests/,
# CHANGELOG.md) are not documents of this site: MyST would warn about each.
suppress_warnings = ['myst.xref_missing']
nitpicky = False

# -- the API reference ---------------------------------------------------------------

# Titles of the groups of xgrad's namespace, by the module that defines a name;
# a module not listed here gets a section named after it.
GROUPS = [
    ('Arrays, graphs and backprop', ['xgrad._array', 'xgrad._backward', 'xgrad._function_node',
                                     'xgrad._context', 'xgrad._core', 'xgrad._graph',
                                     'xgrad._checkpoint', 'xgrad._graph_export', 'xgrad.hooks']),
    ('Devices and backends', ['xgrad._device']),
    ('Creating arrays', ['xgrad._ops.creation']),
    ('Arithmetic and comparisons', ['xgrad._ops.elementwise', 'xgrad._ops.arithmetic',
                                    'xgrad._ops.bitwise']),
    ('Mathematical functions and activations', ['xgrad._ops.mathematical']),
    ('Logic', ['xgrad._ops.logic']),
    ('Reductions, statistics and softmax', ['xgrad._ops.reduction', 'xgrad._ops.statistics']),
    ('Products and linear algebra', ['xgrad._ops.contraction', 'xgrad._ops.linalg']),
    ('Shapes, joining and splitting', ['xgrad._ops.shaping', 'xgrad._ops.manipulation']),
    ('Indexing', ['xgrad._ops.indexing']),
    ('Neural-network layers', ['xgrad._ops.convolution', 'xgrad._ops._conv.dispatch',
                               'xgrad._ops.pooling', 'xgrad._ops.normalization',
                               'xgrad._ops.dropout']),
    ('Losses', ['xgrad._ops.loss']),
    ('Recurrent networks', ['xgrad._ops.rnn']),
    ('The op registry', ['xgrad._ops.registry', 'xgrad._ops._registry']),
    ('Gradient checks', ['xgrad.testing._checks']),
    ('NumPy fallbacks', ['xgrad._numpy_fallbacks']),
    ('Process settings', ['xgrad._heap', 'xgrad._backend.workspace', 'xgrad._backend.cudnn']),
]


def _public(module):
    names = getattr(module, '__all__', None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith('_')]
    return [n for n in names if not isinstance(getattr(module, n), types.ModuleType)]


def _defining_module(obj):
    return getattr(obj, '__module__', None) or ''


def _data_line(modname, name, obj):
    """A one-line description of a public value that has no docstring of its own."""
    if isinstance(obj, type):
        where = '{}.{}'.format(obj.__module__, obj.__qualname__)
        where = where.replace('builtins.', '')
        return '``{}``: the type ``{}``.'.format(name, where)
    if isinstance(obj, tuple):
        return '``{}``: {}.'.format(name, ', '.join('``{}``'.format(
            getattr(o, '__name__', o)) for o in obj))
    return '``{}``: ``{!r}``.'.format(name, obj)


# Modules whose names are documented on a page of their own: a class they
# share with another namespace is described there and only shown here.
SUBMODULES = ['xgrad.functional', 'xgrad.distributed', 'xgrad.hooks', 'xgrad.linalg',
              'xgrad.random']


def _shown_elsewhere(modname, obj):
    """A class documented (indexed) on another page too: autodoc registers its
    defining module's name for both, which Sphinx reports as a duplicate."""
    if not isinstance(obj, type):
        return False
    others = [sys.modules[m] for m in SUBMODULES if m != modname]
    if modname != 'xgrad':
        others.append(xgrad)
    return any(obj is getattr(m, n, None) for m in others for n in _public(m))


def _directive(modname, name, obj):
    """The reStructuredText that documents one public name."""
    full = '{}.{}'.format(modname, name)
    no_index = '   :no-index:\n' if _shown_elsewhere(modname, obj) else ''
    if isinstance(obj, type) and [b for b in obj.__bases__ if b is not object]:
        no_index += '   :show-inheritance:\n'
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return '.. autoexception:: {}\n{}'.format(full, no_index)
    if isinstance(obj, type) and _defining_module(obj).startswith('xgrad'):
        return '.. autoclass:: {}\n   :members:\n   :undoc-members:\n{}'.format(full, no_index)
    if callable(obj) and not isinstance(obj, type):
        return '.. autofunction:: {}\n'.format(full)
    return '.. py:data:: {}\n   :module: {}\n\n   {}\n'.format(
        name, modname, _data_line(modname, name, obj))


def _section(level, title, modname, module, names):
    body = '\n'.join(_directive(modname, n, getattr(module, n))
                     for n in sorted(names, key=str.lower))
    return '{}\n{}\n\n{}'.format(title, level * len(title), body)


def _reference_text(module, level='-'):
    """reStructuredText documenting every public name of ``module``, in sections."""
    modname = module.__name__
    sections = {}
    values = []
    for name in _public(module):
        obj = getattr(module, name)
        if (isinstance(obj, type) and not _defining_module(obj).startswith('xgrad')) \
                or not (callable(obj) or isinstance(obj, type)):
            values.append(name)
            continue
        sections.setdefault(_defining_module(obj), []).append(name)
    out = []
    done = set()
    for title, modules in GROUPS:
        names = [n for m in modules for n in sections.get(m, [])]
        if not names:
            continue
        done.update(modules)
        out.append(_section(level, title, modname, module, names))
    for m in sorted(set(sections) - done):
        out.append(_section(level, 'Defined in ``{}``'.format(m), modname, module, sections[m]))
    if values:
        out.append(_section(level, 'Dtypes and constants', modname, module, values))
    return '\n'.join(out)


# Each reference page (reStructuredText, as autodoc writes) carries a marker
# comment that this replaces with the generated sections.
GENERATED = {
    'reference_xgrad': ('.. xgrad namespace (docs/conf.py puts the generated sections here)',
                        lambda: _reference_text(xgrad)),
    'reference_testing': ('.. xgrad.testing namespace (docs/conf.py puts the generated sections '
                          'here)',
                          lambda: _reference_text(xgrad.testing)),
}


# Pages the index names that another part of the project writes: left out of
# the toctree until they exist.
OPTIONAL_PAGES = {'user_ops'}
OTHER_PAGES = '<!-- other pages: docs/conf.py lists here any page of docs/ not named above -->'


def _index(source):
    """The index's toctrees, without optional pages that do not exist yet, and
    with a last one for the pages of docs/ that no toctree names."""
    here = os.path.dirname(os.path.abspath(__file__))
    pages = {os.path.splitext(f)[0] for f in os.listdir(here)
             if f.endswith(('.md', '.rst')) and f not in ('index.md',)}
    lines = [line for line in source.split('\n')
             if line.strip() not in OPTIONAL_PAGES or line.strip() in pages]
    text = '\n'.join(lines)
    named = set(re.findall(r'^\s*(?:[^<\n]*<)?([\w-]+)>?\s*$', text, re.M))
    others = sorted(pages - named)
    block = ''
    if others:
        block = ':::{toctree}\n:caption: Other pages\n:maxdepth: 1\n\n' + '\n'.join(others) + '\n:::\n'
    return text.replace(OTHER_PAGES, block)


# Titles of pages that a script writes without one (Sphinx needs a title).
UNTITLED = {'chainermn_results': "ChainerMN's own tests on xgrad"}


def _source_read(app, docname, source):
    if docname == 'index':
        source[0] = _index(source[0])
    if str(app.env.doc2path(docname)).endswith('.md') and \
            not re.search(r'^# \S', source[0], re.M):
        title = UNTITLED.get(docname, docname.replace('_', ' ').capitalize())
        source[0] = '# {}\n\n{}'.format(title, source[0])
    if docname in GENERATED:
        marker, make = GENERATED[docname]
        if marker not in source[0]:
            raise RuntimeError('{}.rst lost its marker {}'.format(docname, marker))
        source[0] = source[0].replace(marker, make())


_STAR_SIGNATURE = re.compile(r'^(\w+)\(\*args, \*\*kwargs\)$')


def _process_signature(app, what, name, obj, options, signature, return_annotation):
    """A Cython def with ``*args, **kwargs`` whose docstring spells out the
    real signature on its second paragraph: use that one."""
    doc = inspect.getdoc(obj) or ''
    paras = doc.split('\n\n')
    short = name.rsplit('.', 1)[-1]
    if len(paras) > 1 and (signature in (None, '(*args, **kwargs)')) and \
            (_STAR_SIGNATURE.match(paras[0].strip()) or not paras[0].strip()):
        real = ' '.join(paras[1].split())
        if real.startswith(short + '(') and real.endswith(')'):
            return real[len(short):], return_annotation
    return None


def _process_docstring(app, what, name, obj, options, lines):
    """Drop the signature paragraph that ``_process_signature`` used, and make
    xgrad's plain-text docstrings valid reStructuredText (``_plain_to_rst``)."""
    short = name.rsplit('.', 1)[-1]
    text = '\n'.join(lines)
    m = re.match(r'\s*' + re.escape(short) + r'\([^)]*\)\s*(\n\s*\n|$)', text, re.S)
    if m and what in ('function', 'method'):
        lines[:] = text[m.end():].split('\n')
    lines[:] = _plain_to_rst(lines)


# xgrad's docstrings are plain text with ``literals``: "name: text" items
# whose continuation lines hang indented, |x| for absolute values, *args.
_FIELD = re.compile(r'^([A-Za-z_][\w]*(?:(?:, | / |/)[A-Za-z_][\w]*)*): \S')
_LITERAL = re.compile(r'(``.+?``|:\w+:`[^`]+`)')


def _escape(line):
    """| and * are markup in reStructuredText; outside ``literals`` and roles
    they are text here."""
    parts = _LITERAL.split(line)
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace('\\', '\\\\').replace('|', '\\|').replace('*', '\\*')
    return ''.join(parts)


def _indent(line):
    return len(line) - len(line.lstrip())


def _items(lines, i, n):
    """The items of the paragraph starting at ``lines[i]``: each a line and
    the more-indented lines that hang under it. Returns (items, end)."""
    items = []
    base = _indent(lines[i])
    while i < n and lines[i].strip() and _indent(lines[i]) <= base:
        j = i + 1
        while j < n and lines[j].strip() and _indent(lines[j]) > base:
            j += 1
        items.append(lines[i:j])
        if lines[i].rstrip().endswith('::'):  # a literal block follows
            i = j
            break
        i = j
    return items, i


def _plain_to_rst(lines):
    """A paragraph of "name: text" items (each with its hanging lines, or a
    single line among other items) becomes a bullet list; any other
    paragraph whose lines hang becomes one plain paragraph; bullet and
    numbered lists, literal blocks (after ``::``) and doctests stay as they
    are; | and * are escaped outside literals."""
    out = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            out.append(line)
            i += 1
            continue
        base = _indent(line)
        if line.lstrip().startswith('>>>'):
            while i < n and lines[i].strip():
                out.append(lines[i])
                i += 1
            continue
        items, end = _items(lines, i, n)
        fields = [bool(_FIELD.match(it[0].strip())) for it in items]
        for k, it in enumerate(items):
            head = it[0]
            if head.rstrip().endswith('::'):
                out.append(_escape(head))
                out.extend(it[1:])  # the literal block, as written
                continue
            is_field = fields[k] and (len(it) > 1 or k + 1 == len(items) or fields[k + 1])
            if re.match(r'\s*([-*+]|\d+\.) ', head):  # a list item: its own hanging indent
                text = [_escape(x) for x in it]
            elif is_field:
                name, rest = head.strip().split(': ', 1)
                text = [' ' * base + '- **{}**: {}'.format(name, _escape(rest))]
                text += [' ' * (base + 2) + _escape(x.strip()) for x in it[1:]]
            else:
                text = [' ' * base + _escape(x.strip()) for x in it]
            kind = 'list' if (is_field or text[0].lstrip().startswith(('- ', '* ', '+ ')) or
                              re.match(r'\s*\d+\. ', text[0])) else 'text'
            if out and out[-1].strip() and k > 0 and kind != prev_kind:
                out.append('')
            out.extend(text)
            prev_kind = kind
        i = end
        if i < n and lines[i].strip() and _indent(lines[i]) > base:
            # a literal block after "::": copy it as written
            while i < n and (not lines[i].strip() or _indent(lines[i]) > base):
                out.append(lines[i])
                i += 1
    return out


def setup(app):
    app.connect('source-read', _source_read)
    app.connect('autodoc-process-signature', _process_signature)
    app.connect('autodoc-process-docstring', _process_docstring)
    return {'parallel_read_safe': True}
