"""2-D convolutions as GEMMs over groups of output positions that skip the
window taps lying in the padding.

Why: im2col gives every output position all kh * kw taps, those in the
padding as zeros, and the GEMM multiplies them. On small images that is
much of the work: 5x5 with pad 2 on 4x4 images, half the products; on
8x8, 28%; 3x3 with pad 1 on 4x4, 31%. oneDNN's direct kernels skip them
(PyTorch's time on 5x5 over 4x4 is what 1.3x this core's peak would give
without the skipping). Here the output positions (oy, ox), in row-major
order, are cut into groups whose windows read the same rectangle of taps
(rows i0..i1, columns j0..j1 of the kernel); a group of fewer than a
micro-kernel tile of GEMM rows (positions times the batch) takes in the
next positions and the union of their rectangles, so that each GEMM fills
the micro-kernel's tiles. Where row-major runs mix positions with
different taps (batches that are not a multiple of the tile), the
positions are instead put in classes of equal taps, and the columns, y
and gy follow that order (_class_groups).

The columns (tap_columns) are a matrix with one row a window, (oh ow N)
by (kh kw C), channels last, holding only the taps of each group's
rectangle: one kernel row of a window's rectangle, taps j0..j1, is one
run of (j1 - j0) C elements of x in channels-last layout (N, h, w, C),
whatever the batch. The GEMMs (sgemm_blocks) run per group and kernel
row, with w' = w as (O, kh, kw, C):

- forward: y^T[group, :] = sum over i of cols[group, (i, j0..j1, :)] w'^T[(i, j0..j1, :), :]
- input gradient: cols[group, (i, j0..j1, :)] = gy^T[group, :] w'[:, (i, j0..j1, :)],
  added back into x by tap_columns
- weight gradient: gw'^T[(i, j0..j1, :), :] += cols[group, (i, j0..j1, :)]^T gy^T[group, :]

so a group is a range of the GEMMs' rows, cut at whole tiles of the
micro-kernel's rows (8 on AVX-512, 6 on AVX2: gemm_kernels.tile_rows()):
against a layout with the positions as columns (tiles of 32), groups of
one position at batch 8 are exact on AVX-512 (5x5 stride 1 on 4x4,
128->128 at batch 8: 0.84x that layout's step). On AVX2 the same group is
a tile and a third, computed as two: the plan counts its products so
(_work_fraction) and is declined where that leaves too little saved. The
channels, the batch and the weights' axes move by transposing copies of
8x8 tiles (tap_columns.transpose_into).
Taken for float32 on xgrad's own GEMM (gemm_kernels.available()), one
channel group, no dilation, 16+ channels each side, batch _MIN_BATCH+,
_MIN_WINDOWS_PER_OUT_CHANNEL+ windows an output channel (on more
threads: _MIN_WINDOWS_PER_OUT_CHANNEL_THREADED+, and products of
_MIN_PRODUCTS_THREADED+ multiply-adds), where the groups skip at least
1 - _MAX_WORK_FRACTION of the products; the batch in up to four chunks
whose columns are at most _MAX_COLUMN_ELEMENTS elements.
"""

import collections
import functools

import numpy

from xgrad._backend import gemm_kernels, native_kernels, workspace
from xgrad._backend.tap_columns import add_tap_columns, fill_tap_columns, transpose_into

# A group's GEMMs have at least a micro-kernel tile of rows (tile_rows());
# the plan's last group may be merged into the one before. This tile where
# none is given (the AVX-512 kernel's; tests give it to plan alike on any
# CPU).
_DEFAULT_TILE_ROWS = 8
# Below 8 samples the groups of few positions take the unions of their
# rectangles (one thread, 64->64 5x5 stride 2 on 8x8 at batch 4: 1.11x
# im2col's time; at batch 1 most plans skip under 10% of the products).
_MIN_BATCH = 8
_MIN_CHANNELS = 16
# Each op moves the weights between layouts once or twice, and the groups
# cut the GEMMs into smaller ones: with fewer windows (batch times output
# positions, the GEMMs' rows) than output channels the weights outweigh
# the columns (one thread, with the windows as the GEMMs' columns, the
# layout before this one: 256->256 3x3 on 4x4 at batch 8, half a window a
# channel: 1.03x im2col's time; 128->128, one a channel: 0.93x). On more
# threads the groups' GEMMs, fills and copies are each split, and where
# they are small the handoffs cost more than the halves save: two threads,
# 128->128 5x5 stride 2 on 8x8 at batch 8 (one window a channel),
# 1.09-1.11x; 64->64 5x5 stride 2 on 4x4 at batch 64 (four a channel),
# 0.53x.
# Likewise for small products: on more threads, im2col's forward product
# must be at least this many multiply-adds (16->32 3x3 stride 2 on 8x8 at
# batch 64, 4.7M: 1.14-1.16x on two threads, 0.90x on one).
_MIN_WINDOWS_PER_OUT_CHANNEL = 1
_MIN_WINDOWS_PER_OUT_CHANNEL_THREADED = 4
_MIN_PRODUCTS_THREADED = 1 << 24
# Taken when the groups do at most this fraction of im2col's products (in
# whole micro-kernel tiles, _work_fraction).
_MAX_WORK_FRACTION = 0.9
# On the AVX2 kernel (6-row tiles) plans above _AVX2_MARGINAL_FRACTION lost
# to im2col at batches under _AVX2_MARGINAL_MIN_BATCH, and with fewer than
# _AVX2_MARGINAL_MIN_CHANNELS output channels under
# _AVX2_MARGINAL_FEW_CHANNELS_MIN_BATCH. One thread, Zen 3, steps over
# torch's time, plan -> im2col (paired, in one process): 16->32 3x3 on 8x8
# at batch 8 0.90 -> 0.76 (stride 1), 0.67 -> 0.55 (stride 2), at 16 0.68
# -> 0.56, at 24 0.64 -> 0.58; 5x5 stride 2 on 16x16 at batch 8 0.92 ->
# 0.82 (conv_transpose 0.89 -> 0.79), at 12 0.89 -> 0.80, at 32 1.02 ->
# 0.96; 64->64 at batch 8, 3x3 stride 2 on 8x8 0.74 -> 0.61, 5x5 on 16x16
# 0.95 -> 0.90, at 12, 3x3 0.68 -> 0.63; 128->128 3x3 at batch 8 0.71 ->
# 0.63. Kept: batch 64 (16->32 5x5 stride 2 on 16x16, conv_transpose, 1.06
# against 1.11 in fresh processes; 64->64 0.96 against 1.08; 128->128 3x3
# stride 2 on 8x8 0.72 against 0.80), 64->64 at batch 16 (5x5 stride 2 on
# 16x16, 1.03 against 1.05), and the plans at or under 0.8 (16->32 5x5
# stride 2 on 8x8 at batch 64, 0.79 of the products: 0.82 against 0.88).
_AVX2_MARGINAL_FRACTION = 0.8
_AVX2_MARGINAL_MIN_BATCH = 16
_AVX2_MARGINAL_MIN_CHANNELS = 64
_AVX2_MARGINAL_FEW_CHANNELS_MIN_BATCH = 64
# The columns are built for a chunk of the batch at a time, the whole batch
# or its half or quarter (8+ samples), the largest whose columns are at
# most this many elements (16 MiB of float32, convolution.py's whole-batch
# limit): past it they leave the caches, and im2col's batch chunks win
# (64->64 5x5 stride 2 on 16x16 at batch 64, 5.6M elements: 1.23x
# im2col's step; in halves, 0.85-0.89x; 128->128 in quarters 0.89-0.99x).
# Not in eighths: each chunk packs the weights again (256->256 on 16x16 at
# batch 64: 1.17x).
_MAX_COLUMN_ELEMENTS = 1 << 22

# What a partial tile (a group's rows past its whole tiles) costs, in
# whole tiles, by the micro-kernel's rows: it packs its rows of A and adds
# its results through a scratch tile, and with few rows it is a pass over
# the weights for a third of a tile's products. AVX-512 (8 rows): as a
# whole tile (batch 12, 12 rows a position: the plan 0.87-0.97x im2col's
# step). AVX2 (6 rows), where a position at batch 8 is 8 rows: counted as
# a whole tile, 128->128 5x5 on 4x4 at batch 8 (0.74 of the products)
# took 1.13x im2col's step and 64->64 5x5 stride 2 on 8x8 (0.86) 1.14x;
# counted as two, both are declined, and the plans at batch 64 (a partial
# tile in 11) are kept (64->64 5x5 stride 2 on 8x8: 0.80x).
_PARTIAL_TILE_COST = {gemm_kernels.AVX2_TILE_ROWS: 2.0}  # others: 1.0

# Classes of positions (_class_groups) instead of row-major runs where they
# do at least this fraction of im2col's products fewer: their order costs a
# gather of y and of gy.
_CLASS_GAIN = 0.02

_Plan = collections.namedtuple(
    '_Plan', 'batch channels out_channels spatial ksize stride pad outsize groups order '
             'forward input_grad weight_grad work_fraction')


class TapPlan(_Plan):
    """The groups of one convolution, x (batch, channels, *spatial), w
    (out_channels, channels, *ksize), and the three GEMM block lists
    (rows of sgemm_blocks) over them."""

    @functools.cached_property
    def inverse(self):
        """The slot of each row-major position in the columns' order (order's
        inverse)."""
        return numpy.argsort(self.order)

    @property
    def _columns_shape(self):
        return (self.outsize[0] * self.outsize[1] * self.batch,
                self.ksize[0] * self.ksize[1] * self.channels)

    def _geometry(self):
        return (tuple(self.ksize), tuple(self.stride), tuple(self.pad), tuple(self.outsize),
                self.order)

    def _rows_of(self, gy):
        """gy (N, O, oh, ow) as the matrix (oh ow N, O): rows (q, s) in the
        columns' position order, in scratch."""
        n, o = self.batch, self.out_channels
        flat = numpy.ascontiguousarray(gy, dtype=numpy.float32).reshape(n, -1)
        if self.order is not None:
            out = _scratch((n * o, flat.shape[1] // o))
            numpy.take(flat.reshape(n * o, -1), self.order, axis=1, out=out, mode='clip')
            flat = out.reshape(n, -1)
        by_sample = _transposed(flat, _scratch((flat.shape[1], n)))  # (O, q N)
        return _transposed(by_sample.reshape(o, -1), _scratch((flat.size // o, o)))

    def columns(self, x):
        """The columns of x (self.batch, C, h, w) in this thread's scratch:
        only the groups' taps are written."""
        n, c, (h, w) = self.batch, self.channels, self.spatial
        x_last = _transposed(x.reshape(n, c, h * w), _scratch((n, h * w, c)))
        cols = _scratch(self._columns_shape)
        fill_tap_columns(x_last.reshape(n, h, w, c), cols, self.groups, *self._geometry())
        return cols

    def _chunks(self, n):
        """The plan's batch ranges over a batch of n (a multiple of its
        batch)."""
        if n % self.batch:
            raise ValueError('tap groups: a batch of {} in a plan for chunks of {}'.format(
                n, self.batch))
        return [(lo, lo + self.batch) for lo in range(0, n, self.batch)]

    def _weights_taps_last(self, w):
        """w (O, C, kh, kw) as the matrix (O, kh kw C), in scratch."""
        o, c, kk = self.out_channels, self.channels, self.ksize[0] * self.ksize[1]
        return _transposed(w.reshape(o, c, kk), _scratch((o, kk, c))).reshape(o, kk * c)

    def conv(self, x, w, b):
        """y = conv(x, w) + b, (N, O, oh, ow) float32."""
        o, (oh, ow), n = self.out_channels, self.outsize, self.batch
        w_t = _transposed(self._weights_taps_last(w), _scratch((w.size // o, o)))
        y = workspace.empty((x.shape[0], o, oh, ow), numpy.float32)
        for lo, hi in self._chunks(x.shape[0]):
            y_rows = _scratch((oh * ow * n, o))
            if not gemm_kernels.sgemm_blocks(self.columns(x[lo:hi]), w_t, y_rows, self.forward):
                raise RuntimeError('sgemm_blocks declined a tap-group convolution')
            by_sample = _transposed(y_rows, _scratch((o, oh * ow * n)))  # (O, q, N)
            if self.order is None:
                transpose_into(by_sample.reshape(o * oh * ow, n), y[lo:hi].reshape(n, -1))
                continue
            part = _transposed(by_sample.reshape(o * oh * ow, n), _scratch((n, y[0].size)))
            numpy.take(part.reshape(n * o, oh * ow), self.inverse, axis=1, mode='clip',
                       out=y[lo:hi].reshape(n * o, oh * ow))  # back to row-major positions
        if b is not None:
            y += b.astype(numpy.float32, copy=False).reshape(o, 1, 1)
        return y

    def conv_transpose(self, gy, w):
        """The adjoint of conv in x: gx (N, C, h, w) from gy (N, O, oh, ow)."""
        c, n, (h, wd) = self.channels, self.batch, self.spatial
        w_taps = self._weights_taps_last(w)
        gx = workspace.empty((gy.shape[0], c, h, wd), numpy.float32)
        for lo, hi in self._chunks(gy.shape[0]):
            cols = _scratch(self._columns_shape)
            if not gemm_kernels.sgemm_blocks(self._rows_of(gy[lo:hi]), w_taps, cols,
                                             self.input_grad):
                raise RuntimeError('sgemm_blocks declined a tap-group convolution')
            gx_last = _scratch((n, h, wd, c))
            gx_last.fill(0)
            add_tap_columns(cols, gx_last, self.groups, *self._geometry())
            transpose_into(gx_last.reshape(n, h * wd, c), gx[lo:hi].reshape(n, c, h * wd))
        return gx

    def grad_weight(self, x, gy):
        """gw (O, C, kh, kw) of conv(x, w) for the output gradient gy."""
        o, c, (kh, kw) = self.out_channels, self.channels, self.ksize
        gw_t = _scratch((kh * kw * c, o))
        gw_t.fill(0)
        for lo, hi in self._chunks(x.shape[0]):
            if not gemm_kernels.sgemm_blocks(self.columns(x[lo:hi]).T, self._rows_of(gy[lo:hi]),
                                             gw_t, self.weight_grad):
                raise RuntimeError('sgemm_blocks declined a tap-group convolution')
        gw = _transposed(gw_t, _scratch((o, kh * kw * c))).reshape(o, kh * kw, c)
        return _transposed(gw).reshape(o, c, kh, kw)


# The temporaries come from the workspace (xgrad/_backend/workspace.py):
# freshly allocated, a plan's columns (up to 16 MiB) came from new pages
# every call, and faulting them in cost more than the products saved
# (128->128 5x5 stride 2 on 8x8 at batch 64, two threads: 24.8 ms a step
# against 13.8 with the pages reused). The results are new arrays.


def _scratch(shape):
    """A float32 array of ``shape`` (contents undefined) from the workspace."""
    return workspace.empty(shape, numpy.float32)


def _transposed(a, out=None):
    """a.T of a matrix, or of each matrix of a stack, as a C-contiguous
    float32 array: ``out`` when given (its shape that of the result), else
    a new one."""
    a = numpy.ascontiguousarray(a, dtype=numpy.float32)
    if out is None:
        out = workspace.empty(a.shape[:-2] + a.shape[:-3:-1], numpy.float32)
    transpose_into(a, out)
    return out


def _taps(position, k, s, p, size):
    """The taps t of a window of size k at output ``position`` that read
    inside 0..size (position * s - p + t): the range (lo, hi)."""
    return max(0, p - position * s), max(0, min(k, size + p - position * s))


def _union(a, b):
    if a[0] >= a[1] or a[2] >= a[3]:
        return b
    if b[0] >= b[1] or b[2] >= b[3]:
        return a
    return min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3])


def _groups(n, spatial, ksize, stride, pad, outsize, tile=_DEFAULT_TILE_ROWS):
    """Rows (q0, q1, i0, i1, j0, j1): runs of output positions q = oy * ow
    + ox with their taps' rectangle, at least ``tile`` / n positions each
    (but the last run when there is one only)."""
    (oh, ow) = outsize
    rows = [_taps(oy, ksize[0], stride[0], pad[0], spatial[0]) for oy in range(oh)]
    cols = [_taps(ox, ksize[1], stride[1], pad[1], spatial[1]) for ox in range(ow)]
    wide = -(-tile // n)  # positions
    groups = []
    for q in range(oh * ow):
        rect = rows[q // ow] + cols[q % ow]
        if groups and (groups[-1][1] == rect or q - groups[-1][0] < wide):
            groups[-1] = (groups[-1][0], _union(groups[-1][1], rect))
        else:
            groups.append((q, rect))
    if len(groups) > 1 and oh * ow - groups[-1][0] < wide:
        q0, rect = groups.pop()
        groups[-1] = (groups[-1][0], _union(groups[-1][1], rect))
    bounds = [g[0] for g in groups] + [oh * ow]
    table = []
    for (q0, rect), q1 in zip(groups, bounds[1:]):
        i0, i1, j0, j1 = rect
        if i0 >= i1 or j0 >= j1:
            i0 = i1 = j0 = j1 = 0
        table.append((q0, q1, i0, i1, j0, j1))
    return numpy.array(table, dtype=numpy.int64).reshape(-1, 6)


def _class_groups(n, spatial, ksize, stride, pad, outsize, by=(True, True),
                  tile=_DEFAULT_TILE_ROWS):
    """(order, groups): the positions in classes of equal taps (with ``by``
    (False, True) of equal taps along the rows' axis only, their columns'
    taps joined; (True, False) the other way), a class narrower than
    ``tile`` / n positions merged into the class whose union with
    it adds the fewest products (the narrowest first); ``order`` lists the
    positions class by class (row-major within), and ``groups`` rows as
    _groups', over the slots of ``order``."""
    (oh, ow) = outsize
    rows = [_taps(oy, ksize[0], stride[0], pad[0], spatial[0]) for oy in range(oh)]
    cols = [_taps(ox, ksize[1], stride[1], pad[1], spatial[1]) for ox in range(ow)]
    found = {}
    for q in range(oh * ow):
        rect = rows[q // ow] + cols[q % ow]
        key = (rect[:2] if by[0] else None, rect[2:] if by[1] else None)
        held = found.setdefault(key, [rect, []])
        held[0] = _union(held[0], rect)
        held[1].append(q)
    classes = list(found.values())
    wide = -(-tile // n)

    def products(rect, count):
        return count * max(0, rect[1] - rect[0]) * max(0, rect[3] - rect[2])

    def added(a, b):
        union = _union(a[0], b[0])
        return (products(union, len(a[1]) + len(b[1])) - products(a[0], len(a[1]))
                - products(b[0], len(b[1])))

    while len(classes) > 1:
        narrow = min(classes, key=lambda cl: len(cl[1]))
        if len(narrow[1]) >= wide:
            break
        classes.remove(narrow)
        into = min(classes, key=lambda cl: added(narrow, cl))
        into[0] = _union(into[0], narrow[0])
        into[1] = sorted(into[1] + narrow[1])
    classes.sort(key=lambda cl: cl[1][0])
    order, table = [], []
    for rect, positions in classes:
        i0, i1, j0, j1 = rect
        if i0 >= i1 or j0 >= j1:
            i0 = i1 = j0 = j1 = 0
        table.append((len(order), len(order) + len(positions), i0, i1, j0, j1))
        order += positions
    return (numpy.array(order, dtype=numpy.int64),
            numpy.array(table, dtype=numpy.int64).reshape(-1, 6))


def _work_fraction(groups, n, ksize, outsize, tile=_DEFAULT_TILE_ROWS):
    """The groups' products over im2col's, each group's GEMM rows rounded
    up to whole micro-kernel tiles of ``tile`` rows (the kernel computes a
    partial tile whole), a partial tile counted _PARTIAL_TILE_COST[tile]
    whole ones."""
    count = (groups[:, 1] - groups[:, 0]) * n
    whole = count // tile
    rows = (whole + (count > whole * tile) * _PARTIAL_TILE_COST.get(tile, 1.0)) * tile
    area = rows * (groups[:, 3] - groups[:, 2]) * (groups[:, 5] - groups[:, 4])
    return float(area.sum()) / max(1, ksize[0] * ksize[1] * outsize[0] * outsize[1] * n)


def _blocks(groups, n, c, o, kw):
    """The three GEMM block lists (r0, c0, k0, m, n, k, acc) over ``groups``:
    one block a group and kernel row."""
    forward, input_grad, weight_grad = [], [], []
    for q0, q1, i0, i1, j0, j1 in groups.tolist():
        lo, width = q0 * n, (q1 - q0) * n
        # a row of taps a block, or the whole rectangle when its rows are whole
        runs = [(i0, i1)] if (j0, j1) == (0, kw) else [(i, i + 1) for i in range(i0, i1)]
        for a, b in runs:
            k0, depth = (a * kw + j0) * c, (b - a) * (j1 - j0) * c
            forward.append((lo, 0, k0, width, o, depth, int(a > i0)))
            input_grad.append((lo, k0, 0, width, depth, o, 0))
            weight_grad.append((k0, 0, lo, depth, o, width, 1))
    return tuple(numpy.array(b, dtype=numpy.int64).reshape(-1, 7)
                 for b in (forward, input_grad, weight_grad))


@functools.lru_cache(maxsize=256)
def _plan(n, c, o, spatial, ksize, stride, pad, outsize, tile=_DEFAULT_TILE_ROWS,
          any_size=False):
    groups, order = _groups(n, spatial, ksize, stride, pad, outsize, tile), None
    fraction = _work_fraction(groups, n, ksize, outsize, tile)
    classed = min((_class_groups(n, spatial, ksize, stride, pad, outsize, by, tile)
                   for by in ((True, True), (True, False), (False, True))),
                  key=lambda c: _work_fraction(c[1], n, ksize, outsize, tile))
    if _work_fraction(classed[1], n, ksize, outsize, tile) <= fraction - _CLASS_GAIN:
        order, groups = classed
        fraction = _work_fraction(groups, n, ksize, outsize, tile)
    area = (groups[:, 1] - groups[:, 0]) * (groups[:, 3] - groups[:, 2]) * (
        groups[:, 5] - groups[:, 4])
    forward, input_grad, weight_grad = _blocks(groups, n, c, o, ksize[1])
    # (the forward leaves the columns of a group without taps unwritten)
    if (fraction > _MAX_WORK_FRACTION and not any_size) or not area.all():
        return None
    return TapPlan(n, c, o, spatial, ksize, stride, pad, outsize, groups, order, forward,
                   input_grad, weight_grad, fraction)


def _pays_on_these_threads(xshape, wshape, outsize):
    """The rules on windows an output channel and on the product's size,
    which are stricter when the pool has more than one thread."""
    windows = xshape[0] * outsize[0] * outsize[1]
    if native_kernels.max_threads() == 1:
        return windows >= _MIN_WINDOWS_PER_OUT_CHANNEL * wshape[0]
    products = windows * wshape[0] * wshape[1] * wshape[2] * wshape[3]
    return (windows >= _MIN_WINDOWS_PER_OUT_CHANNEL_THREADED * wshape[0]
            and products >= _MIN_PRODUCTS_THREADED)


def _tile_rows():
    """The micro-kernel's tile rows on the dispatch path selected now."""
    return gemm_kernels.tile_rows()


def plan(xshape, wshape, geom, outsize, work, any_size=False):
    """The TapPlan of conv(x, w) (x of ``xshape`` (N, C, h, w), w of
    ``wshape``) with output ``outsize`` where it pays, else None.
    ``any_size``: wherever the tap groups can compute it, whether or not
    they pay (a forced algorithm)."""
    if (len(xshape) != 4 or len(wshape) != 4 or len(geom.ksize) != 2 or geom.groups != 1
            or tuple(geom.dilate) != (1, 1) or numpy.dtype(work) != numpy.float32
            or wshape[1] != xshape[1] or not gemm_kernels.available()):
        return None
    if any_size:
        return _plan(xshape[0], xshape[1], wshape[0], tuple(xshape[2:]), tuple(geom.ksize),
                     tuple(geom.stride), tuple(geom.pad), tuple(outsize), _tile_rows(),
                     any_size=True)
    if (xshape[0] < _MIN_BATCH or min(wshape[:2]) < _MIN_CHANNELS
            or not _pays_on_these_threads(xshape, wshape, outsize)):
        return None
    n = xshape[0]
    for chunk in [n] + [n // d for d in (2, 4) if n % d == 0 and n // d >= _MIN_BATCH]:
        found = _plan(chunk, xshape[1], wshape[0], tuple(xshape[2:]), tuple(geom.ksize),
                      tuple(geom.stride), tuple(geom.pad), tuple(outsize), _tile_rows())
        if found is None:
            return None
        if found.work_fraction * found._columns_shape[0] * found._columns_shape[1] \
                <= _MAX_COLUMN_ELEMENTS:
            return None if _marginal_on_avx2(found, n, wshape[0]) else found
    return None


def _marginal_on_avx2(plan, n, out_channels):
    """Whether the AVX2 kernel declines ``plan`` (see _AVX2_MARGINAL_FRACTION)."""
    min_batch = (_AVX2_MARGINAL_MIN_BATCH if out_channels >= _AVX2_MARGINAL_MIN_CHANNELS
                 else _AVX2_MARGINAL_FEW_CHANNELS_MIN_BATCH)
    return (_tile_rows() == gemm_kernels.AVX2_TILE_ROWS
            and plan.work_fraction > _AVX2_MARGINAL_FRACTION and n < min_batch)
