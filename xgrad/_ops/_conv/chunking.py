"""How the convolution kernels cut a batch into chunks of samples: so that
what a chunk writes (im2col's columns, a product's output columns,
Winograd's transformed tiles) is read back from cache, not memory, while
each chunk's GEMMs stay wide enough for the BLAS. The same on every CPU
path; the measurements are in docs/conv_thresholds.md."""

# A whole batch's columns (or transformed tiles, or tap-group columns) up to
# 16 MiB of float32 are one chunk, kept for the weight gradient.
WHOLE_BATCH_ELEMENTS = 1 << 22
# Larger batches: im2col's columns about 4 MiB a chunk, read from cache.
COLUMN_CHUNK_ELEMENTS = 1 << 20
# conv_transpose's columns (the GEMM's output, which col2im reads at once)
# 2 MiB a chunk, but GEMMs at least this many columns wide.
COL2IM_CHUNK_ELEMENTS = 1 << 19
COL2IM_MIN_COLUMNS = 256
# Winograd's transformed tiles 2 MiB a chunk, but at least this many tiles
# (thinner products re-read the (a^2, O, C) filters from memory).
WINOGRAD_CHUNK_ELEMENTS = 1 << 19
WINOGRAD_MIN_CHUNK_TILES = 128


def ranges(n, step):
    """(lo, hi) ranges of ``step`` samples covering a batch of ``n``."""
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def per_chunk(per_sample, elements, at_least=1):
    """Samples a chunk: about ``elements`` elements of ``per_sample`` each,
    at least ``at_least`` (and one)."""
    return max(1, elements // max(1, per_sample), at_least)


def im2col_ranges(n, per_sample):
    """im2col's batch ranges: the whole batch when its columns (``per_sample``
    elements a sample) fit WHOLE_BATCH_ELEMENTS, else chunks of about
    COLUMN_CHUNK_ELEMENTS."""
    if n * per_sample <= WHOLE_BATCH_ELEMENTS:
        return [(0, n)] if n else []
    return ranges(n, per_chunk(per_sample, COLUMN_CHUNK_ELEMENTS))


def col2im_ranges(n, per_sample, positions):
    """The ranges of conv_transpose's GEMM + col2im: columns of about
    COL2IM_CHUNK_ELEMENTS, GEMMs at least COL2IM_MIN_COLUMNS wide
    (``positions`` columns a sample)."""
    return ranges(n, per_chunk(per_sample, COL2IM_CHUNK_ELEMENTS,
                               -(-COL2IM_MIN_COLUMNS // max(1, positions))))


def winograd_ranges(n, tiles, per_tile):
    """Winograd's ranges over ``n`` samples of ``tiles`` tiles of
    ``per_tile`` elements: WINOGRAD_CHUNK_ELEMENTS a chunk, but at least
    WINOGRAD_MIN_CHUNK_TILES tiles."""
    return ranges(n, per_chunk(tiles * per_tile, WINOGRAD_CHUNK_ELEMENTS,
                               -(-WINOGRAD_MIN_CHUNK_TILES // tiles)))
