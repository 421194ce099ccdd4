"""Keeping freed memory at the top of the C heap for the next step.

A training step allocates and frees the same temporaries every time (the
columns of a convolution, GEMM outputs, gradients). glibc hands free memory
at the top of its heap back to the system, and the next step's allocation
faults it in again page by page, each page zeroed by the kernel. Measured
on the 2-core VM of bench/results (page faults are dear in a VM): the
forward and backward of a 1x1 convolution (batch 8, 64 channels, 16x16)
took 3.6 ms with 736 page faults per step, and 1.16 ms with none once
M_TOP_PAD kept 64 MiB at the top of the heap (``mallopt``). That is what
xgrad sets when it is imported; it applies to the whole process, torch and
NumPy code included, and costs at most that much resident memory that the
process would otherwise have returned.

``XGRAD_HEAP_TOP_PAD``: the bytes to keep (default 64 MiB; 0 leaves the C
library's own setting). Other C libraries (musl, macOS, Windows) are left
alone.
"""

import ctypes
import os
import sys
import warnings

DEFAULT_TOP_PAD = 64 << 20
_M_TOP_PAD = -2  # glibc's malloc.h

top_pad = 0  # the bytes set at import (0: nothing was set)


def _glibc():
    """The C library when it is glibc, else None."""
    if not sys.platform.startswith('linux'):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only
        return libc
    except (OSError, AttributeError):
        return None


def requested_top_pad(environ=os.environ):
    """The pad asked for by ``XGRAD_HEAP_TOP_PAD`` (bytes), the default when
    unset; a value that is not a non-negative integer is warned about and
    taken as 0 (nothing set)."""
    value = environ.get('XGRAD_HEAP_TOP_PAD')
    if value is None or value.strip() == '':
        return DEFAULT_TOP_PAD
    try:
        pad = int(value)
    except ValueError:
        pad = -1
    if not 0 <= pad < 2 ** 31:
        warnings.warn('XGRAD_HEAP_TOP_PAD={!r} is not a byte count in [0, 2**31); the heap '
                      'is left as the C library sets it'.format(value), RuntimeWarning)
        return 0
    return pad


def keep_heap_top(pad):
    """Set glibc's M_TOP_PAD to ``pad`` bytes; the bytes set (0 when not
    glibc, or ``pad`` is 0, or mallopt refused)."""
    libc = _glibc() if pad else None
    if libc is None:
        return 0
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return pad if mallopt(_M_TOP_PAD, pad) == 1 else 0


def configure():
    """Called once by ``import xgrad``."""
    global top_pad
    top_pad = keep_heap_top(requested_top_pad())
