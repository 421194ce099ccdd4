"""``xgrad.functional``: function transforms on top of xgrad's graphs.

``vjp``, ``jvp``, ``jacobian``, ``hessian`` and ``hvp`` take a function of
xgrad arrays and differentiate it at given points, in the manner of
``torch.func`` / ``torch.autograd.functional``. Each call records ``f`` on
a graph of its own: a fresh backprop ID made for the call (and released when
the call, or for ``vjp`` the returned ``vjp_fn``, is done), named
``'functional.<transform>'``. Because that ID is created last, it is *inner*
to every graph that exists at the call (docs/semantics.md section 2), so:

- the transforms nest: ``jacobian`` of a function that itself calls ``vjp``
  (or ``hessian`` of one that calls ``jacobian``) works, each level on its
  own graph;
- they compose with the user's graphs: when the primals carry nodes on the
  user's graphs (say ``w.require_grad()`` on the default graph, or an ID of
  a ``backprop_scope``), the results do too, so a loss built from a
  Jacobian or a Hessian-vector product can be backpropagated on the user's
  graph (``backward``/``grad`` as usual);
- the inputs are never touched: ``f`` gets fresh views of the primals (one
  per position, so a primal passed twice gets two separate gradients), and
  no gradient of the primals is read or written. The results carry no node
  on the transform's graph.

The forward-mode product ``jvp`` uses the double-vjp trick: with ``u`` a
dummy cotangent, ``g(u) = J^T u`` is recorded by a double-backprop pass, and
the derivative of ``<g(u), t>`` with respect to ``u`` is ``J t``. It costs
about two backward passes, and it works for every op that has a second
derivative (all of xgrad's differentiable ops do).

Differences from ``torch.func``:

- the functions take the primals as positional arrays (``jacobian(f, x, y)``
  is ``torch.func.jacrev(f, argnums=(0, 1))(x, y)``), and a single primal
  gives a single result rather than a one-element tuple;
- ``jacobian``/``hessian`` are reverse mode (one backward pass per output
  element), as ``jacrev``; there is no ``vmap``, so the rows are separate
  passes;
- ``vjp_fn`` keeps the graph for further calls (``retain_graph=True``, as
  torch's); ``vjp_fn(ct, retain_graph=False)`` frees it, after which calling
  it again raises ``GradientError``;
- gradients that do not reach an input are zeros (as in torch.func), never
  None; outputs of non-float dtype have no derivative: ``jvp`` returns None
  for them, ``vjp`` takes None as their cotangent, and ``jacobian``,
  ``hessian`` and ``hvp`` reject them with ``DtypeError``;
- ``backprop_id=``: every transform takes the graph to record ``f`` on.
  None (the default) makes a private one per call, as above. An explicit ID
  is used as is and not released; its prohibition rules apply (after the
  transform's backward pass on it, graphs inner to it that it got connected
  to cannot be backpropagated), and the results are stopped on it.

Bad arguments raise before ``f`` is called, naming the argument:
``TypeError`` for non-arrays (and ``f``'s output when it is not an array or
a tuple/list of them), ``GradientError`` for a count of tangents,
cotangents or vectors that does not match, ``DimensionError``,
``DtypeError`` and ``DeviceError`` for one whose shape, dtype or device
differs from its primal's (or output's). A failed call records nothing that
outlives it and changes no array.
"""

import contextlib
import weakref
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy

from xgrad import _core, _ops
from xgrad._errors import (
    ContextError, DeviceError, DimensionError, DtypeError, GradientError, XgradError)

__all__ = ['vjp', 'jvp', 'jacobian', 'hessian', 'hvp']

# f's outputs, tangents, Jacobians...: one array, or a (nested) tuple of them.
Arrays = Union[_core.ndarray, Tuple[Any, ...]]
_Inputs = Union[_core.ndarray, Sequence[_core.ndarray]]


# ---------------------------------------------------------------------------
# Argument checks

def _name(f):
    return getattr(f, '__name__', None) or type(f).__name__


def _check_callable(f, what):
    if not callable(f):
        raise TypeError('{}: f must be callable, not {}'.format(what, type(f).__name__))


def _check_primals(values, label, what, differentiable=True):
    """``values`` (a sequence) as a tuple of xgrad arrays of float dtype on
    one context."""
    if not values:
        raise TypeError('{}: needs at least one primal array'.format(what))
    for i, x in enumerate(values):
        if not isinstance(x, _core.ndarray):
            raise TypeError('{}: {}[{}] must be an xgrad.ndarray, not {}'.format(
                what, label, i, type(x).__name__))
        if differentiable and x.dtype.kind != 'f':
            raise DtypeError('{}: {}[{}] has dtype {}; only float arrays can be '
                             'differentiated'.format(what, label, i, x.dtype))
    context = values[0].device.context
    for i, x in enumerate(values[1:], 1):
        if x.device.context is not context:
            raise ContextError('{}: {}[{}] is in another context than {}[0]'.format(
                what, label, i, label))
    return tuple(values)


def _as_tuple(value, label, what):
    """A single array or a tuple/list of them, as (tuple, was_single)."""
    if isinstance(value, _core.ndarray):
        return (value,), True
    if isinstance(value, (tuple, list)):
        return tuple(value), False
    raise TypeError('{}: {} must be an xgrad.ndarray or a tuple/list of them, not '
                    '{}'.format(what, label, type(value).__name__))


def _primals_and_vectors(f, primals, vectors, label, what):
    """jvp's and hvp's arguments checked: ``(primals, vectors, single)``,
    one vector per primal and like it; ``single``: one primal was given
    as an array, not a sequence."""
    _check_callable(f, what)
    xs, single = _as_tuple(primals, 'primals', what)
    xs = _check_primals(xs, 'primals', what)
    vs, _ = _as_tuple(vectors, label, what)
    _check_like(vs, xs, label, 'primals', what)
    return xs, vs, single


def _check_like(values, refs, label, ref_label, what, allow_none=False):
    """Each of ``values`` matches its ``refs`` entry in shape, dtype and
    device (count: GradientError; type: TypeError; shape: DimensionError;
    dtype: DtypeError; device: DeviceError)."""
    if len(values) != len(refs):
        raise GradientError('{}: {} has {} entries for {} {} (one per {})'.format(
            what, label, len(values), len(refs), ref_label, ref_label.rstrip('s')))
    for i, (v, r) in enumerate(zip(values, refs)):
        if v is None and allow_none:
            continue
        if not isinstance(v, _core.ndarray):
            raise TypeError('{}: {}[{}] must be an xgrad.ndarray{}, not {}'.format(
                what, label, i, ' or None' if allow_none else '', type(v).__name__))
        if v.shape != r.shape:
            raise DimensionError('{}: {}[{}] has shape {}, but {}[{}] has shape {}'.format(
                what, label, i, v.shape, ref_label, i, r.shape))
        if v.dtype != r.dtype:
            raise DtypeError('{}: {}[{}] has dtype {}, but {}[{}] has dtype {}'.format(
                what, label, i, v.dtype, ref_label, i, r.dtype))
        if v.device is not r.device:
            raise DeviceError('{}: {}[{}] is on {}, but {}[{}] is on {}'.format(
                what, label, i, v.device.name, ref_label, i, r.device.name))


def _outputs(result, f, what, float_only=False):
    """What ``f`` returned, as (tuple of arrays, was_single)."""
    if isinstance(result, _core.ndarray):
        ys, single = (result,), True
    elif isinstance(result, (tuple, list)) and result:
        ys, single = tuple(result), False
        for j, y in enumerate(ys):
            if not isinstance(y, _core.ndarray):
                raise TypeError('{}: the output of f ({}) must be an xgrad.ndarray or a '
                                'tuple/list of them, but its output {} is a {}'.format(
                                    what, _name(f), j, type(y).__name__))
    else:
        raise TypeError('{}: the output of f ({}) must be an xgrad.ndarray or a '
                        'non-empty tuple/list of them, not {}'.format(
                            what, _name(f), 'an empty ' + type(result).__name__
                            if isinstance(result, (tuple, list)) else
                            'a ' + type(result).__name__))
    if float_only:
        for j, y in enumerate(ys):
            if y.dtype.kind != 'f':
                raise DtypeError('{}: output {} of f ({}) has dtype {}; only float '
                                 'outputs can be differentiated'.format(
                                     what, j, _name(f), y.dtype))
    return ys, single


# ---------------------------------------------------------------------------
# The transform's graph

def _release(context, bp):
    try:
        context.release_backprop_id(bp)
    except XgradError:  # already released (e.g. by the user): nothing to do
        pass


class _Graph:
    """The backprop ID one transform records ``f`` on: a fresh one (released
    by ``close``) or the user's ``backprop_id``."""

    def __init__(self, primals, backprop_id, what):
        context = primals[0].device.context
        if backprop_id is None:
            self.bp = context.make_backprop_id('functional.' + what)
            self.owned = True
        else:
            if not isinstance(backprop_id, _core.BackpropId):
                raise TypeError('{}: backprop_id must be an xgrad.BackpropId or None, '
                                'not {}'.format(what, type(backprop_id).__name__))
            if backprop_id.context is not context:
                raise ContextError('{}: backprop_id {!r} belongs to another context than '
                                   'the primals'.format(what, backprop_id))
            context._check_valid_backprop_id(backprop_id)
            self.bp = backprop_id
            self.owned = False
        self.context = context

    def mode(self):
        """The transform's graph records even inside the user's
        ``no_backprop_mode`` (the user's graphs follow the modes)."""
        return _core.force_backprop_mode(self.bp)

    @contextlib.contextmanager
    def recording(self):
        """``mode()`` for the transform's whole computation, and the graph
        released at the end, also on an error."""
        try:
            with self.mode():
                yield
        finally:
            self.close()

    def attach(self, xs):
        """Fresh views of ``xs``, grad-required on the transform's graph (the
        views keep the primals' other graphs)."""
        out = []
        for x in xs:
            v = x.view()
            v.require_grad(self.bp)
            out.append(v)
        return out

    def detach(self, a):
        """``a`` without its node on the transform's graph (if it has one)."""
        if a is not None and a.is_backprop_required(self.bp):
            return a.as_grad_stopped([self.bp])
        return a

    def grad(self, outputs, inputs, seeds, keep):
        return _core.grad(list(outputs), list(inputs), self.bp,
                          enable_double_backprop=keep, grad_outputs=list(seeds))

    def close(self):
        if self.owned:
            _release(self.context, self.bp)
            self.owned = False


def _zeros(shape, dtype, device):
    return _ops.zeros(shape, dtype, device=device)


def _filled(gs, like):
    """``gs`` with each None replaced by zeros like the matching ``like``."""
    return [_zeros(x.shape, x.dtype, x.device) if g is None else g
            for g, x in zip(gs, like)]


def _jacobian_of(graph, y, xps, keep_last, differentiable=False):
    """The Jacobian of ``y`` (on ``graph``) with respect to each of ``xps``:
    a list with one array of shape ``y.shape + x.shape`` per x, by one
    backward pass per element of ``y``. The graph is kept for later passes
    (double backprop) except by the last pass when ``keep_last`` is False.
    ``differentiable``: the result is differentiated again on ``graph``
    (``hessian``), so it is assembled by recorded ops; otherwise, where no
    row is on any other graph, the rows are stacked as raw data (no op)."""
    m = y.size
    if m == 0:
        return [_zeros(y.shape + x.shape, x.dtype, x.device) for x in xps]
    device = y.device
    if device.is_native:  # seeds: views of one identity matrix, no op per row
        eye = numpy.eye(m, dtype=y.dtype)
        seeds = [_core._array_of(eye[k].reshape(y.shape), device) for k in range(m)]
    else:
        eye = _ops.eye(m, dtype=y.dtype, device=device)
        seeds = [eye[k].reshape(y.shape) for k in range(m)]
    rows = [[] for _ in xps]
    for k in range(m):
        gs = graph.grad([y], xps, [seeds[k]], keep=keep_last or k < m - 1)
        for j, g in enumerate(_filled(gs, xps)):
            rows[j].append(g)
    out = []
    bp = graph.bp
    for x, r in zip(xps, rows):
        shape = y.shape + x.shape
        if m == 1:
            out.append(r[0].reshape(shape))
        elif differentiable or any(b is not bp for g in r for b in g._backprop_ids()):
            out.append(_ops.stack(r).reshape(shape))
        else:
            data = x.device.xp.stack([_core._raw_data(g) for g in r])
            out.append(_core._array_of(data.reshape(shape), x.device))
    return out


# ---------------------------------------------------------------------------
# The transforms

def vjp(f: Callable[..., Any], *primals: _core.ndarray,
        backprop_id: Optional[_core.BackpropId] = None) -> Tuple[Arrays, 'VJPFunction']:
    """``(outputs, vjp_fn)``: ``f(*primals)`` and the function that maps
    cotangents (one per output of ``f``, shaped like it; a single array if
    ``f`` returned one) to the vector-Jacobian products, a tuple with one
    array per primal (zeros where an output does not depend on it).

    ``vjp_fn(cotangents, retain_graph=True)`` may be called any number of
    times; ``retain_graph=False`` frees the recorded graph (the last call).
    The private graph lives as long as ``vjp_fn``. See the module docstring
    for ``backprop_id`` and nesting.
    """
    what = 'vjp'
    _check_callable(f, what)
    xs = _check_primals(primals, 'primals', what)
    graph = _Graph(xs, backprop_id, what)
    try:
        with graph.mode():
            xps = graph.attach(xs)
            ys, single = _outputs(f(*xps), f, what)
            outputs = tuple(graph.detach(y) for y in ys)
    except BaseException:
        graph.close()
        raise
    fn = VJPFunction(graph, ys, xps, single)
    return (outputs[0] if single else outputs), fn


class VJPFunction:
    """The ``vjp_fn`` of :func:`vjp` (called with cotangents)."""

    def __init__(self, graph, ys, xps, single):
        self._graph = graph
        self._ys = ys
        self._xps = xps
        self._single = single
        self._freed = False
        if graph.owned:
            self._finalizer = weakref.finalize(self, _release, graph.context, graph.bp)
            graph.owned = False  # the finalizer releases it

    def __call__(self, cotangents: Union[_core.ndarray, Sequence[Optional[_core.ndarray]]],
                 retain_graph: bool = True) -> Tuple[_core.ndarray, ...]:
        """The vector-Jacobian products for ``cotangents`` (one per output of
        ``f``; None for an output that does not enter), a tuple with one
        array per primal."""
        what = 'vjp_fn'
        if self._freed:
            raise GradientError('vjp_fn: the graph of f was freed by an earlier call with '
                                'retain_graph=False')
        cts, _ = _as_tuple(cotangents, 'cotangents', what)
        _check_like(cts, self._ys, 'cotangents', 'outputs', what, allow_none=True)
        for j, (c, y) in enumerate(zip(cts, self._ys)):
            if c is not None and y.dtype.kind != 'f':
                raise DtypeError('vjp_fn: output {} of f has dtype {}, which has no '
                                 'derivative; its cotangent must be None'.format(j, y.dtype))
        pairs = [(y, c) for y, c in zip(self._ys, cts) if c is not None]
        graph = self._graph
        with graph.mode():
            if pairs:
                gs = graph.grad([y for y, _ in pairs], self._xps, [c for _, c in pairs],
                                keep=retain_graph)
            else:
                gs = [None] * len(self._xps)
            result = tuple(graph.detach(g) for g in _filled(gs, self._xps))
        if not retain_graph:
            self._freed = True
            self._ys = self._xps = None
            self._finalizer()
        return result


def jvp(f: Callable[..., Any], primals: _Inputs, tangents: _Inputs, *,
        backprop_id: Optional[_core.BackpropId] = None) -> Tuple[Arrays, Any]:
    """``(outputs, jvp_out)``: ``f(*primals)`` and the Jacobian-vector
    product ``J t`` for ``tangents`` (one per primal, shaped like it),
    shaped like ``f``'s output (a single array if ``f`` returned one; None
    for a non-float output). ``primals`` and ``tangents``: tuples/lists of
    arrays, or one array each. Computed by the double-vjp trick (module
    docstring)."""
    what = 'jvp'
    xs, ts, _ = _primals_and_vectors(f, primals, tangents, 'tangents', what)
    graph = _Graph(xs, backprop_id, what)
    with graph.recording():
        xps = graph.attach(xs)
        ys, single = _outputs(f(*xps), f, what)
        floats = [j for j, y in enumerate(ys) if y.dtype.kind == 'f']
        us = [_zeros(ys[j].shape, ys[j].dtype, ys[j].device) for j in floats]
        for u in us:
            u.require_grad(graph.bp)
        jv = [None] * len(ys)
        if floats:
            gs = graph.grad([ys[j] for j in floats], xps, us, keep=True)
            pairs = [(g, t) for g, t in zip(gs, ts) if g is not None]
            if pairs:
                dus = graph.grad([g for g, _ in pairs], us, [t for _, t in pairs],
                                 keep=False)
            else:
                dus = [None] * len(us)
            for j, du in zip(floats, _filled(dus, us)):
                jv[j] = graph.detach(du)
        outputs = tuple(graph.detach(y) for y in ys)
    if single:
        return outputs[0], jv[0]
    return outputs, tuple(jv)


def _nest(table, single_out, single_in):
    """``table[i][j]`` (output i, input j) as torch does: the levels of a
    single output / a single input dropped."""
    rows = [t[0] if single_in else tuple(t) for t in table]
    return rows[0] if single_out else tuple(rows)


def jacobian(f: Callable[..., Any], *inputs: _core.ndarray,
             backprop_id: Optional[_core.BackpropId] = None) -> Any:
    """The Jacobian of ``f`` at ``inputs``: for output ``y`` and input ``x``
    an array of shape ``y.shape + x.shape``; a tuple over the inputs when
    there are several, nested in a tuple over the outputs when ``f``
    returns a tuple/list (``torch.autograd.functional.jacobian``'s layout).
    Reverse mode: one backward pass per output element."""
    what = 'jacobian'
    _check_callable(f, what)
    xs = _check_primals(inputs, 'inputs', what)
    graph = _Graph(xs, backprop_id, what)
    with graph.recording():
        xps = graph.attach(xs)
        ys, single = _outputs(f(*xps), f, what, float_only=True)
        table = []
        for i, y in enumerate(ys):
            js = _jacobian_of(graph, y, xps, keep_last=i < len(ys) - 1)
            table.append([graph.detach(j) for j in js])
    return _nest(table, single, len(xs) == 1)


def hessian(f: Callable[..., Any], *inputs: _core.ndarray,
            backprop_id: Optional[_core.BackpropId] = None) -> Any:
    """The Hessian of ``f`` at ``inputs``: for output ``y`` and inputs
    ``x_j``, ``x_k`` an array of shape ``y.shape + x_j.shape + x_k.shape``
    (the Jacobian of the Jacobian, as ``torch.func.hessian``); nested in
    tuples over j and k when there are several inputs, and over the outputs
    when ``f`` returns a tuple/list."""
    what = 'hessian'
    _check_callable(f, what)
    xs = _check_primals(inputs, 'inputs', what)
    graph = _Graph(xs, backprop_id, what)
    with graph.recording():
        xps = graph.attach(xs)
        ys, single = _outputs(f(*xps), f, what, float_only=True)
        table = []
        for y in ys:
            first = _jacobian_of(graph, y, xps, keep_last=True, differentiable=True)
            table.append([[graph.detach(h) for h in _jacobian_of(graph, j, xps, True)]
                          for j in first])
    single_in = len(xs) == 1
    rows = [t[0][0] if single_in else tuple(tuple(r) for r in t) for t in table]
    return rows[0] if single else tuple(rows)


def hvp(f: Callable[..., Any], primals: _Inputs, v: _Inputs, *,
        backprop_id: Optional[_core.BackpropId] = None) -> Tuple[_core.ndarray, Any]:
    """``(output, hvp)``: ``f(*primals)``, which must be a single-element
    float array, and the Hessian of ``f`` times ``v`` (one vector per primal,
    shaped like it), one array per primal (a single array when ``primals``
    is one array). Two backward passes: the gradient with double backprop,
    then its vector-Jacobian product with ``v``."""
    what = 'hvp'
    xs, vs, single_in = _primals_and_vectors(f, primals, v, 'v', what)
    graph = _Graph(xs, backprop_id, what)
    with graph.recording():
        xps = graph.attach(xs)
        ys, single = _outputs(f(*xps), f, what, float_only=True)
        if not single or ys[0].size != 1:
            raise DimensionError(
                'hvp: f ({}) must return one single-element array, not {}'.format(
                    _name(f), 'a tuple/list of {} arrays'.format(len(ys)) if not single
                    else 'an array of shape {}'.format(ys[0].shape)))
        y = ys[0]
        gs = graph.grad([y], xps, [_ones_like(y)], keep=True)
        pairs = [(g, w) for g, w in zip(gs, vs) if g is not None]
        if pairs:
            hs = graph.grad([g for g, _ in pairs], xps, [w for _, w in pairs],
                            keep=False)
        else:
            hs = [None] * len(xps)
        hs = tuple(graph.detach(h) for h in _filled(hs, xps))
        output = graph.detach(y)
    return output, (hs[0] if single_in else hs)


def _ones_like(y):
    return _ops.ones(y.shape, y.dtype, device=y.device)

