# cython: language_level=3
"""The graph engine: backprop IDs, backprop modes, arrays and their nodes,
function nodes, and the backward pass.

Ownership has no cycles (see docs/architecture in the design notes):

    ndarray --owns--> ArrayNode (one per graph) --owns--> creator FunctionNode
    FunctionNode --owns--> its input ArrayNodes and the inputs it retained
    FunctionNode ..raw pointer..> its output ArrayNodes (cleared when they die)
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
"""

cimport cython
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF, Py_REFCNT

from cpython.dict cimport PyDict_GetItem
from libcpp.algorithm cimport push_heap, pop_heap
from libcpp.utility cimport pair
from libcpp.vector cimport vector

ctypedef long long _HeapKey
ctypedef pair[_HeapKey, PyObject*] _HeapItem
cimport numpy as cnp

from xgrad._backend cimport native_kernels
from xgrad._dtypes cimport check_inplace, inplace_casts

import heapq
import math
import operator
import threading

import numpy

cnp.import_array()
cdef object _NUMPY_NDARRAY = numpy.ndarray

from xgrad._errors import (
    BackpropModeError, ContextError, DeviceError, DimensionError, DtypeError,
    GradientError, XgradError)
from xgrad._errors import NotImplementedError as XgradNotImplementedError
from xgrad._errors import IndexError as XgradIndexError
from xgrad import _device as _device_module

# NumPy < 2 promotes 0-d arrays by value (NEP 50 came with NumPy 2).
_NUMPY1_SCALAR_PROMOTION = int(numpy.__version__.split('.')[0]) < 2


# The op library registers itself here (xgrad/__init__.py), so that ndarray
# methods and the backward pass can call ops without a circular import.
cdef object _OPS = None


def _install_ops(ops):
    global _OPS
    _OPS = ops


# ---------------------------------------------------------------------------
# Contexts and backprop IDs
# ---------------------------------------------------------------------------

cdef class Context:
    """Owns backprop IDs (graphs), their connections, and the devices.

    Ordinals are handed out in creation order and never reused: a lower
    ordinal is an *outer* graph. Ordinal 0 is the default graph.
    """

    def __init__(self):
        self._backends = {}
        self._devices = {}
        self._next_ordinal = 0
        self._alive_ids = {}
        self._connections = set()
        self._prohibited_by = {}
        self._default_id = self.make_backprop_id('<default>')

    def make_backprop_id(self, str backprop_name):
        cdef BackpropId bp = BackpropId.__new__(BackpropId)
        bp._solo = (bp,)  # a cycle until release, like context <-> ID
        bp.context = self
        bp.ordinal = self._next_ordinal
        bp._name = backprop_name
        self._next_ordinal += 1
        self._alive_ids[bp.ordinal] = bp
        return bp

    def release_backprop_id(self, backprop_id):
        if backprop_id is None:
            backprop_id = self._default_id
        if not isinstance(backprop_id, BackpropId):
            raise TypeError('release_backprop_id(): incompatible function '
                            'arguments: expected a BackpropId, not {}'.format(
                                type(backprop_id).__name__))
        cdef BackpropId bp = <BackpropId>backprop_id
        self._check_valid_backprop_id(bp)
        if bp.ordinal == 0:
            raise XgradError('The default backprop ID cannot be released.')
        bp._released = True
        bp._solo = None
        del self._alive_ids[bp.ordinal]
        ordinal = bp.ordinal
        self._connections = {c for c in self._connections if ordinal not in c}
        self._prohibited_by.pop(ordinal, None)

    def _check_valid_backprop_id(self, BackpropId backprop_id not None):
        if (backprop_id.context is not self or backprop_id._released
                or self._alive_ids.get(backprop_id.ordinal) is not backprop_id):
            raise XgradError('Invalid backprop ID, maybe already expired: {}'
                             .format(backprop_id.name))

    def get_backend(self, str name):
        return _device_module._get_backend(self, name)

    def get_device(self, device, index=None):
        return _device_module.parse_device(self, device, index)

    cdef void _connect(self, BackpropId a, BackpropId b):
        if a is b or a._released or b._released:
            return
        if a.ordinal < b.ordinal:
            self._connections.add((a.ordinal, b.ordinal))
        else:
            self._connections.add((b.ordinal, a.ordinal))

    cdef list _inner_connected(self, BackpropId bp):
        """The alive graphs connected to ``bp`` and inner to it."""
        cdef list inner = []
        if not self._connections:
            return inner
        for low, high in self._connections:
            if low == bp.ordinal:
                inner.append(self._alive_ids[high])
        return inner

    cdef void _check_backprop_allowed(self, BackpropId bp) except *:
        if bp._released or self._alive_ids.get(bp.ordinal) is not bp:
            raise XgradError('Backprop ID not found: {}'.format(bp.name))
        prohibitor = self._prohibited_by.get(bp.ordinal)
        if prohibitor is not None:
            raise XgradError(
                "Cannot backward for backprop ID '{}' because an connected "
                "backprop ID '{}' which has been created earlier, has already "
                "been backpropped.".format(bp.name, prohibitor.name))

    def _mark_backpropped(self, BackpropId bp):
        for inner in self._inner_connected(bp):
            self._prohibited_by.setdefault(inner.ordinal, bp)


cdef class BackpropId:
    """Names one computational graph of a context.

    IDs compare by identity; ``<`` and friends order them outer-to-inner.
    """

    def __init__(self):
        raise TypeError('BackpropId cannot be created directly; use '
                        'Context.make_backprop_id or backprop_scope')

    @property
    def name(self):
        return '<expired>' if self._released else self._name

    def __repr__(self):
        return self.name

    cdef Py_ssize_t _ordinal_against(self, other) except? -1:
        if not isinstance(other, BackpropId):
            raise TypeError('cannot compare BackpropId with {}'.format(
                type(other).__name__))
        if (<BackpropId>other).context is not self.context:
            raise ContextError('Cannot compare backprop IDs of different '
                               'contexts: {} and {}'.format(self, other))
        return (<BackpropId>other).ordinal

    def __lt__(self, other):
        return self.ordinal < self._ordinal_against(other)

    def __le__(self, other):
        return self.ordinal <= self._ordinal_against(other)

    def __gt__(self, other):
        return self.ordinal > self._ordinal_against(other)

    def __ge__(self, other):
        return self.ordinal >= self._ordinal_against(other)

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return id(self)


class AnyGraph:
    """The type of ``xgrad.anygraph``: 'on any graph' for is_backprop_required."""

    def __repr__(self):
        return 'anygraph'


anygraph = AnyGraph()

cdef Context _global_default_context = Context()


# ---------------------------------------------------------------------------
# Thread-local state: backprop modes, default context, default device
# ---------------------------------------------------------------------------

@cython.final
cdef class _ModeEntry:
    """One entry of the mode stack: ``enable`` applies to ``ids`` (or to
    every graph of ``context`` when ``ids`` is None)."""
    cdef bint enable
    cdef Context context
    cdef tuple ids


@cython.final
cdef class _ThreadState:
    cdef list modes
    cdef object default_device
    cdef Context default_context
    cdef bint has_context

    def __init__(self):
        self.modes = []


cdef object _tls = threading.local()
# Mode entries pushed in all threads together: while it is 0 (the common
# case) every graph is enabled and is_enabled need not look at thread state.
cdef Py_ssize_t _active_mode_entries = 0


cdef _ThreadState _state():
    try:
        return <_ThreadState>_tls.state
    except AttributeError:
        st = _tls.state = _ThreadState()
        return <_ThreadState>st


cdef void _push_mode(_ThreadState st, _ModeEntry entry):
    global _active_mode_entries
    st.modes.append(entry)
    _active_mode_entries += 1


cdef void _pop_mode(_ThreadState st, _ModeEntry entry) except *:
    global _active_mode_entries
    cdef list modes = st.modes
    if modes and modes[-1] is entry:
        modes.pop()
    else:
        for i in range(len(modes)):
            if modes[i] is entry:
                del modes[i]
                break
        else:
            raise BackpropModeError(
                'A backprop mode scope was exited in a thread that did not '
                'enter it (or exited twice); modes are per thread.')
    _active_mode_entries -= 1


cdef bint is_enabled(BackpropId bp):
    """Whether backprop is enabled for ``bp`` in this thread (modes only)."""
    if _active_mode_entries == 0:
        return True
    cdef list modes = _state().modes
    cdef Py_ssize_t i
    cdef _ModeEntry e
    if not modes:
        return True
    for i in range(len(modes) - 1, -1, -1):
        e = <_ModeEntry>modes[i]
        if e.ids is None:
            if e.context is bp.context:
                return e.enable
        else:
            for b in e.ids:
                if b is bp:
                    return e.enable
    return True


def get_default_context():
    cdef _ThreadState st = _state()
    if st.has_context:
        if st.default_context is None:
            raise ContextError('No default context is set in this thread.')
        return st.default_context
    return _global_default_context


def set_default_context(context):
    if context is not None and not isinstance(context, Context):
        raise TypeError('context must be a Context or None')
    cdef _ThreadState st = _state()
    st.has_context = True
    st.default_context = context


class context_scope:
    """``with xgrad.context_scope(ctx):`` makes ``ctx`` this thread's default."""

    def __init__(self, context):
        if not isinstance(context, Context):
            raise TypeError('context must be a Context')
        self._context = context

    def __enter__(self):
        cdef _ThreadState st = _state()
        self._saved = (st.has_context, st.default_context)
        st.has_context = True
        st.default_context = self._context
        return self._context

    def __exit__(self, *exc):
        cdef _ThreadState st = _state()
        st.has_context, st.default_context = self._saved


cdef object _default_device():
    cdef _ThreadState st = _state()
    if st.default_device is None:
        return get_default_context().get_device('native:0')
    return st.default_device


def get_default_device():
    return _default_device()


def set_default_device(device):
    _state().default_device = _device_module.parse_device(
        get_default_context(), device)


class using_device:
    """``with xgrad.using_device('native:1'):`` sets this thread's default device."""

    def __init__(self, device, index=None):
        self._device = _device_module.parse_device(
            get_default_context(), device, index)

    def __enter__(self):
        cdef _ThreadState st = _state()
        self._saved = st.default_device
        self._scope = self._device.scope()  # a GPU becomes CuPy's current device
        self._scope.__enter__()
        st.default_device = self._device
        return self._device

    def __exit__(self, *exc):
        _state().default_device = self._saved
        self._scope.__exit__(*exc)


cdef object _resolve_device(device):
    if device is None:
        return _default_device()
    return _device_module.parse_device(get_default_context(), device)


cdef _ModeEntry _make_mode_entry(bint enable, arg, context):
    """Build the stack entry for no/force_backprop_mode; None for a no-op."""
    cdef _ModeEntry e = _ModeEntry.__new__(_ModeEntry)
    e.enable = enable
    if arg is None or isinstance(arg, Context):
        if arg is not None and context is not None:
            raise TypeError('give the context once, positionally or as context=')
        ctx = arg if arg is not None else context
        if ctx is None:
            ctx = get_default_context()
        elif not isinstance(ctx, Context):
            raise TypeError('context must be a Context, not {}'.format(
                type(ctx).__name__))
        e.context = ctx
        e.ids = None
        return e
    if isinstance(arg, BackpropId):
        ids = (arg,)
    elif isinstance(arg, (list, tuple)):
        ids = tuple(arg)
        for b in ids:
            if not isinstance(b, BackpropId):
                raise TypeError('backprop IDs must be BackpropId, not {}'.format(
                    type(b).__name__))
        if not ids:
            return None
        for b in ids:
            if (<BackpropId>b).context is not (<BackpropId>ids[0]).context:
                raise ContextError('Backprop IDs of different contexts cannot be '
                                   'used in one backprop mode scope.')
    else:
        raise TypeError('expected a BackpropId, a sequence of them or a Context, '
                        'not {}'.format(type(arg).__name__))
    e.context = (<BackpropId>ids[0]).context
    e.ids = ids
    return e


cdef class _BackpropModeScope:
    cdef _ModeEntry entry

    def __enter__(self):
        if self.entry is not None:
            _push_mode(_state(), self.entry)

    def __exit__(self, *exc):
        if self.entry is not None:
            _pop_mode(_state(), self.entry)


def no_backprop_mode(arg=None, context=None):
    """Disable recording for one graph, several, or every graph of a context."""
    cdef _BackpropModeScope s = _BackpropModeScope.__new__(_BackpropModeScope)
    s.entry = _make_mode_entry(False, arg, context)
    return s


def force_backprop_mode(arg=None, context=None):
    """Re-enable recording inside ``no_backprop_mode`` (same arguments)."""
    cdef _BackpropModeScope s = _BackpropModeScope.__new__(_BackpropModeScope)
    s.entry = _make_mode_entry(True, arg, context)
    return s


def is_backprop_required(backprop_id=None, context=None):
    """Whether ops would record on ``backprop_id`` (default: the context's
    default graph) in this thread now."""
    if backprop_id is not None:
        if isinstance(backprop_id, Context) and context is None:
            return is_enabled((<Context>backprop_id)._default_id)
        if not isinstance(backprop_id, BackpropId):
            raise TypeError('is_backprop_required(): incompatible function '
                            'arguments: backprop_id must be a BackpropId, not {}'
                            .format(type(backprop_id).__name__))
        return is_enabled(backprop_id)
    if context is None:
        context = get_default_context()
    elif not isinstance(context, Context):
        raise TypeError('is_backprop_required(): incompatible function '
                        'arguments: context must be a Context, not {}'.format(
                            type(context).__name__))
    return is_enabled((<Context>context)._default_id)


class backprop_scope:
    """``with xgrad.backprop_scope('name') as bp:`` makes a new graph for the
    block and releases it at the end."""

    def __init__(self, backprop_name, context=None):
        if not isinstance(backprop_name, str):
            raise TypeError('backprop_name must be a str')
        if context is not None and not isinstance(context, Context):
            raise TypeError('context must be a Context or None')
        self._name = backprop_name
        self._context = context
        self._state = 'new'
        self._bp = None

    def __enter__(self):
        if self._state == 'entered':
            raise XgradError('Backprop scope cannot be nested.')
        if self._state == 'exited':
            raise XgradError('Exited backprop scope cannot be reused.')
        ctx = self._context if self._context is not None else get_default_context()
        self._bp = ctx.make_backprop_id(self._name)
        self._state = 'entered'
        return self._bp

    def __exit__(self, *exc):
        self._state = 'exited'
        try:
            self._bp.context.release_backprop_id(self._bp)
        except XgradError:
            pass


cdef BackpropId _resolve_bp(backprop_id, Context context):
    if backprop_id is None:
        return context._default_id
    if isinstance(backprop_id, BackpropId):
        return <BackpropId>backprop_id
    raise TypeError('incompatible function arguments: backprop_id must be a '
                    'BackpropId or None, not {!r}'.format(backprop_id))


cdef inline Context _context_of(ndarray a):
    return <Context>a._device.context


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
    static thread_local int xgrad_draining = 0;
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
        cdef FunctionNode creator = self.creator
        cdef Py_ssize_t pos
        if creator is not None and creator._out_nodes != NULL:
            pos = self.graph_index * creator._n_out + self.out_index
            if creator._out_nodes[pos] == <PyObject*>self:
                creator._out_nodes[pos] = NULL

    def __repr__(self):
        return '<ArrayNode shape={} dtype={} rank={} backprop_id={}>'.format(
            self.shape, self.dtype, self.rank, self.backprop_id)


cdef inline bint _has_float_data(object data):
    """Whether raw array ``data`` holds floats (C-level check for NumPy)."""
    if type(data) is _NUMPY_NDARRAY:
        return cnp.PyArray_ISFLOAT(<cnp.ndarray>data)
    return data.dtype.kind == 'f'


cdef inline object _as_raw_array(object g):
    """NumPy returns scalars from 0-d operations; keep arrays arrays."""
    if type(g) is _NUMPY_NDARRAY:
        return g
    if isinstance(g, numpy.generic):
        return numpy.asarray(g)
    return g


# How many xgrad arrays exist (all threads): what a leak check compares.
cdef Py_ssize_t _live_arrays = 0


def _live_array_count():
    """The number of xgrad arrays alive now (xgrad.testing's leak check)."""
    return _live_arrays


cdef object _native_byte_order(object data):
    """Non-native (e.g. big-endian '>f4') NumPy data as a native-order copy:
    the kernels read raw memory by type number, so every xgrad array's data
    is in the machine's byte order."""
    return data.astype(data.dtype.newbyteorder('='))


# The last device whose attributes the hot path asked for, and those
# attributes: devices are singletons whose ``is_native`` and ``ns`` never
# change, and the backward loop asks once per op.
cdef object _known_device = None
cdef bint _known_is_native = False
cdef object _known_ns = None


cdef int _learn_device(object device) except -1:
    global _known_device, _known_is_native, _known_ns
    is_native = device.is_native
    ns = device.ns
    # (no other thread runs between these three assignments)
    _known_is_native = is_native
    _known_ns = ns
    _known_device = device
    return 0


cdef inline bint _is_native(object device) except -1:
    """``device.is_native``, for the last device asked about at C speed."""
    if device is not _known_device:
        _learn_device(device)
    return _known_is_native


cdef object device_ns(object device):
    """``device.ns`` (NumPy, or CuPy for a cuda device), for the last device
    asked about at C speed: the namespace of the backward fast path."""
    if device is not _known_device:
        _learn_device(device)
    return _known_ns


# NumPy's built-in dtype objects by type number (bool and the numbers: the
# dtypes xgrad arrays hold), for a pointer comparison in _wrap.
cdef PyObject* _BUILTIN_DTYPES[32]
cdef list _builtin_dtypes = []  # (their references)


cdef void _find_builtin_dtypes():
    cdef object dtype
    cdef int type_num
    for type_num in range(32):
        _BUILTIN_DTYPES[type_num] = NULL
        if cnp.PyTypeNum_ISNUMBER(type_num):
            dtype = cnp.PyArray_DescrFromType(type_num)
            _builtin_dtypes.append(dtype)
            _BUILTIN_DTYPES[type_num] = <PyObject*>dtype


_find_builtin_dtypes()


cdef inline object _canonical_dtype(object data):
    """NumPy data whose dtype equals a built-in dtype but is another object
    (``dtype('float16').newbyteorder('=')``, a dtype with metadata) as a view
    with the built-in one: ChainerX's dtypes are an enum, and code that picks
    a path by dtype identity (fast checks of ``a.dtype is b.dtype``) must see
    one object per dtype, or equal inputs take different paths."""
    cdef int type_num = cnp.PyArray_TYPE(<cnp.ndarray>data)
    if type_num >= 32 or _BUILTIN_DTYPES[type_num] == NULL:
        return data  # (not bool or a number: left to the dtype checks)
    if <PyObject*>cnp.PyArray_DESCR(<cnp.ndarray>data) == _BUILTIN_DTYPES[type_num]:
        return data
    return data.view(<object>_BUILTIN_DTYPES[type_num])


cdef ndarray _wrap(object data, object device):
    cdef ndarray a = ndarray.__new__(ndarray)
    if cnp.PyArray_Check(data):
        if not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>data):
            data = _native_byte_order(data)
        data = _canonical_dtype(data)
    a._data = data
    a._device = device
    return a


cdef str _dtype_name(dtype):
    return numpy.dtype(dtype).name


# ---------------------------------------------------------------------------
# ndarray
# ---------------------------------------------------------------------------

def _gradient_mismatch(ndarray g, object shape, object dtype, object device):
    """The GradientError message for ``g`` against the expected meta, or None."""
    if not isinstance(g, ndarray):
        return 'Gradient must be an xgrad.ndarray, not {}.'.format(
            type(g).__name__)
    if g._data.dtype != dtype:
        return 'Gradient dtypes do not match. Expected: {} Actual: {}.'.format(
            _dtype_name(dtype), _dtype_name(g._data.dtype))
    if g._data.shape != shape:
        return 'Gradient shapes do not match. Expected: {} Actual: {}.'.format(
            shape, g._data.shape)
    if g._device is not device:
        return 'Gradient devices do not match. Expected: {} Actual: {}.'.format(
            device.name, g._device.name)
    return None


cdef inline bint _known_operand(object other):
    """Whether ndarray's operators take ``other`` (arrays, array-likes and
    scalars). For any other type they return NotImplemented, so that Python
    tries the other operand's reflected method (e.g. Chainer's
    ``Variable.__radd__``)."""
    cdef type t = type(other)
    if t is ndarray or t is float or t is int:  # the hot path: no tuple isinstance
        return True
    return isinstance(other, _OPERAND_TYPES)


# The types _known_operand takes beyond the three exact ones it checks first
# (looked up once, not per operator call).
cdef tuple _OPERAND_TYPES = (ndarray, int, float, complex, numpy.generic, numpy.ndarray,
                             list, tuple)


@cython.no_gc_clear
cdef class ndarray:
    """An n-dimensional array that records the operations applied to it.

    Holds a NumPy array (``native`` devices) plus, per graph it takes part in,
    an :class:`ArrayNode` and a gradient slot.
    """

    def __cinit__(self):
        global _live_arrays
        _live_arrays += 1

    def __init__(self, shape, dtype=None, device=None):
        self._device = _resolve_device(device)
        dtype = _OPS.default_dtype(dtype)
        if not dtype.isnative:
            dtype = dtype.newbyteorder('=')
        self._data = _device_module.on_device(numpy.empty(shape, dtype=dtype),
                                              self._device)

    def __dealloc__(self):
        global _live_arrays
        _live_arrays -= 1
        cdef ArrayNode node
        if self._nodes is not None:
            for node in self._nodes:
                if node._array == <PyObject*>self:
                    node._array = NULL

    # -- internal helpers -------------------------------------------------

    cdef ArrayNode _node_on(self, BackpropId bp):
        cdef ArrayNode node
        if self._nodes is None:
            return None
        for node in self._nodes:
            if node.backprop_id is bp:
                return node
        return None

    cdef void _prune_released(self):
        """Drop the nodes (and gradient slots) of released graphs, so that a
        long-lived array (a parameter used in many backprop scopes) does not
        make every op on it loop over dead graphs."""
        cdef ArrayNode node
        cdef list nodes = []
        cdef list grads = [] if self._grads is not None else None
        cdef Py_ssize_t i
        for i in range(len(self._nodes)):
            node = <ArrayNode>self._nodes[i]
            if node.backprop_id._released:
                if node._array == <PyObject*>self:
                    node._array = NULL  # ops of the dead graph may outlive us
                continue
            nodes.append(node)
            if grads is not None:
                grads.append(self._grads[i])
        self._nodes = tuple(nodes) if nodes else None
        self._grads = grads if nodes else None

    cdef Py_ssize_t _slot_of(self, ArrayNode node):
        cdef Py_ssize_t i
        for i in range(len(self._nodes)):
            if self._nodes[i] is node:
                return i
        return -1

    cdef ArrayNode _add_node(self, BackpropId bp, FunctionNode creator,
                             Py_ssize_t rank, int graph_index, int out_index,
                             ArrayNode like=None):
        """A new node of this array on graph ``bp``. ``like``: an input's node,
        whose shape tuple the new one shares when the shapes are equal (an
        elementwise op's output), instead of building its own."""
        cdef ArrayNode node = ArrayNode.__new__(ArrayNode)
        node.backprop_id = bp
        node.creator = creator
        node._array = <PyObject*>self
        node.rank = rank
        node.graph_index = graph_index
        node.out_index = out_index
        data = self._data
        if type(data) is _NUMPY_NDARRAY:
            node.dtype = <object>cnp.PyArray_DESCR(<cnp.ndarray>data)  # what .dtype returns
            if like is not None and _shape_is(<cnp.ndarray>data, <tuple>like.shape):
                node.shape = like.shape
            else:
                node.shape = data.shape
        else:
            node.shape = data.shape
            node.dtype = data.dtype
        node.device = self._device
        self._attach(node)
        return node

    cdef void _attach(self, ArrayNode node):
        """Add ``node`` to this array's nodes, with an empty gradient slot."""
        if self._nodes is None:
            self._nodes = (node,)
        else:
            self._nodes = self._nodes + (node,)
            if self._grads is not None:
                self._grads.append(None)

    cdef void _adopt(self, ArrayNode node):
        """Attach another array's ``node`` to this stand-in for its dead
        array (semantics 9: retained data re-attached to the saved nodes)."""
        if node._array == NULL:
            node._array = <PyObject*>self
        self._attach(node)

    cdef object _grad_of(self, ArrayNode node):
        if self._grads is None:
            return None
        return self._grads[self._slot_of(node)]

    cdef void _set_grad_of(self, ArrayNode node, object grad):
        if self._grads is None:
            if grad is None:
                return
            self._grads = [None] * len(self._nodes)
        self._grads[self._slot_of(node)] = grad

    cdef bint _has_enabled_node(self):
        cdef ArrayNode node
        if self._nodes is None:
            return False
        for node in self._nodes:
            if is_enabled(node.backprop_id):
                return True
        return False

    cdef BackpropId _valid_bp(self, backprop_id):
        cdef Context ctx = _context_of(self)
        cdef BackpropId bp = _resolve_bp(backprop_id, ctx)
        ctx._check_valid_backprop_id(bp)
        return bp

    # -- NumPy-like attributes -------------------------------------------

    @property
    def shape(self):
        return self._data.shape

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def size(self):
        return self._data.size

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def itemsize(self):
        return self._data.itemsize

    @property
    def nbytes(self):
        return self._data.nbytes

    @property
    def strides(self):
        return self._data.strides

    @property
    def offset(self):
        """Bytes from ``data_ptr`` to the first element (a view's place in
        the memory it views; 0 for an array that owns its memory)."""
        return _data_address(self._data) - _data_address(_memory_owner(self._data))

    @property
    def device(self):
        return self._device

    @property
    def T(self):
        return _OPS.transpose(self)

    @property
    def is_contiguous(self):
        return bool(self._data.flags.c_contiguous)

    @property
    def _debug_flat_data(self):
        return self._data.ravel().tolist()

    @property
    def data_ptr(self):
        """The address of the memory the data views (ChainerX: the first
        element is at ``data_ptr + offset``)."""
        return _data_address(_memory_owner(self._data))

    @property
    def data_size(self):
        """The bytes between the lowest and the highest addressed element."""
        if self._data.size == 0:
            return 0
        span = sum((n - 1) * abs(st) for n, st in zip(self._data.shape,
                                                         self._data.strides))
        return span + self._data.itemsize

    @property
    def _debug_data_memory_address(self):
        if not self._device.is_native:
            return self._data.data.ptr  # (CuPy arrays have no __array_interface__)
        return self._data.__array_interface__['data'][0]

    def item(self):
        if self._data.size != 1:
            raise DimensionError('item() needs an array of size 1, got shape {}'
                                 .format(self._data.shape))
        return self._data.item()

    def tolist(self):
        return self._data.tolist()

    def to_numpy(self, copy=False):
        """The data as a NumPy array (no copy unless ``copy=True``; arrays on
        a GPU are always copied to the host)."""
        if not self._device.is_native:
            return _device_module.to_host(self._data)
        return self._data.copy() if copy else self._data

    def __array__(self, dtype=None, copy=None):
        data = self._data if self._device.is_native else _device_module.to_host(self._data)
        if dtype is not None and data.dtype != dtype:
            return data.astype(dtype)
        if copy:
            return data.copy()
        return data

    # NumPy meets xgrad arrays: ``numpy.float32(2) * a``, ``numpy.ones(3) + a``
    # and ``numpy.tanh(a)`` all come here. Dispatching to the xgrad op of the
    # same name keeps the graph; anything else raises rather than returning a
    # plain NumPy array with the gradient silently dropped.
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _OPS.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _OPS.array_function(func, types, args, kwargs)

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError('len() of unsized object')
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError('iteration over a 0-d array')
        for i in range(self._data.shape[0]):
            yield self[i]

    def __bool__(self):
        if self._data.size != 1:  # ChainerX: empty and multi-element arrays alike
            raise DimensionError('The truth value of an array of shape {} (size {}) is '
                                 'ambiguous; use any() or all()'.format(
                                     self._data.shape, self._data.size))
        return bool(self._data)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._data.dtype.kind not in 'iub':
            raise TypeError('only integer arrays can be used as an index')
        return int(self.item())

    def __repr__(self):
        body = numpy.array2string(self.to_numpy(), separator=', ', prefix='array(')
        text = 'array({}, shape={}, dtype={}, device={!r}'.format(
            body, self._data.shape, self._data.dtype.name, self._device.name)
        if self._nodes:
            text += ', backprop_ids={}'.format(
                [(<ArrayNode>n).backprop_id.name for n in self._nodes])
        return text + ')'

    def __reduce__(self):
        """Pickles the data and the device name (not graphs or gradients)."""
        return (_unpickle_array, (self._data, self._device.name))

    def __copy__(self):
        """A new array with a copy of the data (graph-free, as pickling):
        writing to it never reaches this array."""
        return _wrap(self._data.copy(), self._device)

    def __deepcopy__(self, memo):
        return self.__copy__()

    # -- copies, views, conversions (recorded ops) ---------------------------

    def copy(self):
        return _OPS.copy(self)

    def view(self):
        return _OPS.view(self)

    def astype(self, dtype, copy=True):
        return _OPS.astype(self, dtype, copy)

    def to_device(self, device, index=None):
        return _OPS.to_device(self, device, index)

    def as_grad_stopped(self, backprop_ids=None, bint copy=False):
        """A copy or view that is not connected to the listed graphs (default:
        every graph of the array's context)."""
        if backprop_ids is None:
            scope = no_backprop_mode(_context_of(self))
        else:
            scope = no_backprop_mode(backprop_ids)
        with scope:
            if copy:
                return _OPS.copy(self)
            return _OPS.view(self)

    # -- the gradient API (semantics.md section 5) -------------------------------

    def require_grad(self, backprop_id=None):
        cdef BackpropId bp = self._valid_bp(backprop_id)
        cdef ArrayNode node
        if not _has_float_data(self._data):
            if self._data.dtype.kind in 'iub':
                raise DtypeError('Array with integral dtype ({}) cannot compute '
                                 'gradient'.format(self._data.dtype.name))
            raise DtypeError('Array with dtype {} cannot compute gradient: only '
                             'float dtypes can'.format(self._data.dtype.name))
        node = self._node_on(bp)
        if node is None:
            if self._nodes is not None:
                self._prune_released()
            if self._nodes is not None:
                for other in self._nodes:
                    _context_of(self)._connect((<ArrayNode>other).backprop_id, bp)
            node = self._add_node(bp, None, 0, 0, 0)
        node.grad_required = True
        return self

    def is_grad_required(self, backprop_id=None):
        cdef ArrayNode node = self._node_on(self._valid_bp(backprop_id))
        return node is not None and node.grad_required

    def is_backprop_required(self, backprop_id=None):
        cdef ArrayNode node
        if backprop_id is anygraph:
            return self._has_enabled_node()
        node = self._node_on(_resolve_bp(backprop_id, _context_of(self)))
        return node is not None and is_enabled(node.backprop_id)

    def get_grad(self, backprop_id=None):
        cdef BackpropId bp = self._valid_bp(backprop_id)
        cdef ArrayNode node = self._node_on(bp)
        if node is None or not node.grad_required:
            raise XgradError('Array is not flagged as requiring gradient for '
                             "backprop id: '{}'.".format(bp.name))
        return self._grad_of(node)

    def set_grad(self, grad, backprop_id=None):
        cdef BackpropId bp = _resolve_bp(backprop_id, _context_of(self))
        cdef ArrayNode node = self._constant_check(bp)
        _context_of(self)._check_valid_backprop_id(bp)
        if grad is None:
            self._set_grad_of(node, None)
            return
        if not isinstance(grad, ndarray):
            raise TypeError('set_grad(): incompatible function arguments: the '
                            'gradient must be an xgrad.ndarray or None, not {}'
                            .format(type(grad).__name__))
        message = _gradient_mismatch(grad, self._data.shape, self._data.dtype,
                                     self._device)
        if message is not None:
            raise GradientError(message)
        self._set_grad_of(node, grad)
        node.grad_required = True

    def cleargrad(self, backprop_id=None):
        cdef ArrayNode node = self._constant_check(
            _resolve_bp(backprop_id, _context_of(self)))
        self._set_grad_of(node, None)

    cdef ArrayNode _constant_check(self, BackpropId bp):
        cdef ArrayNode node = self._node_on(bp)
        if node is None:
            raise XgradError('Array is constant with respect to the computation '
                             "for backprop ID: '{}'.".format(bp.name))
        return node

    @property
    def grad(self):
        return self.get_grad()

    @grad.setter
    def grad(self, value):
        self.set_grad(value)

    def backward(self, backprop_id=None, *, enable_double_backprop=False,
                 grad_outputs=None, retain_grad=False, loss_scale=None):
        _backward([self], backprop_id, enable_double_backprop, grad_outputs,
                  retain_grad, loss_scale)

    def _is_chained(self, backprop_id=None):
        cdef BackpropId bp = self._valid_bp(backprop_id)
        cdef ArrayNode node = self._node_on(bp)
        if node is None:
            raise XgradError('Array does not belong to the graph: {}'.format(
                bp.name))
        return node.creator is not None

    def _backprop_ids(self):
        """The graphs this array has a node on, in the order it joined them."""
        if self._nodes is None:
            return []
        return [(<ArrayNode>n).backprop_id for n in self._nodes]

    def _debug_dump_computational_graph(self, backprop_id=None):
        """Print this array's graph on ``backprop_id``, outputs first."""
        cdef BackpropId bp = self._valid_bp(backprop_id)
        cdef ArrayNode node = self._node_on(bp)
        if node is None:
            print('(no node on {})'.format(bp.name))
            return
        seen = set()
        stack = [(node, 0)]
        while stack:
            n, depth = stack.pop()
            print('{}{}'.format('  ' * depth, n))
            creator = (<ArrayNode>n).creator
            if creator is None or id(creator) in seen:
                continue
            seen.add(id(creator))
            print('{}  <- {}'.format('  ' * depth, creator.name))
            for i in reversed(range((<FunctionNode>creator)._n_in)):
                child = (<FunctionNode>creator)._input_node((<ArrayNode>n).graph_index, i)
                if child is not None:
                    stack.append((child, depth + 2))

    # -- in-place operations (only on arrays outside every graph) ---------------

    cdef void _check_inplace(self, other) except *:
        if self._nodes:
            if all((<ArrayNode>n).creator is None for n in self._nodes):
                raise XgradError(
                    'In-place update of an array that requires grad (a leaf, e.g. a '
                    'parameter) is not allowed, even in no_backprop_mode. Update its '
                    'data through a grad-stopped view, which shares the data: '
                    'p = w.as_grad_stopped(); p -= lr * w.grad')
            raise XgradError('In-place assignment to output array requiring grad '
                             'is not allowed.')
        if isinstance(other, ndarray):
            if (<ndarray>other)._has_enabled_node():
                raise XgradError('In-place assignment that involves input arrays '
                                 'requiring grad is not allowed.')
            if (<ndarray>other)._device is not self._device:
                raise DeviceError('In-place operands are on different devices: '
                                  '{} and {}'.format(self._device.name,
                                                     (<ndarray>other)._device.name))

    cdef void _check_writable(self) except *:
        # CuPy's flags have no ``writeable``: device arrays are always writable
        if not getattr(self._data.flags, 'writeable', True):
            raise XgradError('In-place operation on an array whose data is '
                             'read-only (shape {}, dtype {}); copy it first'.format(
                                 self._data.shape, self._data.dtype.name))

    cdef object _inplace(self, other, op):
        if not _known_operand(other):
            return NotImplemented
        self._check_inplace(other)
        self._check_writable()
        raw = (<ndarray>other)._data if isinstance(other, ndarray) else other
        raw = check_inplace(op.__name__, self._data.dtype, raw)  # ChainerX's dtype rules
        try:
            if inplace_casts(self._data.dtype):
                op(self._data, raw, out=self._data, casting='unsafe')
            else:
                op(self._data, raw, out=self._data)
        except ValueError as e:
            raise DimensionError('In-place operation on shapes {} and {}: {}'.format(
                self._data.shape, numpy.shape(raw), e)) from None
        except TypeError as e:
            raise DtypeError('In-place operation on dtypes {} and {}: {}'.format(
                self._data.dtype, numpy.result_type(raw), e)) from None
        return self

    def __iadd__(self, other):
        return self._inplace(other, numpy.add)

    def __isub__(self, other):
        return self._inplace(other, numpy.subtract)

    def __imul__(self, other):
        return self._inplace(other, numpy.multiply)

    def __itruediv__(self, other):
        return self._inplace(other, numpy.true_divide)

    # -- ChainerX's other operators (issue 16): bitwise and shift operators,
    # their reflected forms, and the remaining in-place forms. The in-place
    # forms write into this array (NumPy's ``out=``), never rebind it.

    def __ifloordiv__(self, other):
        return self._inplace(other, numpy.floor_divide)

    def __imod__(self, other):
        return self._inplace(other, numpy.remainder)

    def __ipow__(self, other):
        return self._inplace(other, numpy.power)

    def __iand__(self, other):
        return self._inplace_integral(other, numpy.bitwise_and, 'biu')

    def __ior__(self, other):
        return self._inplace_integral(other, numpy.bitwise_or, 'biu')

    def __ixor__(self, other):
        return self._inplace_integral(other, numpy.bitwise_xor, 'biu')

    def __ilshift__(self, other):
        return self._inplace_integral(other, numpy.left_shift, 'iu')

    def __irshift__(self, other):
        return self._inplace_integral(other, numpy.right_shift, 'iu')

    def _inplace_integral(self, other, op, kinds):
        """An in-place bitwise or shift op: DtypeError unless both operands
        have one of ``kinds`` (bool and integer, or integer only)."""
        if not _known_operand(other):
            return NotImplemented
        raw = (<ndarray>other)._data if isinstance(other, ndarray) else other
        for name, dtype in (('x1', self._data.dtype), ('x2', numpy.result_type(raw))):
            if dtype.kind not in kinds:
                raise DtypeError('{}: {} has dtype {}, which it does not take'.format(
                    op.__name__, name, dtype))
        return self._inplace(other, op)

    def __and__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.bitwise_and(self, other)

    def __rand__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.bitwise_and(other, self)

    def __or__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.bitwise_or(self, other)

    def __ror__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.bitwise_or(other, self)

    def __xor__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.bitwise_xor(self, other)

    def __rxor__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.bitwise_xor(other, self)

    def __lshift__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.left_shift(self, other)

    def __rlshift__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.left_shift(other, self)

    def __rshift__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.right_shift(self, other)

    def __rrshift__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.right_shift(other, self)

    # -- end of ChainerX's other operators

    def fill(self, value):
        self._check_inplace(value)
        self._check_writable()
        self._data.fill(value)

    def __setitem__(self, key, value):
        if self._has_enabled_node():
            raise RuntimeError('Cannot assign to an array that requires '
                               'backprop; use as_grad_stopped() first.')
        self._check_inplace(value)
        self._check_writable()
        raw = (<ndarray>value)._data if isinstance(value, ndarray) else value
        try:
            self._data[_OPS.raw_index(key)] = raw
        except ValueError as e:
            raise DimensionError('Cannot assign a value of shape {} to {}[{!r}] '
                                 '(shape {}): {}'.format(numpy.shape(raw), 'array',
                                                         key, self._data.shape, e)) from None

    # -- operators -----------------------------------------------------------

    def __add__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.add(self, other)

    def __radd__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.add(other, self)

    def __sub__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.subtract(self, other)

    def __rsub__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.subtract(other, self)

    def __mul__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.multiply(self, other)

    def __rmul__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.multiply(other, self)

    def __truediv__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.divide(self, other)

    def __rtruediv__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.divide(other, self)

    def __pow__(self, other, modulo):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.power(self, other)

    def __rpow__(self, other, modulo):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.power(other, self)

    def __floordiv__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.floor_divide(self, other)

    def __rfloordiv__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.floor_divide(other, self)

    def __mod__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.remainder(self, other)

    def __rmod__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.remainder(other, self)

    def __matmul__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.matmul(self, other)

    def __rmatmul__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.matmul(other, self)

    def __neg__(self):
        return _OPS.negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _OPS.absolute(self)

    def __eq__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.equal(self, other)

    def __ne__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.not_equal(self, other)

    def __lt__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.less(self, other)

    def __le__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.less_equal(self, other)

    def __gt__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.greater(self, other)

    def __ge__(self, other):
        if not _known_operand(other):
            return NotImplemented
        return _OPS.greater_equal(self, other)

    __hash__ = None

    def __getitem__(self, key):
        return _OPS.getitem(self, key)

    # -- method forms of common ops -------------------------------------------

    def sum(self, axis=None, keepdims=False):
        return _OPS.sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _OPS.mean(self, axis, keepdims)

    def reshape(self, *shape):
        if not shape:  # as NumPy and ChainerX: a.reshape() names no shape
            raise TypeError('reshape: a shape is required (a.reshape(shape) or '
                            'a.reshape(*shape))')
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return _OPS.reshape(self, shape)

    def transpose(self, *axes):
        if not axes:
            axes = None
        elif len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return _OPS.transpose(self, axes)

    def squeeze(self, axis=None):
        return _OPS.squeeze(self, axis)

    def dot(self, other):
        return _OPS.dot(self, other)

    # ChainerX's other array methods: thin calls of the module functions.

    def max(self, axis=None, keepdims=False):
        return _OPS.amax(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return _OPS.amin(self, axis, keepdims)

    def argmax(self, axis=None):
        return _OPS.argmax(self, axis)

    def argmin(self, axis=None):
        return _OPS.argmin(self, axis)

    def var(self, axis=None, keepdims=False):
        return _OPS.var(self, axis, keepdims)

    def prod(self, axis=None, keepdims=False):
        return _OPS.prod(self, axis, keepdims)

    def cumsum(self, axis=None):
        return _OPS.cumsum(self, axis)

    def all(self, axis=None, keepdims=False):
        return _OPS.all(self, axis, keepdims)

    def any(self, axis=None, keepdims=False):
        return _OPS.any(self, axis, keepdims)

    def clip(self, a_min, a_max):
        return _OPS.clip(self, a_min, a_max)

    def ravel(self):
        return _OPS.ravel(self)

    def flatten(self):
        return _OPS.reshape(self, (self._data.size,)).copy()

    def take(self, indices, axis=None, mode=None):
        return _OPS.take(self, indices, axis, mode)

    def swapaxes(self, axis1, axis2):
        return _OPS.swapaxes(self, axis1, axis2)

    def repeat(self, repeats, axis=None):
        return _OPS.repeat(self, repeats, axis)


def _data_address(data):
    """The address of raw ``data``'s first element, on the host or a GPU."""
    interface = getattr(data, '__array_interface__', None)
    if interface is None:
        interface = data.__cuda_array_interface__
    return interface['data'][0]


def _memory_owner(data):
    """The array (NumPy or CuPy) at the root of raw ``data``'s chain of views:
    the one whose memory ``data`` lies in."""
    owner = data
    while isinstance(owner.base, type(data)):
        owner = owner.base
    return owner


def _fromrawpointer(ptr, shape, dtype, strides, device, offset, base):
    """ChainerX's ``_core._fromrawpointer``: an array viewing the memory at
    ``ptr + offset`` on ``device`` (kept alive by ``base``), no copy. Chainer
    turns CuPy arrays into ChainerX arrays with it."""
    device = _resolve_device(device)
    return _wrap(_device_module.from_raw_pointer(ptr, shape, dtype, strides, device, offset,
                                                 base), device)


def _unpickle_array(data, device_name):
    return _wrap(data, _resolve_device(device_name))


def _raw_data(ndarray a not None):
    """The backend array an xgrad array wraps (NumPy on native devices): what
    plain-Python op modules compute on. No copy; do not write to it."""
    return a._data


def _array_of(object data, object device=None):
    """Wrap a raw backend array (no copy) on ``device`` (default device);
    host data for a GPU device is copied there."""
    device = _resolve_device(device)
    if type(data) is not _NUMPY_NDARRAY or not device.is_native:
        data = _device_module.on_device(data, device)
    return _wrap(data, device)


# ---------------------------------------------------------------------------
# Function nodes: the op protocol
# ---------------------------------------------------------------------------

@cython.no_gc
cdef class FunctionNode:
    """An operation: ``forward`` on raw arrays, ``backward`` on xgrad arrays.

    Subclass it and define ``forward(self, inputs)`` (a tuple of NumPy arrays
    in, a tuple out) and ``backward(self, target_input_indexes, grad_outputs)``
    (xgrad arrays or None in, one xgrad array or None per target out).
    Because ``backward`` is written with xgrad ops, it is itself recorded when
    double backprop asks for it. Call ``retain_inputs`` / ``retain_outputs``
    in ``forward`` for what ``backward`` needs, and read them back with
    ``get_retained_inputs`` / ``get_retained_outputs``.

    One instance is one application: ``node.apply(inputs)`` once. The instance
    is the graph's op node for every graph it is recorded on; per graph k it
    keeps a rank, its input nodes (owned) and its output nodes (borrowed), in
    one C block so that recording allocates no Python containers.
    """

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
    def name(self):
        return getattr(type(self), 'op_name', type(self).__name__)

    @property
    def rank(self):
        return self._ranks[0] if self._n_graphs else 0

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

    cdef ArrayNode _any_input_node(self, Py_ssize_t i):
        """Input i's node on some graph (they share shape and dtype)."""
        cdef Py_ssize_t k
        cdef PyObject* p
        for k in range(self._n_graphs):
            p = self._in_nodes[k * self._n_in + i]
            if p != NULL:
                return <ArrayNode>p
        return None

    def apply(self, inputs):
        """Run forward on ``inputs`` (xgrad arrays) and record the op."""
        return apply(self, inputs)

    cdef int _graph_index(self, BackpropId bp):
        cdef int k
        for k in range(self._n_graphs):
            if self._graphs[k] is bp:
                return k
        return -1

    cdef bint _formula_only(self):
        """Whether backward only computes with the retained arrays it is
        given and keeps none, so double backprop may hand it the arrays
        themselves instead of views (True for xgrad's own ops, see Op)."""
        return False

    cdef ArrayNode _input_node(self, Py_ssize_t k, Py_ssize_t i):
        cdef PyObject* p = self._in_nodes[k * self._n_in + i]
        return None if p == NULL else <ArrayNode>p

    cdef void _unchain_graph(self, int k):
        """Drop what graph k needed for backward (after a pass without double
        backprop); once no graph needs it, drop the retained arrays too."""
        cdef Py_ssize_t j, i
        cdef PyObject* p
        cdef ArrayNode out
        for j in range(self._n_out):
            p = self._out_nodes[k * self._n_out + j]
            if p != NULL:
                out = <ArrayNode>p
                self._out_nodes[k * self._n_out + j] = NULL
                out.creator = None  # may free self: the caller holds a reference
        for i in range(self._n_in):
            p = self._in_nodes[k * self._n_in + i]
            if p != NULL:
                self._in_nodes[k * self._n_in + i] = NULL
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
    cdef char* block
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
    # One block: out-node pointers, in-node pointers, ranks, chained flags.
    block = <char*>PyMem_Calloc(
        1, n_graphs * ((n_in + n_out) * sizeof(PyObject*) + sizeof(Py_ssize_t) + 1))
    if block == NULL:
        raise MemoryError()
    fn._block = block
    fn._out_nodes = <PyObject**>block
    fn._in_nodes = fn._out_nodes + n_graphs * n_out
    fn._ranks = <Py_ssize_t*>(fn._in_nodes + n_graphs * n_in)
    fn._chained = <unsigned char*>(fn._ranks + n_graphs)
    fn._n_graphs = n_graphs
    fn._n_in = n_in
    fn._n_out = n_out
    fn._graphs = graphs
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
            fn._in_nodes[k * n_in + i] = <PyObject*>node
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
                fn._out_nodes[k * n_out + j] = <PyObject*>node
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
    return outs


cpdef ndarray apply_to_device(FunctionNode fn, ndarray x, object device):
    """``apply`` for one input and one output, the output on ``device``
    (gradients flow back to ``x``'s device), without the tuple plumbing."""
    cdef object y
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
    _link(fn, xs, outs, _common_device(xs + outs))


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


@cython.final
cdef class IndexedGradient:
    """A raw-path gradient that is zero except ``value`` at ``key``: what a
    slice's backward returns instead of a full array of zeros. The pass adds
    ``value`` into the input's accumulated gradient at ``key``, in place when
    the buffer is its own, so T slices of one array (an RNN's per-step
    inputs) cost T slice-sized adds, not T full-size arrays. ``key`` must be
    a basic index (ints, slices, None, Ellipsis: no element twice)."""

    def __cinit__(self, key, value):
        self.key = key
        self.value = value


@cython.final
cdef class _GradTable:
    """Accumulation: the gradient that flowed into each node during one pass
    (scaled by the loss scale), and nothing else. Gradient slots of arrays are
    neither read nor written here, so dropping the table undoes it."""
    cdef dict acc           # ArrayNode -> this pass's gradient
    # Nodes whose buffer in ``acc`` is ours to add into in place. Membership
    # counts only while the node is in ``acc``: every store sets or clears it,
    # and ``pop`` leaves it (a set's deletions leave dummies that make it
    # resize every few adds).
    cdef set owned

    def __cinit__(self):
        self.acc = {}
        self.owned = set()

    cdef inline void _store(self, ArrayNode node, object g, bint owned):
        self.acc[node] = g
        if owned:
            self.owned.add(node)
        elif self.owned:
            self.owned.discard(node)

    cdef void put(self, ArrayNode node, object g, bint owned):
        self._store(node, g, owned)

    cdef object pop(self, ArrayNode node):
        """The node's gradient, removed from the table; None if none flowed in."""
        return self.acc.pop(node, None)

    cdef void _add_on_device(self, ArrayNode node, ndarray old, ndarray g) except *:
        """``add`` on a GPU: in place into a buffer this pass owns (one
        kernel), else one kernel into a new buffer the pass then owns."""
        ns = old._device.ns
        with old._device.scope():
            if (node in self.owned and old._data.shape == g._data.shape
                    and old._data.dtype == g._data.dtype and old._data.flags.c_contiguous):
                ns.accumulate(old._data, g._data)
                return
            total = ns.add(old._data, g._data)
        self._store(node, _wrap(total, old._device), True)

    cdef void add_at(self, ArrayNode node, IndexedGradient g, object device) except *:
        """Add ``g`` (zero but at its key) to the node's gradient: in place
        into a buffer this pass owns, else into a fresh buffer of zeros."""
        cdef ndarray old
        cdef PyObject* p = PyDict_GetItem(self.acc, node)
        if p != NULL:
            old = <ndarray>p
            if old._nodes is None and node in self.owned:
                old._data[g.key] += g.value
                return
        full = numpy.zeros(node.shape, node.dtype)
        full[g.key] = g.value
        self.add(node, _wrap(full, device), True)

    cdef void add(self, ArrayNode node, ndarray g, bint fresh) except *:
        """Add ``g`` to the node's gradient; in place into a buffer this pass
        owns (``fresh``: ``g`` is one) when no graph records the sum."""
        cdef ndarray old
        cdef PyObject* p = PyDict_GetItem(self.acc, node)
        if p == NULL:
            self._store(node, g, fresh and g._nodes is None)
            return
        old = <ndarray>p
        if old._nodes is None and g._nodes is None:
            if not _is_native(old._device):
                self._add_on_device(node, old, g)
                return
            if node in self.owned and native_kernels.add_into(old._data, g._data):
                return
            if fresh and native_kernels.add_into(g._data, old._data):
                self._store(node, g, True)
                return
            self._store(node, _wrap(_as_raw_array(native_kernels.add(old._data, g._data)),
                                    old._device), True)
        else:
            self._store(node, _OPS.add(old, g), False)


# Commits of passes that may write the same gradient slot (a leaf shared by
# graphs backpropagated in two threads) take turns: read, add and write of a
# slot are one step.
cdef object _commit_lock = threading.RLock()


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
cdef object _rank_of_entry = operator.itemgetter(0)  # C, no Python frame per call


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

    cdef void _find_subgraph(self, list in_nodes):
        """grad(): the nodes and ops on a path from some input to some output."""
        cdef ArrayNode node, child
        cdef FunctionNode fn
        cdef Py_ssize_t i, j, k
        cdef PyObject* p
        self.sub_nodes = set([n for n in in_nodes if n is not None])
        self.sub_ops = set()
        ops = []
        seen = set()
        stack = list(self.output_nodes)
        while stack:
            node = <ArrayNode>stack.pop()
            fn = node.creator
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            k = node.graph_index
            ops.append((fn._ranks[k], k, fn))
            for i in range(fn._n_in):
                child = fn._input_node(k, i)
                if child is not None:
                    stack.append(child)
        ops.sort(key=_rank_of_entry)
        for _, k, fn_obj in ops:
            fn = <FunctionNode>fn_obj
            for i in range(fn._n_in):
                child = fn._input_node(k, i)
                if child is not None and child in self.sub_nodes:
                    self.sub_ops.add(fn)
                    for j in range(fn._n_out):
                        p = fn._out_nodes[k * fn._n_out + j]
                        if p != NULL:
                            self.sub_nodes.add(<ArrayNode>p)
                    break

    cdef void _push(self, ArrayNode node):
        cdef FunctionNode fn = node.creator
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
        recorded for the commit."""
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

    cdef void _process(self, FunctionNode fn, int k) except *:
        cdef Py_ssize_t j, i, n_out = fn._n_out, n_in = fn._n_in
        cdef PyObject* p
        cdef ArrayNode child
        cdef bint any_gy = False
        cdef tuple gys
        if n_out == 1:
            p = fn._out_nodes[k]
            g = None if p == NULL else self._take_grad(<ArrayNode>p)
            any_gy = g is not None
            gys = (g,)
        else:
            gys_list = []
            for j in range(n_out):
                p = fn._out_nodes[k * n_out + j]
                g = None if p == NULL else self._take_grad(<ArrayNode>p)
                any_gy = any_gy or g is not None
                gys_list.append(g)
            gys = tuple(gys_list)
        if any_gy and fn._chained[k]:
            targets = _targets(fn, k, self.sub_nodes)
            if targets:
                self._propagate(fn, k, targets, gys)
        if not self.double:
            self.outcome.processed(fn, k)

    cdef void _propagate(self, FunctionNode fn, int k, tuple targets,
                         tuple gys) except *:
        cdef ArrayNode node
        cdef Py_ssize_t t, u
        cdef bint raw, fresh = False
        grads = self._call_backward_raw(fn, targets, gys)
        raw = grads is not None
        if not raw:
            grads = self._call_backward_graph(fn, k, targets, gys)
        if len(grads) != len(targets):
            if len(grads) == fn._n_in:
                grads = tuple([grads[i] for i in targets])
            else:
                raise GradientError(
                    '{}.backward returned {} gradients for {} target inputs'.format(
                        fn.name, len(grads), len(targets)))
        for t in range(len(targets)):
            g = grads[t]
            if g is None:
                continue
            node = fn._input_node(k, targets[t])
            if node is None:
                continue  # unchained meanwhile (another thread's pass): nothing to feed
            if raw and type(g) is IndexedGradient:
                # (add_at writes into a buffer of the node's dtype: a value of
                # another float dtype, NumPy 1.x's, is cast there)
                self.table.add_at(node, <IndexedGradient>g, fn._device)
                self._push(node)
                continue
            if raw:
                data = _as_raw_array(g)
                if (_NUMPY1_SCALAR_PROMOTION and data.dtype != node.dtype
                        and data.dtype.kind == 'f' and node.dtype.kind == 'f'):
                    # NumPy 1.x promotes a 0-d float16/32 operand with a Python
                    # float to float64; NumPy 2 (and ChainerX) keep its dtype.
                    data = data.astype(node.dtype)
                # A buffer the kernel just made, held only by the result tuple
                # and these two locals, can take the other contributions in place.
                fresh = (data is g and type(data) is _NUMPY_NDARRAY
                         and Py_REFCNT(data) <= 3
                         and cnp.PyArray_CHKFLAGS(<cnp.ndarray>data, cnp.NPY_ARRAY_OWNDATA)
                         and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>data))
                g = _wrap(data, fn._device)
            elif not isinstance(g, ndarray):
                raise GradientError('{}.backward returned a {} for input {}; '
                                    'gradients must be xgrad arrays. Op: {}'.format(
                                        fn.name, type(g).__name__, targets[t], fn.name))
            else:
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
                if (_NUMPY1_SCALAR_PROMOTION and (<ndarray>g)._data.ndim == 0
                        and (<ndarray>g)._data.dtype != node.dtype
                        and (<ndarray>g)._data.dtype.kind == 'f' and node.dtype.kind == 'f'):
                    g = (<ndarray>g).astype(node.dtype)  # as on the raw path (recorded)
            if not _meta_matches(<ndarray>g, node):
                raise GradientError('{} Op: {}'.format(
                    _gradient_mismatch(g, node.shape, node.dtype, node.device),
                    fn.name))
            self.table.add(node, <ndarray>g, fresh)
            self._push(node)

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
            p = fn._in_nodes[kk * fn._n_in + i]
            if p != NULL and is_enabled((<ArrayNode>p).backprop_id):
                substitute._adopt(<ArrayNode>p)
        return substitute if fn._formula_only() else _view_in_scope(substitute)

    cdef object _retained_output(self, FunctionNode fn, int k, Py_ssize_t pos):
        """A retained output as the backward sees it: a view of the output if
        it is alive, else its saved data re-attached to the op's output nodes
        (made anew on graphs where they died)."""
        cdef Py_ssize_t n_out = fn._n_out, kk, j = fn._retain_out_idx[pos]
        cdef PyObject* p = fn._out_nodes[k * n_out + j]
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
            p = fn._out_nodes[kk * n_out + j]
            if p != NULL:
                substitute._adopt(<ArrayNode>p)
            else:
                node = substitute._add_node(bp, fn, fn._ranks[kk], <int>kk, <int>j)
                fn._out_nodes[kk * n_out + j] = <PyObject*>node
        return substitute if fn._formula_only() else _view_in_scope(substitute)

    # -- phase 4: commit (rollback is what ``run`` drops on an error) ----------

    cdef void _commit(self) except *:
        """Every op succeeded: finish the leaves, prepare each slot's value
        (ops may run, and fail, here), then write them all and unchain."""
        cdef list slots = []
        cdef list finals
        cdef Py_ssize_t i
        with _commit_lock:
            # What is left has no creator to process: leaves (and grad inputs).
            for node_obj, value in list(self.table.acc.items()):
                self._final(<ArrayNode>node_obj, value)
            finals = self.outcome.finals
            for i in range(0, len(finals), 2):
                self._prepare(<ArrayNode>finals[i], finals[i + 1], slots)
            self.outcome.apply(slots, not self.double)
        self.ctx._mark_backpropped(self.bp)

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


cdef object _alive_input(FunctionNode fn, Py_ssize_t i):
    """Input i of ``fn`` if some graph's node still points to its array."""
    cdef Py_ssize_t k
    cdef PyObject* p
    for k in range(fn._n_graphs):
        p = fn._in_nodes[k * fn._n_in + i]
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
        has0 = fn._in_nodes[k * n_in] != NULL
        has1 = n_in == 2 and fn._in_nodes[k * n_in + 1] != NULL
        if has0:
            return _T01 if has1 else _T0
        return _T1 if has1 else ()
    out = []
    for i in range(n_in):
        p = fn._in_nodes[k * n_in + i]
        if p != NULL and (sub_nodes is None or <object>p in sub_nodes):
            out.append(i)
    return tuple(out)


cdef bint _shape_is(cnp.ndarray arr, tuple shape):
    """Whether ``arr``'s shape is ``shape`` (a tuple of ints), without
    building its shape tuple."""
    cdef Py_ssize_t i, nd = cnp.PyArray_NDIM(arr)
    if nd != len(shape):
        return False
    for i in range(nd):
        if cnp.PyArray_DIM(arr, i) != <Py_ssize_t>shape[i]:
            return False
    return True


cdef bint raw_meta_matches(object data, ArrayNode node):
    """Whether ``data`` is a NumPy array with the node's dtype and shape, read
    at C level; False for anything else, which the caller checks the slow way."""
    if type(data) is not _NUMPY_NDARRAY:
        return False
    if (<object>cnp.PyArray_DESCR(<cnp.ndarray>data) is not node.dtype
            and data.dtype != node.dtype):
        return False
    return _shape_is(<cnp.ndarray>data, <tuple>node.shape)


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


cdef _backward(outputs, backprop_id, bint double, grad_outputs, bint retain_grad,
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
    return grads
