"""``graph_to_dot``: a recorded graph as Graphviz DOT text, to look at.

Chainer's ``chainer.computational_graph`` (``build_computational_graph(...)
.dump()``) is the model: its ``variable_style``, ``function_style``,
``rankdir`` and ``remove_variable`` options mean the same here. xgrad arrays
carry no name, so Chainer's ``show_name`` becomes ``names={'W': W, ...}``.
The walk of the graph is ``xgrad._graph_walk``'s; this module only formats.
"""

import re
import typing

from xgrad._core import ndarray, get_default_context
from xgrad._graph_walk import walk_graph

# Chainer's defaults, but ops are boxes, not records (a record label gives
# meaning to '|', '{' and '<', which an op's name may hold).
_ARRAY_STYLE = {'shape': 'octagon', 'fillcolor': '#E0E0E0', 'style': 'filled'}
_OP_STYLE = {'shape': 'box', 'fillcolor': '#6495ED', 'style': 'filled'}
# With the default array style: outputs and grad-requiring leaves stand out.
_OUTPUT_FILL = '#F4B183'
_LEAF_FILL = '#A9D18E'
_RANKDIRS = ('TB', 'BT', 'LR', 'RL')
_ATTRIBUTE = re.compile(r'[A-Za-z_][A-Za-z0-9_]*\Z')


def graph_to_dot(outputs, backprop_id=None, *, names=None, variable_style='default',
                 function_style='default', rankdir='TB', remove_variable=False) -> str:
    """Graphviz DOT text of the graph recorded below ``outputs`` (an array or
    a list/tuple of them) on ``backprop_id`` (None: the default graph), for
    ``dot -Tsvg`` or any DOT viewer. It only reads the graph.

    Array nodes show shape, dtype and their role: ``output i``, ``leaf``,
    ``requires grad``, ``retained`` (an op keeps its data for backward),
    ``freed`` (the array died; its node is still in the graph). The same
    words are in each node's ``class`` attribute. Op nodes show the op's
    name; an input used twice gives two edges. A multi-output op shows all
    its outputs still alive. The graph's label names the backprop ID.

    Ops that a backward pass without double backprop has walked are no
    longer part of the graph: their outputs appear as creator-less nodes.

    ``names``: ``{name: array}``, shown as ``name: (shape) dtype`` (xgrad
    arrays carry no name). ``variable_style`` / ``function_style``: DOT
    attributes of array / op nodes, as in Chainer (``'default'``, a dict, or
    None for none); a custom array style drops the role colours (the double
    outline of retained arrays and the dashes of freed ones stay).
    ``rankdir``: 'TB', 'BT', 'LR' or 'RL'. ``remove_variable``: ops only.

    Raises TypeError for a non-array output, XgradError for an expired
    backprop ID or an output that is not on its graph. Same graph, same text.
    """
    outs = _as_arrays(outputs)
    if rankdir not in _RANKDIRS:
        raise ValueError('graph_to_dot(): rankdir must be one of {}, not {!r}'.format(
            ', '.join(_RANKDIRS), rankdir))
    array_style = _style(variable_style, _ARRAY_STYLE, 'variable_style')
    op_style = _style(function_style, _OP_STYLE, 'function_style')
    name_of = _names(names)
    bp_name, arrays, ops = walk_graph(outs, backprop_id,
                                      None if outs else get_default_context())

    retained = set()
    for op in ops:
        retained.update(op['inputs'][i] for i in op['retained_inputs'])
        retained.update(op['outputs'][j] for j in op['retained_outputs'])
    lines = ['digraph xgrad {',
             '  graph [{}];'.format(_attributes({
                 'label': "xgrad graph on backprop ID '{}'".format(bp_name),
                 'labelloc': 't', 'rankdir': rankdir}))]
    if not remove_variable:
        for i, a in enumerate(arrays):
            lines.append('  a{} [{}];'.format(i, _attributes(_array_node(
                a, i in retained, name_of.get(id(a['array'])), array_style,
                variable_style == 'default'))))
    for n, op in enumerate(ops):
        attributes = {'label': op['name'], 'class': 'op'}
        attributes.update((k, v) for k, v in op_style.items() if k not in attributes)
        lines.append('  op{} [{}];'.format(n, _attributes(attributes)))
    if remove_variable:
        creator = {i: n for n, op in enumerate(ops) for i in op['outputs'] if i is not None}
        for n, op in enumerate(ops):
            lines.extend('  op{} -> op{};'.format(creator[i], n)
                         for i in op['inputs'] if i in creator)
    else:
        for n, op in enumerate(ops):
            lines.extend('  a{} -> op{};'.format(i, n) for i in op['inputs'] if i is not None)
            lines.extend('  op{} -> a{};'.format(n, i) for i in op['outputs'] if i is not None)
    lines.append('}')
    return '\n'.join(lines) + '\n'


def _as_arrays(outputs):
    if isinstance(outputs, ndarray):
        return (outputs,)
    if not isinstance(outputs, (list, tuple)):
        raise TypeError('graph_to_dot(): outputs must be an xgrad.ndarray or a list/tuple '
                        'of them, not {}'.format(type(outputs).__name__))
    for i, a in enumerate(outputs):
        if not isinstance(a, ndarray):
            raise TypeError('graph_to_dot(): outputs[{}] must be an xgrad.ndarray, not {}'
                            .format(i, type(a).__name__))
    return tuple(outputs)


def _style(style, default, what):
    if isinstance(style, str) and style == 'default':
        return dict(default)
    if style is None:
        return {}
    if not isinstance(style, dict):
        raise TypeError("graph_to_dot(): {} must be 'default', a dict or None, not {}"
                        .format(what, type(style).__name__))
    for key in style:
        if not isinstance(key, str) or not _ATTRIBUTE.match(key):
            raise ValueError('graph_to_dot(): {} has a key that is not a DOT attribute '
                             'name: {!r}'.format(what, key))
    return dict(style)


def _names(names):
    """``{id(array): name}`` from the user's ``{name: array}``."""
    if names is None:
        return {}
    if not isinstance(names, typing.Mapping):
        raise TypeError('graph_to_dot(): names must be a mapping of names to arrays, '
                        'not {}'.format(type(names).__name__))
    found = {}
    for name, a in names.items():
        if not isinstance(a, ndarray):
            raise TypeError('graph_to_dot(): names[{!r}] must be an xgrad.ndarray, not {}'
                            .format(name, type(a).__name__))
        found[id(a)] = str(name)
    return found


def _array_node(a, retained, name, style, role_colours):
    roles = []
    if a['output'] is not None:
        roles.append('output {}'.format(a['output']))
    if a['leaf']:
        roles.append('leaf')
    if a['requires_grad']:
        roles.append('requires grad')
    if retained:
        roles.append('retained')
    if a['array'] is None:
        roles.append('freed')
    head = '{} {}'.format(a['shape'], a['dtype'])
    attributes = {
        'label': [head if name is None else '{}: {}'.format(name, head)] + (
            [', '.join(roles)] if roles else []),
        'class': ' '.join(['array'] + [r.split()[0] if r.startswith('output')
                                       else r.replace(' ', '_') for r in roles])}
    attributes.update((k, v) for k, v in style.items() if k not in attributes)
    if role_colours and a['output'] is not None:
        attributes['fillcolor'] = _OUTPUT_FILL
    elif role_colours and a['leaf'] and a['requires_grad']:
        attributes['fillcolor'] = _LEAF_FILL
    if retained:
        attributes['peripheries'] = '2'
    if a['array'] is None:
        attributes['style'] = ','.join(
            [s for s in str(attributes.get('style', '')).split(',') if s] + ['dashed'])
    return attributes


def _attributes(attributes):
    """``key="value", ...``; a list value is a label of several lines."""
    return ', '.join('{}={}'.format(key, _quote(value)) for key, value in attributes.items())


def _quote(value):
    lines = value if isinstance(value, list) else [value]
    return '"{}"'.format('\\n'.join(
        str(line).replace('\\', '\\\\').replace('"', '\\"').replace('\r', '')
        .replace('\n', '\\n') for line in lines))
