"""The convolution stack's shared parts: ``dispatch`` decides which
algorithm each of the three host kernels (conv, conv_transpose, the weight
gradient) and the GPU take, from ``thresholds``' table for the CPU path;
``geometry`` is where windows lie and the checks of shapes and parameters;
``chunking`` cuts batches into cache-sized chunks; ``reference`` holds
the loop references the checks compare with. The kernels are in
``xgrad/_ops/convolution.py`` and the planners it runs (``_winograd``,
``_polyphase``, ``_tap_groups``)."""
