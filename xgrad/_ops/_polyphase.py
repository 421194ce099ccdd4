"""Strided 2-D convolutions as stride-1 convolutions over the input's phases,
so that Winograd computes them (5x5 with stride 2 as 3x3 with stride 1).

A stride-s convolution with an r x r kernel reads xpad[s i + k] (xpad: x
padded). With k = s t + a (t < q = ceil(r / s), a < s) that is phase a of
xpad, x_a[j] = xpad[s j + a], at j = i + t: a stride-1, unpadded
convolution with a q x q kernel over s^2 C channels (the phases of each
channel) with the weights w_q[o, (c, a_h, a_w), t_h, t_w] = w[o, c, s t_h +
a_h, s t_w + a_w], zero past r.

Why: strided convolutions otherwise go through im2col, r^2 products per
output and input channel (25 for 5x5). The phases' convolution does
(s q)^2 / r^2 more products with zeros (36 / 25 for 5x5, stride 2), but as
a 3x3 convolution Winograd F(4x4, 3x3) does 2.25 per output and phase
channel: 9 per output and input channel against im2col's 25. The gradients
are the same reshapes' adjoints around the stride-1 kernels (the input
gradient a stride-1 conv_transpose, which is the flipped Winograd
convolution; the weight gradient Winograd's). conv and its weight gradient
never make the phases: the Winograd input tiles gather them from x
(winograd_kernels.input_tiles with s > 1), which saved the copy's 0.32 ms
each of a 16->32, 56x56, batch 8 forward and weight gradient (one thread),
and the filter transform gathers the weights' phases from w
(winograd_kernels.filter_tiles and, for the weight gradient, its adjoint
filter_gradients). ``split_input``, ``split_weight`` and
``merge_weight`` are their definitions, which the tests hold the kernels
to.
Taken only where the stride-1 equivalent is a Winograd one with enough
tiles (below); 3x3 with stride 2 would be 2x2, which has no transform
here, and stays with im2col.
"""

import collections

import numpy

from xgrad._backend import gemm_kernels, workspace
from xgrad._ops import _winograd

# Where the phases pay. Their convolution does 1.44x the products with
# zeros (5x5, stride 2: 3x3 over 4 phases), so they pay only with a
# transform of 4x4 output blocks (F(4x4, 3x3): 9 products per output and
# channel against im2col's 25; F(2x2, 3x3) would do 16), and only where the
# 36 products have columns enough and the blocks are whole.
#
# conv and its weight gradient (one thread, Zen 3 AVX2, forward + weight
# gradient, phases' time over the other route's, paired medians, at
# 22bb95a: input tiles written out and gathered from x): at least
# _FORWARD_MIN_SAMPLE_TILES blocks a plane, _FORWARD_MIN_TILES in the batch
# and _MIN_TILE_USE of the blocks' outputs inside the output. 4 blocks a
# plane (16x16 images): 64->64 at batch 64 0.69, 16->32 0.77, 128->128 at
# batch 16 0.88, 256->256 at batch 64 0.67; 16 a plane: 16->32 on 32x32 at
# batch 8 0.82, at batch 64 0.69; 49 (56x56): 64->64 at batch 2 (98
# blocks) 0.76, 16->32 at batch 8 0.68; 18x18 outputs (81% of 5x5 blocks)
# 0.81-0.91, 30x30 (88%) 0.76-0.80. Not: one block a plane (4x4 or 2x2
# outputs) 1.24-5.2; 64 blocks in the batch 1.02-1.06 (but 64->64 on 16x16
# at batch 16, 0.90); blocks cut to 77% and less 0.97-1.34 (14x14, 10x10,
# 6x6 outputs). 7x7 with stride 3 (3x3 phases) alike: 32->32 on 48x48 at
# batch 8 0.75; 16->32 on 32x32 at batch 16 (9 blocks a plane, 84%) 1.00.
# Since the filter transform gathers the weights' phases itself
# (winograd_kernels.filter_tiles, no copy of them first) and a channel's
# samples share its phase planes' zeros, fewer blocks pay where the
# channels are many: 48-95 blocks in the batch with
# _FORWARD_FEW_TILES_MIN_CHANNELS to _FORWARD_FEW_TILES_MAX_CHANNELS
# channels of x. 49 blocks (56x56, batch 1): 32->32 0.87, 64->64 0.79,
# 128->128 0.83; 48 (16x16, batch 12) 64->64 0.78. Fewer channels gain
# little or lose: 16->32 0.95, 24->24 0.88, 20->20 1.04, 16->16 1.17.
# 256->256 at 49 blocks took 0.91x in one process, but 1.08-1.20x over
# torch's time in three runs of paired builds (its 36 transformed filters
# and their gradient are 38 MB each). 32 blocks in the batch: 64->64
# 0.93-0.95, but 128->128 1.13, 256->256 1.19, 16->32 1.21 (16x16 at
# batch 8: the weight gradient's thin products).
_MIN_BLOCK = 4
_FORWARD_MIN_SAMPLE_TILES = 4
_FORWARD_MIN_TILES = 48
_FORWARD_FEW_TILES = 96
_FORWARD_FEW_TILES_MIN_CHANNELS = 32
_FORWARD_FEW_TILES_MAX_CHANNELS = 128
_MIN_TILE_USE = 0.8
# conv_transpose and conv's input gradient (the transposed plan), measured
# before the tiles were gathered from x (AVX-512, forward + both gradients,
# against im2col): at least 16 tiles a plane and 128 in the batch. 16->32
# on 32x32, batch 8 (16 tiles a plane, 128): 4.58 -> 3.07 ms; on 56x56,
# batch 8: 10.7 -> 8.2 ms; 64->64 on 56x56, batch 8: 61.2 -> 46.7 ms;
# conv_transpose 16->32 from 28x28, batch 8: 76.5 -> 57.7 ms. Below:
# conv_transpose 128->128 from 8x8, batch 64 (9 tiles of a 10x10 plane, a
# third of their outputs cut off): 1.14x im2col's time; 64->64 on 16x16,
# batch 64 (4 tiles a plane): 1.12x. Planes of fewer than
# _MANY_SAMPLE_TILES tiles pay only with _FEW_TILES_MIN_CHANNELS input
# channels (16->32 on 32x32, batch 8, 2.93 ms with the phases, 2.42 with
# im2col; 64->64 17.3 against 18.5 ms).
_MIN_SAMPLE_TILES = 16
_MANY_SAMPLE_TILES = 25
_FEW_TILES_MIN_CHANNELS = 64
_MIN_TILES = 128
# The transposed plan (conv's input gradient, conv_transpose) competes with
# im2col's product into the output's columns and col2im's adds; where that
# product is float32 on the AVX2 kernel (gemm_kernels.AVX2_TILE_ROWS),
# im2col is faster at every size measured. One thread, Zen 3, conv's input
# gradient, phases' time over im2col's (paired medians): 16->32 on 56x56
# at batch 8 1.40, on 32x32 1.76, at batch 64 on 16x16 1.92; 64->64 on
# 56x56 at batch 8 1.11, on 16x16 at batch 64 1.78; 128->128 on 32x32 and
# 56x56 at batch 8 1.00-1.02. (The AVX-512 measurements above keep it.)

_Plan = collections.namedtuple('_Plan', 's q r pad phase_size geom transform')


class Phases(_Plan):
    """The stride-1 equivalent of one strided convolution: stride ``s``,
    phase kernel ``q``, kernel ``r``, the convolution's padding ``pad``, the
    phases' size ``phase_size`` (output + q - 1 on each axis), the
    stride-1 Geometry ``geom`` and the Winograd ``transform`` that computes
    it (_winograd.Transform)."""

    def split_input(self, x, work):
        """x (N, C, h, w) -> its phases (N, C s^2, hq, wq) in ``work``."""
        n, c = x.shape[:2]
        s, (hq, wq) = self.s, self.phase_size
        xpad = workspace.zeros((n, c, s * hq, s * wq), work)
        rows, cols = self._inside(x.shape[2:])
        ph, pw = self.pad
        xpad[:, :, ph:ph + rows, pw:pw + cols] = x[:, :, :rows, :cols]
        phases = xpad.reshape(n, c, hq, s, wq, s).transpose(0, 1, 3, 5, 2, 4)
        return phases.reshape(n, c * s * s, hq, wq)  # (a copy: contiguous)

    def merge_input(self, gp, spatial):
        """The adjoint of split_input: the phases' gradient gp (N, C s^2,
        hq, wq) -> x's (N, C, *spatial)."""
        s, (hq, wq) = self.s, self.phase_size
        n, c = gp.shape[0], gp.shape[1] // (s * s)
        gpad = gp.reshape(n, c, s, s, hq, wq).transpose(0, 1, 4, 2, 5, 3)
        gpad = gpad.reshape(n, c, s * hq, s * wq)
        rows, cols = self._inside(spatial)
        ph, pw = self.pad
        if (rows, cols) == tuple(spatial):
            return numpy.ascontiguousarray(gpad[:, :, ph:ph + rows, pw:pw + cols])
        gx = workspace.zeros((n, c) + tuple(spatial), gp.dtype)  # rows no output reads
        gx[:, :, :rows, :cols] = gpad[:, :, ph:ph + rows, pw:pw + cols]
        return gx

    def split_weight(self, w, work):
        """w (O, C, r, r) -> w_q (O, C s^2, q, q) in ``work``."""
        o, c = w.shape[:2]
        s, q, r = self.s, self.q, self.r
        wpad = workspace.zeros((o, c, s * q, s * q), work)
        wpad[:, :, :r, :r] = w
        wq = wpad.reshape(o, c, q, s, q, s).transpose(0, 1, 3, 5, 2, 4)
        return wq.reshape(o, c * s * s, q, q)

    def merge_weight(self, gwq):
        """The adjoint of split_weight: w_q's gradient -> w's (O, C, r, r)."""
        s, q, r = self.s, self.q, self.r
        o, c = gwq.shape[0], gwq.shape[1] // (s * s)
        gw = gwq.reshape(o, c, s, s, q, q).transpose(0, 1, 4, 2, 5, 3)
        return numpy.ascontiguousarray(gw.reshape(o, c, s * q, s * q)[:, :, :r, :r])

    def weight_shape(self, wshape):
        return (wshape[0], wshape[1] * self.s * self.s, self.q, self.q)

    def _inside(self, spatial):
        """The rows and columns of x that lie in the padded phases (those
        past them no output reads)."""
        s, (hq, wq), (ph, pw) = self.s, self.phase_size, self.pad
        return (max(0, min(spatial[0], s * hq - ph)), max(0, min(spatial[1], s * wq - pw)))


def plan(xshape, wshape, geom, outsize, work, transposed=False, any_size=False):
    """The Phases of conv(x, w) (x of ``xshape`` (N, C, h, w), w of
    ``wshape`` (O, C, r, r), output ``outsize``) when its stride-1
    equivalent is a Winograd convolution, else None. ``transposed``: for
    its adjoint (conv_transpose), whose stride-1 equivalent is the flipped
    convolution of the output's gradient. ``any_size``: wherever the phases
    can compute it, whether or not they pay (a forced algorithm)."""
    if (len(xshape) != 4 or len(wshape) != 4 or len(geom.ksize) != 2 or geom.groups != 1
            or tuple(geom.dilate) != (1, 1)):
        return None
    r, s = geom.ksize[0], geom.stride[0]
    if geom.ksize[1] != r or geom.stride[1] != s or s < 2 or wshape[1] != xshape[1]:
        return None
    q = -(-r // s)
    if q not in _winograd.TRANSFORMS:
        return None
    if (transposed and not any_size and numpy.dtype(work) == numpy.float32
            and gemm_kernels.tile_rows() == gemm_kernels.AVX2_TILE_ROWS):
        return None
    size = (outsize[0] + q - 1, outsize[1] + q - 1)
    phase_geom = geom._replace(ksize=(q, q), stride=(1, 1), pad=(0, 0))
    n, c, o = xshape[0], xshape[1] * s * s, wshape[0]
    if transposed:  # the flipped convolution: gy (N, O, *outsize) -> (N, C s^2, *size)
        full = phase_geom._replace(pad=(q - 1, q - 1))
        t = _winograd.transform_for_shape((n, o) + tuple(outsize), (c, o, q, q), full, size,
                                          work, any_size=any_size)
    else:  # (the blocks counted below, by the phases' own rule)
        t = _winograd.transform_for_shape((n, c) + size, (o, c, q, q), phase_geom, outsize,
                                          work, count_tiles=False, any_size=any_size)
    if t is None or t.m < _MIN_BLOCK:
        return None
    if any_size:
        return Phases(s, q, r, tuple(geom.pad), size, phase_geom, t)
    # (the blocks counted over the forward convolution's output both ways)
    th, tw = t.tile_counts(outsize)
    if not transposed:
        blocks = n * th * tw
        used = outsize[0] * outsize[1] / (t.m * th * t.m * tw)
        few_pay = (_FORWARD_FEW_TILES_MIN_CHANNELS <= xshape[1]
                   <= _FORWARD_FEW_TILES_MAX_CHANNELS)
        if (th * tw < _FORWARD_MIN_SAMPLE_TILES or blocks < _FORWARD_MIN_TILES
                or used < _MIN_TILE_USE or (blocks < _FORWARD_FEW_TILES and not few_pay)):
            return None
    elif th * tw < _MIN_SAMPLE_TILES or n * th * tw < _MIN_TILES or (
            th * tw < _MANY_SAMPLE_TILES and xshape[1] < _FEW_TILES_MIN_CHANNELS):
        return None
    return Phases(s, q, r, tuple(geom.pad), size, phase_geom, t)
