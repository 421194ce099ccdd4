# cython: language_level=3
"""The op protocol (``FunctionNode``) and recording: ``apply`` runs an op's
forward on raw arrays and ``_link`` records it, one op node per enabled graph
its inputs live on; ``_function_node_forward`` grafts an op computed
elsewhere (ChainerX's entry point for Chainer's FunctionNode.apply).
"""

cimport cython
from cpython.ref cimport PyObject, Py_INCREF
cimport numpy as cnp

from xgrad._context cimport (
    BackpropId, Context, _ThreadState, _default_device, is_enabled)
from xgrad._graph cimport (
    ArrayNode, OpNode, alloc_edges, set_in_edge, set_out_edge)
from xgrad._array cimport ndarray, _wrap, _has_float_data, _as_raw_array
from xgrad._op_hooks cimport _op_scope_state, forward_hooks_pre, forward_hooks_post

import numpy

from xgrad._errors import DeviceError, XgradError
from xgrad._errors import NotImplementedError as XgradNotImplementedError
from xgrad._errors import IndexError as XgradIndexError
from xgrad import _device as _device_module

cnp.import_array()
cdef object _NUMPY_NDARRAY = numpy.ndarray


@cython.no_gc
cdef class FunctionNode(OpNode):
    """An operation: ``forward`` on raw arrays, ``backward`` on xgrad arrays.

    Subclass it and define ``forward(self, inputs)`` (a tuple of NumPy arrays
    in, a tuple out) and ``backward(self, target_input_indexes, grad_outputs)``
    (xgrad arrays or None in, one xgrad array or None per target out).
    Because ``backward`` is written with xgrad ops, it is itself recorded when
    double backprop asks for it. Call ``retain_inputs`` / ``retain_outputs``
    in ``forward`` for what ``backward`` needs, and read them back with
    ``get_retained_inputs`` / ``get_retained_outputs``.

    One instance is one application: ``node.apply(inputs)`` once. The instance
    is the graph's op node (``OpNode``) for every graph it is recorded on.
    """

    @property
    def name(self):
        return getattr(type(self), 'op_name', type(self).__name__)

    def retain_inputs(self, indexes):
        self._retain_in_idx = tuple(indexes)

    def retain_outputs(self, indexes):
        self._retain_out_idx = tuple(indexes)

    def get_retained_inputs(self):
        if self._bw_inputs is None:
            raise XgradError('get_retained_inputs() is available only inside '
                             'backward, for inputs retained in forward.')
        return self._bw_inputs

    def get_retained_outputs(self):
        if self._bw_outputs is None:
            raise XgradError('get_retained_outputs() is available only inside '
                             'backward, for outputs retained in forward.')
        return self._bw_outputs

    cpdef forward(self, inputs):
        raise XgradNotImplementedError(
            '{} does not define forward'.format(type(self).__name__))

    cpdef backward(self, target_input_indexes, grad_outputs):
        raise XgradNotImplementedError(
            '{} does not define backward'.format(type(self).__name__))

    cdef object _backward_raw(self, tuple targets, tuple grad_outputs,
                              tuple xs, tuple ys):
        """Fast path on raw arrays when nothing can be recorded; None: no fast path."""
        return None

    cdef object _forward1(self, object x):
        """One input, one output: built-in ops override this to skip tuples."""
        y = self.forward((x,))
        return (<tuple>y)[0] if type(y) is tuple else y

    cdef object _forward2(self, object a, object b):
        y = self.forward((a, b))
        return (<tuple>y)[0] if type(y) is tuple else y

    cdef bint _formula_only(self):
        """Whether backward only computes with the retained arrays it is
        given and keeps none, so double backprop may hand it the arrays
        themselves instead of views (True for xgrad's own ops, see Op)."""
        return False

    def apply(self, inputs):
        """Run forward on ``inputs`` (xgrad arrays) and record the op."""
        return apply(self, inputs)


cdef inline object _check_array(object x, Py_ssize_t index):
    if not isinstance(x, ndarray):
        raise TypeError('Input {} must be an xgrad.ndarray, not {}'.format(
            index, type(x).__name__))
    return x


cdef tuple _normalize_outputs(object out, FunctionNode fn):
    if isinstance(out, tuple):
        return <tuple>out
    if isinstance(out, list):
        return tuple(out)
    if out is None:
        raise TypeError('{}.forward must return a tuple of arrays'.format(fn.name))
    return (out,)


cdef tuple _collect_graphs(tuple xs):
    """The enabled graphs that some input has a node on (None if none). The
    common one-graph answer is the ID's own 1-tuple: no allocation per op."""
    cdef BackpropId first = None   # the first enabled graph found
    cdef list more = None          # the others, in order, when there are
    cdef ArrayNode node
    cdef BackpropId bp
    cdef ndarray x
    cdef bint seen, pruned
    for obj in xs:
        if obj is None:
            continue
        x = <ndarray>obj
        if x._nodes is None:
            continue
        pruned = False
        for node in x._nodes:
            bp = node.backprop_id
            if bp._released:
                pruned = True
                continue
            if bp is first:
                continue
            if first is None:
                if is_enabled(bp):
                    first = bp
                continue
            seen = False
            if more is not None:
                for b in more:
                    if b is bp:
                        seen = True
                        break
            if not seen and is_enabled(bp):
                if more is None:
                    more = []
                more.append(bp)
        if pruned:
            x._prune_released()
    if first is None:
        return None
    if more is None:
        return first._solo if first._solo is not None else (first,)
    return (first,) + tuple(more)


cdef extern from "Python.h":
    # No exception check: an overflow is seen as -1 plus PyErr_Occurred().
    Py_ssize_t _long_as_ssize "PyLong_AsSsize_t"(object) noexcept
    bint _long_check_exact "PyLong_CheckExact"(object) noexcept
    PyObject* _err_occurred "PyErr_Occurred"() noexcept  # a borrowed reference
    void _err_clear "PyErr_Clear"() noexcept


cdef inline bint _indexes_in_range(tuple indexes, Py_ssize_t n) noexcept:
    """Whether every index is a plain int in [0, n): the check of every op
    that retains arrays, at C speed."""
    cdef Py_ssize_t i, v
    for i in range(len(indexes)):
        idx = indexes[i]
        if not _long_check_exact(idx):
            return False
        v = _long_as_ssize(idx)
        if v == -1 and _err_occurred() != NULL:
            _err_clear()
            return False
        if v < 0 or v >= n:
            return False
    return True


cdef tuple _checked_indexes(tuple indexes, Py_ssize_t n, FunctionNode fn,
                            str what):
    """Retained ``indexes`` as non-negative positions among ``n`` arrays
    (negative ones count from the end, as Python's do); an XgradIndexError
    naming the first bad one. Checked before anything is recorded."""
    cdef list out = None
    cdef Py_ssize_t i, j
    for i in range(len(indexes)):
        idx = indexes[i]
        if isinstance(idx, bool) or not isinstance(idx, (int, numpy.integer)):
            raise TypeError('{}.retain_{}(): index {!r} is not an integer'.format(
                fn.name, what, idx))
        if not -n <= idx < n:
            raise XgradIndexError(
                '{}.retain_{}(): index {} is out of range for {} {}'.format(
                    fn.name, what, idx, n, what))
        if idx < 0 or type(idx) is not int:
            if out is None:
                out = list(indexes)
            out[i] = int(idx) + n if idx < 0 else int(idx)
    return indexes if out is None else tuple(out)


cdef void _link(FunctionNode fn, tuple xs, tuple outs, object device) except *:
    """Record ``fn`` on every enabled graph its inputs live on."""
    if fn._retain_in_idx and not _indexes_in_range(fn._retain_in_idx, len(xs)):
        fn._retain_in_idx = _checked_indexes(fn._retain_in_idx, len(xs), fn, 'inputs')
    if fn._retain_out_idx and not _indexes_in_range(fn._retain_out_idx, len(outs)):
        fn._retain_out_idx = _checked_indexes(fn._retain_out_idx, len(outs), fn,
                                              'outputs')
    cdef tuple graphs = _collect_graphs(xs)
    cdef Py_ssize_t k, i, j, n_graphs, n_in, n_out, rank
    cdef ArrayNode node, like
    cdef ndarray out
    cdef BackpropId bp
    cdef bint any_float = False
    if graphs is None:
        return
    for o in outs:
        if o is not None and _has_float_data((<ndarray>o)._data):
            any_float = True
            break
    if not any_float:
        return
    n_graphs = len(graphs)
    n_in = len(xs)
    n_out = len(outs)
    alloc_edges(fn, graphs, n_in, n_out)
    fn._device = device
    for k in range(n_graphs):
        bp = <BackpropId>graphs[k]
        rank = 0
        like = None
        for i in range(n_in):
            x = xs[i]
            if x is None:
                continue
            node = (<ndarray>x)._node_on(bp)
            if node is None:
                continue
            Py_INCREF(node)
            set_in_edge(fn, k, i, <PyObject*>node)
            if node.rank >= rank:
                rank = node.rank + 1
            if like is None:
                like = node
        fn._ranks[k] = rank
        fn._chained[k] = 1
        for j in range(n_out):
            o = outs[j]
            if o is not None and _has_float_data((<ndarray>o)._data):
                node = (<ndarray>o)._add_node(bp, fn, rank, <int>k, <int>j, like)
                set_out_edge(fn, k, j, <PyObject*>node)
    if n_graphs > 1:
        ctx = (<BackpropId>graphs[0]).context
        for k in range(n_graphs):
            for j in range(k + 1, n_graphs):
                (<Context>ctx)._connect(graphs[k], graphs[j])
    if fn._retain_in_idx:
        # The data, not the arrays: an op holding its input arrays would close
        # a cycle array -> gradient -> (double-backprop graph) -> op -> array.
        fn._retained_in_data = tuple([
            None if xs[i] is None else (<ndarray>xs[i])._data
            for i in fn._retain_in_idx])
    if fn._retain_out_idx:
        fn._retained_out_data = tuple([
            None if outs[j] is None else (<ndarray>outs[j])._data
            for j in fn._retain_out_idx])


cdef object _common_device(tuple xs):
    cdef object device = None
    cdef Py_ssize_t i
    for i in range(len(xs)):
        x = xs[i]
        if x is None:
            continue
        _check_array(x, i)
        if device is None:
            device = (<ndarray>x)._device
        elif (<ndarray>x)._device is not device:
            raise DeviceError('Operands are on different devices: {} and {}'.format(
                device.name, (<ndarray>x)._device.name))
    return device if device is not None else _default_device()


cpdef tuple apply(FunctionNode fn, inputs):
    """Run ``fn`` forward on ``inputs`` and record it; returns the outputs."""
    cdef tuple xs = tuple(inputs)
    cdef object device
    if fn._applied:
        raise XgradError('{} has already been applied; a FunctionNode is one '
                         'application'.format(fn.name))
    device = _common_device(xs)
    cdef _ThreadState st = _op_scope_state()
    if st is not None:
        forward_hooks_pre(st, fn, xs)
    raw = tuple([None if x is None else (<ndarray>x)._data for x in xs])
    cdef tuple out_raw
    if device.is_native:
        out_raw = _normalize_outputs(fn.forward(raw), fn)
    else:  # kernels launch, and memory is allocated, on the inputs' GPU
        with device.scope():
            out_raw = _normalize_outputs(fn.forward(raw), fn)
    for j, o in enumerate(out_raw):
        if o is not None and not (isinstance(o, (_NUMPY_NDARRAY, numpy.generic))
                                  or _device_module._is_cuda_array(o)):
            raise TypeError('{}.forward returned a {} as output {}; outputs must '
                            'be NumPy (or CuPy) arrays, or None'.format(
                                fn.name, type(o).__name__, j))
    fn._applied = True
    cdef tuple outs = tuple([None if o is None else _wrap(_as_raw_array(o), device)
                             for o in out_raw])
    _link(fn, xs, outs, device)
    if st is not None:
        forward_hooks_post(st, fn, xs, outs)
    return outs


cpdef ndarray apply_to_device(FunctionNode fn, ndarray x, object device):
    """``apply`` for one input and one output, the output on ``device``
    (gradients flow back to ``x``'s device), without the tuple plumbing."""
    cdef object y
    cdef _ThreadState st = _op_scope_state()
    if st is not None:
        forward_hooks_pre(st, fn, (x,))
    if type(x._data) is _NUMPY_NDARRAY:
        y = fn._forward1(x._data)
    else:
        with x._device.scope():  # on x's GPU (see apply)
            y = fn._forward1(x._data)
    if type(y) is not _NUMPY_NDARRAY:
        y = _as_raw_array(y)
    cdef ndarray out = _wrap(y, device)
    fn._applied = True
    if x._nodes is not None:
        _link(fn, (x,), (out,), x._device)
    if st is not None:
        forward_hooks_post(st, fn, (x,), (out,))
    return out


cdef ndarray apply1(FunctionNode fn, ndarray x):
    """``apply`` for one input and one output."""
    return apply_to_device(fn, x, x._device)


cdef ndarray apply2(FunctionNode fn, ndarray a, ndarray b):
    """``apply`` for two inputs and one output."""
    if a._device is not b._device:
        raise DeviceError('Operands are on different devices: {} and {}'.format(
            a._device.name, b._device.name))
    cdef object y
    cdef _ThreadState st = _op_scope_state()
    if st is not None:
        forward_hooks_pre(st, fn, (a, b))
    if type(a._data) is _NUMPY_NDARRAY:
        y = fn._forward2(a._data, b._data)
    else:
        with a._device.scope():  # on the operands' GPU (see apply)
            y = fn._forward2(a._data, b._data)
    if type(y) is not _NUMPY_NDARRAY:
        y = _as_raw_array(y)
    cdef ndarray out = _wrap(y, a._device)
    fn._applied = True
    if a._nodes is not None or b._nodes is not None:
        _link(fn, (a, b), (out,), a._device)
    if st is not None:
        forward_hooks_post(st, fn, (a, b), (out,))
    return out


# ---------------------------------------------------------------------------
# The ChainerX entry point for Python-defined function nodes
# ---------------------------------------------------------------------------

cdef class _ChainerFunction(FunctionNode):
    """Adapts a Chainer FunctionNode grafted by ``_function_node_forward``."""
    op_name = 'chainer_function'
    cdef object function_node

    cpdef backward(self, target_input_indexes, grad_outputs):
        retained_in = self._bw_inputs if self._bw_inputs is not None else ()
        retained_out = self._bw_outputs if self._bw_outputs is not None else ()
        grads = self.function_node._backward_chainerx(
            list(target_input_indexes), list(grad_outputs),
            list(retained_in), list(retained_out))
        return tuple(grads)


def _function_node_forward(function_node, inputs, outputs,
                           input_indexes_to_retain, output_indexes_to_retain):
    """Graft an op whose outputs were computed elsewhere (ChainerX's hook for
    Chainer's FunctionNode.apply). ``inputs``/``outputs`` may hold None."""
    cdef _ChainerFunction fn = _ChainerFunction.__new__(_ChainerFunction)
    cdef tuple xs = tuple(inputs)
    cdef tuple outs = tuple(outputs)
    for idx in (input_indexes_to_retain, output_indexes_to_retain):
        if list(idx) != sorted(set(idx)):
            raise XgradError('Retained indexes must be strictly increasing.')
    if any(i < 0 or i >= len(xs) for i in input_indexes_to_retain) or any(
            j < 0 or j >= len(outs) for j in output_indexes_to_retain):
        raise XgradError('Retained index out of range.')
    for o in outs:
        if o is not None and (<ndarray>_check_array(o, 0))._nodes:
            raise XgradError('Outputs of a grafted function must not be in a graph.')
    fn.function_node = function_node
    fn._retain_in_idx = tuple(input_indexes_to_retain)
    fn._retain_out_idx = tuple(output_indexes_to_retain)
    fn._applied = True
    device = _common_device(xs + outs)
    # Chainer ran the forward before this call: the op's hooks see it here.
    cdef _ThreadState st = _op_scope_state()
    if st is not None:
        forward_hooks_pre(st, fn, xs)
    _link(fn, xs, outs, device)
    if st is not None:
        forward_hooks_post(st, fn, xs, outs)
