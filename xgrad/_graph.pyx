# cython: language_level=3
"""The graph's vertices: array nodes and op nodes, and the release of dead
graphs.

Ownership has no cycles:

    ndarray --owns--> ArrayNode (one per graph) --owns--> creator OpNode
    OpNode --owns--> its input ArrayNodes and the input/output data retained
    OpNode ..raw pointer..> its output ArrayNodes (cleared when they die)
    ArrayNode ..raw pointer..> its ndarray (cleared when the array dies)

so dropping the last reference to an output frees its graph at once, without
the garbage collector. Gradients are stored on the array (one slot per node),
never on nodes, so a gradient that is itself in a graph cannot close a cycle.

Users can still close one (``a.set_grad(a)``; a FunctionNode subclass that
keeps its output as an attribute), so arrays and nodes are visible to the
garbage collector (``tp_traverse``), and so are Python subclasses of
FunctionNode (through their ``__dict__``; the built-in ops, which hold no
arrays, stay untracked: fewer objects for each collection to visit). None is
ever cleared by the collector (``no_gc_clear``): their raw pointers must stay
valid while a cycle is torn down, which clearing the Python containers in the
cycle (lists, dicts) does.

``OpNode`` is the part of an op that the graph needs (its edges per graph,
ranks, retained data); ``xgrad._function_node.FunctionNode`` subclasses it
with the op protocol (forward, backward, retaining).
"""

cimport cython
from cpython.mem cimport PyMem_Free
from cpython.ref cimport PyObject, Py_DECREF, Py_REFCNT

import weakref

from xgrad._errors import XgradError


# ---------------------------------------------------------------------------
# Deferred release: freeing a million-op chain without recursing a million
# C frames deep. A dying FunctionNode hands what it owns to this queue; the
# outermost release drains it in a loop.
# ---------------------------------------------------------------------------

cdef list _release_queue = []

cdef extern from *:
    """
    // Whether this thread is inside _drain_release_queue: a C thread-local,
    // read on every op's release (a set of thread idents cost a Python int
    // and two hashes each time).
    #ifdef __cplusplus
    static thread_local int xgrad_draining = 0;
    #else
    static _Thread_local int xgrad_draining = 0;
    #endif
    """
    int _draining "xgrad_draining"


cdef void _drain_release_queue():
    """Free what the queue holds, one object at a time. A release nested in
    the drain only queues (bounded C stack); another thread drains too."""
    global _draining
    if _draining:
        return
    _draining = 1
    try:
        while _release_queue:
            _release_queue.pop()
    finally:
        _draining = 0


# ---------------------------------------------------------------------------
# Array nodes
# ---------------------------------------------------------------------------

@cython.no_gc_clear
@cython.final
cdef class ArrayNode:
    """An array's vertex in one graph: its creator and rank there."""

    def __dealloc__(self):
        cdef OpNode creator = self.creator
        if creator is not None and creator._out_nodes != NULL:
            if out_edge(creator, self.graph_index, self.out_index) == <PyObject*>self:
                set_out_edge(creator, self.graph_index, self.out_index, NULL)

    def __repr__(self):
        return '<ArrayNode shape={} dtype={} rank={} backprop_id={}>'.format(
            self.shape, self.dtype, self.rank, self.backprop_id)


cdef class NodeHooks:
    """The hooks registered on one array node: one field on the node, None
    until the first registration (one object for the collector to visit);
    the pass reads the lists, empty once every hook is removed."""

    def __cinit__(self):
        self.grad = []
        self.post = []


_leaf_grad_hooks = 0


class HookHandle:
    """What ``ndarray.register_hook`` and ``register_post_accumulate_hook``
    return: ``remove()`` takes the hook off its array's node (once; a second
    call does nothing). The node keeps the handle itself, so the same
    function registered twice is two hooks, removed one at a time; the
    handle refers to the node's hooks weakly (no cycle through the node)."""

    def __init__(self, hook, hooks, post, leaf_grad):
        self.hook = hook
        self._hooks = weakref.ref(hooks)
        self._post = post
        self._leaf_grad = leaf_grad  # counted in _leaf_grad_hooks

    def remove(self):
        global _leaf_grad_hooks
        cdef NodeHooks hooks = self._hooks() if self._hooks is not None else None
        self._hooks = None
        if self._leaf_grad:
            self._leaf_grad = False
            _leaf_grad_hooks -= 1
        if hooks is not None:
            registered = hooks.post if self._post else hooks.grad
            if self in registered:
                registered.remove(self)

    def __repr__(self):
        return '<HookHandle of {!r}{}>'.format(
            self.hook, '' if self._hooks is not None else ' (removed)')


cdef object add_hook(ArrayNode node, object hook, bint post, BackpropId bp):
    """Add a gradient hook (``post``: a post-accumulate hook) to ``node``, an
    array's node on ``bp`` (None: the array is not on that graph)."""
    method = 'register_post_accumulate_hook' if post else 'register_hook'
    if not callable(hook):
        raise TypeError('{}(): hook must be callable, not {}'.format(
            method, type(hook).__name__))
    if node is None:
        raise XgradError('{}(): the array is not on the graph of backprop ID '
                         "'{}' (require_grad() it, or use an array computed from one "
                         'that is)'.format(method, bp.name))
    if post and node.creator is not None:
        raise XgradError('{}() takes a leaf: this array was computed by {} on backprop '
                         "ID '{}'".format(method, type(node.creator).__name__, bp.name))
    global _leaf_grad_hooks
    if node.hooks is None:
        node.hooks = NodeHooks.__new__(NodeHooks)
    leaf_grad = not post and node.creator is None
    if leaf_grad:
        _leaf_grad_hooks += 1
    handle = HookHandle(hook, node.hooks, post, leaf_grad)
    (node.hooks.post if post else node.hooks.grad).append(handle)
    return handle


cdef void print_graph(ArrayNode node, BackpropId bp) except *:
    """Print the graph below ``node`` on ``bp``, outputs first (ChainerX's
    ``_debug_dump_computational_graph``), without recursion."""
    if node is None:
        print('(no node on {})'.format(bp.name))
        return
    cdef OpNode creator
    seen = set()
    stack = [(node, 0)]
    while stack:
        n, depth = stack.pop()
        print('{}{}'.format('  ' * depth, n))
        creator = (<ArrayNode>n).creator
        if creator is None or id(creator) in seen:
            continue
        seen.add(id(creator))
        print('{}  <- {}'.format('  ' * depth, (<object>creator).name))
        for i in reversed(range(creator._n_in)):
            child = creator._input_node((<ArrayNode>n).graph_index, i)
            if child is not None:
                stack.append((child, depth + 2))


# ---------------------------------------------------------------------------
# Op nodes
# ---------------------------------------------------------------------------

@cython.no_gc
cdef class OpNode:
    """An op's vertex in the graphs it is recorded on. Per graph k it keeps a
    rank, its input nodes (owned) and its output nodes (borrowed), in one C
    block (laid out by ``alloc_edges``, ``_graph.pxd``) so that recording
    allocates no Python containers; and, for all graphs, the input and output
    data that the op's backward retained."""

    def __dealloc__(self):
        cdef Py_ssize_t i
        cdef PyObject* p
        if self._in_nodes != NULL:
            # Hand the input nodes to the release queue instead of freeing them
            # here, which would recurse once per op of a long chain.
            for i in range(self._n_graphs * self._n_in):
                p = self._in_nodes[i]
                if p != NULL:
                    self._in_nodes[i] = NULL
                    if Py_REFCNT(<object>p) > 1:
                        Py_DECREF(<object>p)  # someone else keeps it: no cascade
                    else:
                        _release_queue.append(<object>p)
                        Py_DECREF(<object>p)
        if self._block != NULL:
            PyMem_Free(self._block)
            self._block = NULL
        if _release_queue:
            _drain_release_queue()

    @property
    def rank(self):
        return self._ranks[0] if self._n_graphs else 0

    cdef ArrayNode _any_input_node(self, Py_ssize_t i):
        """Input i's node on some graph (they share shape and dtype)."""
        cdef Py_ssize_t k
        cdef PyObject* p
        for k in range(self._n_graphs):
            p = in_edge(self, k, i)
            if p != NULL:
                return <ArrayNode>p
        return None

    cdef int _graph_index(self, BackpropId bp):
        cdef int k
        for k in range(self._n_graphs):
            if self._graphs[k] is bp:
                return k
        return -1

    cdef ArrayNode _input_node(self, Py_ssize_t k, Py_ssize_t i):
        cdef PyObject* p = in_edge(self, k, i)
        return None if p == NULL else <ArrayNode>p

    cdef void _unchain_graph(self, int k):
        """Drop what graph k needed for backward (after a pass without double
        backprop); once no graph needs it, drop the retained arrays too."""
        cdef Py_ssize_t j, i
        cdef PyObject* p
        cdef ArrayNode out
        for j in range(self._n_out):
            p = out_edge(self, k, j)
            if p != NULL:
                out = <ArrayNode>p
                set_out_edge(self, k, j, NULL)
                out.creator = None  # may free self: the caller holds a reference
        for i in range(self._n_in):
            p = in_edge(self, k, i)
            if p != NULL:
                set_in_edge(self, k, i, NULL)
                if Py_REFCNT(<object>p) > 1:
                    Py_DECREF(<object>p)
                else:
                    _release_queue.append(<object>p)
                    Py_DECREF(<object>p)
        self._chained[k] = 0
        if _release_queue:
            _drain_release_queue()
        for k in range(self._n_graphs):
            if self._chained[k]:
                return
        self._retained_in_data = None
        self._retained_out_data = None
