# cython: language_level=3
"""Contexts, backprop IDs and the per-thread state that says what records.

A Context owns backprop IDs (one per computational graph), the connections
between graphs that an op on arrays of several graphs makes, and its devices.
Each thread has a stack of backprop modes (``no_backprop_mode`` /
``force_backprop_mode``), a default context and a default device.
``is_enabled`` answers, on every op, whether a graph records now.

The cache of a device's attributes (``device_ns``, ``_is_native``) is
``_device_cache``'s; ``_context.pxd`` re-exports it.
"""

cimport cython

import threading

from xgrad._errors import BackpropModeError, ContextError, XgradError, describe
from xgrad import _device as _device_module


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

# ChainerX sets it on import (chainerx/__init__.py); None when unset.
cdef Context _global_default_context = Context()


# ---------------------------------------------------------------------------
# Thread-local state: backprop modes, default context, default device
# ---------------------------------------------------------------------------

cdef class _ModeEntry:
    """One entry of the mode stack: ``enable`` applies to ``ids`` (or to
    every graph of ``context`` when ``ids`` is None)."""


cdef class _ThreadState:
    """One thread's backprop modes, default context and default device."""

    def __init__(self):
        self.modes = []
        self.op_hooks = ()
        self.anomaly = 0


cdef object _tls = threading.local()
# Mode entries pushed in all threads together: while it is 0 (the common
# case) every graph is enabled and is_enabled need not look at thread state.
_active_mode_entries = 0


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


cdef bint _is_enabled_in_modes(BackpropId bp):
    """is_enabled (_context.pxd) when some thread has a mode entry: this
    thread's innermost entry that names ``bp`` or its context decides."""
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
    """This thread's default context; without one, the global default
    context (ChainerX's ``GetDefaultContext``). ContextError when neither is
    set."""
    cdef _ThreadState st = _state()
    if st.default_context is not None:
        return st.default_context
    if _global_default_context is None:
        raise ContextError('Global default context is not set.')
    return _global_default_context


cdef Context _default_context_or_none():
    """ChainerX's ``GetDefaultContextNoExcept``: this thread's, else the
    global one, else None."""
    cdef Context context = _state().default_context
    return context if context is not None else _global_default_context


def set_default_context(context):
    """Set this thread's default context; None falls back to the global
    default context. A different context resets this thread's default
    device (to the new context's ``native:0``), as in ChainerX."""
    if context is not None and not isinstance(context, Context):
        raise TypeError('context must be a Context or None')
    cdef _ThreadState st = _state()
    if st.default_context is not context:
        st.default_context = context
        st.default_device = None


def get_global_default_context():
    """The context every thread without its own default context uses
    (``chainerx.get_global_default_context``). ContextError when unset."""
    if _global_default_context is None:
        raise ContextError('Global default context is not set.')
    return _global_default_context


def set_global_default_context(context):
    """Set the context of every thread without its own default context;
    None unsets it (ChainerX's ``set_global_default_context``). Threads
    that set a default context, or are inside ``context_scope``, keep it."""
    global _global_default_context
    if context is not None and not isinstance(context, Context):
        raise TypeError('context must be a Context or None')
    _global_default_context = context


def get_backend(str backend_name):
    """The backend ``backend_name`` (``'native'``, ``'cuda'``) of the default
    context; BackendError for any other name."""
    return get_default_context().get_backend(backend_name)


def _no_constructor(cls):
    raise TypeError('{}: No constructor defined! (use {})'.format(
        cls.__name__, _FACTORY[cls.__name__]))


_FACTORY = {'ContextScope': 'xgrad.context_scope(context)',
            'DeviceScope': 'xgrad.using_device(device)',
            'BackpropScope': 'xgrad.backprop_scope(name)',
            'NoBackpropMode': 'xgrad.no_backprop_mode(...)',
            'ForceBackpropMode': 'xgrad.force_backprop_mode(...)'}


cdef class ContextScope:
    """What ``xgrad.context_scope(context)`` returns. ``__enter__`` makes
    ``context`` this thread's default context (and so resets the default
    device) and returns None; ``__exit__`` restores the context and the
    device that were the defaults before, as ChainerX's ContextScope."""
    cdef Context _context
    cdef object _orig_context
    cdef object _orig_device
    cdef bint _entered

    def __init__(self, *args, **kwargs):
        _no_constructor(type(self))

    def __enter__(self):
        cdef _ThreadState st = _state()
        self._orig_context = _default_context_or_none()
        self._orig_device = st.default_device
        self._entered = True
        set_default_context(self._context)

    def __exit__(self, *exc):
        if self._entered:
            self._entered = False
            set_default_context(self._orig_context)
            _state().default_device = self._orig_device


def context_scope(context):
    """``with xgrad.context_scope(ctx):`` makes ``ctx`` this thread's default
    context for the block (the ``as`` target is None, as in ChainerX)."""
    if not isinstance(context, Context):
        raise TypeError('context must be a Context')
    cdef ContextScope scope = ContextScope.__new__(ContextScope)
    scope._context = context
    return scope


cdef object _default_device():
    cdef _ThreadState st = _state()
    if st.default_device is None:
        return get_default_context().get_device('native:0')
    return st.default_device


def get_default_device():
    return _default_device()


def get_device(device=None, index=None):
    """``xgrad.get_device('native:1')`` / ``get_device('native', 1)``."""
    if device is None and index is None:
        return _default_device()  # ChainerX reads None as the default
    return _device_module.parse_device(get_default_context(), device, index)


def set_default_device(device):
    _state().default_device = _device_module.parse_device(
        get_default_context(), device)


cdef class DeviceScope:
    """What ``xgrad.using_device(device)`` returns. ``__enter__`` makes the
    device this thread's default (a GPU also becomes CuPy's current device)
    and returns the scope, whose ``device`` is the device; ``__exit__``
    restores the previous default, as ChainerX's DeviceScope."""
    cdef object _device
    cdef object _orig_device
    cdef object _cupy_scope
    cdef bint _entered

    def __init__(self, *args, **kwargs):
        _no_constructor(type(self))

    @property
    def device(self):
        return self._device

    def __enter__(self):
        cdef _ThreadState st = _state()
        cupy_scope = self._device.scope()
        cupy_scope.__enter__()
        self._cupy_scope = cupy_scope
        self._orig_device = st.default_device
        self._entered = True
        st.default_device = self._device
        return self

    def __exit__(self, *exc):
        if self._entered:
            self._entered = False
            _state().default_device = self._orig_device
            self._cupy_scope.__exit__(*exc)


def using_device(device, index=None):
    """``with xgrad.using_device('native:1') as scope:`` sets this thread's
    default device for the block; ``scope.device`` is the device."""
    cdef DeviceScope scope = DeviceScope.__new__(DeviceScope)
    scope._device = _device_module.parse_device(get_default_context(), device, index)
    return scope


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

    def __init__(self, *args, **kwargs):
        _no_constructor(type(self))

    def __enter__(self):
        if self.entry is not None:
            _push_mode(_state(), self.entry)

    def __exit__(self, *exc):
        if self.entry is not None:
            _pop_mode(_state(), self.entry)


cdef class NoBackpropMode(_BackpropModeScope):
    """What ``xgrad.no_backprop_mode(...)`` returns; ``__enter__`` returns None."""


cdef class ForceBackpropMode(_BackpropModeScope):
    """What ``xgrad.force_backprop_mode(...)`` returns; ``__enter__`` returns None."""


def no_backprop_mode(arg=None, context=None):
    """Disable recording for one graph, several, or every graph of a context."""
    cdef _BackpropModeScope s = NoBackpropMode.__new__(NoBackpropMode)
    s.entry = _make_mode_entry(False, arg, context)
    return s


def force_backprop_mode(arg=None, context=None):
    """Re-enable recording inside ``no_backprop_mode`` (same arguments)."""
    cdef _BackpropModeScope s = ForceBackpropMode.__new__(ForceBackpropMode)
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


cdef class BackpropScope:
    """What ``xgrad.backprop_scope(name)`` returns. ``__enter__`` makes a new
    backprop ID in the context and returns it; ``__exit__`` releases it. One
    scope enters once: entering it again while inside, or after it exited,
    raises ChainerxError, as in ChainerX."""
    cdef str _name
    cdef Context _context
    cdef object _state_name
    cdef BackpropId _bp

    def __init__(self, *args, **kwargs):
        _no_constructor(type(self))

    def __enter__(self):
        if self._state_name == 'entered':
            raise XgradError('Backprop scope cannot be nested.')
        if self._state_name == 'exited':
            raise XgradError('Exited backprop scope cannot be reused.')
        self._bp = self._context.make_backprop_id(self._name)
        self._state_name = 'entered'
        return self._bp

    def __exit__(self, *exc):
        self._state_name = 'exited'
        if self._bp is None:
            return
        try:
            self._bp.context.release_backprop_id(self._bp)
        except XgradError:
            pass


def backprop_scope(backprop_name, context=None):
    """``with xgrad.backprop_scope('name') as bp:`` makes a new graph for the
    block and releases it at the end. The context (default: this thread's
    default) is taken now, as ChainerX does."""
    if not isinstance(backprop_name, str):
        raise TypeError('backprop_name must be a str')
    if context is not None and not isinstance(context, Context):
        raise TypeError('context must be a Context or None')
    cdef BackpropScope scope = BackpropScope.__new__(BackpropScope)
    scope._name = backprop_name
    scope._context = context if context is not None else get_default_context()
    scope._state_name = 'new'
    return scope


cdef BackpropId _resolve_bp(backprop_id, Context context):
    if backprop_id is None:
        return context._default_id
    if isinstance(backprop_id, BackpropId):
        return <BackpropId>backprop_id
    raise TypeError('incompatible function arguments: backprop_id must be a '
                    'BackpropId or None, not {}{}'.format(describe(backprop_id), (
                        ' (a gradient to start from goes to xgrad.backward([y], '
                        'grad_outputs=[gy]))' if hasattr(backprop_id, 'shape') else '')))


def _recover_device(backend_name, device_index):
    """The device a pickled Device names, in this thread's default context
    (ChainerX's ``_device._recover_device``)."""
    return get_default_context().get_backend(backend_name).get_device(device_index)


_device_module._recover_device[0] = _recover_device
