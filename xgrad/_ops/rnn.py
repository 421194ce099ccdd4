"""ChainerX's recurrent-network routines: the LSTM cells (``lstm``,
``slstm``, ``tree_lstm``) and the multi-layer, multi-step networks
(``n_step_lstm``, ``n_step_gru``, ``n_step_rnn`` and their bidirectional
``n_step_bi*`` forms), with ChainerX's signatures and results.

Everything here is a composition of differentiable xgrad ops (``linear``,
``tanh``, ``sigmoid``, slicing, ``concatenate``, ``stack``), as ChainerX's own
CPU implementation is, so first and second derivatives come with those ops.

Gate layouts (ChainerX's, which are Chainer's):

* ``lstm(c, x)`` and ``slstm``: ``x`` of shape (B, 4H, ...) holds the gates
  interleaved; ``x.reshape(B, H, 4, ...)[:, :, g]`` is gate g, in the order
  a (cell input, tanh), i (input), f (forget), o (output).
* ``tree_lstm(c_1, ..., c_n, x)``: ``x`` of shape (B, (3 + n)H, ...) holds
  them in blocks; ``x.reshape(B, 3 + n, H, ...)[:, g]`` in the order a, i,
  o, f_1, ..., f_n.
* ``n_step_lstm``: ``ws[k]`` is 8 matrices, w0..w3 applied to the input for
  the gates i, f, a, o, w4..w7 to the hidden state for the same gates;
  ``bs[k]`` the 8 matching biases. ``n_step_gru``: 6, w0..w2 (input) and
  w3..w5 (hidden) for the reset gate r, the update gate z and the new state.
  ``n_step_rnn``: 2, w0 (input) and w1 (hidden). Layer ``l`` and direction
  ``d`` (0 forward, 1 backward) use ``ws[l * n_directions + d]``.

The sequences: ``xs`` is a list of time steps, ``xs[t]`` of shape (B_t, I);
a step with fewer rows than the state updates only the first B_t rows of it
(sequences sorted by decreasing length, as Chainer packs them). ``hx`` and
``cx`` are (n_layers * n_directions, B, H). The results are
``(hy, cy, ys)`` for LSTMs and ``(hy, ys)`` for the others, ``ys[t]`` of
shape (B_t, n_directions * H) and ``ys`` a list, as in ChainerX.
"""

from typing import List, Tuple

import numpy

from xgrad import _core
from xgrad._ops import _args
from xgrad._ops.contraction import linear
from xgrad._ops.elementwise import relu, sigmoid, tanh
from xgrad._ops.manipulation import reshape
from xgrad._ops.registry import F16, F32, OpInfo, Sample, register, within
from xgrad._ops.shaping import concatenate, stack

__all__ = ['lstm', 'slstm', 'tree_lstm', 'n_step_lstm', 'n_step_bilstm',
           'n_step_gru', 'n_step_bigru', 'n_step_rnn', 'n_step_birnn']


# ---------------------------------------------------------------------------
# Checks

def _float_operands(op, names, arrays):
    """The arrays as xgrad arrays of one float dtype (ChainerX's DtypeError
    otherwise), on one device."""
    arrays = [_args.as_array(a, n, op=op) for n, a in zip(names, arrays)]
    for n, a in zip(names, arrays):
        _args.require_float(a, op, n)
    for n, a in zip(names[1:], arrays[1:]):
        if a.dtype != arrays[0].dtype:
            raise _args.DtypeError('{}: {} and {} must have the same dtype, not {} and '
                                   '{}'.format(op, names[0], n, arrays[0].dtype, a.dtype))
    _args.same_device(arrays, op)
    return arrays


def _check_gate_input(op, c_name, c, x_name, x, n_gates):
    """x is (B_x, n_gates * H, ...) against c of shape (B, H, ...)."""
    if c.ndim < 2 or x.ndim != c.ndim or x.shape[2:] != c.shape[2:] \
            or x.shape[1] != n_gates * c.shape[1]:
        raise _args.DimensionError(
            '{}: {} of shape {} does not fit {} of shape {}: it must be (batch, {} * {}'
            '{})'.format(op, x_name, x.shape, c_name, c.shape, n_gates,
                         c.shape[1] if c.ndim > 1 else 'H',
                         ''.join(', {}'.format(n) for n in c.shape[2:])))


def _gates(x, n, interleaved):
    """The n gates of x (B, n * H, ...), each (B, H, ...)."""
    b, rest = x.shape[0], x.shape[2:]
    h = x.shape[1] // n
    if interleaved:
        x = reshape(x, (b, h, n) + rest)
        return [x[(slice(None), slice(None), g)] for g in range(n)]
    x = reshape(x, (b, n, h) + rest)
    return [x[(slice(None), g)] for g in range(n)]


# ---------------------------------------------------------------------------
# Cells

def lstm(c, x) -> Tuple[_core.ndarray, _core.ndarray]:
    """One LSTM step: ``c_new = tanh(a) * sigmoid(i) + sigmoid(f) * c`` and
    ``h = sigmoid(o) * tanh(c_new)``, the gates interleaved in ``x`` (see the
    module docstring). Returns ``(c_new, h)``.

    ``x`` may have fewer rows than ``c`` (shorter sequences have ended): the
    rows of ``c`` past ``len(x)`` pass to ``c_new`` unchanged and ``h`` has
    ``len(x)`` rows. ``c`` and ``x`` must share one float dtype."""
    op = 'lstm'
    c, x = _float_operands(op, ('c', 'x'), (c, x))
    _check_gate_input(op, 'c', c, 'x', x, 4)
    if x.shape[0] > c.shape[0]:
        raise _args.DimensionError(
            'lstm: x has {} rows, more than c ({}); the batch size of x must be at most '
            'that of c'.format(x.shape[0], c.shape[0]))
    a, i, f, o = _gates(x, 4, interleaved=True)
    rows = x.shape[0]
    c_head = c if rows == c.shape[0] else c[:rows]
    c_new = tanh(a) * sigmoid(i) + sigmoid(f) * c_head
    h = sigmoid(o) * tanh(c_new)
    if rows < c.shape[0]:
        c_new = concatenate([c_new, c[rows:]], 0)
    return c_new, h


def slstm(c_prev1, c_prev2, x1, x2) -> Tuple[_core.ndarray, _core.ndarray]:
    """The S-LSTM cell of two children: ``c = tanh(a1) sigmoid(i1) +
    tanh(a2) sigmoid(i2) + sigmoid(f1) c_prev1 + sigmoid(f2) c_prev2`` and
    ``h = sigmoid(o1 + o2) tanh(c)``, the gates of each x interleaved as in
    ``lstm``. Returns ``(c, h)``."""
    op = 'slstm'
    c1, c2, x1, x2 = _float_operands(op, ('c_prev1', 'c_prev2', 'x1', 'x2'),
                                     (c_prev1, c_prev2, x1, x2))
    for c_name, c, x_name, x in (('c_prev1', c1, 'x1', x1), ('c_prev2', c2, 'x2', x2)):
        _check_gate_input(op, c_name, c, x_name, x, 4)
        if x.shape[0] != c.shape[0]:
            raise _args.DimensionError('slstm: {} of shape {} and {} of shape {} differ in '
                                       'batch size'.format(x_name, x.shape, c_name, c.shape))
    if c1.shape != c2.shape:
        raise _args.DimensionError('slstm: c_prev1 of shape {} and c_prev2 of shape {} '
                                   'differ'.format(c1.shape, c2.shape))
    a1, i1, f1, o1 = _gates(x1, 4, interleaved=True)
    a2, i2, f2, o2 = _gates(x2, 4, interleaved=True)
    c = (tanh(a1) * sigmoid(i1) + tanh(a2) * sigmoid(i2)
         + sigmoid(f1) * c1 + sigmoid(f2) * c2)
    h = sigmoid(o1 + o2) * tanh(c)
    return c, h


def tree_lstm(*inputs) -> Tuple[_core.ndarray, _core.ndarray]:
    """The N-ary tree LSTM cell, ``tree_lstm(c_1, ..., c_n, x)``: ``c =
    tanh(a) sigmoid(i) + sum_k sigmoid(f_k) c_k`` and ``h = sigmoid(o)
    tanh(c)``, the gates of ``x`` in blocks (a, i, o, f_1..f_n; see the
    module docstring). Returns ``(c, h)``."""
    op = 'tree_lstm'
    if len(inputs) < 2:
        raise TypeError('tree_lstm takes the cells of at least one child and x, got {} '
                        'argument(s)'.format(len(inputs)))
    names = tuple('c_{}'.format(k + 1) for k in range(len(inputs) - 1)) + ('x',)
    arrays = _float_operands(op, names, inputs)
    cs, x = arrays[:-1], arrays[-1]
    for name, c in zip(names, cs):
        if c.shape != cs[0].shape:
            raise _args.DimensionError('tree_lstm: {} of shape {} differs from c_1 of shape '
                                       '{}'.format(name, c.shape, cs[0].shape))
    _check_gate_input(op, 'c_1', cs[0], 'x', x, 3 + len(cs))
    if x.shape[0] != cs[0].shape[0]:
        raise _args.DimensionError('tree_lstm: x of shape {} and c_1 of shape {} differ '
                                   'in batch size'.format(x.shape, cs[0].shape))
    gates = _gates(x, 3 + len(cs), interleaved=False)
    a, i, o, fs = gates[0], gates[1], gates[2], gates[3:]
    c = tanh(a) * sigmoid(i)
    for c_k, f_k in zip(cs, fs):
        c = c + sigmoid(f_k) * c_k
    h = sigmoid(o) * tanh(c)
    return c, h


# ---------------------------------------------------------------------------
# Multi-step networks

class _Cell:
    """One kind of recurrent unit: how many weight matrices it takes (half
    for the input, half for the hidden state), how it joins them once per
    layer and direction, and one time step."""
    n_weights = 0
    has_cell_state = False

    def join(self, ws, bs):
        return ws, bs

    def step(self, x, h, c, params):
        raise NotImplementedError


class _LstmCell(_Cell):
    n_weights = 8
    has_cell_state = True

    def join(self, ws, bs):
        # Interleave the gates as lstm() reads them: rows 4j + (a, i, f, o)
        # from w2, w0, w1, w3 (and w6, w4, w5, w7 for the hidden state).
        def interleave(mats):
            joined = stack([mats[2], mats[0], mats[1], mats[3]], 1)
            return reshape(joined, (joined.shape[0] * 4,) + joined.shape[2:])
        return ((interleave(ws[:4]), interleave(bs[:4])),
                (interleave(ws[4:]), interleave(bs[4:])))

    def step(self, x, h, c, params):
        (xw, xb), (hw, hb) = params
        return lstm(c, linear(x, xw, xb) + linear(h, hw, hb))[::-1]


class _GruCell(_Cell):
    n_weights = 6

    def join(self, ws, bs):
        return ((concatenate(ws[:3], 0), concatenate(bs[:3], 0)),
                (concatenate(ws[3:], 0), concatenate(bs[3:], 0)))

    def step(self, x, h, c, params):
        (xw, xb), (hw, hb) = params
        n = h.shape[1]
        gx = linear(x, xw, xb)
        gh = linear(h, hw, hb)
        r = sigmoid(gx[:, :n] + gh[:, :n])
        z = sigmoid(gx[:, n:2 * n] + gh[:, n:2 * n])
        h_bar = tanh(gx[:, 2 * n:] + r * gh[:, 2 * n:])
        return (1 - z) * h_bar + z * h, None


class _RnnCell(_Cell):
    n_weights = 2

    def __init__(self, activation):
        self.activation = {'tanh': tanh, 'relu': relu}[activation]

    def step(self, x, h, c, params):
        ws, bs = params
        return self.activation(linear(x, ws[0], bs[0]) + linear(h, ws[1], bs[1])), None


def _run_direction(cell, xs, h, c, params):
    """The steps over ``xs`` in order from state (h, c): the final state and
    the outputs. A step of B_t < B rows updates the first B_t rows."""
    ys = []
    for x in xs:
        rows = x.shape[0]
        if rows == h.shape[0]:
            h, c = cell.step(x, h, c, params)
            ys.append(h)
            continue
        h_new, c_new = cell.step(x, h[:rows], None if c is None else c[:rows], params)
        ys.append(h_new)
        h = concatenate([h_new, h[rows:]], 0)
        if c is not None:
            c = concatenate([c_new, c[rows:]], 0)
    return h, c, ys


def _check_n_step(op, cell, n_layers, n_dirs, hx, cx, ws, bs, xs):
    n_layers = _args.int_arg(n_layers, 'n_layers', op)
    if n_layers < 1:
        raise ValueError('{}: n_layers must be at least 1, not {}'.format(op, n_layers))
    hx = _args.as_array(hx, 'hx', op=op)
    _args.require_float(hx, op, 'hx')
    if hx.ndim != 3 or hx.shape[0] != n_layers * n_dirs:
        raise _args.DimensionError(
            '{}: hx must have shape (n_layers * {} = {}, batch, hidden), not {}'.format(
                op, n_dirs, n_layers * n_dirs, hx.shape))
    hidden = hx.shape[2]
    if cx is not None:
        cx = _args.as_array(cx, 'cx', hx, op)
        if cx.shape != hx.shape:
            raise _args.DimensionError('{}: cx of shape {} differs from hx of shape '
                                       '{}'.format(op, cx.shape, hx.shape))
        if cx.dtype != hx.dtype:
            raise _args.DtypeError('{}: cx has dtype {}, hx {}'.format(op, cx.dtype, hx.dtype))
    xs = [_args.as_array(x, 'xs[{}]'.format(t), hx, op) for t, x in enumerate(xs)]
    if not xs:
        raise ValueError('{}: xs is empty; it needs at least one time step'.format(op))
    for t, x in enumerate(xs):
        if x.ndim != 2 or x.shape[0] > hx.shape[1]:
            raise _args.DimensionError(
                '{}: xs[{}] must be (batch, input size) with a batch of at most that of hx '
                '({}), not {}'.format(op, t, hx.shape[1], x.shape))
        if x.shape[1] != xs[0].shape[1]:
            raise _args.DimensionError('{}: xs[{}] has {} features, xs[0] {}'.format(
                op, t, x.shape[1], xs[0].shape[1]))
    ws, bs = list(ws), list(bs)
    for name, group in (('ws', ws), ('bs', bs)):
        if len(group) != n_layers * n_dirs:
            raise ValueError('{}: {} must hold n_layers * {} = {} lists, not {}'.format(
                op, name, n_dirs, n_layers * n_dirs, len(group)))
    half = cell.n_weights // 2
    for k in range(n_layers * n_dirs):
        ws[k] = [_args.as_array(w, 'ws[{}][{}]'.format(k, j), hx, op)
                 for j, w in enumerate(ws[k])]
        bs[k] = [_args.as_array(b, 'bs[{}][{}]'.format(k, j), hx, op)
                 for j, b in enumerate(bs[k])]
        for name, group in (('ws', ws[k]), ('bs', bs[k])):
            if len(group) != cell.n_weights:
                raise ValueError('{}: {}[{}] must hold {} arrays, not {}'.format(
                    op, name, k, cell.n_weights, len(group)))
        layer = k // n_dirs
        in_size = xs[0].shape[1] if layer == 0 else n_dirs * hidden
        for j, (w, b) in enumerate(zip(ws[k], bs[k])):
            want = (hidden, in_size if j < half else hidden)
            if w.shape != want:
                raise _args.DimensionError('{}: ws[{}][{}] must have shape {}, not {}'.format(
                    op, k, j, want, w.shape))
            if b.shape != (hidden,):
                raise _args.DimensionError('{}: bs[{}][{}] must have shape {}, not {}'.format(
                    op, k, j, (hidden,), b.shape))
    _args.same_device([hx, cx] + xs + [a for group in ws + bs for a in group], op)
    return n_layers, hx, cx, ws, bs, xs


# What the n_step functions return: (hy, cy, ys) and (hy, ys), ys a list.
_LSTM_RESULT = Tuple[_core.ndarray, _core.ndarray, List[_core.ndarray]]
_RNN_RESULT = Tuple[_core.ndarray, List[_core.ndarray]]


def _n_step(op, cell, n_dirs, n_layers, hx, cx, ws, bs, xs):
    n_layers, hx, cx, ws, bs, xs = _check_n_step(op, cell, n_layers, n_dirs, hx, cx,
                                                 ws, bs, xs)
    hy, cy = [], []
    for layer in range(n_layers):
        outs = []
        for d in range(n_dirs):
            k = layer * n_dirs + d
            params = cell.join(ws[k], bs[k])
            seq = xs if d == 0 else xs[::-1]
            h, c, ys = _run_direction(cell, seq, hx[k], None if cx is None else cx[k],
                                      params)
            hy.append(h)
            cy.append(c)
            outs.append(ys if d == 0 else ys[::-1])
        xs = outs[0] if n_dirs == 1 else [concatenate(pair, 1) for pair in zip(*outs)]
    if cx is None:
        return stack(hy, 0), xs
    return stack(hy, 0), stack(cy, 0), xs


def n_step_lstm(n_layers, hx, cx, ws, bs, xs) -> _LSTM_RESULT:
    """A stacked LSTM over the steps ``xs``; returns ``(hy, cy, ys)`` (see the
    module docstring for the layouts)."""
    return _n_step('n_step_lstm', _LstmCell(), 1, n_layers, hx, cx, ws, bs, xs)


def n_step_bilstm(n_layers, hx, cx, ws, bs, xs) -> _LSTM_RESULT:
    """A stacked bidirectional LSTM; ``ys[t]`` joins the forward and backward
    outputs, (B_t, 2H). Returns ``(hy, cy, ys)``."""
    return _n_step('n_step_bilstm', _LstmCell(), 2, n_layers, hx, cx, ws, bs, xs)


def n_step_gru(n_layers, hx, ws, bs, xs) -> _RNN_RESULT:
    """A stacked GRU: ``r = sigmoid(W0 x + b0 + W3 h + b3)``, ``z`` likewise
    with W1/W4, ``h~ = tanh(W2 x + b2 + r (W5 h + b5))``, ``h' = (1 - z) h~ +
    z h``. Returns ``(hy, ys)``."""
    return _n_step('n_step_gru', _GruCell(), 1, n_layers, hx, None, ws, bs, xs)


def n_step_bigru(n_layers, hx, ws, bs, xs) -> _RNN_RESULT:
    """A stacked bidirectional GRU; returns ``(hy, ys)``."""
    return _n_step('n_step_bigru', _GruCell(), 2, n_layers, hx, None, ws, bs, xs)


def _rnn_cell(op, activation):
    if activation not in ('tanh', 'relu'):
        raise ValueError("{}: activation must be 'tanh' or 'relu', not {!r}".format(
            op, activation))
    return _RnnCell(activation)


def n_step_rnn(n_layers, hx, ws, bs, xs, activation='tanh') -> _RNN_RESULT:
    """A stacked Elman RNN, ``h' = act(W0 x + b0 + W1 h + b1)`` with ``act``
    ``'tanh'`` or ``'relu'``. Returns ``(hy, ys)``."""
    return _n_step('n_step_rnn', _rnn_cell('n_step_rnn', activation), 1, n_layers, hx,
                   None, ws, bs, xs)


def n_step_birnn(n_layers, hx, ws, bs, xs, activation='tanh') -> _RNN_RESULT:
    """A stacked bidirectional Elman RNN; returns ``(hy, ys)``."""
    return _n_step('n_step_birnn', _rnn_cell('n_step_birnn', activation), 2, n_layers,
                   hx, None, ws, bs, xs)


# ---------------------------------------------------------------------------
# NumPy references (for the registry's forward checks): written per gate with
# the weights as given, in float64, step by step over each row.

def _sig(v):
    return 1 / (1 + numpy.exp(-v))


def _ref_lstm(c, x):
    c64, x64 = c.astype(numpy.float64), x.astype(numpy.float64)
    rows = x.shape[0]
    g = x64.reshape((rows, x.shape[1] // 4, 4) + x.shape[2:])
    a, i, f, o = (g[:, :, k] for k in range(4))
    c_new = c64.copy()
    c_new[:rows] = numpy.tanh(a) * _sig(i) + _sig(f) * c64[:rows]
    h = _sig(o) * numpy.tanh(c_new[:rows])
    return c_new.astype(c.dtype), h.astype(c.dtype)


def _ref_slstm(c1, c2, x1, x2):
    def split(x):
        g = x.astype(numpy.float64).reshape((x.shape[0], x.shape[1] // 4, 4) + x.shape[2:])
        return [g[:, :, k] for k in range(4)]
    a1, i1, f1, o1 = split(x1)
    a2, i2, f2, o2 = split(x2)
    c = (numpy.tanh(a1) * _sig(i1) + numpy.tanh(a2) * _sig(i2)
         + _sig(f1) * c1.astype(numpy.float64) + _sig(f2) * c2.astype(numpy.float64))
    return c.astype(c1.dtype), (_sig(o1 + o2) * numpy.tanh(c)).astype(c1.dtype)


def _ref_tree_lstm(*inputs):
    cs, x = inputs[:-1], inputs[-1]
    n = 3 + len(cs)
    g = x.astype(numpy.float64).reshape((x.shape[0], n, x.shape[1] // n) + x.shape[2:])
    c = numpy.tanh(g[:, 0]) * _sig(g[:, 1])
    for k, ck in enumerate(cs):
        c = c + _sig(g[:, 3 + k]) * ck.astype(numpy.float64)
    return c.astype(x.dtype), (_sig(g[:, 2]) * numpy.tanh(c)).astype(x.dtype)


def _ref_step(kind, x, h, c, w, b, activation):
    def lin(j, v):
        return v @ w[j].T + b[j]
    if kind == 'lstm':
        i = _sig(lin(0, x) + lin(4, h))
        f = _sig(lin(1, x) + lin(5, h))
        a = numpy.tanh(lin(2, x) + lin(6, h))
        o = _sig(lin(3, x) + lin(7, h))
        c = a * i + f * c
        return o * numpy.tanh(c), c
    if kind == 'gru':
        r = _sig(lin(0, x) + lin(3, h))
        z = _sig(lin(1, x) + lin(4, h))
        h_bar = numpy.tanh(lin(2, x) + r * lin(5, h))
        return (1 - z) * h_bar + z * h, None
    v = lin(0, x) + lin(1, h)
    return (numpy.tanh(v) if activation == 'tanh' else numpy.maximum(v, 0)), None


def _ref_n_step(kind, n_dirs, n_layers, hx, cx, ws, bs, xs, activation=None):
    """Each sequence (row) on its own: row r has the steps t with
    len(xs[t]) > r, run forward (and backward) over exactly those."""
    dtype = hx.dtype
    f64 = [numpy.float64]
    hx = hx.astype(*f64)
    cx = None if cx is None else cx.astype(*f64)
    ws = [[w.astype(*f64) for w in group] for group in ws]
    bs = [[b.astype(*f64) for b in group] for group in bs]
    seqs = [[x[r].astype(*f64) for x in xs if x.shape[0] > r] for r in range(hx.shape[1])]
    hy, cy = numpy.array(hx), None if cx is None else numpy.array(cx)
    for layer in range(n_layers):
        new_seqs = []
        for r, seq in enumerate(seqs):
            outs = []
            for d in range(n_dirs):
                k = layer * n_dirs + d
                h, c = hx[k, r], None if cx is None else cx[k, r]
                ys = []
                for x in (seq if d == 0 else seq[::-1]):
                    h, c = _ref_step(kind, x, h, c, ws[k], bs[k], activation)
                    ys.append(h)
                hy[k, r] = h
                if cx is not None:
                    cy[k, r] = c
                outs.append(ys if d == 0 else ys[::-1])
            new_seqs.append([numpy.concatenate(pair) for pair in zip(*outs)])
        seqs = new_seqs
    ys = [numpy.array([seqs[r][t] for r in range(x.shape[0])]).reshape(x.shape[0], -1)
          .astype(dtype) for t, x in enumerate(xs)]
    if cx is None:
        return hy.astype(dtype), ys
    return hy.astype(dtype), cy.astype(dtype), ys


# ---------------------------------------------------------------------------
# Registry

def _n_step_sample(kind, n_dirs, n_layers, hidden, in_size, batches, activation=None):
    """A sample with the arrays flat: hx, (cx), xs..., then per layer and
    direction the weights and the biases."""
    n_w = {'lstm': 8, 'gru': 6, 'rnn': 2}[kind]
    shapes = [(n_layers * n_dirs, batches[0], hidden)] * (2 if kind == 'lstm' else 1)
    shapes += [(b, in_size) for b in batches]
    for layer in range(n_layers):
        for _ in range(n_dirs):
            x_in = in_size if layer == 0 else n_dirs * hidden
            shapes += [(hidden, x_in if j < n_w // 2 else hidden) for j in range(n_w)]
            shapes += [(hidden,)] * n_w
    kw = {} if activation is None else {'activation': activation}
    name = 'L{}-H{}-I{}-B{}'.format(n_layers, hidden, in_size,
                                    '.'.join(map(str, batches)))
    if activation:
        name += '-' + activation
    return Sample(*shapes, name=name, n_layers=n_layers, n_steps=len(batches),
                  n_weights=n_w, **kw)


def _n_step_call(func, arrays, kwargs):
    """Unflatten a sample's arrays into ChainerX's arguments; flatten the
    results into (hy, (cy), *ys)."""
    kw = dict(kwargs)
    n_layers, n_steps, n_w = kw.pop('n_layers'), kw.pop('n_steps'), kw.pop('n_weights')
    lead = 2 if n_w == 8 else 1
    states, xs, rest = arrays[:lead], arrays[lead:lead + n_steps], arrays[lead + n_steps:]
    groups = [rest[k:k + 2 * n_w] for k in range(0, len(rest), 2 * n_w)]
    ws = [g[:n_w] for g in groups]
    bs = [g[n_w:] for g in groups]
    out = func(n_layers, *states, ws, bs, xs, **kw)
    return tuple(out[:-1]) + tuple(out[-1])


def _ref_for(kind, n_dirs):
    def ref(n_layers, hx, *args, activation=None):
        if kind == 'lstm':
            cx, ws, bs, xs = args
        else:
            (ws, bs, xs), cx = args, None
        return _ref_n_step(kind, n_dirs, n_layers, hx, cx, ws, bs, xs, activation)
    return ref


# Composed ops in float16 accumulate rounding over the steps; the gradients
# are compared with float64 differences, so float16 gets a wider tolerance.
_TOL = {F16: (5e-2, 5e-2), F32: (5e-3, 5e-3)}
# Forward: float16 results of several rounded steps (ChainerX's own tests
# allow 1e-2 here).
_FORWARD_TOL = {F16: (1e-2, 1e-2)}

register(OpInfo(
    'lstm', lstm, ref=_ref_lstm,
    samples=[Sample((3, 2), (3, 8)), Sample((4, 2), (2, 8), name='shorter-x'),
             Sample((2, 3, 2), (2, 12, 2), name='trailing-axis'),
             Sample((2, 1), (0, 4), name='empty-x')],
    domain=within(-2, 2), tol=_TOL,
    forward_tol=_FORWARD_TOL, composite=True))

register(OpInfo(
    'slstm', slstm, ref=_ref_slstm,
    samples=[Sample((2, 3), (2, 3), (2, 12), (2, 12)),
             Sample((1, 2), (1, 2), (1, 8), (1, 8))],
    domain=within(-2, 2), tol=_TOL,
    forward_tol=_FORWARD_TOL, composite=True))

register(OpInfo(
    'tree_lstm', tree_lstm, ref=_ref_tree_lstm,
    samples=[Sample((2, 3), (2, 12), name='unary'),
             Sample((2, 3), (2, 3), (2, 15), name='binary'),
             Sample((1, 2), (1, 2), (1, 2), (1, 12), name='ternary')],
    domain=within(-2, 2), tol=_TOL,
    forward_tol=_FORWARD_TOL, composite=True))


def _register_n_step(name, func, kind, n_dirs, activations=(None,)):
    samples = []
    for act in activations:
        samples += [_n_step_sample(kind, n_dirs, 1, 2, 3, (2, 2), act),
                    _n_step_sample(kind, n_dirs, 2, 2, 1, (3, 2, 1), act)]
    register(OpInfo(name, func, ref=_ref_for(kind, n_dirs), samples=samples,
                    call=_n_step_call, tol=_TOL,
                    forward_tol=_FORWARD_TOL, composite=True))


_register_n_step('n_step_lstm', n_step_lstm, 'lstm', 1)
_register_n_step('n_step_bilstm', n_step_bilstm, 'lstm', 2)
_register_n_step('n_step_gru', n_step_gru, 'gru', 1)
_register_n_step('n_step_bigru', n_step_bigru, 'gru', 2)
_register_n_step('n_step_rnn', n_step_rnn, 'rnn', 1, ('tanh', 'relu'))
_register_n_step('n_step_birnn', n_step_birnn, 'rnn', 2, ('tanh', 'relu'))
