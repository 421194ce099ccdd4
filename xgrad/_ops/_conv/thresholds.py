"""Where each convolution algorithm pays: one table of thresholds per CPU
path (``xgrad._backend.native_kernels.cpu_path()``, XGRAD_CPU_PATH).

The dispatcher (``dispatch.py``) and the planners it asks
(``_winograd``, ``_polyphase``, ``_tap_groups``) read their thresholds here
and nowhere else. Each field keeps one line of why; its value, the machine
it was measured on, the command that re-derives it and the result file are
in docs/conv_thresholds.md.
"""

import dataclasses

from xgrad._backend import native_kernels


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """The thresholds of one CPU path (a field per rule; see the module)."""

    # Winograd, per transform in order of preference: (channels each side,
    # tiles in the batch) from which its a^2 products are wide enough.
    winograd: tuple = (('F(4x4,3x3)', 16, 64), ('F(2x2,3x3)', 32, 64),
                       ('F(4x4,5x5)', 16, 32), ('F(2x2,5x5)', 16, 64))

    def winograd_limits(self, name):
        """(channels each side, tiles in the batch) of transform ``name``."""
        for entry in self.winograd:
            if entry[0] == name:
                return entry[1:]
        raise KeyError(name)

    # The input's phases (a strided conv as a stride-1 Winograd one over
    # them): only with a transform of 4x4 blocks (else too many products
    # with zeros)...
    input_phases_min_block: int = 4
    # ... in the forward, enough blocks a plane and in the batch,
    input_phases_min_plane_blocks: int = 4
    input_phases_min_blocks: int = 48
    # ... under this many blocks only with a mid number of channels of x
    # (their filter transform is shared by few samples),
    input_phases_few_blocks: int = 96
    input_phases_few_blocks_channels: tuple = (32, 128)
    # ... and blocks mostly inside the output (cut blocks waste products).
    input_phases_min_block_use: float = 0.8
    # The transposed direction (conv's input gradient, conv_transpose):
    # enough tiles a plane and in the batch, small planes only with many
    # channels, and not at all in float32 where im2col + col2im won.
    input_phases_transposed_min_plane_tiles: int = 16
    input_phases_transposed_many_plane_tiles: int = 25
    input_phases_transposed_few_tiles_min_channels: int = 64
    input_phases_transposed_min_tiles: int = 128
    input_phases_transposed_float32: bool = True

    # conv_transpose by the output's phases: phases of a mid size (side
    # range), positions enough in the batch, and x no wider than the output.
    output_phases_sides: tuple = (12, 20)
    output_phases_min_positions: int = 1024
    output_phases_max_channels: int = 128

    # Tap groups (GEMMs that skip the padding's taps). None: no GEMM kernel
    # of xgrad's own on this path, so no tap groups. Else its tile rows.
    tap_tile_rows: object = 8
    # What a partial tile costs, in whole tiles (it is computed whole).
    tap_partial_tile_cost: float = 1.0
    # Below this batch the groups of few positions take unions of taps.
    tap_min_batch: int = 8
    tap_min_channels: int = 16
    # Fewer windows an output channel: moving the weights costs more than
    # the skipped taps save; stricter on more threads (handoffs), where the
    # product must also be large.
    tap_min_windows_per_out_channel: int = 1
    tap_min_windows_per_out_channel_threaded: int = 4
    tap_min_products_threaded: int = 1 << 24
    # Taken where the groups do at most this fraction of im2col's products.
    tap_max_work_fraction: float = 0.9
    # Classes of equal taps instead of row-major runs where they save this
    # fraction more (their order costs a gather of y and gy).
    tap_class_gain: float = 0.02
    # None, or (fraction, min batch, channels, min batch under those
    # channels): plans above the fraction are declined under the batch.
    tap_marginal: object = None

    # xgrad's own float32 GEMM (gemm_kernels.sgemm) for im2col's products.
    own_gemm: bool = True
    # The forward product of this many output channels or more goes to the
    # BLAS (None: never).
    own_gemm_forward_max_rows: object = None
    # The weight gradient's product needs this many output channels (its
    # columns) for our kernel's 32-wide tiles.
    own_gemm_grad_weight_min_columns: int = 32

    # 1x1 convolutions (and their input gradients) as per-sample GEMMs of
    # (O, C) by (C, positions), each computed in tiles this many columns
    # wide (1: no padding to count, as on the BLAS), or as im2col's one GEMM
    # over the batch's positions plus the two transposing copies, each
    # element copied costing about as long as this many multiply-adds.
    gemm_tile_columns: int = 32
    pointwise_copy_cost: int = 64

    # Grouped convolutions run group by group (each a group-1 convolution)
    # where a group's shapes get a planned algorithm and it has this many
    # channels each side (fewer: the grouped im2col's products won).
    groups_min_channels: int = 16
    # On more than one thread a group's convolution must also give each
    # thread this many multiply-adds: a small group's plan does not split
    # (4 groups of 16 at 20x20, batch 8: 7.4M a group, 1.66 ms at two threads
    # as at one, the grouped im2col's 1.07).
    groups_min_products_per_thread: int = 1 << 23
    # Groups that each take Winograd run as one pass over all the channels
    # (a^2 g products of a group's rows) on more than one thread, and on one
    # below this many multiply-adds a group; above it, a group at a time
    # kept its tiles in cache. Forward and both gradients, one thread, a
    # group at a time -> one pass: 4 groups of 16 at 20x20, batch 8 (7.4M a
    # group) 1.55 -> 1.24 ms; 4 of 32 at 20x20, batch 4 (14.7M) 3.46 -> 1.51;
    # 4 of 16 at 28x28, batch 8 (14.4M) 2.73 -> 2.35; but 4 of 16 at 24x24,
    # batch 16 (21.2M) 3.65 -> 3.85, at 28x28 (28.9M) 4.65 -> 5.6. Two
    # threads, where groups are taken (8M+ a thread): 28.9M 3.7 -> 3.45,
    # 2 groups of 32 at 56x56, batch 8 (231M) 6.27 -> 5.75.
    groups_one_pass_max_products: int = 1 << 24


_AVX512 = Thresholds()
THRESHOLDS = {
    'avx512': _AVX512,
    # The 6x16 micro-kernel: a partial tile is a second pass, marginal tap
    # plans and the transposed phases lose to im2col, and OpenBLAS runs
    # the forward product of 64+ output channels faster.
    'avx2': dataclasses.replace(
        _AVX512, tap_tile_rows=6, tap_partial_tile_cost=2.0, tap_marginal=(0.8, 16, 64, 64),
        input_phases_transposed_float32=False, own_gemm_forward_max_rows=64,
        gemm_tile_columns=16),
    # No GEMM kernel of ours: no tap groups, every product on the BLAS.
    'sse2': dataclasses.replace(_AVX512, tap_tile_rows=None, own_gemm=False,
                                gemm_tile_columns=1),
}
THRESHOLDS['generic'] = THRESHOLDS['sse2']  # (a build without per-path kernels)


def for_path(path=None):
    """The thresholds of CPU path ``path`` (None: the one selected now)."""
    if path is None:
        path = native_kernels.cpu_path()
    try:
        return THRESHOLDS[path]
    except KeyError:
        raise ValueError('conv_algorithm: unknown CPU path {!r}; the paths are {}'.format(
            path, ', '.join(THRESHOLDS))) from None
