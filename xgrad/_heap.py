"""An opt-in, process-wide setting of glibc's heap: ``xgrad.keep_heap_top``.

``import xgrad`` sets nothing here. It used to call ``mallopt(M_TOP_PAD,
64 MiB)`` on import, chosen on one microbenchmark (the forward and backward
of a 1x1 convolution, batch 8, 64 channels, 16x16: 3.6 ms with 736 page
faults a step on the 2-core VM, 1.16 ms with none). But setting M_TOP_PAD
(or M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX) turns off glibc's
dynamic mmap threshold for the whole process (mallopt(3)): from then on an
allocation over 128 KiB, anyone's, that the heap's top cannot hold is a
fresh mmap, faulted in page by page and unmapped when freed. Chainer's NIN,
VGG and ResNet-50 training steps became 1.5-2.7x slower (22-73k page faults
a step), and so did the user's other NumPy code in the process
(tests/backend/cpu/test_heap.py's probe: 1,287 page faults a step with it, 0 without).

So it is the user's choice, made knowingly: ``xgrad.keep_heap_top(nbytes)``
in code, or ``XGRAD_HEAP_TOP_PAD=<bytes>`` in the environment of a process
(read once, by ``import xgrad``; unset, empty or 0: nothing is set). Other C
libraries (musl, macOS, Windows) are left alone.

Without it, where the page faults of that microbenchmark come from now: at
one thread, none (0.54 ms a step); with OpenBLAS on two threads, 560 a step
(1.0-1.5 ms against 0.34-0.8 with the pad), OpenBLAS 0.3.31's threaded GEMM
allocating and freeing about 0.5 MiB each call (``numpy.dot`` of 64x64 by
64x2048 float32: 98 faults a call on two threads, under 1 on one).
"""

import ctypes
import operator
import os
import sys
import warnings

_M_TOP_PAD = -2  # glibc's malloc.h
_LIMIT = 2 ** 31  # mallopt takes an int
_GROW_BLOCK = 64 << 10  # under glibc's 128 KiB mmap threshold

top_pad = 0  # the bytes this process set through xgrad (0: nothing was set)


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
    """The pad ``XGRAD_HEAP_TOP_PAD`` asks for (bytes); 0 (nothing to set)
    when it is unset or empty, and for a value that is not a byte count in
    [0, 2**31), which is warned about."""
    value = environ.get('XGRAD_HEAP_TOP_PAD')
    if value is None or value.strip() == '':
        return 0
    try:
        pad = int(value)
    except ValueError:
        pad = -1
    if not 0 <= pad < _LIMIT:
        warnings.warn('XGRAD_HEAP_TOP_PAD={!r} is not a byte count in [0, 2**31); the heap '
                      'is left as the C library sets it'.format(value), RuntimeWarning)
        return 0
    return pad


def _grow_heap_once(libc, nbytes):
    """Make glibc grow the heap now, so that it takes the pad at once.

    M_TOP_PAD only acts when the heap next grows; until then an allocation
    over the (now fixed) 128 KiB mmap threshold that the heap's top cannot
    hold is a fresh mmap. Set after ``import xgrad``, without this, the 1x1
    convolution step went from 1.0 to 10 ms (770 page faults a step, two
    threads). Small blocks (served by the heap) are allocated until the
    break moves, then freed: the top keeps ``nbytes``."""
    malloc, free, sbrk = libc.malloc, libc.free, libc.sbrk
    malloc.argtypes, malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
    free.argtypes, free.restype = (ctypes.c_void_p,), None
    sbrk.argtypes, sbrk.restype = (ctypes.c_ssize_t,), ctypes.c_void_p
    start = sbrk(0)
    held = []
    try:
        for _ in range((nbytes >> 16) + 16):  # (bounded: another thread's arena never moves it)
            block = malloc(_GROW_BLOCK)
            if not block:
                break
            held.append(block)
            if sbrk(0) != start:
                break
    finally:
        for block in held:
            free(block)


def _set_top_pad(nbytes):
    global top_pad
    libc = _glibc() if nbytes else None
    if libc is None:
        return 0
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(_M_TOP_PAD, nbytes) != 1:
        return 0
    _grow_heap_once(libc, nbytes)
    top_pad = nbytes
    return nbytes


def keep_heap_top(nbytes=64 << 20) -> int:
    """Keep ``nbytes`` of freed memory at the top of glibc's heap, for the
    whole process: ``mallopt(M_TOP_PAD, nbytes)``, then the heap grown once
    so that the pad is there at once. Opt-in; ``import xgrad`` never calls
    it. Call it once, early, from the main thread.

    What it saves: the page faults of a loop that frees and allocates the
    same large temporaries every step, when glibc would hand the freed top
    of its heap back to the system each time (four 2 MiB NumPy arrays made
    and freed each step: 2,016 page faults a step without it, none with it;
    a 1x1 convolution's forward and backward, batch 8, 64 channels, 16x16,
    two threads: 560 faults and 1.0-1.5 ms a step without it, none and
    0.34-0.8 ms with it; 2-core VM).

    What it costs: setting M_TOP_PAD turns off glibc's dynamic mmap
    threshold for the rest of the process, which nothing can turn back on.
    Every allocation over 128 KiB, by any library (NumPy, torch, Chainer),
    that the pad cannot hold (long-lived arrays use it up) is then a fresh
    ``mmap``, faulted in page by page and unmapped when freed: Chainer's NIN,
    VGG and ResNet-50 training steps became 1.5-2.7x slower with it (22-73k
    page faults a step). The pad also keeps up to ``nbytes`` resident that
    would have been returned. Measure your own workload with and without it.

    ``XGRAD_HEAP_TOP_PAD=<bytes>`` in the environment does the same when
    xgrad is imported. Returns the bytes set: 0 when nothing was set (not
    glibc, ``nbytes`` is 0, or mallopt refused). Raises ValueError unless
    ``0 <= nbytes < 2**31``.
    """
    try:
        count = operator.index(nbytes)
    except TypeError:
        count = -1
    if isinstance(nbytes, bool) or not 0 <= count < _LIMIT:
        raise ValueError('keep_heap_top takes a byte count in [0, 2**31), not {!r}'.format(
            nbytes))
    return _set_top_pad(count)


def configure():
    """Called once by ``import xgrad``: sets the pad only when
    ``XGRAD_HEAP_TOP_PAD`` asks for one (nothing by default)."""
    pad = requested_top_pad()
    if pad:
        _set_top_pad(pad)
