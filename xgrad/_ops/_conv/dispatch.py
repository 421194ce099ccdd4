"""Which algorithm each convolution kernel takes, and why: the one place
that decides it (as PyTorch's ``select_conv_backend``).

Three kernels ask (``convolution.py``): conv, conv_transpose (also conv's
input gradient) and conv's weight gradient. On the host each rule reads its
thresholds from ``thresholds.for_path()`` (one table per CPU path); on a
GPU the choices are the entries of ``DEVICE_RULES``, tried in order. A
choice is a ``Choice``: the algorithm, a reason a user can print (the rule
that fired, with its numbers), and the plan the kernel runs. Each is worked
out once per key and kept (``choice``), since the rules cost about a
microsecond each and run on every call. ``xgrad.conv_algorithm`` asks the
same functions for given shapes.
"""

import collections
import contextlib
import contextvars
import dataclasses
import math
import os
import typing

import numpy

from xgrad._backend import depthwise_kernels, host_gemm, native_kernels
from xgrad._ops import _polyphase, _tap_groups, _winograd
from xgrad._ops._conv import thresholds
from xgrad._ops._conv.geometry import (
    as_2d, flipped, lift_1d, output_phase_taps, pointwise, prod as _prod)

# The algorithms of each kernel, as force_conv_algorithm and conv_algorithm
# name them.
KERNEL_ALGORITHMS = {
    'conv': ('depthwise', 'winograd', 'input_phases', 'taps', 'groups', 'pointwise', 'im2col',
             'cudnn'),
    'conv_transpose': ('depthwise', 'output_phases', 'input_phases', 'taps', 'groups',
                       'pointwise', 'flip', 'col2im', 'col2im_add', 'cudnn'),
    'grad_weight': ('depthwise', 'winograd', 'input_phases', 'taps', 'groups', 'pointwise',
                    'im2col', 'cudnn'),
}
ALGORITHMS = tuple(dict.fromkeys(a for names in KERNEL_ALGORITHMS.values() for a in names))
# Former names, still accepted by force_conv_algorithm.
ALIASES = {'phases': 'input_phases'}

Choice = collections.namedtuple('Choice', 'algorithm reason plan')
Choice.__doc__ = """A kernel's algorithm, the rule that chose it (a short
sentence), and what the kernel needs to run it (a Winograd transform, an
input-phases or tap-group plan, im2col's GEMM: whether it is xgrad's own,
the flipped geometry; else None)."""


def _sides(values):
    return 'x'.join(str(v) for v in values)


# ---------------------------------------------------------------------------
# Shape predicates shared by the rules

def output_phases_apply(xshape, geom, outsize, work):
    """Whether conv_transpose of host x of ``xshape`` can run by the output's
    phases: 2-D, one group, no dilation, float, and every phase's taps fit."""
    if (len(xshape) != 4 or geom.groups != 1 or tuple(geom.dilate) != (1, 1)
            or work not in (numpy.float32, numpy.float64)):
        return False
    return all(output_phase_taps(size, out, k, s, p) is not None for size, out, k, s, p in zip(
        xshape[2:], outsize, geom.ksize, geom.stride, geom.pad))


def _native_col2im(xshape, work):
    """Whether the native col2im adds back the columns (2-D, float)."""
    return len(xshape) == 4 and work in (numpy.float32, numpy.float64)


# ---------------------------------------------------------------------------
# The host's rules, each returning a Choice or None

def _depthwise_choice(channels, wshape, geom, work):
    """The depthwise stencils (depthwise_kernels) where each group has one
    channel of conv's input (``channels`` of them, 2 or more) feeding M =
    O / groups outputs: 2-D, float32/64. The rule of conv, conv_transpose
    (its input gradient: gy's channels are conv's outputs) and the weight
    gradient alike: im2col's products there have K = kh kw (9 for 3x3) and
    one group each, 4-25x slower than the stencils (docs/conv_thresholds.md)."""
    if (len(wshape) != 4 or geom.groups != channels or channels < 2 or wshape[1] != 1
            or work not in (numpy.float32, numpy.float64)
            or not depthwise_kernels.applies(tuple(wshape[2:]))):
        return None
    return Choice('depthwise', '{} groups of one input channel and {} output{} each ({}x{} '
                  'window): per-channel stencils, no columns'.format(
                      channels, wshape[0] // channels, 's' if wshape[0] > channels else '',
                      wshape[2], wshape[3]), None)


def _winograd_choice(xshape, wshape, geom, outsize, work, rules, any_size=False):
    if len(xshape) != 4:
        return None
    t = _winograd.transform_for_shape(xshape, wshape, geom, outsize, work, any_size=any_size,
                                      rules=rules)
    if t is None:
        return None
    th, tw = t.tile_counts(outsize)
    channels, tiles = rules.winograd_limits(t.name)
    return Choice('winograd', '{}x{} stride 1, {} channels each side ({}+) and {} tiles ({}+): '
                  'Winograd {} pays'.format(t.r, t.r, min(xshape[1], wshape[0]), channels,
                                            xshape[0] * th * tw, tiles, t.name), t)


def _input_phases_choice(xshape, wshape, geom, outsize, work, rules, transposed=False,
                         any_size=False):
    if any(s == 1 for s in geom.stride):
        return None
    if transposed:  # x is the output's gradient: the convolution's input is outsize
        xshape, outsize = (xshape[0], wshape[1]) + tuple(outsize), tuple(xshape[2:])
    plan = _polyphase.plan(xshape, wshape, geom, outsize, work, transposed=transposed,
                           any_size=any_size, rules=rules)
    if plan is None:
        return None
    th, tw = plan.transform.tile_counts(outsize)
    if any_size:
        counts = ''
    elif transposed:
        counts = ', {} tiles ({}+)'.format(xshape[0] * th * tw,
                                          rules.input_phases_transposed_min_tiles)
    else:
        counts = ', {} blocks ({}+), {:.0%} of them inside the output ({:.0%}+)'.format(
            xshape[0] * th * tw, rules.input_phases_min_blocks,
            outsize[0] * outsize[1] / (plan.transform.m ** 2 * th * tw),
            rules.input_phases_min_block_use)
    return Choice('input_phases', "{}x{} stride {}: a stride-1 {}x{} convolution over the "
                  "input's {} phases by Winograd {}{}".format(
                      plan.r, plan.r, plan.s, plan.q, plan.q, plan.s * plan.s,
                      plan.transform.name, counts), plan)


def _taps_choice(xshape, wshape, geom, outsize, work, rules, threads, any_size=False):
    plan = _tap_groups.plan(xshape, wshape, geom, outsize, work, any_size=any_size,
                            rules=rules, threads=threads)
    if plan is None:
        return None
    return Choice('taps', 'small images, batch {} (chunks of {}): tap groups do {:.0%} of '
                  "im2col's products ({:.0%} or less pays)".format(
                      xshape[0], plan.batch, plan.work_fraction, rules.tap_max_work_fraction),
                  plan)


def _planned(xshape, wshape, geom, outsize, work, rules, threads):
    """The planned algorithms conv and its weight gradient share, best
    first: Winograd, the input's phases, tap groups."""
    return (_winograd_choice(xshape, wshape, geom, outsize, work, rules)
            or _input_phases_choice(xshape, wshape, geom, outsize, work, rules)
            or _taps_choice(xshape, wshape, geom, outsize, work, rules, threads))


def _forced_planned(forced, xshape, wshape, geom, outsize, work, rules, threads):
    if forced == 'winograd':
        return _winograd_choice(xshape, wshape, geom, outsize, work, rules, any_size=True)
    if forced == 'input_phases':
        return _input_phases_choice(xshape, wshape, geom, outsize, work, rules, any_size=True)
    if forced == 'taps':
        return _taps_choice(xshape, wshape, geom, outsize, work, rules, threads, any_size=True)
    return None


_POINTWISE = Choice('pointwise', '1x1 window, stride 1, no padding: per-sample GEMMs, no '
                    'columns', None)


def _round_up(value, step):
    return -(-value // step) * step


def _pointwise_pays(xshape, channels_out, geom, outsize, rules):
    """Whether a 1x1 convolution's per-sample GEMMs (N products of
    ``positions`` columns, each computed in whole tiles of
    ``rules.gemm_tile_columns``) cost less than im2col's one GEMM over the
    batch's positions and its two transposing copies (``x`` in, the result
    out). On small maps the tiles are mostly padding: ResNet-50's 1x1
    convolutions on 2x2 maps at batch 16, (512, 2048) by (2048, 4) sixteen
    times, took 3.4 ms where im2col's one product took 0.7. ``xshape``: the
    input's (N, C, ..), ``channels_out``: the result's."""
    if not pointwise(geom, xshape[2:], outsize):
        return False
    n, c, o = xshape[0], xshape[1] // geom.groups, channels_out // geom.groups
    positions, tile = _prod(outsize), rules.gemm_tile_columns
    per_sample = o * c * n * _round_up(positions, tile)
    batched = (o * c * _round_up(n * positions, tile)
               + rules.pointwise_copy_cost * (c + o) * n * positions)
    return per_sample <= batched


def _unpadded(choice, xshape, outsize, rules):
    """``choice`` taken for a 1x1 convolution whose per-sample GEMMs did not
    pay (``_pointwise_pays``), its reason saying so."""
    return choice._replace(reason='1x1 window on {} positions a sample, per-sample GEMMs in '
                           '{}-column tiles cost more than one GEMM over the batch: {}'.format(
                               _prod(outsize), rules.gemm_tile_columns, choice.reason))


def _prefers_own_gemm(rules, geom):
    """Whether the thresholds measured xgrad's sgemm faster than the BLAS
    for im2col's and col2im's products on this path: one channel group
    (their products were measured so). The plan of those choices; host_gemm
    takes it as ``prefer_own`` (it still decides: with more than one thread
    every product runs on xgrad's sgemm)."""
    return rules.own_gemm and geom.groups == 1


_PREFERENCE = {True: "xgrad's sgemm preferred", False: "host_gemm's choice"}


def _im2col(wshape, geom, rules):
    """im2col's choice for conv; its plan: xgrad's sgemm is preferred for
    the product (not where the path measured the BLAS faster on wide
    forward products)."""
    limit = rules.own_gemm_forward_max_rows
    own = _prefers_own_gemm(rules, geom) and (limit is None or wshape[0] < limit)
    gemm = _PREFERENCE[own]
    if not own and _prefers_own_gemm(rules, geom):
        gemm += ' ({}+ output channels on this path)'.format(limit)
    return Choice('im2col', 'no planned algorithm pays: im2col + one GEMM ({})'.format(gemm),
                  own)


def _forced_choice(choice):
    return choice._replace(reason='forced (force_conv_algorithm): ' + choice.reason)


# ---------------------------------------------------------------------------
# Grouped convolutions (several channels a group) as one group-1
# convolution per group, where the group-1 rules plan one for its shapes

# The per-group choices that make the groups pay: the planned algorithms
# (im2col per group is the grouped im2col's stacked products, more slowly;
# pointwise already runs all groups in one batched product).
_PLANNED_PER_GROUP = ('winograd', 'input_phases', 'taps', 'output_phases')


GroupPlan = collections.namedtuple('GroupPlan', 'per one_pass')
GroupPlan.__doc__ = """The plan of a 'groups' convolution: the per-group
Choice, and whether the groups run as one Winograd pass over all the
channels (convolution._groups_by_winograd) rather than a convolution a
group (see _one_pass)."""


def group_geometry(geom):
    """The geometry of one group of a grouped convolution: groups 1."""
    return geom._replace(groups=1)


def _groups_choice(kernel, xshape, wshape, geom, outsize, work, rules, threads, forced,
                   depthwise):
    """'groups' for a grouped convolution (groups > 1, not depthwise, float)
    whose per-group shapes (x (N, C/g, ..), w (O/g, C/g, ..) for conv, its
    input gradient and weight gradient alike; ``outsize`` gy's shape for
    'grad_weight') the group-1 rules of ``kernel`` give a planned algorithm,
    with at least rules.groups_min_channels channels each side of a group;
 its plan the per-group Choice. ``forced`` 'groups': whatever the
    per-group choice is; another forced algorithm turns the rule off (so
    that forcing im2col measures the grouped im2col as before). Else None."""
    g = geom.groups
    if (g < 2 or forced not in (None, 'groups') or depthwise is not None
            or work not in (numpy.float32, numpy.float64) or xshape[1] % g or wshape[0] % g):
        return None
    one = group_geometry(geom)
    x1 = (xshape[0], xshape[1] // g) + tuple(xshape[2:])
    w1 = (wshape[0] // g,) + tuple(wshape[1:])
    if kernel == 'conv':
        per = host_conv(x1, w1, one, outsize, work, rules, threads)
        sides = (x1[1], w1[0])
    elif kernel == 'conv_transpose':
        per = host_conv_transpose(x1, w1, one, outsize, work, rules, threads)
        sides = (x1[1], w1[1])
    else:
        gy1 = (outsize[0], outsize[1] // g) + tuple(outsize[2:])
        per = host_grad_weight(x1, gy1, w1, one, work, rules, threads)
        sides = (x1[1], gy1[1])
    winograd = per.algorithm == 'winograd' or (
        per.algorithm == 'flip' and kernel == 'conv_transpose'
        and _flipped_winograd(x1, w1, one, outsize, work, rules))
    planned = winograd or per.algorithm in _PLANNED_PER_GROUP
    if forced != 'groups' and not (planned and min(sides) >= rules.groups_min_channels):
        return None
    # a group's multiply-adds: channels both sides, taps, and the positions
    # of the side the taps run over (conv_transpose's input, else the output)
    positions = xshape[2:] if kernel == 'conv_transpose' else outsize[2:] if (
        kernel == 'grad_weight') else outsize
    products = xshape[0] * sides[0] * sides[1] * math.prod(geom.ksize) * math.prod(positions)
    if (forced != 'groups' and threads > 1
            and products < threads * rules.groups_min_products_per_thread):
        return None
    one_pass = _one_pass(winograd, products, threads, rules)
    return Choice('groups', '{} groups of {}->{} channels ({}+ each side), one {} convolution '
                  'a group: {}{}'.format(
                      g, sides[0], sides[1], rules.groups_min_channels, per.algorithm,
                      per.reason, '; all the groups in one Winograd pass' if one_pass else ''),
                  GroupPlan(per, one_pass))


def _one_pass(winograd, products, threads, rules):
    """Whether groups that each take Winograd run as one pass over all the
    channels, a^2 g products of a group's rows: on more than one thread
    (the pass splits as a group-1 convolution does), and on one below
    rules.groups_one_pass_max_products multiply-adds a group (above, a
    group at a time keeps its tiles in cache)."""
    return winograd and (threads > 1 or products < rules.groups_one_pass_max_products)


def host_conv(xshape, wshape, geom, outsize, work, rules, threads, forced=None):
    """conv's algorithm on the host."""
    depthwise = _depthwise_choice(xshape[1], wshape, geom, work)
    if forced is not None:
        found = depthwise if forced == 'depthwise' else _forced_planned(
            forced, xshape, wshape, geom, outsize, work, rules, threads)
        if found is None and forced == 'im2col':
            found = _im2col(wshape, geom, rules)
        if found is None and forced == 'pointwise' and pointwise(geom, xshape[2:], outsize):
            found = _POINTWISE
        if found is None and forced == 'groups':
            found = _groups_choice('conv', xshape, wshape, geom, outsize, work, rules, threads,
                                   forced, depthwise)
        if found is not None:
            return _forced_choice(found)
    if depthwise is not None:
        return depthwise
    found = _planned(xshape, wshape, geom, outsize, work, rules, threads)
    if found is not None:
        return found
    found = _groups_choice('conv', xshape, wshape, geom, outsize, work, rules, threads, forced,
                           depthwise)
    if found is not None:
        return found
    if _pointwise_pays(xshape, wshape[0], geom, outsize, rules):
        return _POINTWISE
    if pointwise(geom, xshape[2:], outsize):
        return _unpadded(_im2col(wshape, geom, rules), xshape, outsize, rules)
    return _im2col(wshape, geom, rules)


def host_grad_weight(xshape, gyshape, wshape, geom, work, rules, threads, forced=None):
    """conv's weight gradient's algorithm on the host (x and gy of conv)."""
    outsize = tuple(gyshape[2:])
    own = _prefers_own_gemm(rules, geom) and (
        wshape[0] >= rules.own_gemm_grad_weight_min_columns)
    im2col = Choice('im2col', "no planned algorithm pays: im2col + one GEMM ({})".format(
        _PREFERENCE[own]), own)
    depthwise = _depthwise_choice(xshape[1], wshape, geom, work)
    if forced is not None:
        found = depthwise if forced == 'depthwise' else _forced_planned(
            forced, xshape, wshape, geom, outsize, work, rules, threads)
        if found is None and forced == 'im2col':
            found = im2col
        if found is None and forced == 'pointwise' and pointwise(geom, xshape[2:], outsize):
            found = _POINTWISE
        if found is None and forced == 'groups':
            found = _groups_choice('grad_weight', xshape, wshape, geom, tuple(gyshape), work,
                                   rules, threads, forced, depthwise)
        if found is not None:
            return _forced_choice(found)
    if depthwise is not None:
        return depthwise
    found = _planned(xshape, wshape, geom, outsize, work, rules, threads)
    if found is not None:
        return found
    found = _groups_choice('grad_weight', xshape, wshape, geom, tuple(gyshape), work, rules,
                           threads, forced, depthwise)
    if found is not None:
        return found
    og, cg = wshape[0] // geom.groups, xshape[1] // geom.groups
    if pointwise(geom, xshape[2:], outsize) and og * cg <= (og + cg) * _prod(outsize):
        return Choice('pointwise', '1x1 window, stride 1, no padding, and the (O, C) products '
                      'smaller than the batch copies: per-sample GEMMs', None)
    return im2col


def _output_phases_pay(xshape, wshape, geom, outsize, rules):
    """The thresholds of conv_transpose by the output's phases (its
    applicability is output_phases_apply's)."""
    if any(s < 2 or k < 2 * s + 1 for k, s in zip(geom.ksize, geom.stride)):
        return None
    sides = [o // s for o, s in zip(outsize, geom.stride)]  # the smallest phase's
    low, high = rules.output_phases_sides
    positions = xshape[0] * sides[0] * sides[1]
    if (low <= min(sides) and max(sides) <= high and positions >= rules.output_phases_min_positions
            and xshape[1] <= min(wshape[1], rules.output_phases_max_channels)):
        return Choice('output_phases', "{}x{} stride {}, phases of {} ({}-{} a side), {} "
                      "positions ({}+), x's {} channels at most the output's and {}: one "
                      "stride-1 convolution per phase of the output".format(
                          geom.ksize[0], geom.ksize[1], geom.stride[0], _sides(sides), low,
                          high, positions, rules.output_phases_min_positions, xshape[1],
                          rules.output_phases_max_channels), None)
    return None


def _flip(full, why):
    return Choice('flip', 'stride 1: the convolution of x with the kernel flipped ({})'.format(
        why), full)


def _col2im(rules, geom, why=''):
    """col2im's choice; its plan as im2col's (_prefers_own_gemm)."""
    own = _prefers_own_gemm(rules, geom)
    return Choice('col2im', 'one GEMM ({}) into the columns of the output, added back by the '
                  'native col2im in cached chunks{}'.format(_PREFERENCE[own], why), own)


_COL2IM_ADD = Choice('col2im_add', 'one GEMM into the columns of the output, added back '
                     'tap by tap (no native col2im for this shape or dtype)', None)


def _forced_transpose(forced, xshape, wshape, geom, outsize, work, rules, threads):
    if forced == 'depthwise':
        return _depthwise_choice(geom.groups, wshape, geom, work)
    if forced == 'output_phases':
        if output_phases_apply(xshape, geom, outsize, work):
            return Choice('output_phases', "one stride-1 convolution per phase of the output",
                          None)
    elif forced == 'input_phases':
        return _input_phases_choice(xshape, wshape, geom, outsize, work, rules, transposed=True,
                                    any_size=True)
    elif forced == 'taps':
        return _taps_choice((xshape[0], wshape[1] * geom.groups) + tuple(outsize), wshape,
                            geom, xshape[2:], work, rules, threads, any_size=True)
    elif forced == 'pointwise':
        if pointwise(geom, xshape[2:], outsize):
            return _POINTWISE
    elif forced in ('flip', 'winograd'):  # (Winograd computes the flipped convolution)
        full = flipped(geom)
        if full is not None and (forced == 'flip' or len(xshape) == 4 and (
                _winograd.transform_for_shape(xshape, (wshape[1] * geom.groups, xshape[1]
                                                       // geom.groups) + tuple(geom.ksize),
                                              full, outsize, work, any_size=True))):
            return _flip(full, 'forced')
    elif forced == 'col2im':
        if _native_col2im(xshape, work):
            return _col2im(rules, geom)
    elif forced == 'col2im_add':
        return _COL2IM_ADD
    elif forced == 'groups':
        return _groups_choice('conv_transpose', xshape, wshape, geom, outsize, work, rules,
                              threads, forced, _depthwise_choice(geom.groups, wshape, geom,
                                                                 work))
    return None


def _flipped_winograd(xshape, wshape, geom, outsize, work, rules):
    """Whether conv_transpose of x ``xshape`` by w ``wshape`` is, flipped,
    a Winograd convolution (stride 1, 2-D, the transform's thresholds)."""
    full = flipped(geom)
    c, o = xshape[1], wshape[1] * geom.groups
    return full is not None and len(xshape) == 4 and _winograd.transform_for_shape(
        xshape, (o, c // geom.groups) + tuple(geom.ksize), full, outsize, work,
        rules=rules) is not None


def host_conv_transpose(xshape, wshape, geom, outsize, work, rules, threads, forced=None):
    """conv_transpose's algorithm on the host (x (N, C, ..), w (C, O/g, ..))."""
    if forced is not None:
        found = _forced_transpose(forced, xshape, wshape, geom, outsize, work, rules, threads)
        if found is not None:
            return _forced_choice(found)
    # (conv's input gradient: x is gy of conv, whose input had groups channels)
    depthwise = _depthwise_choice(geom.groups, wshape, geom, work)
    if depthwise is not None:
        return depthwise
    found = _groups_choice('conv_transpose', xshape, wshape, geom, outsize, work, rules,
                           threads, forced, depthwise)
    if found is not None:
        return found
    if _pointwise_pays(xshape, wshape[1] * geom.groups, geom, outsize, rules):
        return _POINTWISE
    found = _transpose_unplanned(xshape, wshape, geom, outsize, work, rules, threads)
    if pointwise(geom, xshape[2:], outsize):
        return _unpadded(found, xshape, outsize, rules)
    return found


def _transpose_unplanned(xshape, wshape, geom, outsize, work, rules, threads):
    """conv_transpose's algorithm where neither depthwise, groups nor
    per-sample GEMMs (pointwise) run."""
    n, c, g = xshape[0], xshape[1], geom.groups
    o = wshape[1] * g
    spatial = tuple(xshape[2:])
    if output_phases_apply(xshape, geom, outsize, work):
        found = _output_phases_pay(xshape, wshape, geom, outsize, rules)
        if found is not None:
            return found
    found = _input_phases_choice(xshape, wshape, geom, outsize, work, rules, transposed=True)
    if found is not None:
        return found
    # The flipped convolution (im2col of x over the output, plus a flipped
    # copy of the weights) or a GEMM into the output's columns and col2im:
    # the one that moves fewer elements, and the flipped one whenever it is
    # a Winograd convolution.
    full = flipped(geom)
    winograd = _flipped_winograd(xshape, wshape, geom, outsize, work, rules)
    if not winograd:
        found = _taps_choice((n, o) + tuple(outsize), wshape, geom, spatial, work, rules,
                             threads)
        if found is not None:
            return found
    native = _native_col2im(xshape, work)
    spread_moves_fewer = len(xshape) == 4 and (
        n * o * _prod(spatial) < n * c * _prod(outsize) + o * (c // g))
    if full is not None:
        if winograd:
            return _flip(full, 'a Winograd convolution')
        if not spread_moves_fewer:
            return _flip(full, "its columns and weights are fewer elements than col2im's")
    if native:
        return _col2im(rules, geom, ' (no flipped convolution: stride {}, pad {})'.format(
            _sides(geom.stride), _sides(geom.pad)) if full is None else
            ": fewer elements than the flipped convolution's columns and weights")
    return _COL2IM_ADD


# ---------------------------------------------------------------------------
# The GPU's rules: entries (algorithm, rule, reason) tried in order, the
# first whose rule holds taken. A cuDNN entry goes first in each list, its
# rule the shapes and dtypes cuDNN takes.

def _always(xshape, wshape, geom, outsize, work):
    return True


def _cuda_pointwise(xshape, wshape, geom, outsize, work):
    return pointwise(geom, xshape[2:], outsize)


def _cuda_pointwise_grad_weight(xshape, wshape, geom, outsize, work):
    og, cg = wshape[0] // geom.groups, xshape[1] // geom.groups
    return pointwise(geom, xshape[2:], outsize) and og * cg <= (og + cg) * _prod(outsize)


def _cuda_flip(xshape, wshape, geom, outsize, work):
    return flipped(geom) is not None


def cudnn_reason(conv_x, w_shape, conv_y, geom, work):
    """Why cuDNN cannot run the convolution from ``conv_x`` (N, C, *spatial)
    by ``w_shape`` to the spatial size ``conv_y`` on the current device;
    None when it can. (conv_transpose and the input gradient are that
    convolution's backward data; the weight gradient its backward filter.)"""
    from xgrad._backend import cudnn
    if 'conv' in cudnn.failures:
        return 'cuDNN failed: ' + cudnn.failures['conv']
    why = cudnn.convolution_reason(conv_x, w_shape, work, geom.stride, geom.pad, geom.dilate,
                                   geom.groups)
    if why:
        return why
    sizes = tuple(cudnn.conv_out_size(d, k, s, p, dl) for d, k, s, p, dl in zip(
        conv_x[2:], geom.ksize, geom.stride, geom.pad, geom.dilate))
    if sizes != tuple(conv_y):
        return 'output {} is not the convolution\'s {} (cover_all)'.format(
            tuple(conv_y), sizes)
    return cudnn.device_reason()


def _cudnn_conv(xshape, wshape, geom, outsize, work):
    return cudnn_reason(xshape, wshape, outsize, geom, work) is None


def _cudnn_conv_transpose(xshape, wshape, geom, outsize, work):
    # the convolution whose backward data this is: from y (N, C_out, *outsize) to x
    conv_x = (xshape[0], wshape[1] * geom.groups) + tuple(outsize)
    conv_w = (wshape[0], wshape[1]) + tuple(wshape[2:])
    return cudnn_reason(conv_x, conv_w, xshape[2:], geom, work) is None


DEVICE_RULES = {
    'conv': (
        ('cudnn', _cudnn_conv, "cuDNN's convolution forward (its heuristics or, with "
                               'XGRAD_CUDNN_BENCHMARK, the fastest timed)'),
        ('pointwise', _cuda_pointwise, '1x1 window, stride 1, no padding: one batched matmul'),
        ('im2col', _always, 'strided windows + cuBLAS via CuPy'),
    ),
    'conv_transpose': (
        ('cudnn', _cudnn_conv_transpose, "cuDNN's convolution backward data"),
        ('pointwise', _cuda_pointwise, '1x1 window, stride 1, no padding: one batched matmul'),
        ('flip', _cuda_flip, 'stride 1: the convolution of x with the kernel flipped'),
        ('col2im_add', _always, 'cuBLAS into the columns of the output, added back tap by '
                                'tap'),
    ),
    'grad_weight': (
        ('cudnn', _cudnn_conv, "cuDNN's convolution backward filter"),
        ('pointwise', _cuda_pointwise_grad_weight, '1x1 window, stride 1, no padding: '
                                                   'per-sample matmuls'),
        ('im2col', _always, 'strided windows + cuBLAS via CuPy'),
    ),
}


def device_choice(kernel, xshape, wshape, geom, outsize, work, forced=None):
    """The GPU's algorithm for ``kernel``: the first entry of
    DEVICE_RULES[kernel] whose rule holds (a forced one first, where it
    holds)."""
    for algorithm, rule, reason in sorted(DEVICE_RULES[kernel], key=lambda e: e[0] != forced):
        if rule(xshape, wshape, geom, outsize, work):
            # (im2col's product is CuPy's, not xgrad's GEMM; flip's plan its geometry)
            plan = flipped(geom) if algorithm == 'flip' else (
                False if algorithm == 'im2col' else None)
            return Choice(algorithm, reason, plan)
    raise AssertionError('no rule for ' + kernel)  # (the last entry always holds)


# ---------------------------------------------------------------------------
# Each kernel's choice, kept by its key

# At most this many choices are kept, then all are dropped.
_MAX_CHOICES = 1024
_choices = {}


def clear_choices():
    """Forget the kept choices (after a rule's threshold changed)."""
    _choices.clear()


@contextlib.contextmanager
def thresholds_replaced(**changes):
    """Inside this block the CPU path selected now has its thresholds with
    ``changes`` (fields of thresholds.Thresholds): for benchmarks that
    re-derive a threshold by timing both sides of it."""
    path = native_kernels.cpu_path()
    before = thresholds.THRESHOLDS[path]
    thresholds.THRESHOLDS[path] = dataclasses.replace(before, **changes)
    clear_choices()
    try:
        yield thresholds.THRESHOLDS[path]
    finally:
        thresholds.THRESHOLDS[path] = before
        clear_choices()


def decide(kernel, host, xshape, wshape, geom, outsize, work, path=None, threads=None,
           forced=None):
    """The Choice of ``kernel`` ('conv', 'conv_transpose' or 'grad_weight';
    for 'grad_weight' ``outsize`` is gy's shape) for host (NumPy) or device
    data, on CPU path ``path`` with ``threads`` pool threads (None: this
    process's)."""
    if not host:
        outsize = tuple(outsize[2:]) if kernel == 'grad_weight' else outsize
        return device_choice(kernel, xshape, wshape, geom, outsize, work, forced)
    if len(xshape) == 3:  # (as the kernels run it: convolution._runs_as_2d)
        outsize = lift_1d(outsize) if kernel == 'grad_weight' else (1,) + tuple(outsize)
        found = decide(kernel, host, lift_1d(xshape), lift_1d(wshape), as_2d(geom), outsize,
                       work, path, threads, forced)
        return found._replace(reason=found.reason + ' (1-D: run as 2-D of height 1)')
    rules = thresholds.for_path(path)
    if threads is None:
        threads = native_kernels.max_threads()
    if kernel == 'conv':
        return host_conv(xshape, wshape, geom, outsize, work, rules, threads, forced)
    if kernel == 'conv_transpose':
        return host_conv_transpose(xshape, wshape, geom, outsize, work, rules, threads, forced)
    return host_grad_weight(xshape, outsize, wshape, geom, work, rules, threads, forced)


def choice(kernel, x, wshape, geom, outsize, work):
    """decide() for the array ``x`` a kernel got, worked out once per key:
    the kernel, whether x is a NumPy array, the shapes, the geometry, the
    compute dtype, the thread count, the CPU path and the forced algorithm."""
    forced = _forced.get()
    name = None if forced is None else forced.name
    host = type(x) is numpy.ndarray
    key = (kernel, host, x.shape, wshape, geom, outsize, work, native_kernels.max_threads(),
           native_kernels.cpu_path(), name)
    if not host:  # (XGRAD_CUDNN=0 set between calls turns cuDNN off: bench/gpu_training_steps.py)
        key += (os.environ.get('XGRAD_CUDNN'),)
    found = _choices.get(key)
    if found is None:
        if len(_choices) >= _MAX_CHOICES:
            _choices.clear()
        found = _choices[key] = decide(kernel, host, x.shape, wshape, geom, outsize, work,
                                       key[-2], key[-3], name)
    if forced is not None:
        forced.taken.append((kernel, found.algorithm))
    return found


# ---------------------------------------------------------------------------
# Forcing an algorithm (tests and benchmarks: xgrad.testing.force_conv_algorithm)

class ForcedAlgorithm:
    """One force_algorithm block: the algorithm asked for, and what each
    kernel call inside it took, as (kernel, algorithm) pairs in call order
    (kernel: 'conv', 'conv_transpose' or 'grad_weight')."""

    def __init__(self, name):
        self.name = name
        self.taken = []


_forced = contextvars.ContextVar('xgrad_forced_conv_algorithm', default=None)


@contextlib.contextmanager
def force_algorithm(name):
    """Inside this block, each convolution kernel (conv, conv_transpose, the
    weight gradient; also those that the gradients and the algorithms
    themselves call) that has the algorithm ``name`` and can compute its
    shape with it takes it, whether or not it pays there; the others choose
    as usual. Yields a ForcedAlgorithm whose ``taken`` lists what ran
    (``phases``, the former name of ``input_phases``, is taken as it)."""
    name = ALIASES.get(name, name)
    if name not in ALGORITHMS:
        raise ValueError('force_conv_algorithm: unknown algorithm {!r}; the algorithms are '
                         '{}'.format(name, ', '.join(ALGORITHMS)))
    forced = ForcedAlgorithm(name)
    token = _forced.set(forced)
    try:
        yield forced
    finally:
        _forced.reset(token)


# ---------------------------------------------------------------------------
# The public query: xgrad.conv_algorithm

KERNELS = ('forward', 'grad_input', 'grad_weight')
# The CPU paths on which xgrad's sgemm has a micro-kernel (gemm_kernels).
GEMM_KERNEL_PATHS = ('avx2', 'avx512')


class ConvAlgorithm:
    """xgrad.conv_algorithm's answer: the ``algorithm`` one kernel of a
    convolution takes, the ``reason`` (the rule that chose it, with its
    numbers), the ``kernel`` asked about ('forward', 'grad_input' or
    'grad_weight'), the ``cpu_path`` whose thresholds decided (None on a
    GPU), the ``device`` ('native' or 'cuda') and ``gemm``: which GEMM runs
    the algorithm's matrix products, and why (on the host
    xgrad/_backend/host_gemm.py decides, given the algorithm's preference)."""

    __slots__ = ('algorithm', 'reason', 'kernel', 'cpu_path', 'device', 'gemm')

    def __init__(self, algorithm, reason, kernel, cpu_path, device, gemm=None):
        self.algorithm = algorithm
        self.reason = reason
        self.kernel = kernel
        self.cpu_path = cpu_path
        self.device = device
        self.gemm = gemm

    def __repr__(self):
        return 'ConvAlgorithm({!r}, kernel={!r}, cpu_path={!r}, reason={!r})'.format(
            self.algorithm, self.kernel, self.cpu_path, self.reason)


def _on_host(device):
    """Whether ``device`` (a name such as 'native:0' or 'cuda:1', or an
    xgrad Device) computes on the host."""
    if getattr(device, 'backend', None) is not None:
        return device.backend.name == 'native'
    backend = str(device).split(':')[0]
    if backend not in ('native', 'cuda'):
        raise ValueError("conv_algorithm: device must be 'native[:N]' or 'cuda[:N]', not "
                         '{!r}'.format(device))
    return backend == 'native'


def conv_algorithm(x_shape, w_shape, stride=1, pad=0, dilate=1, groups=1, *, transposed=False,
                   outsize=None, cover_all=False, kernel='forward', dtype='float32',
                   device='native:0', cpu_path=None, threads=None) -> typing.Any:
    """Which algorithm xgrad runs for one kernel of a convolution, and why.

    ``x_shape``, ``w_shape`` and the parameters are those of ``conv(x, w,
    stride=stride, pad=pad, cover_all=cover_all, dilate=dilate,
    groups=groups)``, or with ``transposed`` of ``conv_transpose(x, w, ...,
    outsize=outsize)``. ``kernel``: 'forward', 'grad_input' (the gradient
    in x) or 'grad_weight'. ``dtype``: the operands'; ``device``:
    'native[:N]' or 'cuda[:N]' (or a Device); ``cpu_path`` (a name of
    xgrad._backend.native_kernels.cpu_paths(), e.g. 'avx2') and ``threads``
    default to this process's. Returns a ConvAlgorithm with
    ``.algorithm`` and ``.reason``. The same decision the kernels make
    (xgrad/_ops/_conv/dispatch.py; thresholds in docs/conv_thresholds.md).
    """
    from xgrad._ops._conv import geometry
    from xgrad._errors import DimensionError
    op = 'conv_transpose' if transposed else 'conv'
    x_shape, w_shape = tuple(int(d) for d in x_shape), tuple(int(d) for d in w_shape)
    if len(x_shape) != len(w_shape) or len(x_shape) < 2:
        raise DimensionError('conv_algorithm: x {} and w {} must have the same number of '
                             'dimensions, 2 or more'.format(x_shape, w_shape))
    if kernel not in KERNELS:
        raise ValueError('conv_algorithm: kernel must be one of {}, not {!r}'.format(
            ', '.join(KERNELS), kernel))
    dtype = numpy.dtype(dtype)
    work = numpy.result_type(numpy.float32, dtype)
    if transposed:
        geom, out = geometry.conv_transpose_shapes(x_shape, dtype, w_shape, None, stride, pad,
                                                   outsize, dilate, groups)
        y_shape = (x_shape[0], w_shape[1] * geom.groups) + out
        asked = {'forward': ('conv_transpose', x_shape, out),
                 'grad_input': ('conv', y_shape, x_shape[2:]),  # conv(gy, w)
                 'grad_weight': ('grad_weight', y_shape, x_shape)}[kernel]  # (gy as conv's x)
    else:
        geom, out = geometry.conv_shapes(x_shape, dtype, w_shape, None, stride, pad, dilate,
                                         groups, cover_all)
        y_shape = (x_shape[0], w_shape[0]) + out
        asked = {'forward': ('conv', x_shape, out),
                 'grad_input': ('conv_transpose', y_shape, x_shape[2:]),
                 'grad_weight': ('grad_weight', x_shape, y_shape)}[kernel]
    host = _on_host(device)
    if host and cpu_path is None:
        cpu_path = native_kernels.cpu_path()
    which, xs, outs = asked
    found = decide(which, host, xs, w_shape, geom, tuple(outs), work, cpu_path, threads)
    if host:
        prefer_own = found.algorithm in ('im2col', 'col2im') and found.plan is True
        gemm = host_gemm.decide(cpu_path, host_gemm.blas_core(), cpu_path in GEMM_KERNEL_PATHS,
                                native_kernels.max_threads() if threads is None else threads,
                                prefer_own).reason
    else:
        gemm = "cuBLAS (CuPy's matmul)"
    return ConvAlgorithm(found.algorithm, found.reason, kernel, cpu_path if host else None,
                         'native' if host else 'cuda', gemm)
