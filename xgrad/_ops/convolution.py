"""N-dimensional convolution: ``conv`` and ``conv_transpose`` (ChainerX's
signatures, plus Chainer's ``dilate`` and ``groups`` as keyword arguments).

Arrays are channel-first: ``x`` is (N, C, d_1, ..., d_n) for n >= 0 spatial
axes. ``conv`` takes weights (out_C, in_C / groups, k_1, ..., k_n),
``conv_transpose`` weights (in_C, out_C / groups, k_1, ..., k_n), as Chainer.

Each of the three kernels below (conv_kernel, conv_transpose_kernel,
conv_grad_weight_kernel) asks the dispatcher (``_conv/dispatch.py``, the
one place that decides; ``xgrad.conv_algorithm`` asks it too) which
algorithm computes its shape, and runs it: im2col + GEMM (the windows
gathered into columns in cache-sized chunks, ``_conv/chunking.py``, one
product per chunk on xgrad's own GEMM or the BLAS) and its adjoint col2im;
per-sample products for pointwise windows; the flipped convolution for a
stride-1 conv_transpose, or one convolution per phase of its output
(``_conv_transpose_by_output_phases``); Winograd's transforms
(``_winograd``), also over a strided input's phases (``_polyphase``); GEMMs
over groups of taps that skip the padding (``_tap_groups``). The geometry
of windows and the shape checks are in ``_conv/geometry.py``.

Three ops are each other's gradients, as in Chainer, so derivatives of any
order stay in this family:

* ``_Conv``: y = conv(x, w) + b
* ``_ConvTranspose``: y = conv_transpose(x, w) + b, the adjoint of conv in x
* ``_ConvGradWeight``: gw = the gradient of conv in w, given x and gy

Each is defined by a raw NumPy kernel and an explicit output size, so cover_all
and outsize only matter where the public functions compute that size.
Gradient formulas call the three through ``_linear.run``, which runs the raw
kernel on raw arrays (the engine's fast path) and applies the recorded op on xgrad
arrays (double backprop).
"""

import functools

import numpy

from xgrad import _dtypes
from xgrad._backend import cudnn, depthwise_kernels, host_gemm, native_kernels, workspace
from xgrad._backend.operands import kernel_operands
from xgrad._backend.tap_columns import transpose_into
from xgrad._backend.window_kernels import col2im_2d, im2col_2d
from xgrad._ops import _args, _gemm_layout, _winograd
from xgrad._ops._conv import chunking, dispatch, geometry
from xgrad._ops._conv.reference import (
    reference_conv as _reference_conv, reference_conv_transpose as _reference_conv_transpose)
# (the geometry pooling shares, by these names)
from xgrad._ops._conv.geometry import (  # NOQA: F401
    Geometry, extent, inner, out_size, pad_input, padded_zeros as _padded_zeros,
    prod as _prod, spatial_tuple, unpad, window_offsets, windows)
from xgrad._ops._linear import run
from xgrad._ops._op import PyOp
from xgrad._ops.registry import BOOL, INT_DTYPES, Sample, OpInfo, register

__all__ = ['conv', 'conv_transpose']


# ---------------------------------------------------------------------------
# Raw kernels (NumPy in, NumPy out)

def _empty(xp, shape, dtype):
    """xp.empty(shape, dtype); on the host from the workspace."""
    return workspace.empty(shape, dtype) if xp is numpy else xp.empty(shape, dtype)


def _matmul(xp, a, b, out=None, prefer_own=False):
    """a @ b for stacks of matrices (into ``out`` when given); where each sum
    has one term (a 1x1 window over one channel) a broadcast product:
    NumPy's matmul runs K = 1 off the BLAS, (16, 1) @ (1, 784) in 15 us
    against 4 us. On the host host_gemm decides which GEMM runs it
    (``prefer_own``: the dispatcher's plan measured xgrad's sgemm faster)."""
    if a.shape[-1] == 1:
        return xp.multiply(a, b, out=out)
    if xp is numpy:
        return host_gemm.matmul(a, b, out=out, prefer_own=prefer_own)
    return xp.matmul(a, b, out=out)


def _matmul_add(xp, a, b, out, prefer_own=False):
    """out += a @ b (stacks of matrices), without a temporary where
    host_gemm's choice is xgrad's sgemm."""
    if xp is numpy and a.shape[-1] != 1:
        host_gemm.matmul(a, b, out=out, accumulate=True, prefer_own=prefer_own)
    else:
        out += _matmul(xp, a, b)


def _column_chunks(x, geom, outsize):
    """im2col in batch chunks: yields (lo, hi, cols) where cols
    (groups, C/groups * prod(k), (hi - lo) * prod(l)) holds the windows of
    samples lo..hi of ``x``, one column per window. ``cols`` is one reused
    buffer: use it before asking for the next chunk."""
    x = _contiguous_for_im2col(x)
    if _native_im2col(x, geom):
        yield from _native_column_chunks(x, geom, outsize)
        return
    win = windows(pad_input(x, geom, outsize), geom, outsize)  # (N, C, k.., l..)
    n, c = x.shape[:2]
    g, nk = geom.groups, len(geom.ksize)
    rows = c // g * _prod(geom.ksize)
    ranges = chunking.im2col_ranges(n, c * _prod(geom.ksize) * _prod(outsize))
    if not ranges:
        return
    # (C, k.., m, l..): sample and window position side by side in a row.
    order = (1,) + tuple(range(2, 2 + nk)) + (0,) + tuple(range(2 + nk, win.ndim))
    xp = _args.module_of(x)
    buf = xp.empty(tuple(win.shape[i] for i in order[:1 + nk]) + (ranges[0][1],)
                   + tuple(outsize), x.dtype)
    for lo, hi in ranges:
        m = hi - lo
        part = buf[(slice(None),) * (1 + nk) + (slice(0, m),)]
        xp.copyto(part, win[lo:hi].transpose(order))
        yield lo, hi, part.reshape(g, rows, m * _prod(outsize))


def _contiguous_for_im2col(x):
    """A strided, broadcast or unaligned float NumPy batch as a contiguous
    copy, which the native im2col and the BLAS take: the gradient of ``sum``
    or ``mean`` is a broadcast view (stride 0), and the strided paths cost
    far more than the copy (16->32 channels on 4x4, batch 64: the input
    gradient's columns took several times as long; a 1x1 convolution's
    gradients with a stride-0 gy, 1->16 channels on 56x56, batch 8: 0.23
    and 0.39 ms against 0.04 ms each, as matmul leaves the BLAS)."""
    if (type(x) is numpy.ndarray and x.ndim == 4 and x.dtype in (numpy.float32, numpy.float64)
            and not (x.flags.c_contiguous and x.flags.aligned)):
        return numpy.array(x, order='C')
    return x


def _native_im2col(x, geom):
    """Whether im2col_2d takes ``x``: a 2-D convolution of a contiguous,
    aligned NumPy float32/64 batch (the padding is written as zeros, not
    copied). The same conditions as im2col_2d's own, which refuses data at
    an odd address (from_numpy of an unaligned buffer)."""
    return (type(x) is numpy.ndarray and x.ndim == 4 and x.flags.c_contiguous
            and x.flags.aligned and x.dtype in (numpy.float32, numpy.float64))


def _native_column_chunks(x, geom, outsize):
    """_column_chunks by the native im2col: no padded copy, no strided view;
    each chunk's columns a matrix with padded rows (_gemm_layout)."""
    n, c = x.shape[:2]
    g, kk, ll = geom.groups, _prod(geom.ksize), _prod(outsize)
    ranges = chunking.im2col_ranges(n, c * kk * ll)
    if not ranges:
        return
    flat = workspace.empty(_gemm_layout.padded_size(c * kk, ranges[0][1] * ll, x.dtype),
                           x.dtype)
    for lo, hi in ranges:
        m = hi - lo
        part = _gemm_layout.padded(flat, (c * kk, m * ll))
        if not im2col_2d(x[lo:hi], part, tuple(geom.ksize), tuple(geom.stride),
                         tuple(geom.pad), tuple(geom.dilate), tuple(outsize)):
            raise RuntimeError('im2col_2d refused {} {}'.format(x.shape, geom))
        yield lo, hi, part.reshape(g, c // g * kk, m * ll)


def _col2im_whole(xm, wt, geom, spatial, shape, work, prefer_own):
    """conv_transpose by GEMMs over batch ranges + the native col2im: xm
    (n, g, c/g, L) the input (L positions of ``spatial``), wt (g, o/g *
    prod(k), c/g) the weights; the output (n, o, oh, ow) of ``shape``. Each
    range (chunking.col2im_ranges) is one GEMM: its samples side by side, (g, c/g, m
    * L), so the columns come out as im2col_2d's matrix (o kh kw, m h w),
    written into rows padded as _gemm_layout pads them. ``prefer_own``: the
    dispatcher's plan (xgrad's sgemm measured faster for these products)."""
    n, g, cg, ll = xm.shape
    o, kk = shape[1], _prod(geom.ksize)
    out = workspace.zeros(shape, work)
    ranges = chunking.col2im_ranges(n, o * kk * ll, ll)
    flat = workspace.empty(_gemm_layout.padded_size(o * kk, (ranges[0][1] if ranges else 0) * ll,
                                                work), work)
    for lo, hi in ranges:
        m = hi - lo
        rhs = xm[lo:hi].transpose(1, 2, 0, 3).reshape(g, cg, m * ll)  # a copy unless m == 1
        cols = _gemm_layout.padded(flat, (o * kk, m * ll))
        _matmul(numpy, wt, rhs, cols.reshape(g, o // g * kk, m * ll), prefer_own)
        if not col2im_2d(cols, out[lo:hi], tuple(geom.ksize), tuple(geom.stride),
                         tuple(geom.pad), tuple(geom.dilate), tuple(spatial)):
            raise RuntimeError('col2im_2d refused {} {}'.format(shape, geom))
    return out


def _conv_transpose_by_output_phases(x, w, geom, outsize, work):
    """conv_transpose of x (n, c, h, w) with w (c, o, kh, kw), one group, no
    dilation, as s_h * s_w stride-1 convolutions of x, one per phase of the
    output (each with its taps of w, reversed): im2col of x and a GEMM per
    phase, each output written once, instead of a GEMM into the columns of
    the whole output and col2im's adds (dispatch.output_phases_apply says
    where it applies)."""
    along_h, along_w = (geometry.output_phase_taps(x.shape[2 + i], outsize[i], geom.ksize[i],
                                                   geom.stride[i], geom.pad[i]) for i in (0, 1))
    n, o = x.shape[0], w.shape[1]
    out = workspace.empty((n, o) + tuple(outsize), work)
    sh, sw = geom.stride
    for y0, ky, ty, py, uy in along_h:
        for x0, kx, tx, px, ux in along_w:
            view = out[:, :, y0::sh, x0::sw]
            if not (ty and tx):  # no tap reaches these positions
                view[...] = 0
                continue
            taps = w[:, :, ky::sh, kx::sw][:, :, ::-1, ::-1].swapaxes(0, 1)
            sub = Geometry((ty, tx), (1, 1), (py, px), (1, 1), 1)
            view[...] = conv_kernel(x, numpy.ascontiguousarray(taps, dtype=work), None, sub,
                                    (uy, ux))
    return out


def _col2im_add(out, cols, geom, outsize):
    """Add ``cols`` (N, C, k_1..k_n, l_1..l_n) into the padded ``out``, each
    element where its window tap reads (the adjoint of im2col)."""
    for k, index in window_offsets(geom, outsize):
        out[index] += cols[(slice(None), slice(None)) + k]


def col2im(cols, geom, outsize, spatial):
    """The adjoint of im2col: ``cols`` (N, C, k_1..k_n, l_1..l_n) added into
    an (N, C, *spatial) array, each element where its window tap reads."""
    out = _padded_zeros(cols.shape[:2] + tuple(spatial), geom, outsize, cols.dtype, cols)
    _col2im_add(out, cols, geom, outsize)
    return unpad(out, geom, spatial)


def _add_bias(y, b):
    if b is not None:
        y += b.reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype, copy=False)
    return y


def _result_dtype(x, w, b):
    """ChainerX's result dtype of a convolution: x, w and b promoted."""
    return _dtypes.result_type(x, w, *(() if b is None else (b,)))


# Pointwise (1x1, stride 1, no padding) convolutions need no columns: each
# sample's channels are already a (C, positions) matrix, so forward, input
# gradient and weight gradient are per-sample GEMMs that NumPy's matmul
# broadcasts over the batch, with no im2col and no transposing copy.

def _pointwise_product(wm, x, b, g, work, outsize):
    """wm (g, o/g, c/g) applied to each sample of x (n, c, *outsize), plus b."""
    n, c = x.shape[:2]
    xm = _contiguous_for_im2col(x).astype(work, copy=False).reshape(n, g, c // g, _prod(outsize))
    xp = _args.module_of(x)
    # (into the workspace: a fresh output of each step's product was faulted
    # in page by page with OpenBLAS's threads, 187 faults a call at batch 8)
    y = _matmul(xp, wm, xm, out=_empty(xp, (n,) + wm.shape[:2] + (xm.shape[3],), work))
    if b is not None:
        y += b.astype(work, copy=False).reshape(wm.shape[:2] + (1,))
    return y.reshape((n, wm.shape[0] * wm.shape[1]) + tuple(outsize))


# ---------------------------------------------------------------------------
# The three kernels: each asks the dispatcher (xgrad/_ops/_conv/dispatch.py)
# which algorithm computes its shape

clear_choices = dispatch.clear_choices
force_algorithm = dispatch.force_algorithm


def _on_cudnn(function, *args):
    """``function(*args)`` of xgrad/_backend/cudnn.pyx; None after a cuDNN
    error, which turns cuDNN's convolution off for this process (the
    dispatcher then takes the next rule: im2col)."""
    try:
        return function(*args)
    except cudnn.CudnnError as e:
        cudnn.record_failure('conv', e)
        dispatch.clear_choices()
        return None


def _by_groups(kernel, x, w, geom, size, work, plan, dtype=None):
    """A grouped ``kernel`` ('conv', 'conv_transpose' or 'grad_weight') by
    the dispatcher's dispatch.GroupPlan: one Winograd pass over all the
    channels (_groups_by_winograd), or one group-1 call a group with the
    per-group Choice, each on its channel slices, into its slice of the
    result (no bias). conv and conv_transpose: x (N, C, ..), w (O,
    C/g, ..) or (C, O/g, ..), ``size`` the output's spatial size; the
    weight gradient: x and gy (``w``) of conv, ``size`` w's shape. A group's
    slice of x is not contiguous: the kernel entry copies it (one pass over
    x in all, as a (g, N, C/g, ..) copy of the whole would be)."""
    if plan.one_pass:
        found = _groups_by_winograd(kernel, x, w, geom, size, work, plan.per)
        if found is not None:
            return found
    per = plan.per
    g, one = geom.groups, dispatch.group_geometry(geom)
    n, c = x.shape[:2]
    cg = c // g
    if kernel == 'grad_weight':
        og = w.shape[1] // g
        out = _empty(numpy, tuple(size), work)
        for i in range(g):
            out[i * og:(i + 1) * og] = conv_grad_weight_kernel(
                x[:, i * cg:(i + 1) * cg], w[:, i * og:(i + 1) * og], (og,) + tuple(size[1:]),
                dtype, one, choice=per)
        return out
    wg = w.shape[0] // g
    og = wg if kernel == 'conv' else w.shape[1]
    out = _empty(numpy, (n, og * g) + tuple(size), work)
    run_group = conv_kernel if kernel == 'conv' else conv_transpose_kernel
    for i in range(g):
        out[:, i * og:(i + 1) * og] = run_group(
            x[:, i * cg:(i + 1) * cg], w[i * wg:(i + 1) * wg], None, one, size, choice=per)
    return out


def _groups_by_winograd(kernel, x, w, geom, size, work, per):
    """_by_groups' kernel in one Winograd pass over all the channels (the
    dispatcher's GroupPlan.one_pass: each group takes Winograd, ``per``;
    for conv_transpose its flipped convolution does): a^2 g products of a
    group's rows (_winograd's ``groups``) instead of a convolution a group
    on copied channel slices. None where the groups take another algorithm."""
    g = geom.groups
    if kernel == 'conv_transpose':  # (conv's input gradient: by the flip)
        if per.algorithm != 'flip':
            return None
        flipped = _flipped_weights(w, geom)
        o, cg = flipped.shape[:2]
        inner = dispatch.choice('conv', x[:, :cg], (o // g,) + flipped.shape[1:], per.plan,
                                tuple(size), work)
        if inner.algorithm != 'winograd':
            return None
        x, flipped = kernel_operands(work, x, flipped)
        return _winograd.conv(inner.plan, x, flipped, None, per.plan._replace(groups=g),
                              size, work, groups=g)
    if per.algorithm != 'winograd':
        return None
    x, w = kernel_operands(work, x, w)
    if kernel == 'conv':
        return _winograd.conv(per.plan, x, w, None, geom, size, work, groups=g)
    return _winograd.grad_weight(per.plan, x, w, tuple(size), geom, work, groups=g)  # (w: gy)


def _flipped_weights(w, geom):
    """conv_transpose's w (C, O/g, k..) as the weights (O, C/g, k..) of the
    convolution it is at stride 1: each group's transposed, its taps
    reversed."""
    g, k = geom.groups, tuple(geom.ksize)
    c, o = w.shape[0], w.shape[1] * g
    flipped = w[(slice(None), slice(None)) + (slice(None, None, -1),) * len(k)]
    return flipped.reshape((g, c // g, o // g) + k).swapaxes(1, 2).reshape((o, c // g) + k)


def _runs_as_2d(x):
    """Whether a kernel runs ``x`` (N, C, L) as a 2-D convolution of height
    1: on the host, whose native im2col and col2im, tap groups, depthwise
    stencils and per-group plans are 2-D (a 1-D convolution otherwise took
    NumPy's strided im2col: (16, 128, 200) with 5 taps, forward and both
    gradients 10-20% slower)."""
    return type(x) is numpy.ndarray and x.ndim == 3


def _height_1(a):
    """``a`` with a height-1 axis after the channels (see _runs_as_2d)."""
    return a.reshape(geometry.lift_1d(a.shape))


def _drop_height(y):
    """The 1-D result of a convolution run as 2-D of height 1."""
    return y.reshape(y.shape[:2] + y.shape[3:])


def conv_kernel(x, w, b, geom, outsize, keep_columns=None, choice=None):
    """y[n, o, l] = sum over the window of x at l and o's channel group of
    w[o, c, k] * x[n, c, l * s + k * d - p], plus b[o]. ``keep_columns``: a
    list that receives the columns of ``x`` when the whole batch fits in one
    chunk (for the weight gradient, which needs the same columns).
    ``choice``: the dispatcher's Choice for these shapes, when it was made
    already (a group's, by the 'groups' algorithm)."""
    if _runs_as_2d(x):
        return _drop_height(conv_kernel(_height_1(x), _height_1(w), b, geometry.as_2d(geom),
                                        (1,) + tuple(outsize), keep_columns, choice))
    dtype = _result_dtype(x, w, b)
    work = _args.compute_dtype(dtype)
    how, _, plan = choice or dispatch.choice('conv', x, w.shape, geom, tuple(outsize), work)
    if how == 'cudnn':
        y = _on_cudnn(cudnn.convolution_forward, x.astype(dtype, copy=False),
                      w.astype(dtype, copy=False), geom.stride, geom.pad, geom.dilate,
                      geom.groups)
        if y is not None:
            return _add_bias(y, b)
        how, _, plan = dispatch.choice('conv', x, w.shape, geom, tuple(outsize), work)
    if how == 'groups':  # one group-1 convolution a group, by the group's plan
        return _add_bias(_by_groups('conv', x, w, geom, outsize, work, plan), b).astype(
            dtype, copy=False)
    x, w, b = kernel_operands(work, x, w, b)  # (what every algorithm's kernels read)
    n, o, g = x.shape[0], w.shape[0], geom.groups
    if how == 'depthwise':  # per-channel stencils (depthwise_kernels)
        y = depthwise_kernels.conv_2d(
            numpy.ascontiguousarray(x, dtype=work), numpy.ascontiguousarray(w, dtype=work),
            None if b is None else numpy.ascontiguousarray(b, dtype=work),
            workspace.empty((n, o) + tuple(outsize), work), tuple(geom.stride),
            tuple(geom.pad), tuple(geom.dilate))
        return y.astype(dtype, copy=False)
    if how == 'winograd':
        y = _winograd.conv(plan, numpy.ascontiguousarray(x, dtype=work), w, b, geom,
                           outsize, work, keep_columns)
        return y.astype(dtype, copy=False)
    if how == 'input_phases':  # Winograd over x's phases, gathered by its tile transforms
        y = _winograd.conv(plan.transform, numpy.ascontiguousarray(x, dtype=work), w, b,
                           plan.geom, outsize, work, keep_columns, input_phases=plan)
        return y.astype(dtype, copy=False)
    # (a copy when w is the flipped view of conv_transpose_kernel)
    wm = w.astype(work, copy=False).reshape(g, o // g, _prod(w.shape[1:]))
    if how == 'pointwise':
        return _pointwise_product(wm, x, b, g, work, outsize).astype(dtype, copy=False)
    if how == 'taps':
        return plan.conv(x, w, b).astype(dtype, copy=False)
    xp = _args.module_of(x)
    y = _empty(xp, (n, g, o // g, _prod(outsize)), work)
    # the bias, shaped to add to y's chunks as they are written (one pass)
    bias = None if b is None else b.astype(work, copy=False).reshape(g, o // g, 1)
    chunks = 0
    own = plan  # (im2col's: whether xgrad's sgemm is preferred for the product)
    for lo, hi, cols in _column_chunks(x.astype(work, copy=False), geom, outsize):
        chunks += 1
        if hi - lo == 1:
            _matmul(xp, wm, cols, y[lo], own)
            if bias is not None:
                y[lo] += bias
        else:  # columns are (.., sample, position): put the samples first
            part = _empty(xp, (g, o // g, cols.shape[2]), work)
            _matmul(xp, wm, cols, part, own)
            part = part.reshape(g, o // g, hi - lo, _prod(outsize))
            if bias is None:
                y[lo:hi] = part.transpose(2, 0, 1, 3)
            else:  # the transposing copy and the bias add in one pass
                xp.add(part.transpose(2, 0, 1, 3), bias, out=y[lo:hi])
    if keep_columns is not None and chunks == 1:  # (one chunk: its buffer is not reused)
        keep_columns.append(cols)
    return y.reshape((n, o) + tuple(outsize)).astype(dtype, copy=False)


def conv_transpose_kernel(x, w, b, geom, outsize, choice=None):
    """The adjoint of conv in its input: each x[n, c, l] spreads
    w[c, o, k] * x[n, c, l] to y[n, o, l * s + k * d - p], plus b[o].
    ``choice``: as conv_kernel's."""
    if _runs_as_2d(x):
        return _drop_height(conv_transpose_kernel(_height_1(x), _height_1(w), b,
                                                  geometry.as_2d(geom), (1,) + tuple(outsize),
                                                  choice))
    n, c, g = x.shape[0], x.shape[1], geom.groups
    o = w.shape[1] * g
    spatial = x.shape[2:]
    dtype = _result_dtype(x, w, b)
    work = _args.compute_dtype(dtype)
    how, _, plan = choice or dispatch.choice('conv_transpose', x, w.shape, geom,
                                             tuple(outsize), work)
    if how == 'cudnn':
        y = _on_cudnn(cudnn.convolution_transpose, x.astype(dtype, copy=False),
                      w.astype(dtype, copy=False), tuple(outsize), geom.stride, geom.pad,
                      geom.dilate, geom.groups)
        if y is not None:
            return _add_bias(y, b)
        how, _, plan = dispatch.choice('conv_transpose', x, w.shape, geom, tuple(outsize),
                                       work)
    if how == 'groups':
        return _add_bias(_by_groups('conv_transpose', x, w, geom, outsize, work, plan),
                         b).astype(dtype, copy=False)
    x, w, b = kernel_operands(work, x, w, b)  # (what every algorithm's kernels read)
    if how == 'depthwise':  # conv's input gradient by per-channel stencils
        y = depthwise_kernels.conv_transpose_2d(
            numpy.ascontiguousarray(x, dtype=work), numpy.ascontiguousarray(w, dtype=work),
            workspace.empty((n, o) + tuple(outsize), work), tuple(geom.stride),
            tuple(geom.pad), tuple(geom.dilate))
        return _add_bias(y, b).astype(dtype, copy=False)
    if how == 'pointwise':  # y[n] = w^T x[n]
        wt = w.astype(work, copy=False).reshape(g, c // g, o // g).swapaxes(1, 2)
        return _pointwise_product(wt, x, b, g, work, outsize).astype(dtype, copy=False)
    if how == 'output_phases':
        y = _conv_transpose_by_output_phases(x, w, geom, outsize, work)
        return _add_bias(y, b).astype(dtype, copy=False)
    if how == 'input_phases':  # 5x5, stride 2: the adjoint of conv_kernel's phases
        gp = conv_transpose_kernel(x, plan.split_weight(w, work), None, plan.geom,
                                   plan.phase_size)
        return _add_bias(plan.merge_input(gp, outsize), b).astype(dtype, copy=False)
    if how == 'taps':  # small images: GEMMs that skip the padding's taps
        return _add_bias(plan.conv_transpose(x, w), b).astype(dtype, copy=False)
    if how == 'flip':  # plan: the flipped convolution's geometry
        return conv_kernel(x, _flipped_weights(w, geom), b, plan, outsize).astype(
            dtype, copy=False)
    xm = x.astype(work, copy=False).reshape(n, g, c // g, _prod(spatial))
    wt = w.astype(work, copy=False).reshape(g, c // g, _prod(w.shape[1:])).swapaxes(1, 2)
    if how == 'col2im':
        return _add_bias(_col2im_whole(xm, wt, geom, spatial, (n, o) + tuple(outsize),
                                       work, plan),
                         b).astype(dtype, copy=False)
    out = _padded_zeros((n, o) + tuple(outsize), geom, spatial, work, x)
    per_sample = o * _prod(geom.ksize) * _prod(spatial)
    for lo, hi in chunking.im2col_ranges(n, per_sample):
        cols = _matmul(_args.module_of(wt), wt, xm[lo:hi])  # (m, g, o/g * prod(k), prod(l))
        _col2im_add(out[lo:hi], cols.reshape((hi - lo, o) + geom.ksize + spatial),
                    geom, spatial)
    return _add_bias(unpad(out, geom, outsize), b).astype(dtype, copy=False)


def conv_grad_weight_kernel(x, gy, wshape, dtype, geom, columns=None, choice=None):
    """gw[o, c, k] = sum over n, l of gy[n, o, l] * x[n, c, l * s + k * d - p]
    (within o's channel group): the gradient of conv in w. ``columns``: the
    columns of the whole batch of ``x`` in the compute dtype, as conv_kernel
    kept them (saves building them again). ``choice``: as conv_kernel's."""
    if _runs_as_2d(x):
        return conv_grad_weight_kernel(_height_1(x), _height_1(gy), geometry.lift_1d(wshape),
                                       dtype, geometry.as_2d(geom), columns,
                                       choice).reshape(wshape)
    work = _args.compute_dtype(numpy.dtype(dtype))
    how, _, plan = choice or dispatch.choice('grad_weight', x, tuple(wshape), geom,
                                             tuple(gy.shape), work)
    if how == 'cudnn':
        gw = _on_cudnn(cudnn.convolution_backward_filter, x.astype(dtype, copy=False),
                       gy.astype(dtype, copy=False), tuple(wshape), geom.stride, geom.pad,
                       geom.dilate, geom.groups)
        if gw is not None:
            return gw
        how, _, plan = dispatch.choice('grad_weight', x, tuple(wshape), geom,
                                       tuple(gy.shape), work)
    if how == 'groups':
        return _by_groups('grad_weight', x, gy, geom, tuple(wshape), work, plan, dtype).astype(
            dtype, copy=False)
    x, gy = kernel_operands(work, x, gy)  # (what every algorithm's kernels read)
    if how == 'depthwise':  # per channel and tap, gy's planes dotted with x's shifted
        gw = depthwise_kernels.grad_weight_2d(
            numpy.ascontiguousarray(x, dtype=work), numpy.ascontiguousarray(gy, dtype=work),
            numpy.empty(tuple(wshape), work), tuple(geom.stride), tuple(geom.pad),
            tuple(geom.dilate))
        return gw.astype(dtype, copy=False)
    if how == 'winograd':
        tiles = columns if isinstance(columns, _winograd.Tiles) else None
        gw = _winograd.grad_weight(plan, numpy.ascontiguousarray(x, dtype=work),
                                   numpy.ascontiguousarray(gy, dtype=work), wshape, geom,
                                   work, tiles)
        return gw.astype(dtype, copy=False)
    if how == 'input_phases':  # 5x5, stride 2 (see conv_kernel)
        tiles = columns if isinstance(columns, _winograd.Tiles) else None
        gw = _winograd.grad_weight(plan.transform, numpy.ascontiguousarray(x, dtype=work),
                                   numpy.ascontiguousarray(gy, dtype=work), wshape, plan.geom,
                                   work, tiles, input_phases=plan)
        return gw.astype(dtype, copy=False)
    if how == 'taps':
        return plan.grad_weight(x, gy).astype(dtype, copy=False)
    n, g = x.shape[0], geom.groups
    og = wshape[0] // g
    gym = gy.astype(work, copy=False).reshape(n, g, og, _prod(gy.shape[2:]))
    xp = _args.module_of(x)
    ll, cg = gym.shape[3], x.shape[1] // g
    if how == 'pointwise':
        # (contiguous: a broadcast operand, sum's gradient, keeps matmul off the BLAS)
        gym = _contiguous_for_im2col(gy).astype(work, copy=False).reshape(gym.shape)
        # per-sample products summed: an (n, g, o/g, c/g) intermediate instead
        # of copies of both operands with the batch moved beside the positions
        xm = _contiguous_for_im2col(x).astype(work, copy=False).reshape(n, g, cg, ll)
        if xp is numpy:  # (summed as computed where sgemm runs: no (n, ...) stack)
            gw = numpy.empty((g, og, cg), work)
            for j in range(g):
                host_gemm.matmul_sum(gym[:, j], xm[:, j].swapaxes(1, 2), out=gw[j])
        else:
            gw = _matmul(xp, gym, xm.swapaxes(2, 3)).sum(axis=0)
        return gw.reshape(wshape).astype(dtype, copy=False)
    # The BLAS runs these products fastest with the longer side of the result
    # as its rows (docs/conv_thresholds.md): gw^T = cols @ rows^T where the
    # windows (C/g * prod(k)) outnumber the output channels, else rows @ cols^T.
    ckk = _prod(wshape[1:])
    windows_first = ckk > og
    gw = _empty(xp, (g, ckk, og) if windows_first else (g, og, ckk), work)
    gw.fill(0)
    if isinstance(columns, numpy.ndarray) and columns.dtype == work:
        chunks = [(0, n, columns)]
    else:
        chunks = _column_chunks(x.astype(work, copy=False), geom, gy.shape[2:])
    for lo, hi, cols in chunks:
        rows = gym[lo:hi].transpose(1, 2, 0, 3).reshape(g, og, cols.shape[2])  # like cols
        if windows_first:
            _matmul_add(xp, cols, rows.swapaxes(1, 2), gw, plan)
        else:
            _matmul_add(xp, rows, cols.swapaxes(1, 2), gw)
    if windows_first:  # back to (g, o/g, C/g k): w's own layout, C-contiguous
        # (a transposed view was the gradient once: an optimizer's update of
        # NIN's 1024x384x3x3 weights then took 41 ms instead of 3; NumPy's
        # transposing copy takes 48 ms there, transpose_into 2)
        out = _empty(xp, (g, og, ckk), work)
        if xp is numpy and work == numpy.float32:
            transpose_into(gw, out)
        else:
            out[...] = gw.swapaxes(1, 2)
        gw = out
    return gw.reshape(wshape).astype(dtype, copy=False)


# ---------------------------------------------------------------------------
# The three ops

def _bias_grad(xp, gy, b):
    sums = native_kernels.sum_channels(gy)  # (None but for host float32/64)
    if sums is not None:
        return xp.cast(sums, b.dtype)
    axes = (0,) + tuple(range(2, gy.ndim))
    if type(gy) is numpy.ndarray:  # (numpy.sum is a Python wrapper of this)
        return xp.cast(numpy.add.reduce(gy, axis=axes), b.dtype)
    return xp.cast(xp.sum(gy, axis=axes), b.dtype)


class _ConvLike(PyOp):
    """conv and conv_transpose: inputs (x, w[, b]), all retained. The
    gradient in x is the other one of the pair (each is the other's adjoint
    in x), in w a ``_ConvGradWeight``, in b the sum of gy."""

    columns = None  # of x, kept by a forward conv for its weight gradient
    # (conv's adjoint, conv_transpose, keeps none: the columns of conv's
    # input gradient conv(gy, w) serve conv_transpose's weight gradient)

    def __init__(self, geom, outsize):
        self.geom = geom
        self.outsize = outsize

    def forward(self, inputs):
        self.retain_inputs(tuple(range(len(inputs))))
        return (self.compute(*inputs),)

    def grads(self, xp, targets, gys, xs, ys):
        gy = gys[0]
        if len(targets) > 1:  # one contiguous copy of a broadcast gy (sum's
            gy = _contiguous_for_im2col(gy)  # gradient) for all the targets
        x, w = xs[:2]
        out = []
        columns = self.columns
        for t in targets:
            if t == 0:
                adjoint = self.adjoint(x.shape[2:])
                g = run(adjoint, gy, w)
                out.append(xp.cast(g, x.dtype))
                # conv_transpose's input gradient is conv(gy, w), whose
                # columns of gy are those its weight gradient needs
                columns = adjoint.columns if adjoint.columns is not None else columns
            elif t == 1:
                grad_weight = _ConvGradWeight(self.geom, w.shape, w.dtype, columns)
                out.append(run(grad_weight, *self.weight_grad_operands(x, gy)))
            else:
                out.append(_bias_grad(xp, gy, xs[2]))
        return tuple(out)


class _Conv(_ConvLike):
    op_name = 'conv'

    def compute(self, x, w, b=None):
        # The columns of x, kept for the weight gradient when they are one
        # chunk (at most chunking.WHOLE_BATCH_ELEMENTS): small convolutions spend as much
        # on building them as on the matmul.
        kept = []
        y = conv_kernel(x, w, b, self.geom, self.outsize, kept)
        self.columns = kept[0] if kept else None
        return y

    def adjoint(self, outsize):
        return _ConvTranspose(self.geom, outsize)

    def weight_grad_operands(self, x, gy):
        return x, gy


class _ConvTranspose(_ConvLike):
    op_name = 'conv_transpose'

    def compute(self, x, w, b=None):
        return conv_transpose_kernel(x, w, b, self.geom, self.outsize)

    def adjoint(self, outsize):
        return _Conv(self.geom, outsize)

    def weight_grad_operands(self, x, gy):
        # <conv_transpose(x, w), gy> = <x, conv(gy, w)>: gy plays conv's input.
        return gy, x


class _ConvGradWeight(PyOp):
    """gw = d<conv(x, w), gy>/dw, bilinear in (x, gy): its gradients are
    conv_transpose(gy, ggw) for x and conv(x, ggw) for gy."""
    op_name = 'conv_grad_weight'

    def __init__(self, geom, wshape, dtype, columns=None):
        self.geom = geom
        self.wshape = tuple(wshape)
        self.dtype = numpy.dtype(dtype)
        self.columns = columns  # of x, from the forward conv (or None)

    def compute(self, x, gy):
        return conv_grad_weight_kernel(x, gy, self.wshape, self.dtype, self.geom,
                                       self.columns)

    def forward(self, inputs):
        self.retain_inputs((0, 1))
        return (self.compute(*inputs),)

    def grads(self, xp, targets, gys, xs, ys):
        ggw = gys[0]
        x, gy = xs
        out = []
        for t in targets:
            if t == 0:
                g = run(_ConvTranspose(self.geom, x.shape[2:]), gy, ggw)
                out.append(xp.cast(g, x.dtype))
            else:
                g = run(_Conv(self.geom, gy.shape[2:]), x, ggw)
                out.append(xp.cast(g, gy.dtype))
        return tuple(out)


# ---------------------------------------------------------------------------
# Public functions: argument checks, output sizes

def _inputs(op, x, w, b):
    x = _args.as_array(x, 'x')
    w = _args.as_array(w, 'w', x)
    b = None if b is None else _args.as_array(b, 'b', x)
    arrays = [x, w] + ([] if b is None else [b])
    # Any of ChainerX's dtypes: the result has their promoted dtype
    # (xgrad/_dtypes.pyx); the gradient is taken for float inputs only.
    _args.same_device(arrays, op)
    if x.ndim != w.ndim:
        raise _args.DimensionError('{}: x {} and w {} must have the same number of '
                                   'dimensions'.format(op, x.shape, w.shape))
    if x.ndim < 2:
        raise _args.DimensionError('{}: x {} must have a batch and a channel axis'.format(
            op, x.shape))
    return x, w, b


def _plain(stride, pad, dilate, groups, cover_all):
    """Whether the parameters are plain ints and cover_all a bool: the calls
    whose checked geometry is memoized (1.0 and True hash as 1, but must be
    checked, and refused or taken, as themselves)."""
    return (type(stride) is int and type(pad) is int and type(dilate) is int
            and type(groups) is int and type(cover_all) is bool)


# The checks of the last calls' shapes and plain-int parameters, whose
# Python costs about as much as a small convolution's products (1->16 1x1
# stride 2 on 4x4: 3.5 of the public call's 7 us besides the kernel).
_conv_shapes = geometry.conv_shapes
_memo_conv_shapes = functools.lru_cache(maxsize=512)(_conv_shapes)


def conv(x, w, b=None, stride=1, pad=0, cover_all=False, *, dilate=1, groups=1):
    """N-dimensional convolution (cross-correlation) of ``x`` (N, C, d_1..d_n)
    with ``w`` (out_C, C / groups, k_1..k_n), plus ``b`` (out_C,).

    The output has l_i = (d_i + 2 p_i - (k_i - 1) * dilate_i - 1) // s_i + 1
    positions per axis; with ``cover_all``, one more where the windows would
    leave a tail of the input uncovered (Chainer's formula).
    ``stride``, ``pad`` and ``dilate`` are ints or one int per spatial axis;
    ``groups`` splits the channels into independent convolutions.
    """
    x, w, b = _inputs('conv', x, w, b)
    shapes = _memo_conv_shapes if _plain(stride, pad, dilate, groups, cover_all) else \
        _conv_shapes
    geom, outsize = shapes(x.shape, x.dtype, w.shape, None if b is None else b.shape, stride,
                           pad, dilate, groups, cover_all)
    return _args.apply(_Conv(geom, outsize), *(a for a in (x, w, b) if a is not None))


def conv_transpose(x, w, b=None, stride=1, pad=0, outsize=None, *, dilate=1, groups=1):
    """N-dimensional transposed convolution (the gradient of ``conv`` in its
    input) of ``x`` (N, C, d_1..d_n) with ``w`` (C, out_C / groups, k_1..k_n),
    plus ``b`` (out_C,).

    ``outsize`` None: l_i = s_i (d_i - 1) + (k_i - 1) * dilate_i + 1 - 2 p_i.
    Given, it must be a size ``conv`` with the same parameters maps back to
    d_i (with or without cover_all, decided for all axes at once as ChainerX).
    """
    x, w, b = _inputs('conv_transpose', x, w, b)
    geom, outsize = geometry.conv_transpose_shapes(
        x.shape, x.dtype, w.shape, None if b is None else b.shape, stride, pad, outsize, dilate,
        groups)
    return _args.apply(_ConvTranspose(geom, tuple(outsize)),
                       *(a for a in (x, w, b) if a is not None))


# ---------------------------------------------------------------------------
# Registry (its references: the loops of _conv/reference.py)

register(OpInfo(
    'conv', conv, ref=_reference_conv,
    samples=[Sample((2, 3, 5), (4, 3, 3)),
             Sample((2, 3, 6), (4, 3, 2), (4,), stride=2, pad=1),
             Sample((2, 3, 4, 4), (2, 3, 3, 3), (2,), pad=1),
             Sample((1, 2, 5, 4), (2, 2, 2, 2), stride=(2, 3), cover_all=True),
             Sample((1, 2, 5, 5), (2, 2, 2, 2), dilate=2, pad=(1, 0)),
             Sample((2, 4, 4, 3), (6, 2, 2, 2), (6,), groups=2),
             Sample((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), (2,), stride=(1, 2, 1),
                    pad=(0, 1, 1)),
             Sample((3, 4), (2, 4), (2,)),
             Sample((0, 2, 4, 4), (3, 2, 3, 3), (3,), pad=1)],
    int_dtypes=INT_DTYPES + (BOOL,), promotion='result_type'))

register(OpInfo(
    'conv_transpose', conv_transpose, ref=_reference_conv_transpose,
    samples=[Sample((2, 3, 4), (3, 2, 3)),
             Sample((2, 3, 3), (3, 2, 3), (2,), stride=2, pad=1, outsize=(6,)),
             Sample((1, 2, 2, 3), (2, 2, 2, 2), stride=2, outsize=(3, 6)),
             Sample((2, 4, 3, 3), (4, 1, 2, 2), (2,), dilate=2, groups=2, pad=1),
             Sample((1, 2, 2, 3, 2), (2, 3, 2, 2, 2), (3,), stride=(2, 1, 1),
                    pad=(0, 1, 0)),
             Sample((3, 4), (4, 2), (2,)),
             Sample((0, 2, 3, 3), (2, 3, 2, 2), (3,))],
    int_dtypes=INT_DTYPES + (BOOL,), promotion='result_type'))
