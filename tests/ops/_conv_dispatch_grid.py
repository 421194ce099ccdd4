"""The shapes over which the convolution dispatcher's choices are pinned
(test_conv_dispatch.py): each conv geometry gives three decisions, conv's,
its input gradient's (conv_transpose of gy) and its weight gradient's."""

import itertools

# (batch, in channels, out channels)
_CHANNELS = ((1, 16), (16, 16), (16, 32), (32, 16), (32, 32), (64, 64), (128, 128),
             (256, 256))
_BATCHES = (1, 8, 16, 64)
_SIDES = (4, 8, 16, 24, 32, 56)
_KERNELS = ((1, 1, 0), (1, 2, 0), (3, 1, 1), (3, 2, 1), (3, 1, 0), (5, 1, 2), (5, 2, 2),
            (5, 2, 0), (7, 3, 3), (7, 2, 3))  # (k, stride, pad)


def conv_cases():
    """(xshape, wshape, stride, pad, dilate, groups, dtype, host) of 2-D
    convolutions, plus a few 1-D, 3-D, dilated, grouped, float64 and
    device (non-NumPy) ones."""
    for (c, o), n, h, (k, s, p) in itertools.product(_CHANNELS, _BATCHES, _SIDES, _KERNELS):
        if h + 2 * p < k:
            continue
        yield (n, c, h, h), (o, c, k, k), s, p, 1, 1, 'float32', True
    for (c, o), n, h, (k, s, p) in itertools.product(
            ((16, 32), (64, 64)), (1, 8, 64), (8, 16, 32), _KERNELS):
        yield (n, c, h, h), (o, c, k, k), s, p, 1, 1, 'float64', True
        yield (n, c, h, h), (o, c, k, k), s, p, 1, 1, 'float32', False
    for (c, o), n, h in itertools.product(((16, 32), (64, 64)), (1, 8, 64), (8, 16, 32)):
        yield (n, c, h, h), (o, c, 3, 3), 1, 2, 2, 1, 'float32', True  # dilated
        yield (n, c, h, h), (o, c // 2, 3, 3), 1, 1, 1, 2, 'float32', True  # two groups
        yield (n, c, h, h + 4), (o, c, 3, 5), 1, (1, 2), 1, 1, 'float32', True  # 3x5
        yield (n, c, h), (o, c, 3), 1, 1, 1, 1, 'float32', True  # 1-D
        yield (n, c, 4, h, h), (o, c, 3, 3, 3), 1, 1, 1, 1, 'float32', True  # 3-D
        yield (n, c, h, h), (o, c, 1, 1), 2, 0, 1, 1, 'float32', True
