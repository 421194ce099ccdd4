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
(_work_fraction, tap_partial_tile_cost) and is declined where that
leaves too little saved. The
channels, the batch and the weights' axes move by transposing copies of
8x8 tiles (tap_columns.transpose_into).
Taken for float32 on xgrad's own GEMM, one channel group, no dilation,
where the thresholds of the CPU path (thresholds.Thresholds.tap_*) say
the skipped products pay; the batch in up to four chunks whose columns
are at most chunking.WHOLE_BATCH_ELEMENTS elements.
"""

import collections
import functools

import numpy

from xgrad._backend import gemm_kernels, native_kernels, workspace
from xgrad._backend.tap_columns import add_tap_columns, fill_tap_columns, transpose_into
from xgrad._ops._conv import chunking, thresholds

# A group's GEMMs have at least a micro-kernel tile of rows (tile_rows());
# the plan's last group may be merged into the one before. This tile where
# none is given (the AVX-512 kernel's; tests give it to plan alike on any
# CPU).
_DEFAULT_TILE_ROWS = 8
# Where the groups pay: thresholds.Thresholds.tap_* (docs/conv_thresholds.md).

class TapPlan(collections.namedtuple(
        'TapPlan', 'batch channels out_channels spatial ksize stride pad outsize groups order '
                   'forward input_grad weight_grad work_fraction')):
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
        return chunking.ranges(n, self.batch)

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


def _work_fraction(groups, n, ksize, outsize, tile=_DEFAULT_TILE_ROWS, partial_cost=1.0):
    """The groups' products over im2col's, each group's GEMM rows rounded
    up to whole micro-kernel tiles of ``tile`` rows (the kernel computes a
    partial tile whole), a partial tile counted ``partial_cost`` whole
    ones."""
    count = (groups[:, 1] - groups[:, 0]) * n
    whole = count // tile
    rows = (whole + (count > whole * tile) * partial_cost) * tile
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


_AVX512 = thresholds.THRESHOLDS['avx512']


@functools.lru_cache(maxsize=256)
def _plan(n, c, o, spatial, ksize, stride, pad, outsize, tile=_DEFAULT_TILE_ROWS,
          any_size=False, partial_cost=_AVX512.tap_partial_tile_cost,
          max_fraction=_AVX512.tap_max_work_fraction, class_gain=_AVX512.tap_class_gain):
    """The TapPlan of one chunk of ``n`` samples, or None where its groups do
    more than ``max_fraction`` of im2col's products (unless ``any_size``)."""
    def fraction_of(groups):
        return _work_fraction(groups, n, ksize, outsize, tile, partial_cost)

    groups, order = _groups(n, spatial, ksize, stride, pad, outsize, tile), None
    fraction = fraction_of(groups)
    classed = min((_class_groups(n, spatial, ksize, stride, pad, outsize, by, tile)
                   for by in ((True, True), (True, False), (False, True))),
                  key=lambda c: fraction_of(c[1]))
    if fraction_of(classed[1]) <= fraction - class_gain:
        order, groups = classed
        fraction = fraction_of(groups)
    area = (groups[:, 1] - groups[:, 0]) * (groups[:, 3] - groups[:, 2]) * (
        groups[:, 5] - groups[:, 4])
    forward, input_grad, weight_grad = _blocks(groups, n, c, o, ksize[1])
    # (the forward leaves the columns of a group without taps unwritten)
    if (fraction > max_fraction and not any_size) or not area.all():
        return None
    return TapPlan(n, c, o, spatial, ksize, stride, pad, outsize, groups, order, forward,
                   input_grad, weight_grad, fraction)


def _pays_on_these_threads(xshape, wshape, outsize, rules, threads):
    """The rules on windows an output channel and on the product's size,
    which are stricter when the pool has more than one thread."""
    windows = xshape[0] * outsize[0] * outsize[1]
    if threads == 1:
        return windows >= rules.tap_min_windows_per_out_channel * wshape[0]
    products = windows * wshape[0] * wshape[1] * wshape[2] * wshape[3]
    return (windows >= rules.tap_min_windows_per_out_channel_threaded * wshape[0]
            and products >= rules.tap_min_products_threaded)


def plan(xshape, wshape, geom, outsize, work, any_size=False, rules=None, threads=None):
    """The TapPlan of conv(x, w) (x of ``xshape`` (N, C, h, w), w of
    ``wshape``) with output ``outsize`` where it pays by ``rules`` (a
    thresholds.Thresholds; None: the CPU path's) on ``threads`` threads
    (None: the pool's), else None. ``any_size``: wherever the tap groups
    can compute it, whether or not they pay (a forced algorithm)."""
    rules = rules or thresholds.for_path()
    tile = rules.tap_tile_rows
    if (len(xshape) != 4 or len(wshape) != 4 or len(geom.ksize) != 2 or geom.groups != 1
            or tuple(geom.dilate) != (1, 1) or numpy.dtype(work) != numpy.float32
            or wshape[1] != xshape[1] or tile is None):
        return None
    shape = (xshape[1], wshape[0], tuple(xshape[2:]), tuple(geom.ksize), tuple(geom.stride),
             tuple(geom.pad), tuple(outsize), tile)
    costs = (rules.tap_partial_tile_cost, rules.tap_max_work_fraction, rules.tap_class_gain)
    if any_size:
        return _plan(xshape[0], *shape, True, *costs)
    if threads is None:
        threads = native_kernels.max_threads()
    if (xshape[0] < rules.tap_min_batch or min(wshape[:2]) < rules.tap_min_channels
            or not _pays_on_these_threads(xshape, wshape, outsize, rules, threads)):
        return None
    n = xshape[0]
    for chunk in [n] + [n // d for d in (2, 4) if n % d == 0 and n // d >= rules.tap_min_batch]:
        found = _plan(chunk, *shape, False, *costs)
        if found is None:
            return None
        if found.work_fraction * found._columns_shape[0] * found._columns_shape[1] \
                <= chunking.WHOLE_BATCH_ELEMENTS:
            return None if _marginal(found, n, wshape[0], rules) else found
    return None


def _marginal(plan, n, out_channels, rules):
    """Whether ``rules`` decline ``plan`` as marginal (tap_marginal: on the
    AVX2 kernel, plans that skip few products at small batches)."""
    if rules.tap_marginal is None:
        return False
    fraction, min_batch, channels, few_channels_min_batch = rules.tap_marginal
    if out_channels < channels:
        min_batch = few_channels_min_batch
    return plan.work_fraction > fraction and n < min_batch
