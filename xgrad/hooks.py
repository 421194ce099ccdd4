"""Op hooks: code that runs around every op's forward and backward.

``with xgrad.op_hooks(hook, ...):`` (or ``with hook:``) makes each hook see
every op run in this thread: native ops, Python ``FunctionNode``s and the
ops Chainer grafts through ``_function_node_forward``. A hook is any object
with some of these methods (``OpHook`` gives empty ones to override)::

    forward_preprocess(op, inputs, outputs)    # outputs is None
    forward_postprocess(op, inputs, outputs)
    backward_preprocess(op, inputs, outputs)   # outputs is None
    backward_postprocess(op, inputs, outputs)

``op`` is the op node (``op.name`` is the op's name). In forward,
``inputs`` and ``outputs`` are the op's xgrad arrays; in backward,
``inputs`` are the gradients flowing in (one per op output, None where
none flows) and ``outputs`` the gradients the op computed (one per op
input, None where none was asked for). Scopes nest (outer hooks run first)
and are per thread; while no scope is active in any thread an op pays one
integer test for all of this.

``with xgrad.detect_anomaly():`` records the Python stack of every op's
forward and makes a backward that turns finite gradients into NaN or inf
raise ``AnomalyError`` with that stack.
"""

import sys
import time

from xgrad import _op_hooks
from xgrad._errors import XgradError

__all__ = ['OpHook', 'op_hooks', 'detect_anomaly', 'TimerHook', 'PrintHook']

_HOOK_METHODS = ('forward_preprocess', 'forward_postprocess',
                 'backward_preprocess', 'backward_postprocess')


class _Silent:
    """Stands in for a method a hook does not define."""

    def __call__(self, op, inputs, outputs):
        pass


class _Adapted:
    """A hook object with all four methods: the missing ones do nothing."""

    def __init__(self, hook):
        self.hook = hook
        for method in _HOOK_METHODS:
            setattr(self, method, getattr(hook, method, _SILENT))


_SILENT = _Silent()


class _OpScope:
    """One active scope (of op hooks, or of anomaly detection) in one thread."""

    def __init__(self, hooks, anomaly):
        self._hooks = hooks
        self._anomaly = anomaly
        self._tokens = []

    def __enter__(self):
        self._tokens.append(_op_hooks._enter_op_scope(self._hooks, self._anomaly))
        return self

    def __exit__(self, *exc):
        _op_hooks._exit_op_scope(self._tokens.pop(), self._anomaly)
        return False


def op_hooks(*hooks: object) -> '_OpScope':
    """A context manager that runs ``hooks`` around every op of this thread
    (see the module docstring for what a hook gets)."""
    checked = []
    for i, hook in enumerate(hooks):
        if not any(callable(getattr(hook, m, None)) for m in _HOOK_METHODS):
            raise TypeError(
                'op_hooks(): hook {} ({!r}) has none of the methods {}'.format(
                    i, hook, ', '.join(_HOOK_METHODS)))
        checked.append(hook if all(callable(getattr(hook, m, None))
                                   for m in _HOOK_METHODS) else _Adapted(hook))
    return _OpScope(tuple(checked), False)


def detect_anomaly() -> '_OpScope':
    """A context manager under which each op's forward keeps its Python
    stack and a backward that makes NaN or inf from finite output gradients
    raises ``xgrad.AnomalyError`` naming the op, the input, the backprop ID
    and that stack. It costs a stack capture per op and a finiteness check
    per gradient (README, "Gradient hooks": measured)."""
    return _OpScope((), True)


class OpHook:
    """A base class for op hooks: the four methods do nothing; ``with hook:``
    installs the hook in this thread like ``op_hooks(hook)``."""

    name = 'OpHook'

    def __enter__(self):
        scope = op_hooks(self)
        scope.__enter__()
        self.__dict__.setdefault('_scopes', []).append(scope)
        return self

    def __exit__(self, *exc):
        self._scopes.pop().__exit__(*exc)
        return False

    def forward_preprocess(self, op, inputs, outputs):
        pass

    def forward_postprocess(self, op, inputs, outputs):
        pass

    def backward_preprocess(self, op, inputs, outputs):
        pass

    def backward_postprocess(self, op, inputs, outputs):
        pass


class TimerHook(OpHook):
    """Times every op's forward and backward on the host clock
    (``time.perf_counter``; GPU work is waited for with the device's
    synchronize before each reading, so the times include it).

    ``call_history`` holds ``(name, 'forward' | 'backward', seconds)`` per
    call; ``summary()`` gives per op name the calls and total time of each
    direction; ``print_report()`` prints them as a table. An op that runs
    inside another op's backward (double backprop) is timed on its own and
    also counts in the outer op's time; ``total_time()`` counts outermost
    calls only."""

    name = 'TimerHook'
    _UNITS = {'sec': 1.0, 'ms': 1e3, 'us': 1e6, 'ns': 1e9}

    def __init__(self):
        self.call_history = []
        self._running = []
        self._total_time = 0.0

    @staticmethod
    def _now(arrays):
        for a in arrays:
            if a is not None and not a.device.is_native:
                a.device.synchronize()
                break
        return time.perf_counter()

    def _start(self, arrays):
        self._running.append(self._now(arrays))

    def _stop(self, op, direction, arrays):
        elapsed = self._now(arrays) - self._running.pop()
        self.call_history.append((op.name, direction, elapsed))
        if not self._running:
            self._total_time += elapsed

    def forward_preprocess(self, op, inputs, outputs):
        self._start(inputs)

    def forward_postprocess(self, op, inputs, outputs):
        self._stop(op, 'forward', outputs)

    def backward_preprocess(self, op, inputs, outputs):
        self._start(inputs)

    def backward_postprocess(self, op, inputs, outputs):
        self._stop(op, 'backward', outputs)

    def total_time(self):
        """Seconds spent in outermost op calls, forward and backward."""
        return self._total_time

    def summary(self):
        """``{name: {'forward_time', 'forward_calls', 'backward_time',
        'backward_calls', 'elapsed_time', 'occurrence'}}`` in order of first
        call; the last two are Chainer's keys (both directions together)."""
        out = {}
        for name, direction, elapsed in self.call_history:
            row = out.setdefault(name, {
                'forward_time': 0.0, 'forward_calls': 0, 'backward_time': 0.0,
                'backward_calls': 0, 'elapsed_time': 0.0, 'occurrence': 0})
            row[direction + '_time'] += elapsed
            row[direction + '_calls'] += 1
            row['elapsed_time'] += elapsed
            row['occurrence'] += 1
        return out

    @classmethod
    def _unit_for(cls, seconds):
        for unit in ('sec', 'ms', 'us'):
            if seconds * cls._UNITS[unit] >= 1:
                return unit
        return 'ns'

    def print_report(self, unit='auto', file=None):
        """Print one row per op: calls, total and mean time of forward and
        backward. ``unit``: 'sec', 'ms', 'us', 'ns', 'auto' (one unit fitting
        the largest total) or 'auto_foreach' (a unit per cell)."""
        file = sys.stdout if file is None else file
        if unit not in self._UNITS and unit not in ('auto', 'auto_foreach'):
            raise XgradError("print_report(): unit must be one of 'sec', 'ms', 'us', "
                             "'ns', 'auto', 'auto_foreach', not {!r}".format(unit))
        summary = self.summary()
        if unit == 'auto':
            largest = max([max(r['forward_time'], r['backward_time'])
                           for r in summary.values()] or [0.0])
            unit = self._unit_for(largest)

        def fmt(seconds):
            u = self._unit_for(seconds) if unit == 'auto_foreach' else unit
            return '{:.2f}{}'.format(seconds * self._UNITS[u], u)

        rows = [('Op', 'Forward', 'Calls', 'Mean', 'Backward', 'Calls', 'Mean')]
        for name, r in summary.items():
            fc, bc = r['forward_calls'], r['backward_calls']
            rows.append((name, fmt(r['forward_time']) if fc else '-', str(fc),
                         fmt(r['forward_time'] / fc) if fc else '-',
                         fmt(r['backward_time']) if bc else '-', str(bc),
                         fmt(r['backward_time'] / bc) if bc else '-'))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            file.write('  '.join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths))).rstrip() + '\n')
        if hasattr(file, 'flush'):
            file.flush()


class PrintHook(OpHook):
    """Prints, before each op's forward and backward, the op's name and a
    summary of each array it gets (shape, dtype, device, min/max/mean), as
    Chainer's PrintHook does for its functions."""

    name = 'PrintHook'

    def __init__(self, file=None, end='\n', flush=True):
        self.file = file
        self.end = end
        self.flush = flush

    @staticmethod
    def describe(a):
        """One line about array ``a`` (or None)."""
        if a is None:
            return '(none)'
        data = a.to_numpy() if a.device.is_native else a.to_device('native').to_numpy()
        text = 'shape={} dtype={} device={}'.format(
            tuple(a.shape), a.dtype.name, a.device.name)
        if data.size and data.dtype.kind in 'biuf':
            text += ' min={} max={} mean={}'.format(
                data.min(), data.max(), data.astype('float64').mean())
        return text

    def _print(self, title, op, groups):
        out = sys.stdout if self.file is None else self.file
        out.write('{}\t{}{}'.format(title, op.name, self.end))
        for label, arrays in groups:
            out.write(label + self.end)
            for a in arrays:
                out.write('  ' + self.describe(a) + self.end)
        if self.flush and hasattr(out, 'flush'):
            out.flush()

    def forward_preprocess(self, op, inputs, outputs):
        self._print('forward', op, [('input data', inputs)])

    def backward_preprocess(self, op, inputs, outputs):
        self._print('backward', op, [('output gradient', inputs)])
