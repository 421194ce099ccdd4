"""xgrad.graph_to_dot: the DOT text, parsed back with pydot, has the nodes and
edges of the graph that was recorded on the one backprop ID asked for, marks
outputs, leaves, retained and freed arrays, and changes nothing."""

import shutil
import subprocess

import numpy
import pytest

import xgrad

pydot = pytest.importorskip('pydot')

# pydot 4 calls pyparsing's old camelCase names, which pyparsing 3.3 deprecates.
pytestmark = pytest.mark.filterwarnings('ignore:.*deprecated:DeprecationWarning')


def _unquote(value):
    if value is None:
        return None
    value = value[1:-1] if value[:1] == value[-1:] == '"' else value
    out, i = [], 0
    while i < len(value):
        if value[i] == '\\' and i + 1 < len(value):
            out.append({'n': '\n', '"': '"', '\\': '\\'}.get(value[i + 1],
                                                              '\\' + value[i + 1]))
            i += 2
        else:
            out.append(value[i])
            i += 1
    return ''.join(out)


class Parsed:
    """One DOT text, parsed: its nodes (name -> attributes, unquoted), edges
    (in order) and graph label."""

    def __init__(self, text):
        graphs = pydot.graph_from_dot_data(text)
        assert graphs is not None and len(graphs) == 1, text
        g = graphs[0]
        self.text = text
        self.nodes = {n.get_name(): {k: _unquote(v) for k, v in n.get_attributes().items()}
                      for n in g.get_nodes() if n.get_name() not in ('graph', 'node', 'edge')}
        self.edges = [(e.get_source(), e.get_destination()) for e in g.get_edges()]
        self.graph = {k: _unquote(v) for k, v in g.get_attributes().items()}
        for n in g.get_nodes():
            if n.get_name() == 'graph':
                self.graph.update({k: _unquote(v) for k, v in n.get_attributes().items()})
        for a, b in self.edges:
            assert a in self.nodes and b in self.nodes, (a, b)

    def label(self, name):
        return self.nodes[name]['label']

    def classes(self, name):
        return set(self.nodes[name]['class'].split())

    def named(self, text):
        """The one array node whose label starts with ``text + ':'``."""
        found = [n for n in self.nodes if self.label(n).startswith(text + ':')]
        assert len(found) == 1, (text, found, self.text)
        return found[0]

    def arrays(self):
        return [n for n in self.nodes if 'array' in self.classes(n)]

    def ops(self):
        return [n for n in self.nodes if 'op' in self.classes(n)]

    def op_edges(self, op):
        """(op's label, input nodes in slot order, output nodes in slot order)."""
        return (self.label(op), [a for a, b in self.edges if b == op],
                [b for a, b in self.edges if a == op])


def _dot(outputs, backprop_id=None, **options):
    text = xgrad.graph_to_dot(outputs, backprop_id, **options)
    # pydot's parser keeps the frames of its last internal exception: this
    # frame must not keep the arrays alive.
    del outputs, options
    return Parsed(text)


def _leaf(shape, bp=None, seed=0):
    data = numpy.random.RandomState(seed).uniform(-1, 1, shape).astype('float32')
    return xgrad.array(data).require_grad(bp)


class Square(xgrad.FunctionNode):
    """A Python op that retains its input."""

    def forward(self, inputs):
        x, = inputs
        self.retain_inputs((0,))
        return x * x,

    def backward(self, target_input_indexes, grad_outputs):
        x, = self.get_retained_inputs()
        return 2 * x * grad_outputs[0],


class Quoted(xgrad.FunctionNode):
    op_name = 'my "op" \\ {a|b}'

    def forward(self, inputs):
        return inputs[0] + 1,

    def backward(self, target_input_indexes, grad_outputs):
        return grad_outputs[0],


def _mlp():
    x = xgrad.array(numpy.ones((4, 3), 'float32'))
    W1, b1, W2 = _leaf((3, 5), seed=1), _leaf((5,), seed=2), _leaf((5, 2), seed=3)
    h = xgrad.relu(xgrad.matmul(x, W1) + b1)
    y = xgrad.sum(xgrad.matmul(h, W2))
    return dict(x=x, W1=W1, b1=b1, W2=W2, h=h, y=y)


def test_mlp_has_its_arrays_ops_and_edges():
    v = _mlp()
    p = _dot(v['y'], names={k: v[k] for k in ('W1', 'b1', 'W2', 'h', 'y')})
    assert p.graph['label'] == "xgrad graph on backprop ID '<default>'"
    # x is a constant: it has no node on the graph.
    assert sorted(p.label(n).split('\n')[0] for n in p.arrays()) == sorted([
        'W1: (3, 5) float32', 'b1: (5,) float32', 'W2: (5, 2) float32',
        'h: (4, 5) float32', 'y: () float32', '(4, 5) float32', '(4, 5) float32',
        '(4, 2) float32'])
    assert sorted(p.label(n) for n in p.ops()) == ['add', 'matmul', 'matmul', 'relu', 'sum']
    y, h = p.named('y'), p.named('h')
    assert p.classes(y) == {'array', 'output'} and p.label(y).endswith('\noutput 0')
    for leaf in ('W1', 'b1', 'W2'):
        assert {'leaf', 'requires_grad'} <= p.classes(p.named(leaf))
        assert 'leaf, requires grad' in p.label(p.named(leaf))
    assert 'leaf' not in p.classes(h) and 'output' not in p.classes(h)
    # Outputs and leaves are told apart by colour too.
    colours = {p.nodes[y]['fillcolor'], p.nodes[p.named('W1')]['fillcolor'],
               p.nodes[h]['fillcolor']}
    assert len(colours) == 3
    # Edges: input -> op -> output, each op between its own arrays.
    ops = {p.label(o): p.op_edges(o) for o in p.ops() if p.label(o) != 'matmul'}
    assert ops['sum'][2] == [y]
    relu_in, relu_out = ops['relu'][1:]
    assert relu_out == [h]
    assert ops['add'][2] == relu_in and ops['add'][1][1] == p.named('b1')
    matmuls = sorted(p.op_edges(o)[1:] for o in p.ops() if p.label(o) == 'matmul')
    assert [h, p.named('W2')] in [m[0] for m in matmuls]
    assert [ops['add'][1][0]] in [m[1] for m in matmuls]
    assert len(p.edges) == 2 + 2 + 3 + 2 + 3  # sum, relu, add, matmul x 2


def test_split_shows_each_output_still_alive():
    x = _leaf((4, 3))
    a, b = xgrad.split(x, 2)
    p = _dot(a, names={'a': a, 'b': b, 'x': x})
    op, = p.ops()
    assert p.op_edges(op) == ('split', [p.named('x')], [p.named('a'), p.named('b')])
    assert 'output' in p.classes(p.named('a')) and 'output' not in p.classes(p.named('b'))
    del b
    p = _dot(a, names={'a': a, 'x': x})
    op, = p.ops()
    assert p.op_edges(op) == ('split', [p.named('x')], [p.named('a')])


def test_retained_inputs_and_outputs_are_marked():
    x, w = _leaf((3,)), _leaf((3,), seed=1)
    s = Square().apply((x,))[0]   # retains its input
    t = xgrad.tanh(s)             # retains its output
    u = t + w                     # retains nothing
    p = _dot(u, names=dict(x=x, w=w, s=s, t=t, u=u))
    assert 'retained' in p.classes(p.named('x'))
    assert 'retained' in p.label(p.named('x')) and p.nodes[p.named('x')]['peripheries'] == '2'
    assert 'retained' in p.classes(p.named('t'))
    for name in ('w', 's', 'u'):
        assert 'retained' not in p.classes(p.named(name)), name
        assert 'peripheries' not in p.nodes[p.named(name)]


def test_python_function_node_shows_its_name_escaped():
    x = _leaf((2,))
    y = Quoted().apply((Square().apply((x,))[0],))[0]
    p = _dot(y, names={'x "1" \\ \n two': x})
    assert sorted(p.label(o) for o in p.ops()) == sorted([Quoted.op_name, 'Square'])
    assert p.label(p.named('x "1" \\ \n two')).startswith('x "1" \\ \n two: (2,) float32')


def test_each_backprop_id_shows_only_its_graph():
    with xgrad.backprop_scope('bp1') as bp1, xgrad.backprop_scope('bp2') as bp2:
        x = _leaf((3,), bp1)
        x.require_grad(bp2)
        w = _leaf((3,), bp2, seed=1)
        y = x * w
        with xgrad.no_backprop_mode(bp2):
            e = xgrad.exp(x)   # on bp1 only
        z = y + e
        names = dict(x=x, w=w, y=y, e=e, z=z)
        p1, p2 = _dot(z, bp1, names=names), _dot(z, bp2, names=names)
        assert p1.graph['label'] == "xgrad graph on backprop ID 'bp1'"
        assert p2.graph['label'] == "xgrad graph on backprop ID 'bp2'"
        first = lambda p: sorted(p.label(n).split(':')[0] for n in p.arrays())  # NOQA
        assert first(p1) == ['e', 'x', 'y', 'z']
        assert sorted(p.label(o) for p in (p1,) for o in p.ops()) == ['add', 'exp', 'multiply']
        # On bp2, e is a constant (no node): add has one input there.
        assert first(p2) == ['w', 'x', 'y', 'z']
        assert sorted(p2.label(o) for o in p2.ops()) == ['add', 'multiply']
        add, = [o for o in p2.ops() if p2.label(o) == 'add']
        assert p2.op_edges(add) == ('add', [p2.named('y')], [p2.named('z')])
        mul, = [o for o in p1.ops() if p1.label(o) == 'multiply']
        assert p1.op_edges(mul) == ('multiply', [p1.named('x')], [p1.named('y')])
        with pytest.raises(xgrad.XgradError, match="outputs\\[0\\].*'bp2'"):
            xgrad.graph_to_dot(e, bp2)
        with pytest.raises(xgrad.XgradError, match="'<default>'"):
            xgrad.graph_to_dot(z)


def test_ops_a_backward_walked_are_gone():
    x = _leaf((3,))
    h = x * 2
    y = xgrad.sum(h)
    z = h * 3
    y.backward()
    p = _dot(z, names=dict(x=x, h=h, z=z))
    # x * 2 was unchained by the pass: h is now where z's graph starts.
    assert sorted(p.label(n).split(':')[0] for n in p.arrays()) == ['h', 'z']
    op, = p.ops()
    assert p.op_edges(op) == ('multiply', [p.named('h')], [p.named('z')])
    assert 'leaf' in p.classes(p.named('h')) and 'requires_grad' not in p.classes(p.named('h'))
    p = _dot(y)
    assert p.ops() == [] and len(p.arrays()) == 1 and p.edges == []


def test_a_dead_intermediate_array_still_appears():
    x = _leaf((2, 3))
    h = x * 2
    y = xgrad.sum(h)
    del h
    p = _dot(y, names=dict(x=x, y=y))
    dead, = [n for n in p.arrays() if 'freed' in p.classes(n)]
    assert p.label(dead) == '(2, 3) float32\nfreed'
    assert 'dashed' in p.nodes[dead]['style'].split(',')
    ops = {p.label(o): p.op_edges(o) for o in p.ops()}
    assert ops == {'multiply': ('multiply', [p.named('x')], [dead]),
                   'sum': ('sum', [dead], [p.named('y')])}


def test_several_outputs_and_a_shared_graph():
    x = _leaf((3,))
    h = xgrad.exp(x)
    a, b = h * 2, h + 1
    p = _dot([a, b, a], names=dict(x=x, h=h, a=a, b=b))
    assert len(p.arrays()) == 4 and len(p.ops()) == 3
    assert 'output 0' in p.label(p.named('a')) and 'output 1' in p.label(p.named('b'))
    assert p.edges.count((p.named('h'), p.ops()[0])) + p.edges.count(
        (p.named('h'), p.ops()[1])) == 2


def test_an_input_used_twice_gives_two_edges():
    x = _leaf((3,))
    p = _dot(x * x, names=dict(x=x))
    op, = p.ops()
    assert p.op_edges(op)[1] == [p.named('x'), p.named('x')]


def test_options_rankdir_styles_and_remove_variable():
    v = _mlp()
    p = _dot(v['y'], rankdir='LR', variable_style=None,
             function_style={'shape': 'ellipse', 'color': 'red'})
    assert p.graph['rankdir'] == 'LR'
    for n in p.arrays():
        assert 'fillcolor' not in p.nodes[n] and 'shape' not in p.nodes[n]
    for n in p.ops():
        assert p.nodes[n]['shape'] == 'ellipse' and p.nodes[n]['color'] == 'red'
    p = _dot(v['y'], remove_variable=True)
    assert p.arrays() == [] and sorted(p.label(n) for n in p.ops()) == [
        'add', 'matmul', 'matmul', 'relu', 'sum']
    chain = sorted((p.label(a), p.label(b)) for a, b in p.edges)
    assert chain == [('add', 'relu'), ('matmul', 'add'), ('matmul', 'sum'),
                     ('relu', 'matmul')]
    with pytest.raises(ValueError, match='rankdir'):
        xgrad.graph_to_dot(v['y'], rankdir='up')
    with pytest.raises(TypeError, match='variable_style'):
        xgrad.graph_to_dot(v['y'], variable_style='fancy')
    with pytest.raises(ValueError, match='function_style'):
        xgrad.graph_to_dot(v['y'], function_style={'bad key': 1})
    with pytest.raises(TypeError, match='names'):
        xgrad.graph_to_dot(v['y'], names=[v['y']])
    with pytest.raises(TypeError, match=r"names\['y'\]"):
        xgrad.graph_to_dot(v['y'], names={'y': 1.0})


def test_same_graph_same_text():
    graphs = [_mlp() for _ in range(3)]   # at other addresses
    texts = [xgrad.graph_to_dot(v['y']) for v in graphs]
    assert texts[0] == texts[1] == texts[2]
    assert xgrad.graph_to_dot(graphs[0]['y']) == texts[0]


def test_exporting_changes_nothing():
    grads = []
    for export in (False, True):
        v = _mlp()
        if export:
            before = xgrad.graph_to_dot(v['y'])
            assert xgrad.graph_to_dot(v['y']) == before
        xgrad.backward(v['y'])
        grads.append([v[k].grad.to_numpy() for k in ('W1', 'b1', 'W2')])
        assert not v['y'].is_grad_required() and not v['h'].is_grad_required()
    for g0, g1 in zip(*grads):
        numpy.testing.assert_array_equal(g0, g1)


def test_bad_outputs_raise_type_error_naming_the_argument():
    x = _leaf((2,))
    with pytest.raises(TypeError, match='outputs must be'):
        xgrad.graph_to_dot(numpy.ones(2))
    with pytest.raises(TypeError, match=r'outputs\[1\]'):
        xgrad.graph_to_dot([x * 2, 3.0])
    with pytest.raises(TypeError, match='backprop_id'):
        xgrad.graph_to_dot(x, 'bp1')


def test_an_array_off_the_graph_raises_naming_the_backprop_id():
    with pytest.raises(xgrad.XgradError, match=r"outputs\[0\].*'<default>'"):
        xgrad.graph_to_dot(xgrad.ones((2,)))
    with pytest.raises(xgrad.XgradError, match=r"outputs\[0\].*'<default>'"):
        xgrad.graph_to_dot(xgrad.arange(3))  # integers never have a node
    with xgrad.backprop_scope('other') as bp:
        with pytest.raises(xgrad.XgradError, match="'other'"):
            xgrad.graph_to_dot(_leaf((2,)) * 2, bp)


def test_an_expired_or_foreign_backprop_id_raises_as_backward_does():
    with xgrad.backprop_scope('gone') as bp:
        y = _leaf((2,), bp) * 2
    with pytest.raises(xgrad.XgradError) as backward_error:
        xgrad.backward(y, bp)
    with pytest.raises(type(backward_error.value), match='expired'):
        xgrad.graph_to_dot(y, bp)
    foreign = xgrad.Context().make_backprop_id('foreign')
    with pytest.raises(xgrad.XgradError, match='foreign'):
        xgrad.graph_to_dot(_leaf((2,)) * 2, foreign)


def test_no_outputs_is_an_empty_graph():
    p = _dot([])
    assert p.nodes == {} and p.edges == []
    assert p.graph['label'] == "xgrad graph on backprop ID '<default>'"


def test_a_long_chain_is_walked_without_recursion():
    x = _leaf((1,))
    y = x
    for _ in range(20000):
        y = y * 1.0
    text = xgrad.graph_to_dot(y)   # (pydot would take minutes to parse it)
    assert text.count('class="op"') == 20000
    assert text.count('class="array') == 20001 and text.count(' -> ') == 40000


@pytest.mark.skipif(shutil.which('dot') is None, reason='Graphviz dot is not on PATH')
def test_dot_renders_it():
    v = _mlp()
    text = xgrad.graph_to_dot(v['y'], names={'W1': v['W1']})
    proc = subprocess.run(['dot', '-Tsvg'], input=text, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert '<svg' in proc.stdout and 'W1' in proc.stdout
