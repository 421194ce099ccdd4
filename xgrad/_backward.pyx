# cython: language_level=3
"""The backward pass (semantics.md sections 6-9): ``backward`` and ``grad``.

One ``_BackwardPass`` walks one graph: it seeds the outputs' gradients, takes
ops from a max-heap by rank (every consumer of an array before its creator),
calls each op's backward (on raw arrays when nothing can be recorded, else on
xgrad arrays inside a scope that stops the graphs that must not record),
accumulates the input gradients in a ``_GradTable``, and commits the final
gradients and the unchaining of the ops (``_Outcome``) only once every op has
succeeded: a pass that fails leaves the graph and every gradient as they were.
"""

cimport cython
from cpython.ref cimport PyObject, Py_REFCNT
from cpython.dict cimport PyDict_GetItem
from libcpp.algorithm cimport push_heap, pop_heap, sort
from libcpp.utility cimport pair
from libcpp.vector cimport vector
cimport numpy as cnp

from xgrad._backend cimport native_kernels
from xgrad._context cimport (
    BackpropId, Context, _ModeEntry, _ThreadState, _state, _push_mode, _pop_mode,
    _resolve_bp, _is_native, is_enabled)
from xgrad._graph cimport (
    ArrayNode, OpNode, raw_meta_matches, _leaf_grad_hooks, in_edge, out_edge,
    set_out_edge)
from xgrad._array cimport (
    _OPS, ndarray, _wrap, _as_raw_array, _context_of, _has_float_data)
from xgrad._function_node cimport FunctionNode
from xgrad._op_hooks cimport _op_scope_state, backward_hooks_pre, backward_hooks_post
from xgrad._grad_table cimport IndexedGradient, _GradTable
from xgrad cimport _debug

import math
import threading

import numpy

from xgrad._array import _gradient_mismatch, _install_backward
from xgrad._errors import DtypeError, GradientError, XgradError
from xgrad import _device as _device_module

ctypedef long long _HeapKey
ctypedef pair[_HeapKey, PyObject*] _HeapItem

cnp.import_array()
cdef object _NUMPY_NDARRAY = numpy.ndarray

# NumPy < 2 promotes 0-d arrays by value (NEP 50 came with NumPy 2).
_NUMPY1_SCALAR_PROMOTION = int(numpy.__version__.split('.')[0]) < 2
cdef bint _numpy1 = _NUMPY1_SCALAR_PROMOTION


# ---------------------------------------------------------------------------
# The backward pass (semantics.md sections 6-9)
# ---------------------------------------------------------------------------

cdef tuple _as_array_tuple(object arrays, str what):
    if isinstance(arrays, ndarray):
        return (arrays,)
    if not isinstance(arrays, (list, tuple)):
        raise TypeError('{} must be an xgrad.ndarray or a list/tuple of them, '
                        'not {}'.format(what, type(arrays).__name__))
    for i, a in enumerate(arrays):
        if not isinstance(a, ndarray):
            raise TypeError('{}[{}] must be an xgrad.ndarray, not {}'.format(
                what, i, type(a).__name__))
    return tuple(arrays)


cdef list _check_seeds(object grad_outputs, tuple outs, str what):
    """Validate user-given output gradients; returns a list (or None)."""
    if grad_outputs is None or (isinstance(grad_outputs, (list, tuple))
                                and not grad_outputs):
        return None  # an empty list means no seeds, as in ChainerX
    seeds = list(grad_outputs) if isinstance(grad_outputs, (list, tuple)) else [
        grad_outputs]
    if len(seeds) != len(outs):
        raise GradientError('Grad_outputs and outputs must have the same size: '
                            '{} grad_outputs for {} outputs'.format(
                                len(seeds), len(outs)))
    for i, (seed, y) in enumerate(zip(seeds, outs)):
        if seed is None:
            continue
        if not isinstance(seed, ndarray):
            raise TypeError('{}[{}] must be an xgrad.ndarray or None, not {}'
                            .format(what, i, type(seed).__name__))
        if not _has_float_data((<ndarray>y)._data):
            raise DtypeError('Output {} has dtype {}, which cannot take a '
                             'gradient; its {} entry must be None'.format(
                                 i, (<ndarray>y)._data.dtype.name, what))
        message = _gradient_mismatch(seed, (<ndarray>y)._data.shape,
                                     (<ndarray>y)._data.dtype, (<ndarray>y)._device)
        if message is not None:
            raise GradientError('{} (in {}[{}], for output {})'.format(
                message, what, i, i))
    return seeds


cdef ndarray _view_in_scope(ndarray a):
    """What a backward function sees of an array: a view that is recorded only
    on the graphs enabled now (a plain alias when there are none)."""
    if a._has_enabled_node():
        return _OPS.view(a)
    return _wrap(a._data, a._device)


# Commits of passes that may write the same gradient slot (a leaf shared by
# graphs backpropagated in two threads) take turns: read, add and write of a
# slot are one step. Its methods are bound once: a ``with`` block looks up
# and binds __enter__ and __exit__ at every commit.
cdef object _commit_lock = threading.RLock()
cdef object _commit_lock_acquire = _commit_lock.acquire
cdef object _commit_lock_release = _commit_lock.release


@cython.final
cdef class _Outcome:
    """What a pass will change, kept aside until it has succeeded: the final
    gradient of each node it reached and the ops it went through. ``commit``
    writes the slots and unchains the ops; a pass that fails drops the
    outcome, which leaves the graph and every gradient as they were."""
    cdef list finals                 # node, value, node, value, ...
    cdef vector[PyObject*] ops       # processed ops (kept alive by the pass)
    cdef vector[int] graph_indexes   # the graph each op was processed on

    def __cinit__(self):
        self.finals = []

    cdef inline void record(self, ArrayNode node, object value):
        self.finals.append(node)
        self.finals.append(value)

    cdef inline void processed(self, FunctionNode fn, int k):
        self.ops.push_back(<PyObject*>fn)
        self.graph_indexes.push_back(k)

    cdef void apply(self, list slots, bint unchain):
        """The commit proper: slot writes (``slots``: node, value, flag
        triples, prepared beforehand) and unchaining; no op runs here."""
        cdef Py_ssize_t i
        cdef ArrayNode node
        for i in range(0, len(slots), 3):
            node = <ArrayNode>slots[i]
            if node._array == NULL:
                continue
            (<ndarray>node._array)._set_grad_of(node, slots[i + 1])
            if slots[i + 2]:
                node.grad_required = True
        if unchain:
            for i in range(<Py_ssize_t>self.ops.size()):
                (<FunctionNode>self.ops[i])._unchain_graph(self.graph_indexes[i])
        self.ops.clear()
        self.graph_indexes.clear()


cdef object _checked_loss_scale(object loss_scale):
    """``loss_scale`` as a Python number (None for 1), or a clear error."""
    if loss_scale is None:
        return None
    if (isinstance(loss_scale, (bool, numpy.bool_))
            or not isinstance(loss_scale, (int, float, numpy.integer, numpy.floating))):
        raise TypeError('loss_scale must be an int or a float, not {}'.format(
            type(loss_scale).__name__))
    value = int(loss_scale) if isinstance(loss_scale, (int, numpy.integer)) else float(
        loss_scale)
    try:
        finite = math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite or value == 0:
        raise XgradError('loss_scale must be a finite non-zero number, got {!r}'
                         .format(loss_scale))
    return None if value == 1 else value


@cython.final
cdef class _BackwardPass:
    """One run of backward/grad on one graph, in four phases:

    1. seeding (``_seed``): the output gradients go into the table;
    2. the loop (``run``, ``_process``, ``_propagate``): ops leave a max-heap
       by rank (every consumer of an array before its creator); each takes
       its output gradients from the table and adds its input gradients in;
    3. accumulation (``_GradTable``): only this pass's contributions; a
       node's prior gradient is added when its own gradient is final;
    4. commit or rollback (``_Outcome``): slots written and ops unchained
       only once every op has succeeded; an error drops the outcome.
    """
    cdef BackpropId bp
    cdef Context ctx
    cdef bint double
    cdef bint retain_grad
    cdef object loss_scale
    cdef _ModeEntry stop
    cdef tuple stop_ids
    cdef _GradTable table
    cdef _Outcome outcome
    cdef vector[_HeapItem] heap   # (rank << 32 | seq, op)
    cdef set pushed         # ops in the heap or done (holds their references)
    cdef long long seq
    cdef set output_nodes
    cdef set untouched      # outputs given explicit seeds: slots not touched
    cdef set input_nodes    # grad(): nodes whose gradients are returned
    cdef dict results       # grad(): input node -> gradient
    cdef set sub_nodes      # grad(): nodes in the evaluated sub-graph
    cdef set sub_ops
    cdef dict waiting       # hooked leaf -> consuming edges not processed yet

    def __init__(self, BackpropId bp, bint double, bint retain_grad, loss_scale):
        self.bp = bp
        self.ctx = bp.context
        self.double = double
        self.retain_grad = retain_grad
        self.loss_scale = _checked_loss_scale(loss_scale)
        self.table = _GradTable.__new__(_GradTable)
        self.outcome = _Outcome.__new__(_Outcome)
        self.pushed = set()
        self.seq = 0
        self.output_nodes = set()
        self.untouched = set()

    # -- set-up -------------------------------------------------------------

    cdef void _make_stop_scope(self):
        stop = self.ctx._inner_connected(self.bp)
        if not self.double:
            stop.append(self.bp)
        self.stop_ids = tuple(stop)
        if stop:
            self.stop = _ModeEntry.__new__(_ModeEntry)
            self.stop.enable = False
            self.stop.context = self.ctx
            self.stop.ids = self.stop_ids

    cdef bint _is_stopped(self, BackpropId bp):
        for b in self.stop_ids:
            if b is bp:
                return True
        return not is_enabled(bp)

    cdef vector[_HeapItem] _ops_below_outputs(self) except *:
        """(rank << 32 | graph index, op) of every op reachable from the
        outputs on this graph, once each: a walk without recursion, on a C++
        stack (a Python list's append and pop resize it at every step).
        The pointers are borrowed: the graph holds every node and op."""
        cdef ArrayNode node, child
        cdef FunctionNode fn
        cdef Py_ssize_t i, k
        cdef vector[PyObject*] stack
        cdef vector[_HeapItem] found
        seen = set()
        for node in self.output_nodes:
            stack.push_back(<PyObject*>node)
        while not stack.empty():
            node = <ArrayNode>stack.back()
            stack.pop_back()
            fn = <FunctionNode>node.creator
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            k = node.graph_index
            found.push_back(_HeapItem(((<_HeapKey>fn._ranks[k]) << 32) | k, <PyObject*>fn))
            for i in range(fn._n_in):
                child = fn._input_node(k, i)
                if child is not None:
                    stack.push_back(<PyObject*>child)
        return found

    cdef void _find_subgraph(self, list in_nodes):
        """grad(): the nodes and ops on a path from some input to some output."""
        cdef ArrayNode child
        cdef FunctionNode fn
        cdef Py_ssize_t i, j, k
        cdef PyObject* p
        cdef vector[_HeapItem] ops = self._ops_below_outputs()
        cdef _HeapItem entry
        self.sub_nodes = set([n for n in in_nodes if n is not None])
        self.sub_ops = set()
        # By rank: an op's inputs come from ops of lower rank only.
        sort(ops.begin(), ops.end())
        for entry in ops:
            fn = <FunctionNode>entry.second
            k = entry.first & 0xFFFFFFFF
            for i in range(fn._n_in):
                child = fn._input_node(k, i)
                if child is not None and child in self.sub_nodes:
                    self.sub_ops.add(fn)
                    for j in range(fn._n_out):
                        p = out_edge(fn, k, j)
                        if p != NULL:
                            self.sub_nodes.add(<ArrayNode>p)
                    break

    cdef void _count_hooked_leaves(self):
        """For each leaf with gradient hooks, the edges from ops this pass
        can process into it: once they are processed, its gradient is final
        and its hooks run then, while the pass goes on (what lets an
        all-reduce of it overlap the rest of backward). A leaf whose count
        never reaches zero (an op got no gradient) is finished at commit."""
        cdef ArrayNode child
        cdef FunctionNode fn
        cdef Py_ssize_t i
        cdef Py_ssize_t k
        cdef _HeapItem entry
        self.waiting = {}
        for entry in self._ops_below_outputs():
            fn = <FunctionNode>entry.second
            k = entry.first & 0xFFFFFFFF
            if self.sub_ops is not None and fn not in self.sub_ops:
                continue
            for i in range(fn._n_in):
                child = fn._input_node(k, i)
                if (child is not None and child.creator is None
                        and child.hooks is not None and child.hooks.grad):
                    self.waiting[child] = self.waiting.get(child, 0) + 1
        if not self.waiting:
            self.waiting = None

    cdef void _finish_hooked_leaves(self, FunctionNode fn, int k) except *:
        """``fn`` was processed: a hooked leaf it consumed whose every
        consumer is now done gets its final gradient (and hooks) now."""
        cdef ArrayNode child
        cdef Py_ssize_t i
        for i in range(fn._n_in):
            child = fn._input_node(k, i)
            if child is None or child not in self.waiting:
                continue
            left = self.waiting[child] - 1
            if left:
                self.waiting[child] = left
                continue
            del self.waiting[child]
            g = self.table.pop(child)
            if g is not None:
                self._final(child, g)

    cdef void _push(self, ArrayNode node):
        cdef FunctionNode fn = <FunctionNode>node.creator
        cdef Py_ssize_t n
        if fn is None:
            return
        if self.sub_ops is not None and fn not in self.sub_ops:
            return
        n = len(self.pushed)
        self.pushed.add(fn)
        if len(self.pushed) == n:
            return  # already in the heap, or done
        self.seq += 1
        self.heap.push_back(_HeapItem(
            ((<_HeapKey>node.rank) << 32) | self.seq, <PyObject*>fn))
        push_heap(self.heap.begin(), self.heap.end())

    cdef object _scaled(self, ndarray g):
        if self.loss_scale is None:
            return g
        return _OPS.multiply(g, self.loss_scale)

    cdef object _unscaled(self, g):
        if self.loss_scale is None or g is None:
            return g
        return _OPS.divide(g, self.loss_scale)

    cdef object _slot_value(self, ArrayNode node):
        if node._array == NULL:
            return None
        return (<ndarray>node._array)._grad_of(node)

    # -- phase 1: seeding ------------------------------------------------------

    cdef void _seed(self, tuple outs, list seeds) except *:
        cdef ArrayNode node
        cdef ndarray y
        cdef Py_ssize_t i
        for i in range(len(outs)):
            y = <ndarray>outs[i]
            node = y._node_on(self.bp)
            if node is None:
                continue
            seed = None if seeds is None else seeds[i]
            if node in self.output_nodes:
                # The same array again: an explicit seed adds to the first.
                if seed is not None:
                    self.untouched.add(node)
                    self.table.add(node, <ndarray>self._scaled(seed), False)
                continue
            if seed is not None:
                self.untouched.add(node)
                value = self._scaled(seed)
            else:
                value = self._slot_value(node)
                if value is not None:
                    value = self._scaled(value)
                elif seeds is not None:
                    continue  # explicitly no seed for this output
                else:
                    if y._device.is_native:
                        seed = numpy.empty(y._data.shape, dtype=y._data.dtype)
                        seed.fill(1 if self.loss_scale is None else self.loss_scale)
                    else:
                        with y._device.scope():
                            seed = y._device.xp.full(
                                y._data.shape,
                                1 if self.loss_scale is None else self.loss_scale,
                                dtype=y._data.dtype)
                    self.output_nodes.add(node)
                    self.table.put(node, _wrap(seed, y._device), True)
                    continue
            self.output_nodes.add(node)
            self.table.put(node, value, False)

    # -- phase 2: the loop -------------------------------------------------------

    cdef object run(self, tuple outs, list seeds, list in_nodes):
        cdef ArrayNode node
        cdef FunctionNode fn
        self.ctx._check_backprop_allowed(self.bp)
        self._make_stop_scope()
        self._seed(outs, seeds)
        if in_nodes is not None:
            self.input_nodes = set([n for n in in_nodes if n is not None])
            self.results = {}
            self._find_subgraph(in_nodes)
        if _leaf_grad_hooks:
            self._count_hooked_leaves()
        for node in list(self.output_nodes):
            self._push(node)
        try:
            while not self.heap.empty():
                pop_heap(self.heap.begin(), self.heap.end())
                fn = <FunctionNode>self.heap.back().second
                self.heap.pop_back()
                if fn._device is None or _is_native(fn._device):
                    self._process(fn, fn._graph_index(self.bp))
                else:  # its gradients are computed on its GPU
                    with fn._device.scope():
                        self._process(fn, fn._graph_index(self.bp))
            self._commit()
        finally:
            # After a failure this is the rollback: the table, the outcome
            # and the references to the ops are dropped, nothing else.
            self.heap.clear()
            self.waiting = None
            self.outcome = None
            self.table = None
            self.pushed = None
        return self.results

    cdef object _take_grad(self, ArrayNode node):
        """The gradient that flows out of ``node`` now: what accumulated in
        this pass plus what its slot held, else whatever its array holds
        (None if dead or empty)."""
        g = self.table.pop(node)
        if g is None:
            return self._slot_value(node)
        g = self._final(node, g)
        return g

    cdef object _final(self, ArrayNode node, object g):
        """A node's gradient once nothing more flows in: its prior gradient
        (read now, so that a cleargrad() meanwhile counts) plus this pass's;
        recorded for the commit. The node's gradient hooks see this pass's
        gradient first."""
        if node.hooks is not None and node.hooks.grad:
            g = self._hooked(node, g)
        if self.input_nodes is not None and node in self.input_nodes:
            self.outcome.record(node, g)
            return g
        if node._array == NULL:
            return g  # a dead array: nothing to add, nowhere to store
        prior = (<ndarray>node._array)._grad_of(node)
        if prior is not None and node not in self.output_nodes:
            g = _OPS.add(self._scaled(prior), g)
        if not self.untouched or node not in self.untouched:
            self.outcome.record(node, g)
        return g

    cdef object _hooked(self, ArrayNode node, object g):
        """``g`` after the node's gradient hooks, which see it unscaled and
        may replace it (a replacement of another shape, dtype or device is a
        GradientError naming the hook; the pass then rolls back)."""
        value = self._unscaled(g)
        replaced = False
        for handle in list(node.hooks.grad):
            result = handle.hook(value)
            if result is None:
                continue
            if not isinstance(result, ndarray):
                message = 'it returned a {}, not an xgrad.ndarray or None'.format(
                    type(result).__name__)
            else:
                message = _gradient_mismatch(result, node.shape, node.dtype, node.device)
            if message is not None:
                raise GradientError("Gradient hook {!r} on backprop ID '{}': {}".format(
                    handle.hook, self.bp.name, message))
            value = result
            replaced = True
        return self._scaled(value) if replaced else g

    cdef void _process(self, FunctionNode fn, int k) except *:
        cdef Py_ssize_t j, i, n_out = fn._n_out, n_in = fn._n_in
        cdef PyObject* p
        cdef ArrayNode child
        cdef bint any_gy = False
        cdef tuple gys
        if n_out == 1:
            p = out_edge(fn, k, 0)
            g = None if p == NULL else self._take_grad(<ArrayNode>p)
            any_gy = g is not None
            gys = (g,)
        else:
            gys_list = []
            for j in range(n_out):
                p = out_edge(fn, k, j)
                g = None if p == NULL else self._take_grad(<ArrayNode>p)
                any_gy = any_gy or g is not None
                gys_list.append(g)
            gys = tuple(gys_list)
        if any_gy and fn._chained[k]:
            targets = _targets(fn, k, self.sub_nodes)
            if targets:
                self._propagate(fn, k, targets, gys)
        if self.waiting is not None:
            self._finish_hooked_leaves(fn, k)
        if not self.double:
            self.outcome.processed(fn, k)

    cdef void _propagate(self, FunctionNode fn, int k, tuple targets,
                         tuple gys) except *:
        """Run ``fn``'s backward for ``targets`` on raw arrays when nothing can
        be recorded (``_feed_raw``), else on xgrad arrays (``_feed_recorded``)."""
        cdef bint raw
        cdef _ThreadState st = _op_scope_state()
        if st is not None:
            backward_hooks_pre(st, fn, gys)
        grads = self._call_backward_raw(fn, targets, gys)
        raw = grads is not None
        if not raw:
            grads = self._call_backward_graph(fn, k, targets, gys)
        if len(grads) != len(targets):  # one per input: take the targets'
            if len(grads) != fn._n_in:
                raise GradientError('{}.backward returned {} gradients for {} target '
                                    'inputs'.format(fn.name, len(grads), len(targets)))
            grads = tuple([grads[i] for i in targets])
        if st is not None:
            self._after_backward(st, fn, k, targets, gys, grads)
        if raw:
            self._feed_raw(fn, k, targets, grads)
        else:
            self._feed_recorded(fn, k, targets, gys, grads)

    cdef void _feed_raw(self, FunctionNode fn, int k, tuple targets,
                        tuple grads) except *:
        """The raw path's checks: ``grads``, one per target, are what the op's
        formula computed on raw arrays (arrays, NumPy scalars, IndexedGradients)."""
        cdef ArrayNode node
        cdef Py_ssize_t t
        cdef bint fresh
        for t in range(len(targets)):
            g = grads[t]
            if g is None:
                continue
            node = fn._input_node(k, targets[t])
            if node is None:
                continue  # unchained meanwhile (another thread's pass): nothing to feed
            if type(g) is IndexedGradient:
                # (add_at writes into a buffer of the node's dtype: a value of
                # another float dtype, NumPy 1.x's, is cast there)
                self.table.add_at(node, <IndexedGradient>g, fn._device)
                self._push(node)
                continue
            data = _as_raw_array(g)
            if _numpy1_widened(data, node):
                data = data.astype(node.dtype)
            # Not a reference more or less to ``data`` here (see the function).
            fresh = data is g and _gradient_is_exclusively_ours(data, grads)
            self._feed(fn, node, _wrap(data, fn._device), fresh)

    cdef void _feed_recorded(self, FunctionNode fn, int k, tuple targets, tuple gys,
                             tuple grads) except *:
        """The graph path's checks: ``grads``, one per target, are what
        ``fn.backward`` returned (a user's op may return anything)."""
        cdef ArrayNode node
        cdef Py_ssize_t t, u
        for t in range(len(targets)):
            g = grads[t]
            if g is None:
                continue
            node = fn._input_node(k, targets[t])
            if node is None:
                continue  # unchained meanwhile (another thread's pass): nothing to feed
            if not isinstance(g, ndarray):
                raise GradientError('{}.backward returned a {} for input {}; '
                                    'gradients must be xgrad arrays. Op: {}'.format(
                                        fn.name, type(g).__name__, targets[t], fn.name))
            # The same object twice (x + x, a pass-through of gy) gets a
            # fresh view, so that gradients never alias by identity.
            for other in gys:
                if other is g:
                    g = _view_in_scope(g)
                    break
            else:
                for u in range(t):
                    if grads[u] is g:
                        g = _view_in_scope(g)
                        break
            # (NumPy 1.x widens 0-d values only; other dtypes are errors)
            if (_numpy1_widened((<ndarray>g)._data, node)
                    and (<ndarray>g)._data.ndim == 0):
                g = (<ndarray>g).astype(node.dtype)  # recorded, as the formula
            self._feed(fn, node, <ndarray>g, False)

    cdef inline void _feed(self, FunctionNode fn, ArrayNode node, ndarray g,
                           bint fresh) except *:
        """Check ``g`` against ``node``, add it in, queue the node's creator."""
        if not _meta_matches(g, node):
            raise GradientError('{} Op: {}'.format(
                _gradient_mismatch(g, node.shape, node.dtype, node.device),
                fn.name))
        self.table.add(node, g, fresh)
        self._push(node)

    cdef void _after_backward(self, _ThreadState st, FunctionNode fn, int k,
                              tuple targets, tuple gys, tuple grads) except *:
        """Inside op_hooks/detect_anomaly: the op's gradients as one xgrad
        array (or None) per input, for the anomaly check and the hooks."""
        cdef Py_ssize_t t
        cdef ArrayNode node
        per_input = [None] * fn._n_in
        for t in range(len(targets)):
            g = grads[t]
            if g is None or isinstance(g, ndarray):
                per_input[targets[t]] = g
                continue
            node = fn._input_node(k, targets[t])
            if type(g) is IndexedGradient:
                dense = fn._device.xp.zeros(node.shape, dtype=node.dtype)
                dense[(<IndexedGradient>g).key] = (<IndexedGradient>g).value
                g = dense
            per_input[targets[t]] = _wrap(_as_raw_array(g), fn._device)
        backward_hooks_post(st, fn, self.bp, gys, tuple(per_input))

    cdef object _call_backward_raw(self, FunctionNode fn, tuple targets, tuple gys):
        """The fast path: the op's gradients computed on raw arrays, or None
        when something could be recorded or the op has no raw path."""
        if not self._raw_ok(fn, gys):
            return None
        if len(gys) == 1:
            raw_gys = ((<ndarray>gys[0])._data,)
        else:
            raw_gys = tuple([None if g is None else (<ndarray>g)._data for g in gys])
        return fn._backward_raw(targets, raw_gys, fn._retained_in_data,
                                fn._retained_out_data)

    cdef tuple _call_backward_graph(self, FunctionNode fn, int k, tuple targets,
                                    tuple gys):
        """Call ``fn.backward`` on xgrad arrays, inside the stop scope."""
        cdef _ThreadState st = _state()
        cdef Py_ssize_t j
        if self.stop is not None:
            _push_mode(st, self.stop)
        try:
            if fn._retain_in_idx:
                fn._bw_inputs = tuple([self._retained_input(fn, k, j)
                                       for j in range(len(fn._retain_in_idx))])
            if fn._retain_out_idx:
                fn._bw_outputs = tuple([self._retained_output(fn, k, j)
                                        for j in range(len(fn._retain_out_idx))])
            grads = fn.backward(targets, gys)
        finally:
            fn._bw_inputs = None
            fn._bw_outputs = None
            if self.stop is not None:
                _pop_mode(st, self.stop)
        if grads is None:
            raise GradientError('{}.backward returned None; return a tuple with '
                                'one gradient (or None) per target input'.format(
                                    fn.name))
        if isinstance(grads, ndarray):
            return (grads,)
        return tuple(grads)

    cdef bint _raw_ok(self, FunctionNode fn, tuple gys):
        """True when the backward cannot record anything: every array it would
        see lives only on stopped or disabled graphs."""
        cdef ArrayNode node
        if self.double:
            return False
        for g in gys:
            if g is not None and (<ndarray>g)._nodes is not None:
                return False
        for bp in fn._graphs:
            if not self._is_stopped(bp):
                return False
        if fn._retain_in_idx:
            for i in fn._retain_in_idx:
                a = _alive_input(fn, i)
                if a is not None:
                    for node in (<ndarray>a)._nodes:
                        if not self._is_stopped(node.backprop_id):
                            return False
        return True

    cdef object _retained_input(self, FunctionNode fn, int k, Py_ssize_t pos):
        """A retained input as the backward sees it: a view of the input if it
        is alive, else a view of its saved data re-attached to the op's input
        nodes. A view, as ChainerX's GetRetainedInput: the re-attached array
        is dropped at once, so what the backward does to the array it gets
        (Chainer calls require_grad on it) does not reach the input's node,
        whose gradient would otherwise be stored and later added in again.

        xgrad's own formulas (``_formula_only()``) only compute with what they
        get and keep nothing: they get the array itself (or the re-attached
        one), which saves a recorded view op per retained array in double
        backprop, and its backward in the pass after."""
        cdef Py_ssize_t i = fn._retain_in_idx[pos], kk
        cdef PyObject* p
        cdef ndarray substitute
        data = fn._retained_in_data[pos]
        if data is None:
            return None
        a = _alive_input(fn, i)
        if a is not None:
            return a if fn._formula_only() else _view_in_scope(<ndarray>a)
        substitute = _wrap(data, fn._device)
        for kk in range(fn._n_graphs):
            p = in_edge(fn, kk, i)
            if p != NULL and is_enabled((<ArrayNode>p).backprop_id):
                substitute._adopt(<ArrayNode>p)
        return substitute if fn._formula_only() else _view_in_scope(substitute)

    cdef object _retained_output(self, FunctionNode fn, int k, Py_ssize_t pos):
        """A retained output as the backward sees it: a view of the output if
        it is alive, else its saved data re-attached to the op's output nodes
        (made anew on graphs where they died)."""
        cdef Py_ssize_t kk, j = fn._retain_out_idx[pos]
        cdef PyObject* p = out_edge(fn, k, j)
        cdef ArrayNode node
        cdef ndarray substitute
        data = fn._retained_out_data[pos]
        if data is None:
            return None
        if p != NULL and (<ArrayNode>p)._array != NULL:
            if fn._formula_only():
                return <ndarray>(<ArrayNode>p)._array
            return _view_in_scope(<ndarray>(<ArrayNode>p)._array)
        substitute = _wrap(data, fn._device)
        for kk in range(fn._n_graphs):
            bp = fn._graphs[kk]
            if not is_enabled(bp):
                continue
            p = out_edge(fn, kk, j)
            if p != NULL:
                substitute._adopt(<ArrayNode>p)
            else:
                node = substitute._add_node(bp, fn, fn._ranks[kk], <int>kk, <int>j)
                set_out_edge(fn, kk, j, <PyObject*>node)
        return substitute if fn._formula_only() else _view_in_scope(substitute)

    # -- phase 4: commit (rollback is what ``run`` drops on an error) ----------

    cdef void _commit(self) except *:
        """Every op succeeded: finish the leaves, prepare each slot's value
        (ops may run, and fail, here), then write them all and unchain."""
        cdef list slots = []
        cdef list finals
        cdef Py_ssize_t i
        _commit_lock_acquire()
        try:
            # What is left has no creator to process: leaves (and grad inputs).
            for node_obj, value in list(self.table.acc.items()):
                self._final(<ArrayNode>node_obj, value)
            finals = self.outcome.finals
            for i in range(0, len(finals), 2):
                self._prepare(<ArrayNode>finals[i], finals[i + 1], slots)
            self.outcome.apply(slots, not self.double)
        finally:
            _commit_lock_release()
        self.ctx._mark_backpropped(self.bp)
        # Post-accumulate hooks, once every slot is written (outside the lock:
        # a hook may start another pass or an all-reduce).
        for i in range(0, len(slots), 3):
            if slots[i + 2]:
                _run_post_hooks(<ArrayNode>slots[i])

    cdef void _prepare(self, ArrayNode node, object value, list slots) except *:
        """The value a node's slot gets at commit (grad() inputs: its result)."""
        if self.input_nodes is not None and node in self.input_nodes:
            self.results[node] = _writable(self._unscaled(value))
            return
        if node._array == NULL:
            return
        if node.grad_required or (self.retain_grad and node not in self.output_nodes):
            slots.append(node)
            slots.append(_writable(self._unscaled(value)))
            slots.append(True)
        elif (<ndarray>node._array)._grads is not None:
            slots.append(node)
            slots.append(None)
            slots.append(False)


cdef void _run_post_hooks(ArrayNode node) except *:
    """Call the post-accumulate hooks (if any) of a node whose gradient was
    stored."""
    if node.hooks is None or not node.hooks.post or node._array == NULL:
        return
    array = <object>node._array
    for handle in list(node.hooks.post):
        handle.hook(array)


cdef object _alive_input(FunctionNode fn, Py_ssize_t i):
    """Input i of ``fn`` if some graph's node still points to its array."""
    cdef Py_ssize_t k
    cdef PyObject* p
    for k in range(fn._n_graphs):
        p = in_edge(fn, k, i)
        if p != NULL and (<ArrayNode>p)._array != NULL:
            return <object>(<ArrayNode>p)._array
    return None


cdef object _writable(object g):
    """A gradient the user may update in place: read-only data (a broadcast
    view, or a view of retained forward data) is copied before it is stored."""
    cdef ndarray a
    if g is None:
        return None
    a = <ndarray>g
    data = a._data
    if type(data) is _NUMPY_NDARRAY:
        if cnp.PyArray_ISWRITEABLE(<cnp.ndarray>data):
            return g
    elif a._device.is_native or not _device_module.is_broadcast_view(data):
        return g
    # (CuPy has no read-only arrays: on a GPU the broadcast views are copied.)
    if a._nodes is not None:
        return _OPS.copy(a)
    with a._device.scope():
        return _wrap(data.copy(order='C'), a._device)


cdef inline bint _numpy1_widened(object data, ArrayNode node) except -1:
    """NumPy 1.x only: whether the float gradient ``data`` (raw) is wider than
    its node's because NumPy 1.x promotes a 0-d float16/32 operand with a
    Python float to float64 by value (NumPy 2, NEP 50, and ChainerX keep the
    operand's dtype); the caller casts it back. Under NumPy 2: one C test."""
    return (_numpy1 and data.dtype != node.dtype
            and data.dtype.kind == 'f' and node.dtype.kind == 'f')


cdef enum:
    _OUR_REFERENCES = 3   # _feed_raw's own, see _gradient_is_exclusively_ours


cdef inline bint _gradient_is_exclusively_ours(object data, tuple grads) except -1:
    """Whether the raw gradient ``data``, just returned by an op's formula in
    ``grads``, is a buffer nobody else sees, which the gradient table may
    then add the node's other contributions into in place.

    The invariant: ``_feed_raw`` asks holding exactly three references to
    ``data``: its slot in ``grads``, the loop's ``g`` and the local ``data``
    (the same object). So a count of at most three means no one else holds
    it: not the op (retained data), not the caller (``gys``, for a passed-
    through output gradient), not the user. A reference added in
    ``_feed_raw`` makes every buffer look shared (only slower); one dropped
    makes a shared one look exclusive (a sum into someone else's array),
    which the debug checks (``XGRAD_DEBUG=1``) assert against. The array must
    also own its memory (the workspace arrays of xgrad/_backend/workspace.py
    are views, never taken) and be writeable (not a broadcast, not retained)."""
    cdef Py_ssize_t refs
    if type(data) is not _NUMPY_NDARRAY:
        return False
    refs = Py_REFCNT(data)
    if _debug.enabled:
        _debug.check_gradient_ownership(data, grads, refs, _OUR_REFERENCES)
    return (refs <= _OUR_REFERENCES
            and cnp.PyArray_CHKFLAGS(<cnp.ndarray>data, cnp.NPY_ARRAY_OWNDATA)
            and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>data))


cdef tuple _T0 = (0,)
cdef tuple _T1 = (1,)
cdef tuple _T01 = (0, 1)


cdef tuple _targets(FunctionNode fn, Py_ssize_t k, set sub_nodes):
    """Indexes of the inputs that need a gradient: those with a node on the
    graph (and, for grad(), inside the evaluated sub-graph)."""
    cdef Py_ssize_t i, n_in = fn._n_in
    cdef PyObject* p
    cdef bint has0, has1
    if n_in <= 2 and sub_nodes is None:
        has0 = in_edge(fn, k, 0) != NULL
        has1 = n_in == 2 and in_edge(fn, k, 1) != NULL
        if has0:
            return _T01 if has1 else _T0
        return _T1 if has1 else ()
    out = []
    for i in range(n_in):
        p = in_edge(fn, k, i)
        if p != NULL and (sub_nodes is None or <object>p in sub_nodes):
            out.append(i)
    return tuple(out)


cdef bint _meta_matches(ndarray g, ArrayNode node):
    """Whether ``g`` has the node's dtype, shape and device (fast checks first)."""
    cdef object data = g._data
    if g._device is not node.device:
        return False
    if type(data) is _NUMPY_NDARRAY:
        return raw_meta_matches(data, node)
    return data.dtype == node.dtype and data.shape == node.shape


_INCOMPATIBLE = ('{}(): incompatible function arguments. The following argument '
                 'types are supported:\n    1. (outputs, backprop_id=None, *, '
                 'enable_double_backprop=False, grad_outputs=None, '
                 'retain_grad=False, loss_scale=None) -> None\n\nInvoked with: {}')


def backward(*args, **kwargs):
    """backward(outputs, backprop_id=None, *, enable_double_backprop=False,
    grad_outputs=None, retain_grad=False, loss_scale=None)

    Backpropagate from ``outputs`` on one graph. Unlike ChainerX, takes
    ``grad_outputs``, honours ``retain_grad`` and ``loss_scale``, and leaves no
    gradient on outputs that are not grad-required. ``outputs`` is
    positional-only.

    The pass frees the graph it walks (as ChainerX does): a second
    ``backward`` or a ``grad`` over the same graph finds nothing and silently
    leaves every gradient as it is. To walk a graph twice, pass
    ``enable_double_backprop=True`` to the first pass, which keeps it (and
    records the gradient computation). See docs/recipes.md.
    """
    allowed = ('backprop_id', 'enable_double_backprop', 'grad_outputs',
               'retain_grad', 'loss_scale')
    if not 1 <= len(args) <= 2 or any(k not in allowed for k in kwargs) or (
            len(args) == 2 and 'backprop_id' in kwargs):
        raise TypeError(_INCOMPATIBLE.format(
            'backward', ', '.join([repr(a) for a in args] +
                                  ['{}={!r}'.format(k, v) for k, v in kwargs.items()])))
    backprop_id = args[1] if len(args) == 2 else kwargs.get('backprop_id')
    _backward(args[0], backprop_id, kwargs.get('enable_double_backprop', False),
              kwargs.get('grad_outputs'), kwargs.get('retain_grad', False),
              kwargs.get('loss_scale'))


cpdef _backward(outputs, backprop_id, bint double, grad_outputs, bint retain_grad,
                loss_scale):
    cdef tuple outs = _as_array_tuple(outputs, 'outputs')
    if not outs:
        return
    cdef BackpropId bp = _resolve_bp(backprop_id, _context_of(<ndarray>outs[0]))
    seeds = _check_seeds(grad_outputs, outs, 'grad_outputs')
    _BackwardPass(bp, double, retain_grad, loss_scale).run(outs, seeds, None)


def _backward_signature():
    import inspect
    P = inspect.Parameter
    return inspect.Signature(
        [P('outputs', P.POSITIONAL_ONLY), P('backprop_id', P.POSITIONAL_OR_KEYWORD, default=None)]
        + [P(name, P.KEYWORD_ONLY, default=default) for name, default in (
            ('enable_double_backprop', False), ('grad_outputs', None),
            ('retain_grad', False), ('loss_scale', None))])


# help(xgrad.backward) and inspect show the real parameters, not (*args, **kwargs).
backward.__signature__ = _backward_signature()


def grad(outputs, inputs, backprop_id=None, enable_double_backprop=False,
         set_grad=False, retain_grad=False, grad_outputs=None, grad_inputs=None,
         loss_scale=None):
    """Gradients of ``outputs`` (weighted by ``grad_outputs``) with respect to
    ``inputs``, returned without touching the inputs' gradients (unless
    ``set_grad``). ``grad_inputs`` are added to the results, as chainer.grad
    does. An input without a path from it to the outputs gets None.

    The pass frees the graph it walks unless ``enable_double_backprop=True``:
    a later ``grad`` or ``backward`` over that graph then returns None for
    every input, with no error. A Hessian computed row by row, for instance,
    needs ``enable_double_backprop=True`` on the gradient *and* on every
    row's ``grad``, or all rows after the first come back None::

        g, = xgrad.grad([y], [x], enable_double_backprop=True)
        rows = [xgrad.grad([g[i]], [x], enable_double_backprop=True)[0]
                for i in range(x.size)]

    See docs/recipes.md."""
    cdef tuple outs = _as_array_tuple(outputs, 'outputs')
    cdef tuple ins = _as_array_tuple(inputs, 'inputs')
    cdef ArrayNode node
    cdef BackpropId bp
    cdef list extras = None
    if grad_inputs is not None:
        extras = list(grad_inputs)
        if len(extras) != len(ins):
            raise GradientError('grad_inputs and inputs must have the same size: '
                                '{} grad_inputs for {} inputs'.format(
                                    len(extras), len(ins)))
        for i, extra in enumerate(extras):
            if extra is None:
                continue
            if not isinstance(extra, ndarray):
                raise TypeError('grad_inputs[{}] must be an xgrad.ndarray or None, '
                                'not {}'.format(i, type(extra).__name__))
            message = _gradient_mismatch(extra, (<ndarray>ins[i])._data.shape,
                                         (<ndarray>ins[i])._data.dtype,
                                         (<ndarray>ins[i])._device)
            if message is not None:
                raise GradientError('{} (in grad_inputs[{}], for input {})'.format(
                    message, i, i))
    if not ins:
        return []
    if outs:
        bp = _resolve_bp(backprop_id, _context_of(<ndarray>outs[0]))
        seeds = _check_seeds(grad_outputs, outs, 'grad_outputs')
        in_nodes = [(<ndarray>x)._node_on(bp) for x in ins]
        results = _BackwardPass(bp, enable_double_backprop, retain_grad,
                                loss_scale).run(outs, seeds, in_nodes)
        grads = [None if n is None else results.get(n) for n in in_nodes]
    else:
        bp = None
        in_nodes = [None] * len(ins)
        grads = [None] * len(ins)
    if extras is not None:
        for i, extra in enumerate(extras):
            if extra is None:
                continue
            if grads[i] is None:
                grads[i] = extra
            else:
                grads[i] = _OPS.add(grads[i], extra)
    if set_grad:
        for i, g in enumerate(grads):
            if g is not None and in_nodes[i] is not None:
                (<ndarray>ins[i]).set_grad(g, bp)
                _run_post_hooks(<ArrayNode>in_nodes[i])
    return grads


_install_backward(_backward)  # what ndarray.backward calls
