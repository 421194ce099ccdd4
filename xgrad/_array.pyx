# cython: language_level=3
"""``ndarray``: data on a device, and per graph the array's node and gradient.

An xgrad array wraps a NumPy array (``native`` devices) or a CuPy array
(``cuda:N``). ``_wrap`` makes one from raw data at C speed; the ops call it
for every result. The class groups its methods as: internal node bookkeeping,
NumPy-like properties, conversions, the gradient API, in-place operations and
the operators; every operator and method form calls the op library, which
registers itself here (``_install_ops``), as the backward pass does
(``_install_backward``): both live above this module.
"""

cimport cython
from cpython.ref cimport PyObject
cimport numpy as cnp

from xgrad._context cimport (
    BackpropId, Context, _resolve_bp, _resolve_device, is_enabled)
from xgrad._graph cimport ArrayNode, OpNode, add_hook, print_graph, shape_is
from xgrad._dtypes cimport check_inplace, inplace_casts

import numpy

from xgrad._context import anygraph, no_backprop_mode
from xgrad._errors import DeviceError, DimensionError, DtypeError, GradientError, XgradError
from xgrad import _device as _device_module

cnp.import_array()
cdef object _NUMPY_NDARRAY = numpy.ndarray


# The op library (xgrad._ops) and the backward pass (xgrad._backward) register
# themselves here when imported, so that ndarray's operators and methods can
# call them without an import from below.
_OPS = None
cdef object _run_backward = None


def _install_ops(ops):
    global _OPS
    _OPS = ops


def _install_backward(run_backward):
    """``run_backward(outputs, backprop_id, double, grad_outputs, retain_grad,
    loss_scale)``: what ``ndarray.backward`` calls."""
    global _run_backward
    _run_backward = run_backward


cdef object _scalar_as_array(object g):
    """A NumPy scalar (what 0-d NumPy operations return) as a 0-d array."""
    if isinstance(g, numpy.generic):
        return numpy.asarray(g)
    return g


cdef Py_ssize_t _live_arrays = 0


def _live_array_count():
    """The number of xgrad arrays alive now (xgrad.testing's leak check)."""
    return _live_arrays


cdef object _native_byte_order(object data):
    """Non-native (e.g. big-endian '>f4') NumPy data as a native-order copy:
    the kernels read raw memory by type number, so every xgrad array's data
    is in the machine's byte order."""
    return data.astype(data.dtype.newbyteorder('='))


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

    cdef ArrayNode _add_node(self, BackpropId bp, OpNode creator,
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
            if like is not None and shape_is(<cnp.ndarray>data, <tuple>like.shape):
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
        owner = _device_module.memory_owner(self._data)
        return _device_module.data_address(self._data) - _device_module.data_address(owner)

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
        return _device_module.data_address(_device_module.memory_owner(self._data))

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

    @property
    def __array_priority__(self):
        """100.0, ChainerX's value: above NumPy's (0.0), so that code
        which compares priorities (NumPy's binary operators for objects
        without ``__array_ufunc__``, ``numpy.matrix``, masked arrays, CuPy's
        operators) hands a mixed operation to this array's reflected
        operator. Read-only, as in ChainerX."""
        return 100.0

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

    def register_hook(self, hook, backprop_id=None):
        """Call ``hook(g)`` with the gradient that flows into this array in
        every backward pass on ``backprop_id`` (``backward`` and ``grad``),
        before it is passed on or stored. ``hook`` may return a replacement
        (same shape, dtype and device) or None to keep ``g``; in double
        backprop ``g`` is itself on the graph. With ``loss_scale`` the hook
        sees the unscaled gradient. On a leaf the hook runs as soon as the
        leaf's gradient for the pass is complete (every op of the pass that
        consumes it has run), while the pass goes on: what lets an all-reduce
        of it overlap the rest of backward. Returns a handle whose
        ``remove()`` takes the hook off."""
        return self._register(hook, backprop_id, False)

    def register_post_accumulate_hook(self, hook, backprop_id=None):
        """On a leaf: call ``hook(self)`` once a backward pass on
        ``backprop_id`` has stored this array's gradient (after the pass has
        committed, so ``self.get_grad(backprop_id)`` is the final value;
        ``grad()`` stores it only with ``set_grad=True``). What per-parameter
        optimizers and gradient all-reduce need. Returns a handle whose
        ``remove()`` takes the hook off."""
        return self._register(hook, backprop_id, True)

    def _register(self, hook, backprop_id, bint post):
        cdef BackpropId bp = self._valid_bp(backprop_id)
        return add_hook(self._node_on(bp), hook, post, bp)

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
        _run_backward([self], backprop_id, enable_double_backprop, grad_outputs,
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
        print_graph(self._node_on(bp), bp)

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

    # ChainerX also binds ``%`` under these names (no Python operator calls them).
    def __remainder__(self, other):
        return self.__mod__(other)

    def __rremainder__(self, other):
        return self.__rmod__(other)

    def __iremainder__(self, other):
        return self.__imod__(other)

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
        # Two float matrices (or vectors) of one dtype: dot is matmul; the
        # module function decides the rest (N-d, scalars, promotion).
        if isinstance(other, ndarray):
            a, b = self._data, (<ndarray>other)._data
            if (a.dtype is b.dtype and a.dtype.kind == 'f' and 0 < a.ndim <= 2
                    and 0 < b.ndim <= 2 and a.shape[a.ndim - 1] == b.shape[0]):
                return _OPS.matmul(self, other)
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
