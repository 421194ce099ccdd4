"""The engine's Python-level names in one namespace, as ChainerX's
``chainerx._core``: what ``xgrad/__init__.py``, the op library, the testing
tools and ``chainerx_compat`` import. Nothing is defined here; each name
lives in the module of its concept:

    _context         Context, BackpropId, backprop modes and scopes, defaults
    _device_cache    the device attributes the hot path asks of every op
    _graph           array nodes and op nodes, the release of dead graphs
    _array           ndarray
    _function_node   FunctionNode, apply (recording), the Chainer graft
    _op_hooks        op hooks and anomaly mode around each op
    _backward        the backward pass: backward(), grad()
    _debug           the engine's debug checks (XGRAD_DEBUG=1)

See docs/architecture.md for an op's way through them.
"""

from xgrad._context import (  # NOQA
    Context, BackpropId, AnyGraph, anygraph,
    backprop_scope, no_backprop_mode, force_backprop_mode, is_backprop_required,
    get_default_context, set_default_context, context_scope,
    get_global_default_context, set_global_default_context, get_backend,
    get_default_device, set_default_device, using_device, get_device,
    ContextScope, DeviceScope, BackpropScope, NoBackpropMode, ForceBackpropMode)
from xgrad._graph import ArrayNode, OpNode, HookHandle  # NOQA
from xgrad._array import (  # NOQA
    ndarray, _live_array_count, _raw_data, _array_of, _fromrawpointer,
    _unpickle_array, _gradient_mismatch)
from xgrad._function_node import (  # NOQA
    FunctionNode, apply, apply_to_device, _function_node_forward)
from xgrad._grad_table import IndexedGradient  # NOQA
from xgrad._backward import backward, grad  # NOQA
