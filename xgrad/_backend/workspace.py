"""The host memory of the kernels' large arrays, reused from step to step.

A training step allocates and frees the same large arrays every time: a
convolution's columns, Winograd's tiles and products, its output, the
gradients. Each is over glibc's mmap threshold or lands at the top of its
heap, so when freed it goes back to the system, and the next step faults it
in again page by page, each page zeroed by the kernel (14k page faults a
step, 76 against 51 ms, for a 5-layer convolutional net at batch 16 on one
thread). Changing the C allocator for the whole process (``mallopt``, which
xgrad did at import until 0.2) turns glibc's dynamic mmap threshold off and
made other code, Chainer's own NumPy path included, 1.5-2.7x slower.

So xgrad keeps those blocks itself: ``empty`` and ``zeros`` hand out arrays
over cached blocks; when the last view of an array is gone its block comes
back here and serves the next request of the same size (a step asks for the
same sizes every time). Only xgrad's kernels allocate here, and only arrays
of at least ``MIN_BYTES``. The blocks kept free are bounded:

- ``set_workspace_limit(nbytes)`` (default ``DEFAULT_LIMIT``, or
  ``XGRAD_WORKSPACE_LIMIT`` bytes at import; 0 keeps nothing): a returned
  block that would take the free blocks past it is freed instead;
- ``release_workspace()`` frees every free block now;
- under memory pressure (the system's available memory below
  ``PRESSURE_FRACTION`` of its total, read from /proc/meminfo when the free
  blocks grow past the level last read at) a returned block is freed, not
  kept.

Arrays in use are never counted against the limit: they are the user's (an
activation retained for the backward pass) or a kernel's until it returns.
"""

import os
import threading

import numpy

__all__ = ['empty', 'zeros', 'set_workspace_limit', 'workspace_limit', 'release_workspace',
           'workspace_stats']

MIN_BYTES = 256 << 10           # glibc's smaller blocks stay in its heap anyway
DEFAULT_LIMIT = 1 << 30
PRESSURE_FRACTION = 0.1         # of the system's memory left available
_PAGE = 4096
_ALIGN = 64


def _limit_from_environment():
    value = os.environ.get('XGRAD_WORKSPACE_LIMIT', '').strip()
    if not value:
        return DEFAULT_LIMIT
    try:
        limit = int(value)
    except ValueError:
        limit = -1
    if limit < 0:
        raise ValueError('XGRAD_WORKSPACE_LIMIT={!r} is not a byte count >= 0'.format(value))
    return limit


class _Cache:
    """Free blocks by size, their total, and the counters of workspace_stats."""

    def __init__(self, limit):
        self.lock = threading.Lock()
        self.free = {}  # size in bytes: [_Block]
        self.free_bytes = 0
        self.checked = 0  # the free bytes last found to leave the system enough memory
        self.limit = limit
        self.hits = self.misses = self.dropped = 0

    def take(self, size):
        with self.lock:
            blocks = self.free.get(size)
            if blocks:
                self.hits += 1
                self.free_bytes -= size
                return blocks.pop()
            self.misses += 1
        return _Block(size)

    def give_back(self, block):
        size = block.size
        with self.lock:
            after = self.free_bytes + size
            keep = after <= self.limit
            if keep and after > self.checked:  # (growing: ask the system, once a level)
                keep = not _under_pressure(size)
                self.checked = after if keep else 0
            if keep:
                self.free.setdefault(size, []).append(block)
                self.free_bytes += size
            else:
                self.dropped += 1

    def clear(self):
        with self.lock:
            self.free.clear()
            self.free_bytes = self.checked = 0


def _under_pressure(growing_by):
    """Whether the system has less than PRESSURE_FRACTION of its memory
    available after ``growing_by`` more bytes are kept (Linux; elsewhere
    never)."""
    try:
        with open('/proc/meminfo', 'rb') as f:
            info = dict(line.split(b':', 1) for line in f.read().splitlines()[:3])
        total = int(info[b'MemTotal'].split()[0]) << 10
        available = int(info[b'MemAvailable'].split()[0]) << 10
    except (OSError, KeyError, ValueError):
        return False
    return available - growing_by < PRESSURE_FRACTION * total


_cache = _Cache(_limit_from_environment())


def _after_fork_in_child():
    """A child forked while another thread held the lock would wait on it
    forever: it gets a new lock (its kept blocks are its copies)."""
    _cache.lock = threading.Lock()


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Block:
    """``size`` bytes of memory, and the array interface of their 64-byte
    aligned part (worked out once: a lease over the block shows it)."""

    __slots__ = ('memory', 'size', 'interface')

    def __init__(self, size):
        self.memory = numpy.empty(size + _ALIGN, numpy.uint8)
        self.size = size
        start = self.memory.__array_interface__['data'][0]
        self.interface = {'shape': (size,), 'typestr': '|u1', 'version': 3,
                          'data': (start + -start % _ALIGN, False)}


class _Lease:
    """A block, as the base of the arrays over it. Every view of an array
    handed out holds this object (NumPy's chain of bases ends here, not at
    the block's memory, which owns its data), so it lives as long as some
    view does, and when the last one goes it gives the block back: a view
    that outlives the array it was taken from keeps the block."""

    __slots__ = ('block', '__array_interface__')

    def __init__(self, block):
        self.block = block
        self.__array_interface__ = block.interface

    def __del__(self):
        try:
            _cache.give_back(self.block)
        except (NameError, AttributeError, TypeError):  # (the interpreter shutting down)
            pass


def empty(shape, dtype):
    """numpy.empty(shape, dtype), over a cached block (64-byte aligned, for
    the vector kernels) when it is large."""
    dtype = numpy.dtype(dtype)
    if isinstance(shape, int):
        shape = (shape,)
    count = 1
    for n in shape:
        count *= n
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES or _cache.limit == 0:
        return numpy.empty(shape, dtype)
    flat = numpy.asarray(_Lease(_cache.take(-(-nbytes // _PAGE) * _PAGE)))
    return flat[:nbytes].view(dtype).reshape(shape)


def zeros(shape, dtype):
    """numpy.zeros(shape, dtype), over a cached block when it is large."""
    out = empty(shape, dtype)
    out.fill(0)
    return out


def set_workspace_limit(nbytes):
    """Keep at most ``nbytes`` of free blocks for the next step (0: none;
    the blocks past it are freed now). Returns the previous limit."""
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise ValueError('set_workspace_limit: nbytes must be an int >= 0, not {!r}'.format(
            nbytes))
    with _cache.lock:
        previous, _cache.limit = _cache.limit, nbytes
        for size in sorted(_cache.free, reverse=True):
            blocks = _cache.free[size]
            while blocks and _cache.free_bytes > nbytes:
                blocks.pop()
                _cache.free_bytes -= size
        _cache.free = {size: blocks for size, blocks in _cache.free.items() if blocks}
    return previous


def workspace_limit():
    """The bytes of free blocks kept at most."""
    return _cache.limit


def release_workspace():
    """Free every block kept for the next step (arrays in use are not
    touched; their blocks are freed when they are)."""
    _cache.clear()


def workspace_stats():
    """A dict: free_bytes (kept now), limit, hits and misses (requests served
    from kept blocks or newly allocated), dropped (blocks freed on return:
    past the limit or under memory pressure)."""
    with _cache.lock:
        return {'free_bytes': _cache.free_bytes, 'limit': _cache.limit, 'hits': _cache.hits,
                'misses': _cache.misses, 'dropped': _cache.dropped}
