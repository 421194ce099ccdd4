# cython: language_level=3
"""Reading a recorded graph out as plain Python data (for ``graph_to_dot``).

The graph's structures are C-level (borrowed pointers, one C block of edges
per op), so whatever shows a graph to users needs one walk at this level;
it hands back lists and dicts, which ``xgrad._graph_export`` formats. The
walk only reads: no node, op, rank or gradient changes, and nothing is
kept once it returns. It never recurses (a million-op chain is fine).
"""

from xgrad._context cimport BackpropId, Context, _resolve_bp
from xgrad._graph cimport ArrayNode, OpNode, out_edge
from xgrad._array cimport ndarray, _context_of
from xgrad._function_node cimport FunctionNode

from xgrad._errors import XgradError


def walk_graph(tuple outputs, backprop_id, default_context):
    """The graph below ``outputs`` (xgrad arrays) on ``backprop_id`` (None:
    the default ID of the first output's context, or of ``default_context``
    when there is no output), as ``(backprop_name, arrays, ops)``:

    * ``arrays``: one dict per array node, in the order the walk met them
      (outputs first, then breadth first through the creators, inputs in
      argument order): ``shape``, ``dtype``, ``array`` (the ndarray, None if
      it died), ``leaf`` (no creator on this graph), ``requires_grad``,
      ``output`` (its position in ``outputs``, None if not one);
    * ``ops``: one dict per op node, in the order met: ``name``, ``inputs`` /
      ``outputs`` (per argument slot, an index into ``arrays`` or None for a
      slot without a node on this graph, e.g. a constant or a dead output),
      ``retained_inputs`` / ``retained_outputs`` (the slots whose data the op
      keeps for its backward).

    Validation as ``backward``'s where they overlap: TypeError for a bad
    ``backprop_id``; XgradError for an expired ID or one from another
    context, and (unlike ``backward``, which ignores such outputs) for an
    output without a node on the graph.
    """
    cdef BackpropId bp
    cdef Context ctx = (_context_of(<ndarray>outputs[0]) if outputs
                        else <Context?>default_context)
    bp = _resolve_bp(backprop_id, ctx)
    cdef Py_ssize_t i, j, k, head = 0
    cdef ArrayNode node
    cdef OpNode op
    nodes = []     # the ArrayNodes met (kept alive, so their ids stay unique)
    index = {}     # id(ArrayNode) -> position in nodes
    arrays = []
    for i in range(len(outputs)):
        _context_of(<ndarray>outputs[i])._check_valid_backprop_id(bp)
        node = (<ndarray>outputs[i])._node_on(bp)
        if node is None:
            raise XgradError(
                "graph_to_dot(): outputs[{}] is not on the graph of backprop ID '{}' "
                '(require_grad() it, or pass an array computed from one that is)'
                .format(i, bp.name))
        if id(node) in index:
            continue
        index[id(node)] = len(nodes)
        nodes.append(node)
        arrays.append(_array_record(node, i))
    ops = []
    seen_ops = {}  # id(OpNode) -> position in ops
    op_refs = []   # the OpNodes met (kept alive)
    while head < len(nodes):
        node = <ArrayNode>nodes[head]
        head += 1
        op = node.creator
        if op is None or id(op) in seen_ops:
            continue
        seen_ops[id(op)] = len(ops)
        op_refs.append(op)
        k = node.graph_index
        ins = []
        for i in range(op._n_in):
            ins.append(_index_of(op._input_node(k, i), nodes, index, arrays))
        outs = []
        for j in range(op._n_out):
            p = out_edge(op, k, j)
            outs.append(None if p == NULL else
                        _index_of(<ArrayNode>p, nodes, index, arrays))
        retained_in = retained_out = ()
        if isinstance(op, FunctionNode):
            if op._retained_in_data is not None:
                retained_in = (<FunctionNode>op)._retain_in_idx or ()
            if op._retained_out_data is not None:
                retained_out = (<FunctionNode>op)._retain_out_idx or ()
        ops.append({'name': (<object>op).name, 'inputs': ins, 'outputs': outs,
                    'retained_inputs': tuple(retained_in),
                    'retained_outputs': tuple(retained_out)})
    return bp.name, arrays, ops


cdef dict _array_record(ArrayNode node, object output):
    return {'shape': tuple(node.shape), 'dtype': node.dtype,
            'array': None if node._array == NULL else <object>node._array,
            'leaf': node.creator is None, 'requires_grad': bool(node.grad_required),
            'output': output}


cdef object _index_of(ArrayNode node, list nodes, dict index, list arrays):
    """``node``'s position in ``nodes``, appending it (to be walked) if new."""
    if node is None:
        return None
    found = index.get(id(node))
    if found is not None:
        return found
    index[id(node)] = len(nodes)
    nodes.append(node)
    arrays.append(_array_record(node, None))
    return len(nodes) - 1
