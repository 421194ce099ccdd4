"""The kernels' large temporaries, over blocks kept from step to step.

Convolutions, Winograd and pooling ask here for their columns, tiles,
products and outputs (``empty``, ``zeros``). The blocks come from
xgrad/_backend/host_cache.pyx, which says why they are kept and bounds them;
NumPy's own allocations in the importing thread go through the same cache,
but these are served in any thread and always 64-byte aligned, for the
vector kernels. This module also holds the cache's public controls:

- ``set_workspace_limit(nbytes)`` (default ``DEFAULT_LIMIT``, or
  ``XGRAD_WORKSPACE_LIMIT`` bytes at import; 0 keeps nothing): a returned
  block that would take the free blocks past it is freed instead;
- ``release_workspace()`` frees every free block now;
- ``workspace_stats()``: what is kept and how requests were served;
- ``cache_numpy_memory(flag)``: whether NumPy's own allocations in the
  current thread go through the cache (``import xgrad`` turns it on in the
  importing thread; ``XGRAD_CACHE_NUMPY=0`` at import leaves it off).

Under memory pressure (the system's available memory below a tenth of its
total, read from /proc/meminfo when the free blocks grow past the level last
read at) a returned block is freed, not kept. Arrays in use are never
counted against the limit: they are the user's (an activation retained for
the backward pass) or a kernel's until it returns.
"""

import os

import numpy

from xgrad._backend import host_cache

__all__ = ['empty', 'zeros', 'set_workspace_limit', 'workspace_limit', 'release_workspace',
           'workspace_stats', 'cache_numpy_memory']

MIN_BYTES = host_cache.MIN_BYTES
DEFAULT_LIMIT = 1 << 30


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


host_cache.set_limit(_limit_from_environment())
if os.environ.get('XGRAD_CACHE_NUMPY', '').strip() != '0':
    host_cache.install()


class _Lease:
    """A block, as the base of the arrays over it. Every view of an array
    handed out holds this object (NumPy's chain of bases ends here), so it
    lives as long as some view does, and when the last one goes it gives
    the block back: a view that outlives the array it was taken from keeps
    the block."""

    __slots__ = ('address', '__array_interface__')

    def __init__(self, nbytes):
        self.address = host_cache.allocate(nbytes)
        self.__array_interface__ = {'shape': (nbytes,), 'typestr': '|u1', 'version': 3,
                                    'data': (self.address, False)}

    def __del__(self):
        try:
            host_cache.release(self.address)
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
    if nbytes < MIN_BYTES:
        return numpy.empty(shape, dtype)
    return numpy.asarray(_Lease(nbytes)).view(dtype).reshape(shape)


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
    return host_cache.set_limit(nbytes)


def workspace_limit():
    """The bytes of free blocks kept at most."""
    return host_cache.stats()['limit']


def release_workspace():
    """Free every block kept for the next step (arrays in use are not
    touched; their blocks are freed when they are)."""
    host_cache.clear()


def cache_numpy_memory(flag=True):
    """Whether NumPy allocates through the cache in the current context
    (thread): True (``import xgrad`` sets it in the importing thread unless
    ``XGRAD_CACHE_NUMPY=0``) keeps large freed arrays' blocks for the next
    array of their size; False restores NumPy's default handler. Returns the
    previous setting."""
    return host_cache.install(bool(flag))


def workspace_stats():
    """A dict: free_bytes (kept now), limit, hits and misses (requests of
    large blocks served from kept blocks or newly allocated, NumPy's and the
    kernels'), dropped (blocks freed on return: past the limit or under
    memory pressure)."""
    return host_cache.stats()
