"""The convolution stack's choice of algorithm, its thresholds and its
chunking: ``dispatch`` decides which algorithm each of the three host
kernels (conv, conv_transpose, the weight gradient) and the GPU take,
from ``thresholds``' table for the CPU path; ``chunking`` cuts batches.
The kernels themselves are in ``xgrad/_ops/convolution.py`` and the
planners it names (``_winograd``, ``_polyphase``, ``_tap_groups``)."""
