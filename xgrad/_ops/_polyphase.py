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

from xgrad._backend import workspace
from xgrad._ops import _winograd
from xgrad._ops._conv import thresholds

# Where the phases pay: thresholds.Thresholds.input_phases_* (docs/conv_thresholds.md).

class InputPhases(collections.namedtuple('InputPhases', 's q r pad phase_size geom transform')):
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


def plan(xshape, wshape, geom, outsize, work, transposed=False, any_size=False, rules=None):
    """The InputPhases of conv(x, w) (x of ``xshape`` (N, C, h, w), w of
    ``wshape`` (O, C, r, r), output ``outsize``) when its stride-1
    equivalent is a Winograd convolution, else None. ``transposed``: for
    its adjoint (conv_transpose), whose stride-1 equivalent is the flipped
    convolution of the output's gradient. ``rules``: the
    thresholds.Thresholds it must meet (None: the CPU path's). ``any_size``:
    wherever the phases can compute it, whether or not they pay (a forced
    algorithm)."""
    if (len(xshape) != 4 or len(wshape) != 4 or len(geom.ksize) != 2 or geom.groups != 1
            or tuple(geom.dilate) != (1, 1)):
        return None
    r, s = geom.ksize[0], geom.stride[0]
    if geom.ksize[1] != r or geom.stride[1] != s or s < 2 or wshape[1] != xshape[1]:
        return None
    q = -(-r // s)
    if q not in _winograd.TRANSFORMS:
        return None
    rules = rules or thresholds.for_path()
    if (transposed and not any_size and numpy.dtype(work) == numpy.float32
            and not rules.input_phases_transposed_float32):
        return None
    size = (outsize[0] + q - 1, outsize[1] + q - 1)
    phase_geom = geom._replace(ksize=(q, q), stride=(1, 1), pad=(0, 0))
    n, c, o = xshape[0], xshape[1] * s * s, wshape[0]
    if transposed:  # the flipped convolution: gy (N, O, *outsize) -> (N, C s^2, *size)
        full = phase_geom._replace(pad=(q - 1, q - 1))
        t = _winograd.transform_for_shape((n, o) + tuple(outsize), (c, o, q, q), full, size,
                                          work, any_size=any_size, rules=rules)
    else:  # (the blocks counted below, by the phases' own rule)
        t = _winograd.transform_for_shape((n, c) + size, (o, c, q, q), phase_geom, outsize,
                                          work, count_tiles=False, any_size=any_size,
                                          rules=rules)
    if t is None or t.m < rules.input_phases_min_block:
        return None
    if any_size:
        return InputPhases(s, q, r, tuple(geom.pad), size, phase_geom, t)
    # (the blocks counted over the forward convolution's output both ways)
    th, tw = t.tile_counts(outsize)
    if not transposed:
        blocks = n * th * tw
        used = outsize[0] * outsize[1] / (t.m * th * t.m * tw)
        low, high = rules.input_phases_few_blocks_channels
        if (th * tw < rules.input_phases_min_plane_blocks
                or blocks < rules.input_phases_min_blocks
                or used < rules.input_phases_min_block_use
                or (blocks < rules.input_phases_few_blocks and not low <= xshape[1] <= high)):
            return None
    elif (th * tw < rules.input_phases_transposed_min_plane_tiles
          or n * th * tw < rules.input_phases_transposed_min_tiles
          or (th * tw < rules.input_phases_transposed_many_plane_tiles
              and xshape[1] < rules.input_phases_transposed_few_tiles_min_channels)):
        return None
    return InputPhases(s, q, r, tuple(geom.pad), size, phase_geom, t)
