# cython: language_level=3
"""Op hooks and anomaly mode, the engine's side of ``xgrad.hooks``.

``xgrad.op_hooks(...)`` and ``xgrad.detect_anomaly()`` enter a scope here
(``_enter_op_scope``); each thread keeps its active hooks and its anomaly
depth in its ``_ThreadState`` (``_context``), and ``_active_op_scopes``
counts the scopes of all threads. Recording (``_function_node``) and the
backward pass (``_backward``) ask ``_op_scope_state()`` for every op: while
no scope is active anywhere (the common case) that is one integer test, and
nothing of this module runs. Inside a scope they call the hooks around the
op's forward and backward, and anomaly mode keeps the Python stack of each
forward (on the op node) to report when a backward turns finite gradients
into NaN or inf.
"""

import sys
import traceback

from xgrad._array cimport ndarray

from xgrad._errors import AnomalyError, XgradError


# ---------------------------------------------------------------------------
# Scopes: op_hooks() and detect_anomaly(), per thread
# ---------------------------------------------------------------------------

# op_hooks() and detect_anomaly() scopes entered in all threads together:
# while it is 0 an op asks no thread state about hooks (_op_scope_state).
_active_op_scopes = 0


def _enter_op_scope(tuple hooks, bint anomaly):
    """Enter an op_hooks (``hooks``) or detect_anomaly scope in this thread;
    returns the token that ``_exit_op_scope`` takes."""
    global _active_op_scopes
    cdef _ThreadState st = _state()
    token = (st, st.op_hooks)
    st.op_hooks = st.op_hooks + hooks
    st.anomaly += anomaly
    _active_op_scopes += 1
    return token


def _exit_op_scope(token, bint anomaly):
    global _active_op_scopes
    cdef _ThreadState st = _state()
    if token[0] is not st:
        raise XgradError('An op_hooks/detect_anomaly scope was exited in a thread '
                         'that did not enter it; op hooks are per thread.')
    st.op_hooks = token[1]
    st.anomaly -= anomaly
    _active_op_scopes -= 1


# ---------------------------------------------------------------------------
# Around forward (called by _function_node's apply functions)
# ---------------------------------------------------------------------------

cdef list _caller_frames():
    """(file, line, function) of each Python frame calling now, outermost
    first: what a traceback shows, kept without the frames themselves."""
    frames = []
    f = sys._getframe(0)
    while f is not None:
        frames.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name, None))
        f = f.f_back
    frames.reverse()
    return frames


cdef void forward_hooks_pre(_ThreadState st, OpNode fn, tuple xs) except *:
    for hook in st.op_hooks:
        hook.forward_preprocess(fn, xs, None)


cdef void forward_hooks_post(_ThreadState st, OpNode fn, tuple xs,
                             tuple outs) except *:
    if st.anomaly:
        # The caller's frames (the engine's Cython functions leave none);
        # source lines are read only if an anomaly is reported.
        fn._forward_stack = _caller_frames()
    for hook in st.op_hooks:
        hook.forward_postprocess(fn, xs, outs)


# ---------------------------------------------------------------------------
# Around backward (called by _backward's pass), and the anomaly check
# ---------------------------------------------------------------------------

cdef void backward_hooks_pre(_ThreadState st, OpNode fn, tuple gys) except *:
    for hook in st.op_hooks:
        hook.backward_preprocess(fn, gys, None)


cdef void backward_hooks_post(_ThreadState st, OpNode fn, BackpropId bp,
                              tuple gys, tuple grads) except *:
    """``grads``: one xgrad array (or None) per input of ``fn``."""
    if st.anomaly:
        _check_anomaly(fn, bp, gys, grads)
    for hook in st.op_hooks:
        hook.backward_postprocess(fn, gys, grads)


cdef bint _all_finite(object arrays):
    for a in arrays:
        if a is not None and not bool((<ndarray>a)._device.xp.isfinite(
                (<ndarray>a)._data).all()):
            return False
    return True


cdef void _check_anomaly(OpNode fn, BackpropId bp, tuple gys,
                         tuple grads) except *:
    """detect_anomaly(): an AnomalyError when ``fn``'s backward made NaN or
    inf from finite output gradients, with the stack of its forward call.
    (On a GPU each check reads one boolean on the host.)"""
    if not _all_finite(gys):
        return
    for i, g in enumerate(grads):
        if g is None or _all_finite((g,)):
            continue
        data = (<ndarray>g)._data
        kind = 'NaN' if bool((<ndarray>g)._device.xp.isnan(data).any()) else 'inf'
        if fn._forward_stack is None:
            where = ('Its forward ran outside detect_anomaly(), so no stack was '
                     'recorded: run the forward inside it too.')
        else:
            where = 'Its forward was called from:\n' + ''.join(
                traceback.format_list(traceback.StackSummary.from_list(fn._forward_stack)))
        raise AnomalyError(
            "{} of op {} on backprop ID '{}' is {} although every output gradient "
            'is finite. {}'.format(
                'The gradient of input {}'.format(i), (<object>fn).name, bp.name, kind,
                where))
